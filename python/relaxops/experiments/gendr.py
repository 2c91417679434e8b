"""GenDR's distributions x T-conorms on shape optimisation (thesis Fig. 5.4; docs/experiments.md).

A sphere mesh (642 vertices) is deformed so that its soft silhouettes match hard-rendered target silhouettes: IoU
loss plus 0.03 Laplacian and 0.0003 flatten regularisers, Adam (betas 0.5, 0.95) at 10^-1.5, a fixed number of
steps, once per renderer: an occlusion distribution (the gamma families with shape 0.5), optionally squared
(``F_sq``), a T-conorm aggregating the faces' coverages, and a temperature tau from a grid. The metric is the
thesis': the lowest IoU loss (1 - IoU) of the hard rendering of the mesh over the steps (checked every
``eval_every`` steps), for the best tau; lower is better.

``paper`` scale: the thesis' airplane (``--data DIR`` holding ``airplane.obj``), 24 views at 64x64, 100 steps, tau
= 10^(-0.1 n) for n = 0..80, the distributions and aggregations below (the T-conorms and the "average" baseline)
with and without squaring, five runs at elevations -60, -30, 0, 30 and 60 degrees (the seeds). ``small``: a
procedural box with a ball (the render demo's object), 4 views at 24x24, 30 steps, 6 distributions x 5 T-conorms,
tau in {0.1, 0.01, 0.001}, elevation 30; ``--set aggregations=...`` adds "average" there.
"""

from __future__ import annotations

import math
import os

import torch

from ..demos import render as demo
from ..render import Renderer, iou_loss, load_obj
from .runner import Record, progress, step, summarize

# aggregation name -> (T-conorm, its parameter p); "average" is the thesis' baseline, SoftRas' mean coverage (not a
# T-conorm, docs/math/render.md §3.4)
AGGREGATIONS = {
    "max": ("max", None),
    "probabilistic": ("probabilistic", None),
    "einstein": ("einstein", None),
    "yager_0.5": ("yager", 0.5),
    "yager_2": ("yager", 2.0),
    "yager_4": ("yager", 4.0),
    "aczel_alsina_2": ("aczel_alsina", 2.0),
    "dombi_0.5": ("dombi", 0.5),
    "dombi_2": ("dombi", 2.0),
    "schweizer_sklar_-2": ("schweizer_sklar", -2.0),
    "average": ("average", None),
}
DISTRIBUTIONS = [
    "uniform", "cubic_hermite", "wigner_semicircle", "gaussian", "laplace", "logistic", "gudermannian", "cauchy",
    "reciprocal", "gumbel_max", "gumbel_min", "exponential", "exponential_rev", "gamma", "gamma_rev", "levy",
    "levy_rev",
]  # fmt: skip
ELEVATIONS = [-60.0, -30.0, 0.0, 30.0, 60.0]  # the paper's five runs, by seed

SCALES = {
    "smoke": dict(mesh="procedural", distributions=["logistic", "gamma_rev"], squared=[False],
                  aggregations=["probabilistic", "max"], taus=[1e-2], views=2, size=16, steps=3, eval_every=1,
                  lr=10**-1.5, seeds=1),
    "small": dict(mesh="procedural", distributions=["uniform", "gaussian", "logistic", "cauchy", "gumbel_min",
                  "gamma_rev"], squared=[False], aggregations=["max", "probabilistic", "einstein", "yager_2",
                  "dombi_0.5"], taus=[1e-1, 1e-2, 1e-3], views=4, size=24, steps=30, eval_every=3, lr=10**-1.5,
                  seeds=1),
    "paper": dict(mesh="airplane.obj", distributions=DISTRIBUTIONS, squared=[False, True],
                  aggregations=list(AGGREGATIONS), taus=[10 ** (-0.1 * n) for n in range(81)], views=24, size=64,
                  steps=100, eval_every=1, lr=10**-1.5, seeds=5),
}  # fmt: skip
METRICS = ("iou_loss",)


def target_mesh(cfg: dict, data):
    """(vertices [V, 3], faces [F, 3]) of the target: the procedural object, or ``cfg["mesh"]`` under ``data``."""
    if cfg["mesh"] == "procedural":
        return demo.target_object()
    path = os.path.join(data, cfg["mesh"]) if data else None
    if path is None or not os.path.isfile(path):
        raise FileNotFoundError(
            f"gendr: the target mesh {cfg['mesh']!r} was not found (looked for {path or 'it: no --data DIR given'}); "
            "the thesis' airplane is airplane.obj of the GenDR code's data folder: put it in DIR and pass --data DIR"
        )
    v, f = load_obj(path)[:2]
    return v.float(), f.long()


def views(renderer, vertices, faces, elevation: float, azimuths: list[float]):
    return demo.render_views(renderer, vertices, faces, [elevation] * len(azimuths), azimuths)


