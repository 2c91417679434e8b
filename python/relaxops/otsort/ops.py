"""Autograd ops of the optimal-transport sort, registered with ``torch.library`` (kernels: ``csrc/otsort/otsort.h``).

* ``relaxops::ot_sinkhorn_fwd(xs, y, loga, logb, epsilon, epsilon0, decay, tolerance, max_iterations, unrolled,
  backend) -> (f, g, eps, iters, history)``, backward ``relaxops::ot_sinkhorn_bwd``: the annealed log-domain
  Sinkhorn loop per row. ``history [R K (n + m)]`` (flat: its length is data-dependent) holds the potentials
  ``[R, K, n + m]`` after each iteration when ``unrolled``
  (``K`` = the largest iteration count of the rows: the loop runs once to find it, then again storing them; O(K (n +
  m)) memory per row) and is empty (``K = 0``) otherwise. The backward is the implicit one at convergence (a
  conjugate-gradient solve in the dual variables) or, with ``unrolled``, the replay of the stored iterations.
* ``relaxops::ot_apply_fwd(xs, y, f, g, eps, loga, logb, u, v, want_plan, backend) -> (cols, rows, plan)``,
  backward ``relaxops::ot_apply_bwd``: the read-outs ``cols_j = sum_i T_ij u_i / b_j`` and ``rows_i = sum_j T_ij
  v_j / a_i`` of the plan ``T_ij = exp((f_i + g_j - C_ij) / eps)``, recomputed on the fly; ``plan [R, n, m]`` is T
  when ``want_plan`` (else ``[R, 0, 0]``).

The cost is ``C_ij = -2 xs_i y_j``, the cross term of ``(xs_i - y_j)^2`` (the same plan at every fixed point; the
potentials differ by ``xs_i^2`` and ``y_j^2``). Its size sets the rounding: the plan's relative error is about
``finfo.eps max|xs| max|y| / eps``, so callers pass positions centred at their midranges (``functional`` does).

``xs, loga, u [R, n]``, ``y, logb, v [R, m]`` contiguous float32/float64 of one dtype and device; ``eps [R]``;
``iters [R]`` int32. Every op takes ``lengths`` and ``target_lengths`` last (int64 ``[R]`` or None = full rows): row
``r`` is then the problem of its first ``lengths[r]`` sources and ``target_lengths[r]`` targets (its log-weights
normalised over those), the kernels never read the entries past them and write 0 to them in every output and
gradient; a row without a source or a target is empty (all outputs 0, ``eps`` = epsilon, ``iters`` = 0).
The ops are public (``torch.ops.relaxops.*``): each checks its arguments before any kernel runs. The backward ops
expect the tensors their forward returned (others of the right form give meaningless gradients, never
out-of-bounds memory access: the C++ kernels check the iteration counts against the history).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks, _ext

_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_FLOATS = (torch.float32, torch.float64)
_INTS = (int, torch.SymInt)
_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


def _sizes(xs, y):
    return (xs.shape[0], xs.shape[1], y.shape[1])


def _loop(epsilon, epsilon0, decay, tolerance, max_iterations, history_len=0):
    return (float(epsilon), float(epsilon0), float(decay), float(tolerance), int(max_iterations), int(history_len))


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers)."""

    @staticmethod
    def sinkhorn_forward(xs, y, loga, logb, loop, f, g, eps, iters, history, lens):
        _ext._C.ot_sinkhorn_forward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(iters),
            _ext.ptr(history),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def apply_forward(xs, y, f, g, eps, loga, logb, u, v, cols, rows, plan, lens):
        _ext._C.ot_apply_forward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            _loop(1, 1, 1, 0, 1),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(u),
            _ext.ptr(v),
            _ext.ptr(cols),
            _ext.ptr(rows),
            _ext.ptr(plan),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def apply_backward(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, outs, lens):
        _ext._C.ot_apply_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            _loop(1, 1, 1, 0, 1),
            _ext.ptr(gcols),
            _ext.ptr(grows),
            _ext.ptr(gplan),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(u),
            _ext.ptr(v),
            _ext.ptr(cols),
            _ext.ptr(rows),
            [_ext.ptr(o) for o in outs],
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def implicit_backward(gf, gg, xs, y, f, g, eps, loga, logb, loop, outs, lens):
        _ext._C.ot_implicit_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(gf),
            _ext.ptr(gg),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            [_ext.ptr(o) for o in outs],
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def unrolled_backward(gf, gg, xs, y, loga, logb, iters, history, loop, outs, lens):
        _ext._C.ot_unrolled_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(gf),
            _ext.ptr(gg),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(iters),
            _ext.ptr(history),
            [_ext.ptr(o) for o in outs],
            *map(_ext.ptr, lens),
        )


