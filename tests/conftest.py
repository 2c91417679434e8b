"""Test session setup: Triton interpreter without a GPU, a private compile cache, hypothesis profiles, the `gpu` and
`heavy` markers applied, NaN-filled fresh buffers and a fixed seed per test (shared helpers: `tests/testing.py`)."""

from __future__ import annotations

import atexit
import os
import re
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

# Property-based (fuzz) tests: "ci" (the default) is derandomized and bounded so the suite stays a few minutes
# on 2 cores; "long" (HYPOTHESIS_PROFILE=long) draws fresh random examples, many more of them, for local runs.
# The autouse fixtures below are per test function, not per example; that is intended (they only seed and
# NaN-fill), so that health check is off.
_fuzz = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("ci", max_examples=30, derandomize=True, print_blob=True, **_fuzz)
settings.register_profile("long", max_examples=2000, print_blob=True, **_fuzz)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The `heavy` tier (`python -m pytest -m heavy`; pyproject.toml's addopts deselect it by default): Triton kernels
# in the interpreter (a `triton` parameter off CUDA, a `test_triton_*` module), torch.compile and opcheck tests, and
# parity with peer libraries (`*_parity` and `test_compat_*` modules). Tests that fit no rule carry the mark
# themselves (tests/otsort/test_fuzz.py).
_HEAVY_NAME = re.compile(r"compile|opcheck|inductor")


def _interpreted_triton(values) -> bool:
    """A `triton` backend parameter not on a CUDA device: the kernels run in the interpreter."""
    return "triton" in values and "cuda" not in values


def _is_heavy(item) -> bool:
    module = item.path.stem
    params = getattr(item, "callspec", None)
    return (
        module.startswith("test_triton")
        or module.endswith("_parity")
        or module.startswith("test_compat_")
        or _HEAVY_NAME.search(item.originalname) is not None
        or (params is not None and _interpreted_triton([v for v in params.params.values() if isinstance(v, str)]))
    )


def pytest_collection_modifyitems(config, items):
    heavy = pytest.mark.heavy
    for item in items:
        if _is_heavy(item):
            item.add_marker(heavy)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# RELAXOPS_TEST_LOG=FILE: every test's outcome, time and error line appended as it finishes (by the controller
# under pytest-xdist), so a run stopped at a time limit keeps what it learned (bench/gpu_session.sh reads it).
_TEST_LOG = os.environ.get("RELAXOPS_TEST_LOG")


def pytest_runtest_logreport(report):
    if not _TEST_LOG or os.environ.get("PYTEST_XDIST_WORKER") or not (report.when == "call" or report.failed):
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    error = (crash.message if crash else str(report.longrepr or "")).strip().splitlines()
    with open(_TEST_LOG, "a") as f:
        f.write(f"{report.outcome.upper()} {report.nodeid} {report.when} {report.duration:.1f}s")
        f.write(f": {error[0][:300]}\n" if report.failed and error else "\n")


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
