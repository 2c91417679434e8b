"""Autograd ops of NeuralSort and SoftSort, registered with ``torch.library``.

Each is a forward and a backward kernel (see ``csrc/baselines/baselines.h``):

* ``relaxops::neuralsort_fwd(x, tau, k, backend, lengths, ks, left) -> (X, perm)``, backward
  ``relaxops::neuralsort_bwd``;
* ``relaxops::softsort_fwd(x, tau, k, pow, backend, lengths, ks, left) -> (X, perm)``, backward
  ``relaxops::softsort_bwd``.

``x [B, n]`` contiguous float32/float64; ``X [B, n, k]`` with ``X[b, c, j]`` the weight of element ``c`` at the
ascending position of column ``j``; ``perm [B, n]`` int64, the stable ascending sort permutation of each row's
real entries followed by its pads in order (not differentiable). Rows (optional): ``lengths [B]`` int64 in
``[0, n]`` (row ``b`` has ``L_b`` real entries, first; ``None``: all ``n``), ``ks [B]`` int64 in ``[0, k]`` (the
kept columns of a row, ``k_b = min(ks[b], L_b)``; ``None``: ``k``), ``left``: column ``j`` holds position ``j``
(needs ``k = n`` and ``ks = None``; the full matrix) instead of ``L_b - k + j`` (right-aligned, the top-k).
Dropped columns and pad rows of ``X`` are 0, the gradient of a pad is 0, and pads are never read. Saved for
backward: ``x``, ``X`` (the output itself), ``perm``, ``lengths``, ``ks``: O(n k) per row, no ``n x n`` buffer.
``backend`` is a concrete backend (``cpu``, ``cuda``, ``triton``).

The ops are public (``torch.ops.relaxops.*``): each checks its arguments before any kernel runs (dtypes,
shapes, device, contiguity, ``1 <= k <= n``, ``tau``/``pow`` finite and > 0, the entries of ``perm``,
``lengths`` and ``ks`` in range); the backward ops expect the ``X`` and ``perm`` their forward returned (other
values of the right form give meaningless gradients, never out-of-bounds memory access).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks, _ext, _rows

_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_FLOATS = (torch.float32, torch.float64)


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers; the kernels sort the rows)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm, lengths, ks, left):
        B, n = x.shape
        _ext._C.neuralsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            _ext.ptr(x),
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(X),
            _ext.ptr(perm),
        )

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, lengths, ks, left, grad_x):
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
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(grad_x),
        )

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm, lengths, ks, left):
        B, n = x.shape
        _ext._C.softsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            pow,
            _ext.ptr(x),
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(X),
            _ext.ptr(perm),
        )

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, lengths, ks, left, grad_x):
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
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(grad_x),
        )


class _CudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream). The rows are
    sorted here (``_rows.exact_order``: a stable sort of the real entries, pads last); workspaces come from
    torch's allocator (sizes in baselines.h)."""

    @staticmethod
    def neuralsort_forward(x, tau, X, perm, lengths, ks, left):
        B, n = x.shape
        perm.copy_(_rows.exact_order(x, lengths))
        workspace = torch.empty(B * (n + 1), dtype=x.dtype, device=x.device)
        _ext._cuda.neuralsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(X),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )

    @staticmethod
    def neuralsort_backward(grad_X, X, x, perm, tau, lengths, ks, left, grad_x):
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
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(grad_x),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )

    @staticmethod
    def softsort_forward(x, tau, pow, X, perm, lengths, ks, left):
        B, n = x.shape
        perm.copy_(_rows.exact_order(x, lengths))
        _ext._cuda.softsort_forward(
            _ext.dtype_code(x),
            B,
            n,
            X.shape[2],
            tau,
            pow,
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
            _ext.ptr(X),
            _ext.stream(x.device),
        )

    @staticmethod
    def softsort_backward(grad_X, X, x, perm, tau, pow, lengths, ks, left, grad_x):
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
            _ext.ptr(lengths),
            _ext.ptr(ks),
            left,
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


