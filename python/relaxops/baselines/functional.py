"""NeuralSort and SoftSort relaxed sort matrices: argument checks, rows (``dim``, ``lengths``, ``mask``, ``k`` per
row), dtypes, backend choice, ``hard``. The math, conventions and gradients: ``docs/math/baselines.md``."""

from __future__ import annotations

import math

import torch

from .. import _backend, _checks, _rows
from . import ops, reference


def _check_args(x, tau, hard, pow):
    _checks.floating_tensor(x, "x")
    tau = _checks.positive_finite(tau, "tau")
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    return tau, _checks.positive_finite(pow, "pow")


def _check_memory(method, backend, x, dim, k, hard, cdtype, mask) -> None:
    """Refuse work whose buffers cannot fit in the device's memory: per row, the kernels keep O(n k) (X, the
    gradient of X in backward, the exact matrix and straight-through copies for ``hard``), the reference's
    autograd graph about ten ``[n, k]`` tensors and, for NeuralSort, three ``[n, n]`` ones (the pairwise sums);
    plus the rows of x (a copy, with ``dim`` moved last)."""
    if torch.compiler.is_compiling():  # checked when the eager call runs
        return
    shape = x.shape
    n = shape[dim]
    rows = math.prod(shape) // max(n, 1)
    per_row = (2 + 3 * hard) * n * k * cdtype.itemsize + n * (3 * cdtype.itemsize + 8)
    if cdtype != x.dtype or mask:
        per_row += n * k * x.dtype.itemsize  # X converted back to x's dtype / gathered back to the mask's rows
    hint = "use a smaller batch or k"
    if backend == "reference":
        per_row += (10 * n * k + (3 * n * n if method == "NeuralSort" else 0)) * cdtype.itemsize
        hint += ", or a compiled backend (backend='cpu' or 'cuda': O(n k) memory)"
    out = (*(int(s) for i, s in enumerate(shape) if i != dim), n, k)
    _checks.memory_fits(
        rows * per_row,
        x.device,
        f"the {method} matrix of shape {out} ({cdtype}) with its work buffers on backend {backend!r}",
        hint,
    )


def _exact(r: _rows.Rows, K: int, kb, left: bool, dtype) -> torch.Tensor:
    """The exact (zero-temperature) matrix ``[B, n, K]`` in the layout of the soft one: column ``j`` is the
    one-hot of the element sorted (stably, ties by index) at the column's position; dropped columns and pad rows
    0."""
    B, n = r.x.shape
    dev = r.x.device
    L = r.lengths if r.lengths is not None else torch.full((B,), n, device=dev)
    kb = torch.minimum(kb if kb is not None else torch.full_like(L, K), L)
    j = torch.arange(K, device=dev)
    pos = j.expand(B, K) if left else L[:, None] - K + j
    keep = (pos >= (L - kb)[:, None]) & (pos < L[:, None])
    at = _rows.exact_order(r.x, r.lengths).gather(-1, pos.clamp(0, n - 1))  # [B, K]
    out = torch.zeros(B, n, K, dtype=dtype, device=dev)
    return out.scatter_(-2, at.unsqueeze(-2), keep.unsqueeze(-2).to(dtype))


def _relaxed_sort_matrix(method, x, tau, k, hard, pow, backend, dim, lengths, mask):
    tau, pow = _check_args(x, tau, hard, pow)
    dim = _rows.check_dim(x, dim)
    n = x.shape[dim]
    if n < 1:
        raise ValueError(f"x must have at least one element along dim (n >= 1), got shape {tuple(x.shape)}")
    backend = _backend.resolve("baselines", backend, x.device)
    cdtype = _checks.compute_dtype(x.dtype)
    # before the rows are copied (an expanded x would be materialised), with the smallest width k can give
    small_k = n if k is None else k if isinstance(k, int) and 1 <= k <= n else 1
    _check_memory(method, backend, x, dim, small_k, hard, cdtype, mask is not None)
    r = _rows.rows(x, dim, lengths, mask)
    if k is None:  # the full matrix, left-aligned: column r = ascending position r
        K, kb, left = n, None, True
    else:  # right-aligned: column K - q holds rank q (q = 1 the largest)
        K, kb = _rows.per_row_k(k, r)
        left = False
        if K != small_k:
            _check_memory(method, backend, x, dim, K, hard, cdtype, mask is not None)
    xb = r.x.to(cdtype)
    if backend == "reference":
        if method == "NeuralSort":
            X = reference.neuralsort(xb, tau, K, r.lengths, kb, left)
        else:
            X = reference.softsort(xb, tau, K, pow, r.lengths, kb, left)
    elif method == "NeuralSort":
        X = ops.neuralsort_fwd(xb, tau, K, backend, r.lengths, kb, left)[0]
    else:
        X = ops.softsort_fwd(xb, tau, K, pow, backend, r.lengths, kb, left)[0]
    if hard:
        X = _rows.straight_through(_exact(r, K, kb, left, X.dtype), X)
    return r.matrix(X.to(x.dtype))