class _CudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; workspaces from
    torch's allocator, sizes in otsort.h)."""

    @staticmethod
    def _workspace(xs, y, dtype=None):
        R, n, m = _sizes(xs, y)
        return torch.empty(max(1, R * (6 * m + 3 * n)), dtype=dtype or xs.dtype, device=xs.device)

    @staticmethod
    def sinkhorn_forward(xs, y, loga, logb, loop, f, g, eps, iters, history, lens):
        ws = _CudaKernels._workspace(xs, y)
        _ext._cuda.ot_sinkhorn_forward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(iters),
            _ext.ptr(history),
            _ext.ptr(ws),
            _ext.stream(xs.device),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def apply_forward(xs, y, f, g, eps, loga, logb, u, v, cols, rows, plan, lens):
        _ext._cuda.ot_apply_forward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            _loop(1, 1, 1, 0, 1),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(u),
            _ext.ptr(v),
            _ext.ptr(cols),
            _ext.ptr(rows),
            _ext.ptr(plan),
            _ext.stream(xs.device),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def apply_backward(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, outs, lens):
        _ext._cuda.ot_apply_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            _loop(1, 1, 1, 0, 1),
            _ext.ptr(gcols),
            _ext.ptr(grows),
            _ext.ptr(gplan),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(u),
            _ext.ptr(v),
            _ext.ptr(cols),
            _ext.ptr(rows),
            [_ext.ptr(o) for o in outs],
            _ext.stream(xs.device),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def implicit_backward(gf, gg, xs, y, f, g, eps, loga, logb, loop, outs, lens):
        ws = _CudaKernels._workspace(xs, y, torch.float64)  # the conjugate-gradient vectors are double
        _ext._cuda.ot_implicit_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(gf),
            _ext.ptr(gg),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(f),
            _ext.ptr(g),
            _ext.ptr(eps),
            _ext.ptr(loga),
            _ext.ptr(logb),
            [_ext.ptr(o) for o in outs],
            _ext.ptr(ws),
            _ext.stream(xs.device),
            *map(_ext.ptr, lens),
        )

    @staticmethod
    def unrolled_backward(gf, gg, xs, y, loga, logb, iters, history, loop, outs, lens):
        ws = _CudaKernels._workspace(xs, y)
        _ext._cuda.ot_unrolled_backward(
            _ext.dtype_code(xs),
            _sizes(xs, y),
            loop,
            _ext.ptr(gf),
            _ext.ptr(gg),
            _ext.ptr(xs),
            _ext.ptr(y),
            _ext.ptr(loga),
            _ext.ptr(logb),
            _ext.ptr(iters),
            _ext.ptr(history),
            [_ext.ptr(o) for o in outs],
            _ext.ptr(ws),
            _ext.stream(xs.device),
            *map(_ext.ptr, lens),
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels, f"{__package__}.triton")


# --- argument checks (the fake kernels may see symbolic scalars: compared, never converted) ---------------------


def _number(op, name, v, lo, hi, lo_open=True, hi_open=False):
    ok = (
        not isinstance(v, bool)
        and isinstance(v, _NUMBERS)
        and (lo < v if lo_open else lo <= v)
        and (v < hi if hi_open else v <= hi)
    )
    if not ok:
        lb, hb = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ValueError(f"relaxops::{op}: {name} must be a number in {lb}{lo}, {hi}{hb}, got {v!r}")


def _check_problem(op, xs, y, loga, logb, backend):
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "xs", xs, dtypes=_FLOATS, shape=(None, None))
    R, n = xs.shape
    if n < 1:
        raise ValueError(f"relaxops::{op}: xs must have shape [R, n] with n >= 1, got {list(xs.shape)}")
    _checks.kernel_tensor(op, "y", y, dtypes=(xs.dtype,), device=xs.device, shape=(R, None))
    if y.shape[1] < 1:
        raise ValueError(f"relaxops::{op}: y must have shape [R, m] with m >= 1, got {list(y.shape)}")
    _checks.kernel_tensor(op, "loga", loga, dtypes=(xs.dtype,), device=xs.device, shape=tuple(xs.shape))
    _checks.kernel_tensor(op, "logb", logb, dtypes=(xs.dtype,), device=xs.device, shape=tuple(y.shape))
    return R, n, y.shape[1]


