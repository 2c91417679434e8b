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
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple, Union

import torch

from .. import _backend, _checks
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


def _weights(w, name: str, batch, size: int, like: torch.Tensor) -> torch.Tensor:
    """Log-weights ``[R, size]``: ``w`` broadcast to ``batch + (size,)`` and normalised per row (uniform if None)."""
    rows = math.prod(batch)
    if w is None:
        return like.new_full((rows, size), -math.log(size))
    _checks.floating_tensor(w, name)
    if w.shape[-1] != size:
        raise ValueError(f"{name} must have {size} entries in its last dimension, got shape {tuple(w.shape)}")
    try:
        w = torch.broadcast_to(w, (*batch, size))
    except RuntimeError:
        raise ValueError(f"{name} of shape {tuple(w.shape)} does not broadcast to {(*batch, size)}") from None
    if w.device != like.device:
        raise ValueError(f"{name} must be on {like.device}, got {w.device}")
    w = w.to(like.dtype).reshape(rows, size)
    if not torch.compiler.is_compiling() and w.numel() and not bool(((w > 0) & w.isfinite()).all()):
        raise ValueError(f"{name} must hold finite weights > 0")
    return (w.log() - w.sum(-1, keepdim=True).log()).contiguous()


def _targets(y, batch, m: int, descending: bool, like: torch.Tensor) -> torch.Tensor:
    """Target positions ``[R, m]``: ``y`` (default ``j / (m - 1)``), mirrored to ``1 - y`` when descending."""
    rows = math.prod(batch)
    if y is None:
        y = torch.arange(m, dtype=like.dtype, device=like.device) / max(1, m - 1)
    else:
        _checks.floating_tensor(y, "y")
        if y.shape[-1] != m:
            raise ValueError(f"y must have {m} entries in its last dimension, got shape {tuple(y.shape)}")
        if y.device != like.device:
            raise ValueError(f"y must be on {like.device}, got {y.device}")
        y = y.to(like.dtype)
    try:
        y = torch.broadcast_to(y, (*batch, m)).reshape(rows, m)
    except RuntimeError:
        raise ValueError(f"y of shape {tuple(y.shape)} does not broadcast to {(*batch, m)}") from None
    return (1 - y if descending else y).contiguous()


