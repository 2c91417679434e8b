"""Inverse rendering with GenDR: fit a mesh to silhouettes, then recover a camera pose from one image.

1. Shape: a target object (a box with a ball near one corner, built from procedural meshes) is rendered with the hard
   rasterizer from 8 views around it. A sphere template (642 vertices, the experiment of docs/math/render.md §6.3) is
   deformed so that its GenDR silhouettes (logistic distribution, probabilistic T-conorm) match: soft IoU loss plus
   Laplacian and flatten regularisers, Adam. The hard IoU of the current mesh against the targets is printed.
2. Pose: the target object is rendered from an unknown elevation and azimuth; starting 50 degrees away, the
   two angles are recovered by gradient descent through the renderer while tau decays from 1e-1 to 1e-3
   (the easiest setting of docs/math/render.md §6.4: about 34 degrees of initial error).

Before/after images are written as PNG files into the current directory (IMAGES): a row labelled TARGET (the
target silhouettes) above a row labelled FIT (the current mesh or pose), upscaled SCALE times.
"""

from __future__ import annotations

import math
import os
import struct
import time
import zlib

import torch

from relaxops import _backend
from relaxops.render import (
    FlattenLoss,
    LaplacianLoss,
    LookAt,
    Mesh,
    Renderer,
    cube,
    get_points_from_angles,
    icosphere,
    iou_loss,
    merge,
)

SIZE = 64
DISTANCE, ELEVATION = 2.732, 30.0
AZIMUTHS = [float(a) for a in range(0, 360, 45)]
STEPS = 100
POSE_STEPS = 100
POSE_TRUE, POSE_START = (25.0, 40.0), (10.0, 10.0)
IMAGES = (
    "relaxops-render-shape-before.png",
    "relaxops-render-shape-after.png",
    "relaxops-render-pose-before.png",
    "relaxops-render-pose-after.png",
)


def target_object():
    """A box elongated along x with a ball near one end (no mirror symmetry): (vertices [V, 3], faces [F, 3])."""
    vb, fb = cube()
    vs, fs = icosphere(2)
    vb = vb * torch.tensor([0.42, 0.2, 0.2])
    vs = vs * 0.24 + torch.tensor([0.36, 0.1, 0.12])
    return merge([(vb, fb), (vs, fs)])


def hard_renderer():
    return Renderer(
        image_size=SIZE, dist_func="hard", dist_scale=1e-4, dist_eps=1, aggr_alpha_func="hard", aggr_rgb_func="hard"
    )


def render_views(renderer, vertices, faces, elevations, azimuths):
    """Silhouettes ``[n, H, W]`` of one mesh seen from the given angles (degrees) at DISTANCE."""
    n = len(elevations) if isinstance(elevations, (list, tuple)) else elevations.shape[0]
    eyes = get_points_from_angles(
        torch.full((n,), DISTANCE),
        torch.as_tensor(elevations, dtype=torch.float32),
        torch.as_tensor(azimuths, dtype=torch.float32),
    )
    mesh = Mesh(vertices[None].expand(n, -1, -1), faces[None].expand(n, -1, -1))
    mesh = LookAt(viewing_angle=15, eye=eyes)(mesh)
    return renderer(mesh)[:, 3]


def hard_iou(pred, target):
    """Mean IoU of binary silhouettes."""
    p, t = pred > 0.5, target > 0.5
    return ((p & t).flatten(1).sum(1) / (p | t).flatten(1).sum(1).clamp_min(1)).mean().item()


class DeformableSphere(torch.nn.Module):
    """The sphere template of docs/math/render.md §6.3: every vertex moves along its own axes through a sigmoid, plus a
    centre."""

    def __init__(self):
        super().__init__()
        v0, faces = icosphere(3)
        v0 = v0 * 0.5
        self.register_buffer("faces", faces)
        self.register_buffer("base", torch.logit(v0.abs().clamp(1e-3, 1 - 1e-3)))
        self.register_buffer("sign", torch.where(v0 >= 0, 1.0, -1.0))
        self.displace = torch.nn.Parameter(torch.zeros_like(v0))
        self.center = torch.nn.Parameter(torch.zeros(1, 3))
        self.laplacian = LaplacianLoss(v0, faces)
        self.flatten = FlattenLoss(faces)

    def forward(self):
        v = torch.sigmoid(self.base + self.displace) * self.sign
        c = torch.tanh(self.center)
        return torch.relu(v) * (1 - c) - torch.relu(-v) * (1 + c) + c