def _check_lengths(op, xs, y, lengths, target_lengths, values=False):
    """The rows' own sizes: int64 ``[R]`` on xs's device or None; with ``values`` (the real kernels, never the fake
    ones) their range (``_checks.on_host``): ``lengths`` in ``[0, n]``, ``target_lengths`` in ``[0, m]``."""
    R, n, m = _sizes(xs, y)
    for name, t, most in (("lengths", lengths, n), ("target_lengths", target_lengths, m)):
        if t is None:
            continue
        _checks.kernel_tensor(op, name, t, dtypes=(torch.int64,), device=xs.device, shape=(R,))
        if values and R and _checks.on_host(t):
            lo, hi = (int(v) for v in torch.aminmax(t))
            if lo < 0 or hi > most:
                raise ValueError(f"relaxops::{op}: {name} must lie in [0, {most}], found values in [{lo}, {hi}]")
        elif values and R:
            _checks.assert_on_device((t >= 0) & (t <= most), f"relaxops::{op}: {name} must lie in [0, {most}]")


def _check_loop(op, epsilon, epsilon0, decay, tolerance, max_iterations):
    _number(op, "epsilon", epsilon, 0, math.inf, hi_open=True)
    _number(op, "epsilon0", epsilon0, 0, math.inf, hi_open=True)
    _number(op, "decay", decay, 0, 1)
    _number(op, "tolerance", tolerance, 0, math.inf, lo_open=False, hi_open=True)
    if (
        isinstance(max_iterations, bool)
        or not isinstance(max_iterations, _INTS)
        or not (1 <= max_iterations <= 2**31 - 1)
    ):
        raise ValueError(f"relaxops::{op}: max_iterations must be an integer in [1, 2^31 - 1], got {max_iterations!r}")


def _check_potentials(op, xs, y, f, g, eps):
    R, n, m = _sizes(xs, y)
    _checks.kernel_tensor(op, "f", f, dtypes=(xs.dtype,), device=xs.device, shape=(R, n))
    _checks.kernel_tensor(op, "g", g, dtypes=(xs.dtype,), device=xs.device, shape=(R, m))
    _checks.kernel_tensor(op, "eps", eps, dtypes=(xs.dtype,), device=xs.device, shape=(R,))


# --- Sinkhorn -----------------------------------------------------------------------------------------------------


def _sinkhorn_outputs(xs, y, history_numel, fake=False):
    """The outputs; the history is NaN past each row's iteration count (the kernels write the first ``iters[r]``
    rows), and a fake one is built without reading its data-dependent length."""
    R, n, m = _sizes(xs, y)
    history = xs.new_empty_strided((history_numel,), (1,)) if fake else xs.new_full((history_numel,), math.nan)
    return (xs.new_empty(R, n), xs.new_empty(R, m), xs.new_empty(R), xs.new_empty(R, dtype=torch.int32), history)


