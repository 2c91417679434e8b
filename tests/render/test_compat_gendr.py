"""relaxops.compat.gendr against gendr 0.1.0's public API (names, signatures, attributes, argument conventions) and
its use in the original experiments, with results equal to relaxops.render's."""

from __future__ import annotations

import importlib
import inspect
import math
import sys

import numpy as np
import pytest
import relaxops.compat
import relaxops.compat.gendr as gendr
import torch
import torch.nn as nn
from relaxops import render
from relaxops.render import shapes
from relaxops.render.losses import iou_loss, voxelize

REQUIRED = inspect.Parameter.empty

# gendr 0.1.0's signatures, parameter by parameter (name, default), as written there (lists included: the compat
# module uses tuples with the same values, compared as tuples).
RENDER_OPTIONS = [
    ("dist_func", "uniform"),
    ("dist_scale", 1e-2),
    ("dist_squared", False),
    ("dist_shape", None),
    ("dist_shift", None),
    ("dist_eps", 1e4),
    ("aggr_alpha_func", "probabilistic"),
    ("aggr_alpha_t_conorm_p", None),
    ("aggr_rgb_func", "softmax"),
    ("aggr_rgb_eps", 1e-3),
    ("aggr_rgb_gamma", 1e-3),
    ("near", 1),
    ("far", 100),
]
F = gendr.functional
SIGNATURES = {
    "GenDR": (
        gendr.GenDR.__init__,
        [
            ("image_size", 256),
            ("background_color", [0, 0, 0]),
            ("anti_aliasing", False),
            *RENDER_OPTIONS,
            ("double_side", False),
            ("texture_type", "surface"),
        ],
    ),
    "GenDR.forward": (gendr.GenDR.forward, [("mesh", REQUIRED)]),
    "GenDR.forward_tensors": (gendr.GenDR.forward_tensors, [("face_vertices", REQUIRED), ("face_textures", REQUIRED)]),
    "Mesh": (
        gendr.Mesh.__init__,
        [
            ("vertices", REQUIRED),
            ("faces", REQUIRED),
            ("textures", None),
            ("texture_res", 1),
            ("texture_type", "surface"),
        ],
    ),
    "Mesh.from_obj": (
        gendr.Mesh.from_obj,
        [
            ("filename_obj", REQUIRED),
            ("normalization", False),
            ("load_texture", False),
            ("texture_res", 1),
            ("texture_type", "surface"),
        ],
    ),
    "Mesh.save_obj": (
        gendr.Mesh.save_obj,
        [("filename_obj", REQUIRED), ("save_texture", False), ("texture_res_out", 16)],
    ),
    "Mesh.voxelize": (gendr.Mesh.voxelize, [("voxel_size", 32)]),
    "Transform": (gendr.Transform.__init__, []),
    "Transform.transform": (gendr.Transform.transform, [("vertices", REQUIRED)]),
    "Transform.forward": (gendr.Transform.forward, [("mesh", REQUIRED)]),
    "Projection": (gendr.Projection.__init__, [("P", REQUIRED), ("dist_coeffs", None), ("orig_size", 512)]),
    "LookAt": (
        gendr.LookAt.__init__,
        [("perspective", True), ("viewing_angle", 30), ("viewing_scale", 1.0), ("eye", None)],
    ),
    "LookAt.set_eyes_from_angles": (
        gendr.LookAt.set_eyes_from_angles,
        [("distances", REQUIRED), ("elevations", REQUIRED), ("azimuths", REQUIRED)],
    ),
    "LookAt.set_eyes": (gendr.LookAt.set_eyes, [("eyes", REQUIRED)]),
    "Look": (
        gendr.Look.__init__,
        [
            ("camera_direction", [0, 0, 1]),
            ("perspective", True),
            ("viewing_angle", 30),
            ("viewing_scale", 1.0),
            ("eye", None),
        ],
    ),
    "Look.set_eyes": (gendr.Look.set_eyes, [("eyes", REQUIRED)]),
    "AmbientLighting": (gendr.AmbientLighting.__init__, [("light_intensity", 0.5), ("light_color", (1, 1, 1))]),
    "AmbientLighting.forward": (gendr.AmbientLighting.forward, [("light", REQUIRED)]),
    "DirectionalLighting": (
        gendr.DirectionalLighting.__init__,
        [("light_intensity", 0.5), ("light_color", (1, 1, 1)), ("light_direction", (0, 1, 0))],
    ),
    "DirectionalLighting.forward": (gendr.DirectionalLighting.forward, [("light", REQUIRED), ("normals", REQUIRED)]),
    "Lighting": (
        gendr.Lighting.__init__,
        [
            ("intensity_ambient", 0.5),
            ("color_ambient", [1, 1, 1]),
            ("intensity_directionals", 0.5),
            ("color_directionals", [1, 1, 1]),
            ("directions", [0, 1, 0]),
        ],
    ),
    "Lighting.forward": (gendr.Lighting.forward, [("mesh", REQUIRED)]),
    "LaplacianLoss": (gendr.LaplacianLoss.__init__, [("vertex", REQUIRED), ("faces", REQUIRED), ("average", False)]),
    "LaplacianLoss.forward": (gendr.LaplacianLoss.forward, [("x", REQUIRED)]),
    "FlattenLoss": (gendr.FlattenLoss.__init__, [("faces", REQUIRED), ("average", False)]),
    "FlattenLoss.forward": (gendr.FlattenLoss.forward, [("vertices", REQUIRED), ("eps", 1e-6)]),
    "functional.get_points_from_angles": (
        F.get_points_from_angles,
        [("distance", REQUIRED), ("elevation", REQUIRED), ("azimuth", REQUIRED), ("degrees", True)],
    ),
    "functional.ambient_lighting": (
        F.ambient_lighting,
        [("light", REQUIRED), ("light_intensity", 0.5), ("light_color", (1, 1, 1))],
    ),
    "functional.directional_lighting": (
        F.directional_lighting,
        [
            ("light", REQUIRED),
            ("normals", REQUIRED),
            ("light_intensity", 0.5),
            ("light_color", (1, 1, 1)),
            ("light_direction", (0, 1, 0)),
        ],
    ),
    "functional.load_obj": (
        F.load_obj,
        [
            ("filename_obj", REQUIRED),
            ("normalization", False),
            ("load_texture", False),
            ("texture_res", 4),
            ("texture_type", "surface"),
        ],
    ),
    "functional.look": (F.look, [("vertices", REQUIRED), ("eye", REQUIRED), ("direction", [0, 1, 0]), ("up", None)]),
    "functional.look_at": (
        F.look_at,
        [("vertices", REQUIRED), ("eye", REQUIRED), ("at", [0, 0, 0]), ("up", [0, 1, 0]), ("only_rotate", False)],
    ),
    "functional.render": (
        F.render,
        [
            ("face_vertices", REQUIRED),
            ("textures", REQUIRED),
            ("image_size", 256),
            ("background_color", [0, 0, 0]),
            *RENDER_OPTIONS,
            ("double_side", True),
            ("texture_type", "surface"),
        ],
    ),
    "functional.save_obj": (
        F.save_obj,
        [
            ("filename", REQUIRED),
            ("vertices", REQUIRED),
            ("faces", REQUIRED),
            ("textures", None),
            ("texture_res", 16),
            ("texture_type", "surface"),
        ],
    ),
    "functional.save_voxel": (F.save_voxel, [("filename", REQUIRED), ("voxel", REQUIRED)]),
    "functional.face_vertices": (F.face_vertices, [("vertices", REQUIRED), ("faces", REQUIRED)]),
    "functional.vertex_normals": (F.vertex_normals, [("vertices", REQUIRED), ("faces", REQUIRED)]),
    "functional.voxelization": (F.voxelization, [("faces", REQUIRED), ("size", REQUIRED), ("normalize", False)]),
}
GENDR_TOP_LEVEL = [
    "functional",
    "Mesh",
    "Projection",
    "LookAt",
    "Look",
    "AmbientLighting",
    "DirectionalLighting",
    "Lighting",
    "GenDR",
    "LaplacianLoss",
    "FlattenLoss",
]


