"""Rows of a batch along any dimension, of equal or varying length: the front end that the sorting operators share
(``dim``, ``lengths``, ``mask``, a ``k`` per row, ``hard``). The conventions: ``docs/ranking.md``.

The kernels see rows ``[B, n]`` whose real entries are a prefix: row ``b`` holds ``lengths[b]`` real entries, then
pads whose values they never read. A ``mask`` (real entries anywhere) is compacted to that layout by a scatter
(real entries first, in their order, then the pads) and every per-element output is gathered back, so
``lengths`` is the faster of the two. Pads of every output are 0, and so is every gradient that reaches a pad.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch

from . import _checks


class Rows(NamedTuple):
    """``x`` as rows: ``x [B, n]`` (the op dimension last, contiguous, x's dtype), ``lengths [B]`` int64 on x's
    device or ``None`` (every row full), and what puts outputs back: the batch shape (x's shape without ``dim``),
    ``dim`` (non-negative), ``dest [B, n]`` int64 (a mask's compaction: entry ``i`` of a row went to ``dest[i]``)
    or ``None``."""

    x: torch.Tensor
    lengths: torch.Tensor | None
    batch: torch.Size
    dim: int
    dest: torch.Tensor | None

    @property
    def n(self) -> int:
        return self.x.shape[-1]

    def elements(self, out: torch.Tensor) -> torch.Tensor:
        """A per-element output ``[B, n]`` (entry ``i`` belongs to element ``i``) in x's layout."""
        if self.dest is not None:
            out = out.gather(-1, self.dest)
        return self._back(out)

    def positions(self, out: torch.Tensor) -> torch.Tensor:
        """A per-position output ``[B, m]`` (sorted values, quantiles: the real positions first) in x's layout."""
        return self._back(out)

    def _back(self, out: torch.Tensor) -> torch.Tensor:
        """``[B, m]`` to x's layout. No view where none is needed (a 2-D x along its last dimension): each view is
        an autograd node, ~10 us of a small fwd+bwd."""
        if out.dim() != len(self.batch) + 1:
            out = out.reshape(*self.batch, out.shape[-1])
        return out if self.dim == len(self.batch) else out.movedim(-1, self.dim)

    def matrix(self, out: torch.Tensor) -> torch.Tensor:
        """A matrix ``[B, n, m]`` whose rows are the elements: ``[*batch, n, m]`` (the two matrix dimensions last,
        whatever ``dim``), its rows in x's element order."""
        if self.dest is not None:
            out = out.gather(-2, self.dest.unsqueeze(-1).expand_as(out))
        return out.reshape(*self.batch, *out.shape[-2:])

    def valid(self) -> torch.Tensor | None:
        """``[B, n]`` bool, True on the real entries of the compacted rows; ``None`` when every row is full."""
        if self.lengths is None:
            return None
        return torch.arange(self.n, device=self.x.device) < self.lengths.unsqueeze(-1)


def check_dim(x: torch.Tensor, dim) -> int:
    """``dim`` as a non-negative index of ``x``'s dimensions (negative counts from the end)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim must be in [{-x.dim()}, {x.dim() - 1}] for x of shape {tuple(x.shape)}, got {dim}")
    return int(dim) % x.dim()


def rows(x: torch.Tensor, dim=-1, lengths=None, mask=None) -> Rows:
    """``x`` (already checked as a floating tensor) as :class:`Rows` along ``dim``, with ``lengths`` (integers of
    x's shape without ``dim``, each in ``[0, n]``) or ``mask`` (bool of x's shape, True on the real entries), not
    both. Values are checked on the host once per tensor (a synchronisation on a GPU)."""
    dim = check_dim(x, dim)
    xl = x if dim == x.dim() - 1 else x.movedim(dim, -1)
    batch, n = xl.shape[:-1], xl.shape[-1]
    xb = xl if xl.dim() == 2 and xl.is_contiguous() else xl.reshape(math.prod(batch), n).contiguous()
    if lengths is not None and mask is not None:
        raise ValueError("lengths and mask: give at most one of them")
    dest = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
        if mask.shape != x.shape:
            raise ValueError(f"mask must have x's shape {tuple(x.shape)}, got {tuple(mask.shape)}")
        if mask.device != x.device:
            raise ValueError(f"mask must be on x's device {x.device}, got {mask.device}")
        m = mask.movedim(dim, -1).reshape(xb.shape)
        real = m.cumsum(-1)  # real entries up to and including i
        lengths = real[:, -1].contiguous() if n else m.new_zeros(m.shape[0], dtype=torch.int64)
        # real entry i goes to (real entries before it), a pad to lengths + (pads before it)
        ar = torch.arange(n, device=x.device)
        dest = torch.where(m, real - 1, lengths.unsqueeze(-1) + ar - real)
        xb = torch.empty_like(xb).scatter(-1, dest, xb)
    elif lengths is not None:
        if not isinstance(lengths, torch.Tensor) or lengths.dtype not in (torch.int32, torch.int64):
            raise TypeError(
                f"lengths must be an int32 or int64 tensor, got {getattr(lengths, 'dtype', type(lengths).__name__)}"
            )
        if lengths.shape != batch:
            raise ValueError(f"lengths must have x's shape without dim, {tuple(batch)}, got {tuple(lengths.shape)}")
        if lengths.device != x.device:
            raise ValueError(f"lengths must be on x's device {x.device}, got {lengths.device}")
        if lengths.numel() and not _checks.values_unknown(lengths) and not _checks.already_checked(("len", n), lengths):
            if not _checks.on_host(lengths):
                _checks.assert_on_device((lengths >= 0) & (lengths <= n), f"lengths must lie in [0, n] = [0, {n}]")
            else:
                lo, hi = (int(v) for v in torch.aminmax(lengths))
                if lo < 0 or hi > n:
                    raise ValueError(f"lengths must lie in [0, n] = [0, {n}], found values in [{lo}, {hi}]")
            _checks.mark_checked(("len", n), lengths)  # the caller's tensor: checked once while it is unchanged
        lengths = lengths.reshape(-1).to(torch.int64).contiguous()
    return Rows(xb, lengths, batch, dim, dest)


def per_row_k(k, r: Rows, *, default_all: bool = False):
    """``k`` (an int, or an integer tensor of x's shape without ``dim``) as ``(K, k_rows)``: the output width ``K``
    (the largest k) and ``k_rows [B]`` int64, or ``None`` when every row takes ``K``: ``k`` lies in ``[1, n]``
    (checked on the host) and a row shorter than its k takes its length (0 to ``K`` for the kernels)."""
    n = r.n
    if isinstance(k, torch.Tensor):
        if k.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"k must be an int or an int32/int64 tensor, got a {k.dtype} tensor")
        if k.shape != r.batch:
            raise ValueError(f"k as a tensor must have x's shape without dim, {tuple(r.batch)}, got {tuple(k.shape)}")
        if k.device != r.x.device:
            raise ValueError(f"k must be on x's device {r.x.device}, got {k.device}")
        kb = k.reshape(-1).to(torch.int64).contiguous()
        if kb.numel() == 0:
            return 1, None
        lo, hi = (int(v) for v in torch.aminmax(kb))
        if lo < 1 or hi > n:
            raise ValueError(f"k must lie in [1, n] = [1, {n}], found values in [{lo}, {hi}]")
        K = hi
    else:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n:
            raise ValueError(f"k must be an integer in [1, n] = [1, {n}] or a tensor of them, got {k!r}")
        K, kb = int(k), None
    if r.lengths is not None:  # a row shorter than k keeps all its entries
        kb = torch.minimum(kb if kb is not None else torch.full_like(r.lengths, K), r.lengths)
    return K, kb


def straight_through(exact: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """``exact`` forward, the gradient of ``soft`` backward."""
    return exact + (soft - soft.detach())


def exact_order(x: torch.Tensor, lengths: torch.Tensor | None, descending: bool = False) -> torch.Tensor:
    """``perm [B, n]`` int64: ``perm[b, r]`` is the element at sorted position ``r`` of row ``b`` (ties by index,
    NaN as the largest value); the pads of a row take its last positions, in their order."""
    key = -x if descending else x
    if lengths is not None:
        pad = torch.arange(x.shape[-1], device=x.device) >= lengths.unsqueeze(-1)
        key = key.masked_fill(pad, math.nan)  # NaN sorts last; stable: a row's own NaNs stay before its pads
    return torch.sort(key, dim=-1, stable=True).indices


def exact_ranks(perm: torch.Tensor, lengths: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """1-based ranks ``[B, n]`` from :func:`exact_order`'s ``perm``; 0 on the pads."""
    pos = torch.arange(1, perm.shape[-1] + 1, device=perm.device, dtype=dtype).expand(perm.shape)
    if lengths is not None:
        pos = pos * (pos <= lengths.unsqueeze(-1))
    return torch.empty(perm.shape, dtype=dtype, device=perm.device).scatter_(-1, perm, pos)


def exact_matrix(perm: torch.Tensor, lengths: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The permutation matrix ``P [B, n, n]``: ``P[b, c, r] = 1`` where element ``c`` is at position ``r``; 0 in
    the rows and columns of the pads."""
    B, n = perm.shape
    P = torch.zeros(B, n, n, dtype=dtype, device=perm.device)
    one = torch.ones(B, 1, n, dtype=dtype, device=perm.device)
    if lengths is not None:
        one = one * (torch.arange(n, device=perm.device) < lengths.unsqueeze(-1)).unsqueeze(1).to(dtype)
    return P.scatter_(-2, perm.unsqueeze(-2), one)
