"""Pure-PyTorch fast soft sort and soft rank (Blondel et al. 2020): the test oracle and the fallback backend.

Written for clarity from the formulas of docs/math/fastsort.md §1-2 (torchsort 0.1.10's conventions): the
permutahedron projections as isotonic regressions in descending sorted order, ``theta = x / eps`` and ``w = rho =
(n, ..., 1)`` for ranks, ``w = rho / eps`` and ``s = sort_desc(-x)`` for sorted values. Both are one problem: the
block value of PAV is ``M_B(p / eps) - M_B(q)`` (``M`` the mean for L2, ``LSE`` for KL) with ``p = x, q = rho`` (or
``log rho``) for ranks and ``p = rho, q = s`` for sorted values, ``p`` non-increasing. ``p / eps`` is never
formed: it overflows (``eps`` goes down to the smallest normal float64) and, for ranks, its rounding error (an ulp
of ``|x| / eps``) swamps the weights. Every block works with ``z = (p - a) / eps``, ``a`` the ``p`` of its first
element: 0 for ties, and small in every block (the solution lies in the permutahedron: a block's spread of
``p / eps`` is at most the range of ``q``).

PAV runs in Python on float64 numbers and returns the blocks; the outputs are then formed with differentiable
PyTorch ops, so the gradients come from autograd (independent of the kernels' hand-written backward). Computed in
float64 whatever the input dtype, returned in it. Never changed to match a kernel.

``descending=True`` is ``soft_rank(-x)`` (the largest element gets rank 1) and ``-soft_sort(-x)`` (values in
descending order). Non-finite inputs as documented in ``relaxops.soft_rank`` / ``soft_sort``. Padded rows
(``lengths``): each row's first ``L`` entries alone, zeros after them (the pads are sliced off, never read).
"""

from __future__ import annotations

import math

import torch


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log1p(math.exp(min(a, b) - m))


def _pav(p: list[float], q: list[float], eps: float, kl: bool) -> list[int]:
    """Blocks of the isotonic regression ``v_1 >= ... >= v_m`` with block values ``value(B) = M_B(p / eps) -
    M_B(q)``, ``p`` non-increasing, as the start index of each element's block. A block is ``(a, mz, mq, c)``:
    its first ``p``, ``M_B(z)`` with ``z = (p - a) / eps``, ``M_B(q)`` and its size, so ``value(B) = a / eps + mz -
    mq``. Adjacent blocks whose values violate the order, ``value(P) <= value(T)`` (ties pooled), i.e.
    ``(a_P - a_T) / eps + mz_P - mz_T <= mq_P - mq_T``, are merged (a gap that overflows to inf never merges)."""

    def combine(u, cu, v, cv):  # M over the union of two blocks from M of each
        return _logaddexp(u, v) if kl else (cu * u + cv * v) / (cu + cv)

    starts, stats = [], []  # the stack: block starts and statistics
    for i, (pi, qi) in enumerate(zip(p, q)):
        starts.append(i)
        stats.append((pi, 0.0, qi, 1))
        while len(starts) > 1:
            (aP, zP, qP, cP), (aT, zT, qT, cT) = stats[-2], stats[-1]
            if not (aP - aT) / eps + zP - zT <= qP - qT:
                break
            stats[-2:] = [(aP, combine(zP, cP, zT + (aT - aP) / eps, cT), combine(qP, cP, qT, cT), cP + cT)]
            starts.pop()
    block = []
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(p)
        block += [s] * (end - s)
    return block


