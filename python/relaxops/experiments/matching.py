"""Learning to sort through a randomly perturbed bipartite matching, with a learned, a fixed and no noise scale
("Learning Randomly Perturbed Structured Predictors for Direct Loss Minimization", Cohen Indelman and Hazan, Table 1;
docs/experiments.md).

The set-up is the official code's, as in ``python -m relaxops demo perturbed`` (its module docstring has the
details): sequences of d numbers uniform in [0, 1], 10 training sequences per repetition, a network that scores
every (element, position) pair, the maximum-weight matching of the perturbed scores as the prediction, the direct
loss (epsilon = -12, 5 noise draws), Adam, the state of lowest training loss kept. Each seed trains ``reps``
repetitions side by side (the paper: 200 repetitions); the metric is the percentage of test sequences (100 per
repetition, predicted without noise) sorted perfectly, and the proportion of wrongly placed elements. The paper's
fourth column, Gumbel-Sinkhorn, is not run here.
"""

from __future__ import annotations

import torch

from ..demos.perturbed import METHODS, TEST, TRAIN, make_data, train
from .runner import Record, format_table, progress, summarize

# the paper's Table 1: % of test sequences sorted perfectly, per d: (sigma = 0, sigma = 1, learned sigma)
PAPER = {
    5: (98.5, 100.0, 100.0),
    10: (97.0, 100.0, 100.0),
    25: (89.5, 97.5, 97.5),
    40: (84.5, 90.5, 91.6),
    60: (82.0, 80.0, 83.3),
    100: (74.9, 68.5, 76.8),
}
PAPER_COLUMN = {"sigma = 0": 0, "fixed sigma = 1": 1, "learned sigma": 2}

SCALES = {
    "smoke": dict(ds=[5], reps=2, steps=3, seeds=1),
    "small": dict(ds=[5, 10, 25, 40], reps=40, steps=300, seeds=3),
    "paper": dict(ds=[5, 10, 25, 40, 60, 100], reps=200, steps=2000, seeds=1),
}
METRICS = ("sorted", "wrong")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    del data  # generated
    bar = progress(len(cfg["ds"]) * len(seeds) * len(METHODS), "matching")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: threads would only wait for each other
    try:
        for d in cfg["ds"]:
            for seed in seeds:
                gen = torch.Generator().manual_seed(seed)
                x, Y = make_data(cfg["reps"], TRAIN, d, gen)
                x_test, Y_test = make_data(cfg["reps"], TEST, d, gen)
                for method in METHODS:  # the same data and initialisations for the three
                    bar.set_postfix(d=d, seed=seed, method=method)
                    exact, wrong, sigma, seconds = train(method, (x, Y, x_test, Y_test), cfg["steps"], seed)
                    record.add(
                        dict(
                            d=d,
                            method=method,
                            seed=seed,
                            sorted=exact / 100,
                            wrong=wrong.mean().item(),
                            wrong_std_over_reps=wrong.std().item(),
                            final_sigma=sigma,
                            seconds=round(seconds, 2),
                        )
                    )
                    bar.update()
    finally:
        torch.set_num_threads(threads)
        bar.close()
    return summarize(record.rows, ("d", "method"), METRICS, paper=_paper)


def _paper(entry: dict):
    published = PAPER.get(entry["d"])
    return None if published is None else {"sorted": published[PAPER_COLUMN[entry["method"]]]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("d", "method"), METRICS)


def plot(summary: list[dict], path) -> None:
    """% sorted perfectly against d, per method, beside the paper's."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in METHODS:
        rows = [e for e in summary if e["method"] == method]
        line = ax.errorbar(
            [e["d"] for e in rows],
            [100 * e["sorted"] for e in rows],
            yerr=[100 * e["sorted_std"] for e in rows],
            marker="o",
            capsize=3,
            label=f"{method} (ours)",
        )
        ds = sorted(PAPER)
        ax.plot(ds, [PAPER[d][PAPER_COLUMN[method]] for d in ds], "--", color=line[0].get_color(), alpha=0.6,
                label=f"{method} (paper)")  # fmt: skip
    ax.set_xlabel("sequence length d")
    ax.set_ylabel("test sequences sorted perfectly (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
