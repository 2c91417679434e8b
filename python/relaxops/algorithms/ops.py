"""Registered ops (``relaxops::<op>``) of the fused relaxed algorithms: argument checks, fake kernels for
torch.compile, autograd through separate forward and backward kernels."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _checks, _ext  # noqa: F401

# --- shortest path ------------------------------------------------------------------------------------------------
# ``relaxops::shortest_path_fwd(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save,
# backend) -> (out, jac, pi, steps)`` and its backward ``relaxops::shortest_path_bwd(grad, jac, pi, steps, beta, n_iter,
# n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend) -> grad_cost`` (math and layouts:
# csrc/algorithms/shortest_path.h). ``cost [B, H, W]`` contiguous float32/float64; ``out [B, H, W]`` the relaxed path;
# ``jac [B, n_iter - 1, 8, H, W + 2]`` the saved Jacobians of the Bellman-Ford rounds (``[B, 0, 8, H, W + 2]`` when
# ``save`` is False: then there is no backward); ``pi [B, 8, H, W + 2]`` the last round's predecessor distributions
# (rows of pitch W + 2: two zero entries end each row); ``steps`` int32
# ``[1]``: the traceback steps run (n_trace for "for", the batch's trip count for "while"). ``hamacher_p`` is read
# only for t_conorm "hamacher" (finite, > 0). The ops check their arguments before any kernel runs; the backward expects
# the jac, pi and steps its forward returned (other values of the right form give meaningless gradients, never
# out-of-bounds memory access: the kernels check steps).

SP_T_CONORMS = {"probabilistic": 0, "hamacher": 1, "yager_1": 2}  # SpTConorm of shortest_path.h
SP_LOOPS = {"for": 0, "while": 1}  # SpLoop
_SP_BACKENDS = ("cpu", "cuda", "triton")
_SP_FLOATS = (torch.float32, torch.float64)
_SP_INTS = (int, torch.SymInt)
_SP_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)
_SP_BIG = 2**31
_SP_INF = float("inf")


def sp_kernel_args(B, H, W, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon):
    """The ``(ints, floats)`` parameter tuples of the compiled kernels (SpParams of shortest_path.h)."""
    ints = (B, H, W, n_iter, n_trace, SP_LOOPS[loop], SP_T_CONORMS[t_conorm], max_iter)
    return ints, (float(beta), float(hamacher_p), float(epsilon))


def sp_check_workspace(n, t, backward):
    """Refuse a work buffer of n elements of t's dtype that cannot fit, with its size: the backward's holds the K
    recomputed traceback states of each row (of each thread on the CPU)."""
    what = "backward (its recomputed traceback states)" if backward else "forward"
    _checks.memory_fits(
        n * t.element_size(),
        t.device,
        f"the shortest-path {what} work buffers",
        "use a smaller batch or grid, or fewer traceback steps (n_trace, or max_iter for loop='while')",
    )


def sp_backward_steps(steps, args) -> int:
    """The traceback steps K the backward replays. Loop "for": n_trace (on the host; ``steps`` must hold it,
    checked where it lies: by the C++ kernel on the CPU, on the device otherwise). Loop "while": the forward's trip
    count ``steps[0]``, the one host read of the op (docs/gpu.md, "Host synchronisations"): the work buffer holds
    K + 1 traceback states per row; sized by max_iter instead, it would take up to max_iter / K times the memory."""
    (_, _, _, _, n_trace, loop, _, _), _ = args
    if loop == SP_LOOPS["while"] or _checks.on_host(steps):
        return int(steps[0])
    _checks.assert_on_device(
        steps == n_trace,
        "relaxops::shortest_path_bwd: steps must be n_trace (loop 'for') or in [0, max_iter] (loop 'while')",
    )
    return n_trace


def _sp_workspace(module, t, args, K, backward):
    """The elements of ``module.shortest_path_workspace`` (checked by sp_check_workspace)."""
    n = module.shortest_path_workspace(*args, K, backward)
    sp_check_workspace(n, t, backward)
    return n


class _SpCpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers; the kernels allocate their work buffers, whose
    size is checked here first)."""

    @staticmethod
    def shortest_path_forward(cost, args, out, jac, pi, steps):
        ints, floats = args
        _sp_workspace(_ext._C, cost, args, 0, False)
        _ext._C.shortest_path_forward(
            _ext.dtype_code(cost),
            ints,
            floats,
            _ext.ptr(cost),
            _ext.ptr(out),
            _ext.ptr(jac) if jac.numel() else 0,
            _ext.ptr(pi),
            _ext.ptr(steps),
        )

    @staticmethod
    def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
        ints, floats = args
        _sp_workspace(_ext._C, grad, args, sp_backward_steps(steps, args), True)
        _ext._C.shortest_path_backward(
            _ext.dtype_code(grad),
            ints,
            floats,
            _ext.ptr(steps),
            _ext.ptr(grad),
            _ext.ptr(jac) if jac.numel() else 0,
            _ext.ptr(pi),
            _ext.ptr(grad_cost),
        )


