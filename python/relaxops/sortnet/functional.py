"""Public functions of the sorting-network family: argument checks, batching, dtypes, backend choice. The math,
conventions and gradients: ``docs/math/sortnet.md``.

Under ``torch.compile`` a graph specializes on ``n`` (and ``k``): the network is built for concrete sizes; the
batch dimensions stay dynamic.

Every op takes ``dim``, ``lengths`` or ``mask`` (padded rows: each row runs the network for its own length) and
``hard`` (the exact result forward, the relaxed gradient backward); the top-k op takes a ``k`` per row. The front
end is ``relaxops._rows``; the conventions: docs/math/sortnet.md, "Any dimension, padded rows, k per row, hard".
"""

from __future__ import annotations

import math

import torch

from .. import _backend, _checks, _ext, _rows
from . import ops, reference
from .networks import (
    check_network_name,
    network_comparators,
    resolve_network,
    row_networks,
    selection_key,
    warn_if_not_sorting,
)
from .relaxations import relaxation_id


def _check_args(x, network, relaxation, steepness, art_lambda, selection=False):
    _checks.floating_tensor(x, "x")
    if x.shape[-1] < 1:
        raise ValueError(f"x must have at least one element in its last dimension (n >= 1), got shape {tuple(x.shape)}")
    check_network_name(network, allow_selection=selection)
    rid = relaxation_id(relaxation)
    steepness = _checks.positive_finite(steepness, "steepness")
    art_lambda = _checks.in_closed_interval(art_lambda, "art_lambda", 0.0, 1.0)
    return rid, steepness, art_lambda


def _check_memory(x, key: str, n: int, m: int, backend: str, what: str, hint: str, copies: int = 1) -> None:
    """Refuse work that cannot fit, before any buffer is allocated. Per row, in the compute dtype: the kernels
    keep the input and the values (2 n), a gap and a weight per comparator (2 C) and ``copies`` of the output
    matrix of ``m`` columns (m n each; top-k makes a transposed copy); the reference keeps ~5 tensors per
    comparator (5 C), its output and, when autograd records, the two mixed rows (m entries each) of every
    comparator (2 C m). C is counted, not built: a network too large to build is refused here (ValueError)."""
    if torch.compiler.is_compiling():  # checked by the eager call; graphs see symbolic batch sizes
        return
    C = network_comparators(key, n)
    if backend == "reference":
        saved = 2 * C * m if torch.is_grad_enabled() and x.requires_grad else 0
        per_row = 2 * n + 5 * C + m * n + saved
        hint += ", or a kernel backend (backend='cpu' or 'cuda')"
    else:
        per_row = 2 * n + 2 * C + copies * m * n
    nbytes = math.prod(x.shape[:-1]) * per_row * _checks.compute_dtype(x.dtype).itemsize
    _checks.memory_fits(
        nbytes,
        x.device,
        f"{what} of x {list(x.shape)} ({backend} backend: outputs, work buffers and saved tensors)",
        hint,
    )


def _check_rank_memory(x, key: str, n: int, backend: str) -> None:
    """Refuse ranks that cannot fit. Per row, in the compute dtype: the input, the ranks and the gradient (3 n);
    the cpu kernels keep d, alpha and u_i - u_j of every comparator and three rows for a tile of 16 rows per thread
    (16 (3 C + 3 n)), the GPU kernels per row (workspaces: 3 C + n); the reference keeps ~7 tensors per comparator
    for autograd (7 C). The cpu forward's saved d, alpha are not counted: it saves them only where they fit. C as
    in ``_check_memory``."""
    if torch.compiler.is_compiling():  # checked by the eager call; graphs see symbolic batch sizes
        return
    C = network_comparators(key, n)
    rows = math.prod(x.shape[:-1])
    hint = "use a smaller batch"
    if backend == "reference":
        values = rows * (3 * n + 7 * C)
        hint += ", or a kernel backend (backend='cpu' or 'cuda')"
    elif backend == "cpu":
        values = rows * 3 * n + _ext._C.num_threads() * 16 * (3 * C + 3 * n)
    else:
        values = rows * (4 * n + 3 * C)
    _checks.memory_fits(
        values * _checks.compute_dtype(x.dtype).itemsize,
        x.device,
        f"the relaxed rank of x {list(x.shape)} ({backend} backend: outputs and work buffers)",
        hint,
    )


def _check_hard(hard) -> bool:
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    return hard