def _check_rows(op: str, x, k, lengths, ks, left, values: bool) -> None:
    """``lengths [B]`` in ``[0, n]``, ``ks [B]`` in ``[0, k]`` (their values if ``values``: not on fake tensors),
    ``left`` only for the full matrix."""
    B, n = x.shape
    for name, t, high in (("lengths", lengths, n + 1), ("ks", ks, k + 1)):
        if t is None:
            continue
        if values:
            _checks.index_tensor(op, name, t, high, dtypes=(torch.int64,), device=x.device, shape=(B,))
        else:
            _checks.kernel_tensor(op, name, t, dtypes=(torch.int64,), device=x.device, shape=(B,))
    if not isinstance(left, bool):
        raise TypeError(f"relaxops::{op}: left must be a bool, got {type(left).__name__}")
    if left and (k != n or ks is not None):
        raise ValueError(f"relaxops::{op}: left=True needs k = n = {n} and ks=None (the full matrix), got k={k}")


def _check_forward(op: str, x, tau, k, pow, backend, lengths, ks, left, values: bool) -> None:
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "x", x, dtypes=_FLOATS, shape=(None, None))
    if x.shape[1] < 1:
        raise ValueError(f"relaxops::{op}: x must have shape [B, n] with n >= 1, got {list(x.shape)}")
    if isinstance(k, bool) or not isinstance(k, _INTS) or not 1 <= k <= x.shape[1]:
        raise ValueError(f"relaxops::{op}: k must be an integer in [1, n = {x.shape[1]}], got {k!r}")
    _positive(op, "tau", tau)
    _positive(op, "pow", pow)
    _check_rows(op, x, k, lengths, ks, left, values)


def _check_backward(op: str, grad_X, X, x, perm, tau, pow, backend, lengths, ks, left, values: bool) -> None:
    """Also the values of ``perm``, ``lengths`` and ``ks`` if ``values`` (not on fake tensors)."""
    _check_forward(op, x, tau, 1, pow, backend, None, None, False, values)
    B, n = x.shape
    _checks.kernel_tensor(op, "X", X, dtypes=(x.dtype,), device=x.device, shape=(B, n, None))
    if not 1 <= X.shape[2] <= n:
        raise ValueError(f"relaxops::{op}: X must have shape [B, n, k] with 1 <= k <= n = {n}, got {list(X.shape)}")
    _checks.kernel_tensor(op, "grad_X", grad_X, dtypes=(x.dtype,), device=x.device, shape=tuple(X.shape))
    if values:
        _checks.index_tensor(op, "perm", perm, n, dtypes=(torch.int64,), device=x.device, shape=(B, n))
    else:
        _checks.kernel_tensor(op, "perm", perm, dtypes=(torch.int64,), device=x.device, shape=(B, n))
    _check_rows(op, x, X.shape[2], lengths, ks, left, values)


def _outputs(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape[0], x.shape[1], k), x.new_empty(x.shape, dtype=torch.int64)


# --- NeuralSort -----------------------------------------------------------------------------------------


@torch.library.custom_op("relaxops::neuralsort_fwd", mutates_args=())
def neuralsort_fwd(
    x: Tensor,
    tau: float,
    k: int,
    backend: str,
    lengths: Tensor | None = None,
    ks: Tensor | None = None,
    left: bool = False,
) -> tuple[Tensor, Tensor]:
    _check_forward("neuralsort_fwd", x, tau, k, 1.0, backend, lengths, ks, left, values=True)
    kernels = _kernels("neuralsort_fwd", backend, x.device)
    X, perm = _outputs(x, k)
    kernels.neuralsort_forward(x, tau, X, perm, lengths, ks, left)
    return X, perm


@neuralsort_fwd.register_fake
def _(x, tau, k, backend, lengths=None, ks=None, left=False):
    _check_forward("neuralsort_fwd", x, tau, k, 1.0, backend, lengths, ks, left, values=False)
    return _outputs(x, k)