class _SpCudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; work buffers from
    torch's allocator). The backward of loop "while" reads the step count on the host to size its work buffer."""

    @staticmethod
    def shortest_path_forward(cost, args, out, jac, pi, steps):
        ints, floats = args
        workspace = cost.new_empty(_sp_workspace(_ext._cuda, cost, args, 0, False))
        counts = torch.empty(cost.shape[0], dtype=torch.int32, device=cost.device)
        _ext._cuda.shortest_path_forward(
            _ext.dtype_code(cost),
            ints,
            floats,
            _ext.ptr(cost),
            _ext.ptr(out),
            _ext.ptr(jac) if jac.numel() else 0,
            _ext.ptr(pi),
            _ext.ptr(steps),
            _ext.ptr(counts),
            _ext.ptr(workspace) if workspace.numel() else 0,
            _ext.stream(cost.device),
        )

    @staticmethod
    def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
        ints, floats = args
        K = sp_backward_steps(steps, args)
        workspace = grad.new_empty(_sp_workspace(_ext._cuda, grad, args, K, True))
        _ext._cuda.shortest_path_backward(
            _ext.dtype_code(grad),
            ints,
            floats,
            K,
            _ext.ptr(grad),
            _ext.ptr(jac) if jac.numel() else 0,
            _ext.ptr(pi),
            _ext.ptr(grad_cost),
            _ext.ptr(workspace),
            _ext.stream(grad.device),
        )


