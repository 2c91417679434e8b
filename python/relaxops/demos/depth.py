"""Inverse rendering from depth and normal maps: the renderer's buffers (``relaxops.render.render_buffers``).

The target is the render demo's object (a box with a ball near one end; the box flat, the ball smooth). Its depth
and normal maps (world-space vertex normals interpolated as three attributes, perspective-correct barycentrics) are
rendered with the hard buffers (the closest face's values) at SIZE x SIZE; the fits render the soft buffers
(logistic coverage, probabilistic alpha, every channel a softmax over depth with gamma 1e-3), whose gradients reach
the vertices' x and y through the barycentrics as well as through the coverage. Pixels without a face hold
BACKGROUND_DEPTH (just behind the object) and a zero normal, in the target and in the fit.

1. Pose: the camera's elevation and azimuth are recovered from one depth and normal map, starting POSE_START
   (about 50 degrees) away from POSE_TRUE, while tau decays from 1e-1 to 1e-3.
2. Shape: the sphere template of the render demo (642 vertices) is deformed to match the maps of 4 views, with
   Laplacian and flatten regularisers, tau decaying from 3e-2 to 3e-3.

Both minimise :func:`loss_of` (L1 depth and squared normal errors of the buffers as rendered and composited over
the background with their alpha) with Adam.

Printed along the way, from the hard buffers of the current fit: the mean absolute depth error over the pixels
either covers, the mean angle between the normals where both cover, the silhouette IoU; and the pose's angle error
or the shape's voxel IoU against the target (32^3 voxels, docs/math/render.md §6.2).

Before/after images go into the current directory (IMAGES): for each, the target's depth and normal rows above
the fit's, upscaled as in the render demo. Depth is drawn bright near, dark far; normals as the shading
``0.5 + 0.5 <n, LIGHT>`` of a light from the upper left front.
"""

from __future__ import annotations

import math
import os
import time

import torch

from relaxops import _backend
from relaxops.render import (
    LookAt,
    Mesh,
    cube,
    get_points_from_angles,
    icosphere,
    iou_3d,
    merge,
    render_buffers,
    voxelize,
)

from .render import DISTANCE, ELEVATION, DeformableSphere, hard_iou, strip, write_png

SIZE = 64
# the shape's views, at ELEVATION: three-quarter views (at multiples of 90 degrees two sides of the box are seen
# edge-on, and the hard target draws their degenerate faces as lines)
AZIMUTHS = [30.0, 120.0, 210.0, 300.0]
STEPS = 60
POSE_STEPS = 60
POSE_TRUE, POSE_START = (25.0, 40.0), (5.0, -5.0)
BACKGROUND_DEPTH = DISTANCE + 1.0
LIGHT = torch.tensor([-0.4, 0.6, -0.7])
HARD = dict(dist_func="hard", dist_scale=0.0, dist_eps=1, aggr_alpha_func="hard", aggr_func="hard")
IMAGES = (
    "relaxops-depth-pose-before.png",
    "relaxops-depth-pose-after.png",
    "relaxops-depth-shape-before.png",
    "relaxops-depth-shape-after.png",
)


def target_object():
    """The render demo's box with a ball, the box's corners split per face (every face of the box owns its three
    vertices), so that its vertex normals are its flat face normals: (vertices [V, 3], faces [F, 3])."""
    vb, fb = cube()
    vs, fs = icosphere(2)
    vb = (vb * torch.tensor([0.42, 0.2, 0.2]))[fb].reshape(-1, 3)
    fb = torch.arange(vb.shape[0]).view(-1, 3)
    vs = vs * 0.24 + torch.tensor([0.36, 0.1, 0.12])
    return merge([(vb, fb), (vs, fs)])


