"""Fixtures shared by all families: backends and devices built from what exists, NaN-filled fresh buffers."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, settings

# Without a GPU, Triton kernels run through the interpreter on CPU tensors (read when a kernel is defined).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# torch.compile's on-disk caches (inductor's FX graph and AOTAutograd caches, /tmp/torchinductor_<user> by default)
# key a graph by its source and torch's version, not by the fake kernels of the custom ops in it: a cache written
# by an older relaxops whose op returned other shapes replays them (CI once failed this way on otsort's history,
# saved as [R, 0, n + m] by an older commit). Each test session compiles into its own, removed at exit.
_compile_cache = tempfile.mkdtemp(prefix="relaxops-tests-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _compile_cache
atexit.register(shutil.rmtree, _compile_cache, ignore_errors=True)

from relaxops import _backend, _ext  # noqa: E402

# Property-based (fuzz) tests: "ci" (the default) is derandomized and bounded so the suite stays a few minutes
# on 2 cores; "long" (HYPOTHESIS_PROFILE=long) draws fresh random examples, many more of them, for local runs.
# The autouse fixtures below are per test function, not per example; that is intended (they only seed and
# NaN-fill), so that health check is off.
_fuzz = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("ci", max_examples=30, derandomize=True, print_blob=True, **_fuzz)
settings.register_profile("long", max_examples=2000, print_blob=True, **_fuzz)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def available_backends(device: str) -> list[str]:
    dev = torch.device(device)
    return [b for b in ("reference", "cpu", "cuda", "triton") if _backend.unavailable_reason(b, dev) is None]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# (backend, device) pairs that can run here; GPU pairs carry the `gpu` marker.
BACKEND_DEVICE = [
    pytest.param(b, d, id=f"{b}-{d}", marks=[pytest.mark.gpu] if d == "cuda" else [])
    for d in DEVICES
    for b in available_backends(d)
]
KERNEL_BACKEND_DEVICE = [p for p in BACKEND_DEVICE if p.values[0] != "reference"]


def relaxation_cases(backend_device, sizes):
    """``(param, relaxation, size)`` for every relaxation of the sorting networks on every size (an int n or a tuple
    starting with n), except that interpreted Triton runs n > 16 with two relaxations only: the relaxation is one
    n-independent function of the kernels, and those two still run every network, launch configuration and exchange
    path (with and without tl.gather) of n = 33, 100 in the interpreter."""
    from relaxops import RELAXATIONS

    for p in backend_device:
        backend, device = p.values
        for relaxation in RELAXATIONS:
            for size in sizes:
                n = size[0] if isinstance(size, tuple) else size
                if backend == "triton" and device == "cpu" and n > 16 and relaxation not in ("cauchy", "logistic_phi"):
                    continue
                yield p, relaxation, size


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def nan_filled_empty(monkeypatch):
    """Fresh floating buffers start as NaN, so an output element a kernel forgets to write fails a test. Tensors of
    concrete size only: a traced tensor of data-dependent length (opcheck, torch.compile) cannot be asked about."""
    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty

    def fill(t):
        if t.is_floating_point() and not isinstance(t.numel(), torch.SymInt) and t.numel() > 0:
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: fill(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: fill(empty_like(*a, **k)))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **k: fill(new_empty(self, *a, **k)))
    yield


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def cuda_kernels_built() -> bool:
    return _ext._cuda is not None
