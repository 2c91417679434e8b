"""RESGRO, the REgularized Sampling GREedy Optimizer (docs/math/training.md §3; thesis chapter 7): a
derivative-free output-space step for splitting backpropagation.

Module layout of the training strategies: ``split.py`` (:func:`split_loss`), ``newton.py`` (Newton losses) and
this module.

Around the current output ``y`` draw candidates ``y + scale * xi`` and keep, per sample row, the one with the
lowest loss; the network then regresses onto that target. The loss may be discontinuous (a negative Kendall tau,
a 0/1 path match): only its values are used. Locality (few candidates, small noise) is the regulariser.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from .._checks import floating_tensor
from .split import check_reduction, regression_to_target

NOISES = ("gaussian", "cauchy", "laplace", "logistic", "uniform")
SUBSETS = ("per_row", "shared")


def _noise(shape, kind: str, generator, dtype, device) -> torch.Tensor:
    """Zero-centred unit-scale noise: N(0, 1), Cauchy(0, 1), Laplace(0, 1), logistic(0, 1) or U(-1, 1)."""
    if kind == "gaussian":
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)
    eps = torch.finfo(dtype).eps
    u = torch.rand(shape, generator=generator, dtype=dtype, device=device).clamp(eps, 1 - eps)  # no +-inf
    if kind == "cauchy":
        return torch.tan(math.pi * (u - 0.5))
    if kind == "laplace":
        v = u - 0.5
        return -torch.sign(v) * torch.log1p(-2 * v.abs())
    if kind == "logistic":
        return torch.log(u) - torch.log1p(-u)
    return 2 * u - 1


def _int_at_least(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return v


def resgro_target(
    y: torch.Tensor,
    loss_per_sample: Callable,
    K: int,
    noise: str = "gaussian",
    scale: float = 0.1,
    pool_size: int | None = None,
    n_sets: int = 1,
    generator: torch.Generator | None = None,
    *,
    subsets: str = "per_row",
    include_current: bool = False,
    targets: tuple = (),
) -> torch.Tensor:
    """The RESGRO target z* ``[N, m]`` (docs/math/training.md §3.1/§3.2): per sample row, the best of K random
    candidates around y.

    Args:
        y: ``[N, m]`` current outputs (detached inside).
        loss_per_sample: ``([C, N, m], *targets) -> [C, N]``: the loss of every candidate of every row; called
            **once** on all candidates stacked (C = K·n_sets, or pool_size). Need not be differentiable.
        K: candidates per set, >= 1.
        noise: ``"gaussian"``, ``"cauchy"``, ``"laplace"``, ``"logistic"`` or ``"uniform"`` (on [-1, 1]),
            zero-centred, multiplied by ``scale``; the thesis names Gaussian and Cauchy but reports neither the
            distribution nor the scale of its tables (docs/math/training.md §8).
        scale: noise scale > 0.
        pool_size: None: vanilla — ``n_sets`` independent sets of K fresh candidates (n_sets = 1 is the thesis's one-set
            RESGRO; more sets estimate the expectation form), the winners averaged. An int M >= K: bootstrapped —
            M candidates evaluated once, then ``n_sets`` random subsets of K distinct pool members, the subset
            winners averaged.
        n_sets: number of sets R >= 1.
        generator: optional torch.Generator (the result is deterministic given it).
        subsets: bootstrapped only: ``"per_row"`` (default: every row draws its own subsets) or ``"shared"``.
        include_current: also offer y itself in every set (an extension; not in the thesis's definition). It wins ties.
        targets: extra arguments passed to ``loss_per_sample`` after the candidates.

    Ties inside a set go to the lowest index (the current point first, then sampling / pool order). Rows are
    independent: row n's target depends only on row n's losses (given the generator).

    Returns:
        ``z*`` ``[N, m]``, detached, in y's dtype.
    """
    floating_tensor(y, "y")
    if y.dim() != 2 or y.shape[0] == 0 or y.shape[1] == 0:
        raise ValueError(f"y must be [N, m] with N, m >= 1, got shape {tuple(y.shape)}")
    if not callable(loss_per_sample):
        raise TypeError(f"loss_per_sample must be callable, got {type(loss_per_sample).__name__}")
    _int_at_least(K, "K", 1)
    _int_at_least(n_sets, "n_sets", 1)
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {', '.join(map(repr, NOISES))}, got {noise!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if pool_size is not None:
        _int_at_least(pool_size, "pool_size", 1)
        if pool_size < K:
            raise ValueError(f"pool_size must be >= K = {K}, got {pool_size}")
    if subsets not in SUBSETS:
        raise ValueError(f"subsets must be one of {', '.join(map(repr, SUBSETS))}, got {subsets!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")

    y = y.detach()
    N, m = y.shape
    count = K * n_sets if pool_size is None else pool_size
    candidates = y + scale * _noise((count, N, m), noise, generator, y.dtype, y.device)
    if include_current:
        candidates = torch.cat([y[None], candidates])
    with torch.no_grad():
        losses = loss_per_sample(candidates, *targets)
    if not isinstance(losses, torch.Tensor) or tuple(losses.shape) != tuple(candidates.shape[:2]):
        got = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
        raise ValueError(
            f"loss_per_sample must map candidates [C, N, m] to [C, N] = {tuple(candidates.shape[:2])}, got {got}"
        )
    # NaN loses against every number (argmin would pick it): treat it as +inf
    losses = torch.nan_to_num(losses.detach(), nan=math.inf)
    rows = torch.arange(N, device=y.device)
    offset = 1 if include_current else 0
    if pool_size is None:  # sets of consecutive candidates: set r holds indices offset + r K .. offset + (r+1) K - 1
        sampled = losses[offset:].reshape(n_sets, K, N)
        index = torch.arange(count, device=y.device).view(n_sets, K, 1).expand(n_sets, K, N) + offset  # [R, K, N]
        if include_current:
            sampled = torch.cat([losses[:1].expand(n_sets, 1, N), sampled], 1)
            index = torch.cat([torch.zeros(n_sets, 1, N, dtype=index.dtype, device=y.device), index], 1)
    else:  # bootstrapped: R uniformly random K-subsets of the pool, members in ascending pool order
        keys_shape = (n_sets, pool_size, 1 if subsets == "shared" else N)
        keys = torch.rand(keys_shape, generator=generator, device=y.device)
        members = keys.argsort(1)[:, :K].sort(1).values.expand(n_sets, K, N) + offset  # [R, K, N]
        if include_current:
            members = torch.cat([torch.zeros(n_sets, 1, N, dtype=members.dtype, device=y.device), members], 1)
        sampled = losses[members, rows]  # [R, K', N]
        index = members
    best = sampled.argmin(1)  # [R, N], first minimum
    winners = index.gather(1, best[:, None]).squeeze(1)  # [R, N] candidate indices
    return candidates[winners, rows].mean(0)


class ResgroLoss(nn.Module):
    """Splitting backpropagation with the RESGRO step: ``split_loss(y, lambda y0: resgro_target(y0, ...))``.

    Args: ``loss_per_sample``, ``K``, ``noise``, ``scale``, ``pool_size``, ``n_sets``, ``subsets`` and
    ``include_current`` as in :func:`resgro_target`; ``reduction`` (``"mean"``, ``"sum"``, ``"none"``) as in
    :func:`~relaxops.training.split.split_loss`; ``generator`` an optional torch.Generator drawn from at every call.

    ``forward(y, *targets)``: ``y`` ``[N, m]``; ``targets`` go to ``loss_per_sample``. Returns the regression loss
    onto the target (its gradient w.r.t. y_n is ``y_n - z*_n``, over N for ``"mean"``).
    """

    def __init__(
        self,
        loss_per_sample: Callable,
        K: int = 10,
        noise: str = "gaussian",
        scale: float = 0.1,
        pool_size: int | None = None,
        n_sets: int = 1,
        reduction: str = "mean",
        generator: torch.Generator | None = None,
        *,
        subsets: str = "per_row",
        include_current: bool = False,
    ):
        super().__init__()
        check_reduction(reduction)
        # validate the options once, here, on a dummy row
        resgro_target(
            torch.zeros(1, 1),
            lambda c: c.sum(-1),
            K,
            noise,
            scale,
            pool_size,
            n_sets,
            torch.Generator(),
            subsets=subsets,
            include_current=include_current,
        )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.loss_per_sample = loss_per_sample
        self.K, self.noise, self.scale, self.pool_size, self.n_sets = K, noise, scale, pool_size, n_sets
        self.reduction, self.generator = reduction, generator
        self.subsets, self.include_current = subsets, include_current

    def target(self, y: torch.Tensor, *targets) -> torch.Tensor:
        return resgro_target(
            y,
            self.loss_per_sample,
            self.K,
            self.noise,
            self.scale,
            self.pool_size,
            self.n_sets,
            self.generator,
            subsets=self.subsets,
            include_current=self.include_current,
            targets=targets,
        )

    def forward(self, y: torch.Tensor, *targets) -> torch.Tensor:
        floating_tensor(y, "y")
        return regression_to_target(y, self.target(y, *targets), self.reduction)

    def extra_repr(self) -> str:
        return (
            f"K={self.K}, noise={self.noise!r}, scale={self.scale:g}, pool_size={self.pool_size}, "
            f"n_sets={self.n_sets}, reduction={self.reduction!r}"
        )
