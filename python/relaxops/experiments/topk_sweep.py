"""The top-k loss's mixing weight alpha and preselection size m (thesis Fig. 4.3, in kind; docs/experiments.md).

The thesis fine-tunes the head of ResNeXt-101 WSL on ImageNet-1K embeddings with the SinkhornSort ranker (5 runs)
and plots top-1 and top-5 accuracy against alpha in P_K = [1 - alpha, 0, 0, 0, alpha] at m = 16 (left panel) and
against the number m of differentiably ranked scores at alpha = 0.75 (right panel). It prints no numbers, only
findings: raising alpha improves top-5, and top-1 up to about alpha = 0.6; top-1 collapses at alpha = 1, where
top-5 is best (with SinkhornSort); m between 10 and 40 changes little. Those findings are the paper column here.

Ours runs ``topk``'s task, model and training loop (``relaxops.experiments.topk``: the same initialisation and
batches for every configuration of a seed) with ``relaxops.TopKCrossEntropyLoss(p_k, method="ot_sort", m=m)``
(the optimal-transport sort is SinkhornSort; inverse temperature 100 as in ``topk``), top-1 part ``'sm'``: at
alpha = 0 the loss is softmax cross-entropy over the m preselected scores. The ImageNet embeddings are not
available here, so ``paper`` scale is ``topk``'s CIFAR-100 set-up (``--data DIR``, ResNet-18 from scratch, 200
epochs) and ``small`` scale its two-digit MNIST numbers (100 classes, an MLP). m must exceed K = 5 (with the label
forced into the preselection, m = K would make the top-5 term always 1), so the sweep starts at 6; m = 100, all
classes, means no preselection.
"""

from __future__ import annotations

import torch

import relaxops

from . import topk
from .runner import Record, format_table, progress, summarize

CLASSES = 100  # of both tasks; m = CLASSES ranks every score
K = 5

SCALES = {
    "smoke": dict(dataset="mnist5k", model="mlp", alphas=[0.0, 1.0], m=16, alpha=0.75, ms=[6], train=500, test=200,
                  hidden=32, batch=50, steps=5, lr=2e-3, inverse_temperature=100.0, seeds=1),
    "small": dict(dataset="mnist5k", model="mlp", alphas=[0.0, 0.25, 0.5, 0.75, 1.0], m=16, alpha=0.75,
                  ms=[6, 10, 20, 40], train=40_000, test=5_000, hidden=256, batch=200, steps=2000, lr=1e-3,
                  inverse_temperature=100.0, seeds=1),
    "paper": dict(dataset="cifar100", model="resnet18", alphas=[0.0, 0.25, 0.5, 0.75, 1.0], m=16, alpha=0.75,
                  ms=[6, 10, 20, 40, 100], batch=100, steps=100_000, lr=1e-3, inverse_temperature=100.0, seeds=2),
}  # fmt: skip
METRICS = topk.METRICS


