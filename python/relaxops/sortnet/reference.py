"""Pure-PyTorch differentiable sorting networks: the test oracle and the fallback backend.

Written for clarity and float64 correctness; gradients come from autograd over an explicit running
matrix (O(L n^2) saved per row). Never changed to match a kernel. Non-finite inputs follow the rule of the
kernels (``csrc/sortnet/sortnet.h``): equal values tie, an infinite gap is a hard comparison that passes both
wires through, NaN propagates.
"""

from __future__ import annotations

import torch

from .networks import Network
from .relaxations import relax


class _Gap(torch.autograd.Function):
    """``d = x_j - x_i``, 0 for equal values (also two equal infinities, where the difference is NaN); its
    derivative is ``(-1, 1)`` everywhere, as in the kernels."""

    @staticmethod
    def forward(ctx, xi, xj):
        return torch.where(xi == xj, 0.0, xj - xi)

    @staticmethod
    def backward(ctx, grad):
        return -grad, grad


def _swap(xi, xj, d, alpha):
    """One relaxed comparator: ``(alpha x_i + (1 - alpha) x_j, (1 - alpha) x_i + alpha x_j)``, written with the gap
    as ``(x_j - alpha d, x_i + alpha d)`` so that autograd forms the alpha gradient from ``d`` (shift invariant,
    as the kernels; ``alpha x_i - alpha x_j`` cancels catastrophically for large ``|x|``). ``alpha = 0`` or ``1``
    passes both wires through exactly, also infinite ones (``0 * inf`` is formed neither here nor in backward)."""
    soft = (alpha > 0) & (alpha < 1)
    ad = alpha * torch.where(soft, d, 0.0)
    lo = torch.where(alpha == 0, xj, torch.where(alpha == 1, xi, xj - ad))
    hi = torch.where(alpha == 0, xi, torch.where(alpha == 1, xj, xi + ad))
    return lo, hi


def _values(x: torch.Tensor, net: Network, relaxation: str, steepness: float, art_lambda: float):
    """The values pass: returns ``(values [B, n], [(i, j, alpha [B, c]) for each non-empty layer])``."""
    values = x
    layers = []
    for layer in net.layers:
        if not layer:
            continue
        i = torch.tensor([c[0] for c in layer], device=x.device)
        j = torch.tensor([c[1] for c in layer], device=x.device)
        xi, xj = values[:, i], values[:, j]
        d = _Gap.apply(xi, xj)
        alpha = relax(d, relaxation, steepness, art_lambda)
        lo, hi = _swap(xi, xj, d, alpha)
        values = values.index_copy(1, i, lo).index_copy(1, j, hi)
        layers.append((i, j, alpha))
    return values, layers


def _zero(x: torch.Tensor) -> torch.Tensor:
    """An exact 0 per row that depends on ``x`` (an empty sum): the matrices stay differentiable, with zero
    gradient, when the network has no comparators (``n = 1``), like the kernels' outputs."""
    return x[:, :0].sum(1)[:, None, None]


def _mix_rows(Y: torch.Tensor, i, j, alpha) -> torch.Tensor:
    """Rows i, j of ``Y [B, n, m]`` mixed with [[a, 1-a], [1-a, a]] (one comparator layer, P_l symmetric)."""
    a = alpha.unsqueeze(-1)
    Yi, Yj = Y[:, i], Y[:, j]
    Y = Y.index_copy(1, i, a * Yi + (1 - a) * Yj)
    return Y.index_copy(1, j, (1 - a) * Yi + a * Yj)


def sort(
    x: torch.Tensor,
    net: Network,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
    return_matrix: bool = True,
):
    """Relaxed sort of the rows of ``x [B, n]`` through ``net``.

    Returns ``(sorted [B, n], X [B, n, n] or None)`` with ``X = P^T`` (code convention: row = input element,
    column = ascending output position), so ``sorted = x @ X``. Untouched wires pass through exactly.
    """
    B, n = x.shape
    values, layers = _values(x, net, relaxation, steepness, art_lambda)
    if not return_matrix:
        return values, None
    # Y = P_l ... P_1: row r is the distribution of output wire r over the inputs.
    Y = torch.eye(n, dtype=x.dtype, device=x.device) + _zero(x)
    for i, j, alpha in layers:
        Y = _mix_rows(Y, i, j, alpha)
    return values, Y.transpose(1, 2)


def topk(
    x: torch.Tensor,
    net: Network,
    k: int,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
):
    """Relaxed top-k matrix of the rows of ``x [B, n]`` through ``net``, bi-directionally (docs/math/sortnet.md §6).

    Returns ``X_top [B, n, k]``: the last ``k`` columns of ``X = P^T`` (column ``k-1`` = the largest, rank 1).
    Phase A runs the values forward and keeps every layer's alphas; phase T starts from ``R = E_k^T`` (rows
    ``n-k..n-1`` of the identity) and, from the last layer back, mixes the columns ``i, j`` of ``R``
    (``R <- R P_l``), so ``R = E_k^T P_L ... P_1``, the top-k rows of ``P``: O(L n k), never n x n.
    """
    B, n = x.shape
    _, layers = _values(x, net, relaxation, steepness, art_lambda)
    # R^T [B, n, k]: row w = column w of R, so mixing columns of R mixes rows of R^T.
    Rt = torch.eye(n, dtype=x.dtype, device=x.device)[:, n - k :] + _zero(x)
    for i, j, alpha in reversed(layers):
        Rt = _mix_rows(Rt, i, j, alpha)
    return Rt


def rank(
    x: torch.Tensor,
    net: Network,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
):
    """Ascending 1-based soft ranks of the rows of ``x [B, n]`` through ``net``, without the matrix.

    ``rank = X @ (1..n) = P^T pos = P_1 P_2 ... P_L pos`` (every ``P_l`` is symmetric), ``pos = (1, ..., n)``: the
    values pass, then ``pos`` mixed by each layer's alphas from the last layer back; O(L n) per row, forward and
    (autograd) backward. Equals ``sort(...)[1] @ pos``, the definition the tests check it against.
    """
    n = x.shape[1]
    _, layers = _values(x, net, relaxation, steepness, art_lambda)
    r = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)[:, None] + _zero(x)  # [B, n, 1]
    for i, j, alpha in reversed(layers):
        r = _mix_rows(r, i, j, alpha)
    return r.squeeze(-1)
