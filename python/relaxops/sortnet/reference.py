"""Pure-PyTorch differentiable sorting networks: the test oracle and the fallback backend.

Written for clarity and float64 correctness; gradients come from autograd over an explicit running
matrix (O(L n^2) saved per row). Never changed to match a kernel. Non-finite inputs follow the rule of the
kernels (``csrc/sortnet/sortnet.h``): equal values tie, an infinite gap is a hard comparison that passes both
wires through, NaN propagates.
"""

from __future__ import annotations

import torch

from .networks import Network, RowNetworks
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


def _wire_layers(x: torch.Tensor, net: Network, rows: RowNetworks | None):
    """The layers in wire-parallel form, ``[(i, j, active), ...]`` (each ``[B, n]``, or ``[1, n]`` for full rows):
    wire ``w`` belongs to comparator ``(i[w], j[w])`` (``w`` is one of them; ``i`` receives the min), or is idle
    (``i = j = w``, ``active`` False). With ``rows``: row b runs its group's layer, a comparator only within the
    row's layer range and with both wires below its length (docs/math/sortnet.md, "Any dimension, padded rows")."""
    n, dev = x.shape[1], x.device
    if rows is None:  # one network, from its Python layer lists: constants when torch.compile traces
        layers = []
        for layer in net.layers:
            if layer:
                i, j = list(range(net.n)), list(range(net.n))
                for lo, hi in layer:  # the first wire of a comparator receives the min
                    i[hi], j[lo] = lo, hi
                ii, jj = torch.tensor([i], device=dev), torch.tensor([j], device=dev)
                layers.append((ii, jj, ii != jj))
        return layers
    nets = rows.nets
    Lmax = max(g.num_layers for g in nets)
    ii = torch.arange(n).repeat(len(nets), Lmax, 1)  # [G, Lmax, n]; idle wires: i = j = w
    jj = ii.clone()
    for g, gnet in enumerate(nets):
        if gnet.num_comparators == 0:
            continue
        partner, comp = (torch.from_numpy(a).long() for a in gnet.wire_tables())
        w = torch.arange(gnet.n)
        is_min = (comp >= 0) & (torch.from_numpy(gnet.cmin).long()[comp.clamp(min=0)] == w)
        ii[g, : gnet.num_layers, : gnet.n] = torch.where(is_min, w, partner)
        jj[g, : gnet.num_layers, : gnet.n] = torch.where(is_min, partner, w)
    ii, jj = ii.to(dev), jj.to(dev)
    g, L, l0, l1 = (rows.spec[:, c, None] for c in range(4))
    ii, jj = ii[g[:, 0]].transpose(0, 1), jj[g[:, 0]].transpose(0, 1)  # [Lmax, B, n]
    lay = torch.arange(Lmax, device=dev)[:, None, None]
    active = (ii != jj) & (lay >= l0) & (lay < l1) & (ii < L) & (jj < L)
    w = torch.arange(n, device=dev)
    ii, jj = torch.where(active, ii, w), torch.where(active, jj, w)
    return [(ii[l], jj[l], active[l]) for l in range(Lmax) if bool(active[l].any())]


def _values(x: torch.Tensor, net: Network, relaxation: str, steepness: float, art_lambda: float, rows=None):
    """The values pass: returns ``(values [B, n], [(partner, alpha) for each non-empty layer])``, both ``[B, n]``
    per wire: the other wire of its comparator (itself when idle) and the comparator's alpha (1 when idle: the
    identity). With ``rows`` the pads are 0 from the start (their values are never read) and stay idle."""
    if rows is not None:
        x = x.masked_fill(torch.arange(x.shape[1], device=x.device) >= rows.spec[:, 1:2], 0.0)
    values = x
    layers = []
    for i, j, active in _wire_layers(x, net, rows):
        i, j = i.expand_as(values), j.expand_as(values)
        xi, xj = values.gather(1, i), values.gather(1, j)
        d = _Gap.apply(xi, xj)
        alpha = torch.where(active, relax(d, relaxation, steepness, art_lambda), 1.0)
        lo, hi = _swap(xi, xj, d, alpha)
        w = torch.arange(x.shape[1], device=x.device)
        values = torch.where(w == i, lo, hi)
        layers.append((torch.where(w == i, j, i), alpha))
    return values, layers


def _zero(x: torch.Tensor) -> torch.Tensor:
    """An exact 0 per row that depends on ``x`` (an empty sum): the matrices stay differentiable, with zero
    gradient, when the network has no comparators (``n = 1``), like the kernels' outputs."""
    return x[:, :0].sum(1)[:, None, None]