def fit(cfg: dict, targets, elevation: float, azimuths, distribution: str, squared: bool, aggregation: str, tau):
    """The lowest hard IoU loss of the deformed sphere over the steps with one renderer."""
    t_conorm, p = AGGREGATIONS[aggregation]
    soft = Renderer(
        image_size=cfg["size"], dist_func=distribution, dist_scale=tau, dist_squared=squared,
        dist_shape=0.5 if distribution.startswith("gamma") else None, dist_eps=100, aggr_alpha_func=t_conorm,
        aggr_alpha_t_conorm_p=p, aggr_rgb_func="hard",
    )  # fmt: skip
    hard = hard_renderer(cfg)
    model = demo.DeformableSphere()
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.5, 0.95))
    best = math.inf
    for i in range(cfg["steps"] + 1):
        if i % cfg["eval_every"] == 0 or i == cfg["steps"]:
            with torch.no_grad():
                best = min(best, 1 - demo.hard_iou(views(hard, model(), model.faces, elevation, azimuths), targets))
        if i == cfg["steps"]:
            break
        v = model()
        alpha = views(soft, v, model.faces, elevation, azimuths)
        loss = (
            iou_loss(alpha, targets) + 0.03 * model.laplacian(v[None]).mean() + 0.0003 * model.flatten(v[None]).mean()
        )
        if not torch.isfinite(loss):
            break  # a renderer whose loss is not finite keeps its best so far
        step(opt, loss)
    return best


def hard_renderer(cfg: dict) -> Renderer:
    return Renderer(
        image_size=cfg["size"], dist_func="hard", dist_scale=1e-4, dist_eps=1, aggr_alpha_func="hard",
        aggr_rgb_func="hard",
    )  # fmt: skip


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    vertices, faces = target_mesh(cfg, data)
    azimuths = [-360.0 * i / cfg["views"] for i in range(cfg["views"])]
    grid = [
        (d, s, a, t)
        for d in cfg["distributions"]
        for s in cfg["squared"]
        for a in cfg["aggregations"]
        for t in cfg["taus"]
    ]
    bar = progress(len(seeds) * len(grid), "gendr")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small images: one thread per process does not wait for the others
    try:
        for seed in seeds:
            elevation = ELEVATIONS[seed % len(ELEVATIONS)] if len(seeds) > 1 else 30.0
            torch.manual_seed(seed)
            with torch.no_grad():
                targets = views(hard_renderer(cfg), vertices, faces, elevation, azimuths)
            for distribution, squared, aggregation, tau in grid:
                bar.set_postfix(dist=distribution, aggr=aggregation, tau=f"{tau:.0e}")
                loss = fit(cfg, targets, elevation, azimuths, distribution, squared, aggregation, tau)
                record.add(
                    dict(
                        distribution=distribution + ("_sq" if squared else ""),
                        aggregation=aggregation,
                        tau=tau,
                        seed=seed,
                        elevation=elevation,
                        iou_loss=loss,
                    )
                )
                bar.update()
    finally:
        torch.set_num_threads(threads)
        bar.close()
    per_tau = summarize(record.rows, ("distribution", "aggregation", "tau"), METRICS)
    best = {}
    for entry in per_tau:  # the best tau of each renderer (lowest mean over the seeds)
        key = (entry["distribution"], entry["aggregation"])
        if key not in best or entry["iou_loss"] < best[key]["iou_loss"]:
            best[key] = entry
    return list(best.values())


def report(summary: list[dict]) -> str:
    """The best-tau IoU loss per distribution (rows) and T-conorm (columns), lower is better."""
    dists = list(dict.fromkeys(e["distribution"] for e in summary))
    aggrs = list(dict.fromkeys(e["aggregation"] for e in summary))
    cell = {(e["distribution"], e["aggregation"]): e["iou_loss"] for e in summary}
    width = max(len(a) for a in aggrs) + 1
    lines = ["best IoU loss of the hard rendering over the steps, at the best tau (lower is better)"]
    lines.append(f"{'':<18}" + "".join(f"{a:>{width}}" for a in aggrs))
    for d in dists:
        lines.append(f"{d:<18}" + "".join(f"{cell[d, a]:>{width}.4f}" for a in aggrs))
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """Fig. 5.4 in kind: a heat map of the best-tau IoU loss, distributions x T-conorms."""
    import matplotlib.pyplot as plt

    dists = list(dict.fromkeys(e["distribution"] for e in summary))
    aggrs = list(dict.fromkeys(e["aggregation"] for e in summary))
    cell = {(e["distribution"], e["aggregation"]): e["iou_loss"] for e in summary}
    grid = [[cell[d, a] for d in dists] for a in aggrs]
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(dists), 1.2 + 0.45 * len(aggrs)))
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(dists)), dists, rotation=45, ha="right")
    ax.set_yticks(range(len(aggrs)), aggrs)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.3f}", ha="center", va="center", fontsize=7, color="white")
    fig.colorbar(image, label="IoU loss (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