def _as_tuple(value):
    return tuple(value) if isinstance(value, list) else value


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_signatures(name):
    fn, expected = SIGNATURES[name]
    got = [(p.name, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    assert got == [(n, _as_tuple(d)) for n, d in expected]


def test_names_and_attributes():
    for name in GENDR_TOP_LEVEL + ["Transform"]:
        assert hasattr(gendr, name), name
    assert set(F.__all__) == {n.split(".")[1] for n in SIGNATURES if n.startswith("functional.")}
    for name in ("render", "look_at", "get_points_from_angles", "voxelization", "perspective"):
        assert not hasattr(gendr, name)  # gendr keeps its functions in gendr.functional
    assert F.render.__name__ == "render" and F.render.__module__ == "relaxops.compat.gendr.functional"
    assert importlib.import_module("relaxops.compat.gendr.functional") is F
    vertices, faces = shapes.icosphere(1)
    mesh = gendr.Mesh(vertices, faces)
    for attribute in (
        "vertices",
        "faces",
        "textures",
        "face_vertices",
        "surface_normals",
        "vertex_normals",
        "face_textures",
        "device",
        "texture_type",
        "texture_res",
        "batch_size",
        "num_vertices",
        "num_faces",
    ):
        assert hasattr(mesh, attribute), attribute
    renderer = gendr.GenDR()
    for option, default in RENDER_OPTIONS + [("image_size", 256), ("double_side", False), ("anti_aliasing", False)]:
        assert getattr(renderer, option) == default
    assert isinstance(renderer, render.Renderer) and isinstance(gendr.LookAt(), gendr.Transform)


def test_functional_imports_without_gendr_imported_first():
    saved = {name: sys.modules.pop(name) for name in ("relaxops.compat.gendr", "relaxops.compat.gendr.functional")}
    try:
        module = importlib.import_module("relaxops.compat.gendr.functional")
        assert callable(module.render) and module is sys.modules["relaxops.compat.gendr"].functional
    finally:
        sys.modules.update(saved)
        relaxops.compat.gendr = saved["relaxops.compat.gendr"]


def sphere_mesh(batch: int, scale=0.5) -> gendr.Mesh:
    vertices, faces = shapes.icosphere(2)
    return gendr.Mesh((vertices * torch.as_tensor(scale)).repeat(batch, 1, 1), faces.repeat(batch, 1, 1))


def test_opt_shape_pipeline():
    """experiments/opt_shape.py in miniature: silhouettes of a deformed sphere from 4 azimuths, IoU loss plus the
    Laplacian and flatten regularisers, gradients to a vertex displacement."""
    lighting = gendr.Lighting()
    transform = gendr.LookAt(viewing_angle=15)
    transform.set_eyes_from_angles(
        torch.full((4,), 2.732), torch.full((4,), 30.0), torch.tensor([0.0, 90.0, 180.0, 270.0])
    )
    hard_renderer = gendr.GenDR(
        image_size=32,
        dist_func=0,
        dist_scale=1e-4,
        dist_squared=True,
        dist_shape=0.0,
        dist_shift=0.0,
        dist_eps=1,
        aggr_alpha_func=0,
        aggr_alpha_t_conorm_p=0.0,
        aggr_rgb_func="hard",
    )
    with torch.no_grad():
        target = hard_renderer(transform(lighting(sphere_mesh(4, torch.tensor([0.6, 0.4, 0.5])))))[:, 3]
    assert 0 < target.mean() < 1 and set(target.unique().tolist()) <= {0.0, 1.0}

    template = sphere_mesh(1)
    laplacian_loss = gendr.LaplacianLoss(template.vertices[0], template.faces[0])
    flatten_loss = gendr.FlattenLoss(template.faces[0])
    displace = torch.zeros_like(template.vertices, requires_grad=True)
    renderer = gendr.GenDR(image_size=32, dist_func="logistic", dist_scale=1e-2, dist_eps=100, aggr_rgb_func="hard")
    vertices = template.vertices + displace
    mesh = gendr.Mesh(vertices.repeat(4, 1, 1), template.faces.repeat(4, 1, 1))
    images = renderer(transform(lighting(mesh)))
    assert images.shape == (4, 4, 32, 32) and torch.isfinite(images).all()
    silhouette_loss = iou_loss(images[:, 3], target)
    (grad,) = torch.autograd.grad(silhouette_loss, displace, retain_graph=True)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    regularisers = 0.03 * laplacian_loss(vertices).mean() + 0.0003 * flatten_loss(vertices).mean()
    assert torch.isfinite(regularisers)
    (silhouette_loss + regularisers).backward()
    assert torch.isfinite(displace.grad).all() and displace.grad.abs().sum() > 0

    # the experiments build the soft renderer with dist_scale=None and set it per run
    late = gendr.GenDR(
        image_size=32,
        dist_func="logistic",
        dist_scale=None,
        dist_squared=True,
        dist_shape=0.0,
        dist_shift=0.0,
        dist_eps=100,
        aggr_alpha_t_conorm_p=0.0,
        aggr_rgb_func="hard",
    )
    with pytest.raises(ValueError, match="dist_scale"):
        late(transform(mesh))
    late.dist_scale = np.logspace(-1, -7, 7)[3]
    assert late(transform(mesh)).shape == (4, 4, 32, 32)


def screen_space(batch=2, seed=0):
    """Screen-space face vertices [B, F, 3, 3] of a sphere seen from `batch` directions and random textures."""
    generator = torch.Generator().manual_seed(seed)
    mesh = sphere_mesh(1)
    transform = gendr.LookAt()
    transform.set_eyes_from_angles(
        torch.full((batch,), 2.5), torch.linspace(-20, 40, batch), torch.linspace(0, 300, batch)
    )
    face_vertices = transform(mesh).face_vertices.double()
    textures = torch.rand(batch, mesh.num_faces, 4, 3, dtype=torch.float64, generator=generator)
    return face_vertices, textures


@pytest.mark.parametrize(
    "options",
    [
        {},
        {
            "dist_func": "logistic",
            "dist_scale": 0.02,
            "aggr_alpha_func": "yager",
            "aggr_alpha_t_conorm_p": 2.0,
            "aggr_rgb_func": "hard",
            "background_color": (0.2, 0.4, 0.6),
            "double_side": False,
        },
        {
            "dist_func": "gamma_rev",
            "dist_scale": 1e-3,
            "dist_squared": True,
            "dist_shape": 0.5,
            "dist_shift": 0.1,
            "dist_eps": 300.0,
            "aggr_alpha_func": 3,
        },
    ],
)
def test_functional_render_equals_rasterize(options):
    face_vertices, textures = screen_space()
    face_vertices.requires_grad_()
    textures.requires_grad_()
    image = F.render(face_vertices, textures, 24, **options)
    expected = render.rasterize(face_vertices, textures, 24, **options)
    assert image.shape == (2, 4, 24, 24)
    assert torch.equal(image, expected)
    weights = torch.rand_like(image)
    grads = torch.autograd.grad((image * weights).sum(), (face_vertices, textures))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (face_vertices, textures))
    for got, want in zip(grads, expected_grads):
        assert torch.equal(got, want)
    assert torch.equal(F.render(face_vertices.reshape(2, -1, 9), textures, 24, **options), expected)


def test_module_equals_relaxops_renderer():
    face_vertices, textures = screen_space(batch=3, seed=1)
    options = dict(image_size=16, dist_func="gaussian", dist_scale=0.01, aggr_rgb_func="softmax", anti_aliasing=True)
    ours = render.Renderer(**options)
    compat = gendr.GenDR(**options)
    assert torch.equal(compat.forward_tensors(face_vertices, textures), ours.forward_tensors(face_vertices, textures))
    mesh = gendr.Mesh(
        torch.rand(3, 4, 3, dtype=torch.float64) + torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64),
        torch.tensor([[0, 1, 2], [1, 2, 3]]),
        texture_type="vertex",
    )
    compat.texture_type = ours.texture_type = "vertex"
    assert torch.equal(compat(mesh), ours(mesh))


