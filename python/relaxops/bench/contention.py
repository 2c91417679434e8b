"""Contention: each CPU kernel on T threads against one thread, while other processes keep the cores busy.

Users run relaxops beside DataLoader workers, other training processes and notebooks, so the cores a kernel's
threads wait for are often running someone else. ``--contention N`` starts N busy processes (one spinning Python
interpreter each, ended with the run, or on their own after ``MAX_LOAD_S`` or when the harness dies) and times
each job of the contention set alternately on one thread and on T threads (``--threads``; default: the threads
torch has), run for run, so that both see the same load. A row's ``ratio`` is the T-thread median over the
1-thread median: 1.5 or less holds (the goal), above 1 the extra threads cost time. ``--contention 0`` gives the
same comparison on an idle machine (the parallel speed-up, 1 / ratio).

The set is one or more headline cases per kernel family (``JOBS``), with PyTorch's own sort + softmax and matmul
as the anchor (family ``torch``: what the same load does to torch's kernels).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from .registry import Case, Provider, add_case, add_provider

MAX_LOAD_S = 3 * 3600  # a busy process ends on its own after this long
LOAD_RUN_S = 0.05  # timed runs under contention last at least this long (several scheduler slices)

# (case, provider): the kernels of every family, at the sizes users run them
JOBS = [
    ("sortnet.sort bitonic n=256 B=16 P fwd+bwd", "cpu"),
    ("sortnet.sort bitonic n=1024 B=16 values fwd+bwd", "cpu"),
    ("sortnet.rank bitonic n=1000 B=16 fwd+bwd", "cpu"),
    ("sortnet.rank bitonic n=1000 B=128 fwd+bwd", "cpu"),
    ("topk.topk splitter_selection n=1000 k=5 B=16 fwd+bwd", "cpu"),
    ("topk.loss splitter_selection n=1000 m=16 B=500 fwd+bwd", "cpu"),
    ("topk.neuralsort n=1000 k=5 B=16 fwd+bwd", "cpu"),
    ("topk.softsort n=1000 k=5 B=16 fwd+bwd", "cpu"),
    ("fastsort.soft_rank n=1000 B=16 fwd+bwd", "cpu"),
    ("fastsort.soft_rank n=1000 B=128 fwd+bwd", "cpu"),
    ("otsort.ot_sort n=1000 B=16 fwd+bwd", "cpu"),
    ("otsort.ot_rank n=1000 B=16 fwd+bwd", "cpu"),
    ("logic.layer N=2000 B=100 fwd+bwd", "cpu"),
    ("logic.layer N=8000 B=100 fwd+bwd", "cpu"),
    ("logic.conv C=16->64 16x16 k=3 d=3 B=64 fwd+bwd", "cpu"),
    ("logic.packed mnist_small B=16384 fwd", "packed"),
    ("render.rasterize ico5120 64^2 B=1 logistic/probabilistic fwd+bwd", "cpu"),
    ("algorithms_dp.bubble_sort n=20 B=64 fwd+bwd", "cpu"),
    ("algorithms_dp.edit_distance n=m=32 K=4 B=64 fwd+bwd", "cpu"),
    ("algorithms.shortest_path 12x12 B=64 fwd+bwd", "cpu"),
    ("training.assignment d=50 B=256 fwd", "cpu"),
    ("torch.sort_softmax n=1000 B=16 fwd+bwd", "torch"),
    ("torch.matmul 512x512 fwd", "torch"),
]
FAMILIES = tuple(dict.fromkeys(name.split(".", 1)[0] for name, _ in JOBS if not name.startswith("torch.")))


# ---- the anchor: PyTorch's own kernels under the same load ------------------------------------------------


def _torch_make(case):
    g = torch.Generator().manual_seed(0)
    if case.op == "sort_softmax":
        x = torch.randn(case.params["batch"], case.params["n"], generator=g).requires_grad_()
        cot = torch.randn(x.shape, generator=g)
        return (lambda: (torch.softmax(torch.sort(x, dim=-1).values, dim=-1),)), [x], (cot,)
    a, b = (torch.randn(case.params["n"], case.params["n"], generator=g) for _ in range(2))
    return (lambda: (a @ b,)), [], (None,)


add_case(Case("torch", "sort_softmax", "n=1000 B=16", {"n": 1000, "batch": 16}, "fwd+bwd", "cpu", sweep="n"))
add_case(Case("torch", "matmul", "512x512", {"n": 512}, "fwd", "cpu", sweep="n"))
add_provider("torch", Provider("torch", _torch_make, reference=True))


# ---- the load -------------------------------------------------------------------------------------------

_SPIN = """\
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(100000):
        pass
"""


class Load:
    """``with Load(n):`` n busy processes, started on entry and killed on exit."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [
            subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid()), str(MAX_LOAD_S)]) for _ in range(self.n)
        ]
        time.sleep(0.2 * (self.n > 0))  # let them start spinning
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


# ---- timing ---------------------------------------------------------------------------------------------


def measure_threads(fn, threads: int, budget: float, repeat: int | None, min_run_s: float) -> dict:
    """Alternate timed runs of back-to-back calls on 1 thread and on ``threads`` threads (torch's thread count,
    which the relaxops kernels follow) until about ``budget`` seconds of runs or ``repeat`` pairs. Returns the
    median and 20th/80th percentiles of the per-call time of each, and the ratio of the medians."""
    before = torch.get_num_threads()
    per = {1: [], threads: []}
    try:
        torch.set_num_threads(threads)
        fn()  # warm-up, and the size of a run
        t = time.perf_counter()
        fn()
        calls = max(1, round(min_run_s / max(time.perf_counter() - t, 1e-9)))
        spent = 0.0
        while len(per[1]) < repeat if repeat else (spent < budget or not per[1]):
            for k in (1, threads):
                torch.set_num_threads(k)
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                dt = time.perf_counter() - t
                per[k].append(dt / calls)
                spent += dt
    finally:
        torch.set_num_threads(before)
    row = {}
    for k, key in ((1, "t1"), (threads, "tn")):
        q = torch.tensor(per[k], dtype=torch.float64).quantile(torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
        ms = q.mul(1e3).tolist()
        row.update({f"{key}_median_ms": ms[0], f"{key}_p20_ms": ms[1], f"{key}_p80_ms": ms[2]})
    row.update(
        {
            "median_ms": row["tn_median_ms"],
            "p20_ms": row["tn_p20_ms"],
            "p80_ms": row["tn_p80_ms"],
            "threads": threads,
            "runs": len(per[1]),
            "calls_per_run": calls,
            "ratio": row["tn_median_ms"] / row["t1_median_ms"],
        }
    )
    return row
