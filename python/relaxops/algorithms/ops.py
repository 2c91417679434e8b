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
    _checks.memory_fits(n * t.element_size(), t.device, f"the shortest-path {what} work buffers",
                        "use a smaller batch or grid, or fewer traceback steps (n_trace, or max_iter for loop='while')")


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
        _ext._C.shortest_path_forward(_ext.dtype_code(cost), ints, floats, _ext.ptr(cost), _ext.ptr(out),
                                      _ext.ptr(jac) if jac.numel() else 0, _ext.ptr(pi), _ext.ptr(steps))

    @staticmethod
    def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
        ints, floats = args
        _sp_workspace(_ext._C, grad, args, int(steps[0]), True)
        _ext._C.shortest_path_backward(_ext.dtype_code(grad), ints, floats, _ext.ptr(steps), _ext.ptr(grad),
                                       _ext.ptr(jac) if jac.numel() else 0, _ext.ptr(pi), _ext.ptr(grad_cost))


class _SpCudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; work buffers from
    torch's allocator). The backward reads the step count on the host to size its work buffer."""

    @staticmethod
    def shortest_path_forward(cost, args, out, jac, pi, steps):
        ints, floats = args
        workspace = cost.new_empty(_sp_workspace(_ext._cuda, cost, args, 0, False))
        counts = torch.empty(cost.shape[0], dtype=torch.int32, device=cost.device)
        _ext._cuda.shortest_path_forward(_ext.dtype_code(cost), ints, floats, _ext.ptr(cost), _ext.ptr(out),
                                         _ext.ptr(jac) if jac.numel() else 0, _ext.ptr(pi), _ext.ptr(steps),
                                         _ext.ptr(counts), _ext.ptr(workspace) if workspace.numel() else 0,
                                         _ext.stream(cost.device))

    @staticmethod
    def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
        ints, floats = args
        K = int(steps.item())
        workspace = grad.new_empty(_sp_workspace(_ext._cuda, grad, args, K, True))
        _ext._cuda.shortest_path_backward(_ext.dtype_code(grad), ints, floats, K, _ext.ptr(grad),
                                          _ext.ptr(jac) if jac.numel() else 0, _ext.ptr(pi), _ext.ptr(grad_cost),
                                          _ext.ptr(workspace), _ext.stream(grad.device))


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
    if t_conorm == "hamacher" and (isinstance(hamacher_p, bool) or not isinstance(hamacher_p, _SP_NUMBERS)
                                   or not 0 < hamacher_p < _SP_INF):
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
        raise ValueError(f"relaxops::{op}: cost must have shape [B, H, W] with H, W >= 1 and (H + 2) (W + 2) < 2^31, "
                         f"got {list(cost.shape)}")
    if not isinstance(save, bool):
        raise TypeError(f"relaxops::{op}: save must be a bool, got {type(save).__name__}")


def _sp_outputs(cost, n_iter, save):
    B, H, W = cost.shape
    jac = cost.new_empty((B, n_iter - 1 if save else 0, 8, H, W + 2))
    return (torch.empty_like(cost), jac, cost.new_empty((B, 8, H, W + 2)),
            torch.empty(1, dtype=torch.int32, device=cost.device))


def _sp_check_backward(op, grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon,
                       backend):
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


def _sp_fwd_impl(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend):
    op = "shortest_path_fwd"
    _sp_check_forward(op, cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend)
    kernels = _backend.checked_kernels(op, backend, cost.device, _SpCpuKernels, _SpCudaKernels, __package__,
                                       "the shortest-path ops")
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
    _sp_check_backward(op, grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon,
                       backend)
    kernels = _backend.checked_kernels(op, backend, grad.device, _SpCpuKernels, _SpCudaKernels, __package__,
                                       "the shortest-path ops")
    grad_cost = torch.empty_like(grad)
    B, H, W = grad.shape
    if B:
        args = sp_kernel_args(B, H, W, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon)
        kernels.shortest_path_backward(grad, jac, pi, steps, args, grad_cost)
    return grad_cost


@torch.library.custom_op("relaxops::shortest_path_fwd", mutates_args=())
def shortest_path_fwd(cost: Tensor, beta: float, n_iter: int, n_trace: int, t_conorm: str, hamacher_p: float,
                      loop: str, max_iter: int, epsilon: float, save: bool,
                      backend: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _sp_fwd_impl(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend)


@shortest_path_fwd.register_fake
def _(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, save, backend):
    _sp_check_forward("shortest_path_fwd", cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon,
                      save, backend)
    return _sp_outputs(cost, n_iter, save)


@torch.library.custom_op("relaxops::shortest_path_bwd", mutates_args=())
def shortest_path_bwd(grad: Tensor, jac: Tensor, pi: Tensor, steps: Tensor, beta: float, n_iter: int, n_trace: int,
                      t_conorm: str, hamacher_p: float, loop: str, max_iter: int, epsilon: float,
                      backend: str) -> Tensor:
    return _sp_bwd_impl(grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon,
                        backend)


@shortest_path_bwd.register_fake
def _(grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, backend):
    _sp_check_backward("shortest_path_bwd", grad, jac, pi, steps, beta, n_iter, n_trace, t_conorm, hamacher_p, loop,
                       max_iter, epsilon, backend)
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
        out, jac, pi, steps = fwd(cost, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon, True,
                                  backend)
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



# --- bubble sort --------------------------------------------------------------------------------------------------

