"""Logic gate networks on the UCI Adult and Breast Cancer sets (thesis Table 6.3, with the architectures and tau of
its Table 6.6; docs/experiments.md).

Data, encoded and split as difflogic's experiment code does (``data.adult``, ``data.breast_cancer_ljubljana``):
Adult (income above 50K) as 116 bits, one-hot of the categorical attributes and of binned age, capital gain and
loss (the hours-per-week bits stay 0, as in that code; ``--set adult_hours=true`` sets them), trained on the 30162
complete rows of ``adult.data`` and tested on the 15060 of ``adult.test``; Breast Cancer (the Ljubljana set,
recurrence within 5 years) as 51 one-hot bits, its 277 complete rows split 207 / 70. Networks (Table 6.6): 5
``LogicLayer``s of 256 gates and ``GroupSum(2, tau=1/0.075)`` for Adult, of 128 gates and ``tau=1/0.1`` for Breast
Cancer, ``'unique'`` connections; Adam at 0.01, batches of 100 drawn at random, softmax cross-entropy. Reported: the
test accuracy of the discretized network (eval mode: every gate its most likely one), which the thesis averages
over 10 runs, beside the relaxed network's and the share of the test set in the training set's majority class.

``paper``: the real sets from ``--data DIR``, 1e5 steps (the reference code's default iteration count; the thesis
says "up to 200 epochs"), 10 seeds. The reference code's README runs both with tau = 20.

``small`` and ``smoke`` run *in kind*: no package ships the UCI sets, so they train Breast Cancer's network on
scikit-learn's Wisconsin diagnostic breast cancer set (``data.breast_cancer``: 569 patients, 30 measurements,
malignant or benign; a different and easier task), binarised the same way as the UCI sets' numerical attributes,
one-hot over bins: each measurement over 4 bins at the training set's quartiles (120 bits). Its accuracies are
not comparable with the thesis' numbers. ``--set datasets=adult,breast_cancer --data DIR`` runs the real sets at
any scale.
"""

from __future__ import annotations

import torch
from torch import nn

from . import data as datasets
from .logic import accuracy, fit, make_model
from .runner import Record, format_table, progress, summarize

# data set -> (layers, gates per layer, tau) of Table 6.6; the in-kind set uses Breast Cancer's.
ARCHITECTURE = {"adult": (5, 256, 1 / 0.075), "breast_cancer": (5, 128, 1 / 0.1), "wisconsin": (5, 128, 1 / 0.1)}
PAPER = {"adult": 84.8, "breast_cancer": 76.1}  # Table 6.3, discretized test accuracy (%), 10 runs
BASELINES = {  # Table 6.3's other methods: decision tree, logistic regression, neural network (%)
    "adult": (79.5, 84.8, 84.9),
    "breast_cancer": (71.9, 72.9, 75.3),
}
WISCONSIN_BINS = 4

SCALES = {
    "smoke": dict(datasets=["wisconsin"], steps=20, batch=100, lr=0.01, adult_hours=False, seeds=1),
    "small": dict(datasets=["wisconsin"], steps=5000, batch=100, lr=0.01, adult_hours=False, seeds=10),
    "paper": dict(datasets=["adult", "breast_cancer"], steps=100_000, batch=100, lr=0.01, adult_hours=False, seeds=10),
}
METRICS = ("test", "test_relaxed", "train", "majority")


def quantile_bits(x_train: torch.Tensor, x_test: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each column one-hot over ``bins`` bins whose edges are the training set's quantiles 1/bins, ...,
    (bins-1)/bins (a value equal to an edge goes above it): [N, D] -> float32 [N, D * bins], column d's bin b at
    d * bins + b."""
    if bins < 2:
        raise ValueError(f"bins: must be at least 2, got {bins}")
    edges = torch.quantile(x_train.double(), torch.arange(1, bins, dtype=torch.float64) / bins, dim=0)  # [bins-1, D]

    def encode(x: torch.Tensor) -> torch.Tensor:
        b = torch.searchsorted(edges.T.contiguous(), x.double().T.contiguous(), right=True).T  # [N, D]
        return nn.functional.one_hot(b, bins).flatten(1).float()

    return encode(x_train), encode(x_test)


def load(name: str, data, adult_hours: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test) of data set ``name`` as bits."""
    if name == "adult":
        return datasets.adult(data, hours=adult_hours)
    if name == "breast_cancer":
        return datasets.breast_cancer_ljubljana(data)
    if name == "wisconsin":
        x, y, x_test, y_test = datasets.breast_cancer()
        x, x_test = quantile_bits(x, x_test, WISCONSIN_BINS)
        return x, y, x_test, y_test
    raise ValueError(f"datasets: unknown data set {name!r}; available: {', '.join(ARCHITECTURE)}")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    sets = {name: load(name, data, cfg["adult_hours"]) for name in cfg["datasets"]}
    bar = progress(len(sets) * len(seeds) * cfg["steps"], "logic-tabular")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 128 to 256 gates a layer: threads would only wait for each other
    try:
        for name, (x, y, x_test, y_test) in sets.items():
            layers, width, tau = ARCHITECTURE[name]
            majority = (y_test == torch.bincount(y).argmax()).float().mean().item()
            for seed in seeds:
                torch.manual_seed(seed)
                model = make_model(x.shape[1], layers, width, 2, tau)
                bar.set_postfix(data=name, seed=seed)
                fit(model, x, y, cfg, seed, bar)
                record.add(
                    dict(
                        dataset=name if name != "wisconsin" else "wisconsin (in kind)",
                        seed=seed,
                        test=accuracy(model, x_test, y_test, False),
                        test_relaxed=accuracy(model, x_test, y_test, True),
                        train=accuracy(model, x, y, False),
                        majority=majority,
                    )
                )
    finally:
        torch.set_num_threads(threads)
        bar.close()
    return summarize(record.rows, ("dataset",), METRICS, paper=_paper)


def _paper(entry: dict):
    return {"test": PAPER[entry["dataset"]]} if entry["dataset"] in PAPER else None


def report(summary: list[dict]) -> str:
    lines = [format_table(summary, ("dataset",), METRICS)]
    for name, (tree, logistic, mlp) in BASELINES.items():
        lines.append(
            f"thesis, {name}: logic network {PAPER[name]}, decision tree {tree}, logistic regression {logistic}, "
            f"neural network {mlp} (test accuracy %)"
        )
    if any(e["dataset"].startswith("wisconsin") for e in summary):
        lines.append(
            "wisconsin (in kind): scikit-learn's Wisconsin breast cancer set (malignant or benign), not the UCI "
            "sets of the thesis; the paper scale (or --set datasets=adult,breast_cancer) reads those from --data"
        )
    return "\n".join(lines)