def test_bad_input_raises_value_error_naming_the_argument():
    face_vertices, textures = screen_space(batch=1)
    with pytest.raises(ValueError, match="dist_scale"):
        gendr.GenDR(dist_scale=0)  # 'uniform' needs tau > 0
    with pytest.raises(ValueError, match="aggr_rgb_func"):
        gendr.GenDR(aggr_rgb_func="foo")
    with pytest.raises(ValueError, match="texture_type"):
        gendr.GenDR(texture_type="uv")
    with pytest.raises(ValueError, match="dist_shape"):
        gendr.GenDR(dist_func="gamma", dist_shape=None)
    renderer = gendr.GenDR()
    with pytest.raises(ValueError, match="dist_scale"):
        renderer.dist_scale = -1.0
    with pytest.raises(ValueError, match="aggr_alpha_t_conorm_p"):
        renderer.aggr_alpha_func = "yager"  # p = None means 0, outside yager's range
    assert renderer.dist_scale == 1e-2 and renderer.aggr_alpha_func == "probabilistic"
    with pytest.raises(ValueError, match="dist_func"):
        F.render(face_vertices, textures, 8, dist_func="foo")
    with pytest.raises(ValueError, match="dist_scale"):
        F.render(face_vertices, textures, 8, dist_scale=0)
    with pytest.raises(ValueError, match="dist_scale"):
        F.render(face_vertices, textures, 8, dist_scale=None)
    with pytest.raises(ValueError, match="dist_eps"):
        F.render(face_vertices, textures, 8, dist_eps=0.5)
    with pytest.raises(ValueError, match="size"):
        F.voxelization(face_vertices, 1)
    with pytest.raises(ValueError, match="voxel"):
        F.save_voxel("unused.obj", torch.ones(2, 2))