def _front(x, dim, lengths, mask, hard):
    """``x`` as :class:`relaxops._rows.Rows` (checked: n >= 1 along ``dim``), and ``hard``."""
    _checks.floating_tensor(x, "x")
    d = _rows.check_dim(x, dim)
    if x.shape[d] < 1:
        raise ValueError(f"x must have at least one element along dim (n >= 1), got shape {tuple(x.shape)}")
    if lengths is None and mask is None:  # full rows as a view: the memory checks run before any copy
        xl = x if d == x.dim() - 1 else x.movedim(d, -1)  # no views where none is needed (autograd nodes)
        xb = xl if xl.dim() == 2 else xl.reshape(-1, xl.shape[-1])
        return _rows.Rows(xb, None, xl.shape[:-1], d, None), _check_hard(hard)
    return _rows.rows(x, d, lengths, mask), _check_hard(hard)


def _needs_soft(x: torch.Tensor, hard: bool) -> bool:
    """The relaxed op runs: always, or with ``hard`` only for its gradient."""
    return not hard or (torch.is_grad_enabled() and x.requires_grad)


def _reference_rows(key: str, n: int, lengths, ks, m: int):
    """The reference's row networks (``networks.row_networks``), or None for full rows of one network."""
    if lengths is None and ks is None:
        return None
    return row_networks(key, n, lengths, ks, m)


def _sort_rows(x, network, relaxation, steepness, art_lambda, return_matrix, backend, hint, lengths=None):
    """Sort the rows of ``x [B, n]`` (``lengths [B]`` int64 or None); returns ``(sorted [B, n], X [B, n, n] | None)``
    in x's dtype (its ``[..., n]`` batch shape kept without lengths)."""
    rid, steepness, art_lambda = _check_args(x, network, relaxation, steepness, art_lambda)
    n = int(x.shape[-1])  # specializes a symbolic n (the network is built for it)
    backend = _backend.resolve("sortnet", backend, x.device)
    if not torch.compiler.is_compiling():  # a Python side effect: warned by eager calls
        warn_if_not_sorting(network, n)
    _check_memory(x, network, n, n if return_matrix else 0, backend, "the relaxed sort", hint)
    batch = x.shape[:-1]
    cdtype = _checks.compute_dtype(x.dtype)
    xb = x.reshape(-1, n).to(cdtype).contiguous()
    if backend == "reference":
        rows = _reference_rows(network, n, lengths, None, n)
        s, X = reference.sort(xb, resolve_network(network, n), relaxation, steepness, art_lambda, return_matrix, rows)
    else:
        s, X = ops.sort(xb, network, rid, steepness, art_lambda, return_matrix, backend, lengths)
    s = s.to(x.dtype).reshape(x.shape)
    if X is not None:
        X = X.to(x.dtype).reshape(*batch, n, n)
    return s, X


def _reverse_positions(t: torch.Tensor, lengths, dim: int) -> torch.Tensor:
    """Positions ``0 .. L_b - 1`` of each row of ``t`` (along ``dim``, -1 or -2 of ``[B, n(, m)]``) reversed, pads
    in place."""
    if lengths is None:
        return t.flip(dim)
    n = t.shape[dim]
    p = torch.arange(n, device=t.device)
    idx = torch.where(p < lengths[:, None], lengths[:, None] - 1 - p, p)  # [B, n]
    if dim == -2 or t.dim() == 2:
        return t.gather(1, idx if t.dim() == 2 else idx.unsqueeze(-1).expand_as(t))
    return t.gather(2, idx.unsqueeze(1).expand_as(t))


def _pads_zero(t: torch.Tensor, lengths) -> torch.Tensor:
    """``t [B, n]`` with 0 on the positions ``>= L_b`` (a select: pads may hold NaN)."""
    if lengths is None:
        return t
    return torch.where(torch.arange(t.shape[1], device=t.device) < lengths[:, None], t, 0.0)


