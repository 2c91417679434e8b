"""Silhouette supervision through relaxops' differentiable rasterizer (GenDR) as the relaxed algorithm
(docs/math/algorithms.md §4.3).

The relaxed "for every pixel, for every triangle: if the pixel lies in the triangle, set it
to 1" of docs/math/algorithms.md §4.3 with the directed-distance condition is GenDR with the logistic distribution and
the probabilistic T-conorm; here that is
``relaxops.render.Renderer(dist_func="logistic", aggr_alpha_func="probabilistic")``.

The objects are tapered ellipsoids with random half-axes and taper, built as deformations of one template sphere
(an icosphere of 162 vertices and 320 faces). A CNN sees one 32x32 silhouette of the object (elevation 30, azimuth
45 degrees) and predicts the 3 x 162 vertex displacements of the template. Versions of it:

* untrained: the random initialisation (close to the template sphere);
* relaxed silhouettes: trained with the soft IoU between the relaxed silhouettes of its mesh and the true ones from
  two views (the input view and one from azimuth 135; the paper's two-view loss), plus a Laplacian smoothness
  term; it never sees the 3D shape;
* direct 3D supervision (baseline): trained with the mean squared error between its vertices and the true ones
  (the shapes share the template's vertices, so the 3D ground truth is known per vertex).

Metrics on held-out shapes: the 3D IoU of the solid voxelisations (32^3, ``relaxops.render.voxelize``), and the
IoU of hard silhouettes from two views no model was trained on (elevation 0 / azimuth 90, elevation 75 /
azimuth 0).

Scaled down from the paper's set-up (13 ShapeNet classes, 64x64 images, a 642-vertex sphere, 3 conv and 6 FC
layers, batch 2 for days on a GPU) to under a minute on a CPU: generated shapes of one family, 32x32 silhouettes,
a 162-vertex sphere, 3 conv and 2 FC layers, STEPS Adam steps at batch BATCH.

What to expect with the defaults (seed 0; about 40 s): 3D IoU 0.551 untrained (held-out views 0.630), 0.960 with
direct 3D supervision (0.969), 0.826 with the relaxed silhouettes (0.854) (seed 1: 0.536, 0.955, 0.827): two
silhouettes leave part of the shape undetermined, which the 3D supervision sees. The paper reports a mean 3D IoU of
0.5349 over ShapeNet with this relaxation (SoftRas at batch 2: 0.5455).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from tqdm import tqdm

from relaxops.render import (
    LaplacianLoss,
    LookAt,
    Mesh,
    Renderer,
    face_vertices,
    get_points_from_angles,
    iou_3d,
    iou_loss,
    voxelize,
)

from .data import random_shapes, template_sphere, train_each

SIZE = 32  # silhouette resolution
DISTANCE = 2.2  # camera distance; viewing angle 15 degrees: the object (|v| < 0.42) fills up to 90% of the image
INPUT_VIEW = (30.0, 45.0)  # (elevation, azimuth) in degrees of the CNN's input image
TRAIN_VIEWS = ((30.0, 45.0), (30.0, 135.0))  # the two views of the silhouette loss
TEST_VIEWS = ((0.0, 90.0), (75.0, 0.0))  # held-out views of the 2D metric
TRAIN_SHAPES, TEST_SHAPES = 2000, 200
STEPS = 500  # default Adam steps per trained model
BATCH = 16
LR = 1e-3
# Logistic scale of the relaxed silhouettes in normalised device coordinates (a pixel is 1/16) and the weight of
# the Laplacian term of the silhouette loss. Larger scales shrink the predicted shapes (the soft silhouette reaches
# beyond the mesh). 300-step trials, 3D IoU: smoothness 0.2 with tau 2e-2 0.72, 1e-2 0.81, 5e-3 0.83, 2e-3 0.82;
# tau 1e-2 with smoothness 0.03 0.76, 1 0.80, 3 0.74.
TAU = 5e-3
SMOOTHNESS = 0.2


class Shapes(NamedTuple):
    vertices: torch.Tensor  # [count, V, 3] world space (the template's faces)
    images: torch.Tensor  # [count, 1, SIZE, SIZE] silhouette from INPUT_VIEW
    silhouettes: torch.Tensor  # [count, len(TRAIN_VIEWS), SIZE, SIZE] targets of the silhouette loss


SOFT = dict(
    image_size=SIZE,
    dist_func="logistic",
    dist_scale=TAU,
    dist_eps=100,
    aggr_alpha_func="probabilistic",
    aggr_rgb_func="hard",
)
HARD = dict(
    image_size=SIZE, dist_func="hard", dist_scale=1e-4, dist_eps=1, aggr_alpha_func="hard", aggr_rgb_func="hard"
)


def silhouettes(renderer: Renderer, vertices: torch.Tensor, faces: torch.Tensor, views) -> torch.Tensor:
    """Silhouettes ``[B, len(views), SIZE, SIZE]`` of meshes ``vertices [B, V, 3]`` (shared ``faces [F, 3]``) from
    ``views`` ((elevation, azimuth) pairs, degrees) at DISTANCE."""
    B, V = vertices.shape[:2]
    k = len(views)
    elevation = torch.tensor([e for e, _ in views]).repeat(B)
    azimuth = torch.tensor([a for _, a in views]).repeat(B)
    eyes = get_points_from_angles(torch.full((B * k,), DISTANCE), elevation, azimuth)
    mesh = Mesh(vertices.repeat_interleave(k, 0), faces[None].expand(B * k, -1, -1))
    return renderer(LookAt(viewing_angle=15, eye=eyes)(mesh))[:, 3].view(B, k, SIZE, SIZE)


def make_shapes(count: int, template: torch.Tensor, faces: torch.Tensor, gen: torch.Generator) -> Shapes:
    vertices = random_shapes(count, template, gen)
    hard = Renderer(**HARD)
    with torch.no_grad():
        return Shapes(
            vertices, silhouettes(hard, vertices, faces, [INPUT_VIEW]), silhouettes(hard, vertices, faces, TRAIN_VIEWS)
        )


class ShapeNet(nn.Module):
    """Silhouette ``[B, 1, 32, 32]`` -> vertices ``[B, V, 3]``: the template plus predicted displacements."""

    def __init__(self, template: torch.Tensor):
        super().__init__()
        self.register_buffer("template", template)
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 5, stride=2, padding=2),
            nn.ReLU(),  # 16 x 16
            nn.Conv2d(16, 32, 5, stride=2, padding=2),
            nn.ReLU(),  # 8 x 8
            nn.Conv2d(32, 64, 5, stride=2, padding=2),
            nn.ReLU(),  # 4 x 4
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, 256),
            nn.ReLU(),
            nn.Linear(256, template.numel()),
        )
        with torch.no_grad():  # small initial displacements: the untrained model is close to the template
            self.net[-1].weight.mul_(0.1)
            self.net[-1].bias.zero_()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.template + self.net(images).view(-1, *self.template.shape)


def train(method: str, data: Shapes, faces: torch.Tensor, steps: int, seed: int) -> nn.Module:
    """``method``: "relaxed" (two-view silhouette IoU through the relaxed rasterizer) or "direct" (vertex MSE)."""
    torch.manual_seed(seed)
    model = ShapeNet(template_sphere()[0])
    laplacian = LaplacianLoss(model.template, faces)
    soft = Renderer(**SOFT)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in tqdm(range(steps), desc=f"training {method}", unit="step", leave=False, mininterval=1.0):
        idx = torch.randint(len(data.vertices), (BATCH,), generator=gen)
        v = model(data.images[idx])
        if method == "relaxed":
            alpha = silhouettes(soft, v, faces, TRAIN_VIEWS)
            loss = iou_loss(alpha, data.silhouettes[idx]) + SMOOTHNESS * laplacian(v).mean()
        else:
            loss = ((v - data.vertices[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def silhouette_iou(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean IoU of binary silhouettes (``> 0.5``), per image, any shape ``[..., H, W]``."""
    p, t = (pred > 0.5).flatten(-2), (target > 0.5).flatten(-2)
    return ((p & t).sum(-1) / (p | t).sum(-1).clamp_min(1)).float().mean().item()


