"""GenDR's distributions x T-conorms on camera-pose optimisation (thesis Fig. 5.5; docs/experiments.md).

The set-up is that of the GenDR code's camera experiment (docs/math/render.md §6.4). Ground-truth cameras look at
the object from a distance 2.5 + 1.5 U, elevation and azimuth 60 N(0, 1) degrees each, a half field of view of 20
degrees; the targets are hard-rendered silhouettes. The object is first rotated into each ground-truth camera's
frame, so the optimised camera, a pose (distance, elevation, azimuth, half field of view), renders the target at
elevation = azimuth = 0 and the true distance and field of view. Every ground-truth camera is paired with one
initial pose per band of angle error (15-35, 35-55 and 55-75 degrees): a uniform random direction in the
(elevation, azimuth) plane at an angle uniform in the band, a distance 2 + 8 U, a field of view 10 + 20 U. All
pairs are optimised side by side as one batch through one GenDR renderer: the soft IoU loss summed over the
batch, Adam (betas 0.5, 0.99), tau decaying log-linearly from 1e-1 to 1e-7 over the steps. A pose succeeds when
its final angle error sqrt(elevation^2 + azimuth^2) is below 3 degrees (the thesis) or 5 degrees (the code); the
metric is the fraction of pairs that succeed, at the better learning rate of the grid.

``paper`` scale: the thesis' teapot (``--data DIR`` holding ``teapot.obj``), 64x64, 200 ground-truth cameras x 3
bands = 600 pairs, 1000 steps, learning rates 0.1 and 0.3, every distribution of ``gendr.DISTRIBUTIONS`` plain and
squared x every aggregation of ``gendr.AGGREGATIONS``. ``small``: the render demo's procedural box with a ball
(scaled to fill about a quarter of the view), 32x32, 6 cameras x 3 bands = 18 pairs, 400 steps (the same tau
schedule compressed) at a learning rate of 0.3, 4 distributions x 3 T-conorms. Adam moves an angle by about the
learning rate per step, and only the first half of the steps has a useful tau (1e-1 down to about 1e-4; below it,
the few pixels near an edge that still have a gradient make the poses jitter): about 60 degrees in 200 steps here,
300 in the code's 1000 steps, so the farthest band is mostly out of reach at this scale.
"""

from __future__ import annotations

import math
import os

import torch

from ..render import LookAt, Mesh, Renderer, get_points_from_angles, iou_loss, load_obj, look_at
from . import gendr
from .runner import Record, progress, step, summarize

BANDS = ((15.0, 35.0), (35.0, 55.0), (55.0, 75.0))  # initial angle errors in degrees
THRESHOLDS = (3.0, 5.0)  # success: the thesis' threshold, the GenDR code's
VIEWING_ANGLE = 20.0  # the ground-truth half field of view in degrees
TAU_RANGE = (1e-1, 1e-7)
PROCEDURAL_SCALE = 1.6  # the render demo's object (0.6 long) made to fill a quarter of the 20-degree view

SCALES = {
    "smoke": dict(mesh="procedural", distributions=["logistic"], squared=[False],
                  aggregations=["probabilistic", "max"], lrs=[0.3], cameras=1, size=16, steps=4, seeds=1),
    "small": dict(mesh="procedural", distributions=["uniform", "gaussian", "logistic", "gamma_rev"], squared=[False],
                  aggregations=["max", "probabilistic", "yager_2"], lrs=[0.3], cameras=6, size=32, steps=400,
                  seeds=1),
    "paper": dict(mesh="teapot.obj", distributions=gendr.DISTRIBUTIONS, squared=[False, True],
                  aggregations=list(gendr.AGGREGATIONS), lrs=[0.1, 0.3], cameras=200, size=64, steps=1000, seeds=1),
}  # fmt: skip
METRICS = tuple(f"success_{t:g}" for t in THRESHOLDS)


def object_mesh(cfg: dict, data):
    """(vertices [V, 3], faces [F, 3]): the procedural object scaled by PROCEDURAL_SCALE, or ``cfg["mesh"]`` under
    ``data``."""
    if cfg["mesh"] == "procedural":
        v, f = gendr.target_mesh(cfg, data)
        return v * PROCEDURAL_SCALE, f
    path = os.path.join(data, cfg["mesh"]) if data else None
    if path is None or not os.path.isfile(path):
        raise FileNotFoundError(
            f"pose: the mesh {cfg['mesh']!r} was not found (looked for {path or 'it: no --data DIR given'}); the "
            "thesis' teapot is the teapot.obj that the GenDR code's camera experiment reads (the Neural 3D Mesh "
            "Renderer's examples/data/teapot.obj, 1292 vertices, 2464 faces): put it in DIR and pass --data DIR"
        )
    v, f = load_obj(path)[:2]
    return v.float(), f.long()