def sort(
    x: torch.Tensor,
    network: str = "bitonic",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    return_matrix: bool = True,
    descending: bool = False,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
):
    """Differentiable sort of the last dimension of ``x`` (or of ``dim``) with a relaxed sorting network.

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        network: ``"bitonic"`` (a bitonic wiring that sorts for every n), ``"odd_even"`` (odd-even
            transposition, n layers) or ``"bitonic_original"`` (the diffsort wiring, which does not sort
            every input for some n that are not powers of two; warns).
        relaxation: ``"logistic"``, ``"logistic_phi"`` (ART), ``"gaussian"``, ``"reciprocal"``,
            ``"cauchy"`` or ``"optimal"``; the last three are monotone (see ``relaxops.sortnet.relaxations``).
        steepness: inverse temperature ``s > 0``, as in diffsort (for ``reciprocal`` the thesis' beta is s/4).
        art_lambda: ART exponent in [0, 1] (only ``logistic_phi``).
        return_matrix: also return the relaxed permutation matrix (O(L n^2) work); ``False`` is the O(L n)
            values-only mode.
        descending: sort largest first (the matrix columns are reversed accordingly).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.
        dim: the dimension to sort (negative counts from the end).
        lengths: int32/int64 tensor of x's shape without ``dim``, each in ``[0, n]``: row b holds ``lengths[b]``
            real entries first, then pads; or
        mask: bool tensor of x's shape, True on the real entries (anywhere in a row). At most one of the two. A
            row of length L is sorted by the network for L (exactly what the unpadded row gives); its pads take
            no part: their values are never read, every pad entry of the outputs is 0 (sorted positions L..n-1,
            the pads' rows and columns of X) and no gradient reaches them.
        hard: the exact sort forward (exact values and permutation matrix, ties by index as
            ``torch.sort(stable=True)``), the relaxed op's gradient backward (straight-through).

    Returns:
        ``(sorted, X or None)``: ``sorted`` of x's shape (along ``dim``, the real entries' values first in every
        row), ``X [*batch, n, n]`` (batch = x's shape without ``dim``). ``X`` follows the convention of the
        original code: ``X[..., c, r]`` is the weight of input element ``c`` (its rows in x's element order,
        also with a mask) at output position ``r``, so ``sorted == (x.unsqueeze(-2) @ X).squeeze(-2)`` along the
        last dimension; X is doubly stochastic (on the real entries).

    Non-finite inputs (every backend): NaN propagates to the outputs (and gradients) of its row that it touches;
    +inf and -inf are ordered as the largest and smallest values: an infinite gap is a hard comparison, so
    infinities sort exactly to the ends, equal infinities tie, the permutation matrix, ranks and top-k matrix
    stay finite (doubly stochastic), and gradients stay finite.

    Raises ``MemoryError`` (with the size) before any work that cannot fit in the device's memory, and
    ``ValueError`` (naming n) for a network of more than 2^24 comparators before it is built: bitonic and
    bitonic_original take n <= 197560, odd_even n <= 5793; the network for an accepted n is built once per process
    (cached), in 7 to 13 s and 2 to 4.5 GB at the largest n (one core of a loaded 2-core machine; milliseconds for
    n <= 1000). With lengths, bitonic and odd_even run the network for n (the network for each length is a part of
    it); bitonic_original builds the network for each distinct length present (cached).
    """
    r, hard = _front(x, dim, lengths, mask, hard)
    hint = "use a smaller batch" + (" or return_matrix=False" if return_matrix else "")
    xb, L = r.x, r.lengths
    s = X = None
    if _needs_soft(xb, hard):
        s, X = _sort_rows(xb, network, relaxation, steepness, art_lambda, return_matrix, backend, hint, L)
    if hard:
        perm = _rows.exact_order(xb, L)
        se = _pads_zero(xb.detach().gather(1, perm), L)  # the exact values forward only
        Xe = _rows.exact_matrix(perm, L, xb.dtype) if return_matrix else None
        if s is None:  # the arguments of the relaxed op, checked all the same
            _check_args(xb, network, relaxation, steepness, art_lambda)
            _backend.resolve("sortnet", backend, x.device)
            s, X = se, Xe
        else:
            s = _rows.straight_through(se, s)
            X = _rows.straight_through(Xe, X) if return_matrix else None
    if descending:
        s = _reverse_positions(s, L, -1)
        X = _reverse_positions(X, L, -1) if X is not None else None
    return r.positions(s), (r.matrix(X) if X is not None else None)


