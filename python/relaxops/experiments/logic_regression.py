"""A logic gate network as a regressor: the regression head ``GroupSum(1, tau, beta)`` (the thesis' offset form,
docs/math/logic.md §12) on scikit-learn's diabetes set, with fixed and with learnable connections
(docs/experiments.md).

Data: the 442 patients of ``sklearn.datasets.load_diabetes`` (10 measurements, the disease progression after one
year as the target), split 80/20 by a fixed permutation (354 / 88). Each measurement is thermometer-encoded at its
training-set quantiles ``i / bins`` (bit ``i`` set when the value exceeds the ``i``-th threshold), the target
standardised with the training set's mean and deviation. Network: ``layers`` ``LogicLayer``s of ``width`` gates,
connected ``'unique'`` (fixed), ``'learnable'`` (every input a candidate of every slot) or ``'learnable-C'`` (``C``
random candidates a slot), and ``GroupSum(1, tau, beta)`` with ``beta = -width / (2 tau)`` learned, so the
prediction ``count / tau + beta`` spans ``[beta, beta + width / tau]`` around 0; Adam, mean squared error, full
batches. Reported: the test R² of the
discretized network (eval mode), of the relaxed one and of least squares on the raw measurements, and whether the
bit-packed network (``PackedLogicNet``, counts turned into values by ``GroupSum.from_counts``) equals eval mode.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import relaxops

from . import data as datasets
from .runner import Record, format_table, progress, step, summarize

_NETS = ["unique", "learnable", "learnable-4"]
SCALES = {
    "smoke": dict(connections=_NETS, layers=2, width=128, tau=16.0, bins=8, steps=20, lr=0.01, seeds=1),
    "small": dict(connections=_NETS, layers=2, width=256, tau=32.0, bins=16, steps=600, lr=0.01, seeds=3),
    "paper": dict(connections=_NETS, layers=4, width=1024, tau=128.0, bins=32, steps=5000, lr=0.01, seeds=10),
}
METRICS = ("test_r2", "test_r2_relaxed", "train_r2", "linear_r2")


def diabetes() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's diabetes set (442 x 10 features, float targets 25..346), split 80/20 by a fixed permutation
    (numpy default_rng(0)): (x_train, y_train, x_test, y_test), float64, as given."""
    bunch = datasets._sklearn("the diabetes set").load_diabetes()
    x, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.float64)
    perm = np.random.default_rng(0).permutation(len(y))
    n = int(round(0.8 * len(y)))
    train, test = perm[:n], perm[n:]
    return torch.from_numpy(x[train]), torch.from_numpy(y[train]), torch.from_numpy(x[test]), torch.from_numpy(y[test])


def thermometer(x_train: torch.Tensor, x_test: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each column as ``bins - 1`` bits ``x > q_i`` at the training set's quantiles ``i / bins``: [N, D] -> float32
    [N, D (bins - 1)], column d's bit i at d (bins - 1) + i."""
    if bins < 2:
        raise ValueError(f"bins: must be at least 2, got {bins}")
    q = torch.quantile(x_train, torch.arange(1, bins, dtype=x_train.dtype) / bins, dim=0)  # [bins - 1, D]
    return tuple((x[:, :, None] > q.T[None]).flatten(1).float() for x in (x_train, x_test))


def r2(pred: torch.Tensor, y: torch.Tensor) -> float:
    """Coefficient of determination ``1 - SSE / SST``."""
    return 1.0 - float(((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def make_model(inputs: int, cfg: dict, connections: str) -> nn.Sequential:
    dims = [inputs] + [cfg["width"]] * cfg["layers"]
    kw = dict(connections=connections)
    if connections.startswith("learnable-") and connections[10:].isdigit():
        kw = dict(connections="learnable", num_candidates=int(connections[10:]))
    elif connections == "learnable":
        kw["num_candidates"] = None  # every input a candidate of every slot
    elif connections not in ("random", "unique"):
        raise ValueError(
            f"connections: 'random', 'unique', 'learnable' or 'learnable-C' (C candidates), got {connections!r}"
        )
    layers = [relaxops.LogicLayer(i, o, **kw) for i, o in zip(dims[:-1], dims[1:])]
    head = relaxops.GroupSum(1, tau=cfg["tau"], beta=-cfg["width"] / (2 * cfg["tau"]), learn_beta=True)
    return nn.Sequential(*layers, head)


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    del data  # scikit-learn ships the set
    x, y, x_test, y_test = diabetes()
    mean, std = y.mean(), y.std()
    z, z_test = ((y - mean) / std).float(), ((y_test - mean) / std).float()
    bits, bits_test = thermometer(x, x_test, cfg["bins"])
    xs = torch.cat([(x - x.mean(0)) / x.std(0), torch.ones(len(x), 1, dtype=x.dtype)], 1)
    coef = torch.linalg.lstsq(xs, y[:, None]).solution
    linear = r2(
        (torch.cat([(x_test - x.mean(0)) / x.std(0), torch.ones(len(x_test), 1, dtype=x.dtype)], 1) @ coef)[:, 0],
        y_test,
    )
    bar = progress(len(cfg["connections"]) * len(seeds) * cfg["steps"], "logic-regression")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for connections in cfg["connections"]:
            for seed in seeds:
                torch.manual_seed(seed)
                model = make_model(bits.shape[1], cfg, connections)
                opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
                bar.set_postfix(connections=connections, seed=seed)
                model.train()
                for _ in range(cfg["steps"]):
                    step(opt, nn.functional.mse_loss(model(bits)[:, 0], z))
                    bar.update()
                with torch.no_grad():
                    relaxed = model(bits_test)[:, 0]
                    model.eval()
                    pred, pred_train = model(bits_test)[:, 0], model(bits)[:, 0]
                    counts = relaxops.PackedLogicNet(model)(bits_test.bool())
                packed = model[-1].from_counts(counts, torch.float32)[:, 0]
                record.add(
                    dict(
                        connections=connections,
                        seed=seed,
                        test_r2=r2(pred, z_test),
                        test_r2_relaxed=r2(relaxed, z_test),
                        train_r2=r2(pred_train, z),
                        linear_r2=linear,
                        packed_equal=bool(torch.equal(packed, pred)),
                    )
                )
    finally:
        torch.set_num_threads(threads)
        bar.close()
    summary = summarize(record.rows, ("connections",), METRICS)
    for entry in summary:
        entry["packed_equal"] = all(r["packed_equal"] for r in record.rows if r["connections"] == entry["connections"])
    return summary


def report(summary: list[dict]) -> str:
    lines = [
        "R² in % (1 - SSE / SST of the standardised target; test set of 88 patients)",
        format_table(summary, ("connections",), METRICS),
    ]
    for e in summary:
        lines.append(f"{e['connections']}: bit-packed network equals eval mode in every seed: {e['packed_equal']}")
    return "\n".join(lines)
