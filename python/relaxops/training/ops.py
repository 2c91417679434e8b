"""Registered ops (``relaxops::<op>``) of the training family's kernels: argument checks, fake kernels for
torch.compile. The solvers have no gradient, so there is no backward op.

``relaxops::assignment_matrix(theta, backend) -> P``: ``theta [B, d, d]`` contiguous float32/float64 with finite
entries (a non-finite score raises ValueError: the CPU kernel checks while it reads the scores, the CUDA path
before the launch), ``P [B, d, d]`` of theta's dtype, the 0/1 permutation matrix of a maximum-weight perfect
matching (math and tie behaviour: csrc/training/assignment.h). Backends ``cpu`` and ``cuda``; there is no Triton
assignment kernel (see ``solvers.assignment``). The CPU kernel writes P itself: under load on shared cores a
parallel fill or finiteness reduction by torch can cost a scheduler time slice, more than the solve.
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
    def assignment(theta):
        B, d, _ = theta.shape
        perm = torch.empty(B, d, dtype=torch.int64)
        P = torch.empty_like(theta)
        bad = _ext._C.assignment(_ext.dtype_code(theta), B, d, _ext.ptr(theta), _ext.ptr(perm), _ext.ptr(P))
        if bad:
            raise ValueError(
                f"theta must be finite (assignment refuses NaN and +-inf scores): {bad} of the {B} "
                "matrices have non-finite entries"
            )
        return P


class _CudaKernels:
    """Launcher of the CUDA kernel in ``relaxops._cuda`` (device pointers, current stream; the workspace from
    torch's allocator, its size in bytes from ``assignment_workspace``)."""

    @staticmethod
    def assignment(theta):
        B, d, _ = theta.shape
        if not bool(torch.isfinite(theta).all()):
            raise ValueError("theta must be finite (assignment refuses NaN and +-inf scores)")
        perm = torch.empty(B, d, dtype=torch.int64, device=theta.device)
        ws = theta.new_empty(max(1, _ext._cuda.assignment_workspace(B, d)), dtype=torch.uint8)
        _ext._cuda.assignment(
            _ext.dtype_code(theta), B, d, _ext.ptr(theta), _ext.ptr(perm), _ext.ptr(ws), _ext.stream(theta.device)
        )
        return torch.zeros_like(theta).scatter_(2, perm.unsqueeze(2), 1.0)


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels)


def _check(op, theta, backend):
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "theta", theta, dtypes=_FLOATS, shape=(None, None, None))
    B, d, d2 = theta.shape
    if d != d2:
        raise ValueError(f"relaxops::{op}: theta must have shape [B, d, d], got {list(theta.shape)}")
    if d >= 2**24:
        raise ValueError(f"relaxops::{op}: d must be below 2^24, got {d}")


def assignment_matrix_impl(theta: Tensor, backend: str) -> Tensor:
    """The op's implementation, which ``solvers.assignment`` calls directly in eager mode (the same checks and
    kernels; the dispatcher costs ~30 us a call, a sixth of the solve of 256 matrices at d = 16)."""
    _check("assignment_matrix", theta, backend)
    kernels = _kernels("assignment_matrix", backend, theta.device)
    if theta.numel() == 0:
        return torch.zeros_like(theta)
    return kernels.assignment(theta)


assignment_matrix = torch.library.custom_op("relaxops::assignment_matrix", assignment_matrix_impl, mutates_args=())


@assignment_matrix.register_fake
def _(theta, backend):
    _check("assignment_matrix", theta, backend)
    return torch.empty_like(theta)