def p_k(alpha: float) -> list[float]:
    """P_K = [1 - alpha, 0, 0, 0, alpha]: top-1 with weight 1 - alpha, top-5 with weight alpha."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha: must be a number in [0, 1], got {alpha!r}")
    return [1.0 - alpha, 0.0, 0.0, 0.0, float(alpha)]


def configurations(cfg: dict) -> list[tuple[float, int]]:
    """The (alpha, m) pairs: every alpha at ``cfg["m"]``, then ``cfg["alpha"]`` at every m not yet among them."""
    for m in [cfg["m"], *cfg["ms"]]:
        if isinstance(m, bool) or not isinstance(m, int) or not K < m <= CLASSES:
            raise ValueError(f"m, ms: each m must be an integer in ({K}, {CLASSES}], got {m!r}")
    pairs = [(float(a), cfg["m"]) for a in cfg["alphas"]]
    pairs += [(float(cfg["alpha"]), m) for m in cfg["ms"] if (float(cfg["alpha"]), m) not in pairs]
    for alpha, _ in pairs:
        p_k(alpha)
    return pairs


def make_loss(alpha: float, m: int, inverse_temperature: float):
    """The top-k loss with the optimal-transport sort (SinkhornSort) at P_K(alpha), ranking the top m scores."""
    return relaxops.TopKCrossEntropyLoss(
        p_k(alpha), "ot_sort", "cauchy", inverse_temperature, m=None if m == CLASSES else m
    )


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    pairs = configurations(cfg)
    bar = progress(len(seeds) * len(pairs) * cfg["steps"], "top-k sweep")
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        (images, classes), test = topk.make_data(cfg, data, gen)
        torch.manual_seed(seed)
        init = topk.make_model(cfg, images[0].numel())
        for alpha, m in pairs:
            bar.set_postfix(alpha=alpha, m=m, seed=seed)
            loss_fn = make_loss(alpha, m, cfg["inverse_temperature"])
            model = topk.train(cfg, init, loss_fn, images, classes, seed, bar)
            top1, top5 = topk.accuracy(model, *test)
            record.add(dict(alpha=alpha, m=m, seed=seed, top1=top1, top5=top5))
    bar.close()
    summary = summarize(record.rows, ("alpha", "m"), METRICS, paper=_finding)
    for entry in summary:  # which panel of the figure the entry belongs to (both for alpha = 0.75, m = 16)
        entry["alpha_sweep"] = entry["m"] == cfg["m"]
        entry["m_sweep"] = entry["alpha"] == float(cfg["alpha"])
    return summary


def _finding(entry: dict):
    """The thesis' finding for this configuration (its figure has no numbers)."""
    alpha, m = entry["alpha"], entry["m"]
    if m == 16:
        if alpha == 0:
            return {"thesis": "top-1 and top-5 below alpha = 0.25..0.6"}
        if alpha < 0.6:
            return {"thesis": "top-1 and top-5 rise with alpha"}
        if alpha < 1:
            return {"thesis": "top-5 rises, top-1 down from its peak (alpha ~ 0.6)"}
        return {"thesis": "top-1 collapses, top-5 best"}
    if alpha == 0.75 and 10 <= m <= 40:
        return {"thesis": "m in 10..40: little change"}
    return None


def report(summary: list[dict]) -> str:
    lines = [format_table(summary, ("alpha", "m"), METRICS)]
    left = [e for e in summary if e["alpha_sweep"]]
    right = [e for e in summary if e["m_sweep"] and 10 <= e["m"] <= 40]
    if left:
        best = {k: max(left, key=lambda e: e[k])["alpha"] for k in METRICS}
        lines.append(f"ours: top-1 best at alpha = {best['top1']:g}, top-5 best at alpha = {best['top5']:g}")
    if len(right) > 1:
        spans = {k: 100 * (max(e[k] for e in right) - min(e[k] for e in right)) for k in METRICS}
        lines.append(
            f"ours: over m in 10..40, top-1 spans {spans['top1']:.2f} points, top-5 {spans['top5']:.2f} points"
        )
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """Fig. 4.3 in kind: top-1 and top-5 accuracy against alpha (left) and against m (right)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    panels = (("alpha_sweep", "alpha", "alpha in P_K = [1 - alpha, 0, 0, 0, alpha]"),
              ("m_sweep", "m", "m (ranked scores; 100: all)"))  # fmt: skip
    for ax, (flag, key, label) in zip(axes, panels):
        rows = sorted((e for e in summary if e[flag]), key=lambda e: e[key])
        for metric, name in (("top1", "top-1"), ("top5", "top-5")):
            ax.errorbar(
                [e[key] for e in rows],
                [100 * e[metric] for e in rows],
                yerr=[100 * e[metric + "_std"] for e in rows],
                marker="o",
                capsize=3,
                label=name,
            )
        if rows:
            fixed = rows[0]["m" if key == "alpha" else "alpha"]
            ax.set_title(f"{'m' if key == 'alpha' else 'alpha'} = {fixed:g}", fontsize=10)
        if key == "m" and len(rows) > 1 and max(e["m"] for e in rows) / min(e["m"] for e in rows) > 4:
            ax.set_xscale("log")
            ticks = [e["m"] for e in rows]
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
