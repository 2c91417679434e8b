"""Loads the compiled modules and reports what is available.

``relaxops._C`` (C++ CPU kernels) and ``relaxops._cuda`` (CUDA kernels) are torch-free: they take raw
addresses of contiguous buffers. The helpers here turn tensors into those arguments after the checks.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_C = None
_cuda = None
C_IMPORT_ERROR: str | None = None
CUDA_IMPORT_ERROR: str | None = None


class _ThreadedModule:
    """``relaxops._C`` whose functions are looked up at torch's current thread count: each lookup first gives
    the kernels' thread pool ``torch.get_num_threads()`` if it changed (a DataLoader worker, where torch sets 1,
    or the user's ``torch.set_num_threads``). ~0.2 us a call."""

    __slots__ = ("_module", "_threads")

    def __init__(self, module):
        self._module = module
        self._threads = 0

    def __getattr__(self, name):
        threads = torch.get_num_threads()
        if threads != self._threads:
            self._module.set_num_threads(threads)
            self._threads = threads
        return getattr(self._module, name)


try:
    _C = _ThreadedModule(importlib.import_module("relaxops._C"))
except ImportError as e:  # source checkout without a build
    C_IMPORT_ERROR = str(e)
try:
    _cuda = importlib.import_module("relaxops._cuda")
except ModuleNotFoundError:  # built without a CUDA compiler or GPU
    CUDA_IMPORT_ERROR = "a CPU-only build; RELAXOPS_CUDA=ON and nvcc build it: docs/build.md"
except ImportError as e:  # built, but it does not load here
    CUDA_IMPORT_ERROR = str(e)


def build_info() -> dict:
    """What is installed: ``variant`` "cpu" (``pip install relaxops``: the C++ CPU module) or "cu12"/"cu13" (the
    CUDA wheels, version ``0.1.0+cu12``, README "Wheels"), as the build wrote it into ``relaxops/_build_info.py``
    (None in a source tree that was built another way), the distribution's version, the CUDA architectures."""
    try:
        version = importlib.metadata.version("relaxops")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = None
    try:
        b = importlib.import_module("relaxops._build_info")
    except ImportError:
        return {"variant": None, "version": version, "cuda_archs": ""}
    return {"variant": b.VARIANT, "version": version, "cuda_archs": b.CUDA_ARCHS}


def has_cpu() -> bool:
    return _C is not None


def has_cuda() -> bool:
    """The CUDA module is built and a CUDA device is visible to both it and torch."""
    return _cuda is not None and torch.cuda.is_available() and _cuda.device_count() > 0


def has_triton() -> bool:
    """Triton is importable and can run: on a CUDA GPU, or through its interpreter (TRITON_INTERPRET=1)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available() or triton_interpret()


def triton_interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


_DTYPE_CODES = {torch.float32: 0, torch.float64: 1}


def dtype_code(t: torch.Tensor) -> int:
    return _DTYPE_CODES[t.dtype]


def ptr(t: torch.Tensor | None) -> int:
    """Address of a contiguous tensor's data (0 for None)."""
    if t is None:
        return 0
    if not t.is_contiguous():  # the kernels index raw memory densely; checked without `assert` (python -O)
        raise ValueError("relaxops: kernel buffers must be contiguous")
    return t.data_ptr()


def stream(device: torch.device) -> int:
    """The current CUDA stream handle of ``device``."""
    return torch.cuda.current_stream(device).cuda_stream


class ReusedBuffers:
    """CPU buffers that a kernel's forward saves for its backward, reused across calls.

    A fresh buffer of tens to hundreds of MB costs its first-touch page faults and zeroing at every call (114 MB:
    25 ms, against 4 ms to write a reused one, on a 2-core EPYC VM), which can exceed the work the saved values
    spare the backward. :meth:`take` returns a 1-D view of a buffer that no live tensor shares: the pool keeps the
    base and hands it out again once every view is gone (autograd frees the saved view after the backward, or
    with the graph): the storage's use count is back to what it was alone. Free buffers beyond ``keep_bytes`` in
    all are dropped, least recently used first."""

    def __init__(self, keep_bytes: int):
        self._keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._bufs: list[tuple] = []  # (base, weak reference to its storage, use count alone); least recent first

    @staticmethod
    def _uses(ref) -> int:
        return torch._C._storage_Use_Count(ref.cdata)  # strong references: base, storage object, live views

    def take(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        with self._lock:
            free = [e for e in self._bufs if self._uses(e[1]) == e[2]]
            entry = next((e for e in free if e[0].numel() == numel and e[0].dtype == dtype), None)
            if entry is None:
                buf = torch.empty(numel, dtype=dtype)
                ref = StorageWeakRef(buf.untyped_storage())
                entry = (buf, ref, self._uses(ref))
            drop, kept = set(), 0
            for e in reversed(free):  # the most recently used free buffers stay, up to keep_bytes
                if e is entry:
                    continue
                size = e[0].numel() * e[0].element_size()
                if kept + size > self._keep_bytes:
                    drop.add(id(e))
                else:
                    kept += size
            # at most _MAX_ENTRIES kept: forgetting a buffer in use only means it is not handed out again
            self._bufs = ([e for e in self._bufs if e is not entry and id(e) not in drop] + [entry])[-_MAX_ENTRIES:]
            return entry[0].view(-1)


_MAX_ENTRIES = 64
