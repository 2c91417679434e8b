"""Pure-PyTorch NeuralSort and SoftSort: the test oracle and the fallback backend.

Written for clarity (the O(n^2) pairwise forms of the papers) and float64 correctness; gradients come from
autograd. Never changed to match a kernel.

Both return ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at ascending position
``r_j = n - k + j`` (column ``k - 1`` is the largest element); each column is a softmax over the elements.
"""

from __future__ import annotations

import math

import torch


def _positions(n: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """The kept ascending positions n - k, ..., n - 1 as ``like``'s dtype."""
    return torch.arange(n - k, n, dtype=like.dtype, device=like.device)


def neuralsort(x: torch.Tensor, tau: float, k: int) -> torch.Tensor:
    """NeuralSort (Grover et al. 2019) on the rows of ``x [B, n]``, the last ``k`` ascending positions.

    With ``b_c = sum_i |x_c - x_i|``, the column of ascending position ``r`` is
    ``softmax_c(((2 r + 1 - n) x_c - b_c) / tau)``: the paper's descending-rank row ``n - 1 - r``, whose
    scaling ``n + 1 - 2 (n - r)`` multiplies the scores, read on ``-x``.

    Non-finite values (the limits of ``csrc/baselines/baselines.h``): the ``lo`` -inf elements own the columns
    of positions ``[0, lo)`` and the ``hi`` +inf ones those of ``[n - hi, n)`` (equal shares), the finite ones
    get NeuralSort of the finite sub-row (``f`` elements) at position ``r - lo``; a NaN makes the row NaN.
    """
    n = x.shape[-1]
    inf = x.isinf()
    lo = (x == -math.inf).sum(-1, keepdim=True).unsqueeze(-1)  # [B, 1, 1]
    hi = (x == math.inf).sum(-1, keepdim=True).unsqueeze(-1)
    f = n - lo - hi
    # Softmax is shift invariant: centring on the median finite value (a constant, no gradient) keeps the
    # pairwise sums O(n (max - min)) whatever the offset of x, as the kernels do.
    centre = x.detach().masked_fill(~x.isfinite(), math.nan).nanmedian(-1, keepdim=True).values.nan_to_num()
    xf = x.masked_fill(inf, 0) - centre  # infinite elements enter only through the masks (gradient 0)
    b = ((xf.unsqueeze(-1) - xf.unsqueeze(-2)).abs() * ~inf.unsqueeze(-2)).sum(-1)  # sums over finite i
    r = _positions(n, k, x)  # [k]
    a = (2 * (r - lo) + 1 - f) * xf.unsqueeze(-1) - b.unsqueeze(-1)  # [B, c, j]
    inside = (r >= lo) & (r < n - hi)  # columns of the finite positions
    own = torch.where(x.unsqueeze(-1) < 0, r < lo, r >= n - hi)  # an infinite element's own columns
    # a + (-inf): weight 0, but NaN (from a NaN in b) still poisons the column
    logits = torch.where(inf.unsqueeze(-1), torch.where(own, 0.0, -math.inf), a + torch.where(inside, 0.0, -math.inf))
    # max-stabilised before the division by tau, so that a tiny tau cannot overflow the logits
    return ((logits - logits.amax(dim=-2, keepdim=True).detach()) / tau).softmax(dim=-2)


def _abs_pow(d: torch.Tensor, p: float) -> torch.Tensor:
    """``|d|^p`` with gradient 0 at ``d = 0`` for every ``p > 0`` (``torch.pow`` gives inf * 0 = NaN for
    ``p < 1``); the entry of the element at position ``r`` itself has ``d = 0`` identically."""
    a = d.abs()
    zero = a == 0
    return torch.where(zero, torch.zeros_like(a), torch.where(zero, torch.ones_like(a), a) ** p)


def softsort(x: torch.Tensor, tau: float, k: int, pow: float = 1.0) -> torch.Tensor:
    """SoftSort (Prillo & Eisenschlos 2020) on the rows of ``x [B, n]``, the last ``k`` ascending positions.

    The column of ascending position ``r`` is ``softmax_c(-|x_(r) - x_c|^pow / tau)`` with ``x_(r)`` the
    ``r``-th smallest value (``torch.sort(stable=True)``; its gradient goes to the element sorted there).
    Non-finite values: equal infinities have distance 0 (their limit), other infinite distances weight 0, and
    infinite elements get gradient 0; a NaN makes the row NaN.
    """
    n = x.shape[-1]
    t = x.sort(dim=-1, stable=True).values[..., n - k :].unsqueeze(-2)  # [B, 1, k]
    xc = x.unsqueeze(-1)  # [B, n, 1]
    tie = t == xc  # also equal infinities: distance 0 in the limit
    far = (t - xc).isinf()  # weight 0 in the limit
    # infinite values enter only through the masks (gradient 0); a NaN stays in d
    d = torch.where(tie | far, 0.0, t.masked_fill(t.isinf(), 0) - xc.masked_fill(xc.isinf(), 0))
    logits = (-_abs_pow(d, pow) / tau).masked_fill(far, -math.inf)
    return logits.softmax(dim=-2)