def _sp_check_options(op, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend):
    if backend not in _SP_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_SP_BACKENDS)}, got {backend!r}")
    if isinstance(beta, bool) or not isinstance(beta, _SP_NUMBERS) or not 0 < beta < _SP_INF:
        raise ValueError(f"relaxops::{op}: beta must be a finite number > 0, got {beta!r}")
    for name, v, lo in (("n_iter", n_iter, 1), ("n_trace", n_trace, 0), ("max_iter", max_iter, 0)):
        if isinstance(v, bool) or not isinstance(v, _SP_INTS) or not lo <= v < _SP_BIG:
            raise ValueError(f"relaxops::{op}: {name} must be an integer in [{lo}, 2^31), got {v!r}")
    if t_conorm not in SP_T_CONORMS:
        raise ValueError(f"relaxops::{op}: t_conorm must be one of {list(SP_T_CONORMS)}, got {t_conorm!r}")
    if t_conorm == "hamacher" and (
        isinstance(hamacher_p, bool) or not isinstance(hamacher_p, _SP_NUMBERS) or not 0 < hamacher_p < _SP_INF
    ):
        raise ValueError(f"relaxops::{op}: hamacher_p must be a finite number > 0, got {hamacher_p!r}")
    if loop not in SP_LOOPS:
        raise ValueError(f"relaxops::{op}: loop must be one of {list(SP_LOOPS)}, got {loop!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, _SP_NUMBERS) or not 0 <= epsilon < _SP_INF:
        raise ValueError(f"relaxops::{op}: epsilon must be a finite number >= 0, got {epsilon!r}")


def _sp_check_forward(op, cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend):
    _sp_check_options(op, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend)
    _checks.kernel_tensor(op, "cost", cost, dtypes=_SP_FLOATS, shape=(None, None, None))
    H, W = cost.shape[1:]
    if H < 1 or W < 1 or (H + 2) * (W + 2) >= _SP_BIG:
        raise ValueError(
            f"relaxops::{op}: cost must have shape [B, H, W] with H, W >= 1 and (H + 2) (W + 2) < 2^31, "
            f"got {list(cost.shape)}"
        )
    if not isinstance(save, bool):
        raise TypeError(f"relaxops::{op}: save must be a bool, got {type(save).__name__}")


def _sp_outputs(cost, n_iter, save):
    B, H, W = cost.shape
    jac = cost.new_empty((B, n_iter - 1 if save else 0, 8, H, W + 2))
    return (
        torch.empty_like(cost),
        jac,
        cost.new_empty((B, 8, H, W + 2)),
        torch.empty(1, dtype=torch.int32, device=cost.device),
    )


def _sp_check_backward(
    op, grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend
):
    _sp_check_options(op, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend)
    _checks.kernel_tensor(op, "grad", grad, dtypes=_SP_FLOATS, shape=(None, None, None))
    B, H, W = grad.shape
    if H < 1 or W < 1 or (H + 2) * (W + 2) >= _SP_BIG:
        raise ValueError(f"relaxops::{op}: grad must have shape [B, H, W] with H, W >= 1, got {list(grad.shape)}")
    dev = grad.device
    if jac.dim() == 5 and jac.shape[1] == 0 and n_iter > 1:
        raise ValueError(f"relaxops::{op}: jac is empty: the forward was called with save=False, which has no backward")
    _checks.kernel_tensor(op, "jac", jac, dtypes=(grad.dtype,), device=dev, shape=(B, n_iter - 1, 8, H, W + 2))
    _checks.kernel_tensor(op, "pi", pi, dtypes=(grad.dtype,), device=dev, shape=(B, 8, H, W + 2))
    _checks.kernel_tensor(op, "steps", steps, dtypes=(torch.int32,), device=dev, shape=(1,))


_sp_kernels = _backend.family_launcher(_SpCpuKernels, _SpCudaKernels, f"{__package__}.triton")


def _sp_fwd_impl(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend):
    op = "shortest_path_fwd"
    _sp_check_forward(op, cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend)
    kernels = _sp_kernels(op, backend, cost.device)
    out, jac, pi, steps = _sp_outputs(cost, n_iter, save)
    B, H, W = cost.shape
    args = sp_kernel_args(B, H, W, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon)
    if B:
        kernels.shortest_path_forward(cost, args, out, jac, pi, steps)
    else:
        steps.fill_(n_trace if loop == "for" else 0)
    return out, jac, pi, steps


def _sp_bwd_impl(grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend):
    op = "shortest_path_bwd"
    _sp_check_backward(
        op, grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend
    )
    kernels = _sp_kernels(op, backend, grad.device)
    grad_cost = torch.empty_like(grad)
    B, H, W = grad.shape
    if B:
        args = sp_kernel_args(B, H, W, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon)
        kernels.shortest_path_backward(grad, jac, pi, steps, args, grad_cost)
    return grad_cost


@torch.library.custom_op("relaxops::shortest_path_fwd", mutates_args=())
def shortest_path_fwd(
    cost: Tensor,
    beta: float,
    n_iter: int,
    n_trace: int,
    t_conorm: str,
    hamacher_p: float,
    loop: str,
    max_iter: int,
    epsilon: float,
    save: bool,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _sp_fwd_impl(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend)


@shortest_path_fwd.register_fake
def _(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend):
    _sp_check_forward(
        "shortest_path_fwd", cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend
    )
    return _sp_outputs(cost, n_iter, save)


@torch.library.custom_op("relaxops::shortest_path_bwd", mutates_args=())
def shortest_path_bwd(
    grad: Tensor,
    jac: Tensor,
    pi: Tensor,
    steps: Tensor,
    beta: float,
    n_iter: int,
    n_trace: int,
    t_conorm: str,
    hamacher_p: float,
    loop: str,
    max_iter: int,
    epsilon: float,
    backend: str,
) -> Tensor:
    return _sp_bwd_impl(
        grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend
    )


@shortest_path_bwd.register_fake
def _(grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend):
    _sp_check_backward(
        "shortest_path_bwd",
        grad,
        jac,
        pi,
        steps,
        beta,
        n_iter,
        n_trace,
        t_conorm,
        hamacher_p,
        loop,
        max_iter,
        epsilon,
        backend,
    )
    return torch.empty_like(grad)


def _sp_setup_context(ctx, inputs, output):
    cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend = inputs
    _, jac, pi, steps = output
    ctx.mark_non_differentiable(jac, pi, steps)  # saved state, not results
    ctx.save_for_backward(jac, pi, steps)
    ctx.args = (beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend)
    ctx.set_materialize_grads(False)


def _sp_backward(ctx, grad_out, grad_jac, grad_pi, grad_steps):
    none = (None,) * 10
    if grad_out is None:
        return (None,) + none
    jac, pi, steps = ctx.saved_tensors
    return (shortest_path_bwd(grad_out.contiguous(), jac, pi, steps, *ctx.args),) + none


shortest_path_fwd.register_autograd(_sp_backward, setup_context=_sp_setup_context)


class ShortestPath(torch.autograd.Function):
    """What ``shortest_path`` calls when a gradient is wanted: the registered forward and backward ops in a plain
    autograd Function, which ``torch.compile`` traces; in eager mode their implementations directly (the same checks
    and kernels, without the dispatcher's overhead). ``apply(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop,
    max_iter, epsilon, backend)`` -> the path."""

    @staticmethod
    def forward(ctx, cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend):
        fwd = shortest_path_fwd if torch.compiler.is_compiling() else _sp_fwd_impl
        out, jac, pi, steps = fwd(
            cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, True, backend
        )
        ctx.save_for_backward(jac, pi, steps)
        ctx.args = (beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend)
        return out

    @staticmethod
    def backward(ctx, grad):
        jac, pi, steps = ctx.saved_tensors
        # the registered op under create_graph too: its output then raises on a double backward
        bwd = shortest_path_bwd if torch.compiler.is_compiling() or torch.is_grad_enabled() else _sp_bwd_impl
        return (bwd(grad.contiguous(), jac, pi, steps, *ctx.args),) + (None,) * 9


# --- edit distance ------------------------------------------------------------------------------------------------
# ``relaxops::edit_distance_fwd(s, t, beta, backend) -> (D, cos)``, backward ``relaxops::edit_distance_bwd(
# grad_distance, grad_D, s, t, D, cos, beta, backend) -> (grad_s, grad_t)`` (math and layouts in
# csrc/algorithms/edit_distance.h): ``s [B, n, K]``, ``t [B, m, K]`` contiguous float32/float64 of one dtype and
# device, n, m >= 0, K >= 1; ``D [B, n + 1, m + 1]`` the relaxed DP matrix (the distance is ``D[:, n, m]``), ``cos
# [B, n, m]`` the cosines (saved for the backward, not differentiable). The backward takes the distance's gradient
# ``[B]`` apart from D's (None when only the distance is used: no dense zero gradient). Saved for backward: s, t,
# D, cos.

_ED_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_ED_FLOATS = (torch.float32, torch.float64)
_ED_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


class _EdCpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers)."""

    @staticmethod
    def edit_distance_forward(s, t, beta, D, cos):
        B, n, K = s.shape
        _ext._C.edit_distance_forward(
            _ext.dtype_code(s), B, n, t.shape[1], K, beta, _ext.ptr(s), _ext.ptr(t), _ext.ptr(D), _ext.ptr(cos)
        )

    @staticmethod
    def edit_distance_backward(grad_distance, grad_D, s, t, D, cos, beta, grad_s, grad_t):
        B, n, K = s.shape
        _ext._C.edit_distance_backward(
            _ext.dtype_code(s),
            B,
            n,
            t.shape[1],
            K,
            beta,
            _ext.ptr(grad_distance),
            _ext.ptr(grad_D),
            _ext.ptr(s),
            _ext.ptr(t),
            _ext.ptr(D),
            _ext.ptr(cos),
            _ext.ptr(grad_s),
            _ext.ptr(grad_t),
        )


class _EdCudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; the workspace from
    torch's allocator, its size from ``edit_distance_workspace``)."""

    @staticmethod
    def edit_distance_forward(s, t, beta, D, cos):
        B, n, K = s.shape
        m = t.shape[1]
        ws = s.new_empty(max(1, _ext._cuda.edit_distance_workspace(B, n, m, K, False)))
        _ext._cuda.edit_distance_forward(
            _ext.dtype_code(s),
            B,
            n,
            m,
            K,
            beta,
            _ext.ptr(s),
            _ext.ptr(t),
            _ext.ptr(D),
            _ext.ptr(cos),
            _ext.ptr(ws),
            _ext.stream(s.device),
        )

    @staticmethod
    def edit_distance_backward(grad_distance, grad_D, s, t, D, cos, beta, grad_s, grad_t):
        B, n, K = s.shape
        m = t.shape[1]
        ws = s.new_empty(max(1, _ext._cuda.edit_distance_workspace(B, n, m, K, True)))
        _ext._cuda.edit_distance_backward(
            _ext.dtype_code(s),
            B,
            n,
            m,
            K,
            beta,
            _ext.ptr(grad_distance),
            _ext.ptr(grad_D),
            _ext.ptr(s),
            _ext.ptr(t),
            _ext.ptr(D),
            _ext.ptr(cos),
            _ext.ptr(grad_s),
            _ext.ptr(grad_t),
            _ext.ptr(ws),
            _ext.stream(s.device),
        )


_ed_kernels = _backend.family_launcher(_EdCpuKernels, _EdCudaKernels, f"{__package__}.triton")


def _check_edit_distance(op, s, t, beta, backend):
    """The arguments of both ops; returns (B, n, m, K). Symbolic sizes and beta are compared, never converted."""
    if backend not in _ED_KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_ED_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "s", s, dtypes=_ED_FLOATS, shape=(None, None, None))
    B, n, K = s.shape
    if K < 1:
        raise ValueError(f"relaxops::{op}: s must have shape [B, n, K] with K >= 1, got {list(s.shape)}")
    _checks.kernel_tensor(op, "t", t, dtypes=(s.dtype,), device=s.device, shape=(B, None, K))
    if isinstance(beta, bool) or not isinstance(beta, _ED_NUMBERS) or not 0 < beta < torch.inf:
        raise ValueError(f"relaxops::{op}: beta must be a finite number > 0, got {beta!r}")
    return B, n, t.shape[1], K


