"""Logic gate networks on the MONK problems (thesis Table 6.2, with its hyper-parameters of Table 6.6;
docs/experiments.md).

The three MONK problems are generated from their rules (``data.monk``): the test set is all 432 attribute
combinations, the training sets have the published sizes (124, 169, 122; MONK-3 with 5% wrong labels), one-hot
encoded to 17 bits. Network: 6 ``LogicLayer``s (24 gates each for MONK-1, 12 for MONK-2 and -3), ``GroupSum(2,
tau=1)``, Adam at 0.01, softmax cross-entropy on the whole training set each step. The reported accuracy is the
discretized network's (eval mode: every gate its most likely one), as in the thesis, which averages 10 runs.
Training sets differ by seed (the UCI files' training sets are one draw of the same sizes).
"""

from __future__ import annotations

import torch
from torch import nn

import relaxops

from . import data as datasets
from .runner import Record, format_table, progress, step, summarize

WIDTH = {1: 24, 2: 12, 3: 12}
LAYERS, TAU, LR = 6, 1.0, 0.01
PAPER = {1: 100.0, 2: 90.9, 3: 97.7}  # thesis Table 6.2, test accuracy of the discretized network (%)

SCALES = {
    "smoke": dict(problems=[1], steps=20, seeds=1),
    "small": dict(problems=[1, 2, 3], steps=4000, seeds=10),
    "paper": dict(problems=[1, 2, 3], steps=100_000, seeds=10),
}
METRICS = ("test", "train", "test_relaxed")


def make_model(inputs: int, layers: int, width: int, classes: int, tau: float) -> nn.Sequential:
    """``layers`` LogicLayers of ``width`` gates ('unique' connections), then GroupSum(classes, tau)."""
    dims = [inputs] + [width] * layers
    gates = [relaxops.LogicLayer(i, o, connections="unique") for i, o in zip(dims[:-1], dims[1:])]
    return nn.Sequential(*gates, relaxops.GroupSum(classes, tau=tau))


def fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: dict, seed: int, bar, inputs=None) -> None:
    """``cfg["steps"]`` Adam steps (``cfg["lr"]``) of softmax cross-entropy on batches of ``cfg["batch"]`` rows of
    ``x`` drawn at random (a generator seeded with ``seed``); ``inputs`` maps a batch of ``x`` to the network's
    input (default: as is)."""
    batches = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    model.train()
    for _ in range(cfg["steps"]):
        idx = torch.randint(len(y), (cfg["batch"],), generator=batches)
        xb = x[idx] if inputs is None else inputs(x[idx])
        step(opt, nn.functional.cross_entropy(model(xb), y[idx]))
        bar.update()


@torch.no_grad()
def accuracy(model, x, y, train_mode: bool) -> float:
    model.train(train_mode)
    return (model(x).argmax(-1) == y).float().mean().item()


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    del data  # generated from the rules
    bar = progress(len(cfg["problems"]) * len(seeds) * cfg["steps"], "logic")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 17 to 24 gates a layer: threads would only wait for each other
    try:
        for problem in cfg["problems"]:
            for seed in seeds:
                x, y, x_test, y_test = datasets.monk(problem, seed)
                x, x_test = datasets.monk_one_hot(x), datasets.monk_one_hot(x_test)
                torch.manual_seed(seed)
                model = make_model(17, LAYERS, WIDTH[problem], 2, TAU)
                opt = torch.optim.Adam(model.parameters(), lr=LR)
                bar.set_postfix(monk=problem, seed=seed)
                for _ in range(cfg["steps"]):
                    model.train()
                    loss = nn.functional.cross_entropy(model(x), y)
                    step(opt, loss)
                    bar.update()
                record.add(
                    dict(
                        problem=f"MONK-{problem}",
                        seed=seed,
                        test=accuracy(model, x_test, y_test, False),
                        train=accuracy(model, x, y, False),
                        test_relaxed=accuracy(model, x_test, y_test, True),
                    )
                )
    finally:
        torch.set_num_threads(threads)
        bar.close()
    summary = summarize(record.rows, ("problem",), METRICS, paper=_paper)
    for entry in summary:  # seeds whose discretized network classifies every test example right
        entry["solved"] = sum(r["test"] == 1.0 for r in record.rows if r["problem"] == entry["problem"])
    return summary


def _paper(entry: dict):
    return {"test": PAPER[int(entry["problem"][-1])]}


def report(summary: list[dict]) -> str:
    lines = [format_table(summary, ("problem",), METRICS)]
    solved = ", ".join(f"{e['problem']} {e['solved']} of {e['seeds']}" for e in summary)
    lines.append(f"seeds solved exactly (test accuracy 100% after discretization): {solved}")
    return "\n".join(lines)