def view_buffers(vertices, faces, elevations, azimuths, **options):
    """``(alpha [n, H, W], depth [n, H, W], normals [n, 3, H, W])`` of one mesh seen from the given angles (degrees)
    at DISTANCE; ``options``: the render_buffers settings (the hard ones: HARD)."""
    elevations = torch.as_tensor(elevations, dtype=torch.float32)
    azimuths = torch.as_tensor(azimuths, dtype=torch.float32)
    n = elevations.shape[0]
    eyes = get_points_from_angles(torch.full((n,), DISTANCE), elevations, azimuths)
    mesh = Mesh(vertices[None].expand(n, -1, -1), faces[None].expand(n, -1, -1))
    normals = mesh.face_attributes(mesh.vertex_normals)  # world space: [n, F, 3, 3]
    screen = LookAt(viewing_angle=15, eye=eyes)(mesh)
    b = render_buffers(
        screen.face_vertices,
        normals,
        image_size=SIZE,
        perspective_correct=True,
        background=[0.0, 0.0, 0.0, BACKGROUND_DEPTH, 0.0, 0.0, 0.0],
        **options,
    )
    return b.alpha[:, 0], b.depth[:, 0], b.attributes


def soft_options(tau: float) -> dict:
    return dict(dist_func="logistic", dist_scale=tau, dist_eps=100, aggr_func="softmax")


def loss_of(fit, target):
    """Per-pixel L1 depth error plus squared normal error, averaged, of the soft buffers ``(alpha, depth, normals)``
    against the hard target twice: as rendered (each pixel the softmax over the faces within reach: pulls the
    surfaces to the target's depth and orientation), and composited over the background with their alpha (the
    softmax's background weight is negligible beside any face's at gamma 1e-3, so only alpha carries the silhouette:
    this term pulls the surface out of the pixels the target leaves empty)."""
    alpha, depth, normals = fit
    _, target_depth, target_normals = target

    def error(d, n):
        return (d - target_depth).abs().mean() + 0.5 * (n - target_normals).square().sum(1).mean()

    return error(depth, normals) + error(alpha * depth + (1 - alpha) * BACKGROUND_DEPTH, alpha[:, None] * normals)


def errors(fit, target) -> tuple[float, float, float]:
    """(depth MAE over the pixels either covers, mean normal angle in degrees where both cover, silhouette IoU) of
    hard buffers ``(alpha, depth, normals)``."""
    (a, d, n), (ta, td, tn) = fit, target
    either, both = (a > 0.5) | (ta > 0.5), (a > 0.5) & (ta > 0.5)
    depth = ((d - td).abs() * either).sum() / either.sum().clamp_min(1)
    cos = torch.nn.functional.cosine_similarity(n, tn, dim=1).clamp(-1, 1)
    angle = (torch.rad2deg(torch.acos(cos)) * both).sum() / both.sum().clamp_min(1)
    return depth.item(), angle.item(), hard_iou(a, ta)


def pictures(buffers, near: float, far: float):
    """Depth (1 near .. 0.2 far, 0 background) and normal shading images of hard buffers, ``[n, H, W]`` each."""
    alpha, depth, normals = buffers
    covered = alpha > 0.5
    depth_image = torch.where(covered, 1 - 0.8 * ((depth - near) / (far - near)).clamp(0, 1), 0.0)
    shade = torch.where(covered, 0.5 + 0.5 * torch.einsum("nchw,c->nhw", normals, LIGHT / LIGHT.norm()), 0.0)
    return depth_image, shade


def write_pair(path: str, target, fit, near: float, far: float) -> None:
    (td, tn), (fd, fn) = pictures(target, near, far), pictures(fit, near, far)
    write_png(path, strip(("TARGET DEPTH", td), ("FIT DEPTH", fd), ("TARGET NORMAL", tn), ("FIT NORMAL", fn)))