def tau_schedule(steps: int) -> list[float]:
    """tau of each step: log-linear from 1e-1 at the first step to 1e-7 at the last."""
    if steps < 2:
        raise ValueError(f"steps: need at least 2 for the tau schedule, got {steps}")
    start, end = (math.log10(t) for t in TAU_RANGE)
    return [10 ** (start + (end - start) * i / (steps - 1)) for i in range(steps)]


def angle_error(poses: torch.Tensor) -> torch.Tensor:
    """The angle error in degrees of poses ``[N, 4]`` (distance, elevation, azimuth, field of view): the optimum
    is elevation = azimuth = 0, the error sqrt(elevation^2 + azimuth^2) as in the GenDR code."""
    return torch.hypot(poses[:, 1], poses[:, 2])


def sample_cameras(n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` ground-truth poses ``[n, 4]``: distance 2.5 + 1.5 U, elevation and azimuth 60 N(0, 1), angle 20."""
    return torch.stack(
        [
            2.5 + 1.5 * torch.rand(n, generator=gen),
            60 * torch.randn(n, generator=gen),
            60 * torch.randn(n, generator=gen),
            torch.full((n,), VIEWING_ANGLE),
        ],
        1,
    )


def sample_starts(n: int, band: tuple[float, float], gen: torch.Generator) -> torch.Tensor:
    """``n`` initial poses ``[n, 4]`` whose angle error is uniform in ``band``: a random direction in the
    (elevation, azimuth) plane scaled to that angle; distance 2 + 8 U, field of view 10 + 20 U."""
    direction = torch.randn(n, 2, generator=gen)
    direction = direction / direction.norm(dim=1, keepdim=True)
    lo, hi = band
    angle = lo + (hi - lo) * torch.rand(n, generator=gen)
    return torch.cat(
        [
            2 + 8 * torch.rand(n, 1, generator=gen),
            direction * angle[:, None],
            10 + 20 * torch.rand(n, 1, generator=gen),
        ],
        1,
    )


def render(renderer, vertices: torch.Tensor, faces: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """Silhouettes ``[N, H, W]`` of vertices ``[N, V, 3]`` seen from poses ``[N, 4]`` (the camera looks at the
    origin from the eye at (distance, elevation, azimuth), perspective with the pose's half field of view)."""
    n = poses.shape[0]
    eyes = get_points_from_angles(poses[:, 0], poses[:, 1], poses[:, 2])
    mesh = Mesh(vertices.expand(n, -1, -1), faces[None].expand(n, -1, -1))
    return renderer(LookAt(viewing_angle=poses[:, 3], eye=eyes)(mesh))[:, 3]


def problem(cfg: dict, vertices: torch.Tensor, faces: torch.Tensor, seed: int):
    """The pairs of a seed: (the object rotated into each pair's ground-truth camera frame [N, V, 3], the targets
    [N, H, W], the initial poses [N, 4]), N = cameras x bands, band by band; every camera in each band."""
    gen = torch.Generator().manual_seed(seed)
    truth = sample_cameras(cfg["cameras"], gen)
    starts = torch.cat([sample_starts(cfg["cameras"], band, gen) for band in BANDS])
    truth = truth.repeat(len(BANDS), 1)
    with torch.no_grad():
        targets = render(gendr.hard_renderer(cfg), vertices[None], faces, truth)
        # only the rotation of the true camera: its eye seen from the rotated object is at elevation = azimuth = 0
        eyes = get_points_from_angles(truth[:, 0], truth[:, 1], truth[:, 2])
        rotated = look_at(vertices[None].expand(len(truth), -1, -1), eyes, only_rotate=True)
    return rotated, targets, starts


def soft_renderer(cfg: dict, distribution: str, squared: bool, aggregation: str) -> Renderer:
    t_conorm, p = gendr.AGGREGATIONS[aggregation]
    return Renderer(
        image_size=cfg["size"], dist_func=distribution, dist_scale=TAU_RANGE[0], dist_squared=squared,
        dist_shape=0.5 if distribution.startswith("gamma") else None, dist_eps=100, aggr_alpha_func=t_conorm,
        aggr_alpha_t_conorm_p=p, aggr_rgb_func="hard",
    )  # fmt: skip


def fit(cfg: dict, rotated, faces, targets, starts, renderer: Renderer, lr: float) -> torch.Tensor:
    """The final poses ``[N, 4]`` after optimising all pairs as one batch (each pair's loss and Adam's update
    depend on that pair only). A non-finite loss stops the run, as in the GenDR code; its poses count as they are
    (NaN poses fail)."""
    poses = torch.nn.Parameter(starts.clone())
    opt = torch.optim.Adam([poses], lr=lr, betas=(0.5, 0.99))
    for tau in tau_schedule(cfg["steps"]):
        renderer.dist_scale = tau
        loss = iou_loss(render(renderer, rotated, faces, poses), targets, reduction="sum")
        if not torch.isfinite(loss):
            break
        step(opt, loss)
    return poses.detach()


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    vertices, faces = object_mesh(cfg, data)
    grid = [
        (d, s, a, lr)
        for d in cfg["distributions"]
        for s in cfg["squared"]
        for a in cfg["aggregations"]
        for lr in cfg["lrs"]
    ]
    bar = progress(len(seeds) * len(grid), "pose")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small images: one thread per process does not wait for the others
    try:
        for seed in seeds:
            rotated, targets, starts = problem(cfg, vertices, faces, seed)
            for distribution, squared, aggregation, lr in grid:
                bar.set_postfix(dist=distribution, aggr=aggregation, lr=lr)
                renderer = soft_renderer(cfg, distribution, squared, aggregation)
                error = angle_error(fit(cfg, rotated, faces, targets, starts, renderer, lr))
                error = torch.nan_to_num(error, nan=math.inf)
                row = dict(
                    distribution=distribution + ("_sq" if squared else ""), aggregation=aggregation, lr=lr, seed=seed
                )
                for metric, t in zip(METRICS, THRESHOLDS):
                    row[metric] = (error < t).double().mean().item()
                    row[metric + "_per_band"] = [(e < t).double().mean().item() for e in error.chunk(len(BANDS))]
                row["median_error_deg"] = error.median().item()
                record.add(row)
                bar.update()
    finally:
        torch.set_num_threads(threads)
        bar.close()
    per_lr = summarize(record.rows, ("distribution", "aggregation", "lr"), METRICS)
    best = {}
    for entry in per_lr:  # the better learning rate of each renderer (by the 3-degree, then the 5-degree rate)
        key = (entry["distribution"], entry["aggregation"])
        if key not in best or [entry[m] for m in METRICS] > [best[key][m] for m in METRICS]:
            best[key] = entry
    return list(best.values())


def _cells(summary: list[dict]):
    dists = list(dict.fromkeys(e["distribution"] for e in summary))
    aggrs = list(dict.fromkeys(e["aggregation"] for e in summary))
    return dists, aggrs, {(e["distribution"], e["aggregation"]): e for e in summary}


def report(summary: list[dict]) -> str:
    """Per threshold, the success rate in % per distribution (rows) and T-conorm (columns), at the better lr."""
    dists, aggrs, cell = _cells(summary)
    width = max(len(a) for a in aggrs) + 1
    lines = []
    for metric, t in zip(METRICS, THRESHOLDS):
        lines.append(f"% of poses recovered within {t:g} degrees, at the better learning rate (higher is better)")
        lines.append(f"{'':<18}" + "".join(f"{a:>{width}}" for a in aggrs))
        for d in dists:
            lines.append(f"{d:<18}" + "".join(f"{100 * cell[d, a][metric]:>{width}.1f}" for a in aggrs))
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """Fig. 5.5 in kind: heat maps of the success rate, T-conorms x distributions, one per threshold (rows) and
    for F and F_sq (columns); the colour scale spans the thesis' 0-90 %."""
    import matplotlib.pyplot as plt

    dists, aggrs, cell = _cells(summary)
    families = [[d for d in dists if d.endswith("_sq") == sq] for sq in (False, True)]
    families = [f for f in families if f]
    fig, axes = plt.subplots(
        len(THRESHOLDS), len(families), squeeze=False,
        figsize=(0.8 + 0.75 * sum(len(f) for f in families) + 1.5 * len(families), 1.6 + 0.9 * len(aggrs)),
    )  # fmt: skip
    for row, (metric, t) in enumerate(zip(METRICS, THRESHOLDS)):
        for col, family in enumerate(families):
            ax = axes[row][col]
            grid = [[100 * cell[d, a][metric] for d in family] for a in aggrs]
            image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=90, aspect="auto")
            ax.set_xticks(range(len(family)), family, rotation=45, ha="right")
            ax.set_yticks(range(len(aggrs)), aggrs)
            ax.set_title(f"within {t:g} degrees" + (", F_sq" if family[0].endswith("_sq") else ", F"), fontsize=9)
            for i, values in enumerate(grid):
                for j, value in enumerate(values):
                    color = "black" if value > 60 else "white"  # readable on the bright end of viridis
                    ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7, color=color)
            fig.colorbar(image, ax=ax, label="success (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
