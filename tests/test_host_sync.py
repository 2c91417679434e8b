"""No host synchronisation in the forward and backward of the ops on GPU tensors (docs/gpu.md, "Host
synchronisations"): on the CPU, ``testing.host_reads`` runs each op with the checks in their device form and lists
every host read; on a GPU (``gpu`` marker) the same calls run under ``torch.cuda.set_sync_debug_mode``. The
device form of the checks still refuses bad values (a device-side assert; on CPU tensors a RuntimeError)."""

from __future__ import annotations

import warnings

import pytest
import torch
from relaxops import _checks, sortnet
from relaxops.algorithms.functional import bubble_sort, shortest_path
from relaxops.baselines import neuralsort, smooth_topk_svm_loss, softsort
from relaxops.fastsort import soft_rank, soft_sort
from relaxops.logic import LogicLayer
from relaxops.otsort import ot_rank, ot_sort
from relaxops.ranking import soft_quantile
from testing import host_reads, run_isolated

B, N = 3, 7


def _lengths(device):
    # a new tensor each call (no memo of its check), sent without a synchronisation (on a GPU)
    return _checks.to_device([7, 5, 3], torch.int64, device)


# name -> (fn(x, backend) -> output, the file of the one host read that stays (docs/gpu.md), or None)
CASES = {
    "ot_sort": (lambda x, be: ot_sort(x, 0.1, backend=be), None),
    "ot_rank_lengths": (lambda x, be: ot_rank(x, 0.1, lengths=_lengths(x.device), backend=be), None),
    "ot_sort_positions_weights": (
        lambda x, be: ot_sort(x, 0.1, squashing="none", a=torch.ones(N, dtype=x.dtype, device=x.device), backend=be),
        None,
    ),
    "ot_sort_unrolled": (lambda x, be: ot_sort(x, 0.1, backward="unrolled", backend=be), "otsort/ops.py"),
    "shortest_path_for": (lambda x, be: shortest_path(x.reshape(B, 1, N).abs(), backend=be), None),
    "shortest_path_while": (
        lambda x, be: shortest_path(x.reshape(B, 1, N).abs(), loop="while", backend=be),
        "algorithms/ops.py",
    ),
    "bubble_sort": (lambda x, be: bubble_sort(x, backend=be)[0], None),
    "neuralsort_lengths": (lambda x, be: neuralsort(x, lengths=_lengths(x.device), backend=be), None),
    "softsort_k_lengths": (lambda x, be: softsort(x, k=3, lengths=_lengths(x.device), backend=be), None),
    "smooth_topk_svm_loss": (
        lambda x, be: smooth_topk_svm_loss(x, _checks.to_device([0, 3, 6], torch.int64, x.device), 2),
        None,
    ),
    "soft_rank_lengths": (lambda x, be: soft_rank(x, lengths=_lengths(x.device), backend=be), None),
    "soft_sort": (lambda x, be: soft_sort(x, backend=be), None),
    "sortnet_rank_lengths": (lambda x, be: sortnet.rank(x, lengths=_lengths(x.device), backend=be), None),
    "sortnet_topk": (lambda x, be: sortnet.topk(x, 2, backend=be), None),
    "soft_quantile": (lambda x, be: soft_quantile(x, 0.3, lengths=_lengths(x.device), backend=be), None),
}

NO_BACKEND = {"smooth_topk_svm_loss"}  # cases whose op takes no backend argument: run once, on the first backend


def _pairs(backends):
    """(case, backend) pairs: every case on every backend, the cases of NO_BACKEND on the first only."""
    return [(c, b) for c in CASES for b in backends if c not in NO_BACKEND or b == backends[0]]


_LAYERS = {}


def _logic_layer(x, be):
    key = (be, x.device, x.dtype)
    if key not in _LAYERS:  # the module's connections: checked once (docs/gpu.md)
        _LAYERS[key] = LogicLayer(N, 16, backend=be).to(x.device, x.dtype)
    return _LAYERS[key](x.sigmoid())


CASES["logic_layer"] = (_logic_layer, None)


def _run(case, backend, device):
    fn, _ = CASES[case]
    x = torch.randn(B, N, dtype=torch.float64 if device == "cpu" else torch.float32, device=device)
    x.requires_grad_(True)
    out = fn(x, backend)
    w = torch.linspace(0.5, 1.5, out.shape[-1], device=device, dtype=out.dtype) if out.dim() else 1.0
    (out * w).sum().backward()
    return x.grad


def _where(reads):
    return {r.split(" at ")[-1].rsplit(":", 1)[0] for r in reads}


@pytest.mark.parametrize("case, backend", _pairs(["cpu", "triton"]))
def test_no_host_read_off_the_cpu(case, backend):
    """The code path of GPU tensors reads nothing on the host but the reads docs/gpu.md lists."""
    _run(case, backend, "cpu")  # first call: caches and the module's connections
    with host_reads() as reads:
        _run(case, backend, "cpu")
    allowed = CASES[case][1]
    assert _where(reads) == ({allowed} if allowed else set()), reads


def relaxops_code(source: str):
    """``source`` evaluated as if written in relaxops' own code (the recorder skips the caller's inputs)."""
    return eval(compile(source, "/relaxops/_probe.py", "eval"), {"torch": torch})


def test_host_reads_records_the_reads():
    """The recorder sees each kind of read (so an empty list means something)."""
    t = torch.arange(4)
    for read in (
        lambda: int(t.max()),
        lambda: bool(t.any()),
        lambda: t.tolist(),
        lambda: t.sum().item(),
        lambda: t[t > 1],
        relaxops_code("lambda: torch.tensor([1.0], device='cpu')"),
        relaxops_code("lambda: torch.zeros(1).to('cpu')"),
    ):
        with host_reads() as reads:
            read()
        assert reads, read
    with host_reads() as reads:
        _checks.assert_on_device(t >= 0, "t must be >= 0")
    assert not reads