def recover_pose(steps: int, target_v, target_f):
    target = view_buffers(target_v, target_f, [POSE_TRUE[0]], [POSE_TRUE[1]], **HARD)
    angles = torch.nn.Parameter(torch.tensor(POSE_START))
    opt = torch.optim.Adam([angles], lr=1.5, betas=(0.5, 0.99))

    def error():
        return math.dist(angles.tolist(), POSE_TRUE)

    def hard_now():
        with torch.no_grad():
            return view_buffers(target_v, target_f, angles[:1], angles[1:], **HARD)

    near, far = target[1][target[0] > 0.5].min().item(), target[1][target[0] > 0.5].max().item()
    before = hard_now()
    d, n, iou = errors(before, target)
    print(
        f"pose: recovering (elevation, azimuth) = {POSE_TRUE} from {POSE_START} ({error():.1f} degrees away) from one "
        f"{SIZE}x{SIZE} depth + normal map, logistic tau 1e-1 -> 1e-3"
    )
    print(f"  step    0  depth error {d:.3f}  normal error {n:5.1f} deg  IoU {iou:.3f}  angle error {error():5.2f} deg")
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        tau = 10 ** (-1 - 2 * (step - 1) / max(1, steps - 1))
        fit = view_buffers(target_v, target_f, angles[:1], angles[1:], **soft_options(tau))
        loss = loss_of(fit, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps:
            now = hard_now()
            d, n, iou = errors(now, target)
            print(
                f"  step {step:4d}  tau {tau:.0e}  loss {loss.item():.4f}  depth error {d:.3f}  normal error "
                f"{n:5.1f} deg  IoU {iou:.3f}  angle error {error():5.2f} deg  ({time.perf_counter() - t0:.1f} s)"
            )
    write_pair(IMAGES[0], target, before, near, far)
    write_pair(IMAGES[1], target, now, near, far)
    return error()


def voxel_iou(vertices, faces, target_v, target_f) -> float:
    """IoU of the 32^3 solid voxelisations of the two meshes, scaled by 0.6 into the grid (|v| <= 0.48)."""
    grids = [voxelize(Mesh(v * 0.6, f).face_vertices) for v, f in ((vertices, faces), (target_v, target_f))]
    return iou_3d(*grids).item()


def fit_shape(steps: int, target_v, target_f):
    elev = [ELEVATION] * len(AZIMUTHS)
    target = view_buffers(target_v, target_f, elev, AZIMUTHS, **HARD)
    near, far = target[1][target[0] > 0.5].min().item(), target[1][target[0] > 0.5].max().item()
    model = DeformableSphere()
    opt = torch.optim.Adam(model.parameters(), lr=10**-1.5, betas=(0.5, 0.95))

    def hard_now():
        with torch.no_grad():
            v = model()
            return view_buffers(v, model.faces, elev, AZIMUTHS, **HARD), voxel_iou(v, model.faces, target_v, target_f)

    before, viou = hard_now()
    d, n, iou = errors(before, target)
    print(
        f"shape: fitting a sphere ({model.faces.shape[0]} faces) to the depth + normal maps of {len(AZIMUTHS)} views "
        f"({SIZE}x{SIZE}), logistic tau 3e-2 -> 3e-3"
    )
    print(f"  step    0  depth error {d:.3f}  normal error {n:5.1f} deg  IoU {iou:.3f}  voxel IoU {viou:.3f}")
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        tau = 3 * 10 ** (-2 - (step - 1) / max(1, steps - 1))
        v = model()
        fit = view_buffers(v, model.faces, elev, AZIMUTHS, **soft_options(tau))
        loss = loss_of(fit, target) + 0.03 * model.laplacian(v[None]).mean() + 0.0003 * model.flatten(v[None]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps:
            now, viou = hard_now()
            d, n, iou = errors(now, target)
            print(
                f"  step {step:4d}  tau {tau:.0e}  loss {loss.item():.4f}  depth error {d:.3f}  normal error "
                f"{n:5.1f} deg  IoU {iou:.3f}  voxel IoU {viou:.3f}  ({time.perf_counter() - t0:.1f} s)"
            )
    write_pair(IMAGES[2], target, before, near, far)
    write_pair(IMAGES[3], target, now, near, far)
    return viou


def main(steps=None, seed: int = 0) -> None:
    torch.manual_seed(seed)
    backend = _backend.resolve("render_buffers", "auto", torch.device("cpu"))
    print(f"relaxops depth demo (backend: {backend}, {torch.get_num_threads()} threads)")
    target_v, target_f = target_object()
    err = recover_pose(POSE_STEPS if steps is None else steps, target_v, target_f)
    viou = fit_shape(STEPS if steps is None else steps, target_v, target_f)
    print(
        f"done: pose error {err:.2f} degrees, shape voxel IoU {viou:.3f}; images in {os.getcwd()}: {', '.join(IMAGES)}"
    )
