"""Learning to sort through a randomly perturbed bipartite matching, with a learned, a fixed and no noise scale,
against Gumbel-Sinkhorn ("Learning Randomly Perturbed Structured Predictors for Direct Loss Minimization", Cohen
Indelman and Hazan, Tables 1 and 2; docs/experiments.md).

The set-up is the official code's, as in ``python -m relaxops demo perturbed`` (its module docstring has the
details): sequences of d numbers uniform in [0, 1], 10 training sequences per repetition, a network that scores
every (element, position) pair, the maximum-weight matching of the perturbed scores as the prediction, the direct
loss (epsilon = -12, 5 noise draws), Adam, the state of lowest training loss kept. Each seed trains ``reps``
repetitions side by side (the paper: 200 repetitions); the metric is the percentage of test sequences (100 per
repetition, predicted without noise) sorted perfectly, and the proportion of wrongly placed elements.

The paper's fourth column, the Gumbel-Sinkhorn baseline (Mena et al.), trains the same network through the
relaxed matching: scores plus standard Gumbel noise, divided by a temperature of 1, 20 log-space Sinkhorn
iterations, 10 noise samples per sequence, the squared error of the reconstructed sorted sequence as its loss, the
same early stopping, the hard matching of the noiseless scores as its test prediction
(``relaxops.demos.perturbed.gumbel_sinkhorn``). Its steps cost far more than the direct loss's on a CPU (every
iteration normalises 10 x 10 matrices of d x d per repetition), so it trains the first ``gs_reps`` repetitions of
each seed's data (``small``: 3 of 30; ``paper``: all). Table 2, the average epoch time of the learned sigma against
Gumbel-Sinkhorn: ours is the seconds per training step (one epoch: the whole training set) per repetition, the
repetitions side by side, beside the paper's seconds on unstated hardware; only the ratios compare.
"""

from __future__ import annotations

import torch

from ..demos import perturbed
from ..demos.perturbed import TEST, TRAIN, make_data, train
from .runner import Record, format_table, progress, summarize

METHODS = (*perturbed.METHODS, perturbed.GUMBEL_SINKHORN)

# the paper's Table 1: % of test sequences sorted perfectly, per d: (sigma = 0, sigma = 1, learned sigma,
# Gumbel-Sinkhorn)
PAPER = {
    5: (98.5, 100.0, 100.0, 100.0),
    10: (97.0, 100.0, 100.0, 100.0),
    25: (89.5, 97.5, 97.5, 87.5),
    40: (84.5, 90.5, 91.6, 83.5),
    60: (82.0, 80.0, 83.3, 21.0),
    100: (74.9, 68.5, 76.8, 0.0),
}
PAPER_COLUMN = {"sigma = 0": 0, "fixed sigma = 1": 1, "learned sigma": 2, perturbed.GUMBEL_SINKHORN: 3}
# the paper's Table 2: average epoch time in seconds, per d: (learned sigma, Gumbel-Sinkhorn)
PAPER_EPOCH = {10: (0.247, 0.288), 40: (0.252, 0.294), 100: (0.304, 0.306)}

