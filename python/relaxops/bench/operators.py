"""Which differentiable sort should I use? Every ranking operator of relaxops side by side, with the peers.

Each case ranks the same rows ``x [B, n]`` of standard normal values (float32) at one temperature ``tau``; each
provider is one operator, and a row reports its time and its error: the mean absolute difference between its
soft ranks and the hard (1-based, ascending) ranks of ``x``, in positions (``error``). Plotting a case's rows
(``--plot``) draws error against time, one point per operator and temperature.

The temperature is matched on the scale of the inputs (std 1): ``tau`` is the input difference over which an
operator blends two elements. Each operator's own parameter for it:

* sorting networks (``relaxops.rank``, bitonic, each relaxation): ``steepness = 1 / tau`` (the comparator's
  relaxation is a CDF of ``steepness * (x_j - x_i)``);
* NeuralSort and SoftSort (``relaxops.neuralsort`` / ``softsort``, ranks ``X @ (1..n)``): ``tau`` (SoftSort's
  logits are ``-|x_(r) - x_c| / tau``; NeuralSort's differ by ``2 (x_c - x_c') / tau`` between neighbouring
  positions, about twice as sharp);
* fast soft ranks (``relaxops.soft_rank``, Blondel et al., L2 and KL) and ``torchsort.soft_rank``:
  ``regularization_strength = tau`` (they project ``x / strength`` onto the permutahedron);
* optimal-transport ranks (``relaxops.ot_rank``, plus 1): ``epsilon = 0.907 tau / (n - 1)``:
  the inputs are squashed by ``sigmoid(z pi / sqrt 3)`` (slope 0.453 at the centre) onto targets ``1 / (n - 1)``
  apart, and an entropic plan with cost ``|x~ - y|^2`` blends neighbouring targets over ``epsilon (n - 1) / 2``
  in squashed units.

These are matched to first order, not exactly (the operators smooth differently: compare the errors, not only
the times). Dense operators (NeuralSort, SoftSort: an ``n x n`` matrix per row; OT: an ``n x n`` sweep per
Sinkhorn iteration, a few hundred of them at small tau) are left out where that matrix would exceed ``DENSE_LIMIT``
elements per call.
"""

from __future__ import annotations

import math

import torch

import relaxops
from relaxops._backend import unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "operators"
DENSE_LIMIT = 2.5e8  # B * n * n elements of the NeuralSort / SoftSort matrix per call (1 GB in float32)
OT_SLOPE = math.pi / (4 * math.sqrt(3))  # d sigmoid(z pi / sqrt 3) / dz at z = 0


def ot_epsilon(tau: float, n: int) -> float:
    """The OT regularization that blends neighbouring targets over ``tau`` on the input scale (see above)."""
    return 2 * OT_SLOPE * tau / max(1, n - 1)


def _positions(X):
    n = X.shape[-2]
    return X @ torch.arange(1, n + 1, dtype=X.dtype, device=X.device)


def _network(relaxation):
    return lambda x, tau, n: relaxops.rank(x, "bitonic", relaxation, 1.0 / tau)


# name -> ranks(x, tau, n): ascending, 1-based soft ranks of x [B, n]
OPERATORS = {
    **{f"bitonic-{r}": _network(r) for r in relaxops.RELAXATIONS},
    "neuralsort": lambda x, tau, n: _positions(relaxops.neuralsort(x, tau)),
    "softsort": lambda x, tau, n: _positions(relaxops.softsort(x, tau)),
    "soft_rank-l2": lambda x, tau, n: relaxops.soft_rank(x, "l2", tau),
    "soft_rank-kl": lambda x, tau, n: relaxops.soft_rank(x, "kl", tau),
    "ot_rank": lambda x, tau, n: relaxops.ot_rank(x, ot_epsilon(tau, n)) + 1,  # ot_rank is 0-based
}
DENSE = ("neuralsort", "softsort", "ot_rank")  # n x n work per row (OT: per Sinkhorn iteration)


def hard_ranks(x: torch.Tensor) -> torch.Tensor:
    """1-based ascending ranks of the rows of x (ties broken by index)."""
    order = torch.argsort(x, dim=-1, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(1, x.shape[-1] + 1, device=x.device).expand_as(order).contiguous())
    return ranks.to(x.dtype)


def rank_error(case, inputs, outputs) -> float:
    """Mean |soft rank - hard rank| over the case's rows, in positions."""
    (x,), (r,) = inputs, outputs
    return (r.double() - hard_ranks(x.detach()).double()).abs().mean().item()


def _inputs(case):
    p = case.params
    gen = torch.Generator(case.device).manual_seed(0)
    kw = dict(generator=gen, device=case.device, dtype=torch.float32)
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    g = torch.randn(p["batch"], p["n"], **kw) if case.mode != "fwd" else None
    return x, (g,)


def _ours(name, fn):
    def make(case):
        p = case.params
        x, cotangents = _inputs(case)
        return (lambda: (fn(x, p["tau"], p["n"]),)), [x], cotangents

    def skip(case):
        p = case.params
        if name in DENSE and p["batch"] * p["n"] ** 2 > DENSE_LIMIT:
            return f"B n^2 = {p['batch'] * p['n'] ** 2:.1e} > {DENSE_LIMIT:.0e}: the n x n work is too big to time"
        return unavailable_reason("cpu", torch.device(case.device)) if case.device == "cpu" else None

    return Provider(name, make, reference=name == "bitonic-cauchy", skip=skip)


def _torchsort_make(case):
    import torchsort

    p = case.params
    x, cotangents = _inputs(case)
    return (lambda: (torchsort.soft_rank(x, regularization_strength=p["tau"]),)), [x], cotangents


for _name, _fn in OPERATORS.items():
    add_provider(FAMILY, _ours(_name, _fn))
add_provider(FAMILY, Provider("torchsort", _torchsort_make, skip=lambda case: missing("torchsort")))

# CPU: n = 100, 1000, 10000 at B = 16 (n = 10000 at B = 4), three temperatures; the default run times n = 1000
# at tau = 0.1, forward and backward.
for _n in (100, 1000, 10000):
    for _tau in (0.01, 0.1, 1.0):
        for _mode in ("fwd", "fwd+bwd"):
            _params = dict(n=_n, batch=16 if _n < 10000 else 4, tau=_tau)
            add_case(
                Case(
                    FAMILY,
                    "rank",
                    f"n={_n} B={_params['batch']} tau={_tau}",
                    _params,
                    _mode,
                    "cpu",
                    default=_n == 1000 and _tau == 0.1,
                    sweep="n",
                    error=rank_error,
                )
            )