def _segment_mean(v: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """Per element, the mean of ``v`` over its block (``block``: the block start of each element, 1-D)."""
    sums = torch.zeros_like(v).index_add(0, block, v)
    counts = torch.zeros_like(v).index_add(0, block, torch.ones_like(v))
    return (sums / counts)[block]


def _segment_logsumexp(v: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """Per element, ``log sum exp`` of ``v`` over its block, shifted by the block maximum (a constant: the gradient
    is the block softmax)."""
    m = torch.full_like(v, -math.inf).scatter_reduce(0, block, v.detach(), "amax")[block]
    return m + torch.zeros_like(v).index_add(0, block, (v - m).exp())[block].log()


def _isotonic(p: torch.Tensor, q: torch.Tensor, eps: float, kl: bool) -> torch.Tensor:
    """``f = p / eps - value`` per element for the blocks of ``_pav`` (``p``, ``q`` in descending order of ``p``):
    ``f = (z - M_B(z)) + M_B(q)`` with ``z = (p - a) / eps``, ``a`` the block's first ``p`` (a constant: ``f`` does
    not depend on it). Ranks are ``f`` (L2) or ``exp(f)`` (KL), sorted values ``-f``."""
    block = torch.tensor(_pav(p.tolist(), q.tolist(), eps, kl), dtype=torch.int64)
    z = (p - p.detach()[block]) / eps
    mean = _segment_logsumexp if kl else _segment_mean
    return (z - mean(z, block)) + mean(q, block)


def _rank_row(x: torch.Tensor, kl: bool, eps: float) -> torch.Tensor:
    """Ascending soft ranks of one NaN-free row: PAV over the finite elements, in descending order of x, with the
    weights rho of their positions; the +-inf elements take the extreme positions (equal ones share the mean of
    their positions' rho) and do not enter the graph."""
    n = x.shape[0]
    perm = torch.sort(x, descending=True, stable=True).indices
    xs = x[perm]
    rho = torch.arange(n, 0, -1, dtype=x.dtype)
    top, bottom = int((xs == math.inf).sum()), int((xs == -math.inf).sum())
    fin = slice(top, n - bottom)
    f = _isotonic(xs[fin], rho[fin].log() if kl else rho[fin], eps, kl)
    r = f.exp() if kl else f
    ranks = torch.cat([rho[:top].mean().expand(top), r, rho[n - bottom :].mean().expand(bottom)])
    return torch.empty_like(ranks).index_put((perm,), ranks)


def _sort_row(x: torch.Tensor, kl: bool, eps: float) -> torch.Tensor:
    """Ascending soft sorted values of one finite row: ``v - w`` with ``v = iso(w - s)`` (L2) or ``iso_KL(w, s)``
    (KL), ``w = rho / eps``, ``s = sort_desc(-x)``."""
    n = x.shape[0]
    s = torch.sort(-x, descending=True, stable=True).values
    return -_isotonic(torch.arange(n, 0, -1, dtype=x.dtype), s, eps, kl)


def _rows(x: torch.Tensor, regularization: str, eps: float, descending: bool, rank: bool, lengths) -> torch.Tensor:
    """The op on each row's first ``L_b`` entries alone; the pads are 0 and never read (their gradient is 0)."""
    n = x.shape[-1]
    xd = (-x.double() if descending else x.double()).reshape(-1, n)
    L = [n] * xd.shape[0] if lengths is None else lengths.reshape(-1).tolist()
    kl = regularization == "kl"
    out = []
    for row, Lb in zip(xd, L):
        real = row[:Lb]
        bad = real.isnan().any() or (not rank and real.isinf().any())
        if bad:  # NaN output, NaN gradient for every element of the row
            y = real * math.nan
        elif rank:
            y = _rank_row(real, kl, eps)
        else:
            y = _sort_row(real, kl, eps)
        if descending and not rank:
            y = -y
        out.append(torch.cat([y, y.new_zeros(n - Lb)]))
    y = torch.stack(out).reshape(x.shape) if out else xd.clone().reshape(x.shape)
    return y.to(x.dtype)


def soft_rank(
    x: torch.Tensor, regularization: str, regularization_strength: float, descending: bool, lengths=None
) -> torch.Tensor:
    """Soft ranks of the rows of ``x [..., n]`` (1-based; ascending: the largest gets n, or 1 if ``descending``).
    ``lengths`` (integers of x's shape without the last dimension, or None): each row's real length; the ranks of a
    row's first ``L`` entries are those of that row alone, its pads 0."""
    return _rows(x, regularization, regularization_strength, descending, True, lengths)


def soft_sort(
    x: torch.Tensor, regularization: str, regularization_strength: float, descending: bool, lengths=None
) -> torch.Tensor:
    """Soft sorted values of the rows of ``x [..., n]`` (ascending, or descending if ``descending``), at positions
    ``0..L-1`` of a row of length ``L`` (``lengths`` as in ``soft_rank``), then zeros."""
    return _rows(x, regularization, regularization_strength, descending, False, lengths)