def _ed_outputs(s, t):
    B, n, _ = s.shape
    m = t.shape[1]
    return s.new_empty(B, n + 1, m + 1), s.new_empty(B, n, m)


def _ed_fwd_impl(s, t, beta, backend):
    _check_edit_distance("edit_distance_fwd", s, t, beta, backend)
    kernels = _ed_kernels("edit_distance_fwd", backend, s.device)
    D, cos = _ed_outputs(s, t)
    if s.shape[0]:
        kernels.edit_distance_forward(s, t, float(beta), D, cos)
    return D, cos


@torch.library.custom_op("relaxops::edit_distance_fwd", mutates_args=())
def edit_distance_fwd(s: Tensor, t: Tensor, beta: float, backend: str) -> tuple[Tensor, Tensor]:
    return _ed_fwd_impl(s, t, beta, backend)


@edit_distance_fwd.register_fake
def _(s, t, beta, backend):
    _check_edit_distance("edit_distance_fwd", s, t, beta, backend)
    return _ed_outputs(s, t)


def _check_edit_distance_bwd(grad_distance, grad_D, s, t, D, cos, beta, backend):
    op = "edit_distance_bwd"
    B, n, m, _ = _check_edit_distance(op, s, t, beta, backend)
    for name, x, shape in (
        ("grad_distance", grad_distance, (B,)),
        ("grad_D", grad_D, (B, n + 1, m + 1)),
        ("D", D, (B, n + 1, m + 1)),
        ("cos", cos, (B, n, m)),
    ):
        if x is not None or name != "grad_D":
            _checks.kernel_tensor(op, name, x, dtypes=(s.dtype,), device=s.device, shape=shape)


