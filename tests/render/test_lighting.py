"""Ambient, directional and specular lighting baked into textures (docs/math/render.md §1.2)."""

from __future__ import annotations

import math

import pytest
import torch
from relaxops.render import shapes
from relaxops.render.lighting import (
    AmbientLighting,
    DirectionalLighting,
    Lighting,
    SpecularLighting,
    ambient_lighting,
    directional_lighting,
    specular_lighting,
)
from relaxops.render.mesh import Mesh, face_normals, face_vertices, vertex_normals


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


# One face in the plane z = 0 with normal +z (docs/math/render.md §1.1: (v1 - v0) x (v2 - v0)), centroid (1/3, 1/3, 0)
TRIANGLE = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
CENTROID = torch.tensor([1 / 3, 1 / 3, 0.0], dtype=torch.float64)
ONE_FACE = torch.tensor([[0, 1, 2]])


def test_specular_highlight_of_one_face_by_hand():
    """Light from (0, 1, 1) (unnormalised: <n, dir> = 1 for the diffuse term; l = (0, 1, 1) / sqrt 2 for the highlight),
    r = 2 <n, l> n - l = (0, -1, 1) / sqrt 2; an eye straight above the centroid sees <r, v> = 1 / sqrt 2, and
    shininess 2 gives 1/2: textures * (0.2 + 0.6) + 0.8 * 0.5 * c_s."""
    textures = torch.rand(1, 1, 4, 3, dtype=torch.float64)
    lighting = Lighting(0.2, (1, 1, 1), 0.6, (1, 1, 1), (0, 1, 1), 0.8, (1.0, 0.5, 0.25), 2)
    lit = lighting(Mesh(TRIANGLE, ONE_FACE, textures), eye=CENTROID + torch.tensor([0, 0, 3.0], dtype=torch.float64))
    spec = torch.tensor([0.4, 0.2, 0.1], dtype=torch.float64)
    torch.testing.assert_close(lit.textures, textures * 0.8 + spec, rtol=0, atol=1e-15)
    # the eye on the mirrored ray r sees the full highlight, whatever the shininess
    eye = CENTROID + 5 * torch.tensor([0.0, -1.0, 1.0], dtype=torch.float64)
    for shininess in (1e-9, 2, 1e4):
        lighting = Lighting(0.2, (1, 1, 1), 0.6, (1, 1, 1), (0, 1, 1), 0.8, (1.0, 0.5, 0.25), shininess, eye=eye)
        lit = lighting(Mesh(TRIANGLE, ONE_FACE, textures))
        torch.testing.assert_close(lit.textures, textures * 0.8 + 2 * spec, rtol=0, atol=1e-11)


def test_specular_highlight_per_vertex_by_hand():
    """Vertex textures: each vertex has the face's normal +z and its own view vector to the eye (0, 0, 3):
    <r, v> = 3 / sqrt 18, 3 / sqrt 20, 4 / sqrt 20 at (0, 0, 0), (1, 0, 0), (0, 1, 0), squared 0.5, 0.45, 0.8."""
    colours = torch.rand(1, 3, 3, dtype=torch.float64)
    lighting = Lighting(0.5, (1, 1, 1), 0.0, (1, 1, 1), (0, 1, 1), 1.0, (1, 1, 1), 2)
    lit = lighting(Mesh(TRIANGLE, ONE_FACE, colours, texture_type="vertex"), eye=(0, 0, 3))
    power = torch.tensor([0.5, 0.45, 0.8], dtype=torch.float64)
    torch.testing.assert_close(lit.textures, colours * 0.5 + power[None, :, None], rtol=0, atol=1e-15)


def test_no_highlight_where_the_light_is_behind_or_the_reflection_points_away():
    textures = torch.rand(1, 1, 1, 3, dtype=torch.float64)
    mesh = Mesh(TRIANGLE, ONE_FACE, textures)
    # light from below: r = (0, 0, -1) points at an eye below the face, <r, v> = 1, but <n, l> < 0
    below = CENTROID - torch.tensor([0, 0, 3.0], dtype=torch.float64)
    lit = Lighting(0.3, (1, 1, 1), 0.5, (1, 1, 1), (0, 0, -1), 1.0, shininess=1)(mesh, eye=below)
    torch.testing.assert_close(lit.textures, textures * 0.3, rtol=0, atol=0)
    # light from (0, 1, 1) seen from below: <r, v> = -1 / sqrt 2 < 0
    lit = Lighting(0.3, (1, 1, 1), 0.5, (1, 1, 1), (0, 1, 1), 1.0, shininess=1)(mesh, eye=below)
    torch.testing.assert_close(lit.textures, textures * 0.8, rtol=0, atol=1e-15)
    # a zero direction gives no highlight (and no diffuse light)
    lit = Lighting(0.3, (1, 1, 1), 0.5, (1, 1, 1), (0, 0, 0), 1.0, shininess=1)(mesh, eye=below)
    torch.testing.assert_close(lit.textures, textures * 0.3, rtol=0, atol=0)