# --- the device form of the checks refuses bad values (on CPU tensors: a RuntimeError with the message) ----------


@pytest.fixture
def device_checks(monkeypatch):
    monkeypatch.setattr(_checks, "DEVICE_CHECKS_ON_CPU", True)


BAD = {
    "index_tensor": (
        lambda: _checks.index_tensor("op", "idx", torch.tensor([0, 5]), 5),
        r"relaxops::op: idx must hold indices in \[0, 5\)",
        IndexError,
    ),
    "lengths": (
        lambda: soft_rank(torch.randn(2, 4), lengths=torch.tensor([4, 5]), backend="cpu"),
        r"lengths must lie in \[0, n\] = \[0, 4\]",
        ValueError,
    ),
    "ot_lengths": (
        lambda: torch.ops.relaxops.ot_sinkhorn_fwd(
            *(torch.zeros(2, 3, dtype=torch.float64),) * 4,
            0.1,
            0.1,
            0.9,
            1e-3,
            10,
            False,
            "cpu",
            torch.tensor([3, 4]),
        ),
        r"lengths must lie in \[0, 3\]",
        ValueError,
    ),  # fmt: skip
    "ot_weights": (
        lambda: ot_sort(torch.randn(2, 3), 0.1, a=torch.tensor([1.0, -1.0, 1.0]), backend="cpu"),
        "a must hold finite weights > 0",
        ValueError,
    ),
    "ot_positions": (
        lambda: ot_sort(torch.randn(2, 3), 1e-3, y=torch.tensor([0.0, 1.0, 1e30]), backend="cpu"),
        "too large for the transport",
        ValueError,
    ),
    "labels": (
        lambda: smooth_topk_svm_loss(torch.randn(2, 4, dtype=torch.float64), torch.tensor([0, 4]), 1),
        r"labels must lie in \[0, n\) = \[0, 4\)",
        ValueError,
    ),
    "quantile_level": (lambda: soft_quantile(torch.randn(2, 4), 1.5), r"q must lie in \[0, 1\]", ValueError),
    "shortest_path_steps": (
        lambda: torch.ops.relaxops.shortest_path_bwd(
            torch.ones(1, 2, 2, dtype=torch.float64),
            torch.zeros(1, 1, 8, 2, 4, dtype=torch.float64),
            torch.zeros(1, 8, 2, 4, dtype=torch.float64),
            torch.tensor([5], dtype=torch.int32),
            1.0,
            2,
            3,
            "probabilistic",
            0.0,
            "for",
            10,
            1e-5,
            "cpu",
        ),
        "steps must be n_trace",
        ValueError,
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_values_raise_on_the_cpu(case):
    """CPU tensors: the eager check, its exception and message."""
    call, match, exc = BAD[case]
    with pytest.raises(exc, match=match):
        call()


def _bad_iteration_counts():
    """An unrolled backward given counts beyond its history (on CPU tensors the C++ kernel refuses them:
    tests/otsort/test_robustness.py)."""
    xs = torch.rand(2, 5, dtype=torch.float64)
    y = torch.linspace(0, 1, 5, dtype=torch.float64).repeat(2, 1)
    la = torch.full((2, 5), -0.5, dtype=torch.float64)
    f, g, e, it, hist = torch.ops.relaxops.ot_sinkhorn_fwd(xs, y, la, la, 0.1, 0.1, 0.95, 1e-6, 50, True, "cpu")
    it[1] = 10**6
    args = (f, g, e, it, hist, 0.1, 0.1, 0.95, True, "cpu")
    torch.ops.relaxops.ot_sinkhorn_bwd(torch.ones_like(f), torch.zeros_like(g), xs, y, la, la, *args)


DEVICE_ONLY = {"ot_iterations": (_bad_iteration_counts, r"iters must be in \[0, history_len\]", None)}


@pytest.mark.parametrize("case", list(BAD) + list(DEVICE_ONLY))
def test_bad_values_fail_the_device_check(case, device_checks):
    """The device form of the same check (``torch._assert_async`` raises at once on CPU tensors)."""
    call, match, _ = (BAD | DEVICE_ONLY)[case]
    with pytest.raises(RuntimeError, match=match):
        call()


# --- on a GPU -------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case, backend", _pairs(["cuda", "triton"]))
def test_no_sync_on_gpu(case, backend):
    """Forward and backward on CUDA tensors under ``torch.cuda.set_sync_debug_mode``: no synchronisation, or
    exactly the one read docs/gpu.md lists."""
    _run(case, backend, "cuda")  # first call: compiles, caches, the module's connections
    torch.cuda.synchronize()
    inherent = CASES[case][1] is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn" if inherent else "error")
        try:
            _run(case, backend, "cuda")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) == (1 if inherent else 0), [str(w.message) for w in syncs]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_bad_values_on_gpu_end_in_a_device_assert(backend):
    """Bad lengths on CUDA tensors do not pass silently: the device-side assert surfaces at the next
    synchronisation (in a child process: it leaves the CUDA context unusable)."""
    proc = run_isolated(
        f"""
        import torch
        from relaxops.fastsort import soft_rank
        x = torch.randn(2, 4, device="cuda")
        y = soft_rank(x, lengths=torch.tensor([4, 5], device="cuda"), backend="{backend}")
        torch.cuda.synchronize()
        """
    )
    assert proc.returncode != 0 and "device-side assert" in proc.stderr, proc.stderr[-2000:]
