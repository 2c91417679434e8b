"""Splitting backpropagation (docs/math/training.md §1): the output-space step and the regression onto it.

The training strategies of chapter 7 of the thesis are split over three modules of this package:

* ``split.py`` (this module): :func:`split_loss`, the generic two-stage scheme (docs/math/training.md §1.4) the other
  two build on;
* ``newton.py``: Newton losses (docs/math/training.md §2): :func:`~relaxops.training.newton.newton_target`,
  :class:`~relaxops.training.newton.NewtonLoss`, the closed-form gradients/Hessians and the sampling estimators;
* ``resgro.py``: RESGRO (docs/math/training.md §3), the derivative-free best-of-K output step.

Stage (a) maps the detached network output ``y`` to a target ``z*`` with any method (a gradient step, a Newton
step, a random search, a non-differentiable algorithm); stage (b) trains the network on ``1/2 ||z* - y||^2`` with
``z*`` held constant, so the network's optimiser sees the gradient ``y - z*``.
"""

from __future__ import annotations

from typing import Callable

import torch

from .._checks import floating_tensor

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    return reduction


def regression_to_target(y: torch.Tensor, z: torch.Tensor, reduction: str) -> torch.Tensor:
    """``1/2 ||z_n - y_n||^2`` per sample (all dimensions after the first summed), reduced; ``z`` is constant."""
    r = 0.5 * (z.detach() - y).square()
    r = r.flatten(1).sum(-1) if r.dim() > 1 else r
    if reduction == "mean":
        return r.mean()
    return r.sum() if reduction == "sum" else r


def split_loss(
    y: torch.Tensor, inner_step: Callable[[torch.Tensor], torch.Tensor], reduction: str = "mean"
) -> torch.Tensor:
    """Splitting backpropagation (docs/math/training.md §1.2, §1.4): regress the network output onto the result of an
    output-space step.

    Args:
        y: ``[N, *]`` network outputs (float; usually requires grad), one row per sample; the dimensions after the
            first are the sample's output (``[N, m]`` in docs/math/training.md).
        inner_step: maps a detached copy of ``y`` to the target ``z*`` of the same shape (stage (a)). It runs under
            ``torch.no_grad()``, so it may be non-differentiable (a solver, a random search, a Newton step).
        reduction: ``"mean"`` (default) or ``"sum"`` over the samples of ``1/2 ||z*_n - y_n||^2``, or ``"none"``
            for the ``[N]`` per-sample values. The thesis writes the sum; the mean keeps the scale of mean-reduced
            losses and only rescales the learning rate (docs/math/training.md §1.4, §8).

    Returns:
        a scalar (``[N]`` for ``"none"``) whose gradient w.r.t. ``y_n`` is ``y_n - z*_n`` (divided by N for
        ``"mean"``). No gradient reaches ``inner_step``: ``z*`` is a constant.

    With ``inner_step = lambda y: y - grad_l(y)`` (a unit gradient step on the batch loss ``l``) and
    ``reduction="sum"``, one optimiser step on this loss equals one step on ``l`` itself (docs/math/training.md §1.3).
    NaN in ``z*`` propagates into the loss and the gradient (the Newton and RESGRO steps of this package never produce
    it).
    """
    floating_tensor(y, "y")
    if y.shape[0] == 0:
        raise ValueError(f"y must hold at least one sample (N >= 1), got shape {tuple(y.shape)}")
    check_reduction(reduction)
    if not callable(inner_step):
        raise TypeError(f"inner_step must be callable (detached [N, m] tensor -> z*), got {type(inner_step).__name__}")
    with torch.no_grad():
        z = inner_step(y.detach())
    if not isinstance(z, torch.Tensor) or z.shape != y.shape:
        got = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"inner_step must return a tensor of y's shape {tuple(y.shape)}, got {got}")
    return regression_to_target(y, z.to(y.dtype), reduction)