SCALES = {
    "smoke": dict(ds=[5], reps=2, gs_reps=2, steps=3, seeds=1),
    "small": dict(ds=[5, 10, 25, 40], reps=30, gs_reps=3, steps=300, seeds=3),
    "paper": dict(ds=[5, 10, 25, 40, 60, 100], reps=200, gs_reps=200, steps=2000, seeds=1),
}  # gs_reps: how many of the repetitions (the first) Gumbel-Sinkhorn trains
METRICS = ("sorted", "wrong")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    del data  # generated
    if (
        isinstance(cfg["gs_reps"], bool)
        or not isinstance(cfg["gs_reps"], int)
        or not 2 <= cfg["gs_reps"] <= cfg["reps"]
    ):
        raise ValueError(f"gs_reps: must be an integer from 2 to reps = {cfg['reps']}, got {cfg['gs_reps']!r}")
    bar = progress(len(cfg["ds"]) * len(seeds) * len(METHODS), "matching")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: threads would only wait for each other
    try:
        for d in cfg["ds"]:
            for seed in seeds:
                gen = torch.Generator().manual_seed(seed)
                x, Y = make_data(cfg["reps"], TRAIN, d, gen)
                x_test, Y_test = make_data(cfg["reps"], TEST, d, gen)
                for method in METHODS:  # the same data and initialisations for each (Gumbel-Sinkhorn: a part)
                    bar.set_postfix(d=d, seed=seed, method=method)
                    reps = cfg["gs_reps"] if method == perturbed.GUMBEL_SINKHORN else cfg["reps"]
                    part = (x[:reps], Y[:reps], x_test[:reps], Y_test[:reps])
                    exact, wrong, sigma, seconds = train(method, part, cfg["steps"], seed)
                    record.add(
                        dict(
                            d=d,
                            method=method,
                            seed=seed,
                            sorted=exact / 100,
                            wrong=wrong.mean().item(),
                            wrong_std_over_reps=wrong.std().item(),
                            final_sigma=sigma,
                            reps=reps,
                            seconds=round(seconds, 2),
                            epoch_s=seconds / cfg["steps"] / reps,
                        )
                    )
                    bar.update()
    finally:
        torch.set_num_threads(threads)
        bar.close()
    summary = summarize(record.rows, ("d", "method"), METRICS, paper=_paper)
    for entry in summary:  # seconds per epoch (training step) and repetition, mean over the seeds
        times = [r["epoch_s"] for r in record.rows if (r["d"], r["method"]) == (entry["d"], entry["method"])]
        entry["epoch_s"] = sum(times) / len(times)
    return summary


def _paper(entry: dict):
    published = PAPER.get(entry["d"])
    return None if published is None else {"sorted": published[PAPER_COLUMN[entry["method"]]]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("d", "method"), METRICS) + "\n\n" + epoch_table(summary)


def epoch_table(summary: list[dict]) -> str:
    """Table 2: seconds per epoch of the learned sigma and Gumbel-Sinkhorn and their ratio, beside the paper's."""
    seconds = {(e["d"], e["method"]): e["epoch_s"] for e in summary}
    gs = perturbed.GUMBEL_SINKHORN

    def cells(learned, baseline):
        return f"{learned:>13.4f} {baseline:>15.4f} {baseline / learned:>6.2f}"

    header = f"{'learned sigma':>13} {gs:>15} {'ratio':>6}"
    lines = [
        "seconds per epoch and repetition (ours: the repetitions side by side; compare the ratios)",
        f"{'d':>4} {header}   paper: {header}",
    ]
    for d in dict.fromkeys(e["d"] for e in summary):
        if (d, "learned sigma") in seconds and (d, gs) in seconds:
            paper = f"   {cells(*PAPER_EPOCH[d])}" if d in PAPER_EPOCH else ""
            lines.append(f"{d:>4} {cells(seconds[d, 'learned sigma'], seconds[d, gs])}{paper}")
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """% sorted perfectly against d, per method, beside the paper's (left); the epoch time of each method relative
    to the learned sigma's, beside the paper's Gumbel-Sinkhorn ratio (right)."""
    import matplotlib.pyplot as plt

    fig, (ax, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
    learned = {e["d"]: e["epoch_s"] for e in summary if e["method"] == "learned sigma"}
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
        timed = [e for e in rows if e["d"] in learned]
        ax_time.plot([e["d"] for e in timed], [e["epoch_s"] / learned[e["d"]] for e in timed], marker="o",
                     color=line[0].get_color(), label=f"{method} (ours)")  # fmt: skip
        if method == perturbed.GUMBEL_SINKHORN:
            ds = sorted(PAPER_EPOCH)
            ax_time.plot(ds, [PAPER_EPOCH[d][1] / PAPER_EPOCH[d][0] for d in ds], "--", color=line[0].get_color(),
                         alpha=0.6, label=f"{method} (paper)")  # fmt: skip
    ax.set_xlabel("sequence length d")
    ax.set_ylabel("test sequences sorted perfectly (%)")
    ax.legend(fontsize=7)
    ax_time.set_xlabel("sequence length d")
    ax_time.set_ylabel("epoch time / learned sigma's")
    ax_time.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
