"""Randomly perturbed structured predictors: learning to sort numbers through a bipartite matching with a learned
noise scale (docs/math/training.md §5.6 (1) and §5.7: the set-up of the official code of "Learning Randomly Perturbed
Structured Predictors for Direct Loss Minimization", seed 004), on generated data.

Task: a sequence ``x`` of ``D`` numbers drawn uniformly from [0, 1]; the label is the permutation matrix that sorts
it in descending order (``Y[i, j] = 1`` iff ``x_i`` is the j-th largest). A small network maps every number on its
own to a row of scores, ``Linear(1, 32) -> ReLU -> Linear(32, D)``: ``θ[i, j]`` is the score of putting element i
at position j; the prediction is the maximum-weight matching of ``θ + σ Γ`` (``relaxops.training.assignment``,
zero-mean Gumbel noise of variance 3 as in the official code). Training minimises the linearised quadratic
sorting loss (``matching_sort_coeffs``) with ``relaxops.training.direct_loss``: ε = −12 as the official code,
``S`` noise draws per sequence, Adam (lr 0.1) on the full training set of 10 sequences, the state of lowest
training loss kept (the official code's early stopping). Three ways:

* learned σ: one σ per sequence from a σ-network ``Linear(D, 1) -> Softplus`` on the raw sequence, trained through
  the σ-gradient of ``direct_loss`` (docs/math/training.md §5.4); here with Adam (lr SIGMA_LR) instead of the official
  code's SGD at 1e-6, which leaves σ practically at its initial value;
* fixed σ = 1 (the same noise, not learned);
* plain direct loss, σ = 0 (no noise);
* and, run by ``python -m relaxops reproduce matching`` (not by this demo), the paper's baseline Gumbel-Sinkhorn
  (Mena et al.): the same network's scores plus standard Gumbel noise, divided by a temperature (1), relaxed to a
  doubly stochastic matrix by 20 log-space Sinkhorn iterations (``gumbel_sinkhorn``), 10 noise samples
  (reconstructions) per sequence; its loss is the mean squared error between the sorted sequence and the
  sequence the relaxed matching reconstructs (``Σ_i P_ij x_i`` at position j); prediction as for the others.

Every run is repeated ``REPS`` times with fresh data and initialisations (the paper: 200 repetitions); the
repetitions train side by side as one batch (batched weights, one matching call per step for all of them). The
same data and μ-network initialisations are used for the three ways. Test: ``TEST`` new sequences per repetition,
predicted without noise. Printed: the percentage of test sequences sorted perfectly, and the proportion of wrongly
placed elements (mean ± std over repetitions), as in the paper's Table 1.

Measured: ``python -m relaxops demo perturbed`` (seed 0, defaults: D = 25, 40 repetitions, 300 steps), wall time
54 s on 2 shared cores (AMD EPYC, KVM), ``uptime`` load average 2.9 at the start and 2.0 at the end (other
engineers' jobs running), with the C++ CPU assignment kernel:

    method            sorted perfectly   prop. wrong (mean ± std)  final sigma    time
    learned sigma                99.2%            0.1% ±  0.2%            0.016   19.7s
    fixed sigma = 1              97.5%            0.2% ±  0.6%            1.000   25.9s
    sigma = 0                    96.2%            0.4% ±  0.6%            0.000    3.8s

``--seed 1`` (73 s, load 2.0 to 3.6): 99.0% (0.1% ± 0.3%), 97.4% (0.2% ± 0.7%), 96.5% (0.3% ± 0.5%). The paper's
Table 1 at d = 25 (200 repetitions, up to 2000 epochs with early stopping): learned σ 97.5%, σ = 1 97.5%,
σ = 0 89.5%. As there, learning σ is at least as good as fixing it and the noise-free direct loss generalises
worst from 10 training sequences; here the learned σ is ahead of σ = 1 too, by 1.6-1.7 points on both seeds (40
repetitions: a difference of 1-2 points is of the order of the spread between seeds, so read it as "in kind").
The learned σ shrinks during training (from about 0.7 to under 0.02): noise helps early, then the predictor
becomes nearly deterministic.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from ..training import assignment, direct_loss, matching_sort_coeffs, sample_noise, sort_perm

D = 25  # numbers per sequence (the paper: 5 to 100)
TRAIN = 10  # training sequences per repetition (the official code's batch_size: the whole training set)
TEST = 100  # test sequences per repetition
REPS = 40  # independent repetitions, trained as one batch (the paper: 200)
S = 5  # noise draws per sequence (samples_per_num_train)
UNITS = 32
EPS = -12.0
MU_LR = 0.1
SIGMA_LR = 0.01
STEPS = 300
NOISE = "gumbel_var3"
METHODS = ("learned sigma", "fixed sigma = 1", "sigma = 0")
GUMBEL_SINKHORN = "gumbel-sinkhorn"  # the baseline, a method of ``train`` beside METHODS
GS_SAMPLES = 10  # noise samples (reconstructions) per sequence
GS_ITERS = 20  # Sinkhorn iterations
GS_TEMPERATURE = 1.0


class BatchedMuNet(nn.Module):
    """``REPS`` independent copies of ``Linear(1, UNITS) -> ReLU -> Linear(UNITS, D)`` applied to every number:
    ``x [R, N, D] -> θ [R, N, D, D]`` (row i of θ from x_i alone)."""

    def __init__(self, reps: int, d: int, units: int, generator: torch.Generator):
        super().__init__()

        # torch.nn.Linear's default initialisation: uniform on ±1/sqrt(fan_in)
        def init(*shape, fan_in):
            return nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) / math.sqrt(fan_in))

        self.w1, self.b1 = init(reps, 1, 1, units, fan_in=1), init(reps, 1, 1, units, fan_in=1)
        self.w2, self.b2 = init(reps, 1, units, d, fan_in=units), init(reps, 1, 1, d, fan_in=units)

    def forward(self, x):
        h = torch.relu(x.unsqueeze(-1) * self.w1 + self.b1)  # [R, N, D, UNITS]
        return h @ self.w2 + self.b2  # [R, N, D, D]


class BatchedSigmaNet(nn.Module):
    """``REPS`` copies of ``Linear(D, 1) -> Softplus``: ``x [R, N, D] -> σ [R, N]``."""

    def __init__(self, reps: int, d: int, generator: torch.Generator):
        super().__init__()
        bound = 1 / math.sqrt(d)
        self.w = nn.Parameter((torch.rand(reps, 1, d, generator=generator) * 2 - 1) * bound)
        self.b = nn.Parameter((torch.rand(reps, 1, generator=generator) * 2 - 1) * bound)

    def forward(self, x):
        return nn.functional.softplus((x * self.w).sum(-1) + self.b)


def log_sinkhorn(log_alpha: torch.Tensor, iters: int) -> torch.Tensor:
    """The log of ``iters`` Sinkhorn normalisations of ``exp(log_alpha) [..., d, d]``: every row, then every column,
    divided by its sum (in log space: its logsumexp subtracted). Columns then sum to 1, rows to 1 in the limit."""
    for _ in range(iters):
        log_alpha = log_alpha - log_alpha.logsumexp(-1, keepdim=True)
        log_alpha = log_alpha - log_alpha.logsumexp(-2, keepdim=True)
    return log_alpha


def gumbel_sinkhorn(theta, temperature: float, samples: int, iters: int, generator=None) -> torch.Tensor:
    """Gumbel-Sinkhorn plans ``[samples, ..., d, d]``: ``Sinkhorn((θ + G) / temperature)`` for standard Gumbel
    noise G, one draw per sample; as ``temperature -> 0`` (and iters -> ∞) a plan tends to the matching of θ + G."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: must be a positive number, got {temperature!r}")
    noise = sample_noise((samples, *theta.shape), "gumbel", generator, theta.dtype)
    return log_sinkhorn((theta + noise) / temperature, iters).exp()