def rank(
    x: torch.Tensor,
    network: str = "bitonic",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    descending: bool = False,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
) -> torch.Tensor:
    """Differentiable 1-based ranks of the elements of ``x`` along ``dim``: the expected positions under the
    relaxed permutation matrix, computed without it.

    ``rank[..., c] = sum_r (r + 1) X[..., c, r]`` with ``X`` the matrix of :func:`sort`: the expected (ascending,
    1 = smallest) position of input ``c``; with ``descending=True``, 1 = largest (``n + 1 - rank``). Ranks of a
    row sum to ``n (n + 1) / 2``. Since ``X = P^T`` and every layer ``P_l`` is symmetric, ``X (1..n) =
    P_1 ... P_L (1..n)``: one values pass, then the positions through the layers in reverse, O(L n) time per row,
    forward and backward, never an ``n x n`` matrix. Memory: the backward recomputes the values pass (O(n) per
    row plus O(L n) work buffers per thread), except on the CPU where a forward that needs a gradient saves it
    (d and alpha of the ``C ~ L n / 2`` comparators, per row, in buffers reused across calls) when that takes at
    most 1 GiB and a quarter of the available memory (``B = 128, n = 5000`` in float32: 0.23 GB; the matrix alone
    would be 12.8 GB).

    ``dim``, ``lengths``, ``mask``: as in :func:`sort` (a row of length L has ranks in [1, L], with
    ``descending`` ``L + 1 - rank``; pads 0). ``hard``: the exact integer ranks forward (ties by index), the
    relaxed gradient backward.
    Arguments, non-finite inputs and errors as in :func:`sort`; returns x's shape and dtype.
    """
    r, hard = _front(x, dim, lengths, mask, hard)
    xb, L = r.x, r.lengths
    rid, steepness, art_lambda = _check_args(xb, network, relaxation, steepness, art_lambda)
    n = int(xb.shape[-1])  # specializes a symbolic n (the network is built for it)
    out = None
    backend = _backend.resolve("sortnet", backend, x.device)
    if _needs_soft(xb, hard):
        if not torch.compiler.is_compiling():  # a Python side effect: warned by eager calls
            warn_if_not_sorting(network, n)
        _check_rank_memory(xb, network, n, backend)

        def rows(xc):
            if backend == "reference":
                rn = _reference_rows(network, n, L, None, n)
                return reference.rank(xc, resolve_network(network, n), relaxation, steepness, art_lambda, rn)
            return ops.Rank.apply(xc, network, rid, steepness, art_lambda, backend, L)

        out = _checks.on_rows(xb, n, _checks.compute_dtype(x.dtype), rows)
    if hard:
        exact = _rows.exact_ranks(_rows.exact_order(xb, L), L, xb.dtype)
        out = exact if out is None else _rows.straight_through(exact, out)
    if descending:
        top = (n + 1) if L is None else (L[:, None] + 1).to(out.dtype)
        out = _pads_zero(top - out, L)
    return r.elements(out)


def topk(
    x: torch.Tensor,
    k,
    network: str = "splitter_selection",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
) -> torch.Tensor:
    """Differentiable top-k along ``dim`` of ``x``: the relaxed top-k attribution matrix.

    Computed bi-directionally: a values pass over the network keeps the alphas, then the ``k`` rows of the
    relaxed permutation matrix that hold the top ``k`` are built from the last layer back; O(L n k) work and
    O(L n + n k) memory per row, forward and backward, never an ``n x n`` matrix.

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        k: number of top elements, ``1 <= k <= n``, or an int32/int64 tensor of x's shape without ``dim`` (a k per
            row, each in ``[1, n]``; a row shorter than its k takes its length).
        network: ``"splitter_selection"`` (a selection network for the top k: e.g. 22 layers for n = 1024,
            k = 5 against 55 for bitonic), or a sorting network (``"bitonic"``, ``"odd_even"``,
            ``"bitonic_original"``), or a key from ``relaxops.sortnet.networks.register_network``.
        relaxation, steepness, art_lambda, backend, dim, lengths, mask: as in :func:`relaxops.sort` (with a k per
            row or lengths, splitter_selection builds the network for each distinct (length, k) present).
        hard: the exact top-k matrix forward (the last k columns of the exact ascending permutation matrix: ties
            by index, the later index ranks higher), the relaxed gradient backward.

    Returns:
        ``X_top [*batch, n, K]`` in x's dtype (batch = x's shape without ``dim``, K = the largest k), the
        convention of difftopk: ``X_top[..., c, j]`` is the weight of input ``c`` at rank ``K - j`` (column
        ``K - 1`` = rank 1, the largest; column ``K - r`` = rank ``r``; columns ``K - r`` for ``r`` above a row's
        k are 0); it equals the last ``k`` columns of the full relaxed permutation matrix of the same network
        (``relaxops.sort(...)[1][..., -k:]``), and ``(x.unsqueeze(-2) @ X_top)`` are the relaxed top-k values
        in ascending order. Columns of a row's top k sum to 1.

    Non-finite inputs and errors as in :func:`relaxops.sort`. Sizes: the network may have at most 2^24
    comparators, checked from its count before it is built (a ValueError naming n and k): ``"splitter_selection"``
    takes every k for n <= 5000, k <= 3485 for n = 10^4, k <= 1302 for n = 10^5, k <= 511 for n = 10^6 (none
    beyond n = 1651923; its size grows like n k for large k, where ``"bitonic"``, whose n limit is that of
    :func:`relaxops.sort`, is much smaller). The network is built once per process (cached): milliseconds to a
    second for n <= 10^4, k <= 100; at the limit up to about 75 s and 4 GB (one core of a loaded 2-core machine).
    """
    r, hard = _front(x, dim, lengths, mask, hard)
    xb, L = r.x, r.lengths
    K, kb = _rows.per_row_k(k, r)
    X = None
    if _needs_soft(xb, hard):
        xc, n, K, key, rid, steepness, art_lambda, backend = _topk_args(
            xb, K, network, relaxation, steepness, art_lambda, backend
        )
        if backend == "reference":
            rn = _reference_rows(key, n, L, kb, K)
            X = reference.topk(xc, resolve_network(key, n), K, relaxation, steepness, art_lambda, rn)
        else:
            X = ops.topk(xc, K, key, rid, steepness, art_lambda, backend, lengths=L, ks=kb)
        X = X.to(x.dtype)
    if hard:
        if X is None:  # the arguments of the relaxed op, checked all the same
            _topk_args(xb, K, network, relaxation, steepness, art_lambda, backend)
        exact = _exact_topk(xb, L, kb, K)
        X = exact if X is None else _rows.straight_through(exact, X)
    return r.matrix(X)


