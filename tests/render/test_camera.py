"""Camera transforms and projections (docs/math/render.md §1.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from relaxops.render import shapes
from relaxops.render.camera import (
    Look,
    LookAt,
    Projection,
    Transform,
    get_points_from_angles,
    look,
    look_at,
    orthogonal,
    perspective,
)
from relaxops.render.mesh import Mesh, face_normals

DEFAULT_EYE = -(1 / math.tan(math.radians(30)) + 1)


def test_points_from_angles():
    torch.testing.assert_close(get_points_from_angles(1.0, 0, 0), torch.tensor([0.0, 0.0, -1.0]))
    torch.testing.assert_close(get_points_from_angles(2, 90, 0), torch.tensor([0.0, 2.0, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(get_points_from_angles(2.0, 0.0, 90.0), torch.tensor([2.0, 0.0, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        get_points_from_angles(3.0, math.pi / 2, 0.0, degrees=False), torch.tensor([0.0, 3.0, 0.0]), atol=1e-6, rtol=0
    )
    batch = get_points_from_angles(torch.tensor([1.0, 2.0]), torch.tensor([30.0, -45.0]), 10.0)
    assert batch.shape == (2, 3)
    torch.testing.assert_close(batch.norm(dim=1), torch.tensor([1.0, 2.0]))
    args = tuple(torch.tensor([2.5, 3.0], dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(get_points_from_angles, args)


def test_look_at_default_camera_is_a_translation():
    vertices = torch.randn(2, 7, 3)
    out = look_at(vertices, (0, 0, DEFAULT_EYE))
    torch.testing.assert_close(out, vertices + torch.tensor([0, 0, -DEFAULT_EYE]))


def test_look_at_maps_eye_to_origin_and_target_onto_the_z_axis():
    eye = torch.tensor([[1.0, 2.0, -3.0], [-2.0, 0.5, 1.0]], dtype=torch.float64)
    at = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    points = torch.stack([eye, at.expand(2, 3)], dim=1)  # [2, 2, 3]
    out = look_at(points, eye, at=at)
    torch.testing.assert_close(out[:, 0], torch.zeros(2, 3, dtype=torch.float64))
    torch.testing.assert_close(out[:, 1, :2], torch.zeros(2, 2, dtype=torch.float64))
    torch.testing.assert_close(out[:, 1, 2], (at - eye).norm(dim=1))
    # a rigid motion: distances are kept, and up stays in the upper half of the image
    vertices = torch.randn(1, 9, 3, dtype=torch.float64)
    cam = look_at(vertices, eye)
    torch.testing.assert_close(torch.cdist(cam, cam), torch.cdist(vertices, vertices).expand(2, -1, -1))
    up = look_at(torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64), eye, only_rotate=True)
    assert (up[:, 0, 1] > 0).all()
    torch.testing.assert_close(
        look_at(vertices, eye, only_rotate=True) - look_at(vertices, eye),
        look_at(eye[:, None, :], eye, only_rotate=True).expand(2, 9, 3),
    )


def test_look_equals_look_at_along_the_direction():
    vertices = torch.randn(1, 5, 3, dtype=torch.float64)
    eye = [0.5, 1.0, -2.0]
    direction = torch.tensor([0.2, -0.3, 1.0], dtype=torch.float64)
    expected = look_at(vertices, eye, at=torch.tensor(eye, dtype=torch.float64) + direction)
    torch.testing.assert_close(look(vertices, eye, direction), expected)
    torch.testing.assert_close(look(vertices, eye), look_at(vertices, eye, at=(0.5, 1.0, 0.0)))


def test_view_gradcheck():
    vertices = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    eye = torch.tensor([[0.3, 0.5, -2.5], [1.0, -0.2, -2.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, e: look_at(v, e), (vertices, eye))
    assert torch.autograd.gradcheck(lambda v, e: look(v, e, (0.1, 0.0, 1.0)), (vertices, eye))


def test_perspective_and_orthogonal():
    vertices = torch.tensor([[[0.5, -0.25, 2.0], [1.0, 1.0, 4.0]]], dtype=torch.float64)
    t = math.tan(math.radians(20))
    expected = torch.stack(
        [vertices[..., 0] / (vertices[..., 2] * t), vertices[..., 1] / (vertices[..., 2] * t), vertices[..., 2]], -1
    )
    torch.testing.assert_close(perspective(vertices, 20), expected)
    torch.testing.assert_close(perspective(vertices, torch.tensor(20.0)), expected)
    batched = perspective(vertices, torch.tensor([20.0, 30.0]))
    assert batched.shape == (2, 2, 3)
    torch.testing.assert_close(batched[0], expected[0])
    torch.testing.assert_close(orthogonal(vertices, 2.0), vertices * torch.tensor([2.0, 2.0, 1.0]))
    angle = torch.tensor([25.0, 35.0], dtype=torch.float64, requires_grad=True)
    vertices = vertices.expand(2, -1, -1).clone().requires_grad_()
    assert torch.autograd.gradcheck(perspective, (vertices, angle))
    with pytest.raises(ValueError, match="vertices"):
        perspective(torch.ones(2, 3))
    with pytest.raises(ValueError, match="angle"):
        perspective(vertices, torch.ones(2, 2))


def test_look_at_rejects_bad_input():
    vertices = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="eye"):
        look_at(vertices, (0, 0))
    with pytest.raises(ValueError, match="eye"):
        look_at(vertices, torch.zeros(3, 3))
    with pytest.raises(TypeError, match="eye"):
        look_at(vertices, "camera")
    with pytest.raises(ValueError, match="vertices"):
        look_at(torch.randn(4, 3), (0, 0, -1))


def test_look_at_module():
    vertices, faces = shapes.icosphere(1)
    mesh = Mesh(vertices, faces, texture_res=2)
    camera = LookAt()
    torch.testing.assert_close(camera.eyes, torch.tensor([0.0, 0.0, DEFAULT_EYE]))
    out = camera(mesh)
    assert isinstance(out, Mesh) and out.faces is mesh.faces and out.textures is mesh.textures
    assert out.texture_res == 2
    torch.testing.assert_close(out.vertices, perspective(look_at(mesh.vertices, camera.eyes), 30))

    camera.set_eyes_from_angles(torch.tensor([2.0, 3.0]), torch.tensor([10.0, 20.0]), torch.tensor([0.0, 45.0]))
    assert camera.eyes.shape == (2, 3) and camera(mesh).batch_size == 2
    camera.set_eyes([0.0, 1.0, -2.0])
    assert camera.eyes == [0.0, 1.0, -2.0]
    ortho = LookAt(perspective=False, viewing_scale=0.5, eye=(0, 0, -3))
    torch.testing.assert_close(ortho(mesh).vertices, orthogonal(look_at(mesh.vertices, (0, 0, -3)), 0.5))
    with pytest.raises(NotImplementedError):
        Transform()(mesh)
    with pytest.raises(TypeError, match="mesh"):
        camera(mesh.vertices)


def test_camera_pose_gradients_reach_distance_angles_and_view_angle():
    vertices, faces = shapes.icosphere(1)
    mesh = Mesh(vertices, faces)
    pose = torch.tensor([[3.0, 20.0, 30.0, 25.0], [4.0, -10.0, 5.0, 15.0]], dtype=torch.float64, requires_grad=True)
    camera = LookAt(viewing_angle=pose[:, 3])
    camera.set_eyes_from_angles(pose[:, 0], pose[:, 1], pose[:, 2])
    out = camera(Mesh(mesh.vertices.double(), faces))
    out.vertices[..., :2].pow(2).sum().backward()
    assert torch.isfinite(pose.grad).all() and (pose.grad != 0).all()

    def transform(p):
        eyes = get_points_from_angles(p[:, 0], p[:, 1], p[:, 2])
        return perspective(look_at(mesh.vertices.double()[:, :6], eyes), p[:, 3])

    assert torch.autograd.gradcheck(transform, (pose.detach().requires_grad_(),))


def test_look_module_needs_no_up():
    vertices, faces = shapes.cube()
    mesh = Mesh(vertices * 0.5, faces)
    out = Look()(mesh)
    torch.testing.assert_close(out.vertices, LookAt()(mesh).vertices)
    out = Look(camera_direction=(1, 0, 0), eye=(-3, 0, 0))(mesh)
    assert (out.vertices[..., 2] > 0).all()


def test_projection_matches_spec_formula():
    f, c = 300.0, 256.0
    P = np.array([[[f, 0, c, 0.1], [0, f, c, -0.2], [0, 0, 1, 0.0]]])
    dist = torch.tensor([0.1, -0.05, 0.01, 0.02, 0.003], dtype=torch.float64)
    vertices = torch.tensor([[[0.2, -0.1, 2.0], [-0.3, 0.4, 3.0], [0.0, 0.0, 1.5]]], dtype=torch.float64)
    out = Projection(P, dist, orig_size=512)(Mesh(vertices, torch.tensor([[0, 1, 2]]))).vertices

    v = np.concatenate([vertices[0].numpy(), np.ones((3, 1))], 1) @ P[0].T
    x, y, z = v[:, 0] / (v[:, 2] + 1e-5), v[:, 1] / (v[:, 2] + 1e-5), v[:, 2]
    k1, k2, p1, p2, k3 = dist.numpy()
    r2 = x**2 + y**2
    radial = 1 + k1 * r2 + k2 * r2**2 + k3 * r2**3
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x**2)
    yd = y * radial + p1 * (r2 + 2 * y**2) + 2 * p2 * x * y
    expected = np.stack([2 * (xd - 256) / 512, 2 * (yd - 256) / 512, z], 1)
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-12, atol=1e-12)

    # without distortion, larger world y gives larger output y (no flip)
    plain = Projection(torch.from_numpy(P).float())
    up, down = plain.transform(torch.tensor([[[0.0, 0.5, 2.0], [0.0, -0.5, 2.0]]])).unbind(1)
    assert up[0, 1] > down[0, 1]

    Pt = torch.from_numpy(P).requires_grad_()
    vt = vertices.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda p, v: Projection(p, dist).transform(v), (Pt, vt))


def test_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="P"):
        Projection(torch.zeros(1, 4, 4))
    with pytest.raises(TypeError, match="P"):
        Projection([[1, 0, 0, 0]])
    with pytest.raises(ValueError, match="dist_coeffs"):
        Projection(torch.zeros(1, 3, 4), dist_coeffs=torch.zeros(4))
    with pytest.raises(ValueError, match="orig_size"):
        Projection(torch.zeros(1, 3, 4), orig_size=0)


@pytest.mark.parametrize(
    "builder", [lambda: shapes.icosphere(2), shapes.cube, shapes.uv_sphere, lambda: shapes.torus(0.6, 0.25)]
)
def test_front_faces_are_clockwise_on_screen(builder):
    vertices, faces = builder()
    mesh = Mesh(vertices * 0.8, faces)
    eye = torch.tensor([0.0, 0.0, DEFAULT_EYE])
    screen = LookAt(eye=eye)(mesh).face_vertices[0]
    x, y = screen[..., 0], screen[..., 1]
    cross = (x[:, 1] - x[:, 0]) * (y[:, 2] - y[:, 0]) - (y[:, 1] - y[:, 0]) * (x[:, 2] - x[:, 0])
    centroids = mesh.face_vertices[0].mean(1)
    facing = (face_normals(mesh.vertices, mesh.faces)[0] * (eye - centroids)).sum(-1)
    front, back = facing > 1e-4, facing < -1e-4
    assert front.any() and back.any()
    assert (cross[front] < 0).all() and (cross[back] > 0).all()


@pytest.mark.gpu
def test_pipeline_runs_on_cuda():
    from relaxops.render.lighting import Lighting
    from relaxops.render.losses import FlattenLoss, LaplacianLoss, voxelize

    vertices, faces = shapes.icosphere(2)
    vertices = (vertices * 0.4).cuda().requires_grad_()
    mesh = Lighting()(Mesh(vertices, faces.cuda(), texture_type="vertex"))
    camera = LookAt(viewing_angle=torch.tensor([20.0, 25.0], device="cuda"))
    camera.set_eyes_from_angles(torch.tensor([2.7, 3.0], device="cuda"), 30.0, torch.tensor([0.0, 45.0], device="cuda"))
    out = camera(mesh)
    assert out.device.type == "cuda" and out.batch_size == 2
    loss = out.face_vertices.square().mean() + LaplacianLoss(vertices, faces)(vertices[None]).sum()
    loss = loss + FlattenLoss(faces).cuda()(vertices[None]).sum()
    loss.backward()
    assert vertices.grad.isfinite().all()
    assert voxelize(mesh.face_vertices.detach(), 32).device.type == "cuda"
