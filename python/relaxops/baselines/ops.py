"""Autograd ops of NeuralSort and SoftSort, registered with ``torch.library``.

Each is a forward and a backward kernel (see ``csrc/baselines/baselines.h``):

* ``relaxops::neuralsort_fwd(x, tau, k, backend) -> (X, perm)``, backward ``relaxops::neuralsort_bwd``;
* ``relaxops::softsort_fwd(x, tau, k, pow, backend) -> (X, perm)``, backward ``relaxops::softsort_bwd``.

``x [B, n]`` contiguous float32/float64; ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at
ascending position ``n - k + j``; ``perm [B, n]`` int64, the stable ascending sort permutation (not
differentiable). Saved for backward: ``x``, ``X`` (the output itself) and ``perm``: O(n k) per row, no
``n x n`` buffer. ``backend`` is a concrete backend (``cpu``, ``cuda``, ``triton``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _ext


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers; the kernels sort the rows)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm):
        B, n = x.shape
        _ext._C.neuralsort_forward(_ext.dtype_code(x), B, n, X.shape[2], tau, _ext.ptr(x), _ext.ptr(X),
                                   _ext.ptr(perm))

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, grad_x):
        B, n = x.shape
        _ext._C.neuralsort_backward(_ext.dtype_code(x), B, n, X.shape[2], tau, _ext.ptr(grad_X), _ext.ptr(X),
                                    _ext.ptr(x), _ext.ptr(perm), _ext.ptr(grad_x))

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm):
        B, n = x.shape
        _ext._C.softsort_forward(_ext.dtype_code(x), B, n, X.shape[2], tau, pow, _ext.ptr(x), _ext.ptr(X),
                                 _ext.ptr(perm))

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, grad_x):
        B, n = x.shape
        _ext._C.softsort_backward(_ext.dtype_code(x), B, n, X.shape[2], tau, pow, _ext.ptr(grad_X), _ext.ptr(X),
                                  _ext.ptr(x), _ext.ptr(perm), _ext.ptr(grad_x))


class _CudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream). The rows are
    sorted here with ``torch.sort(stable=True)``; workspaces come from torch's allocator (sizes in
    baselines.h)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm):
        B, n = x.shape
        perm.copy_(torch.sort(x, dim=-1, stable=True).indices)
        workspace = torch.empty(B * n, dtype=x.dtype, device=x.device)
        _ext._cuda.neuralsort_forward(_ext.dtype_code(x), B, n, X.shape[2], tau, _ext.ptr(x), _ext.ptr(perm),
                                      _ext.ptr(X), _ext.ptr(workspace), _ext.stream(x.device))

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, grad_x):
        B, n = x.shape
        k = X.shape[2]
        workspace = torch.empty(B * (n + k), dtype=x.dtype, device=x.device)
        _ext._cuda.neuralsort_backward(_ext.dtype_code(x), B, n, k, tau, _ext.ptr(grad_X), _ext.ptr(X),
                                       _ext.ptr(x), _ext.ptr(perm), _ext.ptr(grad_x), _ext.ptr(workspace),
                                       _ext.stream(x.device))

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm):
        B, n = x.shape
        perm.copy_(torch.sort(x, dim=-1, stable=True).indices)
        _ext._cuda.softsort_forward(_ext.dtype_code(x), B, n, X.shape[2], tau, pow, _ext.ptr(x), _ext.ptr(perm),
                                    _ext.ptr(X), _ext.stream(x.device))

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, grad_x):
        B, n = x.shape
        k = X.shape[2]
        workspace = torch.empty(2 * B * k, dtype=x.dtype, device=x.device)
        _ext._cuda.softsort_backward(_ext.dtype_code(x), B, n, k, tau, pow, _ext.ptr(grad_X), _ext.ptr(X),
                                     _ext.ptr(x), _ext.ptr(perm), _ext.ptr(grad_x), _ext.ptr(workspace),
                                     _ext.stream(x.device))


def _kernels(backend: str):
    return _backend.kernels(backend, _CpuKernels, _CudaKernels, __package__, "NeuralSort/SoftSort ops")


def _outputs(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape[0], x.shape[1], k), x.new_empty(x.shape, dtype=torch.int64)


# --- NeuralSort -----------------------------------------------------------------------------------------


@torch.library.custom_op("relaxops::neuralsort_fwd", mutates_args=())
def neuralsort_fwd(x: Tensor, tau: float, k: int, backend: str) -> tuple[Tensor, Tensor]:
    X, perm = _outputs(x, k)
    _kernels(backend).neuralsort_forward(x, tau, X, perm)
    return X, perm


@neuralsort_fwd.register_fake
def _(x, tau, k, backend):
    return _outputs(x, k)


@torch.library.custom_op("relaxops::neuralsort_bwd", mutates_args=())
def neuralsort_bwd(grad_X: Tensor, X: Tensor, x: Tensor, perm: Tensor, tau: float, backend: str) -> Tensor:
    grad_x = torch.empty_like(x)
    _kernels(backend).neuralsort_backward(grad_X, X, x, perm, tau, grad_x)
    return grad_x


@neuralsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, backend):
    return torch.empty_like(x)


def _neuralsort_setup(ctx, inputs, output):
    x, tau, _, backend = inputs
    X, perm = output
    ctx.save_for_backward(x, X, perm)
    ctx.args = (tau, backend)


def _neuralsort_backward(ctx, grad_X, grad_perm):
    x, X, perm = ctx.saved_tensors
    tau, backend = ctx.args
    return neuralsort_bwd(grad_X.contiguous(), X, x, perm, tau, backend), None, None, None


neuralsort_fwd.register_autograd(_neuralsort_backward, setup_context=_neuralsort_setup)


# --- SoftSort -------------------------------------------------------------------------------------------


@torch.library.custom_op("relaxops::softsort_fwd", mutates_args=())
def softsort_fwd(x: Tensor, tau: float, k: int, pow: float, backend: str) -> tuple[Tensor, Tensor]:
    X, perm = _outputs(x, k)
    _kernels(backend).softsort_forward(x, tau, pow, X, perm)
    return X, perm


@softsort_fwd.register_fake
def _(x, tau, k, pow, backend):
    return _outputs(x, k)


@torch.library.custom_op("relaxops::softsort_bwd", mutates_args=())
def softsort_bwd(grad_X: Tensor, X: Tensor, x: Tensor, perm: Tensor, tau: float, pow: float, backend: str) -> Tensor:
    grad_x = torch.empty_like(x)
    _kernels(backend).softsort_backward(grad_X, X, x, perm, tau, pow, grad_x)
    return grad_x


@softsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, pow, backend):
    return torch.empty_like(x)


def _softsort_setup(ctx, inputs, output):
    x, tau, _, pow, backend = inputs
    X, perm = output
    ctx.save_for_backward(x, X, perm)
    ctx.args = (tau, pow, backend)


def _softsort_backward(ctx, grad_X, grad_perm):
    x, X, perm = ctx.saved_tensors
    tau, pow, backend = ctx.args
    return softsort_bwd(grad_X.contiguous(), X, x, perm, tau, pow, backend), None, None, None, None


softsort_fwd.register_autograd(_softsort_backward, setup_context=_softsort_setup)