def _exact_topk(x: torch.Tensor, lengths, ks, K: int) -> torch.Tensor:
    """The exact top-k matrix ``[B, n, K]``: column ``K - r`` holds the element at ascending position ``L_b - r``
    (rank r, ties by index) for ``r <= k_b``, 0 elsewhere."""
    B, n = x.shape
    perm = _rows.exact_order(x, lengths)
    o = torch.arange(K, device=x.device)
    L = torch.full((B, 1), n, device=x.device) if lengths is None else lengths[:, None]
    kb = torch.full((B, 1), K, device=x.device) if ks is None else ks[:, None]
    elem = perm.gather(1, (L - K + o).clamp(min=0))
    valid = (o >= K - kb).to(x.dtype)
    return x.new_zeros(B, n, K).scatter_(1, elem.unsqueeze(1), valid.unsqueeze(1))


def topk_rows(
    x: torch.Tensor,
    k: int,
    rows: torch.Tensor,
    network: str,
    relaxation: str,
    steepness: float,
    art_lambda: float | None,
    backend: str,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """``topk(x, k, ..., lengths=lengths)[b, rows[b]]`` as ``[B, k]``, for ``x [B, n]`` and ``rows`` int64 ``[B]``
    in ``[0, n)`` (the top-k loss reads the label's row only): the CPU kernels write that row and read its gradient
    directly, where a gather from the ``[B, n, k]`` matrix would fill a ``[B, n, k]`` gradient."""
    xb, n, k, key, rid, steepness, art_lambda, backend = _topk_args(
        x, k, network, relaxation, steepness, art_lambda, backend
    )
    kb = None if lengths is None else torch.clamp(lengths, max=k)
    if backend == "reference":
        rn = _reference_rows(key, n, lengths, kb, k)
        X = reference.topk(xb, resolve_network(key, n), k, relaxation, steepness, art_lambda, rn)
    elif backend == "cpu":
        return ops.topk(xb, k, key, rid, steepness, art_lambda, backend, rows, lengths=lengths, ks=kb).to(x.dtype)
    else:
        X = ops.topk(xb, k, key, rid, steepness, art_lambda, backend, lengths=lengths, ks=kb)
    return X.gather(1, rows.view(-1, 1, 1).expand(-1, 1, k)).squeeze(1).to(x.dtype)


def _topk_args(x, k, network, relaxation, steepness, art_lambda, backend):
    """The checked arguments of a top-k: ``(xb [B, n] contiguous in the compute dtype, n, k, the network key,
    relaxation id, steepness, art_lambda, concrete backend)``."""
    rid, steepness, art_lambda = _check_args(x, network, relaxation, steepness, art_lambda, selection=True)
    n = int(x.shape[-1])  # specializes a symbolic n, and k below (the network is built for them)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in [1, n] = [1, {n}], got {k!r}")
    k = int(k)
    key = selection_key(network, k)
    backend = _backend.resolve("sortnet", backend, x.device)
    if not torch.compiler.is_compiling():  # a Python side effect: warned by eager calls
        warn_if_not_sorting(network, n)
    _check_memory(x, key, n, k, backend, "the relaxed top-k", "use a smaller batch or k", copies=2)
    xb = x.reshape(-1, n).to(_checks.compute_dtype(x.dtype)).contiguous()
    return xb, n, k, key, rid, steepness, art_lambda, backend
