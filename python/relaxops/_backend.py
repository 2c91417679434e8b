"""The one place a backend is chosen.

``backend="auto"`` picks, per device, the fastest implementation that is available and verified:
CPU tensors use the C++ kernels (``cpu``); CUDA tensors use ``cuda`` or ``triton`` in the order measured
by the benchmark harness, but only kernels that have passed the GPU test suite on a real GPU (see
``VERIFIED_GPU``); without a usable compiled kernel, ``reference`` (pure PyTorch) with a one-time warning.
An explicitly requested backend that cannot run raises. The environment variable ``RELAXOPS_BACKEND``
overrides ``auto`` (for tests and benchmarks).
"""

from __future__ import annotations

import importlib
import os
import warnings

import torch

from . import _ext

BACKENDS = ("auto", "reference", "cpu", "cuda", "triton")

# GPU kernels that passed the GPU test suite on a real GPU: (family, backend) -> "device, commit".
# Unlisted GPU kernels are unverified: `python -m relaxops info` says so and `auto` never picks them.
VERIFIED_GPU: dict[tuple[str, str], str] = {}

# Order in which `auto` tries the GPU backends, per family (fastest first, from bench/run.py figures).
GPU_PREFERENCE: dict[str, tuple[str, ...]] = {
    "sortnet": ("cuda", "triton"),
    "baselines": ("cuda", "triton"),
    "logic": ("cuda", "triton"),
    "logic_packed": ("cuda",),
    "render": ("cuda",),
}

_warned: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def unavailable_reason(backend: str, device: torch.device) -> str | None:
    """Why ``backend`` cannot run on ``device`` tensors, or None if it can."""
    if backend == "reference":
        return None
    if backend == "cpu":
        if device.type != "cpu":
            return f"backend 'cpu' runs on CPU tensors, got a tensor on {device}"
        return None if _ext.has_cpu() else f"relaxops._C is not built ({_ext.C_IMPORT_ERROR})"
    if backend == "cuda":
        if device.type != "cuda":
            return f"backend 'cuda' runs on CUDA tensors, got a tensor on {device}"
        if _ext._cuda is None:
            return f"relaxops._cuda is not built ({_ext.CUDA_IMPORT_ERROR})"
        return None if _ext.has_cuda() else "no CUDA device is visible to relaxops._cuda"
    if backend == "triton":
        if not _ext.has_triton():
            try:
                import triton  # noqa: F401
            except ImportError:
                return "triton is not installed (pip install 'relaxops[triton]')"
            return "no CUDA GPU for triton (TRITON_INTERPRET=1 runs it on CPU tensors)"
        if device.type == "cpu" and not _ext.triton_interpret():
            return "backend 'triton' needs CUDA tensors, or TRITON_INTERPRET=1 for CPU tensors"
        if device.type not in ("cpu", "cuda"):
            return f"backend 'triton' does not run on {device}"
        return None
    raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")


def resolve(family: str, backend: str, device: torch.device) -> str:
    """The concrete backend for ``family`` on ``device`` given the requested ``backend``."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        backend = os.environ.get("RELAXOPS_BACKEND", "auto") or "auto"
        if backend not in BACKENDS:
            raise ValueError(f"RELAXOPS_BACKEND must be one of {list(BACKENDS)}, got {backend!r}")
    if backend != "auto":
        reason = unavailable_reason(backend, device)
        if reason is not None:
            raise RuntimeError(f"relaxops: backend {backend!r} is not available: {reason}")
        return backend
    if device.type == "cuda":
        for candidate in GPU_PREFERENCE.get(family, ()):
            if (family, candidate) in VERIFIED_GPU and unavailable_reason(candidate, device) is None:
                return candidate
        _warn_once(
            f"{family}:gpu",
            f"relaxops: no verified GPU kernel for {family} is available; using the PyTorch reference",
        )
        return "reference"
    if device.type == "cpu" and _ext.has_cpu():
        return "cpu"
    _warn_once(
        f"{family}:{device.type}",
        f"relaxops: no compiled kernel for {family} on {device.type}; using the (slow) PyTorch reference",
    )
    return "reference"


def kernels(backend: str, cpu, cuda, package: str, what: str):
    """The launcher namespace of a concrete compiled ``backend``: ``cpu`` / ``cuda`` (the family's launcher
    classes) or the family's Triton module ``<package>.triton`` (imported on first use)."""
    if backend == "cpu":
        return cpu
    if backend == "cuda":
        return cuda
    if backend == "triton":
        return importlib.import_module(f"{package}.triton")
    raise ValueError(f"{what} run the compiled backends cpu, cuda or triton, got {backend!r}")


def status() -> dict[str, str]:
    """``{backend: "available" | "unverified" | reason}`` as reported by ``python -m relaxops info``."""
    out = {"reference": "available"}
    out["cpu"] = "available" if _ext.has_cpu() else f"not built ({_ext.C_IMPORT_ERROR})"
    gpu = torch.device("cuda")
    for b in ("cuda", "triton"):
        reason = unavailable_reason(b, gpu)
        if reason is None:
            verified = [f for (f, bb) in VERIFIED_GPU if bb == b]
            out[b] = "available" + (f", verified for {verified}" if verified else ", unverified (auto skips it)")
        else:
            out[b] = reason
    return out
