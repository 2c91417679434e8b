"""Pure-PyTorch fast soft sort and soft rank (Blondel et al. 2020): the test oracle and the fallback backend.

Written for clarity from the formulas of the spec (sorting.md section 6.4, torchsort 0.1.10's conventions): the
permutahedron projections as isotonic regressions in descending sorted order, ``theta = x / eps`` and ``w = rho =
(n, ..., 1)`` for ranks, ``w = rho / eps`` and ``s = sort_desc(-x)`` for sorted values. PAV runs in Python on
float64 numbers and returns the blocks; the block values are then formed with differentiable PyTorch ops, so the
gradients come from autograd (independent of the kernels' hand-written backward). Computed in float64 whatever the
input dtype, returned in it. Never changed to match a kernel.

``descending=True`` is ``soft_rank(-x)`` (the largest element gets rank 1) and ``-soft_sort(-x)`` (values in
descending order). Non-finite inputs as documented in ``relaxops.soft_rank`` / ``soft_sort``.
"""

from __future__ import annotations

import math

import torch


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log1p(math.exp(min(a, b) - m))


def _pav(y: list[float], w: list[float], kl: bool) -> list[int]:
    """Blocks of the isotonic regression ``argmin_{v_1 >= ... >= v_m}`` of the spec, as the start index of each
    element's block. L2: ``0.5 ||v - (y - w)||^2``, block value ``mean(y - w)``; KL: ``<exp(y - v), 1> + <exp(w),
    v>``, block value ``LSE(y) - LSE(w)``. Blocks whose values violate the order (``value(prev) <= value(top)``,
    ties pooled) are merged."""
    starts, stats = [], []  # the stack: block starts and (sum, count) or (LSE(y), LSE(w))

    def value(st):
        return st[0] / st[1] if not kl else st[0] - st[1]

    for i, (yi, wi) in enumerate(zip(y, w)):
        starts.append(i)
        stats.append((yi - wi, 1) if not kl else (yi, wi))
        while len(starts) > 1 and value(stats[-2]) <= value(stats[-1]):
            a, b = stats.pop(), stats.pop()
            starts.pop()
            if kl:
                stats.append((_logaddexp(a[0], b[0]), _logaddexp(a[1], b[1])))
            else:
                stats.append((a[0] + b[0], a[1] + b[1]))
    block = []
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(y)
        block += [s] * (end - s)
    return block


def _segment_mean(v: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """Per element, the mean of ``v`` over its block (``block``: the block start of each element, 1-D)."""
    sums = torch.zeros_like(v).index_add(0, block, v)
    counts = torch.zeros_like(v).index_add(0, block, torch.ones_like(v))
    return (sums / counts)[block]


def _segment_logsumexp(v: torch.Tensor, block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element, ``log sum exp`` of ``v`` over its block as ``(m, log sum exp(v - m))``, ``m`` the block maximum
    (a constant: the gradient is the block softmax); kept apart so that ``v - LSE`` cancels ``m`` exactly."""
    m = torch.full_like(v, -math.inf).scatter_reduce(0, block, v.detach(), "amax")[block]
    return m, torch.zeros_like(v).index_add(0, block, (v - m).exp())[block].log()


def _segment_log_softmax(v: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """``v - LSE_B(v)`` per element."""
    m, lse = _segment_logsumexp(v, block)
    return (v - m) - lse


def _rank_row(x: torch.Tensor, kl: bool, eps: float) -> torch.Tensor:
    """Ascending soft ranks of one NaN-free row: PAV over the finite elements, in descending order of theta, with
    the weights rho of their positions; the +-inf elements take the extreme positions (equal ones share the mean
    of their positions' rho) and do not enter the graph."""
    n = x.shape[0]
    perm = torch.sort(x, descending=True, stable=True).indices
    xs = x[perm]
    rho = torch.arange(n, 0, -1, dtype=x.dtype)
    top, bottom = int((xs == math.inf).sum()), int((xs == -math.inf).sum())
    fin = slice(top, n - bottom)
    theta = xs[fin] / eps
    w = rho[fin] if not kl else rho[fin].log()
    block = torch.tensor(_pav(theta.tolist(), w.tolist(), kl), dtype=torch.int64)
    # r = theta - v, grouped so that the large parts cancel exactly (ties: theta - mean(theta) = 0)
    if kl:
        r = (_segment_log_softmax(theta, block) + sum(_segment_logsumexp(w, block))).exp()
    else:
        r = (theta - _segment_mean(theta, block)) + _segment_mean(w, block)
    ranks = torch.cat([rho[:top].mean().expand(top), r, rho[n - bottom:].mean().expand(bottom)])
    return torch.empty_like(ranks).index_put((perm,), ranks)


def _sort_row(x: torch.Tensor, kl: bool, eps: float) -> torch.Tensor:
    """Ascending soft sorted values of one finite row: ``v - w`` with ``v = iso(w - s)`` (L2) or
    ``iso_KL(w, s)`` (KL), ``w = rho / eps``, ``s = sort_desc(-x)``."""
    n = x.shape[0]
    s = torch.sort(-x, descending=True, stable=True).values
    w = torch.arange(n, 0, -1, dtype=x.dtype) / eps
    # v - w, grouped so that w (up to n / eps) cancels exactly in singleton blocks
    if kl:
        block = torch.tensor(_pav(w.tolist(), s.tolist(), True), dtype=torch.int64)
        return -_segment_log_softmax(w, block) - sum(_segment_logsumexp(s, block))
    block = torch.tensor(_pav((w - s).tolist(), [0.0] * n, False), dtype=torch.int64)
    return (_segment_mean(w, block) - w) - _segment_mean(s, block)


def _rows(x: torch.Tensor, regularization: str, eps: float, descending: bool, rank: bool) -> torch.Tensor:
    xd = x.double()
    if descending:
        xd = -xd
    # ranks are shift invariant and sorted values shift equivariant: centre each row on its median finite value
    # (a constant), so that theta = x / eps keeps the weights rho in float64 whatever the offset of x
    finite = xd.detach().masked_fill(~xd.isfinite(), math.nan)
    centre = finite.nanmedian(-1, keepdim=True).values.nan_to_num() if xd.numel() else finite[..., :1]
    xd = xd - centre
    kl = regularization == "kl"
    out = []
    for row in xd.reshape(-1, x.shape[-1]):
        bad = row.isnan().any() or (not rank and row.isinf().any())
        if bad:  # NaN output, NaN gradient for every element of the row
            out.append(row * math.nan)
        elif rank:
            out.append(_rank_row(row, kl, eps))
        else:
            out.append(_sort_row(row, kl, eps))
    y = torch.stack(out).reshape(x.shape) if out else xd.clone()
    if not rank:
        y = y + centre
    if descending and not rank:
        y = -y
    return y.to(x.dtype)


def soft_rank(x: torch.Tensor, regularization: str, regularization_strength: float, descending: bool
              ) -> torch.Tensor:
    """Soft ranks of the rows of ``x [B, n]`` (1-based; ascending: the largest gets n, or 1 if ``descending``)."""
    return _rows(x, regularization, regularization_strength, descending, True)


def soft_sort(x: torch.Tensor, regularization: str, regularization_strength: float, descending: bool
              ) -> torch.Tensor:
    """Soft sorted values of the rows of ``x [B, n]`` (ascending, or descending if ``descending``)."""
    return _rows(x, regularization, regularization_strength, descending, False)
