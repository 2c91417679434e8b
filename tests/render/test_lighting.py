"""Ambient and directional lighting baked into textures (docs/math/render.md §1.2)."""

from __future__ import annotations

import pytest
import torch
from relaxops.render import shapes
from relaxops.render.lighting import (
    AmbientLighting,
    DirectionalLighting,
    Lighting,
    ambient_lighting,
    directional_lighting,
)
from relaxops.render.mesh import Mesh, face_normals, vertex_normals


def test_ambient_lighting_adds_intensity_times_colour():
    light = torch.rand(2, 5, 3)
    out = ambient_lighting(light, 0.3, (1.0, 0.5, 0.0))
    torch.testing.assert_close(out, light + 0.3 * torch.tensor([1.0, 0.5, 0.0]))
    colours = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(ambient_lighting(light, 1.0, colours), light + colours[:, None, :])
    torch.testing.assert_close(AmbientLighting(0.3, (1.0, 0.5, 0.0))(light), out)
    with pytest.raises(ValueError, match="color"):
        ambient_lighting(light, 0.5, (1.0, 1.0))
    with pytest.raises(ValueError, match="light"):
        ambient_lighting(torch.rand(5, 3))


def test_directional_lighting_uses_the_unnormalised_direction_and_clamps():
    normals = torch.nn.functional.normalize(torch.randn(1, 50, 3), dim=-1)
    light = torch.zeros(1, 50, 3)
    out = directional_lighting(light, normals, 0.5, (1.0, 1.0, 1.0), (0.0, 2.0, 0.0))
    expected = 0.5 * (2 * normals[..., 1]).clamp(min=0)
    torch.testing.assert_close(out, expected[..., None].expand(-1, -1, 3))
    torch.testing.assert_close(DirectionalLighting(0.5, (1, 1, 1), (0, 2, 0))(light, normals), out)
    with pytest.raises(ValueError, match="direction"):
        directional_lighting(light, normals, direction=torch.ones(2, 2))
    with pytest.raises(ValueError, match="normals"):
        directional_lighting(light, normals[0])


def test_lighting_of_a_surface_cube():
    vertices, faces = shapes.cube()
    textures = torch.rand(1, 12, 4, 3)
    lit = Lighting()(Mesh(vertices, faces, textures))
    assert lit.textures.shape == (1, 12, 4, 3) and lit.texture_res == 2
    normals = face_normals(vertices[None], faces[None])
    # top faces (+y) are lit 0.5 + 0.5, every other side only by the ambient light
    factor = torch.where(normals[..., 1] > 0.5, 1.0, 0.5)
    torch.testing.assert_close(lit.textures, textures * factor[..., None, None])
    assert torch.equal(lit.vertices, vertices[None]) and torch.equal(lit.faces, faces[None])


def test_lighting_of_vertex_colours_uses_vertex_normals():
    vertices, faces = shapes.icosphere(1)
    colours = torch.rand(1, len(vertices), 3)
    lighting = Lighting(0.2, (1.0, 0.9, 0.8), 0.7, (0.5, 1.0, 1.0), (0.0, 0.0, -1.0))
    lit = lighting(Mesh(vertices, faces, colours, texture_type="vertex"))
    n = vertex_normals(vertices[None], faces[None])
    light = 0.2 * torch.tensor([1.0, 0.9, 0.8]) + 0.7 * torch.tensor([0.5, 1.0, 1.0]) * (-n[..., 2:]).clamp(min=0)
    torch.testing.assert_close(lit.textures, colours * light)
    assert lit.texture_type == "vertex"


def test_lighting_is_differentiable():
    vertices = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [0.2, 0.3, 1.0]], dtype=torch.float64)
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    lighting = Lighting(directions=(0.3, 1.0, 0.2))

    def surface(v, t):
        return lighting(Mesh(v, faces, t)).textures

    def vertex(v, t):
        return lighting(Mesh(v, faces, t, texture_type="vertex")).textures

    v = vertices.clone().requires_grad_()
    assert torch.autograd.gradcheck(surface, (v, torch.rand(4, 4, 3, dtype=torch.float64, requires_grad=True)))
    assert torch.autograd.gradcheck(vertex, (v, torch.rand(4, 3, dtype=torch.float64, requires_grad=True)))
    intensity = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    out = directional_lighting(
        torch.zeros(1, 1, 3, dtype=torch.float64), torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64), intensity
    )
    out.sum().backward()
    assert intensity.grad == 3


def test_lighting_rejects_a_non_mesh():
    with pytest.raises(TypeError, match="mesh"):
        Lighting()(torch.zeros(1, 3, 3))
