"""Accuracy against the inverse temperature of each relaxation (thesis Fig. 3.9; docs/experiments.md).

The sorting-supervision task of ``sorting`` (four-digit MNIST numbers, odd-even network, the same CNN, loss and
metrics), trained once per relaxation and steepness: the steepness runs over multiples of the thesis' chosen
value (Table 3.8, the optimum of this figure), so that the curves show where each relaxation peaks and how
sensitive it is. The thesis plots EW; its panels are odd-even n = 3, 5, 7, 9, 15, 32 and bitonic n = 16, 32, at
10^5 steps. ``small`` scale: n = 5, the small scale of ``sorting``.
"""

from __future__ import annotations

from . import sorting
from .runner import Record, format_table

FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]
RELAXATIONS = ["logistic", "logistic_art", "cauchy", "optimal"]

SCALES = {
    "smoke": dict(sorting.SCALES["smoke"], methods=["logistic", "cauchy"], factors=[0.5, 2.0]),
    "small": dict(sorting.SCALES["small"], ns=[5], methods=RELAXATIONS, factors=FACTORS, seeds=1),
    "paper": dict(
        sorting.SCALES["paper"], ns=[3, 5, 7, 9, 15, 32], methods=list(sorting.STEEPNESS),
        factors=[0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0], steps=100_000,
    ),
}  # fmt: skip
METRICS = sorting.METRICS


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    return sorting.run(cfg, data, seeds, record)


def report(summary: list[dict]) -> str:
    return format_table(summary, ("n", "method", "param"), METRICS)


def plot(summary: list[dict], path) -> None:
    """EW against the steepness per relaxation (log axis), one panel per n; the thesis' optimum marked."""
    import matplotlib.pyplot as plt

    ns = sorted({e["n"] for e in summary})
    fig, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 3.8), squeeze=False)
    for ax, n in zip(axes[0], ns):
        for method in dict.fromkeys(e["method"] for e in summary):
            rows = sorted((e for e in summary if e["n"] == n and e["method"] == method), key=lambda e: e["param"])
            line = ax.errorbar(
                [e["param"] for e in rows],
                [100 * e["ew"] for e in rows],
                yerr=[100 * e["ew_std"] for e in rows],
                marker="o",
                capsize=3,
                label=method,
            )
            ax.axvline(sorting.param_for(method, n), color=line[0].get_color(), ls=":", alpha=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("steepness (dotted: the thesis' choice)")
        ax.set_ylabel("EW (%)")
        ax.set_title(f"odd-even, n = {n}")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
