"""Public functions of the sorting-network family: argument checks, batching, dtypes, backend choice. The math,
conventions and gradients: ``docs/math/sortnet.md``.

Under ``torch.compile`` a graph specializes on ``n`` (and ``k``): the network is built for concrete sizes; the
batch dimensions stay dynamic.
"""

from __future__ import annotations

import math

import torch

from .. import _backend, _checks, _ext
from . import ops, reference
from .networks import check_network_name, network_comparators, resolve_network, selection_key, warn_if_not_sorting
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


def _sort_rows(x, network, relaxation, steepness, art_lambda, return_matrix, backend, hint):
    """Sort the rows of ``x [..., n]``; returns ``(sorted [..., n], X [..., n, n] | None)`` in x's dtype."""
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
        s, X = reference.sort(xb, resolve_network(network, n), relaxation, steepness, art_lambda, return_matrix)
    else:
        s, X = ops.sort(xb, network, rid, steepness, art_lambda, return_matrix, backend)
    s = s.to(x.dtype).reshape(x.shape)
    if X is not None:
        X = X.to(x.dtype).reshape(*batch, n, n)
    return s, X


def sort(
    x: torch.Tensor,
    network: str = "bitonic",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    return_matrix: bool = True,
    descending: bool = False,
    backend: str = "auto",
):
    """Differentiable sort of the last dimension of ``x`` with a relaxed sorting network.

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
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

    Returns:
        ``(sorted [..., n], X [..., n, n] or None)``. ``X`` follows the convention of the original code:
        ``X[..., c, r]`` is the weight of input element ``c`` at output position ``r``, so
        ``sorted == (x.unsqueeze(-2) @ X).squeeze(-2)``; X is doubly stochastic.

    Non-finite inputs (every backend): NaN propagates to the outputs (and gradients) of its row that it touches;
    +inf and -inf are ordered as the largest and smallest values: an infinite gap is a hard comparison, so
    infinities sort exactly to the ends, equal infinities tie, the permutation matrix, ranks and top-k matrix
    stay finite (doubly stochastic), and gradients stay finite.

    Raises ``MemoryError`` (with the size) before any work that cannot fit in the device's memory, and
    ``ValueError`` (naming n) for a network of more than 2^24 comparators before it is built: bitonic and
    bitonic_original take n <= 197560, odd_even n <= 5793; the network for an accepted n is built once per process
    (cached), in 7 to 13 s and 2 to 4.5 GB at the largest n (one core of a loaded 2-core machine; milliseconds for
    n <= 1000).
    """
    hint = "use a smaller batch" + (" or return_matrix=False" if return_matrix else "")
    s, X = _sort_rows(x, network, relaxation, steepness, art_lambda, return_matrix, backend, hint)
    if descending:
        s = s.flip(-1)
        X = X.flip(-1) if X is not None else None
    return s, X


