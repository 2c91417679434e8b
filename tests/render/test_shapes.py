"""Procedural meshes: counts, topology, outward orientation and the scene builder."""

from __future__ import annotations

import pytest
import torch
from relaxops.render import shapes


def edge_counts(faces: torch.Tensor) -> torch.Tensor:
    """How many faces share each undirected edge."""
    edges = faces[:, [[0, 1], [1, 2], [2, 0]]].reshape(-1, 2).sort(dim=1).values
    return torch.unique(edges, dim=0, return_counts=True)[1]


def euler_characteristic(vertices, faces) -> int:
    return len(vertices) - len(edge_counts(faces)) + len(faces)


def normals_and_centroids(vertices, faces):
    corners = vertices[faces].double()
    normals = torch.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0], dim=-1)
    return normals, corners.mean(1)


CLOSED_SPHERES = {
    "icosphere0": lambda: shapes.icosphere(0),
    "icosphere3": lambda: shapes.icosphere(3),
    "cube": shapes.cube,
    "uv_sphere": lambda: shapes.uv_sphere(5, 7),
    "uv_sphere_min": lambda: shapes.uv_sphere(2, 3),
}


@pytest.mark.parametrize("name", CLOSED_SPHERES)
def test_sphere_like_meshes_are_closed_and_outward(name):
    vertices, faces = CLOSED_SPHERES[name]()
    assert vertices.dtype == torch.float32 and faces.dtype == torch.int64
    assert euler_characteristic(vertices, faces) == 2
    assert (edge_counts(faces) == 2).all()  # closed 2-manifold
    normals, centroids = normals_and_centroids(vertices, faces)
    assert ((normals * centroids).sum(-1) > 0).all()
    assert len(torch.unique(vertices, dim=0)) == len(vertices)


@pytest.mark.parametrize("level", [0, 1, 2, 4])
def test_icosphere_counts_and_radius(level):
    vertices, faces = shapes.icosphere(level)
    assert faces.shape == (20 * 4**level, 3) and vertices.shape == (10 * 4**level + 2, 3)
    torch.testing.assert_close(vertices.norm(dim=1), torch.ones(len(vertices)))
    assert len(torch.unique(vertices, dim=0)) == len(vertices)


def test_large_icosphere():
    vertices, faces = shapes.icosphere(6)
    assert faces.shape == (81920, 3) and vertices.shape == (40962, 3)
    assert int(faces.max()) == len(vertices) - 1


def test_uv_sphere_counts():
    vertices, faces = shapes.uv_sphere(6, 10)
    assert vertices.shape == (2 + 5 * 10, 3) and faces.shape == (2 * 10 * 5, 3)


def test_torus_is_a_closed_outward_genus_one_surface():
    R, r = 1.0, 0.3
    vertices, faces = shapes.torus(R, r, 12, 8)
    assert vertices.shape == (96, 3) and faces.shape == (192, 3)
    assert euler_characteristic(vertices, faces) == 0 and (edge_counts(faces) == 2).all()
    normals, centroids = normals_and_centroids(vertices, faces)
    circle = torch.nn.functional.normalize(centroids * torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), dim=-1)
    assert ((normals * (centroids - R * circle)).sum(-1) > 0).all()
    tube = (
        vertices.double() - R * torch.nn.functional.normalize(vertices.double() * torch.tensor([1.0, 0, 1]), dim=-1)
    ).norm(dim=1)
    torch.testing.assert_close(tube, torch.full_like(tube, r))


def test_plane_faces_minus_z():
    vertices, faces = shapes.plane(3, 2)
    assert vertices.shape == (12, 3) and faces.shape == (12, 3)
    assert (vertices[:, 2] == 0).all() and vertices[:, :2].abs().max() == 1
    normals, _ = normals_and_centroids(vertices, faces)
    assert (normals[:, 2] < 0).all()
    assert euler_characteristic(vertices, faces) == 1  # a disc


def test_merge_offsets_faces():
    a, b = shapes.cube(), shapes.icosphere(0)
    vertices, faces = shapes.merge([a, b])
    assert vertices.shape == (20, 3) and faces.shape == (32, 3)
    assert torch.equal(faces[12:], b[1] + 8)
    with pytest.raises(ValueError, match="meshes"):
        shapes.merge([])
    with pytest.raises(ValueError, match="meshes"):
        shapes.merge([(a[0], a[1][:, :2])])


def test_scene_is_deterministic_and_near_the_target():
    vertices, faces = shapes.scene(20_000, seed=3)
    assert 20_000 - 12 < len(faces) <= 20_000
    assert vertices.abs().max() < 1.2
    assert int(faces.max()) < len(vertices)
    again = shapes.scene(20_000, seed=3)
    assert torch.equal(again[0], vertices) and torch.equal(again[1], faces)
    assert not torch.equal(shapes.scene(20_000, seed=4)[0][:10], vertices[:10])
    assert len(shapes.scene()[1]) > 199_000
    assert (edge_counts(faces) == 2).all()  # every part is closed


def test_bad_arguments():
    with pytest.raises(ValueError, match="subdivisions"):
        shapes.icosphere(-1)
    with pytest.raises(ValueError, match="subdivisions"):
        shapes.icosphere(9)
    with pytest.raises(ValueError, match="n_lat"):
        shapes.uv_sphere(1, 5)
    with pytest.raises(ValueError, match="R"):
        shapes.torus(0.2, 0.3)
    with pytest.raises(ValueError, match="nx"):
        shapes.plane(0, 1)
    with pytest.raises(ValueError, match="n_faces_target"):
        shapes.scene(5)