def reconstruct(P: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The sequence a (relaxed) matching ``P [..., D, D]`` builds from ``x [..., D]``: position j gets
    ``sum_i P_ij x_i`` (for ``P = sort_perm(x)``: x sorted in descending order)."""
    return (P * x.unsqueeze(-1)).sum(-2)


def make_data(reps: int, n: int, d: int, generator: torch.Generator):
    """(x [R, n, D] uniform in [0, 1], Y [R, n, D, D] the descending sorting permutation matrices)."""
    x = torch.rand(reps, n, d, generator=generator)
    return x, sort_perm(x)


def metrics(P: torch.Tensor, Y: torch.Tensor):
    """(% of sequences sorted perfectly, proportion of wrong positions per repetition [R])."""
    wrong = (P != Y).any(-2).float().mean(-1)  # [R, N]: fraction of positions holding the wrong element
    return 100.0 * (wrong == 0).float().mean().item(), wrong.mean(-1)


def train(method: str, data, steps: int, seed: int):
    """Trains REPS models one way (one of METHODS, or GUMBEL_SINKHORN); returns (exact %, prop. wrong per
    repetition, final mean σ (Gumbel-Sinkhorn: its noise scale, 1), seconds)."""
    if method not in (*METHODS, GUMBEL_SINKHORN):
        raise ValueError(f"method: must be one of {', '.join(map(repr, (*METHODS, GUMBEL_SINKHORN)))}, got {method!r}")
    x, Y, x_test, Y_test = data
    reps, n, d = x.shape
    gen = torch.Generator().manual_seed(seed + 1)
    mu = BatchedMuNet(reps, d, UNITS, gen)
    sigma_net = BatchedSigmaNet(reps, d, gen) if method == "learned sigma" else None
    opts = [torch.optim.Adam(mu.parameters(), lr=MU_LR, eps=1e-8)]
    if sigma_net is not None:
        opts.append(torch.optim.Adam(sigma_net.parameters(), lr=SIGMA_LR))
    noise_gen = torch.Generator().manual_seed(seed + 2)
    coeffs = matching_sort_coeffs(x.flatten(0, 1), Y.flatten(0, 1))
    x_sorted = reconstruct(Y, x)  # [R, N, D], descending
    best_loss = torch.full((reps,), math.inf)
    best = {k: v.detach().clone() for k, v in mu.state_dict().items()}
    sigma_seen = []
    t0 = time.perf_counter()
    for _ in range(steps):
        scores = mu(x)  # [R, TRAIN, D, D]
        sigma = None
        if method == GUMBEL_SINKHORN:
            P = gumbel_sinkhorn(scores, GS_TEMPERATURE, GS_SAMPLES, GS_ITERS, noise_gen)  # [GS_SAMPLES, R, N, D, D]
            per_rep = (reconstruct(P, x) - x_sorted).square().mean((0, 2, 3))  # mean over samples, sequences, D
        else:
            if method == "learned sigma":
                sigma = sigma_net(x).flatten()
            elif method == "fixed sigma = 1":
                sigma = 1.0
            theta = scores.flatten(0, 1)  # [R * TRAIN, D, D]
            loss = direct_loss(
                theta, sigma, None, coeffs, assignment, eps=EPS, n_samples=S, noise=NOISE, generator=noise_gen
            )
            per_rep = loss.view(reps, n).sum(-1)
        with torch.no_grad():  # keep each repetition's state of lowest training loss (early stopping)
            better = per_rep < best_loss
            best_loss = torch.where(better, per_rep, best_loss)
            for k, v in mu.state_dict().items():
                best[k] = torch.where(better.view(-1, *[1] * (v.dim() - 1)), v, best[k])
        if isinstance(sigma, torch.Tensor):
            sigma_seen.append(sigma.detach().mean().item())
        for opt in opts:
            opt.zero_grad()
        per_rep.sum().backward()
        for opt in opts:
            opt.step()
    seconds = time.perf_counter() - t0
    mu.load_state_dict(best)
    with torch.no_grad():
        P = assignment(mu(x_test))  # evaluated without noise
    exact, wrong = metrics(P, Y_test)
    sigma_end = sigma_seen[-1] if sigma_seen else (1.0 if method in ("fixed sigma = 1", GUMBEL_SINKHORN) else 0.0)
    return exact, wrong, sigma_end, seconds


def main(steps=None, seed: int = 0) -> dict[str, dict[str, float]]:
    """Runs the demo; returns, per method, the test exact-sort percentage, the mean and std of the proportion of
    wrong positions over the repetitions, the final mean σ and the training time."""
    steps = STEPS if steps is None else steps
    gen = torch.Generator().manual_seed(seed)
    x, Y = make_data(REPS, TRAIN, D, gen)
    x_test, Y_test = make_data(REPS, TEST, D, gen)
    data = (x, Y, x_test, Y_test)
    print(
        f"Learning to sort {D} numbers in [0, 1] through a perturbed bipartite matching (direct loss, eps = {EPS}, "
        f"{S} noise draws, {NOISE} noise): {REPS} repetitions of {TRAIN} training sequences, {steps} full-batch "
        f"Adam steps; {TEST} test sequences per repetition, predicted without noise"
    )
    print(f"  {'method':<16} {'sorted perfectly':>17} {'prop. wrong (mean ± std)':>26} {'final sigma':>12} {'time':>7}")
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: threads only wait for each other on busy cores
    try:
        for method in METHODS:
            exact, wrong, sigma_end, seconds = train(method, data, steps, seed)
            results[method] = {
                "exact": exact,
                "wrong_mean": 100 * wrong.mean().item(),
                "wrong_std": 100 * wrong.std().item(),
                "sigma": sigma_end,
                "seconds": seconds,
            }
            r = results[method]
            print(
                f"  {method:<16} {exact:>16.1f}% {r['wrong_mean']:>14.1f}% ± {r['wrong_std']:>4.1f}%       "
                f"{sigma_end:>10.3f} {seconds:>6.1f}s"
            )
    finally:
        torch.set_num_threads(threads)
    return results
