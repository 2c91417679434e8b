"""The one place a backend is chosen.

``backend="auto"`` picks, per device, the fastest implementation that is available and verified:
CPU tensors use the C++ kernels (``cpu``); CUDA tensors use ``cuda`` or ``triton`` in the order measured
by the benchmark harness, but only kernels that have passed the GPU test suite on a real GPU (see
``VERIFIED_GPU``); without a usable compiled kernel, ``reference`` (pure PyTorch) with a one-time warning.
An explicitly requested backend that cannot run raises :class:`BackendUnavailableError`; a backend name that
does not exist raises ``ValueError``. The environment variable ``RELAXOPS_BACKEND`` overrides ``auto`` (for tests
and benchmarks); :func:`requested` is the one place it is read. Every op gets its kernels from :func:`launcher`.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import platform
import sys
import tempfile
import warnings

import torch

from . import _ext

BACKENDS = ("auto", "reference", "cpu", "cuda", "triton")

# GPU kernels that passed the GPU test suite on a real GPU: (family, backend) -> "device, commit".
# Unlisted GPU kernels are unverified: `python -m relaxops info` says so and `auto` picks them only where
# `python -m relaxops selftest` verified them on the user's own device (the cache below).
VERIFIED_GPU: dict[tuple[str, str], str] = {
    # `selftest --full` (every case, the benchmark sizes included) passed; docs/gpu.md has the session
    ("logic", "triton"): "NVIDIA H200 (driver 580.159.04, CUDA 13.0, torch 2.11, triton 3.6), commit b4c23ad",
}

# Order in which `auto` tries the GPU backends, per family (fastest first, from bench/run.py figures).
GPU_PREFERENCE: dict[str, tuple[str, ...]] = {
    "sortnet": ("cuda", "triton"),
    "baselines": ("cuda", "triton"),
    "logic": ("cuda", "triton"),
    "logic_act": ("cuda", "triton"),  # logic layers of the other parametrizations / modes: not benchmarked yet
    "logic_conv": ("cuda", "triton"),  # LogicConv2d's training kernels: not benchmarked on a GPU yet (a guess)
    "logic_lut": ("cuda", "triton"),  # LogicLUTLayer's kernels: not verified or benchmarked on a GPU yet
    "logic_packed": ("cuda",),
    "render": ("cuda",),
    "render_buffers": ("cuda",),  # depth, barycentrics, attributes, UV textures: not verified on a GPU yet
    "fastsort": ("cuda", "triton"),
    "otsort": ("cuda", "triton"),
    "edit_distance": ("cuda", "triton"),
    "bubble_sort": ("cuda", "triton"),
    "shortest_path": ("cuda", "triton"),  # not benchmarked on a GPU yet: the order is a guess
    "assignment": ("cuda",),  # training solvers: no Triton kernel
}

_warned: set[str] = set()


class BackendUnavailableError(RuntimeError):
    """A requested backend cannot run: not built, no (CUDA) GPU, triton not installed, or the tensors on a device
    that it does not run on. The message names the backend, the op or family and the reason."""


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


# --- kernels verified on this machine by `python -m relaxops selftest` -------------------------------------
# The cache is a JSON file of entries {device, driver, relaxops, family, backend, status, detail, time}; an
# entry counts only for the same device name, driver and relaxops version. A corrupt file is ignored (with a
# warning) and rewritten by the next selftest.

CACHE_FORMAT = 1


def cache_dir() -> str:
    """``$RELAXOPS_CACHE_DIR``, default ``~/.cache/relaxops`` (selftest results, the harness' downloads)."""
    return os.environ.get("RELAXOPS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "relaxops")


def cache_path() -> str:
    """The selftest results: ``cache_dir()/selftest.json``."""
    return os.path.join(cache_dir(), "selftest.json")


def device_identity(device: torch.device) -> dict[str, str]:
    """What a selftest result is valid for: the device's name, the driver and the relaxops version. CPU tensors
    stand for a device when the Triton interpreter runs the GPU kernels (how the mechanism is tested)."""
    version = sys.modules[__package__].__version__  # relaxops/__init__.py sets it before importing any submodule
    if device.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device)
        driver = str(_ext._cuda.driver_version()) if _ext._cuda is not None else "unknown"
    else:
        name, driver = f"{device.type} ({platform.machine()})", "none"
    return {"device": name, "driver": driver, "relaxops": version}


_cache_memo: dict[str, tuple[tuple, list]] = {}


def load_cache(path: str | None = None) -> list[dict]:
    """The cache's entries ([] if absent; a corrupt or foreign-format file is ignored with a warning)."""
    path = path or cache_path()
    try:
        st = os.stat(path)
    except OSError:
        return []
    mtime = (st.st_mtime_ns, st.st_ino, st.st_size)  # record_selftest replaces the file: a new inode
    if path in _cache_memo and _cache_memo[path][0] == mtime:
        return _cache_memo[path][1]
    entries: list = []
    try:
        with open(path) as f:
            data = json.load(f)
        if (
            not isinstance(data, dict)
            or data.get("format") != CACHE_FORMAT
            or not isinstance(data.get("entries"), list)
        ):
            raise ValueError("not a relaxops selftest cache")
        keys = ("device", "driver", "relaxops", "family", "backend", "status")
        entries = [e for e in data["entries"] if isinstance(e, dict) and all(isinstance(e.get(k), str) for k in keys)]
    except (OSError, ValueError) as e:
        _warn_once(f"cache:{path}:{mtime}", f"relaxops: ignoring the selftest cache {path} ({e})")
    _cache_memo[path] = (mtime, entries)
    return entries


def record_selftest(results: list[dict], path: str | None = None) -> str:
    """Merge selftest ``results`` (entries as in the cache) into the cache file, atomically; returns its path.
    A new result replaces the entry of the same device, driver, version, family and backend."""
    path = path or cache_path()
    key = ("device", "driver", "relaxops", "family", "backend")
    new = {tuple(r[k] for k in key) for r in results}
    entries = [e for e in load_cache(path) if tuple(e[k] for k in key) not in new] + list(results)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".selftest-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"format": CACHE_FORMAT, "entries": entries}, f, indent=1)
    os.replace(tmp, path)
    return path


def verified(family: str, backend: str, device: torch.device) -> str | None:
    """Where the ``backend`` kernel of ``family`` was verified for ``device``: by us (``VERIFIED_GPU``) or by a
    selftest on this device (the cache); None if it was not (or its last selftest here failed)."""
    if (family, backend) in VERIFIED_GPU:
        return VERIFIED_GPU[(family, backend)]
    ident = device_identity(device)
    status = None
    for e in load_cache():
        if e["family"] == family and e["backend"] == backend and all(e[k] == v for k, v in ident.items()):
            status = e  # the last entry of a key wins
    if status is not None and status["status"] == "passed":
        return f"selftest on this device ({status.get('time', '?')})"
    return None


def gpu_choice(family: str, device: torch.device) -> str:
    """The backend ``auto`` uses for ``family`` on a GPU ``device``: the first of ``GPU_PREFERENCE`` that is
    verified and available, else ``reference``."""
    for candidate in GPU_PREFERENCE.get(family, ()):
        if unavailable_reason(candidate, device) is None and verified(family, candidate, device):
            return candidate
    return "reference"


def requested(backend: str) -> str:
    """The backend asked for: ``backend`` itself, or for ``"auto"`` the override ``$RELAXOPS_BACKEND`` (``"auto"``
    when unset or empty; ValueError for a name that is not a backend)."""
    if backend != "auto":
        return backend
    backend = os.environ.get("RELAXOPS_BACKEND", "auto") or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"RELAXOPS_BACKEND must be one of {list(BACKENDS)}, got {backend!r}")
    return backend


