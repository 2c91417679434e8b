"""Optimal-transport sort, ranks, quantiles and top-k (Cuturi, Teboul, Vert 2019; docs/math/otsort.md): argument
checks, batching, dtypes, squashing, target measures and backend choice.

Each op transports the squashed inputs ``xs = squash(x)`` (weights ``a``, uniform by default) onto ``m`` sorted
targets ``y`` (weights ``b``) with the annealed log-domain Sinkhorn loop, and reads the result off the plan
``T [n, m]`` (never stored by the kernels unless requested): soft sorted values ``S_j = sum_i T_ij x_i / b_j``
(the unsquashed ``x``, read off about its midrange: see shift and scale below), soft ranks ``R_i = sum_i T_ij (n
cs(b)_j - 1) / a_i`` (``cs`` the cumulative sum: zero-based ranks, ``n F_i - 1`` with ``F`` the soft CDF), top-k
masks and quantiles.

Defaults are the authors' (docs/math/otsort.md §2): ``epsilon = 1e-3`` reached from ``epsilon0 = 0.1`` by the factor
``annealing = 0.95`` per iteration, the logistic squashing ``sigmoid(pi / sqrt(3) (x - mean) / max(std, 1e-6))``,
relative column-marginal tolerance ``1e-2`` checked every 5 iterations, at most 2000 iterations, targets
``y_j = j / (m - 1)`` with ``b_j = 1 / m``. ott-jax's ``soft_sort`` differs in the squashing
(``sigmoid((x - mean) / (std + 1e-10))``: pass it as a callable), epsilon (``1e-2``, no annealing: ``epsilon0 =
epsilon``) and the stopping rule (an absolute L1 column error of ``1e-3`` every 10 iterations); its ranks are
``(n - 1) sum_j T_ij y_j / a_i``, equal to ours for ``m = n`` uniform targets.

Backward (``backward=``): ``"implicit"`` (default) differentiates the optimality conditions at the returned
potentials (a conjugate-gradient solve in the dual variables, matrix-free: O(n + m) memory, each step one sweep
over the plan); ``"unrolled"`` replays the stored iterations backwards (the exact derivative of the computed
forward, O(iterations (n + m)) memory, one more forward run to size the history). They differ by the truncation
error of the forward: ``implicit`` is the derivative of the exact fixed point, so it matches finite differences
of the forward as the tolerance goes to 0; ``unrolled`` matches them at any tolerance (where the iteration count
does not change).

Shift and scale. The transport sees the positions centred at their midranges, ``xs - mid(xs)`` and ``y - mid(y)``
(``mid(v) = (min v + max v) / 2``: a constant row becomes 0, any other stays within its spread), through the cost
``-2 xs_i y_j`` (the cross term of ``(xs_i - y_j)^2``, whose row and column terms the potentials absorb: the same
plan at every fixed point), and the sorted values are read off about ``c = mid(x)``: ``S_j = c + sum_i T_ij (x_i -
c) / b_j`` (``sum_i T_ij x_i / b_j`` up to the column marginals' error times ``c``, which would not shift with x).
So, at any tolerance, a shift ``x + t`` leaves the plan, ranks and masks unchanged and shifts sorted values,
quantiles and top-k values by ``t``, to the rounding of ``x + t`` itself (float32 keeps about 7 significant digits of
it), with the logistic squashing, ``"none"``, or a callable whose output moves by a constant with x. Under a scaling
by ``s > 0`` the logistic squashing is invariant (read-outs of x scale by ``s``); with ``squashing="none"`` (and for
the targets ``y``) the plan depends on ``(xs_i - mid) (y_j - mid) / epsilon`` only, so scaling x by ``s`` divides
epsilon and epsilon0 by ``s`` (epsilon is absolute, as in ott-jax): ``ot_rank(s x, e, epsilon0=e0) = ot_rank(x, e /
s, epsilon0=e0 / s)``, ``ot_sort(s x, e, epsilon0=e0) = s ot_sort(x, e / s, epsilon0=e0 / s)`` to rounding, at any
tolerance. A wider spread is a sharper transport and needs more iterations (``max_iterations`` caps them).

Precision. The plan's entries, hence its marginals (the rows sum to ``a``: ranks in [0, n - 1], masks in [0, 1];
the columns to ``b`` up to the tolerance: sorted values within [min x, max x]), carry a relative rounding error of
about ``P = finfo.eps max|xs - mid| max|y - mid| / epsilon`` in the compute dtype; the default targets have
``max|y - mid| = 0.5``, so with the logistic squashing ``P <= finfo.eps / (4 epsilon)`` (3e-5 in float32 at
``epsilon = 1e-3``). Positions from ``squashing="none"`` or a callable, and targets ``y``, enter unscaled (their
scale is the problem's): eager calls refuse ``P > 1e-2`` (float32 at ``epsilon = 1e-3`` with the default targets
accepts ``max|x - mid| <= 168``) and positions beyond ``max|xs - mid| + max|y - mid| <= sqrt(epsilon finfo.max /
16)``, where the cost and the potentials would overflow (ValueError naming ``x`` or ``y``); under ``torch.compile``
the checks are skipped, like the weights'.

Non-finite inputs (every backend): a row with a NaN or infinite value is NaN in every output (the squashing
standardises the row with its mean and standard deviation), and so is its gradient; other rows are unaffected.
With the logistic squashing and the default targets, finite inputs give finite outputs for every magnitude (the
row is scaled by its largest magnitude first: every read-out is exactly scale equivariant), and finite gradients
for magnitudes up to ``finfo.max min(1, epsilon) / (16 max(n, m))`` of the compute dtype (the gradient of a sorted
value passes through the plan's sensitivity, which is ``1 / epsilon`` times the value's scale).

Any dimension, padded rows, k per row, hard (docs/math/otsort.md §6): every op works along ``dim``; with ``lengths``
or ``mask`` each row is exactly the problem of its real entries alone (source weights ``1 / L`` or ``a``
renormalised over them, the default targets built for ``n = L``, the squashing, centring and stopping rule over the
real entries; the kernels run each row over its own entries only), and every pad entry of every output and
gradient is 0. ``hard=True`` returns the zero-temperature limit (the monotone plan's read-outs: exact sorted
values, 0-based ranks, top-k) with the soft op's gradient.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple, Union

import torch

from .. import _backend, _checks, _rows
from . import ops, reference

SQUASHINGS = ("logistic", "none")
BACKWARDS = ("implicit", "unrolled")
Squashing = Union[str, Callable[[torch.Tensor], torch.Tensor]]


class OTTopK(NamedTuple):
    """``values [..., k]`` (the soft k largest, largest first; the k smallest, smallest first, for
    ``largest=False``) and ``mask [..., n]`` (the mass of each element sent to the k top targets, in [0, 1] to
    rounding)."""

    values: torch.Tensor
    mask: torch.Tensor


# --- arguments --------------------------------------------------------------------------------------------------


def _loop_args(epsilon, epsilon0, annealing, tolerance, max_iterations, squashing, backward):
    epsilon = _checks.positive_finite(epsilon, "epsilon")
    epsilon0 = epsilon if epsilon0 is None else _checks.positive_finite(epsilon0, "epsilon0")
    if isinstance(annealing, bool) or not isinstance(annealing, (int, float)) or not 0 < annealing <= 1:
        raise ValueError(f"annealing must be a number in (0, 1], got {annealing!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < math.inf:
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, numbers.Integral):
        raise TypeError(f"max_iterations must be an int, got {type(max_iterations).__name__}")
    if not 1 <= max_iterations <= 2**31 - 1:
        raise ValueError(f"max_iterations must be in [1, 2^31 - 1], got {max_iterations}")
    if not callable(squashing) and squashing not in SQUASHINGS:
        raise ValueError(f"squashing must be one of {list(SQUASHINGS)} or a callable, got {squashing!r}")
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {list(BACKWARDS)}, got {backward!r}")
    return epsilon, epsilon0, float(annealing), float(tolerance), int(max_iterations)


def _op_size(t, name: str, r: _rows.Rows, ndim: int) -> int:
    """The size of ``t``'s op dimension: a 1-D ``t`` is that dimension, any other is aligned with x's dimensions
    from the right (its op dimension at ``dim``)."""
    d = 0 if t.dim() == 1 else r.dim - ndim + t.dim()
    if t.dim() == 0 or d < 0:
        raise ValueError(f"{name} must have the op dimension dim = {r.dim} of x, got shape {tuple(t.shape)}")
    return t.shape[d]


def _per_row(w, name: str, r: _rows.Rows, ndim: int, size: int, like: torch.Tensor, sources: bool) -> torch.Tensor:
    """``w`` as rows ``[B, size]`` in ``like``'s dtype: the op dimension (``dim``, or a 1-D ``w`` itself) last,
    broadcast over the batch; sources (``a``) compacted as x for a mask."""
    _checks.floating_tensor(w, name)
    if w.device != like.device:
        raise ValueError(f"{name} must be on {like.device}, got {w.device}")
    if _op_size(w, name, r, ndim) != size:
        raise ValueError(f"{name} must have {size} entries along the op dimension dim, got shape {tuple(w.shape)}")
    wl = w.movedim(0 if w.dim() == 1 else r.dim - ndim + w.dim(), -1)
    try:
        wl = torch.broadcast_to(wl, (*r.batch, size))
    except RuntimeError:
        full = (*r.batch[: r.dim], size, *r.batch[r.dim :])
        raise ValueError(f"{name} of shape {tuple(w.shape)} does not broadcast to {full}") from None
    wl = wl.to(like.dtype).reshape(-1, size)
    if sources and r.dest is not None:
        wl = torch.empty_like(wl).scatter(-1, r.dest, wl)
    return wl.contiguous()


def _log_weights(w: torch.Tensor, name: str, real: torch.Tensor | None) -> torch.Tensor:
    """``log(w / sum w)`` over the real entries of each row (``real [B, size]`` bool, None: all), 0 elsewhere."""
    if not torch.compiler.is_compiling() and w.numel():
        ok = (w > 0) & w.isfinite()
        ok = ok if real is None else ok | ~real
        if not _checks.on_host(w):
            _checks.assert_on_device(ok, f"{name} must hold finite weights > 0")
        elif not bool(ok.all()):
            raise ValueError(f"{name} must hold finite weights > 0")
    if real is None:
        return (w.log() - w.sum(-1, keepdim=True).log()).contiguous()
    w = torch.where(real, w, 1)
    total = torch.where(real, w, 0).sum(-1, keepdim=True)
    total = torch.where(total > 0, total, 1)  # an empty row
    return torch.where(real, w.log() - total.log(), 0).contiguous()


def _uniform(counts: torch.Tensor | None, size: int, real: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """Uniform log-weights ``[B, size]``: ``-log(counts)`` on each row's first ``counts`` entries (``-log(size)``
    everywhere where None), 0 elsewhere."""
    if counts is None:
        return like.new_full((like.shape[0], size), -math.log(size))
    w = -counts.clamp_min(1).to(like.dtype).log().unsqueeze(-1)
    return torch.where(real, w, 0).contiguous()


def _targets(y, r: _rows.Rows, ndim: int, m: int, m_len, real, descending: bool, like) -> torch.Tensor:
    """Target positions ``[B, m]``: ``y`` (default ``j / (m_r - 1)`` over each row's own ``m_r`` targets), mirrored
    to ``1 - y`` when descending; 0 past each row's targets."""
    if y is None:
        j = torch.arange(m, dtype=like.dtype, device=like.device)
        if m_len is None:
            y = (j / max(1, m - 1)).expand(like.shape[0], m)
        else:
            y = j / (m_len - 1).clamp_min(1).to(like.dtype).unsqueeze(-1)
    else:
        y = _per_row(y, "y", r, ndim, m, like, sources=False)
    y = 1 - y if descending else y
    return (y if real is None else torch.where(real, y, 0)).contiguous()


def squash(x: torch.Tensor, squashing: Squashing = "logistic") -> torch.Tensor:
    """The squashing of the rows (last dimension) of ``x`` onto (0, 1) before the transport.

    ``"logistic"`` (docs/math/otsort.md §1.1): ``sigmoid(pi / sqrt(3) (x - mean) / max(std, 1e-6))`` with the
    population standard deviation, computed on ``x / max|x|`` (exactly scale invariant: no overflow for huge values);
    ``"none"``: ``x`` itself; a callable: applied to ``x [..., n]``.
    """
    return _squash(x, squashing, None)


def _squash(x: torch.Tensor, squashing: Squashing, real: torch.Tensor | None) -> torch.Tensor:
    """:func:`squash` of rows whose real entries are ``real [B, n]`` (None: all): the statistics over those, 0 on
    the pads (whose values x holds as 0)."""
    if callable(squashing):
        return squashing(x)
    if squashing == "none":
        return x
    s = x.detach().abs().amax(-1, keepdim=True)
    s = torch.where((s > 0) & s.isfinite(), s, torch.ones_like(s))
    xn = x / s
    if real is None:
        d = xn - xn.mean(-1, keepdim=True)
        var = (d * d).mean(-1, keepdim=True)
    else:
        count = real.sum(-1, keepdim=True).clamp_min(1)
        d = xn - xn.sum(-1, keepdim=True) / count
        var = torch.where(real, d * d, 0).sum(-1, keepdim=True) / count
    floor = ((1e-6 / s) ** 2).clamp_min(torch.finfo(x.dtype).tiny)  # max(std, 1e-6) on the scale of x
    std = torch.where(var > floor, var, floor).sqrt()
    out = torch.sigmoid(d / std * (math.pi / math.sqrt(3)))
    return out if real is None else torch.where(real, out, 0)


# --- the transport ------------------------------------------------------------------------------------------------


def _check_memory(backend, rows, n, m, want_plan, unrolled, max_iterations, cdtype, device):
    per_row = (4 * n + 4 * m) * cdtype.itemsize
    what = f"the OT sort of {rows} row(s) of n = {n} onto m = {m} targets ({cdtype})"
    hint = "use a smaller batch"
    if want_plan:
        per_row += n * m * cdtype.itemsize
        hint += " or return_plan=False"
    if backend == "reference":
        per_row += 8 * n * m * cdtype.itemsize
        hint += ", or a compiled backend (backend='cpu' or 'cuda': O(n + m) memory)"
    if unrolled:
        per_row += min(max_iterations, 2**20) * (n + m) * cdtype.itemsize
        hint += ", backward='implicit' or a smaller max_iterations"
    _checks.memory_fits(rows * per_row, device, f"{what} on backend {backend!r}", hint)


PRECISION = 1e-2  # the largest relative rounding error of the plan an eager call accepts (module docstring)


def _check_positions(xs, y, eps, finite):
    """Refuses centred positions whose cost and potentials (about ``2 max|xs| max|y|``, at most ``(max|xs| +
    max|y|)^2``) overflow over epsilon, or whose plan's rounding error ``finfo.eps max|xs| max|y| / epsilon`` (per row)
    exceeds ``PRECISION``. Rows with a non-finite position (``finite [R, 1]`` false) are NaN by rule, not checked.
    Off the CPU the same bounds are asserted on the device, without the figures."""
    if not xs.numel():
        return
    finfo = torch.finfo(xs.dtype)
    bound = math.sqrt(eps * finfo.max / 16)
    hint = "; use squashing='logistic', rescale x and y, or a larger epsilon"
    pxr = xs.detach().abs().where(finite, 0).amax(-1)
    pyr = y.detach().abs().amax(-1)
    if not _checks.on_host(xs):
        _checks.assert_on_device(y.isfinite(), "y must hold finite target positions")
        _checks.assert_on_device(
            (pxr.amax() + pyr.amax() <= bound) & (finfo.eps * (pxr * pyr).amax() / eps <= PRECISION),
            f"x (squashed) or y too large for the transport in {xs.dtype} at epsilon = {eps:.3g} (overflow or "
            f"a relative rounding error of the plan above {PRECISION:g}){hint}, or compute in float64",
        )
        return
    if not bool(y.isfinite().all()):
        raise ValueError("y must hold finite target positions")
    px, py, pxy = torch.stack([pxr.amax(), pyr.amax(), (pxr * pyr).amax()]).tolist()
    what = "x (squashed)" if not px <= py else "y"
    if not px + py <= bound:
        raise ValueError(
            f"{what} too large for the transport: max|xs - mid| + max|y - mid| = {px + py:.3g} exceeds "
            f"sqrt(epsilon finfo.max / 16) = {bound:.3g} in {xs.dtype} (the cost and the potentials "
            f"overflow){hint}"
        )
    err = finfo.eps * pxy / eps
    if not err <= PRECISION:
        raise ValueError(
            f"{what} too large for the precision of {xs.dtype} at epsilon = {eps:.3g}: the plan's "
            f"relative rounding error finfo.eps max|xs - mid| max|y - mid| / epsilon = {err:.3g} exceeds "
            f"{PRECISION:g}{hint}, or compute in float64"
        )


def _mid(v, real=None):
    """``(min v + max v) / 2`` per row ``[R, 1]`` over the real entries (``real [R, size]``, None: all; 0 for a row
    without any), without overflow: ``v - mid(v)`` is 0 on a constant row and within ``max v - min v`` otherwise
    (the rounding of the midpoint is below one ulp of it, the spread at least that)."""
    if real is None:
        return v.amin(-1, keepdim=True) / 2 + v.amax(-1, keepdim=True) / 2
    lo = torch.where(real, v, math.inf).amin(-1, keepdim=True)
    hi = torch.where(real, v, -math.inf).amax(-1, keepdim=True)
    return torch.where(real.any(-1, keepdim=True), lo / 2 + hi / 2, 0)


class _Solved(NamedTuple):
    """A transport of rows ``[B, n]`` onto ``m`` targets: the read-outs ``cols [B, m]``, ``rows [B, n]`` and the plan
    ``[B, n, m]`` (or None), 0 past each row's real entries; what the zero-temperature limit (``hard``) needs: ``x``
    (compute dtype, pads 0), the sort key, the log-weights, the values ``v`` read off per element, the lengths."""

    cols: torch.Tensor
    rows: torch.Tensor
    plan: torch.Tensor | None
    x: torch.Tensor
    key: torch.Tensor
    loga: torch.Tensor
    logb: torch.Tensor
    v: torch.Tensor
    lengths: torch.Tensor | None
    real_n: torch.Tensor | None
    real_m: torch.Tensor | None


def _rows_of(x, dim, lengths, mask) -> _rows.Rows:
    _checks.floating_tensor(x, "x")
    if x.shape[_rows.check_dim(x, dim)] < 1:
        raise ValueError(
            f"x must have at least one element along dim (n >= 1), got shape {tuple(x.shape)} and dim {dim}"
        )
    return _rows.rows(x, dim, lengths, mask)


def _transport(
    r: _rows.Rows,
    ndim: int,
    *,
    a,
    b,
    y,
    m,
    m_len,
    b_rows,
    v_of,
    descending,
    epsilon,
    epsilon0,
    annealing,
    tolerance,
    max_iterations,
    squashing,
    backward,
    want_plan,
    backend,
) -> _Solved:
    """The transport of the rows ``r`` (of x, ``ndim`` dimensions) onto ``m`` targets, each row onto its own
    ``m_len`` first ones (None: all ``m``); target weights ``b`` (the caller's, or None: uniform) or ``b_rows [B, m]``
    (per row, positive on each row's targets); ``v_of(b, count)`` the values read off per element from the
    normalised target weights ``b [B, m]`` and each row's number of real entries ``count [B, 1]``. The read-out
    ``cols`` is ``c + sum_i T_ij (x_i - c) / b_j`` (sorted values, ``c = mid(x)``)."""
    eps, eps0, decay, tol, max_it = _loop_args(
        epsilon, epsilon0, annealing, tolerance, max_iterations, squashing, backward
    )
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, got {type(descending).__name__}")
    if not isinstance(want_plan, bool):
        raise TypeError(f"return_plan must be a bool, got {type(want_plan).__name__}")
    lengths = r.lengths
    if lengths is not None and callable(squashing):
        raise ValueError(
            "squashing: a callable cannot be combined with lengths or mask (it would see the pads); squash x "
            "yourself and pass squashing='none', or use 'logistic'"
        )
    x = r.x
    backend = _backend.resolve("otsort", backend, x.device)
    rows, n = x.shape
    cdtype = _checks.compute_dtype(x.dtype)
    unrolled = backward == "unrolled"
    if not torch.compiler.is_compiling():
        _check_memory(backend, rows, n, m, want_plan, unrolled and torch.is_grad_enabled(), max_it, cdtype, x.device)
    real_n = r.valid()
    real_m = None
    if m_len is not None:
        real_m = torch.arange(m, device=x.device) < m_len.unsqueeze(-1)
    elif lengths is not None:  # every non-empty row has all m targets
        real_m = (lengths > 0).unsqueeze(-1).expand(rows, m)
    xc = x.to(cdtype)
    if real_n is not None:
        xc = torch.where(real_n, xc, 0)  # pads are never read: 0 from here on
    loga = (
        _uniform(lengths, n, real_n, xc)
        if a is None
        else _log_weights(_per_row(a, "a", r, ndim, n, xc, True), "a", real_n)
    )
    if b_rows is not None:
        logb = _log_weights(b_rows.to(cdtype), "b", real_m)
    elif b is None:
        logb = _uniform(m_len, m, real_m, xc)
    else:
        logb = _log_weights(_per_row(b, "b", r, ndim, m, xc, False), "b", real_m)
    yv = _targets(y, r, ndim, m, m_len, real_m, descending, xc)
    xs = _squash(xc, squashing, real_n)
    if not isinstance(xs, torch.Tensor) or xs.shape != xc.shape:
        raise ValueError(
            f"squashing must return a tensor of the shape of x, got "
            f"{tuple(xs.shape) if isinstance(xs, torch.Tensor) else type(xs).__name__}"
        )
    # the plan depends on the positions only through (xs_i - mid) (y_j - mid): transport them centred, so that no
    # offset is left to cancel in the cost (module docstring: shift and precision)
    xs = xs.to(cdtype)
    finite = xs.isfinite().all(-1, keepdim=True)
    xs = _zero_pads(xs - _mid(xs, real_n), real_n)
    yv = _zero_pads(yv - _mid(yv, real_m), real_m)
    if not torch.compiler.is_compiling() and (squashing != "logistic" or y is not None):
        _check_positions(xs, yv, eps, finite)
    # sorted values: read off x / max|x| (no overflow in the kernels) about its midrange c, S_j = c + sum_i T_ij (x_i
    # - c) / b_j, shift equivariant whatever the column marginals' error; scaled back
    s = xc.detach().abs().amax(-1, keepdim=True)
    s = torch.where((s > 0) & s.isfinite(), s, torch.ones_like(s))
    u = xc / s
    c = _mid(u, real_n)
    u = _zero_pads(u - c, real_n)
    count = lengths.unsqueeze(-1).to(cdtype) if lengths is not None else xc.new_full((rows, 1), float(n))
    v = _zero_pads(v_of(logb.exp() if real_m is None else torch.where(real_m, logb.exp(), 0), count), real_m)
    v = v.to(cdtype).contiguous()
    loop = (eps, eps0, decay, tol, max_it)
    if backend == "reference":
        solve = reference.sinkhorn if unrolled else reference.sinkhorn_implicit
        f, g, e, _ = solve(xs, yv, loga, logb, *loop, lengths, m_len)
        T = reference.plan(xs, yv, f, g, e, lengths, m_len)
        cols, rws = reference.apply(T, loga, logb, u, v, lengths, m_len)
        plan = T if want_plan else None
    else:
        grad = unrolled and torch.is_grad_enabled()
        f, g, e, _, _ = ops.ot_sinkhorn_fwd(xs, yv, loga, logb, *loop, grad, backend, lengths, m_len)
        cols, rws, plan = ops.ot_apply_fwd(xs, yv, f, g, e, loga, logb, u, v, want_plan, backend, lengths, m_len)
        plan = plan if want_plan else None
    cols = _zero_pads((cols + c) * s, real_m)
    key = xs if callable(squashing) else xc
    return _Solved(cols, rws, plan, xc, key, loga, logb, v, lengths, real_n, real_m)


def _zero_pads(t, real):
    return t if real is None else torch.where(real, t, 0)


def _straight(exact, soft, hard: bool):
    """``soft``, or with ``hard`` the exact (zero-temperature) value forward and the gradient of ``soft``."""
    return _rows.straight_through(exact.detach(), soft) if hard else soft


def _monotone(t: _Solved, descending: bool):
    """The zero-temperature limit of a transport: ``(cols [B, m], rows [B, n], plan [B, n, m])`` of the monotone
    (north-west corner) plan, which sends the sources in sorted order (ascending, or descending when the targets
    are mirrored; ties by index) onto the targets in their order, mass for mass: ``T_ij = max(0, min(A_i, B_j) -
    max(A_{i-1}, B_{j-1}))`` with ``A``, ``B`` the cumulative source (sorted) and target weights."""
    with torch.no_grad():
        perm = _rows.exact_order(t.key, t.lengths, descending)
        a = _zero_pads(t.loga.exp(), t.real_n)
        b = _zero_pads(t.logb.exp(), t.real_m)

        def edges(w):
            hi = w.cumsum(-1)
            return torch.cat([torch.zeros_like(hi[:, :1]), hi[:, :-1]], -1), hi

        a0, a1 = edges(a.gather(-1, perm))
        b0, b1 = edges(b)
        lo = torch.maximum(a0.unsqueeze(-1), b0.unsqueeze(-2))
        Ts = (torch.minimum(a1.unsqueeze(-1), b1.unsqueeze(-2)) - lo).clamp_min(0)
        T = torch.zeros_like(Ts).scatter_(-2, perm.unsqueeze(-1).expand_as(Ts), Ts)  # rows back in element order
        cols = _zero_pads(torch.einsum("rij,ri->rj", T, t.x) / torch.where(b > 0, b, 1), t.real_m)
        rows = _zero_pads(torch.einsum("rij,rj->ri", T, t.v) / torch.where(a > 0, a, 1), t.real_n)
    return cols, rows, T


def _permutation(t: _Solved, descending: bool):
    """The zero-temperature limit where it is a permutation (uniform source weights, one target of weight 1 / L per
    rank): ``(values [B, n], ranks [B, n], plan [B, n, n])``, exactly: the sorted values (positions past L: 0),
    the 0-based ranks (the pads: 0) and the plan ``P / L`` (``P`` the permutation matrix)."""
    with torch.no_grad():
        perm = _rows.exact_order(t.key, t.lengths, descending)
        n = perm.shape[-1]
        pos = torch.arange(n, device=perm.device).expand_as(perm)
        real_pos = None if t.lengths is None else pos < t.lengths.unsqueeze(-1)
        values = _zero_pads(t.x.gather(-1, perm), real_pos)
        ranks = _zero_pads(torch.empty_like(t.x).scatter_(-1, perm, pos.to(t.x.dtype)), t.real_n)
        count = t.x.new_full((perm.shape[0],), float(n)) if t.lengths is None else t.lengths.clamp_min(1).to(t.x.dtype)
        plan = _rows.exact_matrix(perm, t.lengths, t.x.dtype) / count[:, None, None]
    return values, ranks, plan


def _ranks_targets(b, count):
    """Zero-based soft-rank values of the targets: ``L cs(b)_j - 1`` (``L`` the row's number of real entries)."""
    return count * b.cumsum(-1) - 1


def _num_targets(num_targets, r: _rows.Rows, ndim: int, b, y):
    """``(m, m_len)``: the number of targets and each row's own (None: all ``m``): ``b``'s or ``y``'s size, else
    ``num_targets``, else one per real entry of each row (``m = n``, ``m_len = lengths``)."""
    for t, name in ((b, "b"), (y, "y")):
        if isinstance(t, torch.Tensor):
            return _op_size(t, name, r, ndim), None
    if num_targets is None:
        return r.n, r.lengths
    if isinstance(num_targets, bool) or not isinstance(num_targets, numbers.Integral) or num_targets < 1:
        raise ValueError(f"num_targets must be an integer >= 1 or None, got {num_targets!r}")
    return int(num_targets), None


def _check_hard(hard):
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")


def _sort_and_rank(
    x, dim, lengths, mask, num_targets, a, b, y, descending, loop, squashing, backward, plan, hard, backend
):
    """The transport of :func:`ot_sort` / :func:`ot_rank` / ``OTSort``: ``(r, solved, values [B, m], ranks [B, n],
    plan [B, n, m] | None)``, with ``hard`` the exact values forward (straight through)."""
    _check_hard(hard)
    r = _rows_of(x, dim, lengths, mask)
    m, m_len = _num_targets(num_targets, r, x.dim(), b, y)
    t = _transport(
        r,
        x.dim(),
        a=a,
        b=b,
        y=y,
        m=m,
        m_len=m_len,
        b_rows=None,
        v_of=_ranks_targets,
        descending=descending,
        **loop,
        squashing=squashing,
        backward=backward,
        want_plan=plan,
        backend=backend,
    )
    cols, rws, T = t.cols, t.rows, t.plan
    if hard:
        # the limit is a permutation when every row has uniform weights and as many targets as entries
        if a is None and b is None and (m_len is not None or (m == r.n and r.lengths is None)):
            ecols, erws, eT = _permutation(t, descending)
        else:
            ecols, erws, eT = _monotone(t, descending)
        cols, rws = _straight(ecols, cols, True), _straight(erws, rws, True)
        T = _straight(eT, T, True) if T is not None else None
    return r, cols, rws, T


_DOC_ARGS = """
        epsilon: the entropic regularization reached at the end of the annealing (> 0).
        epsilon0: the first iteration's epsilon (annealed by ``annealing`` per iteration down to ``epsilon``);
            None (or <= epsilon): no annealing.
        annealing: the epsilon decay factor per iteration, in (0, 1].
        tolerance: stop once ``max_j |c_j / b_j - 1| <= tolerance`` (column marginals ``c``), checked every 5
            iterations after the annealing, per row; 0 runs ``max_iterations``.
        max_iterations: the most Sinkhorn iterations (each a column and a row log-sum-exp sweep).
        squashing: ``"logistic"``, ``"none"`` or a callable on ``x [..., n]`` (see :func:`squash`; not with
            ``lengths`` / ``mask``).
        a: input weights of x's layout (the op dimension at ``dim``; a 1-D ``a`` is that dimension), > 0,
            normalised per row over its real entries (pads ignored); broadcast over the batch; default uniform.
        dim: the dimension the op works along (negative counts from the end).
        lengths: integer tensor of x's shape without ``dim``: row ``b`` is its first ``lengths[b]`` entries (each in
            ``[0, n]``), the rest are pads, never read. Exclusive with ``mask``.
        mask: bool tensor of x's shape, True on the real entries. Each row gives exactly what it gives alone
            without its pads; every pad entry of every output, and every gradient reaching a pad, is 0.
        hard: the exact (zero-temperature) result forward, the gradient of the soft op backward.
        backward: ``"implicit"`` or ``"unrolled"`` (see the module docstring).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``."""


def _doc(f):
    f.__doc__ = f.__doc__.replace("        {common}", _DOC_ARGS.strip("\n"))
    return f


def _loop(epsilon, epsilon0, annealing, tolerance, max_iterations):
    return dict(
        epsilon=epsilon, epsilon0=epsilon0, annealing=annealing, tolerance=tolerance, max_iterations=max_iterations
    )


@_doc
def ot_sort(
    x: torch.Tensor,
    epsilon: float = 1e-3,
    *,
    descending: bool = False,
    num_targets: int | None = None,
    a=None,
    b=None,
    y=None,
    epsilon0: float | None = 0.1,
    annealing: float = 0.95,
    tolerance: float = 1e-2,
    max_iterations: int = 2000,
    squashing: Squashing = "logistic",
    backward: str = "implicit",
    return_plan: bool = False,
    dim: int = -1,
    lengths=None,
    mask=None,
    hard: bool = False,
    backend: str = "auto",
):
    """Soft sorted values of ``x`` along ``dim``: ``S_j = c + sum_i T_ij (x_i - c) / b_j`` with ``c = (min x + max x)
    / 2`` (``sum_i T_ij x_i / b_j`` where the column marginals are exact).

    Exact under a shift: ``ot_sort(x + t) = ot_sort(x) + t``. Under a scaling by ``s > 0``: ``s ot_sort(x)`` with the
    logistic squashing, ``s ot_sort(x, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the
    module docstring, also for the precision and the refusals).

    Padded rows (``lengths`` / ``mask``): a row of ``L`` real entries is sorted onto its own ``L`` targets (``b_j =
    1 / L``, ``y_j = j / (L - 1)``) into positions ``0 .. L - 1``; positions ``L .. n - 1`` are 0. With
    ``num_targets``, ``b`` or ``y`` every non-empty row has those ``m`` targets. ``hard``: the exact sorted values
    (the monotone plan's read-out where the weights are not uniform, see docs/math/otsort.md).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        descending: sort in descending order (the targets are mirrored: ``y -> 1 - y``).
        num_targets: ``m``, the number of sorted values (default n; ignored when ``b`` or ``y`` is given).
        b: target weights of the output's layout (the target dimension at ``dim``, or 1-D ``[m]``), > 0,
            normalised; default uniform ``1 / m``.
        y: target positions on [0, 1] (increasing), laid out as ``b``; default ``j / (m - 1)``.
        return_plan: also return the plan ``T [*batch, n, m]`` (rows sum to ``a``, columns to ``b``; the two matrix
            dimensions last whatever ``dim``).
        {common}

    Returns:
        x's shape with ``m`` entries along ``dim``, in x's dtype (ascending unless ``descending``), or ``(values,
        plan)`` with ``return_plan``.
    """
    r, cols, _, plan = _sort_and_rank(
        x,
        dim,
        lengths,
        mask,
        num_targets,
        a,
        b,
        y,
        descending,
        _loop(epsilon, epsilon0, annealing, tolerance, max_iterations),
        squashing,
        backward,
        return_plan,
        hard,
        backend,
    )
    cols = r.positions(cols).to(x.dtype)
    return (cols, r.matrix(plan).to(x.dtype)) if return_plan else cols


@_doc
def ot_rank(
    x: torch.Tensor,
    epsilon: float = 1e-3,
    *,
    descending: bool = False,
    num_targets: int | None = None,
    a=None,
    b=None,
    y=None,
    epsilon0: float | None = 0.1,
    annealing: float = 0.95,
    tolerance: float = 1e-2,
    max_iterations: int = 2000,
    squashing: Squashing = "logistic",
    backward: str = "implicit",
    return_plan: bool = False,
    dim: int = -1,
    lengths=None,
    mask=None,
    hard: bool = False,
    backend: str = "auto",
):
    """Soft zero-based ranks of ``x`` along ``dim``: ``R_i = n F_i - 1``, ``F_i = sum_j T_ij cs(b)_j / a_i`` the soft
    CDF (0 = the smallest, or the largest when ``descending``; in [n / m - 1, n - 1]).

    Exact under a shift: ``ot_rank(x + t) = ot_rank(x)``. Under a scaling by ``s > 0``: ``ot_rank(x)`` with the
    logistic squashing, ``ot_rank(x, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the module
    docstring, also for the precision and the refusals).

    Padded rows: ``n`` is each row's own number of real entries ``L`` (ranks in ``[0, L - 1]``, its own ``L``
    targets by default, as in :func:`ot_sort`); pads rank 0. ``hard``: the exact 0-based ranks (ties by index).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        descending: rank from the largest.
        num_targets: ``m`` (default n; fewer targets give coarser ranks; ignored when ``b`` or ``y`` is given).
        b: target weights (as in :func:`ot_sort`), default uniform.
        y: target positions on [0, 1] (increasing, as in :func:`ot_sort`), default ``j / (m - 1)``.
        return_plan: also return the plan ``T [*batch, n, m]``.
        {common}

    Returns:
        x's shape, in x's dtype, or ``(ranks, plan)`` with ``return_plan``.
    """
    r, _, rws, plan = _sort_and_rank(
        x,
        dim,
        lengths,
        mask,
        num_targets,
        a,
        b,
        y,
        descending,
        _loop(epsilon, epsilon0, annealing, tolerance, max_iterations),
        squashing,
        backward,
        return_plan,
        hard,
        backend,
    )
    rws = r.elements(rws).to(x.dtype)
    return (rws, r.matrix(plan).to(x.dtype)) if return_plan else rws


def _quantile_weights(levels, count: torch.Tensor, weight) -> torch.Tensor:
    """:func:`quantile_targets`' weights ``[B, 2 Q + 1]`` (float64) for rows of ``count [B]`` real entries."""
    qs = sorted(levels)
    Q = len(qs)
    ext = [0.0] + qs + [1.0]
    gaps = [hi - lo for lo, hi in zip(ext[:-1], ext[1:])]
    w = min([0.5 / Q, 0.5 * min(gaps)] + ([0.02] if weight is None else [weight]))
    w = torch.full(count.shape, w, dtype=torch.float64, device=count.device)
    if weight is None:
        w = torch.minimum(w, 1.5 / count.clamp_min(1).to(torch.float64))
    w = w.unsqueeze(-1)
    half = _checks.to_device([0.5 if k in (0, Q) else 1.0 for k in range(Q + 1)], torch.float64, w.device)
    fillers = _checks.to_device(gaps, torch.float64, w.device) - w * half
    b = torch.stack([fillers[:, :Q], w.expand(-1, Q)], -1).flatten(-2)
    return torch.cat([b, fillers[:, Q:]], -1)


def quantile_targets(q, n: int, weight: float | None = None):
    """The target measure of :func:`ot_quantile` (ott-jax's construction): for the sorted levels
    ``q_1 < ... < q_Q`` in (0, 1), ``m = 2 Q + 1`` targets evenly spaced on [0, 1] alternate fillers and quantile
    targets; each quantile target weighs ``w = min(weight, 0.5 / Q, half the smallest gap of (0, q, 1))``
    (``weight`` default ``min(0.02, 1.5 / n)``), the fillers the gaps between the levels less ``w`` (less ``w / 2``
    for the first and last). Returns ``(b, order)`` as Python lists: the weights of the ``m`` targets, and the rank
    of each level of ``q`` among the sorted levels (the quantile values are the sorted values at the odd targets)."""
    qs = sorted(q)
    b = _quantile_weights(qs, torch.tensor([n]), weight)[0].tolist()
    return b, [qs.index(v) for v in q]


@_doc
def ot_quantile(
    x: torch.Tensor,
    q,
    epsilon: float = 1e-3,
    *,
    weight: float | None = None,
    a=None,
    epsilon0: float | None = 0.1,
    annealing: float = 0.95,
    tolerance: float = 1e-2,
    max_iterations: int = 2000,
    squashing: Squashing = "logistic",
    backward: str = "implicit",
    dim: int = -1,
    lengths=None,
    mask=None,
    hard: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Soft quantiles of ``x`` along ``dim`` at the levels ``q``: the sorted values at the quantile targets of
    :func:`quantile_targets` (``2 len(q) + 1`` targets only: O(n len(q)) per iteration).

    Exact under a shift: ``ot_quantile(x + t, q) = ot_quantile(x, q) + t``. Under a scaling by ``s > 0``: ``s
    ot_quantile(x, q)`` with the logistic squashing, ``s ot_quantile(x, q, epsilon / s, epsilon0=epsilon0 / s)`` with
    ``squashing="none"`` (see the module docstring, also for the precision and the refusals).

    Padded rows: each row's target weights are those of its own ``n = L`` (the default ``weight`` depends on it); a
    row of length 0 gives 0. ``hard``: the zero-temperature limit, the average of the sorted values over the mass
    window ``[q - w/2, q + w/2]`` of the quantile target (docs/math/otsort.md).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        q: levels, a float or a 1-D sequence/tensor of distinct values in (0, 1).
        weight: the weight of each quantile target (> 0; smaller is sharper); default ``min(0.02, 1.5 / n)``.
        {common}

    Returns:
        x's shape with ``len(q)`` entries along ``dim`` (without ``dim`` for a float ``q``) in x's dtype, in the
        order of ``q``.
    """
    scalar = isinstance(q, (int, float)) and not isinstance(q, bool)
    levels = [q] if scalar else (q.tolist() if isinstance(q, torch.Tensor) else q)
    if not isinstance(levels, (list, tuple)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in levels
    ):
        raise TypeError(f"q must be a float or a 1-D sequence of floats, got {q!r}")
    if len(levels) < 1:
        raise ValueError("q must be a float or a non-empty 1-D sequence of floats, got an empty one")
    levels = [float(v) for v in levels]
    if not all(0 < v < 1 for v in levels) or len(set(levels)) != len(levels):
        raise ValueError(f"q must hold distinct levels in (0, 1), got {levels}")
    if weight is not None:
        weight = _checks.positive_finite(weight, "weight")
    _check_hard(hard)
    r = _rows_of(x, dim, lengths, mask)
    count = r.lengths if r.lengths is not None else torch.full((r.x.shape[0],), r.n, device=x.device)
    b_rows = _quantile_weights(levels, count, weight)
    order = [sorted(levels).index(v) for v in levels]
    t = _transport(
        r,
        x.dim(),
        a=a,
        b=None,
        y=None,
        m=b_rows.shape[-1],
        m_len=None,
        b_rows=b_rows,
        v_of=_ranks_targets,
        descending=False,
        **_loop(epsilon, epsilon0, annealing, tolerance, max_iterations),
        squashing=squashing,
        backward=backward,
        want_plan=False,
        backend=backend,
    )
    cols = _straight(_monotone(t, False)[0], t.cols, True) if hard else t.cols
    vals = r.positions(cols[:, 1::2][:, order]).to(x.dtype)
    return vals.squeeze(r.dim) if scalar else vals


def _check_k(k):
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, torch.Tensor)):
        raise TypeError(f"k must be an int or an integer tensor (one k per row), got {type(k).__name__}")


@_doc
def ot_topk(
    x: torch.Tensor,
    k,
    epsilon: float = 1e-3,
    *,
    largest: bool = True,
    a=None,
    epsilon0: float | None = 0.1,
    annealing: float = 0.95,
    tolerance: float = 1e-2,
    max_iterations: int = 2000,
    squashing: Squashing = "logistic",
    backward: str = "implicit",
    dim: int = -1,
    lengths=None,
    mask=None,
    hard: bool = False,
    backend: str = "auto",
) -> OTTopK:
    """Soft top-k of ``x`` along ``dim`` (the top-k variant of Cuturi et al., docs/math/otsort.md §3.4): ``m = k + 1``
    targets, ``k`` of weight ``1 / n`` at the top and one of weight ``(n - k) / n`` for the rest (``k = n``: ``n``
    targets of weight ``1 / n``, a full sort). O(n k) per iteration.

    Exact under a shift: ``ot_topk(x + t, k)`` has the values of ``ot_topk(x, k)`` plus ``t`` and the same mask.
    Under a scaling by ``s > 0``: values times ``s``, the same mask, with the logistic squashing; those of
    ``ot_topk(x, k, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the module docstring, also
    for the precision and the refusals).

    A ``k`` per row and padded rows: row ``b`` is the top-``k_b`` of its ``L_b`` real entries, ``k_b = min(k_b,
    L_b)`` (``n = L_b`` in the weights above); the values are ``K = max k`` wide, row ``b``'s ``k_b`` values first
    (largest first, as ``torch.topk``), then 0. ``hard``: the exact top-k values and a 0/1 mask (ties by index).

    Args:
        x: ``[..., n, ...]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        k: an int in ``[1, n]``, or an integer tensor of x's shape without ``dim`` (one k per row, each in
            ``[1, n]``).
        largest: the k largest (default) or the k smallest.
        {common}

    Returns:
        :class:`OTTopK` ``(values, mask)`` in x's dtype: ``values`` x's shape with ``K`` entries along ``dim``,
        largest first (smallest first for ``largest=False``), as ``torch.topk``; ``mask`` x's shape, ``mask_i`` the
        mass of element i sent to the k top targets (in [0, 1] to the rounding of the module docstring).
    """
    _check_k(k)
    _check_hard(hard)
    r = _rows_of(x, dim, lengths, mask)
    n = r.n
    K, k_rows = _rows.per_row_k(k, r)
    cdtype = _checks.compute_dtype(x.dtype)
    if k_rows is None:  # one k, full rows
        m, m_len = (n if K == n else K + 1), None
        b_rows = x.new_full((1, m), 1.0 / n, dtype=cdtype)
        if K < n:
            b_rows[:, K] = (n - K) / n
        b_rows = b_rows.expand(r.x.shape[0], m)
        kk = torch.full((r.x.shape[0], 1), K, device=x.device)
    else:  # each row: k_b targets of weight 1 / L at the top and one of (L - k_b) / L, or L of 1 / L for k_b = L
        count = r.lengths if r.lengths is not None else torch.full_like(k_rows, n)
        m = min(K + 1, n)
        m_len = torch.where(k_rows == count, count, k_rows + 1)
        j = torch.arange(m, device=x.device)
        L = count.clamp_min(1).unsqueeze(-1).to(torch.float64)
        kk = k_rows.unsqueeze(-1)
        b_rows = torch.where(j < kk, 1 / L, torch.where(j == kk, (L - kk) / L, 0)).to(cdtype)
        b_rows = torch.where(j < m_len.unsqueeze(-1), b_rows, 1)  # (past a row's targets: never read)

    def top(b, count):
        return (torch.arange(b.shape[-1], device=b.device) < kk).to(b.dtype).expand_as(b)

    t = _transport(
        r,
        x.dim(),
        a=a,
        b=None,
        y=None,
        m=m,
        m_len=m_len,
        b_rows=b_rows,
        v_of=top,
        descending=largest,
        **_loop(epsilon, epsilon0, annealing, tolerance, max_iterations),
        squashing=squashing,
        backward=backward,
        want_plan=False,
        backend=backend,
    )
    cols, rws = t.cols, t.rows
    if hard:
        if a is None:  # uniform weights: the exact top-k of each row
            values, ranks, _ = _permutation(t, largest)
            ecols, erws = values[:, :m], _zero_pads((ranks < kk).to(ranks.dtype), t.real_n)
        else:
            ecols, erws, _ = _monotone(t, largest)
        cols, rws = _straight(ecols, cols, True), _straight(erws, rws, True)
    values = torch.where(torch.arange(K, device=x.device) < kk, cols[:, :K], 0)
    return OTTopK(r.positions(values).to(x.dtype), r.elements(rws).to(x.dtype))
