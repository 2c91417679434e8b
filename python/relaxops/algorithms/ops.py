"""Registered ops (``relaxops::<op>``) of the fused relaxed algorithms: argument checks, fake kernels for
torch.compile, autograd through separate forward and backward kernels."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _checks, _ext  # noqa: F401

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------
# ``relaxops::edit_distance_fwd(s, t, beta, backend) -> (D, cos)``, backward ``relaxops::edit_distance_bwd(grad_D, s,
# t, D, cos, beta, backend) -> (grad_s, grad_t)`` (math and layouts in csrc/algorithms/edit_distance.h): ``s [B, n,
# K]``, ``t [B, m, K]`` contiguous float32/float64 of one dtype and device, n, m >= 0, K >= 1; ``D [B, n + 1, m +
# 1]`` the relaxed DP matrix (the distance is ``D[:, n, m]``), ``cos [B, n, m]`` the cosines (saved for the
# backward, not differentiable). Saved for backward: s, t, D, cos.

_ED_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_ED_FLOATS = (torch.float32, torch.float64)
_ED_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


class _EdCpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers)."""

    @staticmethod
    def edit_distance_forward(s, t, beta, D, cos):
        B, n, K = s.shape
        _ext._C.edit_distance_forward(_ext.dtype_code(s), B, n, t.shape[1], K, beta, _ext.ptr(s), _ext.ptr(t),
                                      _ext.ptr(D), _ext.ptr(cos))

    @staticmethod
    def edit_distance_backward(grad_D, s, t, D, cos, beta, grad_s, grad_t):
        B, n, K = s.shape
        _ext._C.edit_distance_backward(_ext.dtype_code(s), B, n, t.shape[1], K, beta, _ext.ptr(grad_D), _ext.ptr(s),
                                       _ext.ptr(t), _ext.ptr(D), _ext.ptr(cos), _ext.ptr(grad_s), _ext.ptr(grad_t))


class _EdCudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; the workspace from
    torch's allocator, its size from ``edit_distance_workspace``)."""

    @staticmethod
    def edit_distance_forward(s, t, beta, D, cos):
        B, n, K = s.shape
        m = t.shape[1]
        ws = s.new_empty(max(1, _ext._cuda.edit_distance_workspace(B, n, m, K, False)))
        _ext._cuda.edit_distance_forward(_ext.dtype_code(s), B, n, m, K, beta, _ext.ptr(s), _ext.ptr(t), _ext.ptr(D),
                                         _ext.ptr(cos), _ext.ptr(ws), _ext.stream(s.device))

    @staticmethod
    def edit_distance_backward(grad_D, s, t, D, cos, beta, grad_s, grad_t):
        B, n, K = s.shape
        m = t.shape[1]
        ws = s.new_empty(max(1, _ext._cuda.edit_distance_workspace(B, n, m, K, True)))
        _ext._cuda.edit_distance_backward(_ext.dtype_code(s), B, n, m, K, beta, _ext.ptr(grad_D), _ext.ptr(s),
                                          _ext.ptr(t), _ext.ptr(D), _ext.ptr(cos), _ext.ptr(grad_s), _ext.ptr(grad_t),
                                          _ext.ptr(ws), _ext.stream(s.device))


def _ed_kernels(op: str, backend: str, device: torch.device):
    return _backend.checked_kernels(op, backend, device, _EdCpuKernels, _EdCudaKernels, __package__,
                                    "the edit distance ops")


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


@torch.library.custom_op("relaxops::edit_distance_fwd", mutates_args=())
def edit_distance_fwd(s: Tensor, t: Tensor, beta: float, backend: str) -> tuple[Tensor, Tensor]:
    _check_edit_distance("edit_distance_fwd", s, t, beta, backend)
    kernels = _ed_kernels("edit_distance_fwd", backend, s.device)
    D, cos = _ed_outputs(s, t)
    if s.shape[0]:
        kernels.edit_distance_forward(s, t, float(beta), D, cos)
    return D, cos


@edit_distance_fwd.register_fake
def _(s, t, beta, backend):
    _check_edit_distance("edit_distance_fwd", s, t, beta, backend)
    return _ed_outputs(s, t)


def _check_edit_distance_bwd(grad_D, s, t, D, cos, beta, backend):
    op = "edit_distance_bwd"
    B, n, m, _ = _check_edit_distance(op, s, t, beta, backend)
    for name, x, shape in (("grad_D", grad_D, (B, n + 1, m + 1)), ("D", D, (B, n + 1, m + 1)),
                           ("cos", cos, (B, n, m))):
        _checks.kernel_tensor(op, name, x, dtypes=(s.dtype,), device=s.device, shape=shape)


@torch.library.custom_op("relaxops::edit_distance_bwd", mutates_args=())
def edit_distance_bwd(grad_D: Tensor, s: Tensor, t: Tensor, D: Tensor, cos: Tensor, beta: float,
                      backend: str) -> tuple[Tensor, Tensor]:
    _check_edit_distance_bwd(grad_D, s, t, D, cos, beta, backend)
    kernels = _ed_kernels("edit_distance_bwd", backend, s.device)
    grad_s, grad_t = torch.empty_like(s), torch.empty_like(t)
    if s.shape[0]:
        kernels.edit_distance_backward(grad_D, s, t, D, cos, float(beta), grad_s, grad_t)
    return grad_s, grad_t


@edit_distance_bwd.register_fake
def _(grad_D, s, t, D, cos, beta, backend):
    _check_edit_distance_bwd(grad_D, s, t, D, cos, beta, backend)
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
    grad_s, grad_t = edit_distance_bwd(grad_D.contiguous(), s, t, D, cos, *ctx.args)
    return grad_s, grad_t, None, None


edit_distance_fwd.register_autograd(_ed_backward, setup_context=_ed_setup)




# --- bubble sort --------------------------------------------------------------------------------------------------