@torch.library.custom_op("relaxops::ot_sinkhorn_fwd", mutates_args=())
def ot_sinkhorn_fwd(
    xs: Tensor,
    y: Tensor,
    loga: Tensor,
    logb: Tensor,
    epsilon: float,
    epsilon0: float,
    decay: float,
    tolerance: float,
    max_iterations: int,
    unrolled: bool,
    backend: str,
    lengths: Tensor | None = None,
    target_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    _check_problem("ot_sinkhorn_fwd", xs, y, loga, logb, backend)
    _check_loop("ot_sinkhorn_fwd", epsilon, epsilon0, decay, tolerance, max_iterations)
    _check_lengths("ot_sinkhorn_fwd", xs, y, lengths, target_lengths, values=True)
    kernels = _kernels("ot_sinkhorn_fwd", backend, xs.device)
    lens = (lengths, target_lengths)
    f, g, eps, iters, history = _sinkhorn_outputs(xs, y, 0)
    loop = _loop(epsilon, epsilon0, decay, tolerance, max_iterations)
    kernels.sinkhorn_forward(xs, y, loga, logb, loop, f, g, eps, iters, None, lens)
    if unrolled:  # again, storing the iterations (the loop is deterministic: same counts, same potentials)
        # The one host read of the op (docs/gpu.md, "Host synchronisations"): the history holds K = the most
        # iterations of a row, known only once the loop has run; sized by max_iterations instead, it would hold
        # max_iterations / K times the memory until the backward.
        K = max(1, int(iters.max())) if iters.numel() else 1
        R, n, m = _sizes(xs, y)
        f, g, eps, iters, history = _sinkhorn_outputs(xs, y, R * K * (n + m))
        loop = _loop(epsilon, epsilon0, decay, tolerance, K, K)
        kernels.sinkhorn_forward(xs, y, loga, logb, loop, f, g, eps, iters, history, lens)
    return f, g, eps, iters, history


@ot_sinkhorn_fwd.register_fake
def _(
    xs,
    y,
    loga,
    logb,
    epsilon,
    epsilon0,
    decay,
    tolerance,
    max_iterations,
    unrolled,
    backend,
    lengths=None,
    target_lengths=None,
):
    _check_problem("ot_sinkhorn_fwd", xs, y, loga, logb, backend)
    _check_loop("ot_sinkhorn_fwd", epsilon, epsilon0, decay, tolerance, max_iterations)
    _check_lengths("ot_sinkhorn_fwd", xs, y, lengths, target_lengths)
    numel = torch.library.get_ctx().new_dynamic_size() if unrolled else 0
    return _sinkhorn_outputs(xs, y, numel, fake=True)


@torch.library.custom_op("relaxops::ot_sinkhorn_bwd", mutates_args=())
def ot_sinkhorn_bwd(
    gf: Tensor,
    gg: Tensor,
    xs: Tensor,
    y: Tensor,
    loga: Tensor,
    logb: Tensor,
    f: Tensor,
    g: Tensor,
    eps: Tensor,
    iters: Tensor,
    history: Tensor,
    epsilon: float,
    epsilon0: float,
    decay: float,
    unrolled: bool,
    backend: str,
    lengths: Tensor | None = None,
    target_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    _check_sinkhorn_bwd(
        gf, gg, xs, y, loga, logb, f, g, eps, iters, history, epsilon, epsilon0, decay, unrolled, backend, real=True
    )
    _check_lengths("ot_sinkhorn_bwd", xs, y, lengths, target_lengths, values=True)
    kernels = _kernels("ot_sinkhorn_bwd", backend, xs.device)
    lens = (lengths, target_lengths)
    outs = (torch.empty_like(xs), torch.empty_like(y), torch.empty_like(xs), torch.empty_like(y))
    R, n, m = _sizes(xs, y)
    K = history.numel() // max(1, R * (n + m))
    if unrolled:
        if not _checks.on_host(iters):  # the kernels read rows 0..iters[r] - 1 of the history (the C++ one checks)
            _checks.assert_on_device(
                (iters >= 0) & (iters <= K), "relaxops: ot_unrolled_backward: iters must be in [0, history_len]"
            )
        loop = _loop(epsilon, epsilon0, decay, 0.0, max(K, 1), K)
        kernels.unrolled_backward(gf, gg, xs, y, loga, logb, iters, history, loop, outs, lens)
    else:
        # the solve is linear in (gf, gg): scale each row to a largest entry of 1, so that the conjugate gradients'
        # squared norms cannot overflow for huge incoming gradients, and scale the result back
        scale = torch.cat([gf, gg], -1).abs().amax(-1, keepdim=True) if R else gf.new_ones(0, 1)
        scale = torch.where((scale > 0) & scale.isfinite(), scale, torch.ones_like(scale))
        kernels.implicit_backward(
            (gf / scale).contiguous(),
            (gg / scale).contiguous(),
            xs,
            y,
            f,
            g,
            eps,
            loga,
            logb,
            _loop(epsilon, epsilon0, decay, 0.0, 1),
            outs,
            lens,
        )
        for o in outs:
            o.mul_(scale)
    return outs


def _check_sinkhorn_bwd(
    gf, gg, xs, y, loga, logb, f, g, eps, iters, history, epsilon, epsilon0, decay, unrolled, backend, real=False
):
    """The layout of the history (whose length is data-dependent under torch.compile) only if ``real``."""
    op = "ot_sinkhorn_bwd"
    R, n, m = _check_problem(op, xs, y, loga, logb, backend)
    _check_loop(op, epsilon, epsilon0, decay, 0.0, 1)
    _check_potentials(op, xs, y, f, g, eps)
    _checks.kernel_tensor(op, "gf", gf, dtypes=(xs.dtype,), device=xs.device, shape=(R, n))
    _checks.kernel_tensor(op, "gg", gg, dtypes=(xs.dtype,), device=xs.device, shape=(R, m))
    _checks.kernel_tensor(op, "iters", iters, dtypes=(torch.int32,), device=xs.device, shape=(R,))
    _checks.kernel_tensor(op, "history", history, dtypes=(xs.dtype,), device=xs.device, shape=(None,), contiguous=real)
    if real and unrolled and (history.numel() < R * (n + m) or history.numel() % max(1, R * (n + m))):
        raise ValueError(
            f"relaxops::{op}: the unrolled backward needs the history of an unrolled forward "
            f"(R K (n + m) entries, K >= 1), got {history.numel()}"
        )


@ot_sinkhorn_bwd.register_fake
def _(
    gf,
    gg,
    xs,
    y,
    loga,
    logb,
    f,
    g,
    eps,
    iters,
    history,
    epsilon,
    epsilon0,
    decay,
    unrolled,
    backend,
    lengths=None,
    target_lengths=None,
):
    _check_sinkhorn_bwd(
        gf, gg, xs, y, loga, logb, f, g, eps, iters, history, epsilon, epsilon0, decay, unrolled, backend
    )
    _check_lengths("ot_sinkhorn_bwd", xs, y, lengths, target_lengths)
    return torch.empty_like(xs), torch.empty_like(y), torch.empty_like(xs), torch.empty_like(y)


def _sinkhorn_setup(ctx, inputs, output):
    xs, y, loga, logb, epsilon, epsilon0, decay, _, _, unrolled, backend, lengths, target_lengths = inputs
    f, g, eps, iters, history = output
    ctx.mark_non_differentiable(eps, iters, history)
    ctx.save_for_backward(xs, y, loga, logb, f, g, eps, iters, history, lengths, target_lengths)
    ctx.args = (epsilon, epsilon0, decay, unrolled, backend)


def _sinkhorn_backward(ctx, gf, gg, geps, giters, ghistory):
    xs, y, loga, logb, f, g, eps, iters, history, lengths, target_lengths = ctx.saved_tensors
    epsilon, epsilon0, decay, unrolled, backend = ctx.args
    gf = torch.zeros_like(f) if gf is None else gf.contiguous()
    gg = torch.zeros_like(g) if gg is None else gg.contiguous()
    gxs, gy, gla, glb = ot_sinkhorn_bwd(
        gf,
        gg,
        xs,
        y,
        loga,
        logb,
        f,
        g,
        eps,
        iters,
        history,
        epsilon,
        epsilon0,
        decay,
        unrolled,
        backend,
        lengths,
        target_lengths,
    )
    return gxs, gy, gla, glb, None, None, None, None, None, None, None, None, None


ot_sinkhorn_fwd.register_autograd(_sinkhorn_backward, setup_context=_sinkhorn_setup)


# --- read-outs ----------------------------------------------------------------------------------------------------


def _check_apply(op, xs, y, f, g, eps, loga, logb, u, v, backend):
    R, n, m = _check_problem(op, xs, y, loga, logb, backend)
    _check_potentials(op, xs, y, f, g, eps)
    _checks.kernel_tensor(op, "u", u, dtypes=(xs.dtype,), device=xs.device, shape=(R, n))
    _checks.kernel_tensor(op, "v", v, dtypes=(xs.dtype,), device=xs.device, shape=(R, m))
    return R, n, m


def _plan_shape(xs, y, want_plan):
    R, n, m = _sizes(xs, y)
    return (R, n, m) if want_plan else (R, 0, 0)


@torch.library.custom_op("relaxops::ot_apply_fwd", mutates_args=())
def ot_apply_fwd(
    xs: Tensor,
    y: Tensor,
    f: Tensor,
    g: Tensor,
    eps: Tensor,
    loga: Tensor,
    logb: Tensor,
    u: Tensor,
    v: Tensor,
    want_plan: bool,
    backend: str,
    lengths: Tensor | None = None,
    target_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    _check_apply("ot_apply_fwd", xs, y, f, g, eps, loga, logb, u, v, backend)
    _check_lengths("ot_apply_fwd", xs, y, lengths, target_lengths, values=True)
    kernels = _kernels("ot_apply_fwd", backend, xs.device)
    cols, rows, plan = torch.empty_like(y), torch.empty_like(xs), xs.new_empty(_plan_shape(xs, y, want_plan))
    lens = (lengths, target_lengths)
    kernels.apply_forward(xs, y, f, g, eps, loga, logb, u, v, cols, rows, plan if want_plan else None, lens)
    return cols, rows, plan


@ot_apply_fwd.register_fake
def _(xs, y, f, g, eps, loga, logb, u, v, want_plan, backend, lengths=None, target_lengths=None):
    _check_apply("ot_apply_fwd", xs, y, f, g, eps, loga, logb, u, v, backend)
    _check_lengths("ot_apply_fwd", xs, y, lengths, target_lengths)
    return torch.empty_like(y), torch.empty_like(xs), xs.new_empty(_plan_shape(xs, y, want_plan))


def _check_apply_bwd(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, backend):
    op = "ot_apply_bwd"
    R, n, m = _check_apply(op, xs, y, f, g, eps, loga, logb, u, v, backend)
    for name, t, shape in (
        ("gcols", gcols, (R, m)),
        ("grows", grows, (R, n)),
        ("cols", cols, (R, m)),
        ("rows", rows, (R, n)),
    ):
        _checks.kernel_tensor(op, name, t, dtypes=(xs.dtype,), device=xs.device, shape=shape)
    if gplan is not None:
        _checks.kernel_tensor(op, "gplan", gplan, dtypes=(xs.dtype,), device=xs.device, shape=(R, n, m))


@torch.library.custom_op("relaxops::ot_apply_bwd", mutates_args=())
def ot_apply_bwd(
    gcols: Tensor,
    grows: Tensor,
    gplan: Tensor | None,
    xs: Tensor,
    y: Tensor,
    f: Tensor,
    g: Tensor,
    eps: Tensor,
    loga: Tensor,
    logb: Tensor,
    u: Tensor,
    v: Tensor,
    cols: Tensor,
    rows: Tensor,
    backend: str,
    lengths: Tensor | None = None,
    target_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    _check_apply_bwd(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, backend)
    _check_lengths("ot_apply_bwd", xs, y, lengths, target_lengths, values=True)
    kernels = _kernels("ot_apply_bwd", backend, xs.device)
    outs = tuple(torch.empty_like(t) for t in (xs, y, xs, y, xs, y, xs, y))  # gxs gy gf gg gu gv gloga glogb
    lens = (lengths, target_lengths)
    kernels.apply_backward(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, outs, lens)
    return outs


@ot_apply_bwd.register_fake
def _(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, backend, lengths=None, target_lengths=None):
    _check_apply_bwd(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, backend)
    _check_lengths("ot_apply_bwd", xs, y, lengths, target_lengths)
    return tuple(torch.empty_like(t) for t in (xs, y, xs, y, xs, y, xs, y))


def _apply_setup(ctx, inputs, output):
    xs, y, f, g, eps, loga, logb, u, v, want_plan, backend, lengths, target_lengths = inputs
    cols, rows, _ = output
    ctx.save_for_backward(xs, y, f, g, eps, loga, logb, u, v, cols, rows, lengths, target_lengths)
    ctx.args = (want_plan, backend)


def _apply_backward(ctx, gcols, grows, gplan):
    xs, y, f, g, eps, loga, logb, u, v, cols, rows, lengths, target_lengths = ctx.saved_tensors
    want_plan, backend = ctx.args
    gcols = torch.zeros_like(cols) if gcols is None else gcols.contiguous()
    grows = torch.zeros_like(rows) if grows is None else grows.contiguous()
    gplan = gplan.contiguous() if want_plan and gplan is not None else None
    gxs, gy, gf, gg, gu, gv, gla, glb = ot_apply_bwd(
        gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, backend, lengths, target_lengths
    )
    return gxs, gy, gf, gg, None, gla, glb, gu, gv, None, None, None, None


ot_apply_fwd.register_autograd(_apply_backward, setup_context=_apply_setup)
