"""NeuralSort and SoftSort relaxed sort matrices: argument checks, batching, dtypes, backend choice. The math,
conventions and gradients: ``docs/math/baselines.md``."""

from __future__ import annotations

import math
import numbers

import torch

from .. import _backend, _checks
from . import ops, reference


def _check_args(x, tau, k, hard, pow):
    _checks.floating_tensor(x, "x")
    n = x.shape[-1]
    if n < 1:
        raise ValueError(f"x must have at least one element in its last dimension (n >= 1), got shape {tuple(x.shape)}")
    tau = _checks.positive_finite(tau, "tau")
    if k is None:
        k = n
    elif isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int or None, got {type(k).__name__}")
    elif not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n = {n}, got {k}")
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    return n, tau, k, _checks.positive_finite(pow, "pow")


def _check_memory(method, backend, x, n, k, hard, cdtype) -> None:
    """Refuse work whose buffers cannot fit in the device's memory: per row, the kernels keep O(n k) (X, the
    gradient of X in backward, the straight-through copies for ``hard``), the reference's autograd graph
    about ten ``[n, k]`` tensors and, for NeuralSort, three ``[n, n]`` ones (the pairwise sums)."""
    if torch.compiler.is_compiling():  # checked when the eager call runs
        return
    rows = math.prod(x.shape[:-1])
    per_row = (2 + 3 * hard) * n * k * cdtype.itemsize + n * (2 * cdtype.itemsize + 8)
    if cdtype != x.dtype:
        per_row += n * k * x.dtype.itemsize  # X converted back to x's dtype
    hint = "use a smaller batch or k"
    if backend == "reference":
        per_row += (10 * n * k + (3 * n * n if method == "NeuralSort" else 0)) * cdtype.itemsize
        hint += ", or a compiled backend (backend='cpu' or 'cuda': O(n k) memory)"
    shape = (*(int(s) for s in x.shape[:-1]), n, k)
    _checks.memory_fits(
        rows * per_row,
        x.device,
        f"the {method} matrix of shape {shape} ({cdtype}) with its work buffers on backend {backend!r}",
        hint,
    )


def _straight_through(X: torch.Tensor) -> torch.Tensor:
    """Forward: the one-hot of each column's argmax over the elements; gradient: that of the soft ``X``."""
    hard = torch.zeros_like(X).scatter_(-2, X.argmax(dim=-2, keepdim=True), 1.0)
    return hard + (X - X.detach())


def _relaxed_sort_matrix(method, x, tau, k, hard, pow, backend):
    n, tau, k, pow = _check_args(x, tau, k, hard, pow)
    backend = _backend.resolve("baselines", backend, x.device)
    batch = x.shape[:-1]
    cdtype = _checks.compute_dtype(x.dtype)
    _check_memory(method, backend, x, n, k, hard, cdtype)
    xb = x.reshape(-1, n).to(cdtype).contiguous()
    if method == "NeuralSort":
        X = reference.neuralsort(xb, tau, k) if backend == "reference" else ops.neuralsort_fwd(xb, tau, k, backend)[0]
    elif backend == "reference":
        X = reference.softsort(xb, tau, k, pow)
    else:
        X = ops.softsort_fwd(xb, tau, k, pow, backend)[0]
    if hard:
        X = _straight_through(X)
    return X.to(x.dtype).reshape(*batch, n, k)


def neuralsort(
    x: torch.Tensor, tau: float = 1.0, k: int | None = None, hard: bool = False, backend: str = "auto"
) -> torch.Tensor:
    """NeuralSort relaxed sort matrix (Grover et al., 2019) of the last dimension of ``x``.

    Column ``r`` (ascending position) is ``softmax_c(((2 r + 1 - n) x_c - b_c) / tau)`` over the elements
    ``c``, with ``b_c = sum_i |x_c - x_i|``; it concentrates on the ``r``-th smallest element as
    ``tau -> 0``. Columns sum to 1, rows need not. Equals ``difftopk.NeuralSort(tau, hard)(x)[..., -k:]``
    for ``hard=False``. Kernels compute only the kept columns: O(n log n + n k) work and O(n k) memory per
    row, forward and backward.

    Non-finite inputs (every backend): +-inf are ordered as the largest / smallest values and give the limit
    as they go to +-inf: they take the extreme positions (equal infinities share theirs equally, like ties),
    the finite elements get the NeuralSort of the finite ones, and the gradient with respect to an infinite
    element is 0. A NaN makes its whole row of ``X`` NaN, and the gradient of its non-infinite elements.
    Finite inputs give finite columns that sum to 1 for every ``tau`` and offset of ``x`` (for values below
    1 / (4 n) of the compute dtype's largest number).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        tau: temperature > 0.
        k: keep the last ``k`` ascending positions (the top-k, column ``k - 1`` = the largest element);
            ``None`` keeps all ``n``.
        hard: straight-through: the forward value is the one-hot of each column's argmax over the elements,
            the gradient that of the soft matrix.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``X [..., n, k]`` in x's dtype, ``X[..., c, j]`` = weight of element ``c`` at ascending position
        ``n - k + j`` (the code convention of ``relaxops.sort``: ``x @ X`` is the relaxed sorted top-k).
    """
    return _relaxed_sort_matrix("NeuralSort", x, tau, k, hard, 1.0, backend)


def softsort(
    x: torch.Tensor,
    tau: float = 1.0,
    k: int | None = None,
    hard: bool = False,
    pow: float = 1.0,
    backend: str = "auto",
) -> torch.Tensor:
    """SoftSort relaxed sort matrix (Prillo & Eisenschlos, 2020) of the last dimension of ``x``.

    Column ``r`` (ascending position) is ``softmax_c(-|x_(r) - x_c|^pow / tau)`` over the elements ``c``,
    with ``x_(r)`` the ``r``-th smallest value (its gradient reaches the element sorted there; ties are
    broken by index, as ``torch.sort(stable=True)``). The slope of ``|d|^pow`` at ``d = 0`` is taken as 0
    for every ``pow``. Equals ``difftopk.SoftSort(tau, hard, pow)(-x).transpose(-2, -1)[..., -k:]`` (how
    difftopk's top-k loss uses it). Kernels compute only the kept columns: O(n log n + n k) per row.

    Non-finite inputs (every backend): +-inf are ordered as the largest / smallest values and give the limit
    as they go to +-inf: they take the extreme positions (equal infinities share theirs equally, like ties),
    the finite elements get the SoftSort of the finite ones, and the gradient with respect to an infinite
    element is 0. A NaN makes its whole row of ``X`` NaN, and the gradient of its non-infinite elements.
    Finite inputs give finite columns that sum to 1 for every ``tau`` and offset of ``x`` (for values below
    1 / (4 n) of the compute dtype's largest number).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        tau: temperature > 0.
        k: keep the last ``k`` ascending positions; ``None`` keeps all ``n``.
        hard: straight-through one-hot of each column's argmax over the elements (gradient of the soft matrix).
        pow: exponent > 0 of the distance (1: the paper's default; 2: squared distances).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``X [..., n, k]`` in x's dtype, ``X[..., c, j]`` = weight of element ``c`` at ascending position
        ``n - k + j``.
    """
    return _relaxed_sort_matrix("SoftSort", x, tau, k, hard, pow, backend)