def neuralsort(
    x: torch.Tensor,
    tau: float = 1.0,
    k=None,
    hard: bool = False,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """NeuralSort relaxed sort matrix (Grover et al., 2019) of ``x`` along ``dim``.

    Column of ascending position ``r`` is ``softmax_c(((2 r + 1 - n) x_c - b_c) / tau)`` over the elements
    ``c``, with ``b_c = sum_i |x_c - x_i|``; it concentrates on the ``r``-th smallest element as ``tau -> 0``.
    Columns sum to 1, rows need not. Equals ``difftopk.NeuralSort(tau)(x)[..., -k:]`` for full rows and
    ``hard=False``. Kernels compute only the kept columns: O(n log n + n k) work and O(n k) memory per row,
    forward and backward.
    Any dimension, padded rows, k per row (``docs/math/baselines.md`` §7): the op works along ``dim``; with
    ``lengths`` (the first ``L`` entries of a row are real) or ``mask`` (True = real) each row is the op on its
    real entries alone (``L`` in place of ``n`` in the formulas); pads are never read, their rows of ``X`` are 0,
    and so is their gradient. A row of length 0 is all zeros.

    Non-finite inputs (every backend): +-inf are ordered as the largest / smallest values and give the limit
    as they go to +-inf: they take the extreme positions (equal infinities share theirs equally, like ties),
    the finite elements get the NeuralSort of the finite ones, and the gradient with respect to an infinite
    element is 0. A NaN makes the kept columns of its row of ``X`` NaN, and the gradient of its non-infinite
    elements. Finite inputs give finite columns that sum to 1 for every ``tau`` and offset of ``x`` (for values
    below 1 / (4 n) of the compute dtype's largest number).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        tau: temperature > 0.
        k: ``None``: the full matrix, ``n`` columns, left-aligned (column ``r`` = ascending position ``r``,
            columns ``L..n-1`` of a padded row 0). An int or an integer tensor of x's shape without ``dim``
            (one ``k`` per row), each in ``[1, n]`` (a row shorter than its k takes its length): ``K = max k``
            columns, right-aligned: column ``K - q`` holds rank ``q`` (ascending position ``L - q``; column
            ``K - 1`` = the largest element), columns ``K - q`` for ``q > k`` of the row are 0.
        hard: the forward value is the exact permutation (``k=None``) or top-k matrix of the stable sort (ties
            by index, as ``torch.sort(stable=True)``), in the same layout, pads 0; the gradient is that of the
            soft matrix (straight-through).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.
        dim: the dimension to sort (negative counts from the end).
        lengths: integer tensor of x's shape without ``dim``, each in ``[0, n]``: row ``b`` has ``lengths[b]``
            real entries, first along ``dim``.
        mask: bool tensor of x's shape, True on the real entries (at most one of ``lengths`` and ``mask``).

    Returns:
        ``X [*batch, n, K]`` in x's dtype, ``batch`` = x's shape without ``dim``: ``X[..., c, j]`` = weight of
        element ``c`` (in x's order along ``dim``) at the ascending position of column ``j``; for full rows
        ``n - K + j`` (the code convention of ``relaxops.sort``: ``x @ X`` is the relaxed sorted top-k).
    """
    return _relaxed_sort_matrix("NeuralSort", x, tau, k, hard, 1.0, backend, dim, lengths, mask)


def softsort(
    x: torch.Tensor,
    tau: float = 1.0,
    k=None,
    hard: bool = False,
    pow: float = 1.0,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """SoftSort relaxed sort matrix (Prillo & Eisenschlos, 2020) of ``x`` along ``dim``.

    Column of ascending position ``r`` is ``softmax_c(-|x_(r) - x_c|^pow / tau)`` over the elements ``c``,
    with ``x_(r)`` the ``r``-th smallest value (its gradient reaches the element sorted there; ties are
    broken by index, as ``torch.sort(stable=True)``). The slope of ``|d|^pow`` at ``d = 0`` is taken as 0
    for every ``pow``. Equals ``difftopk.SoftSort(tau, hard, pow)(-x).transpose(-2, -1)[..., -k:]`` for full
    rows (how difftopk's top-k loss uses it). Kernels compute only the kept columns: O(n log n + n k) per row.
    Any dimension, padded rows, k per row (``docs/math/baselines.md`` §7): the op works along ``dim``; with
    ``lengths`` (the first ``L`` entries of a row are real) or ``mask`` (True = real) each row is the op on its
    real entries alone (``L`` in place of ``n`` in the formulas); pads are never read, their rows of ``X`` are 0,
    and so is their gradient. A row of length 0 is all zeros.

    Non-finite inputs (every backend): +-inf are ordered as the largest / smallest values and give the limit
    as they go to +-inf: they take the extreme positions (equal infinities share theirs equally, like ties),
    the finite elements get the SoftSort of the finite ones, and the gradient with respect to an infinite
    element is 0. A NaN makes the kept columns of its row of ``X`` NaN, and the gradient of its non-infinite
    elements. Finite inputs give finite columns that sum to 1 for every ``tau`` and offset of ``x`` (for values
    below 1 / (4 n) of the compute dtype's largest number).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        tau: temperature > 0.
        k: ``None`` (all ``n`` columns, left-aligned), an int or an integer tensor (one per row): as
            :func:`neuralsort`.
        hard: exact permutation / top-k matrix forward, gradient of the soft matrix (as :func:`neuralsort`).
        pow: exponent > 0 of the distance (1: the paper's default; 2: squared distances).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.
        dim, lengths, mask: as :func:`neuralsort`.

    Returns:
        ``X [*batch, n, K]`` in x's dtype, laid out as :func:`neuralsort`'s.
    """
    return _relaxed_sort_matrix("SoftSort", x, tau, k, hard, pow, backend, dim, lengths, mask)