def rank(
    x: torch.Tensor,
    network: str = "bitonic",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    descending: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Differentiable 1-based ranks of the elements of ``x [..., n]``: the expected positions under the relaxed
    permutation matrix, computed without it.

    ``rank[..., c] = sum_r (r + 1) X[..., c, r]`` with ``X`` the matrix of :func:`sort`: the expected (ascending,
    1 = smallest) position of input ``c``; with ``descending=True``, 1 = largest (``n + 1 - rank``). Ranks of a
    row sum to ``n (n + 1) / 2``. Since ``X = P^T`` and every layer ``P_l`` is symmetric, ``X (1..n) =
    P_1 ... P_L (1..n)``: one values pass, then the positions through the layers in reverse, O(L n) time per row,
    forward and backward, never an ``n x n`` matrix. Memory: the backward recomputes the values pass (O(n) per
    row plus O(L n) work buffers per thread), except on the CPU where a forward that needs a gradient saves it
    (d and alpha of the ``C ~ L n / 2`` comparators, per row, in buffers reused across calls) when that takes at
    most 1 GiB and a quarter of the available memory (``B = 128, n = 5000`` in float32: 0.23 GB; the matrix alone
    would be 12.8 GB).
    Arguments, non-finite inputs and errors as in :func:`sort`; returns ``[..., n]`` in x's dtype.
    """
    rid, steepness, art_lambda = _check_args(x, network, relaxation, steepness, art_lambda)
    n = int(x.shape[-1])  # specializes a symbolic n (the network is built for it)
    backend = _backend.resolve("sortnet", backend, x.device)
    if not torch.compiler.is_compiling():  # a Python side effect: warned by eager calls
        warn_if_not_sorting(network, n)
    _check_rank_memory(x, network, n, backend)

    def rows(xb):
        if backend == "reference":
            r = reference.rank(xb, resolve_network(network, n), relaxation, steepness, art_lambda)
        else:
            r = ops.Rank.apply(xb, network, rid, steepness, art_lambda, backend)
        return (n + 1) - r if descending else r

    return _checks.on_rows(x, n, _checks.compute_dtype(x.dtype), rows)


def topk(
    x: torch.Tensor,
    k: int,
    network: str = "splitter_selection",
    relaxation: str = "cauchy",
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    backend: str = "auto",
) -> torch.Tensor:
    """Differentiable top-k of the last dimension of ``x``: the relaxed top-k attribution matrix.

    Computed bi-directionally: a values pass over the network keeps the alphas, then the ``k`` rows of the
    relaxed permutation matrix that hold the top ``k`` are built from the last layer back; O(L n k) work and
    O(L n + n k) memory per row, forward and backward, never an ``n x n`` matrix.

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        k: number of top elements, ``1 <= k <= n``.
        network: ``"splitter_selection"`` (a selection network for the top k: e.g. 22 layers for n = 1024,
            k = 5 against 55 for bitonic), or a sorting network (``"bitonic"``, ``"odd_even"``,
            ``"bitonic_original"``), or a key from ``relaxops.sortnet.networks.register_network``.
        relaxation, steepness, art_lambda, backend: as in :func:`relaxops.sort`.

    Returns:
        ``X_top [..., n, k]`` in x's dtype, the convention of difftopk: ``X_top[..., c, j]`` is the weight of
        input ``c`` at rank ``k - j`` (column ``k - 1`` = rank 1, the largest; column ``k - r`` = rank ``r``);
        it equals the last ``k`` columns of the full relaxed permutation matrix of the same network
        (``relaxops.sort(...)[1][..., -k:]``), and ``(x.unsqueeze(-2) @ X_top)`` are the relaxed top-k values
        in ascending order. Columns sum to 1.

    Non-finite inputs and errors as in :func:`relaxops.sort`. Sizes: the network may have at most 2^24
    comparators, checked from its count before it is built (a ValueError naming n and k): ``"splitter_selection"``
    takes every k for n <= 5000, k <= 3485 for n = 10^4, k <= 1302 for n = 10^5, k <= 511 for n = 10^6 (none
    beyond n = 1651923; its size grows like n k for large k, where ``"bitonic"``, whose n limit is that of
    :func:`relaxops.sort`, is much smaller). The network is built once per process (cached): milliseconds to a
    second for n <= 10^4, k <= 100; at the limit up to about 75 s and 4 GB (one core of a loaded 2-core machine).
    """
    xb, n, k, key, rid, steepness, art_lambda, backend = _topk_args(
        x, k, network, relaxation, steepness, art_lambda, backend
    )
    if backend == "reference":
        X = reference.topk(xb, resolve_network(key, n), k, relaxation, steepness, art_lambda)
    else:
        X = ops.topk(xb, k, key, rid, steepness, art_lambda, backend)
    return X.to(x.dtype).reshape(*x.shape[:-1], n, k)


def topk_rows(
    x: torch.Tensor,
    k: int,
    rows: torch.Tensor,
    network: str,
    relaxation: str,
    steepness: float,
    art_lambda: float | None,
    backend: str,
) -> torch.Tensor:
    """``topk(x, k, ...)[b, rows[b]]`` as ``[B, k]``, for ``x [B, n]`` and ``rows`` int64 ``[B]`` in ``[0, n)`` (the
    top-k loss reads the label's row only): the CPU kernels write that row and read its gradient directly, where a
    gather from the ``[B, n, k]`` matrix would fill a ``[B, n, k]`` gradient."""
    xb, n, k, key, rid, steepness, art_lambda, backend = _topk_args(
        x, k, network, relaxation, steepness, art_lambda, backend
    )
    if backend == "reference":
        X = reference.topk(xb, resolve_network(key, n), k, relaxation, steepness, art_lambda)
    elif backend == "cpu":
        return ops.topk(xb, k, key, rid, steepness, art_lambda, backend, rows).to(x.dtype)
    else:
        X = ops.topk(xb, k, key, rid, steepness, art_lambda, backend)
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
