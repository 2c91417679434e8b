"""The CPU kernels' parallel loops (csrc/common/cpu_parallel.h), on PyTorch's OpenMP threads and on relaxops' own
pool: torch's thread count, results independent of it, errors raised from inside parallel loops, forked children,
concurrent callers.

How the kernels hold on a shared CPU is measured by the harness (``bench/run.py --contention N``), not here."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import relaxops
import torch
from relaxops import _ext
from relaxops.training.solvers import assignment

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")


@pytest.fixture
def threads():
    """Sets torch's thread count for the test, restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture(params=["torch_threads", "pool"])
def executor(request):
    """Loops on PyTorch's OpenMP threads where they are found and on time (the default), or on the pool only."""
    _ext._C.use_torch_threads(request.param == "torch_threads")
    yield request.param
    _ext._C.use_torch_threads(True)


@pytest.mark.skipif("OpenMP" not in torch.__config__.parallel_info(), reason="torch is not built with OpenMP")
def test_torch_openmp_threads_are_found():
    assert _ext._C.torch_threads_found()


def test_kernels_follow_torch_threads(threads):
    for t in (1, 3, 2):
        threads(t)
        assert _ext._C.num_threads() == t  # any lookup of a kernel syncs the pool with torch


def _ops():
    """Ops whose CPU kernels take their parallel paths at these sizes, with their inputs and output gradients."""
    g = torch.Generator().manual_seed(0)
    x_sort = torch.randn(3, 70, generator=g, dtype=torch.float64)  # matrix backward: fewer rows than threads
    x_rank = torch.randn(40, 600, generator=g)  # 3 row tiles
    x_topk = torch.randn(16, 300, generator=g)
    x_soft = torch.randn(130, 8200, generator=g)  # B n >= 2^20
    layer = relaxops.LogicLayer(3000, 3000)
    x_logic = torch.rand(40, 3000, generator=g)
    theta = torch.rand(300, 20, 20, generator=g)
    return [
        ("sort", lambda x: relaxops.sort(x), x_sort),
        ("rank", lambda x: relaxops.rank(x), x_rank),
        ("topk", lambda x: relaxops.topk(x, 7), x_topk),
        ("soft_rank", lambda x: relaxops.soft_rank(x), x_soft),
        ("logic", layer, x_logic),
        ("assignment", lambda t: assignment(t, backend="cpu"), theta),
    ]


def _run(fn, x):
    x = x.clone().requires_grad_(x.dtype != torch.int64)
    outs = fn(x)
    outs = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if o is not None]
    if not outs[0].requires_grad:
        return outs, []
    g = torch.Generator().manual_seed(1)
    cot = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    return outs, list(torch.autograd.grad(outs, [x], cot))


@pytest.mark.parametrize("name", [name for name, _, _ in _ops()])
def test_results_do_not_depend_on_threads(threads, executor, name):
    _, fn, x = next(op for op in _ops() if op[0] == name)
    results = []
    for t in (1, 2, 3):
        threads(t)
        results.append(_run(fn, x))
    for outs, grads in results[1:]:
        for a, b in zip(outs + grads, results[0][0] + results[0][1]):
            assert torch.equal(a, b), name  # bit for bit: every item is computed by one thread in a fixed order


def test_error_inside_a_parallel_loop_is_raised(threads, executor):
    """A check that fails in an item run by a pool thread raises in the caller (no abort, no hang)."""
    threads(2)
    B, n = 64, 1 << 14  # B n = 2^20: the fastsort backward runs its rows in parallel
    x = torch.randn(B, n)
    out, grad, grad_x = torch.empty_like(x), torch.ones_like(x), torch.empty_like(x)
    perm = torch.arange(n).repeat(B, 1)
    perm[B - 1, 0] = n  # the last row's permutation is out of range
    block = torch.zeros(B, n, dtype=torch.int32)
    with pytest.raises(ValueError, match="perm must hold indices in"):
        _ext._C.fastsort_backward(
            0,
            1,
            0,
            1.0,
            0,
            B,
            n,
            _ext.ptr(grad),
            _ext.ptr(out),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(block),
            _ext.ptr(grad_x),
        )
    # the pool is usable afterwards
    _, fn, x = _ops()[1]
    _run(fn, x)


def _child(queue, fn, x):
    # torch's own parallel ops are not fork-safe (libgomp's pool): the child runs only the op, on small tensors;
    # the results go back as bytes (a tensor would go through shared memory)
    outs, grads = _run(fn, x)
    queue.put((_ext._C.torch_threads_found(), [t.detach().numpy().tobytes() for t in outs + grads]))


def test_forked_child_runs_parallel_kernels(threads):
    """A forked child (a DataLoader worker) gets a pool of its own and never uses the OpenMP threads: the parent's
    threads do not exist there."""
    threads(2)
    _, fn, x = _ops()[1]
    expected = _run(fn, x)  # the parent's pool has started
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue, fn, x))
    child.start()
    try:
        team_in_child, got = queue.get(timeout=120)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert not team_in_child
    assert got == [t.detach().numpy().tobytes() for t in expected[0] + expected[1]]


def test_concurrent_callers(threads, executor):
    """Python threads calling kernels at once (the kernels release the GIL): one runs on the pool, the others on
    their own thread; every result is right."""
    threads(2)
    ops = _ops()
    expected = {name: _run(fn, x) for name, fn, x in ops}
    got, errors = {}, []

    def call(name, fn, x):
        try:
            for _ in range(3):
                got[name] = _run(fn, x)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=call, args=op) for op in ops]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    assert not errors
    for name, (outs, grads) in expected.items():
        for a, b in zip(outs + grads, got[name][0] + got[name][1]):
            assert torch.equal(a, b), name


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_threads_are_reused(threads, executor):
    """Repeated calls do not add threads to the process."""
    threads(3)
    _, fn, x = _ops()[1]
    _run(fn, x)
    count = len(os.listdir("/proc/self/task"))
    for _ in range(5):
        _run(fn, x)
    assert len(os.listdir("/proc/self/task")) == count