def test_shininess_limits():
    """shininess -> 0: the highlight is I_s c_s wherever <n, l> > 0 and <r, v> > 0; shininess -> inf: 0 but on the
    mirrored ray. Checked on the faces of an icosphere seen from one eye."""
    vertices, faces = shapes.icosphere(1)
    vertices = vertices.double()
    normals = face_normals(vertices[None], faces[None])
    centroids = face_vertices(vertices[None], faces[None]).mean(2)
    zero = torch.zeros_like(normals)
    eye, direction = torch.tensor([0.3, 2.0, -1.5], dtype=torch.float64), torch.tensor([0.2, 1.0, -0.4])
    low = specular_lighting(zero, normals, centroids, eye, 1.0, (1, 1, 1), direction, 1e-12)
    high = specular_lighting(zero, normals, centroids, eye, 1.0, (1, 1, 1), direction, 1e6)
    mid = specular_lighting(zero, normals, centroids, eye, 1.0, (1, 1, 1), direction, 4)
    lit = mid[..., 0] > 0
    assert 0 < int(lit.sum()) < len(faces)
    torch.testing.assert_close(low[..., 0], lit.double(), rtol=0, atol=1e-10)
    assert high.abs().max() < 1e-30 and (mid <= 1).all()


def test_specular_functional_module_and_batched_eyes():
    vertices, faces = shapes.icosphere(1)
    normals = vertex_normals(vertices[None], faces[None])
    light = torch.rand(1, len(vertices), 3)
    eyes = torch.tensor([[0.0, 0.0, -3.0], [2.0, 1.0, 0.5]])
    out = specular_lighting(light, normals, vertices[None], eyes, 0.7, (1.0, 0.8, 0.6), (0.1, 1.0, -0.5), 8)
    assert out.shape == (2, len(vertices), 3)
    for b in range(2):
        one = specular_lighting(light, normals, vertices[None], eyes[b], 0.7, (1.0, 0.8, 0.6), (0.1, 1.0, -0.5), 8)
        torch.testing.assert_close(out[b : b + 1], one, rtol=0, atol=0)
    module = SpecularLighting(0.7, (1.0, 0.8, 0.6), (0.1, 1.0, -0.5), 8)
    torch.testing.assert_close(module(light, normals, vertices[None], eyes), out, rtol=0, atol=0)
    # Lighting with [B, 3] eyes lights a batch-1 mesh once per eye
    colours = torch.rand(1, len(vertices), 3)
    lighting = Lighting(
        intensity_specular=0.7, color_specular=(1.0, 0.8, 0.6), directions=(0.1, 1.0, -0.5), shininess=8
    )
    lit = lighting(Mesh(vertices, faces, colours, texture_type="vertex"), eye=eyes)
    assert lit.textures.shape == (2, len(vertices), 3) and lit.batch_size == 2
    diffuse = Lighting(directions=(0.1, 1.0, -0.5))(Mesh(vertices, faces, colours, texture_type="vertex")).textures
    torch.testing.assert_close(lit.textures, diffuse + out - light, rtol=0, atol=1e-6)


def test_default_and_zero_specular_leave_the_textures_unchanged():
    vertices, faces = shapes.cube()
    textures = torch.rand(1, 12, 4, 3)
    mesh = Mesh(vertices, faces, textures)
    old = Lighting()(mesh).textures
    assert torch.equal(Lighting(eye=(0, 0, -3))(mesh).textures, old)
    assert torch.equal(Lighting(intensity_specular=0.0, shininess=5)(mesh).textures, old)  # no eye needed
    # a tensor intensity is always evaluated (it may be learnt), so it needs the eye; at 0 it adds exact zeros
    lighting = Lighting(intensity_specular=torch.tensor(0.0))
    with pytest.raises(ValueError, match="eye"):
        lighting(mesh)
    assert torch.equal(lighting(mesh, eye=(0, 0, -3)).textures, old)


