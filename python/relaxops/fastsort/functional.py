"""Fast soft sort and soft rank (Blondel et al. 2020): argument checks, batching, dtypes, backend choice. The math,
conventions and gradients: ``docs/math/fastsort.md``."""

from __future__ import annotations

import torch

from .. import _backend, _checks, _rows
from . import ops, reference


def _check_args(x, n, regularization, regularization_strength, descending, hard):
    if n < 1:
        raise ValueError(f"x must have at least one element along dim (n >= 1), got shape {tuple(x.shape)}")
    if not isinstance(regularization, str) or regularization not in ops.REGULARIZATIONS:
        raise ValueError(f"regularization must be one of {list(ops.REGULARIZATIONS)}, got {regularization!r}")
    strength = _checks.positive_finite(regularization_strength, "regularization_strength")
    if strength < ops.MIN_STRENGTH:
        raise ValueError(f"regularization_strength must be >= {ops.MIN_STRENGTH} (1 / it finite), got {strength!r}")
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, got {type(descending).__name__}")
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    return strength


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


def _kernel_rows(op, xb, regularization, strength, descending, backend, lengths):
    """The op on rows ``xb [B, n]`` (x's dtype) with ``lengths [B]`` or None, in x's dtype."""
    if backend == "reference":
        fn = reference.soft_rank if op == "rank" else reference.soft_sort
        return fn(xb, regularization, strength, descending, lengths)
    cdtype = _checks.compute_dtype(xb.dtype)
    out = ops.SoftSortRank.apply(xb.to(cdtype), op, regularization, strength, descending, backend, lengths)
    return out.to(xb.dtype)


def _exact(op, xb, lengths, descending):
    """The zero-temperature op on rows ``xb [B, n]``: sorted values at positions 0..L-1 or 1-based integer ranks
    (ties by index), 0 on the pads; no gradient."""
    xd = xb.detach()
    perm = _rows.exact_order(xd, lengths, descending)
    if op == "rank":
        return _rows.exact_ranks(perm, lengths, xb.dtype)
    values = xd.gather(-1, perm)
    if lengths is not None:
        values = values.masked_fill(torch.arange(xb.shape[-1], device=xb.device) >= lengths.unsqueeze(-1), 0)
    return values


def _soft(op, x, regularization, regularization_strength, descending, backend, dim, lengths, mask, hard):
    _checks.floating_tensor(x, "x")
    dim = _rows.check_dim(x, dim)
    n = x.shape[dim]
    strength = _check_args(x, n, regularization, regularization_strength, descending, hard)
    backend = _backend.resolve("fastsort", backend, x.device)
    cdtype = _checks.compute_dtype(x.dtype)
    _check_memory(backend, x, n, cdtype)
    if lengths is None and mask is None and dim == x.dim() - 1 and not hard:  # no copies, views or autograd nodes
        if backend == "reference":
            return _kernel_rows(op, x, regularization, strength, descending, backend, None)
        return _checks.on_rows(
            x, n, cdtype, lambda xb: ops.SoftSortRank.apply(xb, op, regularization, strength, descending, backend)
        )
    r = _rows.rows(x, dim, lengths, mask)
    out = _kernel_rows(op, r.x, regularization, strength, descending, backend, r.lengths)
    if hard:
        out = _rows.straight_through(_exact(op, r.x, r.lengths, descending), out)
    return r.elements(out) if op == "rank" else r.positions(out)


def soft_rank(
    x: torch.Tensor,
    regularization: str = "l2",
    regularization_strength: float = 1.0,
    descending: bool = False,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
) -> torch.Tensor:
    """Fast soft ranks (Blondel et al. 2020) along dimension ``dim`` of ``x``: torchsort's ``soft_rank``.

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

    Padded rows (``lengths`` or ``mask``): each row's real entries are ranked as that row alone (``L`` real
    entries get ranks in ``[1, L]``, the permutahedron of ``(1, ..., L)``); the kernels sort and pool only those,
    the pads are never read, their ranks are 0 and their gradients 0 (``docs/math/fastsort.md``, "Any dimension,
    padded rows, k per row, hard"). ``hard=True``: the integer ranks ``1..L`` (ties by index, as
    ``torch.sort(stable=True)``; ``descending``: 1 for the largest), with the gradient of the soft ranks.

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types computed in float32; the kernels
            accumulate in float64), n >= 1 along ``dim``; any batch dimensions.
        regularization: ``"l2"`` (quadratic) or ``"kl"`` (entropic).
        regularization_strength: ``eps``, finite and > 0; smaller is closer to the hard ranks.
        descending: rank 1 for the largest element instead of the smallest.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.
        dim: the dimension ranked (negative counts from the end): ``soft_rank(x.movedim(dim, -1)).movedim(-1,
            dim)``.
        lengths: int32/int64 tensor of x's shape without ``dim``, each in ``[0, n]``: the real entries of each row
            are its first ``lengths`` along ``dim``.
        mask: bool tensor of x's shape, True on the real entries (anywhere in a row); at most one of ``lengths``
            and ``mask``.
        hard: exact integer ranks forward, the soft ranks' gradient backward.

    Returns:
        x's shape and dtype: the soft rank of each element, in its place (0 on the pads).
    """
    return _soft("rank", x, regularization, regularization_strength, descending, backend, dim, lengths, mask, hard)


def soft_sort(
    x: torch.Tensor,
    regularization: str = "l2",
    regularization_strength: float = 1.0,
    descending: bool = False,
    backend: str = "auto",
    *,
    dim: int = -1,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
) -> torch.Tensor:
    """Fast soft sort (Blondel et al. 2020) along dimension ``dim`` of ``x``: torchsort's ``soft_sort``.

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

    Padded rows (``lengths`` or ``mask``): each row's ``L`` real entries are sorted as that row alone (the
    permutahedron of its values against ``(L, ..., 1)``), the values at positions ``0..L-1`` along ``dim``
    (ascending, or descending), then zeros; the kernels sort and pool only the real entries, the pads are never
    read and get gradient 0 (``docs/math/fastsort.md``, "Any dimension, padded rows, k per row, hard").
    ``hard=True``: exactly ``torch.sort``'s values forward, the soft sort's gradient backward.

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types computed in float32; the kernels
            accumulate in float64), n >= 1 along ``dim``; any batch dimensions.
        regularization: ``"l2"`` (quadratic) or ``"kl"`` (entropic).
        regularization_strength: ``eps``, finite and > 0; smaller is closer to the hard sort.
        descending: sort in descending order.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.
        dim: the dimension sorted (negative counts from the end): ``soft_sort(x.movedim(dim, -1)).movedim(-1,
            dim)``.
        lengths: int32/int64 tensor of x's shape without ``dim``, each in ``[0, n]``: the real entries of each row
            are its first ``lengths`` along ``dim``.
        mask: bool tensor of x's shape, True on the real entries (anywhere in a row); at most one of ``lengths``
            and ``mask``.
        hard: exactly sorted values forward, the soft sort's gradient backward.

    Returns:
        x's shape and dtype: the soft sorted values along ``dim`` (a row's real values first, then zeros).
    """
    return _soft("sort", x, regularization, regularization_strength, descending, backend, dim, lengths, mask, hard)