def _ed_bwd_impl(grad_distance, grad_D, s, t, D, cos, beta, backend):
    _check_edit_distance_bwd(grad_distance, grad_D, s, t, D, cos, beta, backend)
    kernels = _ed_kernels("edit_distance_bwd", backend, s.device)
    grad_s, grad_t = torch.empty_like(s), torch.empty_like(t)
    if s.shape[0]:
        kernels.edit_distance_backward(grad_distance, grad_D, s, t, D, cos, float(beta), grad_s, grad_t)
    return grad_s, grad_t


@torch.library.custom_op("relaxops::edit_distance_bwd", mutates_args=())
def edit_distance_bwd(
    grad_distance: Tensor,
    grad_D: Tensor | None,
    s: Tensor,
    t: Tensor,
    D: Tensor,
    cos: Tensor,
    beta: float,
    backend: str,
) -> tuple[Tensor, Tensor]:
    return _ed_bwd_impl(grad_distance, grad_D, s, t, D, cos, beta, backend)


@edit_distance_bwd.register_fake
def _(grad_distance, grad_D, s, t, D, cos, beta, backend):
    _check_edit_distance_bwd(grad_distance, grad_D, s, t, D, cos, beta, backend)
    return torch.empty_like(s), torch.empty_like(t)


def _ed_setup(ctx, inputs, output):
    s, t, beta, backend = inputs
    D, cos = output
    ctx.save_for_backward(s, t, D, cos)
    ctx.args = (beta, backend)
    ctx.mark_non_differentiable(cos)
    ctx.set_materialize_grads(False)


