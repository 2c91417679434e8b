"""Quantiles, medians and quantile normalisation through the sorting operators, along any dimension of padded rows.
The conventions and the definitions: ``docs/ranking.md``.

Every function moves ``dim`` last and compacts the rows with ``relaxops._rows`` (real entries first), calls the
chosen operator once on the whole batch of rows ``[B, n]`` with ``lengths=`` (the operators never read the pads),
and reads its result off the ``L_b`` real positions of each row.
"""

from __future__ import annotations

import numbers

import torch

from .. import _checks, _rows
from ..baselines import neuralsort, softsort
from ..fastsort import soft_rank, soft_sort
from ..otsort import ot_rank, ot_sort
from ..sortnet import rank, sort

INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _call(op, xb, lengths, options):
    """``op(xb [B, n], **options)`` with ``lengths`` only where a row is padded (the operators' full-row path)."""
    return op(xb, **options) if lengths is None else op(xb, lengths=lengths, **options)


def _zero_pads(t: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``t`` with 0 where ``valid [B, n]`` is False (a select, not a product: NaN in the pads stays out, and no
    gradient reaches them)."""
    return t if valid is None else torch.where(valid, t, t.new_zeros(()))


def _matrix_values(op):
    def values(xb, lengths, options):
        X = _call(op, xb, lengths, options)  # [B, n, n]: element c at ascending position r, pads' rows/columns 0
        return (_zero_pads(xb, _valid(xb, lengths)).unsqueeze(-2) @ X).squeeze(-2)

    return values


def _matrix_ranks(op):
    def ranks(xb, lengths, options):
        X = _call(op, xb, lengths, options)
        return X @ torch.arange(1, xb.shape[-1] + 1, dtype=X.dtype, device=X.device)  # expected 1-based position

    return ranks


def _valid(xb: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor | None:
    if lengths is None:
        return None
    return torch.arange(xb.shape[-1], device=xb.device) < lengths.unsqueeze(-1)


def _pairwise_ranks(xb, lengths, options):
    """Qin et al.'s smooth positions ``1 + sum_{j != i} sigmoid((x_i - x_j) / temperature)`` over the real ``j``."""
    unknown = set(options) - {"temperature"}
    if unknown:
        raise TypeError(f"the 'pairwise' ranker takes only temperature=, got {sorted(unknown)}")
    t = _checks.positive_finite(options.get("temperature", 1.0), "temperature")
    valid = _valid(xb, lengths)
    x = _zero_pads(xb, valid)
    s = torch.sigmoid((x.unsqueeze(-1) - x.unsqueeze(-2)) / t)  # s[b, i, j]
    pair = ~torch.eye(x.shape[-1], dtype=torch.bool, device=x.device)
    if valid is not None:
        pair = pair & valid.unsqueeze(-1) & valid.unsqueeze(-2)
    return _zero_pads(1 + torch.where(pair, s, s.new_zeros(())).sum(-1), valid)


# name -> (rows [B, n], lengths [B] | None, options) -> ascending soft sorted values [B, n], real positions first
SORTERS = {
    "soft_sort": lambda xb, lengths, o: _call(soft_sort, xb, lengths, o),
    "sort": lambda xb, lengths, o: _call(sort, xb, lengths, {**o, "return_matrix": False})[0],
    "ot_sort": lambda xb, lengths, o: _call(ot_sort, xb, lengths, o),
    "neuralsort": _matrix_values(neuralsort),
    "softsort": _matrix_values(softsort),
}

# name -> (rows, lengths, options) -> ascending 1-based soft ranks [B, n] (ot_rank's are zero-based: shifted by 1)
RANKERS = {
    "soft_rank": lambda xb, lengths, o: _call(soft_rank, xb, lengths, o),
    "rank": lambda xb, lengths, o: _call(rank, xb, lengths, o),
    "ot_rank": lambda xb, lengths, o: _zero_pads(_call(ot_rank, xb, lengths, o) + 1, _valid(xb, lengths)),
    "neuralsort": _matrix_ranks(neuralsort),
    "softsort": _matrix_ranks(softsort),
    "pairwise": _pairwise_ranks,
}


def _choice(value, table, name):
    if not isinstance(value, str) or value not in table:
        raise ValueError(f"{name} must be one of {list(table)}, got {value!r}")
    return table[value]


def soft_ranks_of(xb, lengths, ranker: str, options: dict, name: str = "ranker") -> torch.Tensor:
    """Ascending 1-based soft ranks ``[B, n]`` of the rows ``xb`` by the rank operator ``ranker`` (the argument
    ``name``), 0 on the pads."""
    return _choice(ranker, RANKERS, name)(xb, lengths, options)


def soft_sorted_of(xb, lengths, method: str, options: dict) -> torch.Tensor:
    """Ascending soft sorted values ``[B, n]`` of the rows ``xb`` by the sort operator ``method``, pads last (0)."""
    return _choice(method, SORTERS, "method")(xb, lengths, options)


def _nonempty_rows(x, name, dim, lengths, mask) -> _rows.Rows:
    """``_rows.rows`` of ``x``, refusing a dimension ``dim`` of size 0 (as the operators do)."""
    r = _rows.rows(x, dim, lengths, mask)
    if r.n == 0:
        raise ValueError(f"{name} must have at least one entry along dim={dim}, got shape {tuple(x.shape)}")
    return r


def _row_lengths(r: _rows.Rows) -> torch.Tensor:
    if r.lengths is not None:
        return r.lengths
    return torch.full((r.x.shape[0],), r.n, dtype=torch.int64, device=r.x.device)


def _levels(q, like: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``q`` as a 1-D tensor of levels in [0, 1] and whether it was a scalar."""
    if isinstance(q, numbers.Real) and not isinstance(q, bool):
        levels, scalar = _checks.to_device([float(q)], like.dtype, like.device), True
    elif isinstance(q, torch.Tensor) and q.dim() <= 1 and (q.is_floating_point() or q.numel() == 0):
        levels, scalar = q.reshape(-1).to(like.device, like.dtype), q.dim() == 0
    else:
        raise TypeError(f"q must be a float or a 0-D/1-D floating tensor, got {q!r}")
    if levels.numel() == 0:
        raise ValueError("q must hold at least one level, got an empty tensor")
    if not torch.compiler.is_compiling():
        ok = (levels >= 0) & (levels <= 1)
        if not _checks.on_host(levels):
            _checks.assert_on_device(ok, "q must lie in [0, 1]")
        elif not bool(ok.all()):
            raise ValueError(f"q must lie in [0, 1], got {levels.tolist()}")
    return levels, scalar


def _interpolate(sorted_rows: torch.Tensor, h: torch.Tensor, count: torch.Tensor, interpolation: str):
    """Values at the fractional positions ``h [B, Q]`` (in [0, count - 1]) of the sorted prefixes of
    ``sorted_rows [B, n]``, rows of ``count`` 0 giving 0."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {list(INTERPOLATIONS)}, got {interpolation!r}")
    if interpolation == "nearest":
        h = h.round()  # half to even, as torch.quantile
    lo, hi = h.floor(), h.ceil()
    last = (count - 1).clamp(min=0).unsqueeze(-1)
    v_lo = sorted_rows.gather(-1, lo.long().clamp(min=0).minimum(last))
    v_hi = sorted_rows.gather(-1, hi.long().clamp(min=0).minimum(last))
    if interpolation in ("lower", "nearest"):
        out = v_lo
    elif interpolation == "higher":
        out = v_hi
    elif interpolation == "midpoint":
        out = (v_lo + v_hi) / 2
    else:
        out = v_lo + (h - lo) * (v_hi - v_lo)
    return _zero_pads(out, (count > 0).unsqueeze(-1))


def soft_quantile(
    x: torch.Tensor,
    q,
    dim: int = -1,
    keepdim: bool = False,
    *,
    lengths=None,
    mask=None,
    interpolation: str = "linear",
    method: str = "soft_sort",
    **options,
) -> torch.Tensor:
    """Soft quantiles of ``x`` along ``dim``: ``torch.quantile`` with the sorted values replaced by those of a
    differentiable sort operator.

    A row of ``L`` real entries with soft sorted values ``s_0 <= ... <= s_{L-1}`` (ascending) has at level ``q`` the
    position ``h = q (L - 1)`` and (``interpolation="linear"``) the quantile ``s_lo + (h - lo) (s_hi - s_lo)``, ``lo =
    floor(h)``, ``hi = ceil(h)``; ``"lower"`` takes ``s_lo``, ``"higher"`` ``s_hi``, ``"midpoint"`` their mean,
    ``"nearest"`` ``s_round(h)`` (half to even): exactly ``torch.quantile``'s rule, so a sort operator at a small
    regularisation (or ``hard=True``) gives ``torch.quantile``. The gradient reaches the (one or two) elements sorted
    at ``lo`` and ``hi`` through the operator's relaxation. A row with no real entry gives 0.

    Args:
        x: ``[...]`` floating tensor.
        q: a level in [0, 1] (float or 0-D tensor), or a 1-D tensor of levels.
        dim: the dimension to reduce (negative counts from the end).
        keepdim: keep ``dim`` with size 1 (as ``torch.quantile``).
        lengths: int tensor of x's shape without ``dim``: row ``b`` holds ``lengths[b]`` real entries, then pads.
        mask: bool tensor of x's shape, True on the real entries (at most one of ``lengths``, ``mask``).
        interpolation: ``"linear"``, ``"lower"``, ``"higher"``, ``"midpoint"`` or ``"nearest"``.
        method: the sort operator: ``"soft_sort"`` (fast soft sort, default), ``"sort"`` (sorting network),
            ``"ot_sort"``, ``"neuralsort"`` or ``"softsort"`` (sorted values ``x @ X``).
        **options: passed to the operator (e.g. ``regularization_strength=``, ``steepness=``, ``tau=``, ``hard=``,
            ``backend=``).

    Returns:
        ``torch.quantile``'s layout: x's shape without ``dim`` (``keepdim``: with size 1) for a scalar ``q``; the
        levels first, ``[len(q), ...]``, for a 1-D ``q``. Pads never influence it and receive no gradient.
    """
    _checks.floating_tensor(x, "x")
    if not isinstance(keepdim, bool):
        raise TypeError(f"keepdim must be a bool, got {type(keepdim).__name__}")
    r = _nonempty_rows(x, "x", dim, lengths, mask)
    levels, scalar = _levels(q, r.x)
    s = soft_sorted_of(r.x, r.lengths, method, options)
    count = _row_lengths(r)
    h = levels * (count - 1).clamp(min=0).unsqueeze(-1).to(levels.dtype)  # [B, Q]
    out = _interpolate(s, h, count, interpolation)
    out = out.reshape(*r.batch, levels.numel()).movedim(-1, 0)  # [Q, *batch]
    if keepdim:
        out = out.unsqueeze(r.dim + 1)
    return out[0] if scalar else out


def soft_median(
    x: torch.Tensor, dim: int = -1, keepdim: bool = False, *, lengths=None, mask=None, method="soft_sort", **options
) -> torch.Tensor:
    """Soft median of ``x`` along ``dim``: the lower median, as ``torch.median(x, dim).values`` (the sorted value at
    position ``(L - 1) // 2`` of a row of ``L`` real entries): :func:`soft_quantile` at ``q = 0.5`` with
    ``interpolation="lower"``. Arguments as :func:`soft_quantile`; returns x's shape without ``dim``."""
    return soft_quantile(
        x, 0.5, dim, keepdim, lengths=lengths, mask=mask, interpolation="lower", method=method, **options
    )


def quantile_normalize(
    x: torch.Tensor,
    reference: torch.Tensor,
    dim: int = -1,
    *,
    lengths=None,
    mask=None,
    method: str = "soft_rank",
    **options,
) -> torch.Tensor:
    """Soft quantile normalisation of ``x`` along ``dim`` onto the distribution of ``reference``: each real entry
    becomes the reference's quantile at its soft rank.

    An entry of soft rank ``R`` (1-based, ascending) in a row of ``L`` real entries goes to level ``u = (R - 1) /
    (L - 1)`` (``u = 1/2`` when ``L = 1``) and takes the reference's linear quantile there: with the reference
    sorted, ``t_0 <= ... <= t_{m-1}``, the value at position ``u (m - 1)`` linearly interpolated (``torch.quantile``'s
    rule). With exact ranks that is exact quantile normalisation: for ``m = L`` the entry of rank ``R`` takes
    ``t_{R-1}`` (ties in x share the mean of their ranks, so the interpolated value between theirs). The gradient
    reaches x through the soft ranks (piecewise linear in them) and the reference through its sort.

    Args:
        x: ``[...]`` floating tensor.
        reference: ``[..., m]`` floating, m >= 1: the reference sample, its last dimension the values; its leading
            dimensions broadcast against x's shape without ``dim``.
        dim, lengths, mask: as :func:`soft_quantile`.
        method: the rank operator: ``"soft_rank"`` (default), ``"rank"``, ``"ot_rank"``, ``"neuralsort"``,
            ``"softsort"`` or ``"pairwise"`` (see :mod:`relaxops.losses`).
        **options: passed to the operator.

    Returns:
        x's shape and dtype; 0 on the pads.
    """
    _checks.floating_tensor(x, "x")
    _checks.floating_tensor(reference, "reference")
    if reference.device != x.device:
        raise ValueError(f"reference must be on x's device {x.device}, got {reference.device}")
    m = reference.shape[-1]
    if m < 1:
        raise ValueError(f"reference must hold at least one value in its last dimension, got {tuple(reference.shape)}")
    r = _nonempty_rows(x, "x", dim, lengths, mask)
    try:
        ref = torch.broadcast_to(reference, (*r.batch, m)).reshape(-1, m)
    except RuntimeError:
        raise ValueError(
            f"reference of shape {tuple(reference.shape)} does not broadcast to x's rows {(*r.batch, m)}"
        ) from None
    ranks = soft_ranks_of(r.x, r.lengths, method, options, "method")
    count = _row_lengths(r).unsqueeze(-1)
    u = torch.where(count > 1, (ranks - 1) / (count - 1).clamp(min=1), ranks.new_full((), 0.5))
    h = (u * (m - 1)).clamp(0, m - 1)  # soft ranks stay in [1, L] up to rounding
    t = torch.sort(ref.to(r.x.dtype), dim=-1).values
    lo = h.detach().floor().clamp(max=max(m - 2, 0)).long()  # one linear piece per entry, [t_lo, t_lo+1]
    t_lo, t_hi = t.gather(-1, lo), t.gather(-1, (lo + 1).clamp(max=m - 1))
    out = t_lo + (h - lo) * (t_hi - t_lo)
    return r.elements(_zero_pads(out, r.valid()))


def _same_rows(r: _rows.Rows, t: torch.Tensor) -> torch.Tensor:
    """A second tensor of x's shape laid out as ``r.x`` (the same moved dimension and the same compaction)."""
    tb = t.movedim(r.dim, -1).reshape(-1, r.n)
    if r.dest is not None:
        tb = torch.empty_like(tb).scatter(-1, r.dest, tb)
    return tb
