"""Training family, the exact solvers: ``assignment`` (maximum-weight perfect matching of ``theta [B, d, d]``) per
backend against scipy's ``linear_sum_assignment(maximize=True)`` called on every item in a Python loop (what a
user of the perturbed predictors would write without relaxops; the matrices are built from the column indices in
one scatter after the loop), on the same float32 scores (uniform in [0, 1)).
Grid: B = 256, d = 16, 50, 100, forward only (solvers have no gradient); goal: the cpu kernel >= 10x
scipy at every d. ``error`` is the largest objective gap to scipy's matching over the batch (0 when exact).
"""

from __future__ import annotations

import torch

from relaxops._backend import unavailable_reason
from relaxops.training.solvers import assignment

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "training"
BATCH = 256


def _theta(case):
    g = torch.Generator().manual_seed(0)
    p = case.params
    return torch.rand(p["batch"], p["d"], p["d"], generator=g, dtype=getattr(torch, p["dtype"])).to(case.device)


def _scipy_objective(theta):
    from scipy.optimize import linear_sum_assignment

    x = theta.detach().double().cpu().numpy()
    out = []
    for item in x:
        r, c = linear_sum_assignment(item, maximize=True)
        out.append(item[r, c].sum())
    return torch.tensor(out, dtype=torch.float64)


def _error(case, inputs, outputs):
    (theta,) = inputs
    (P,) = outputs
    ours = (theta.double() * P.double()).sum((-2, -1)).cpu()
    return float((ours - _scipy_objective(theta)).abs().max())


def _ours(backend):
    def make(case):
        theta = _theta(case)
        return (lambda: (assignment(theta, backend=backend),)), [theta], (None,)

    def skip(case):
        if backend == "reference" and case.params["d"] > 16:
            return "the PyTorch reference takes seconds per call at this size"
        return unavailable_reason(backend, torch.device(case.device))

    return Provider(backend, make, skip=skip)


def _scipy_make(case):
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    theta = _theta(case)

    def forward():
        # one call per item (rows come back sorted: r = 0..d-1), the permutation matrices built in one scatter
        x = theta.cpu().numpy()
        cols = np.empty(x.shape[:2], dtype=np.int64)
        for b in range(x.shape[0]):
            cols[b] = linear_sum_assignment(x[b], maximize=True)[1]
        return (torch.zeros_like(theta).scatter_(2, torch.from_numpy(cols).unsqueeze(2), 1.0),)

    return forward, [theta], (None,)


add_provider(FAMILY, Provider("scipy", _scipy_make, reference=True, skip=lambda case: missing("scipy")))
for _backend in ("reference", "cpu", "cuda"):
    add_provider(FAMILY, _ours(_backend))

for _d in (16, 50, 100):
    add_case(
        Case(
            FAMILY,
            "assignment",
            f"d={_d} B={BATCH}",
            dict(d=_d, batch=BATCH, dtype="float32"),
            "fwd",
            "cpu",
            True,
            None,
            ("scipy", 10.0),
            items=BATCH,
            sweep="d",
            error=_error,
        )
    )