def _mix_rows(Y: torch.Tensor, partner, alpha) -> torch.Tensor:
    """The rows (wires) of ``Y [B, n, m]`` mixed by one layer, ``P_l Y`` (``P_l`` symmetric, [[a, 1-a], [1-a, a]]
    per comparator): row ``w`` becomes ``a Y[w] + (1 - a) Y[partner[w]]``; an idle wire (``a = 1``) is unchanged."""
    a = alpha.unsqueeze(-1)
    return a * Y + (1 - a) * Y.gather(1, partner.unsqueeze(-1).expand_as(Y))


def _valid(x: torch.Tensor, rows: RowNetworks | None) -> torch.Tensor | float:
    """``[B, n, 1]`` 1 on the real wires of each row (``rows``), or 1."""
    if rows is None:
        return 1.0
    return (torch.arange(x.shape[1], device=x.device) < rows.spec[:, 1:2]).to(x.dtype).unsqueeze(-1)


def sort(
    x: torch.Tensor,
    net: Network,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
    return_matrix: bool = True,
    rows: RowNetworks | None = None,
):
    """Relaxed sort of the rows of ``x [B, n]`` through ``net``.

    Returns ``(sorted [B, n], X [B, n, n] or None)`` with ``X = P^T`` (code convention: row = input element,
    column = ascending output position), so ``sorted = x @ X``. Untouched wires pass through exactly. With
    ``rows`` (``networks.row_networks``), row b runs its own network on its first ``L_b`` entries; everything of
    its pads is 0.
    """
    B, n = x.shape
    values, layers = _values(x, net, relaxation, steepness, art_lambda, rows)
    if not return_matrix:
        return values, None
    # Y = P_l ... P_1: row r is the distribution of output wire r over the inputs.
    Y = torch.eye(n, dtype=x.dtype, device=x.device) * _valid(x, rows) + _zero(x)
    for partner, alpha in layers:
        Y = _mix_rows(Y, partner, alpha)
    return values, Y.transpose(1, 2)


def topk(
    x: torch.Tensor,
    net: Network,
    k: int,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
    rows: RowNetworks | None = None,
):
    """Relaxed top-k matrix of the rows of ``x [B, n]`` through ``net``, bi-directionally (docs/math/sortnet.md §6).

    Returns ``X_top [B, n, k]``: the last ``k`` columns of ``X = P^T`` (column ``k-1`` = the largest, rank 1).
    Phase A runs the values forward and keeps every layer's alphas; phase T starts from ``R = E_k^T`` (rows
    ``n-k..n-1`` of the identity) and, from the last layer back, mixes the columns ``i, j`` of ``R``
    (``R <- R P_l``), so ``R = E_k^T P_L ... P_1``, the top-k rows of ``P``: O(L n k), never n x n. With ``rows``
    (built with a k per row, ``k_b <= L_b``), row b's ``k_b`` columns are its positions ``L_b - k_b .. L_b - 1``,
    right-aligned: column ``k - r`` is rank ``r`` (``k`` = the largest k); the others are 0.
    """
    B, n = x.shape
    _, layers = _values(x, net, relaxation, steepness, art_lambda, rows)
    # R^T [B, n, k]: row w = column w of R, so mixing columns of R mixes rows of R^T.
    if rows is None:
        Rt = torch.eye(n, dtype=x.dtype, device=x.device)[:, n - k :] + _zero(x)
    else:
        L, kb = rows.spec[:, 1, None, None], rows.spec[:, 4, None, None]
        w = torch.arange(n, device=x.device)[:, None]
        o = torch.arange(k, device=x.device)
        Rt = ((w == o + L - k) & (o >= k - kb)).to(x.dtype) + _zero(x)
    for partner, alpha in reversed(layers):
        Rt = _mix_rows(Rt, partner, alpha)
    return Rt


def rank(
    x: torch.Tensor,
    net: Network,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
    rows: RowNetworks | None = None,
):
    """Ascending 1-based soft ranks of the rows of ``x [B, n]`` through ``net``, without the matrix.

    ``rank = X @ (1..n) = P^T pos = P_1 P_2 ... P_L pos`` (every ``P_l`` is symmetric), ``pos = (1, ..., n)``: the
    values pass, then ``pos`` mixed by each layer's alphas from the last layer back; O(L n) per row, forward and
    (autograd) backward. Equals ``sort(...)[1] @ pos``, the definition the tests check it against. With ``rows``:
    ranks ``1..L_b`` of row b's real entries, 0 on its pads.
    """
    n = x.shape[1]
    _, layers = _values(x, net, relaxation, steepness, art_lambda, rows)
    r = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)[:, None] * _valid(x, rows) + _zero(x)  # [B, n, 1]
    for partner, alpha in reversed(layers):
        r = _mix_rows(r, partner, alpha)
    return r.squeeze(-1)
