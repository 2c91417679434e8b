"""The relaxed conditional swap: sigmoids ``alpha = f(d)`` of the gap ``d = x_j - x_i``.

A comparator ``(i, j)`` keeps ``alpha`` of each wire and mixes in ``1 - alpha`` of the other:
``x_i' = alpha x_i + (1 - alpha) x_j`` (relaxed min), ``x_j' = (1 - alpha) x_i + alpha x_j`` (relaxed max).
Every ``f`` has ``f(0) = 1/2`` and ``f(-z) = 1 - f(z)``. The formulas are those of the original diffsort code,
with ``v = steepness * d``:

=============== ============================================ ==========================================
name            alpha = f(d)                                 note
=============== ============================================ ==========================================
logistic        sigmoid(v)                                   not monotone
logistic_phi    sigmoid(s d / (abs(d) + 1e-10)**art_lambda)  ART; eps inside the power, as the code
gaussian        Phi(v) (normal CDF)                          not monotone
reciprocal      (v / (2 + abs(v)) + 1) / 2                   monotone; thesis beta = steepness / 4
cauchy          atan(v) / pi + 1/2                           monotone
optimal         v + 1/2 for abs(v) <= 1/4, else              monotone, smallest error bound (1/(16 s))
                1 - 1/(16 (v + 1e-10)) / 1/(16 (abs(v)+1e-10))
=============== ============================================ ==========================================

The integer ids are shared with ``csrc/common/relax.h`` (a test checks they agree). This module is the
float64-correct PyTorch version used by the reference backend.
"""

from __future__ import annotations

import math

import torch

RELAXATIONS = ("logistic", "logistic_phi", "gaussian", "reciprocal", "cauchy", "optimal")
RELAXATION_IDS = {name: i for i, name in enumerate(RELAXATIONS)}
MONOTONE_RELAXATIONS = ("reciprocal", "cauchy", "optimal")
ART_EPS = 1e-10  # the epsilon of the original code (logistic_phi and optimal)


def relaxation_id(relaxation) -> int:
    if not isinstance(relaxation, str) or relaxation not in RELAXATION_IDS:
        raise ValueError(f"relaxation must be one of {list(RELAXATIONS)}, got {relaxation!r}")
    return RELAXATION_IDS[relaxation]


def alpha_and_slope(d: torch.Tensor, relaxation: str, steepness: float, art_lambda: float = 0.25):
    """``(f(d), f'(d))`` for the gap ``d = x_j - x_i``, evaluated without cancellation or overflow."""
    s = steepness
    v = s * d
    a = v.abs()
    if relaxation == "logistic":
        alpha = torch.sigmoid(v)
        slope = s * alpha * (1 - alpha)
    elif relaxation == "logistic_phi":
        scale = (d.abs() + ART_EPS).pow(-art_lambda)
        alpha = torch.sigmoid(s * (d * scale))  # |d scale| <= |d|^(1 - lambda): s d alone may overflow
        slope = s * alpha * (1 - alpha) * scale * (1 - art_lambda * d.abs() / (d.abs() + ART_EPS))
    elif relaxation == "gaussian":
        alpha = 0.5 * torch.special.erfc(-v / math.sqrt(2.0))
        slope = s * torch.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)
    elif relaxation == "reciprocal":
        # v / (2 + |v|) written as sign(v) (1 - 2 / (2 + |v|)): finite for v = +-inf
        alpha = 0.5 + 0.5 * torch.sign(v) * (1 - 2 / (2 + a))
        slope = s / (2 + a) ** 2
    elif relaxation == "cauchy":
        alpha = torch.atan(v) / math.pi + 0.5
        slope = s / (math.pi * (1 + v * v))
    elif relaxation == "optimal":
        tail = 1 / (16 * (a + ART_EPS))
        alpha = torch.where(v > 0.25, 1 - tail, torch.where(v < -0.25, tail, v + 0.5))
        slope = torch.where(a > 0.25, s * tail * tail * 16, s * torch.ones_like(v))
    else:
        raise ValueError(f"relaxation must be one of {list(RELAXATIONS)}, got {relaxation!r}")
    # An infinite gap (an infinite input, or a difference that overflows) is a hard comparison: alpha = 0 or 1,
    # f' = 0 (the limit of every f but ART with lambda = 1, made hard too so that +-inf sort to the ends).
    hard = d.isinf()
    return torch.where(hard, (d > 0).to(alpha.dtype), alpha), torch.where(hard, 0.0, slope)


class _NoSecondDerivative(torch.autograd.Function):
    """Identity on ``g`` whose derivative raises: put in a backward's result under ``create_graph=True``, with an
    input ``d`` connected to the op's inputs, so that differentiating the gradient again raises (the kernels' ops
    raise too) instead of leaving out the term of ``f''`` (``torch.autograd.function.once_differentiable`` would hang
    its error on a detached leaf, which ``torch.autograd.grad(..., inputs)`` never reaches)."""

    @staticmethod
    def forward(ctx, g, d):
        return g.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            "relaxops sorting networks: no second derivative (the reference backend treats the "
            "relaxation's slope f'(d) as a constant; the kernels have no double backward either)"
        )


class _Relax(torch.autograd.Function):
    """``alpha = f(d)`` (computed by the caller, with ``slope = f'(d)``) carrying the analytic derivative: torch's
    derivative of ``abs``/``sign`` at 0 is wrong here. The math stays outside ``forward``: torch.compile cannot
    trace module-level float constants inside an autograd.Function (dynamic=True)."""

    @staticmethod
    def forward(ctx, d, alpha, slope):
        ctx.save_for_backward(d, slope)
        return alpha.clone()

    @staticmethod
    def backward(ctx, grad):
        d, slope = ctx.saved_tensors
        # f'(d) = 0 stops the gradient: for an infinite gap grad ~ d is infinite, and f'(d) d -> 0 is the limit
        out = torch.where(slope == 0, 0.0, grad * slope)
        if torch.is_grad_enabled():  # create_graph=True: a second derivative would miss f''(d)
            out = _NoSecondDerivative.apply(out, d)
        return out, None, None


def relax(d: torch.Tensor, relaxation: str, steepness: float, art_lambda: float = 0.25) -> torch.Tensor:
    """Differentiable ``alpha = f(d)`` (autograd uses the analytic ``f'``)."""
    with torch.no_grad():
        alpha, slope = alpha_and_slope(d, relaxation, steepness, art_lambda)
    return _Relax.apply(d, alpha, slope)