def test_specular_gradients():
    vertices = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [0.2, 0.3, 1.0]], dtype=torch.float64)
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    # two eyes (a batch of 2 images of the one mesh), near the mirrored light rays of face 2 and of vertex 2
    eye = torch.tensor([[3.0, 1.0, 1.5], [-1.4, 2.0, -2.0]], dtype=torch.float64, requires_grad=True)
    shininess = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)

    def run(texture_type):
        def f(v, t, e, s):
            lighting = Lighting(0.3, (1, 1, 1), 0.5, (1, 1, 1), (0.3, 1.0, 0.6), 0.8, (1.0, 0.7, 0.5), s)
            return lighting(Mesh(v, faces, t, texture_type=texture_type), eye=e).textures

        return f

    v = vertices.clone().requires_grad_()
    surface_t = torch.rand(4, 4, 3, dtype=torch.float64, requires_grad=True)
    vertex_t = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    # the scene has lit faces / vertices with a highlight (else the check would be vacuous)
    for texture_type, t in (("surface", surface_t), ("vertex", vertex_t)):
        lit = run(texture_type)(v, t, eye, shininess)
        unlit = Lighting(0.3, (1, 1, 1), 0.5, (1, 1, 1), (0.3, 1.0, 0.6))(Mesh(v, faces, t, texture_type=texture_type))
        assert lit.shape[0] == 2 and ((lit - unlit.textures).abs() > 1e-2).any()
        assert torch.autograd.gradcheck(run(texture_type), (v, t, eye, shininess))
    # shininess below 1 keeps finite gradients at the edges of the highlight: <n, l> = 0 (light (0, 1, 0) grazing the
    # face: zero gradient) and <r, v> = 0 (eye along (0, 1, 1) from the centroid, r = (0, -1, 1) / sqrt 2), where
    # the power's derivative s x^(s-1) is infinite
    t = torch.rand(1, 1, 3, dtype=torch.float64)
    for direction, offset in (((0, 1, 0), (0.0, 0.0, 3.0)), ((0, 1, 1), (0.0, 3.0, 3.0))):
        e = (CENTROID + torch.tensor(offset, dtype=torch.float64)).requires_grad_()
        lighting = Lighting(intensity_specular=1.0, directions=direction, shininess=0.5)
        out = lighting(Mesh(TRIANGLE, ONE_FACE, t), eye=e)
        (grad,) = torch.autograd.grad(out.textures.sum(), e)
        assert torch.isfinite(grad).all()
        assert grad.abs().max() == 0 or direction == (0, 1, 1)


def test_specular_errors():
    normals = torch.tensor([[[0.0, 0.0, 1.0]]])
    light = torch.zeros(1, 1, 3)
    positions = torch.zeros(1, 1, 3)
    for kwargs, arg in (
        (dict(eye=None), "eye"),
        (dict(eye=(1.0, 2.0)), "eye"),
        (dict(eye=torch.zeros(3, 3), normals=normals.expand(2, 1, 3)), "eye"),
        (dict(shininess=0), "shininess"),
        (dict(shininess=-2.0), "shininess"),
        (dict(shininess=math.nan), "shininess"),
        (dict(shininess=torch.tensor([1.0, -1.0])), "shininess"),
        (dict(positions=torch.zeros(1, 2, 3)), "positions"),
        (dict(positions=torch.zeros(1, 3)), "positions"),
        (dict(direction=(1.0, 0.0)), "direction"),
    ):
        args = dict(light=light, normals=normals, positions=positions, eye=(0, 0, 2)) | kwargs
        with pytest.raises(ValueError, match=arg):
            specular_lighting(**args)
    vertices, faces = shapes.cube()
    with pytest.raises(ValueError, match="eye"):
        Lighting(intensity_specular=0.5)(Mesh(vertices, faces))
    with pytest.raises(TypeError, match="eye"):
        Lighting(intensity_specular=0.5)(Mesh(vertices, faces), eye="above")


def test_highlight_through_the_renderer_changes_rgb_only():
    """The pipeline ``renderer(camera(lighting(mesh, eye=camera.eyes)))``: the highlight brightens the RGB of the
    faces turned to the camera, the silhouette is unchanged, and the image has a gradient w.r.t. the eye."""
    from relaxops.render import LookAt, Renderer

    vertices, faces = shapes.icosphere(1)
    mesh = Mesh(vertices.double() * 0.6, faces, torch.full((1, len(faces), 1, 3), 0.5, dtype=torch.float64))
    camera = LookAt(eye=torch.tensor([0.4, 0.9, -2.7], dtype=torch.float64, requires_grad=True))
    renderer = Renderer(image_size=16, dist_scale=0.01, double_side=True, backend="reference")
    plain = renderer(camera(Lighting(directions=(0.3, 1.0, -1.0))(mesh)))
    lighting = Lighting(directions=(0.3, 1.0, -1.0), intensity_specular=0.8, shininess=8)
    shiny = renderer(camera(lighting(mesh, eye=camera.eyes)))
    assert torch.equal(shiny[:, 3], plain[:, 3])
    assert (shiny[:, :3] >= plain[:, :3] - 1e-12).all() and (shiny[:, :3] - plain[:, :3]).max() > 0.3
    (grad,) = torch.autograd.grad(shiny[:, :3].sum(), camera.eyes)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
