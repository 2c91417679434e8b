"""Fast soft sort and soft rank (Blondel et al. 2020): argument checks, batching, dtypes, backend choice. The math,
conventions and gradients: ``docs/math/fastsort.md``."""

from __future__ import annotations

import torch

from .. import _backend, _checks
from . import ops, reference


def _check_args(x, regularization, regularization_strength, descending):
    _checks.floating_tensor(x, "x")
    n = x.shape[-1]
    if n < 1:
        raise ValueError(f"x must have at least one element in its last dimension (n >= 1), got shape {tuple(x.shape)}")
    if not isinstance(regularization, str) or regularization not in ops.REGULARIZATIONS:
        raise ValueError(f"regularization must be one of {list(ops.REGULARIZATIONS)}, got {regularization!r}")
    strength = _checks.positive_finite(regularization_strength, "regularization_strength")
    if strength < ops.MIN_STRENGTH:
        raise ValueError(f"regularization_strength must be >= {ops.MIN_STRENGTH} (1 / it finite), got {strength!r}")
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, got {type(descending).__name__}")
    return n, strength


def _check_memory(backend, x, n, cdtype) -> None:
    """Refuse work whose buffers cannot fit: per element the output, its conversion, perm (int64), block (int32),
    the saved input and the kernels' scratch (a sort key and two doubles); the reference's autograd graph keeps
    about twenty float64 copies of each row."""
    if torch.compiler.is_compiling():  # checked when the eager call runs
        return
    per = 2 * cdtype.itemsize + x.dtype.itemsize + 8 + 4 + 32
    if backend == "reference":
        per += 20 * 8
    _checks.memory_fits(
        x.numel() * per,
        x.device,
        f"the soft sort/rank of shape {tuple(x.shape)} ({cdtype}) with its work buffers on backend {backend!r}",
        "use a smaller batch",
    )


def _soft(op, x, regularization, regularization_strength, descending, backend):
    n, strength = _check_args(x, regularization, regularization_strength, descending)
    backend = _backend.resolve("fastsort", backend, x.device)
    cdtype = _checks.compute_dtype(x.dtype)
    _check_memory(backend, x, n, cdtype)
    if backend == "reference":
        fn = reference.soft_rank if op == "rank" else reference.soft_sort
        return fn(x, regularization, strength, descending)
    return _checks.on_rows(
        x, n, cdtype, lambda xb: ops.SoftSortRank.apply(xb, op, regularization, strength, descending, backend)
    )


def soft_rank(
    x: torch.Tensor,
    regularization: str = "l2",
    regularization_strength: float = 1.0,
    descending: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Fast soft ranks (Blondel et al. 2020) of the last dimension of ``x``: torchsort's ``soft_rank``.

    The projection of ``x / eps`` onto the permutahedron of ``(1, ..., n)``, Euclidean (``"l2"``) or in KL
    divergence (``"kl"``), ``eps = regularization_strength``: O(n log n) per row (a sort and a linear pool adjacent
    violators pass, forward and backward), no ``n x n`` matrix. Ranks are 1-based and ascending (the largest element
    gets rank ``n`` as ``eps -> 0``; all ranks tend to ``(n + 1) / 2`` as ``eps -> oo``), exactly torchsort 0.1.10's
    values (``relaxops.compat.torchsort`` has its signature). ``descending=True`` is ``soft_rank(-x)``: the largest
    element gets rank 1 (Blondel et al.'s own convention). Not to be confused with ``relaxops.rank`` (the soft ranks
    of a relaxed sorting network) or ``relaxops.softsort`` (Prillo & Eisenschlos' SoftSort, a relaxed permutation
    matrix).

    The backward uses the block structure of the isotonic regression recorded by the forward (torchsort recovers
    it from the solution with a 1e-9 tolerance, which merges adjacent blocks with close values).

    Non-finite inputs (every backend): a NaN makes every rank of its row NaN, and the row's gradient. +-inf are
    the limits as they go to +-inf: they take the extreme ranks (equal infinities are ties and share the mean rank
    of their positions), the finite elements get the soft ranks of the remaining positions, and the gradient with
    respect to an infinite element is 0. Finite inputs give finite ranks in ``[1, n]`` for every strength.

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types computed in float32; the kernels accumulate
            in float64), n >= 1; any batch dimensions.
        regularization: ``"l2"`` (quadratic) or ``"kl"`` (entropic).
        regularization_strength: ``eps``, finite and > 0; smaller is closer to the hard ranks.
        descending: rank 1 for the largest element instead of the smallest.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``[..., n]`` in x's dtype: the soft rank of each element, in its place.
    """
    return _soft("rank", x, regularization, regularization_strength, descending, backend)


def soft_sort(
    x: torch.Tensor,
    regularization: str = "l2",
    regularization_strength: float = 1.0,
    descending: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Fast soft sort (Blondel et al. 2020) of the last dimension of ``x``: torchsort's ``soft_sort``.

    The projection of ``(n, ..., 1) / eps`` onto the permutahedron of ``x`` (``"l2"``), or its KL counterpart,
    ``eps = regularization_strength``, returned in ascending order: O(n log n) per row, no matrix. As ``eps -> 0``
    the values tend to ``torch.sort(x).values``; as ``eps -> oo`` to the mean of the row (L2: gaps of the sorted
    values larger than ``1 / eps`` are pooled). Exactly torchsort 0.1.10's values (``relaxops.compat.torchsort``
    has its signature), but accurate in float32 at small strengths: the kernels never form ``rho / eps`` (torchsort
    loses ~0.1 at n = 1000, eps = 1e-4). ``descending=True`` is ``-soft_sort(-x)``: the values in descending order.
    Not to be confused with ``relaxops.softsort`` (Prillo & Eisenschlos' SoftSort: a relaxed permutation matrix,
    not sorted values) or ``relaxops.sort`` (a relaxed sorting network).

    The backward uses the block structure recorded by the forward, as ``soft_rank``.

    Non-finite inputs (every backend): a NaN or an infinity makes every value of its row NaN, and the row's
    gradient (an infinity's limit pools the whole row). Finite inputs give finite values for every strength.

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types computed in float32; the kernels accumulate
            in float64), n >= 1; any batch dimensions.
        regularization: ``"l2"`` (quadratic) or ``"kl"`` (entropic).
        regularization_strength: ``eps``, finite and > 0; smaller is closer to the hard sort.
        descending: sort in descending order.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``[..., n]`` in x's dtype: the soft sorted values.
    """
    return _soft("sort", x, regularization, regularization_strength, descending, backend)