def _ed_backward(ctx, grad_D, grad_cos):
    if grad_D is None:
        return None, None, None, None
    s, t, D, cos = ctx.saved_tensors
    grad_s, grad_t = edit_distance_bwd(grad_D.new_zeros(D.shape[0]), grad_D.contiguous(), s, t, D, cos, *ctx.args)
    return grad_s, grad_t, None, None


edit_distance_fwd.register_autograd(_ed_backward, setup_context=_ed_setup)


class EditDistance(torch.autograd.Function):
    """What ``edit_distance`` calls: the registered ops in a plain autograd Function, which ``torch.compile``
    traces; in eager mode it runs their implementations directly (the same checks and kernels) and saves the
    dispatcher's ~50 us per direction (fastsort.ops.SoftSortRank). ``apply(s, t, beta, backend)`` -> (distance,
    D): the distance is an output of its own, so that using it alone gives no dense zero gradient of D."""

    @staticmethod
    def forward(ctx, s, t, beta, backend):
        fwd = edit_distance_fwd if torch.compiler.is_compiling() else _ed_fwd_impl
        D, cos = fwd(s, t, beta, backend)
        ctx.save_for_backward(s, t, D, cos)
        ctx.args = (beta, backend)
        ctx.set_materialize_grads(False)
        return D[:, -1, -1].clone(), D

    @staticmethod
    def backward(ctx, grad_distance, grad_D):
        s, t, D, cos = ctx.saved_tensors
        if grad_distance is None and grad_D is None:
            return None, None, None, None
        grad_distance = D.new_zeros(D.shape[0]) if grad_distance is None else grad_distance.contiguous()
        grad_D = None if grad_D is None else grad_D.contiguous()
        # the registered op under create_graph too: its output then raises on a double backward
        bwd = edit_distance_bwd if torch.compiler.is_compiling() or torch.is_grad_enabled() else _ed_bwd_impl
        grad_s, grad_t = bwd(grad_distance, grad_D, s, t, D, cos, *ctx.args)
        return grad_s, grad_t, None, None


# --- bubble sort --------------------------------------------------------------------------------------------------
# ``relaxops::bubble_sort_fwd(x, beta, hard, max_iter, epsilon, backend) -> (sorted, swaps, any_swap, states,
# trips)``, backward ``relaxops::bubble_sort_bwd(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard,
# backend) -> grad_x`` (math and layouts in csrc/algorithms/bubble_sort.h): ``x [B, n]`` contiguous float32/float64,
# n >= 1; ``sorted [B, n]``, ``swaps, any_swap [B]`` the While's mixture; ``states [B, min(max_iter, n), n + 3]``
# the state after each pass (the last one repeated after the batch's trip count) and ``trips`` int32 [1] that
# count, both saved for the backward and not differentiable.


class _BubbleCpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers)."""

    @staticmethod
    def bubble_sort_forward(x, beta, hard, epsilon, sorted_, swaps, any_swap, states, trips):
        B, n = x.shape
        _ext._C.bubble_sort_forward(
            _ext.dtype_code(x),
            B,
            n,
            beta,
            int(hard),
            states.shape[1],
            epsilon,
            _ext.ptr(x),
            _ext.ptr(sorted_),
            _ext.ptr(swaps),
            _ext.ptr(any_swap),
            _ext.ptr(states),
            _ext.ptr(trips),
        )

    @staticmethod
    def bubble_sort_backward(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, grad_x):
        B, n = x.shape
        _ext._C.bubble_sort_backward(
            _ext.dtype_code(x),
            B,
            n,
            beta,
            int(hard),
            states.shape[1],
            0.0,
            _ext.ptr(grad_sorted),
            _ext.ptr(grad_swaps),
            _ext.ptr(grad_any),
            _ext.ptr(x),
            _ext.ptr(states),
            _ext.ptr(trips),
            _ext.ptr(grad_x),
        )


class _BubbleCudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; workspaces from torch's
    allocator, sizes from ``bubble_sort_workspace``)."""

    @staticmethod
    def bubble_sort_forward(x, beta, hard, epsilon, sorted_, swaps, any_swap, states, trips):
        B, n = x.shape
        passes = states.shape[1]
        ws = x.new_empty(max(1, _ext._cuda.bubble_sort_workspace(B, n, passes, False)))
        row_trips = torch.empty(B, dtype=torch.int32, device=x.device)
        _ext._cuda.bubble_sort_forward(
            _ext.dtype_code(x),
            B,
            n,
            beta,
            int(hard),
            passes,
            epsilon,
            _ext.ptr(x),
            _ext.ptr(sorted_),
            _ext.ptr(swaps),
            _ext.ptr(any_swap),
            _ext.ptr(states),
            _ext.ptr(trips),
            _ext.ptr(row_trips),
            _ext.ptr(ws),
            _ext.stream(x.device),
        )

    @staticmethod
    def bubble_sort_backward(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, grad_x):
        B, n = x.shape
        passes = states.shape[1]
        ws = x.new_empty(max(1, _ext._cuda.bubble_sort_workspace(B, n, passes, True)))
        _ext._cuda.bubble_sort_backward(
            _ext.dtype_code(x),
            B,
            n,
            beta,
            int(hard),
            passes,
            0.0,
            _ext.ptr(grad_sorted),
            _ext.ptr(grad_swaps),
            _ext.ptr(grad_any),
            _ext.ptr(x),
            _ext.ptr(states),
            _ext.ptr(trips),
            _ext.ptr(grad_x),
            _ext.ptr(ws),
            _ext.stream(x.device),
        )