@torch.library.custom_op("relaxops::neuralsort_bwd", mutates_args=())
def neuralsort_bwd(
    grad_X: Tensor,
    X: Tensor,
    x: Tensor,
    perm: Tensor,
    tau: float,
    backend: str,
    lengths: Tensor | None = None,
    ks: Tensor | None = None,
    left: bool = False,
) -> Tensor:
    _check_backward("neuralsort_bwd", grad_X, X, x, perm, tau, 1.0, backend, lengths, ks, left, values=True)
    kernels = _kernels("neuralsort_bwd", backend, x.device)
    grad_x = torch.empty_like(x)
    kernels.neuralsort_backward(grad_X, X, x, perm, tau, lengths, ks, left, grad_x)
    return grad_x


@neuralsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, backend, lengths=None, ks=None, left=False):
    _check_backward("neuralsort_bwd", grad_X, X, x, perm, tau, 1.0, backend, lengths, ks, left, values=False)
    return torch.empty_like(x)


def _neuralsort_setup(ctx, inputs, output):
    x, tau, _, backend, lengths, ks, left = inputs
    X, perm = output
    ctx.save_for_backward(x, X, perm, lengths, ks)
    ctx.args = (tau, backend, left)


def _neuralsort_backward(ctx, grad_X, grad_perm):
    x, X, perm, lengths, ks = ctx.saved_tensors
    tau, backend, left = ctx.args
    grad_x = neuralsort_bwd(grad_X.contiguous(), X, x, perm, tau, backend, lengths, ks, left)
    return grad_x, None, None, None, None, None, None


neuralsort_fwd.register_autograd(_neuralsort_backward, setup_context=_neuralsort_setup)


# --- SoftSort -------------------------------------------------------------------------------------------


@torch.library.custom_op("relaxops::softsort_fwd", mutates_args=())
def softsort_fwd(
    x: Tensor,
    tau: float,
    k: int,
    pow: float,
    backend: str,
    lengths: Tensor | None = None,
    ks: Tensor | None = None,
    left: bool = False,
) -> tuple[Tensor, Tensor]:
    _check_forward("softsort_fwd", x, tau, k, pow, backend, lengths, ks, left, values=True)
    kernels = _kernels("softsort_fwd", backend, x.device)
    X, perm = _outputs(x, k)
    kernels.softsort_forward(x, tau, pow, X, perm, lengths, ks, left)
    return X, perm


@softsort_fwd.register_fake
def _(x, tau, k, pow, backend, lengths=None, ks=None, left=False):
    _check_forward("softsort_fwd", x, tau, k, pow, backend, lengths, ks, left, values=False)
    return _outputs(x, k)


@torch.library.custom_op("relaxops::softsort_bwd", mutates_args=())
def softsort_bwd(
    grad_X: Tensor,
    X: Tensor,
    x: Tensor,
    perm: Tensor,
    tau: float,
    pow: float,
    backend: str,
    lengths: Tensor | None = None,
    ks: Tensor | None = None,
    left: bool = False,
) -> Tensor:
    _check_backward("softsort_bwd", grad_X, X, x, perm, tau, pow, backend, lengths, ks, left, values=True)
    kernels = _kernels("softsort_bwd", backend, x.device)
    grad_x = torch.empty_like(x)
    kernels.softsort_backward(grad_X, X, x, perm, tau, pow, lengths, ks, left, grad_x)
    return grad_x


@softsort_bwd.register_fake
def _(grad_X, X, x, perm, tau, pow, backend, lengths=None, ks=None, left=False):
    _check_backward("softsort_bwd", grad_X, X, x, perm, tau, pow, backend, lengths, ks, left, values=False)
    return torch.empty_like(x)


def _softsort_setup(ctx, inputs, output):
    x, tau, _, pow, backend, lengths, ks, left = inputs
    X, perm = output
    ctx.save_for_backward(x, X, perm, lengths, ks)
    ctx.args = (tau, pow, backend, left)


def _softsort_backward(ctx, grad_X, grad_perm):
    x, X, perm, lengths, ks = ctx.saved_tensors
    tau, pow, backend, left = ctx.args
    grad_x = softsort_bwd(grad_X.contiguous(), X, x, perm, tau, pow, backend, lengths, ks, left)
    return grad_x, None, None, None, None, None, None, None


softsort_fwd.register_autograd(_softsort_backward, setup_context=_softsort_setup)