def shape_metrics(pred: torch.Tensor, true: torch.Tensor, faces: torch.Tensor) -> tuple[float, float]:
    """(mean 3D IoU at 32^3, mean hard-silhouette IoU from TEST_VIEWS) of meshes ``pred [B, V, 3]`` against
    ``true [B, V, 3]`` (same faces)."""
    voxels = [voxelize(face_vertices(v, faces[None].expand(len(v), -1, -1)), 32) for v in (pred, true)]
    hard = Renderer(**HARD)
    iou2d = silhouette_iou(silhouettes(hard, pred, faces, TEST_VIEWS), silhouettes(hard, true, faces, TEST_VIEWS))
    return iou_3d(*voxels).mean().item(), iou2d


@torch.no_grad()
def evaluate(model: nn.Module, data: Shapes, faces: torch.Tensor) -> tuple[float, float]:
    return shape_metrics(model(data.images), data.vertices, faces)


def main(steps=None, seed: int = 0) -> dict:
    steps = STEPS if steps is None else steps
    template, faces = template_sphere()
    gen = torch.Generator().manual_seed(seed)
    train_data, test_data = (make_shapes(n, template, faces, gen) for n in (TRAIN_SHAPES, TEST_SHAPES))
    print(
        f"silhouette: tapered ellipsoids as deformed spheres ({template.shape[0]} vertices, {faces.shape[0]} faces) "
        f"from one {SIZE}x{SIZE} silhouette; relaxed silhouettes: GenDR logistic tau {TAU:g}, probabilistic, "
        f"{len(TRAIN_VIEWS)} views; {steps} steps x {BATCH} shapes per model"
    )
    torch.manual_seed(seed)
    rows = {"untrained": evaluate(ShapeNet(template), test_data, faces)}
    train_each(
        rows,
        ("direct", "relaxed"),
        lambda method: train(method, train_data, faces, steps, seed),
        lambda model: evaluate(model, test_data, faces),
    )
    names = {
        "untrained": "untrained CNN (about the sphere)",
        "direct": "direct: MSE on the 3D vertices",
        "relaxed": "relaxed silhouettes (2 views, 2D only)",
    }
    print(f"test shapes ({TEST_SHAPES}): 3D IoU of the voxelised meshes, IoU of silhouettes from 2 held-out views")
    for key, (iou3d, iou2d) in rows.items():
        print(f"  {names[key]:<40} 3D IoU {iou3d:.3f}   held-out silhouette IoU {iou2d:.3f}")
    return rows
