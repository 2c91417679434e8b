"""Autograd ops of NeuralSort and SoftSort, registered with ``torch.library``.

Each is a forward and a backward kernel (see ``csrc/baselines/baselines.h``):

* ``relaxops::neuralsort_fwd(x, tau, k, backend) -> (X, perm)``, backward ``relaxops::neuralsort_bwd``;
* ``relaxops::softsort_fwd(x, tau, k, pow, backend) -> (X, perm)``, backward ``relaxops::softsort_bwd``.

``x [B, n]`` contiguous float32/float64; ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at
ascending position ``n - k + j``; ``perm [B, n]`` int64, the stable ascending sort permutation (not
differentiable). Saved for backward: ``x``, ``X`` (the output itself) and ``perm``: O(n k) per row, no
``n x n`` buffer. ``backend`` is a concrete backend (``cpu``, ``cuda``, ``triton``).

The ops are public (``torch.ops.relaxops.*``): each checks its arguments before any kernel runs (dtypes,
shapes, device, contiguity, ``1 <= k <= n``, ``tau``/``pow`` finite and > 0, the entries of ``perm`` in
``[0, n)``); the backward ops expect the ``X`` and ``perm`` their forward returned (other values of the right
form give meaningless gradients, never out-of-bounds memory access).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks, _ext

_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_FLOATS = (torch.float32, torch.float64)


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers; the kernels sort the rows)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm):
        B, n = x.shape
        _ext._C.neuralsort_forward(_ext.dtype_code(x), B, n, X.shape[2], tau, _ext.ptr(x), _ext.ptr(X), _ext.ptr(perm))

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, grad_x):
        B, n = x.shape
        _ext._C.neuralsort_backward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            _ext.ptr(grad_X),
            _ext.ptr(X),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(grad_x),
        )

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm):
        B, n = x.shape
        _ext._C.softsort_forward(
            _ext.dtype_code(x), B, n, X.shape[2], tau, pow, _ext.ptr(x), _ext.ptr(X), _ext.ptr(perm)
        )

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, grad_x):
        B, n = x.shape
        _ext._C.softsort_backward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            pow,
            _ext.ptr(grad_X),
            _ext.ptr(X),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(grad_x),
        )


class _CudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream). The rows are
    sorted here with ``torch.sort(stable=True)``; workspaces come from torch's allocator (sizes in
    baselines.h)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm):
        B, n = x.shape
        perm.copy_(torch.sort(x, dim=-1, stable=True).indices)
        workspace = torch.empty(B * (n + 1), dtype=x.dtype, device=x.device)
        _ext._cuda.neuralsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(X),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, grad_x):
        B, n = x.shape
        k = X.shape[2]
        workspace = torch.empty(B * (n + k), dtype=x.dtype, device=x.device)
        _ext._cuda.neuralsort_backward(
            _ext.dtype_code(x),
            B,
            n,
            k,
            tau,
            _ext.ptr(grad_X),
            _ext.ptr(X),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(grad_x),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm):
        B, n = x.shape
        perm.copy_(torch.sort(x, dim=-1, stable=True).indices)
        _ext._cuda.softsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            pow,
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(X),
            _ext.stream(x.device),
        )

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, grad_x):
        B, n = x.shape
        k = X.shape[2]
        workspace = torch.empty(2 * B * k, dtype=x.dtype, device=x.device)
        _ext._cuda.softsort_backward(
            _ext.dtype_code(x),
            B,
            n,
            k,
            tau,
            pow,
            _ext.ptr(grad_X),
            _ext.ptr(X),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(grad_x),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels, f"{__package__}.triton")


# The fake kernels may see symbolic scalars (torch.compile with dynamic shapes): compared, never converted.
_INTS = (int, torch.SymInt)
_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


def _positive(op: str, name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, _NUMBERS) or not 0 < v < math.inf:
        raise ValueError(f"relaxops::{op}: {name} must be a finite number > 0, got {v!r}")


def _check_forward(op: str, x, tau, k, pow, backend) -> None:
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "x", x, dtypes=_FLOATS, shape=(None, None))
    if x.shape[1] < 1:
        raise ValueError(f"relaxops::{op}: x must have shape [B, n] with n >= 1, got {list(x.shape)}")
    if isinstance(k, bool) or not isinstance(k, _INTS) or not 1 <= k <= x.shape[1]:
        raise ValueError(f"relaxops::{op}: k must be an integer in [1, n = {x.shape[1]}], got {k!r}")
    _positive(op, "tau", tau)
    _positive(op, "pow", pow)


def _check_backward(op: str, grad_X, X, x, perm, tau, pow, backend, values: bool) -> None:
    """Also the values of ``perm`` if ``values`` (not on fake tensors)."""
    _check_forward(op, x, tau, 1, pow, backend)
    B, n = x.shape
    _checks.kernel_tensor(op, "X", X, dtypes=(x.dtype,), device=x.device, shape=(B, n, None))
    if not 1 <= X.shape[2] <= n:
        raise ValueError(f"relaxops::{op}: X must have shape [B, n, k] with 1 <= k <= n = {n}, got {list(X.shape)}")
    _checks.kernel_tensor(op, "grad_X", grad_X, dtypes=(x.dtype,), device=x.device, shape=tuple(X.shape))
    if values:
        _checks.index_tensor(op, "perm", perm, n, dtypes=(torch.int64,), device=x.device, shape=(B, n))
    else:
        _checks.kernel_tensor(op, "perm", perm, dtypes=(torch.int64,), device=x.device, shape=(B, n))


def _outputs(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape[0], x.shape[1], k), x.new_empty(x.shape, dtype=torch.int64)


# --- NeuralSort -----------------------------------------------------------------------------------------


@torch.library.custom_op("relaxops::neuralsort_fwd", mutates_args=())
def neuralsort_fwd(x: Tensor, tau: float, k: int, backend: str) -> tuple[Tensor, Tensor]:
    _check_forward("neuralsort_fwd", x, tau, k, 1.0, backend)
    kernels = _kernels("neuralsort_fwd", backend, x.device)
    X, perm = _outputs(x, k)
    kernels.neuralsort_forward(x, tau, X, perm)
    return X, perm


@neuralsort_fwd.register_fake
def _(x, tau, k, backend):
    _check_forward("neuralsort_fwd", x, tau, k, 1.0, backend)
    return _outputs(x, k)


@torch.library.custom_op("relaxops::neuralsort_bwd", mutates_args=())
def neuralsort_bwd(grad_X: Tensor, X: Tensor, x: Tensor, perm: Tensor, tau: float, backend: str) -> Tensor:
    _check_backward("neuralsort_bwd", grad_X, X, x, perm, tau, 1.0, backend, values=True)
    kernels = _kernels("neuralsort_bwd", backend, x.device)
    grad_x = torch.empty_like(x)
    kernels.neuralsort_backward(grad_X, X, x, perm, tau, grad_x)
    return grad_x


@neuralsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, backend):
    _check_backward("neuralsort_bwd", grad_X, X, x, perm, tau, 1.0, backend, values=False)
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
    _check_forward("softsort_fwd", x, tau, k, pow, backend)
    kernels = _kernels("softsort_fwd", backend, x.device)
    X, perm = _outputs(x, k)
    kernels.softsort_forward(x, tau, pow, X, perm)
    return X, perm


@softsort_fwd.register_fake
def _(x, tau, k, pow, backend):
    _check_forward("softsort_fwd", x, tau, k, pow, backend)
    return _outputs(x, k)


@torch.library.custom_op("relaxops::softsort_bwd", mutates_args=())
def softsort_bwd(grad_X: Tensor, X: Tensor, x: Tensor, perm: Tensor, tau: float, pow: float, backend: str) -> Tensor:
    _check_backward("softsort_bwd", grad_X, X, x, perm, tau, pow, backend, values=True)
    kernels = _kernels("softsort_bwd", backend, x.device)
    grad_x = torch.empty_like(x)
    kernels.softsort_backward(grad_X, X, x, perm, tau, pow, grad_x)
    return grad_x


@softsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, pow, backend):
    _check_backward("softsort_bwd", grad_X, X, x, perm, tau, pow, backend, values=False)
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