def test_lighting_names_and_results():
    ambient = gendr.AmbientLighting(0.3, (1.0, 0.5, 0.0))
    assert ambient.light_intensity == 0.3 and ambient.intensity == 0.3 and ambient.light_color == (1.0, 0.5, 0.0)
    light = torch.zeros(2, 5, 3)
    torch.testing.assert_close(ambient(light), render.ambient_lighting(light, 0.3, (1.0, 0.5, 0.0)))
    assert not light.any()  # not modified in place
    ambient.light_intensity = nn.Parameter(torch.tensor(0.7))
    assert "light_intensity" in dict(ambient.named_parameters())
    ambient(light).sum().backward()
    torch.testing.assert_close(ambient.light_intensity.grad, torch.tensor(2 * 5 * 1.5))

    directional = gendr.DirectionalLighting(light_direction=(0.0, 0.0, 1.0))
    normals = torch.nn.functional.normalize(torch.randn(2, 5, 3), dim=-1)
    assert directional.direction == (0.0, 0.0, 1.0) and directional.light_color == (1, 1, 1)
    torch.testing.assert_close(
        directional(light, normals), render.directional_lighting(light, normals, 0.5, (1, 1, 1), (0.0, 0.0, 1.0))
    )
    torch.testing.assert_close(
        F.directional_lighting(light, normals, light_direction=(0, 0, 1)), directional(light, normals)
    )
    torch.testing.assert_close(
        F.ambient_lighting(light, light_intensity=0.3, light_color=(1.0, 0.5, 0.0)),
        render.ambient_lighting(light, 0.3, (1.0, 0.5, 0.0)),
    )

    mesh = sphere_mesh(2)
    options = dict(
        intensity_ambient=0.4, color_ambient=(1.0, 0.9, 0.8), intensity_directionals=0.6, directions=(1.0, 1.0, 0.0)
    )
    lit = gendr.Lighting(**options)(mesh)
    assert isinstance(lit, gendr.Mesh)
    assert isinstance(gendr.Lighting().ambient, gendr.AmbientLighting)
    assert isinstance(gendr.Lighting().directionals[0], gendr.DirectionalLighting)
    torch.testing.assert_close(lit.textures, render.Lighting(**options)(mesh).textures)