def write_png(path: str, image: torch.Tensor) -> None:
    """An 8-bit greyscale PNG of ``image [H, W]`` with values in [0, 1] (zlib + CRC, no image library)."""
    h, w = image.shape
    rows = (image.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    raw = b"".join(b"\x00" + rows[i].tobytes() for i in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


# 5x7 bitmap glyphs of the row labels (1 = ink), so that the PNGs need no font or image library.
GLYPHS = {
    " ": "00000 00000 00000 00000 00000 00000 00000",
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "D": "11110 10001 10001 10001 10001 10001 11110",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110",
    "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 11001 10101 10011 10001 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110",
    "P": "11110 10001 10001 11110 10000 10000 10000",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "T": "11111 00100 00100 00100 00100 00100 00100",
}
SCALE = 3  # the PNGs are upscaled by this factor (nearest neighbour): a 64-pixel view is 192 pixels wide


def text(label: str) -> torch.Tensor:
    """``label`` (letters of GLYPHS) as a [7, 6 len - 1] image of 0/1, one blank column between letters."""
    cols = []
    for ch in label:
        rows = GLYPHS[ch].split()
        cols.append(torch.tensor([[float(b) for b in r] for r in rows]))
        cols.append(torch.zeros(7, 1))
    return torch.cat(cols[:-1], 1)


def strip(*rows) -> torch.Tensor:
    """``(label, silhouettes [n, H, W])`` rows stacked, the views side by side after a label column, with grey
    gaps; upscaled SCALE times."""
    label_w = 6 * max(len(label) for label, _ in rows) + 3
    out = []
    for label, views in rows:
        h = views.shape[1]
        tile = torch.full((h, label_w), 0.2)
        glyphs = text(label)
        top = (h - glyphs.shape[0]) // 2
        tile[top : top + glyphs.shape[0], 2 : 2 + glyphs.shape[1]] = glyphs.clamp_min(0.2)
        gap = torch.full((h, 2), 0.5)
        out.append(torch.cat([tile, gap] + [t for v in views for t in (v, gap)][:-1], 1))
        out.append(torch.full((2, out[-1].shape[1]), 0.5))
    image = torch.cat(out[:-1], 0)
    return image.repeat_interleave(SCALE, 0).repeat_interleave(SCALE, 1)


def fit_shape(steps: int, target_v, target_f):
    hard = hard_renderer()
    elev = [ELEVATION] * len(AZIMUTHS)
    targets = render_views(hard, target_v, target_f, elev, AZIMUTHS)
    model = DeformableSphere()
    soft = Renderer(image_size=SIZE, dist_func="logistic", dist_scale=10**-2.0, dist_eps=100, aggr_rgb_func="hard")
    opt = torch.optim.Adam(model.parameters(), lr=10**-1.5, betas=(0.5, 0.95))
    with torch.no_grad():
        before = render_views(hard, model(), model.faces, elev, AZIMUTHS)
    print(
        f"shape: fitting a sphere ({model.faces.shape[0]} faces) to {len(AZIMUTHS)} silhouettes "
        f"({SIZE}x{SIZE}), logistic tau = 1e-2, probabilistic"
    )
    print(f"  step    0  hard IoU {hard_iou(before, targets):.3f}")
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        v = model()
        alpha = render_views(soft, v, model.faces, elev, AZIMUTHS)
        loss = (
            iou_loss(alpha, targets) + 0.03 * model.laplacian(v[None]).mean() + 0.0003 * model.flatten(v[None]).mean()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps:
            with torch.no_grad():
                now = render_views(hard, model(), model.faces, elev, AZIMUTHS)
            print(
                f"  step {step:4d}  loss {loss.item():.4f}  hard IoU {hard_iou(now, targets):.3f}  "
                f"({time.perf_counter() - t0:.1f} s)"
            )
    write_png(IMAGES[0], strip(("TARGET", targets), ("FIT", before)))
    write_png(IMAGES[1], strip(("TARGET", targets), ("FIT", now)))
    return hard_iou(now, targets)


def recover_pose(steps: int, target_v, target_f):
    hard = hard_renderer()
    target = render_views(hard, target_v, target_f, [POSE_TRUE[0]], [POSE_TRUE[1]])
    angles = torch.nn.Parameter(torch.tensor(POSE_START))
    opt = torch.optim.Adam([angles], lr=1.5, betas=(0.5, 0.99))
    soft = Renderer(image_size=SIZE, dist_func="logistic", dist_scale=0.1, dist_eps=100, aggr_rgb_func="hard")

    def error():
        return math.dist(angles.tolist(), POSE_TRUE)

    with torch.no_grad():
        before = render_views(hard, target_v, target_f, angles[:1], angles[1:])
    print(
        f"pose: recovering (elevation, azimuth) = {POSE_TRUE} from {POSE_START} ({error():.1f} degrees away), "
        f"tau 1e-1 -> 1e-3"
    )
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        soft.dist_scale = 10 ** (-1 - 2 * (step - 1) / max(1, steps - 1))
        alpha = render_views(soft, target_v, target_f, angles[:1], angles[1:])
        loss = iou_loss(alpha, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps:
            with torch.no_grad():
                now = render_views(hard, target_v, target_f, angles[:1], angles[1:])
            print(
                f"  step {step:4d}  tau {soft.dist_scale:.0e}  hard IoU {hard_iou(now, target):.3f}  "
                f"angle error {error():5.2f} deg  ({time.perf_counter() - t0:.1f} s)"
            )
    write_png(IMAGES[2], strip(("TARGET", target), ("FIT", before)))
    write_png(IMAGES[3], strip(("TARGET", target), ("FIT", now)))
    return error()


def main(steps=None, seed: int = 0) -> None:
    torch.manual_seed(seed)
    backend = _backend.resolve("render", "auto", torch.device("cpu"))
    print(f"relaxops render demo (backend: {backend}, {torch.get_num_threads()} threads)")
    target_v, target_f = target_object()
    iou = fit_shape(STEPS if steps is None else steps, target_v, target_f)
    err = recover_pose(POSE_STEPS if steps is None else steps, target_v, target_f)
    print(f"done: shape hard IoU {iou:.3f}, pose error {err:.2f} degrees; images in {os.getcwd()}: {', '.join(IMAGES)}")