_bubble_kernels = _backend.family_launcher(_BubbleCpuKernels, _BubbleCudaKernels, f"{__package__}.triton")


_BUBBLE_INTS = (int, torch.SymInt)


def _check_bubble(op, x, beta, hard, backend):
    """The arguments both ops take; returns (B, n)."""
    if backend not in _ED_KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_ED_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "x", x, dtypes=_ED_FLOATS, shape=(None, None))
    if x.shape[1] < 1:
        raise ValueError(f"relaxops::{op}: x must have shape [B, n] with n >= 1, got {list(x.shape)}")
    if isinstance(beta, bool) or not isinstance(beta, _ED_NUMBERS) or not 0 < beta < torch.inf:
        raise ValueError(f"relaxops::{op}: beta must be a finite number > 0, got {beta!r}")
    if not isinstance(hard, bool):
        raise TypeError(f"relaxops::{op}: hard must be a bool, got {type(hard).__name__}")
    return x.shape


def _bubble_passes(x, max_iter):
    return torch.sym_min(max_iter, x.shape[1])


def _bubble_outputs(x, max_iter):
    B, n = x.shape
    return (
        x.new_empty(B, n),
        x.new_empty(B),
        x.new_empty(B),
        x.new_empty(B, _bubble_passes(x, max_iter), n + 3),
        x.new_zeros(1, dtype=torch.int32),
    )