def test_transforms():
    mesh = sphere_mesh(1)
    look_at = gendr.LookAt()
    out = look_at(mesh)
    assert isinstance(out, gendr.Mesh)
    torch.testing.assert_close(out.vertices, render.LookAt()(mesh).vertices)
    torch.testing.assert_close(look_at.eyes, torch.tensor([0.0, 0.0, -(1 / math.tan(math.radians(30)) + 1)]))
    look_at.set_eyes([[0.0, 0.0, -3.0], [0.0, 3.0, 0.0]])
    assert look_at(mesh).batch_size == 2

    look = gendr.Look()  # gendr crashed here (no up)
    torch.testing.assert_close(look(mesh).vertices, render.Look()(mesh).vertices)
    eye = (0.5, 0.2, -3.0)
    torch.testing.assert_close(
        F.look(mesh.vertices, eye, direction=(0, 0, 1)), render.look(mesh.vertices, eye, (0, 0, 1), (0, 1, 0))
    )
    with pytest.raises(ValueError, match="direction"):
        F.look(mesh.vertices, eye)  # the defaults direction=(0, 1, 0), up=+y have no camera frame
    torch.testing.assert_close(F.look_at(mesh.vertices, eye), render.look_at(mesh.vertices, eye))

    P = np.array([[[100.0, 0.0, 256.0, 0.0], [0.0, 100.0, 256.0, 0.0], [0.0, 0.0, 1.0, 3.0]]])
    projected = gendr.Projection(P)(mesh)
    assert isinstance(projected, gendr.Mesh) and projected.device.type == "cpu"

    point = F.get_points_from_angles(2.0, 30.0, 45.0)
    assert isinstance(point, tuple) and len(point) == 3
    el, az = math.radians(30), math.radians(45)
    np.testing.assert_allclose(
        point, (2 * math.cos(el) * math.sin(az), 2 * math.sin(el), -2 * math.cos(el) * math.cos(az)), rtol=1e-14
    )
    points = F.get_points_from_angles(torch.full((3,), 2.0), torch.full((3,), 30.0), torch.full((3,), 45.0))
    assert points.shape == (3, 3)
    torch.testing.assert_close(points, torch.tensor([point] * 3, dtype=torch.float32))


