"""Reading and writing Wavefront .obj / .mtl files (docs/math/render.md §1.1)."""

from __future__ import annotations

import pytest
import torch
from relaxops.render import shapes
from relaxops.render.io import load_obj, save_obj

QUAD_OBJ = """\
# a quad, a triangle with relative indices and a pentagon with vt/vn references
mtllib colours.mtl
v 0 0 0 1 0 0
v 2 0 0 0 1 0
v 2 1 0 0 0 1
v 0 1 0 0.5 0.5 0.5
vt 0 0
vn 0 0 1
usemtl red
f 1 2 3 4
v 1 2 1 1 1 1
usemtl blue
f -5/1 -4/1/1 -1//1
usemtl missing
f 1/1/1 2/1/1 3/1/1 5/1/1 4/1/1
"""
MTL = """\
newmtl red
Kd 1 0 0
newmtl blue
Ka 0 0 0
Kd 0 0 1
map_Kd blue.png
"""


@pytest.fixture
def quad(tmp_path):
    (tmp_path / "colours.mtl").write_text(MTL)
    path = tmp_path / "quad.obj"
    path.write_text(QUAD_OBJ)
    return path


def test_load_obj_fan_triangulates_with_relative_indices(quad):
    vertices, faces = load_obj(quad)
    assert vertices.dtype == torch.float32 and faces.dtype == torch.int32
    assert vertices.shape == (5, 3)
    assert faces.tolist() == [[0, 1, 2], [0, 2, 3], [0, 1, 4], [0, 1, 2], [0, 2, 4], [0, 4, 3]]


def test_load_obj_normalization(quad):
    vertices, _ = load_obj(quad, normalization=True)
    # extents 2 x 2 x 1 -> longest axis spans [-1, 1], centred
    torch.testing.assert_close(vertices.min(0).values, torch.tensor([-1.0, -1.0, -0.5]))
    torch.testing.assert_close(vertices.max(0).values, torch.tensor([1.0, 1.0, 0.5]))


def test_load_obj_textures(quad):
    with pytest.warns(UserWarning, match="blue.png"):
        _, faces, textures = load_obj(quad, load_texture=True, texture_res=2)
    assert textures.shape == (6, 4, 3)
    red, blue, white = [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]
    expected = torch.tensor([red, red, blue, white, white, white])
    torch.testing.assert_close(textures, expected[:, None, :].expand(-1, 4, -1))

    _, _, colours = load_obj(quad, load_texture=True, texture_type="vertex")
    torch.testing.assert_close(colours[:2], torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))


def test_load_obj_errors(tmp_path):
    path = tmp_path / "bad.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 0\n")
    with pytest.raises(ValueError, match="index 0"):
        load_obj(path)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n")
    with pytest.raises(ValueError, match="filename_obj"):
        load_obj(path)
    path.write_text("v 0 0 0\nv 1 0 zero\n")
    with pytest.raises(ValueError, match="line 2"):
        load_obj(path)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    with pytest.raises(ValueError, match="mtllib"):
        load_obj(path, load_texture=True)
    with pytest.raises(ValueError, match="columns 4-6"):
        load_obj(path, load_texture=True, texture_type="vertex")
    with pytest.raises(ValueError, match="texture_type"):
        load_obj(path, texture_type="uv")


def test_save_load_round_trip(tmp_path):
    vertices, faces = shapes.torus(1.0, 0.4, 6, 5)
    vertices = vertices + torch.randn_like(vertices) * 1e-3
    path = tmp_path / "torus.obj"
    save_obj(path, vertices, faces)
    loaded_vertices, loaded_faces = load_obj(path)
    assert torch.equal(loaded_vertices, vertices) and torch.equal(loaded_faces.long(), faces)

    colours = torch.rand(len(vertices), 3)
    save_obj(path, vertices, faces, colours, texture_type="vertex")
    _, _, loaded = load_obj(path, load_texture=True, texture_type="vertex")
    assert torch.equal(loaded, colours)

    palette = torch.rand(3, 3)
    face_colours = palette[torch.arange(len(faces)) % 3]
    textures = face_colours[:, None, :].repeat(1, 4, 1)
    textures[:, 0] += 0.1  # texels of a face are averaged
    textures[:, 1:] -= 0.1 / 3
    save_obj(path, vertices.numpy(), faces.numpy(), textures, texture_type="surface")
    assert (tmp_path / "torus.mtl").read_text().count("newmtl") == 3
    loaded_vertices, loaded_faces, loaded = load_obj(path, load_texture=True, texture_res=3)
    assert torch.equal(loaded_faces.long(), faces)
    torch.testing.assert_close(loaded, face_colours[:, None, :].expand(-1, 9, -1))


def test_save_obj_errors(tmp_path):
    vertices, faces = shapes.cube()
    with pytest.raises(ValueError, match="faces"):
        save_obj(tmp_path / "c.obj", vertices, faces + 8)
    with pytest.raises(TypeError, match="faces"):
        save_obj(tmp_path / "c.obj", vertices, faces.float())
    with pytest.raises(ValueError, match="vertices"):
        save_obj(tmp_path / "c.obj", vertices[None], faces)
    with pytest.raises(ValueError, match="textures"):
        save_obj(tmp_path / "c.obj", vertices, faces, torch.ones(3, 3), texture_type="vertex")
