"""Argument checks shared by the families: each error names the argument and the allowed values."""

from __future__ import annotations

import math
import os

import torch
from torch._subclasses.fake_tensor import FakeTensor

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def floating_tensor(t, name: str, min_dim: int = 1) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(t.shape)}")


def positive_finite(v, name: str) -> float:
    # comparisons, not math.isfinite: under torch.compile(dynamic=True) v may be a symbolic float (returned as is)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return v if isinstance(v, float) else float(v)


def in_closed_interval(v, name: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Kernels compute in float32 for half types, else in the input dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def on_rows(x: torch.Tensor, n: int, dtype: torch.dtype, fn):
    """``fn`` on ``x [..., n]`` as contiguous rows ``[B, n]`` of ``dtype``, its ``[B, n]`` output back in x's shape
    and dtype. A 2-D contiguous ``x`` of ``dtype`` goes to ``fn`` as it is: the no-op reshape / to views would add
    autograd nodes, ~15 us of a fwd+bwd at n = 100."""
    if x.dim() == 2 and x.is_contiguous() and x.dtype == dtype:
        return fn(x)
    return fn(x.reshape(-1, n).to(dtype).contiguous()).to(x.dtype).reshape(x.shape)


def _available_bytes(device: torch.device) -> int:
    """Memory that new buffers on ``device`` can take now: for CUDA the driver's free memory plus what torch's
    allocator holds unused; for CPU the kernel's MemAvailable (free plus reclaimable page cache), or the
    physical memory where that cannot be read. Not the total: buffers the size of the whole machine's memory
    only get the process killed by the OOM killer."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


# Work below this size is never refused (and the available memory is not read for it).
_ALWAYS_FITS = 256 << 20


def output_fits(shape, dtype: torch.dtype, device: torch.device, what: str, hint: str = "use a smaller batch") -> None:
    """Refuse an output larger than the device's memory, with its size, instead of dying in the allocator."""
    memory_fits(
        math.prod(int(s) for s in shape) * dtype.itemsize, device, f"{what} of shape {tuple(shape)} ({dtype})", hint
    )


def memory_fits(nbytes: int, device: torch.device, what: str, hint: str = "use a smaller batch") -> None:
    """Refuse work whose buffers (outputs, work buffers, saved tensors) together need more than the device's
    memory; ``what`` says what they are and ``hint`` how to need less (an option the caller really takes)."""
    if torch.compiler.is_compiling() or nbytes <= _ALWAYS_FITS:  # compiled graphs: checked by the eager call
        return
    limit = _available_bytes(device)
    if nbytes > limit:
        raise MemoryError(
            f"relaxops: {what} needs {nbytes / 2**30:.1f} GiB, more than the {limit / 2**30:.1f} GiB of "
            f"{device.type} memory available; {hint}"
        )


# --- checks of the registered ops (``torch.ops.relaxops.*`` are public: they never trust their arguments) -----
# Plain ``if`` statements (``python -O`` removes ``assert``); errors name the op and the argument.


def kernel_tensor(op: str, name: str, t, *, dtypes=None, device=None, shape=None, contiguous: bool = True):
    """``t`` is a tensor of one of ``dtypes``, on ``device``, of ``shape`` (a tuple; ``None`` entries are free)
    and, if ``contiguous``, laid out densely (the kernels take its raw address)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"relaxops::{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"relaxops::{op}: {name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"relaxops::{op}: {name} must be on {device}, got {t.device}")
    if shape is not None and (t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape))):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"relaxops::{op}: {name} must have shape {want}, got {list(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"relaxops::{op}: {name} must be contiguous")


def _stamp(t: torch.Tensor) -> tuple:
    """What changes when a tensor's content may have: its storage address, shape and version (in-place edits)."""
    return t.data_ptr(), tuple(t.shape), t._version


def already_checked(what: tuple, *tensors: torch.Tensor) -> bool:
    """Whether the content check ``what`` passed on these very tensor objects, unchanged since (see
    ``mark_checked``). A check of a module's index buffers (a logic layer's connections) then runs once, not on
    every call."""
    stamps = tuple(_stamp(t) for t in tensors)
    return all(getattr(t, "_relaxops_checked", {}).get(what) == stamps for t in tensors)


def mark_checked(what: tuple, *tensors: torch.Tensor) -> None:
    stamps = tuple(_stamp(t) for t in tensors)
    for t in tensors:
        if "_relaxops_checked" not in t.__dict__:
            t._relaxops_checked = {}
        t._relaxops_checked[what] = stamps


def values_unknown(t: torch.Tensor) -> bool:
    """Whether ``t``'s values cannot be read: while ``torch.compile`` traces, or a fake (FakeTensor) or meta tensor
    as the fake kernels get. Checks of values are then left to the eager call that runs the kernel."""
    return torch.compiler.is_compiling() or isinstance(t, FakeTensor) or t.device.type == "meta"


# --- checks of values without host synchronisation (docs/gpu.md, "Host synchronisations") ---------------------
# Reading a device tensor on the host (``.item()``, ``int(t)``, ``bool(t)``, ``t.tolist()``) waits until the
# device has run all the work queued before it. The idiom of every check of values in the ops:
#
#     if _checks.on_host(t):
#         ...read the values, raise ValueError / IndexError naming them...     (CPU tensors: free, exact message)
#     else:
#         _checks.assert_on_device(ok, "message naming the argument")          (no wait; a device-side assert)
#
# and code that reads values only to skip work (``if bad.any(): fix()``) does the work unconditionally off the host.
# Host values go the other way through ``to_device``: a plain copy to a GPU from pageable memory waits too.

DEVICE_CHECKS_ON_CPU = False
"""Test switch: CPU tensors take the device path too (tests/test_host_sync.py checks that it reads nothing)."""


def on_host(t: torch.Tensor) -> bool:
    """Whether checks may read ``t``'s values on the host: a CPU tensor (no synchronisation). Other devices' tensors
    are checked by ``assert_on_device``."""
    return t.device.type == "cpu" and not DEVICE_CHECKS_ON_CPU


def assert_on_device(ok: torch.Tensor, message: str) -> None:
    """``ok`` (a bool tensor) must be all true, asserted on its device in stream order without waiting for it:
    where it is false, the device-side assert stops the process's CUDA work (``torch._assert_async``: the next
    synchronisation raises; recent torch versions print ``message`` with it). On CPU tensors (the test switch) it
    raises RuntimeError with ``message`` at once."""
    torch._assert_async(ok.all(), message)


def to_device(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small tensor of host values (a list or an ndarray, e.g. a kernel's parameters) on ``device``, without
    waiting for the device: ``torch.tensor(values, device=cuda)`` copies from pageable memory and then synchronises
    the stream; from pinned memory with ``non_blocking`` the copy is queued (torch keeps the pinned block until it has
    run). A compiled graph holds the values as a constant."""
    if torch.compiler.is_compiling():
        return torch.as_tensor(values, dtype=dtype, device=device)
    t = torch.as_tensor(values, dtype=dtype)
    if device is None:
        return t
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def index_tensor(op: str, name: str, t, high: int, **kwargs) -> None:
    """``t`` is an integer tensor (see ``kernel_tensor``) whose entries all lie in ``[0, high)``: on the host for
    CPU tensors (IndexError naming the values found), on the device otherwise; once per unchanged tensor."""
    kernel_tensor(op, name, t, dtypes=kwargs.pop("dtypes", (torch.int32, torch.int64)), **kwargs)
    if t.numel() == 0 or values_unknown(t) or already_checked(("index", high), t):
        return
    if on_host(t):
        lo, hi = (int(v) for v in torch.aminmax(t))
        if lo < 0 or hi >= high:
            raise IndexError(f"relaxops::{op}: {name} must hold indices in [0, {high}), found values in [{lo}, {hi}]")
    else:
        assert_on_device((t >= 0) & (t < high), f"relaxops::{op}: {name} must hold indices in [0, {high})")
    mark_checked(("index", high), t)


def int_in_range(op: str, name: str, v, lo: int, hi: int) -> int:
    """An integer argument of a registered op with ``lo <= v <= hi``."""
    if isinstance(v, bool) or not isinstance(v, int) or not (lo <= v <= hi):
        raise ValueError(f"relaxops::{op}: {name} must be an integer in [{lo}, {hi}], got {v!r}")
    return v