def test_voxelization_conventions():
    size = 16
    mesh = sphere_mesh(2, 0.45)
    voxels = mesh.voxelize(size)
    assert voxels.dtype == torch.int32 and voxels.shape == (2, size, size, size)
    assert torch.equal(voxels, voxelize(mesh.face_vertices, size).int())
    assert 0 < voxels.float().mean() < 1
    unit = mesh.face_vertices * size / (size - 1) + 0.5  # gendr's Mesh.voxelize argument
    assert torch.equal(F.voxelization(unit, size, False), voxels)
    assert torch.equal(F.voxelization(unit * size, size, normalize=True), voxels)


def test_save_voxel_writes_closed_outward_cubes(tmp_path):
    grid = torch.zeros(3, 4, 5, dtype=torch.int32)
    grid[1, 1, 1] = grid[1, 2, 1] = grid[2, 2, 1] = grid[0, 0, 4] = 1  # an L of three voxels and a corner voxel
    path = str(tmp_path / "voxels.obj")
    F.save_voxel(path, grid)
    vertices, faces = F.load_obj(path)
    # the L: 3 cubes' 18 squares less 2 at each of its 2 shared faces; the corner voxel: 6; 2 triangles each
    assert faces.shape == (2 * (3 * 6 - 4 + 6), 3)
    assert len(vertices) == len(torch.unique(vertices, dim=0))  # shared corners written once
    v = vertices.double()[faces.long()]
    signed_volume = torch.linalg.det(v).sum() / 6  # divergence theorem: positive for outward faces
    torch.testing.assert_close(signed_volume, torch.tensor(4 / (3 * 4 * 5), dtype=torch.float64))
    assert vertices.min() >= 0 and vertices.max() <= 1
    F.save_voxel(path, np.zeros((2, 2, 2)))
    assert F.load_obj(path)[1].shape == (0, 3)


def test_obj_round_trip_with_gendr_names(tmp_path):
    vertices, faces = shapes.icosphere(1)
    path = str(tmp_path / "sphere.obj")
    F.save_obj(filename=path, vertices=vertices, faces=faces)
    loaded_vertices, loaded_faces = F.load_obj(path)
    torch.testing.assert_close(loaded_vertices, vertices)
    assert torch.equal(loaded_faces.long(), faces.long())
    mesh = gendr.Mesh.from_obj(path)
    assert isinstance(mesh, gendr.Mesh) and mesh.num_faces == len(faces)
    colours = torch.rand(len(vertices), 3)
    gendr.Mesh(vertices, faces, colours, texture_type="vertex").save_obj(path, save_texture=True)
    torch.testing.assert_close(F.load_obj(path, load_texture=True, texture_type="vertex")[2], colours)


def test_losses_attributes_and_gendr_checkpoints():
    vertices, faces = shapes.icosphere(1)
    laplacian = gendr.LaplacianLoss(vertices, faces)
    assert laplacian.nv == len(vertices) and laplacian.nf == len(faces)
    x = torch.randn(2, len(vertices), 3)
    torch.testing.assert_close(laplacian(x), (laplacian.laplacian @ x).pow(2).sum((1, 2)))
    flatten = gendr.FlattenLoss(faces, average=True)
    assert flatten.nf == len(faces) and len(flatten.v0s) == len(flatten.v3s) == 3 * len(faces) // 2
    assert (flatten.v0s < flatten.v1s).all()
    torch.testing.assert_close(flatten(vertices[None]), render.FlattenLoss(faces, average=True)(vertices[None]))

    # a gendr model's state_dict holds the dense Laplacian and v0s ... v3s; loading it keeps ours
    model = nn.Module()
    model.laplacian_loss, model.flatten_loss = laplacian, flatten
    gendr_state = {"laplacian_loss.laplacian": laplacian.laplacian}
    gendr_state.update({f"flatten_loss.{n}": getattr(flatten, n).clone() for n in ("v0s", "v1s", "v2s", "v3s")})
    before = laplacian(x)
    model.load_state_dict(gendr_state)
    torch.testing.assert_close(laplacian(x), before)
    model.load_state_dict(model.state_dict())  # and our own checkpoints