def _check_bubble_fwd(x, beta, hard, max_iter, epsilon, backend):
    op = "bubble_sort_fwd"
    _check_bubble(op, x, beta, hard, backend)
    if isinstance(max_iter, bool) or not isinstance(max_iter, _BUBBLE_INTS) or not 0 <= max_iter <= 2**31 - 1:
        raise ValueError(f"relaxops::{op}: max_iter must be an integer in [0, 2^31 - 1], got {max_iter!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, _ED_NUMBERS) or not 0 <= epsilon < torch.inf:
        raise ValueError(f"relaxops::{op}: epsilon must be a finite number >= 0, got {epsilon!r}")


def _bubble_fwd_impl(x, beta, hard, max_iter, epsilon, backend):
    _check_bubble_fwd(x, beta, hard, max_iter, epsilon, backend)
    kernels = _bubble_kernels("bubble_sort_fwd", backend, x.device)
    out = _bubble_outputs(x, max_iter)
    if x.shape[0]:
        kernels.bubble_sort_forward(x, float(beta), hard, float(epsilon), *out)
    return out


@torch.library.custom_op("relaxops::bubble_sort_fwd", mutates_args=())
def bubble_sort_fwd(
    x: Tensor, beta: float, hard: bool, max_iter: int, epsilon: float, backend: str
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _bubble_fwd_impl(x, beta, hard, max_iter, epsilon, backend)


@bubble_sort_fwd.register_fake
def _(x, beta, hard, max_iter, epsilon, backend):
    _check_bubble_fwd(x, beta, hard, max_iter, epsilon, backend)
    return _bubble_outputs(x, max_iter)


def _check_bubble_bwd(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend, values):
    """Also the value of ``trips`` if ``values`` (not on fake tensors; the C++ kernel checks it itself)."""
    op = "bubble_sort_bwd"
    B, n = _check_bubble(op, x, beta, hard, backend)
    for name, t, shape in (
        ("grad_sorted", grad_sorted, (B, n)),
        ("grad_swaps", grad_swaps, (B,)),
        ("grad_any", grad_any, (B,)),
    ):
        _checks.kernel_tensor(op, name, t, dtypes=(x.dtype,), device=x.device, shape=shape)
    _checks.kernel_tensor(op, "states", states, dtypes=(x.dtype,), device=x.device, shape=(B, None, n + 3))
    if states.shape[1] > n:
        raise ValueError(f"relaxops::{op}: states must have at most n = {n} passes, got {list(states.shape)}")
    _checks.kernel_tensor(op, "trips", trips, dtypes=(torch.int32,), device=x.device, shape=(1,))
    if values and backend != "cpu":
        _checks.index_tensor(
            op, "trips", trips, states.shape[1] + 1, dtypes=(torch.int32,), device=x.device, shape=(1,)
        )


def _bubble_bwd_impl(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend):
    _check_bubble_bwd(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend, values=True)
    kernels = _bubble_kernels("bubble_sort_bwd", backend, x.device)
    grad_x = torch.empty_like(x)
    if x.shape[0]:
        kernels.bubble_sort_backward(grad_sorted, grad_swaps, grad_any, x, states, trips, float(beta), hard, grad_x)
    return grad_x


@torch.library.custom_op("relaxops::bubble_sort_bwd", mutates_args=())
def bubble_sort_bwd(
    grad_sorted: Tensor,
    grad_swaps: Tensor,
    grad_any: Tensor,
    x: Tensor,
    states: Tensor,
    trips: Tensor,
    beta: float,
    hard: bool,
    backend: str,
) -> Tensor:
    return _bubble_bwd_impl(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend)


@bubble_sort_bwd.register_fake
def _(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend):
    _check_bubble_bwd(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, backend, values=False)
    return torch.empty_like(x)


def _bubble_setup(ctx, inputs, output):
    x, beta, hard, max_iter, epsilon, backend = inputs
    _, _, _, states, trips = output
    ctx.save_for_backward(x, states, trips)
    ctx.args = (beta, hard, backend)
    ctx.mark_non_differentiable(states, trips)
    ctx.set_materialize_grads(False)


def _bubble_backward(ctx, grad_sorted, grad_swaps, grad_any, grad_states, grad_trips):
    if grad_sorted is None and grad_swaps is None and grad_any is None:
        return None, None, None, None, None, None
    x, states, trips = ctx.saved_tensors
    B = x.shape[0]
    grad_sorted = torch.zeros_like(x) if grad_sorted is None else grad_sorted.contiguous()
    grad_swaps = x.new_zeros(B) if grad_swaps is None else grad_swaps.contiguous()
    grad_any = x.new_zeros(B) if grad_any is None else grad_any.contiguous()
    grad_x = bubble_sort_bwd(grad_sorted, grad_swaps, grad_any, x, states, trips, *ctx.args)
    return grad_x, None, None, None, None, None


bubble_sort_fwd.register_autograd(_bubble_backward, setup_context=_bubble_setup)


class BubbleSort(torch.autograd.Function):
    """What ``bubble_sort`` calls (as ``EditDistance``): ``apply(x, beta, hard, max_iter, epsilon, backend)`` ->
    ``(sorted, swaps, any_swap)``."""

    @staticmethod
    def forward(ctx, x, beta, hard, max_iter, epsilon, backend):
        fwd = bubble_sort_fwd if torch.compiler.is_compiling() else _bubble_fwd_impl
        sorted_, swaps, any_swap, states, trips = fwd(x, beta, hard, max_iter, epsilon, backend)
        ctx.save_for_backward(x, states, trips)
        ctx.args = (beta, hard, backend)
        return sorted_, swaps, any_swap

    @staticmethod
    def backward(ctx, grad_sorted, grad_swaps, grad_any):
        x, states, trips = ctx.saved_tensors
        bwd = bubble_sort_bwd if torch.compiler.is_compiling() or torch.is_grad_enabled() else _bubble_bwd_impl
        grad_x = bwd(
            grad_sorted.contiguous(), grad_swaps.contiguous(), grad_any.contiguous(), x, states, trips, *ctx.args
        )
        return grad_x, None, None, None, None, None