def squash(x: torch.Tensor, squashing: Squashing = "logistic") -> torch.Tensor:
    """The squashing of the rows (last dimension) of ``x`` onto (0, 1) before the transport.

    ``"logistic"`` (docs/math/otsort.md §1.1): ``sigmoid(pi / sqrt(3) (x - mean) / max(std, 1e-6))`` with the
    population standard deviation, computed on ``x / max|x|`` (exactly scale invariant: no overflow for huge values);
    ``"none"``: ``x`` itself; a callable: applied to ``x [..., n]``.
    """
    if callable(squashing):
        return squashing(x)
    if squashing == "none":
        return x
    s = x.detach().abs().amax(-1, keepdim=True)
    s = torch.where((s > 0) & s.isfinite(), s, torch.ones_like(s))
    xn = x / s
    d = xn - xn.mean(-1, keepdim=True)
    var = (d * d).mean(-1, keepdim=True)
    floor = ((1e-6 / s) ** 2).clamp_min(torch.finfo(x.dtype).tiny)  # max(std, 1e-6) on the scale of x
    std = torch.where(var > floor, var, floor).sqrt()
    return torch.sigmoid(d / std * (math.pi / math.sqrt(3)))


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
    exceeds ``PRECISION``. Rows with a non-finite position (``finite [R, 1]`` false) are NaN by rule, not checked."""
    if not xs.numel():
        return
    if not bool(y.isfinite().all()):
        raise ValueError("y must hold finite target positions")
    pxr = xs.detach().abs().where(finite, 0).amax(-1)
    pyr = y.detach().abs().amax(-1)
    px, py, pxy = torch.stack([pxr.amax(), pyr.amax(), (pxr * pyr).amax()]).tolist()
    what = "x (squashed)" if not px <= py else "y"
    finfo = torch.finfo(xs.dtype)
    bound = math.sqrt(eps * finfo.max / 16)
    hint = "; use squashing='logistic', rescale x and y, or a larger epsilon"
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


def _mid(v):
    """``(min v + max v) / 2`` per row ``[R, 1]``, without overflow: ``v - mid(v)`` is 0 on a constant row and within
    ``max v - min v`` otherwise (the rounding of the midpoint is below one ulp of it, the spread at least that)."""
    return v.amin(-1, keepdim=True) / 2 + v.amax(-1, keepdim=True) / 2


def _transport(
    x,
    *,
    a,
    b,
    y,
    m,
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
):
    """``(cols [..., m], rows [..., n], plan [..., n, m] | None)`` in the compute dtype for the read-outs
    ``c + sum_i T_ij (x_i - c) / b_j`` (sorted values, ``c = mid(x)``) and ``v = v_of(b)`` (a function of the
    normalised target weights ``[R, m]``)."""
    _checks.floating_tensor(x, "x")
    n = x.shape[-1]
    if n < 1:
        raise ValueError(f"x must have at least one element in its last dimension (n >= 1), got shape {tuple(x.shape)}")
    eps, eps0, decay, tol, max_it = _loop_args(
        epsilon, epsilon0, annealing, tolerance, max_iterations, squashing, backward
    )
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, got {type(descending).__name__}")
    if not isinstance(want_plan, bool):
        raise TypeError(f"return_plan must be a bool, got {type(want_plan).__name__}")
    backend = _backend.resolve("otsort", backend, x.device)
    batch = tuple(x.shape[:-1])
    rows = math.prod(batch)
    cdtype = _checks.compute_dtype(x.dtype)
    unrolled = backward == "unrolled"
    if not torch.compiler.is_compiling():
        _check_memory(backend, rows, n, m, want_plan, unrolled and torch.is_grad_enabled(), max_it, cdtype, x.device)
    xc = x.to(cdtype).reshape(rows, n)
    loga = _weights(a, "a", batch, n, xc)
    logb = _weights(b, "b", batch, m, xc)
    yv = _targets(y, batch, m, descending, xc)
    xs = squash(xc, squashing)
    if not isinstance(xs, torch.Tensor) or xs.shape != xc.shape:
        raise ValueError(
            f"squashing must return a tensor of the shape of x, got "
            f"{tuple(xs.shape) if isinstance(xs, torch.Tensor) else type(xs).__name__}"
        )
    # the plan depends on the positions only through (xs_i - mid) (y_j - mid): transport them centred, so that no
    # offset is left to cancel in the cost (module docstring: shift and precision)
    xs = xs.to(cdtype)
    finite = xs.isfinite().all(-1, keepdim=True)
    xs = (xs - _mid(xs)).contiguous()
    yv = (yv - _mid(yv)).contiguous()
    if not torch.compiler.is_compiling() and (squashing != "logistic" or y is not None):
        _check_positions(xs, yv, eps, finite)
    # sorted values: read off x / max|x| (no overflow in the kernels) about its midrange c, S_j = c + sum_i T_ij (x_i
    # - c) / b_j, shift equivariant whatever the column marginals' error; scaled back
    s = xc.detach().abs().amax(-1, keepdim=True)
    s = torch.where((s > 0) & s.isfinite(), s, torch.ones_like(s))
    u = xc / s
    c = _mid(u)
    u = (u - c).contiguous()
    v = v_of(logb.exp()).to(cdtype).contiguous()
    loop = (eps, eps0, decay, tol, max_it)
    if backend == "reference":
        solve = reference.sinkhorn if unrolled else reference.sinkhorn_implicit
        f, g, e, _ = solve(xs, yv, loga, logb, *loop)
        T = reference.plan(xs, yv, f, g, e)
        cols, rws = reference.apply(T, loga, logb, u, v)
        plan = T if want_plan else None
    else:
        f, g, e, _, _ = ops.ot_sinkhorn_fwd(xs, yv, loga, logb, *loop, unrolled and torch.is_grad_enabled(), backend)
        cols, rws, plan = ops.ot_apply_fwd(xs, yv, f, g, e, loga, logb, u, v, want_plan, backend)
        plan = plan if want_plan else None
    cols = (cols + c) * s
    out = (cols.reshape(*batch, m), rws.reshape(*batch, n), plan.reshape(*batch, n, m) if plan is not None else None)
    return out


def _ranks_targets(n: int):
    """Zero-based soft-rank values of the targets: ``n cs(b)_j - 1``."""
    return lambda b: n * b.cumsum(-1) - 1


def _num_targets(num_targets, n, b, y):
    if b is not None and isinstance(b, torch.Tensor):
        return b.shape[-1]
    if y is not None and isinstance(y, torch.Tensor):
        return y.shape[-1]
    if num_targets is None:
        return n
    if isinstance(num_targets, bool) or not isinstance(num_targets, numbers.Integral) or num_targets < 1:
        raise ValueError(f"num_targets must be an integer >= 1 or None, got {num_targets!r}")
    return int(num_targets)


_DOC_ARGS = """
        epsilon: the entropic regularization reached at the end of the annealing (> 0).
        epsilon0: the first iteration's epsilon (annealed by ``annealing`` per iteration down to ``epsilon``);
            None (or <= epsilon): no annealing.
        annealing: the epsilon decay factor per iteration, in (0, 1].
        tolerance: stop once ``max_j |c_j / b_j - 1| <= tolerance`` (column marginals ``c``), checked every 5
            iterations after the annealing; 0 runs ``max_iterations``.
        max_iterations: the most Sinkhorn iterations (each a column and a row log-sum-exp sweep).
        squashing: ``"logistic"``, ``"none"`` or a callable on ``x [..., n]`` (see :func:`squash`).
        a: input weights ``[..., n]`` (> 0, normalised per row; broadcast over the batch), default uniform.
        backward: ``"implicit"`` or ``"unrolled"`` (see the module docstring).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``."""


def _doc(f):
    f.__doc__ = f.__doc__.replace("        {common}", _DOC_ARGS.strip("\n"))
    return f


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
    backend: str = "auto",
):
    """Soft sorted values of the last dimension of ``x``: ``S_j = c + sum_i T_ij (x_i - c) / b_j`` with ``c = (min x +
    max x) / 2`` (``sum_i T_ij x_i / b_j`` where the column marginals are exact).

    Exact under a shift: ``ot_sort(x + t) = ot_sort(x) + t``. Under a scaling by ``s > 0``: ``s ot_sort(x)`` with the
    logistic squashing, ``s ot_sort(x, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the
    module docstring, also for the precision and the refusals).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        descending: sort in descending order (the targets are mirrored: ``y -> 1 - y``).
        num_targets: ``m``, the number of sorted values (default n; ignored when ``b`` or ``y`` is given).
        b: target weights ``[..., m]`` (> 0, normalised), default uniform ``1 / m``.
        y: target positions ``[..., m]`` on [0, 1] (increasing), default ``j / (m - 1)``.
        return_plan: also return the plan ``T [..., n, m]`` (rows sum to ``a``, columns to ``b``).
        {common}

    Returns:
        ``[..., m]`` in x's dtype (ascending unless ``descending``), or ``(values, plan)`` with ``return_plan``.
    """
    m = _num_targets(num_targets, x.shape[-1] if isinstance(x, torch.Tensor) else 1, b, y)
    cols, _, plan = _transport(
        x,
        a=a,
        b=b,
        y=y,
        m=m,
        v_of=_ranks_targets(x.shape[-1]),
        descending=descending,
        epsilon=epsilon,
        epsilon0=epsilon0,
        annealing=annealing,
        tolerance=tolerance,
        max_iterations=max_iterations,
        squashing=squashing,
        backward=backward,
        want_plan=return_plan,
        backend=backend,
    )
    cols = cols.to(x.dtype)
    return (cols, plan.to(x.dtype)) if return_plan else cols


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
    backend: str = "auto",
):
    """Soft zero-based ranks of the last dimension of ``x``: ``R_i = n F_i - 1``, ``F_i = sum_j T_ij cs(b)_j / a_i``
    the soft CDF (0 = the smallest, or the largest when ``descending``; in [n / m - 1, n - 1]).

    Exact under a shift: ``ot_rank(x + t) = ot_rank(x)``. Under a scaling by ``s > 0``: ``ot_rank(x)`` with the
    logistic squashing, ``ot_rank(x, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the module
    docstring, also for the precision and the refusals).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        descending: rank from the largest.
        num_targets: ``m`` (default n; fewer targets give coarser ranks; ignored when ``b`` or ``y`` is given).
        b: target weights ``[..., m]`` (> 0, normalised), default uniform.
        y: target positions ``[..., m]`` on [0, 1] (increasing), default ``j / (m - 1)``.
        return_plan: also return the plan ``T [..., n, m]``.
        {common}

    Returns:
        ``[..., n]`` in x's dtype, or ``(ranks, plan)`` with ``return_plan``.
    """
    n = x.shape[-1] if isinstance(x, torch.Tensor) else 1
    m = _num_targets(num_targets, n, b, y)
    _, rws, plan = _transport(
        x,
        a=a,
        b=b,
        y=y,
        m=m,
        v_of=_ranks_targets(n),
        descending=descending,
        epsilon=epsilon,
        epsilon0=epsilon0,
        annealing=annealing,
        tolerance=tolerance,
        max_iterations=max_iterations,
        squashing=squashing,
        backward=backward,
        want_plan=return_plan,
        backend=backend,
    )
    rws = rws.to(x.dtype)
    return (rws, plan.to(x.dtype)) if return_plan else rws


def quantile_targets(q, n: int, weight: float | None = None):
    """The target measure of :func:`ot_quantile` (ott-jax's construction): for the sorted levels
    ``q_1 < ... < q_Q`` in (0, 1), ``m = 2 Q + 1`` targets evenly spaced on [0, 1] alternate fillers and quantile
    targets; each quantile target weighs ``w = min(weight, 0.5 / Q, half the smallest gap of (0, q, 1))``
    (``weight`` default ``min(0.02, 1.5 / n)``), the fillers the gaps between the levels less ``w`` (less ``w / 2``
    for the first and last). Returns ``(b, order)`` as Python lists: the weights of the ``m`` targets, and the rank
    of each level of ``q`` among the sorted levels (the quantile values are the sorted values at the odd targets)."""
    qs = sorted(q)
    Q = len(qs)
    ext = [0.0] + qs + [1.0]
    gaps = [hi - lo for lo, hi in zip(ext[:-1], ext[1:])]
    w = min([0.5 / Q, 0.5 * min(gaps)] + ([0.02, 1.5 / n] if weight is None else [weight]))
    fillers = [gap - w * (0.5 if k in (0, Q) else 1.0) for k, gap in enumerate(gaps)]
    b = [v for k in range(Q) for v in (fillers[k], w)] + [fillers[Q]]
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
    backend: str = "auto",
) -> torch.Tensor:
    """Soft quantiles of the last dimension of ``x`` at the levels ``q``: the sorted values at the quantile targets
    of :func:`quantile_targets` (``2 len(q) + 1`` targets only: O(n len(q)) per iteration).

    Exact under a shift: ``ot_quantile(x + t, q) = ot_quantile(x, q) + t``. Under a scaling by ``s > 0``: ``s
    ot_quantile(x, q)`` with the logistic squashing, ``s ot_quantile(x, q, epsilon / s, epsilon0=epsilon0 / s)`` with
    ``squashing="none"`` (see the module docstring, also for the precision and the refusals).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        q: levels, a float or a 1-D sequence/tensor of distinct values in (0, 1).
        weight: the weight of each quantile target (> 0; smaller is sharper); default ``min(0.02, 1.5 / n)``.
        {common}

    Returns:
        ``[..., len(q)]`` in x's dtype (``[...]`` for a float ``q``), in the order of ``q``.
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
    _checks.floating_tensor(x, "x")
    b, order = quantile_targets(levels, x.shape[-1], weight)
    m = len(b)
    b = torch.tensor(b, dtype=_checks.compute_dtype(x.dtype), device=x.device)
    cols, _, _ = _transport(
        x,
        a=a,
        b=b,
        y=None,
        m=m,
        v_of=_ranks_targets(x.shape[-1]),
        descending=False,
        epsilon=epsilon,
        epsilon0=epsilon0,
        annealing=annealing,
        tolerance=tolerance,
        max_iterations=max_iterations,
        squashing=squashing,
        backward=backward,
        want_plan=False,
        backend=backend,
    )
    vals = cols[..., 1::2][..., order].to(x.dtype)
    return vals[..., 0] if scalar else vals


@_doc
def ot_topk(
    x: torch.Tensor,
    k: int,
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
    backend: str = "auto",
) -> OTTopK:
    """Soft top-k of the last dimension of ``x`` (the top-k variant of Cuturi et al., docs/math/otsort.md §3.4):
    ``m = k + 1`` targets, ``k`` of weight ``1 / n`` at the top and one of weight ``(n - k) / n`` for the rest
    (``k = n``: ``n`` targets of weight ``1 / n``, a full sort). O(n k) per iteration.

    Exact under a shift: ``ot_topk(x + t, k)`` has the values of ``ot_topk(x, k)`` plus ``t`` and the same mask.
    Under a scaling by ``s > 0``: values times ``s``, the same mask, with the logistic squashing; those of
    ``ot_topk(x, k, epsilon / s, epsilon0=epsilon0 / s)`` with ``squashing="none"`` (see the module docstring, also
    for the precision and the refusals).

    Args:
        x: ``[..., n]`` float16/bfloat16/float32/float64 (half types are computed in float32), n >= 1.
        k: ``1 <= k <= n``.
        largest: the k largest (default) or the k smallest.
        {common}

    Returns:
        :class:`OTTopK` ``(values [..., k], mask [..., n])`` in x's dtype: values largest first (smallest first for
        ``largest=False``), as ``torch.topk``; ``mask_i`` the mass of element i sent to the k top targets (in
        [0, 1] to the rounding of the module docstring).
    """
    _checks.floating_tensor(x, "x")
    n = x.shape[-1]
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n = {n}, got {k}")
    k = int(k)
    m = n if k == n else k + 1
    cdtype = _checks.compute_dtype(x.dtype)
    b = torch.full((m,), 1.0 / n, dtype=cdtype, device=x.device)
    if k < n:
        b[k] = (n - k) / n

    def top(b_):
        return (torch.arange(m, device=b_.device) < k).to(b_.dtype).expand_as(b_)

    cols, rws, _ = _transport(
        x,
        a=a,
        b=b,
        y=None,
        m=m,
        v_of=top,
        descending=largest,
        epsilon=epsilon,
        epsilon0=epsilon0,
        annealing=annealing,
        tolerance=tolerance,
        max_iterations=max_iterations,
        squashing=squashing,
        backward=backward,
        want_plan=False,
        backend=backend,
    )
    return OTTopK(cols[..., :k].to(x.dtype), rws.to(x.dtype))
