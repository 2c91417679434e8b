"""Argument checks shared by the families: each error names the argument and the allowed values."""

from __future__ import annotations

import functools
import math
import os

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def floating_tensor(t, name: str, min_dim: int = 1) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(t.shape)}")


def positive_finite(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def in_closed_interval(v, name: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Kernels compute in float32 for half types, else in the input dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@functools.cache
def _memory_bytes(device: torch.device) -> int:
    """Total memory of the device (physical memory for CPU tensors)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def output_fits(shape, dtype: torch.dtype, device: torch.device, what: str) -> None:
    """Refuse an output larger than the device's memory, with its size, instead of dying in the allocator."""
    if torch.compiler.is_compiling():  # checked when the eager call runs; graphs see static shapes
        return
    numel = math.prod(int(s) for s in shape)
    nbytes = numel * dtype.itemsize
    limit = _memory_bytes(device)
    if nbytes > limit:
        raise MemoryError(
            f"relaxops: {what} of shape {tuple(shape)} ({dtype}) needs {nbytes / 2**30:.1f} GiB, more than "
            f"the {limit / 2**30:.1f} GiB of {device.type} memory; use a smaller batch or return_matrix=False"
        )