def require(what: str, backend: str, device: torch.device) -> None:
    """Raise :class:`BackendUnavailableError` (naming ``what``, the backend and the reason) if ``backend`` cannot
    run on ``device`` tensors."""
    reason = unavailable_reason(backend, device)
    if reason is not None:
        raise BackendUnavailableError(f"{what}: backend {backend!r} cannot run: {reason}")


def resolve(family: str, backend: str, device: torch.device) -> str:
    """The concrete backend for ``family`` on ``device`` given the requested ``backend``."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    backend = requested(backend)
    if backend != "auto":
        require(f"relaxops {family}", backend, device)
        return backend
    if device.type == "cuda":
        choice = gpu_choice(family, device)
        if choice == "reference":
            _warn_once(
                f"{family}:gpu",
                f"relaxops: no verified GPU kernel for {family} is available; using the PyTorch reference "
                "(`python -m relaxops selftest` verifies them on this GPU)",
            )
        return choice
    if device.type == "cpu" and _ext.has_cpu():
        return "cpu"
    _warn_once(
        f"{family}:{device.type}",
        f"relaxops: no compiled kernel for {family} on {device.type}; using the (slow) PyTorch reference",
    )
    return "reference"


def launcher(op: str, backend: str, device: torch.device, *, cpu, cuda=None, triton: str | None = None):
    """The kernels of ``relaxops::<op>`` for the concrete compiled ``backend`` on ``device`` tensors: the family's
    launcher namespace ``cpu`` or ``cuda``, or its Triton module ``triton`` (a module name, imported on first
    use). ValueError naming the argument for a backend the op has no kernels of; :class:`BackendUnavailableError`
    where the backend cannot run. Families bind their namespaces once with :func:`family_launcher`."""
    kernels = {"cpu": cpu, "cuda": cuda, "triton": triton}.get(backend) if isinstance(backend, str) else None
    if kernels is None:
        have = [b for b, k in (("cpu", cpu), ("cuda", cuda), ("triton", triton)) if k is not None]
        raise ValueError(f"relaxops::{op}: backend must be one of {have}, got {backend!r}")
    require(f"relaxops::{op}", backend, device)
    return importlib.import_module(kernels) if isinstance(kernels, str) else kernels


def family_launcher(cpu, cuda=None, triton: str | None = None):
    """:func:`launcher` with a family's kernels bound: ``kernels(op, backend, device)`` (a partial: no frame of
    its own between an op and its kernels)."""
    return functools.partial(launcher, cpu=cpu, cuda=cuda, triton=triton)


def status() -> dict[str, str]:
    """``{backend: "available" | "unverified" | reason}`` as reported by ``python -m relaxops info``."""
    out = {"reference": "available"}
    out["cpu"] = "available" if _ext.has_cpu() else f"not built ({_ext.C_IMPORT_ERROR})"
    gpu = torch.device("cuda")
    for b in ("cuda", "triton"):
        reason = unavailable_reason(b, gpu)
        if reason is None:
            ok = [f for f in GPU_PREFERENCE if b in GPU_PREFERENCE[f] and verified(f, b, gpu)]
            out[b] = "available" + (f", verified for {ok}" if ok else ", unverified (auto skips it)")
        else:
            out[b] = reason
    return out
