"""Per-face gathers, normals and the Mesh container (docs/math/render.md §1.1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from relaxops.render import shapes
from relaxops.render.mesh import Mesh, face_normals, face_vertices, vertex_normals


def tetrahedron(dtype=torch.float64):
    vertices = torch.tensor([[0.1, 0.0, 0.2], [1.0, 0.1, 0.0], [0.0, 1.1, -0.1], [0.2, 0.1, 0.9]], dtype=dtype)
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    return vertices, faces


def test_face_vertices_gathers_corners_and_broadcasts_batch():
    vertices = torch.randn(2, 5, 4)
    faces = torch.tensor([[[0, 1, 2], [4, 3, 1]]], dtype=torch.int32)
    out = face_vertices(vertices, faces)
    assert out.shape == (2, 2, 3, 4)
    for b in range(2):
        torch.testing.assert_close(out[b], vertices[b][faces[0].long()])
    # a batch of one mesh against batched faces
    out = face_vertices(vertices[:1], faces.expand(3, -1, -1))
    assert out.shape == (3, 2, 3, 4)


def test_face_vertices_rejects_bad_faces():
    vertices = torch.randn(1, 4, 3)
    with pytest.raises(TypeError, match="faces"):
        face_vertices(vertices, torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="faces"):
        face_vertices(vertices, torch.tensor([[[0, 1, 4]]]))
    with pytest.raises(ValueError, match="faces"):
        face_vertices(vertices, torch.tensor([[[0, -1, 2]]]))
    with pytest.raises(ValueError, match="faces"):
        face_vertices(vertices, torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="batch"):
        face_vertices(torch.randn(2, 4, 3), torch.zeros(3, 1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="vertices"):
        face_vertices(torch.zeros(1, 4, 3, dtype=torch.long), torch.zeros(1, 1, 3, dtype=torch.long))


def test_face_normals_of_the_cube_are_the_outward_axes():
    vertices, faces = shapes.cube()
    normals = face_normals(vertices[None], faces[None])[0]
    centroids = vertices[faces].mean(1)
    # the side of a face is the centroid's largest coordinate (+-1)
    axis = centroids.abs().argmax(1)
    expected = torch.zeros_like(normals)
    expected[torch.arange(12), axis] = centroids[torch.arange(12), axis].sign()
    torch.testing.assert_close(normals, expected)


def test_vertex_normals_are_area_weighted_corner_cross_products():
    vertices, faces = tetrahedron()
    expected = torch.zeros_like(vertices)
    for face in faces.tolist():
        for k in range(3):
            this, nxt, prev = (vertices[face[(k + s) % 3]] for s in (0, 1, 2))
            expected[face[k]] += torch.linalg.cross(nxt - this, prev - this)
    expected = expected / expected.norm(dim=1, keepdim=True)
    torch.testing.assert_close(vertex_normals(vertices[None], faces[None])[0], expected)
    # on a fine sphere the vertex normal is close to the position
    v, f = shapes.icosphere(3)
    assert (vertex_normals(v[None], f[None])[0] * v).sum(-1).min() > 0.999


def test_vertex_normals_of_unused_vertices_are_zero_and_batched():
    vertices = torch.randn(3, 6, 3)
    faces = torch.tensor([[0, 1, 2], [2, 1, 3]])
    normals = vertex_normals(vertices, faces[None])
    assert normals.shape == (3, 6, 3)
    assert (normals[:, 4:] == 0).all()
    torch.testing.assert_close(normals[:, :4].norm(dim=-1), torch.ones(3, 4))


def test_normals_gradcheck():
    vertices, faces = tetrahedron()
    vertices = vertices[None].requires_grad_()
    assert torch.autograd.gradcheck(lambda v: vertex_normals(v, faces[None]), (vertices,))
    assert torch.autograd.gradcheck(lambda v: face_normals(v, faces[None]), (vertices,))
    assert torch.autograd.gradcheck(lambda v: face_vertices(v, faces[None]), (vertices,))


def test_mesh_adds_batch_dim_and_default_textures():
    vertices, faces = tetrahedron(torch.float32)
    mesh = Mesh(vertices, faces, texture_res=3)
    assert (mesh.batch_size, mesh.num_vertices, mesh.num_faces) == (1, 4, 4)
    assert mesh.vertices.shape == (1, 4, 3) and mesh.faces.shape == (1, 4, 3)
    assert mesh.textures.shape == (1, 4, 9, 3) and (mesh.textures == 1).all()
    assert mesh.texture_res == 3 and mesh.texture_type == "surface" and mesh.device == vertices.device
    assert mesh.face_textures is mesh.textures
    torch.testing.assert_close(mesh.face_vertices[0], vertices[faces])
    torch.testing.assert_close(mesh.surface_normals, face_normals(mesh.vertices, mesh.faces))
    torch.testing.assert_close(mesh.vertex_normals, vertex_normals(mesh.vertices, mesh.faces))

    vmesh = Mesh(vertices, faces, texture_type="vertex", texture_res=3)
    assert vmesh.textures.shape == (1, 4, 3) and vmesh.texture_res == 1
    assert vmesh.face_textures.shape == (1, 4, 3, 3)


def test_mesh_keeps_dtype_and_infers_texture_res():
    vertices, faces = tetrahedron(torch.float64)
    mesh = Mesh(vertices, faces, textures=torch.rand(4, 5, 3, dtype=torch.float64), texture_res=7)
    assert mesh.texture_res == 2  # floor(sqrt(5))
    assert mesh.textures.shape == (1, 4, 5, 3) and mesh.vertices.dtype == torch.float64
    assert Mesh(vertices, faces).textures.dtype == torch.float64

    colours = torch.rand(4, 3, dtype=torch.float64)
    vmesh = Mesh(vertices, faces, textures=colours, texture_type="vertex")
    torch.testing.assert_close(vmesh.face_textures[0], colours[faces])


def test_mesh_accepts_numpy_on_cpu():
    vertices, faces = tetrahedron()
    mesh = Mesh(vertices.numpy(), faces.numpy().astype(np.int32), textures=np.ones((4, 1, 3)))
    assert mesh.vertices.dtype == torch.float32 and mesh.device.type == "cpu"
    assert mesh.faces.dtype == torch.int32 and mesh.textures.dtype == torch.float32


def test_mesh_broadcasts_a_batch_of_one():
    vertices, faces = tetrahedron(torch.float32)
    mesh = Mesh(vertices.expand(3, -1, -1), faces)
    assert mesh.faces.shape == (3, 4, 3) and mesh.textures.shape == (3, 4, 1, 3)
    assert mesh.face_vertices.shape == (3, 4, 3, 3)


def test_mesh_rejects_bad_input():
    vertices, faces = tetrahedron(torch.float32)
    with pytest.raises(ValueError, match="texture_type"):
        Mesh(vertices, faces, texture_type="uv")
    bad = vertices.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="vertices"):
        Mesh(bad, faces)
    with pytest.raises(ValueError, match="vertices"):
        Mesh(vertices[:, :2], faces)
    with pytest.raises(ValueError, match="faces"):
        Mesh(vertices, faces[:, :2])
    with pytest.raises(ValueError, match="faces"):
        Mesh(vertices, faces + 1)
    with pytest.raises(TypeError, match="faces"):
        Mesh(vertices, faces.float())
    with pytest.raises(ValueError, match="textures"):
        Mesh(vertices, faces, textures=torch.ones(1, 3, 1, 3))
    with pytest.raises(ValueError, match="textures"):
        Mesh(vertices, faces, textures=torch.ones(1, 4, 3, 3), texture_type="vertex")
    with pytest.raises(ValueError, match="texture_res"):
        Mesh(vertices, faces, texture_res=0)
    with pytest.raises(ValueError, match="batch"):
        Mesh(vertices.expand(2, -1, -1), faces.expand(3, -1, -1))


def test_mesh_obj_round_trip(tmp_path):
    vertices, faces = shapes.icosphere(1)
    colours = torch.rand(len(vertices), 3)
    mesh = Mesh(vertices, faces, colours, texture_type="vertex")
    mesh.save_obj(tmp_path / "m.obj", save_texture=True)
    loaded = Mesh.from_obj(tmp_path / "m.obj", load_texture=True, texture_type="vertex")
    torch.testing.assert_close(loaded.vertices, mesh.vertices, rtol=0, atol=0)
    assert torch.equal(loaded.faces.long(), mesh.faces)
    torch.testing.assert_close(loaded.textures, mesh.textures, rtol=0, atol=0)
    plain = Mesh.from_obj(tmp_path / "m.obj")
    assert plain.texture_type == "surface" and (plain.textures == 1).all()
    with pytest.raises(ValueError, match="batch size"):
        Mesh(vertices.expand(2, -1, -1), faces).save_obj(tmp_path / "b.obj")


def test_mesh_voxelize_shape():
    vertices, faces = shapes.cube()
    voxels = Mesh(vertices * 0.3, faces).voxelize(16)
    assert voxels.shape == (1, 16, 16, 16) and voxels.dtype == torch.bool
    assert voxels[0, 8, 8, 8]


def test_mesh_face_attributes_gathers_vertex_values():
    vertices, faces = shapes.icosphere(0)
    mesh = Mesh(vertices, faces)
    normals = mesh.vertex_normals
    got = mesh.face_attributes(normals)
    assert got.shape == (1, len(faces), 3, 3)
    torch.testing.assert_close(got[0], normals[0][faces], rtol=0, atol=0)
    torch.testing.assert_close(mesh.face_attributes(normals[0, :, :2]), got[..., :2], rtol=0, atol=0)  # [V, C]
    with pytest.raises(ValueError, match="values"):
        mesh.face_attributes(torch.rand(1, len(vertices) + 1, 2))
    with pytest.raises(TypeError, match="values"):
        mesh.face_attributes(torch.zeros(1, len(vertices), 2, dtype=torch.long))
