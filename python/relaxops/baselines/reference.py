"""Pure-PyTorch NeuralSort and SoftSort: the test oracle and the fallback backend.

Written for clarity (the O(n^2) pairwise forms of the papers) and float64 correctness; gradients come from
autograd. Never changed to match a kernel.

Both return ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at the ascending position of column
``j``; each kept column is a softmax over the real elements of its row. Rows of varying length (``lengths``, the
real entries of row ``b`` are its first ``L_b``): the row is the op on ``x[b, :L_b]`` alone (``L_b`` in place of
``n`` in every formula), pads are never read, their rows and the dropped columns are 0. Columns:

* right-aligned (``left=False``): column ``j`` holds position ``L_b - k + j``, kept for ``j >= k - k_b`` with
  ``k_b = min(ks[b], L_b)`` (``ks=None``: ``k``); full rows: positions ``n - k .. n - 1``, column ``k - 1`` the
  largest element;
* left-aligned (``left=True``, ``k = n``, ``ks=None``): column ``j`` holds position ``j``, kept for ``j < L_b``.
"""

from __future__ import annotations

import math

import torch


def _layout(x: torch.Tensor, k: int, lengths, ks, left: bool):
    """``(real [B, n] bool, L [B, 1, 1], r [B, 1, k], keep [B, 1, k])``: the real entries, the lengths, each
    column's ascending position (x's dtype) and whether the column is kept."""
    B, n = x.shape
    dev = x.device
    L = lengths.to(dev, torch.int64) if lengths is not None else torch.full((B,), n, device=dev)
    kb = torch.minimum(ks.to(dev, torch.int64) if ks is not None else torch.full_like(L, k), L)
    j = torch.arange(k, device=dev)
    r = j.expand(B, k) if left else L[:, None] - k + j
    keep = (r >= (L - kb)[:, None]) & (r < L[:, None])
    real = torch.arange(n, device=dev) < L[:, None]
    return real, L[:, None, None].to(x.dtype), r.to(x.dtype)[:, None], keep[:, None]


def neuralsort(x: torch.Tensor, tau: float, k: int, lengths=None, ks=None, left: bool = False) -> torch.Tensor:
    """NeuralSort (Grover et al. 2019) on the rows of ``x [B, n]``: ``k`` columns laid out as the module
    docstring says (default: the last ``k`` ascending positions of full rows).

    With ``b_c = sum_i |x_c - x_i|`` over the row's real elements, the column of ascending position ``r`` is
    ``softmax_c(((2 r + 1 - L) x_c - b_c) / tau)``: the paper's descending-rank row ``L - 1 - r``, whose scaling
    ``L + 1 - 2 (L - r)`` multiplies the scores, read on ``-x``.

    Non-finite values (the limits of ``csrc/baselines/baselines.h``): the ``lo`` -inf elements own the columns
    of positions ``[0, lo)`` and the ``hi`` +inf ones those of ``[L - hi, L)`` (equal shares), the finite ones
    get NeuralSort of the finite sub-row (``f`` elements) at position ``r - lo``; a NaN makes the row NaN.
    """
    real, L, r, keep = _layout(x, k, lengths, ks, left)
    xr = x.masked_fill(~real, 0)  # pads: never read, gradient 0
    inf = xr.isinf()
    lo = (xr == -math.inf).sum(-1, keepdim=True).unsqueeze(-1)  # [B, 1, 1]
    hi = (xr == math.inf).sum(-1, keepdim=True).unsqueeze(-1)
    f = L - lo - hi
    # Softmax is shift invariant: centring on the median finite value (a constant, no gradient) keeps the
    # pairwise sums O(n (max - min)) whatever the offset of x, as the kernels do.
    finite = xr.detach().masked_fill(~(xr.isfinite() & real), math.nan)
    centre = finite.nanmedian(-1, keepdim=True).values.nan_to_num()
    xf = xr.masked_fill(inf, 0) - centre  # infinite elements enter only through the masks (gradient 0)
    b = ((xf.unsqueeze(-1) - xf.unsqueeze(-2)).abs() * (real & ~inf).unsqueeze(-2)).sum(-1)  # over finite real i
    a = (2 * (r - lo) + 1 - f) * xf.unsqueeze(-1) - b.unsqueeze(-1)  # [B, c, j]
    inside = (r >= lo) & (r < L - hi)  # columns of the finite positions
    own = torch.where(xr.unsqueeze(-1) < 0, r < lo, r >= L - hi)  # an infinite element's own columns
    # a + (-inf): weight 0, but NaN (from a NaN in b) still poisons the column
    logits = torch.where(inf.unsqueeze(-1), torch.where(own, 0.0, -math.inf), a + torch.where(inside, 0.0, -math.inf))
    logits = logits.masked_fill(~real.unsqueeze(-1), -math.inf).masked_fill(~keep, 0)  # dropped: zeroed below
    # max-stabilised before the division by tau, so that a tiny tau cannot overflow the logits
    X = ((logits - logits.amax(dim=-2, keepdim=True).detach()) / tau).softmax(dim=-2)
    return torch.where(keep & real.unsqueeze(-1), X, 0.0)


def _abs_pow(d: torch.Tensor, p: float) -> torch.Tensor:
    """``|d|^p`` with gradient 0 at ``d = 0`` for every ``p > 0`` (``torch.pow`` gives inf * 0 = NaN for
    ``p < 1``); the entry of the element at position ``r`` itself has ``d = 0`` identically."""
    a = d.abs()
    zero = a == 0
    return torch.where(zero, torch.zeros_like(a), torch.where(zero, torch.ones_like(a), a) ** p)


def softsort(
    x: torch.Tensor, tau: float, k: int, pow: float = 1.0, lengths=None, ks=None, left: bool = False
) -> torch.Tensor:
    """SoftSort (Prillo & Eisenschlos 2020) on the rows of ``x [B, n]``: ``k`` columns laid out as the module
    docstring says (default: the last ``k`` ascending positions of full rows).

    The column of ascending position ``r`` is ``softmax_c(-|x_(r) - x_c|^pow / tau)`` over the real elements,
    with ``x_(r)`` the ``r``-th smallest real value (a stable sort; its gradient goes to the element sorted
    there). Non-finite values: equal infinities have distance 0 (their limit), other infinite distances weight
    0, and infinite elements get gradient 0; a NaN makes the row NaN.
    """
    n = x.shape[-1]
    real, _, r, keep = _layout(x, k, lengths, ks, left)
    xr = x.masked_fill(~real, 0)  # pads: never read, gradient 0
    order = xr.masked_fill(~real, math.nan).sort(dim=-1, stable=True).indices  # pads last (NaN, stable)
    at = order.gather(-1, r[:, 0].long().clamp(0, n - 1))  # the element sorted at each column's position
    t = xr.gather(-1, at).unsqueeze(-2)  # [B, 1, k]
    xc = xr.unsqueeze(-1)  # [B, n, 1]
    tie = t == xc  # also equal infinities: distance 0 in the limit
    far = (t - xc).isinf()  # weight 0 in the limit
    # infinite values enter only through the masks (gradient 0); a NaN stays in d
    d = torch.where(tie | far, 0.0, t.masked_fill(t.isinf(), 0) - xc.masked_fill(xc.isinf(), 0))
    logits = (-_abs_pow(d, pow) / tau).masked_fill(far, -math.inf)
    logits = logits.masked_fill(~real.unsqueeze(-1), -math.inf).masked_fill(~keep, 0)  # dropped: zeroed below
    return torch.where(keep & real.unsqueeze(-1), logits.softmax(dim=-2), 0.0)
