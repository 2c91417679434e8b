"""Registered ops (``relaxops::<op>``) of the training family's kernels: argument checks, fake kernels for
torch.compile. The solvers have no gradient, so there is no backward op.

``relaxops::assignment_perm(theta, backend) -> perm``: ``theta [B, d, d]`` contiguous float32/float64 with finite
entries (the public ``assignment`` checks finiteness; a kernel given non-finite scores returns some permutation,
never reads or writes out of bounds), ``perm`` int64 ``[B, d]``, ``perm[b, i]`` the column matched to row ``i`` in a
maximum-weight perfect matching (math and tie behaviour: csrc/training/assignment.h). Backends ``cpu`` and
``cuda``; there is no Triton assignment kernel (see ``solvers.assignment``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _checks, _ext

_KERNEL_BACKENDS = ("cpu", "cuda")
_FLOATS = (torch.float32, torch.float64)


class _CpuKernels:
    """Launcher of the C++ kernel in ``relaxops._C`` (host pointers; per-thread scratch inside)."""

    @staticmethod
    def assignment(theta, perm):
        B, d, _ = theta.shape
        _ext._C.assignment(_ext.dtype_code(theta), B, d, _ext.ptr(theta), _ext.ptr(perm))


class _CudaKernels:
    """Launcher of the CUDA kernel in ``relaxops._cuda`` (device pointers, current stream; the workspace from
    torch's allocator, its size in bytes from ``assignment_workspace``)."""

    @staticmethod
    def assignment(theta, perm):
        B, d, _ = theta.shape
        ws = theta.new_empty(max(1, _ext._cuda.assignment_workspace(B, d)), dtype=torch.uint8)
        _ext._cuda.assignment(_ext.dtype_code(theta), B, d, _ext.ptr(theta), _ext.ptr(perm), _ext.ptr(ws),
                              _ext.stream(theta.device))


def _check(op, theta, backend):
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "theta", theta, dtypes=_FLOATS, shape=(None, None, None))
    B, d, d2 = theta.shape
    if d != d2:
        raise ValueError(f"relaxops::{op}: theta must have shape [B, d, d], got {list(theta.shape)}")
    if d >= 2**24:
        raise ValueError(f"relaxops::{op}: d must be below 2^24, got {d}")


@torch.library.custom_op("relaxops::assignment_perm", mutates_args=())
def assignment_perm(theta: Tensor, backend: str) -> Tensor:
    _check("assignment_perm", theta, backend)
    kernels = _backend.checked_kernels("assignment_perm", backend, theta.device, _CpuKernels, _CudaKernels,
                                       __package__, "the assignment op")
    B, d, _ = theta.shape
    perm = torch.empty(B, d, dtype=torch.int64, device=theta.device)
    if B and d:
        kernels.assignment(theta, perm)
    return perm


@assignment_perm.register_fake
def _(theta, backend):
    _check("assignment_perm", theta, backend)
    B, d, _ = theta.shape
    return theta.new_empty(B, d, dtype=torch.int64)
