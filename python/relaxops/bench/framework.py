"""The relaxed-algorithm framework on programs without a fused kernel: relaxops' plan against AlgoVision 0.1.2
interpreting the same program (built by the same builder of ``relaxops.algorithms.programs`` from each package's
classes). The programs are the bubble sort, edit distance and shortest path of docs/math/algorithms.md §4; float32,
AlgoVision's default hyper-parameters (``epsilon = 1e-5``), loss ``sum(out * g)`` over every output. ``relaxops`` runs
the eager plan, ``relaxops-traced`` the traced plan compiled by inductor (``Algorithm(..., compile="inductor")``)."""

from __future__ import annotations

import time

import torch

from relaxops.algorithms import framework, programs

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "framework"
GOAL = ("algovision", 5.0)  # goal: a generic program at least 5x faster than AlgoVision


def _case(op, label, params, mode, default=False):
    add_case(
        Case(FAMILY, op, label, params, mode, "cpu", default, None, GOAL if mode == "fwd+bwd" else None, sweep="n")
    )


for _mode in ("fwd", "fwd+bwd"):
    for _n in (5, 10, 20):
        _case("bubble_sort", f"n={_n} B=64", dict(n=_n, batch=64), _mode, default=_n == 20)
    for _n in (8, 16):
        _case("edit_distance", f"n=m={_n} K=4 B=64", dict(n=_n, k=4, batch=64), _mode, default=_n == 16)
    for _n in (5, 12):
        _case("shortest_path", f"{_n}x{_n} iters=25 B=64", dict(n=_n, batch=64), _mode, default=_n == 12)


def _build(case, M, **kw):
    p = case.params
    gen = torch.Generator().manual_seed(0)
    if case.op == "bubble_sort":
        return programs.bubble_sort_program(5.0, M=M, **kw), [torch.randn(p["batch"], p["n"], generator=gen)]
    if case.op == "edit_distance":
        s, t = (torch.softmax(2 * torch.randn(p["batch"], p["n"], p["k"], generator=gen), -1) for _ in range(2))
        return programs.edit_distance_program(5.0, M=M, **kw), [s, t]
    cost = torch.sigmoid(4 * torch.randn(p["batch"], p["n"], p["n"], generator=gen)) + 0.2
    return programs.shortest_path_program(10.0, 25, M=M, **kw), [cost]


def _make(M, **kw):
    def make(case):
        alg, xs = _build(case, M, **kw)
        xs = [x.requires_grad_(case.mode != "fwd") for x in xs]
        start = time.perf_counter()
        with torch.set_grad_enabled(case.mode != "fwd"):  # the call that captures and compiles a traced plan
            outs = alg(*xs)
        setup_s = time.perf_counter() - start
        outs = outs if isinstance(outs, tuple) else (outs,)
        gen = torch.Generator().manual_seed(1)
        cot = tuple(None if case.mode == "fwd" else torch.randn(o.shape, generator=gen) for o in outs)

        def forward():
            o = alg(*xs)
            return o if isinstance(o, tuple) else (o,)

        if kw:
            forward.setup_s = setup_s  # capture + compile, reported apart from the timed calls
        return forward, xs, cot

    return make


def _algovision_make(case):
    import warnings

    import algovision

    warnings.filterwarnings("ignore", message="Using a non-tuple sequence", category=UserWarning)
    return _make(algovision)(case)


add_provider(FAMILY, Provider("relaxops", _make(framework)))
# the same program as a traced plan compiled by inductor (Algorithm(..., compile="inductor")); the first call, which
# captures and compiles it, is made before timing and its duration saved as the row's setup_s
add_provider(
    FAMILY,
    Provider(
        "relaxops-traced",
        _make(framework, compile="inductor"),
        full_only="inductor compiles each traced plan for minutes on 2 cores",
    ),
)
add_provider(FAMILY, Provider("algovision", _algovision_make, reference=True, skip=lambda case: missing("algovision")))
