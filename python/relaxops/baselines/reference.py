"""Pure-PyTorch NeuralSort and SoftSort: the test oracle and the fallback backend.

Written for clarity (the O(n^2) pairwise forms of the papers) and float64 correctness; gradients come from
autograd. Never changed to match a kernel.

Both return ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at ascending position
``r_j = n - k + j`` (column ``k - 1`` is the largest element); each column is a softmax over the elements.
"""

from __future__ import annotations

import torch


def _positions(n: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """The kept ascending positions n - k, ..., n - 1 as ``like``'s dtype."""
    return torch.arange(n - k, n, dtype=like.dtype, device=like.device)


def neuralsort(x: torch.Tensor, tau: float, k: int) -> torch.Tensor:
    """NeuralSort (Grover et al. 2019) on the rows of ``x [B, n]``, the last ``k`` ascending positions.

    With ``b_c = sum_i |x_c - x_i|``, the column of ascending position ``r`` is
    ``softmax_c(((2 r + 1 - n) x_c - b_c) / tau)``: the paper's descending-rank row ``n - 1 - r``, whose
    scaling ``n + 1 - 2 (n - r)`` multiplies the scores, read on ``-x``.
    """
    n = x.shape[-1]
    b = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs().sum(-1)  # [B, n]
    scale = 2 * _positions(n, k, x) + 1 - n  # [k]
    logits = (scale * x.unsqueeze(-1) - b.unsqueeze(-1)) / tau  # [B, c, j]
    return logits.softmax(dim=-2)


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
    """
    n = x.shape[-1]
    t = x.sort(dim=-1, stable=True).values[..., n - k :]  # [B, k]
    logits = -_abs_pow(t.unsqueeze(-2) - x.unsqueeze(-1), pow) / tau  # [B, c, j]
    return logits.softmax(dim=-2)
