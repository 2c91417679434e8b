"""Fused relaxed algorithms, the dynamic programs: ``bubble_sort`` and ``edit_distance`` per backend against the
AlgoVision programs they replace (docs/math/algorithms.md §4.1 and §4.4, built with ``algovision`` 0.1.2 when
installed).

Every provider computes the same relaxation on the same float32 inputs, AlgoVision with its defaults (``epsilon =
1e-5``, ``max_iter = 1024``), ours with the same While settings: bubble sort of ``x [B, n]`` (``beta = 5``; outputs
sorted values, swaps and any_swap, each with a fixed random cotangent), edit distance of letter distributions ``s
[B, n, K]``, ``t [B, n, K]`` (softmax of normal logits; ``Min(beta = 5)``; the distance with a random cotangent).
AlgoVision also skips an If branch whose probability is <= epsilon for the whole batch, which ours never does: on
these random batches of 64 no branch is skipped, so the results agree to rounding. Grid: bubble n = 5, 10, 20, 50,
edit distance n = m = 8, 16, 32 with K = 2 and 4, B = 64, fwd and fwd+bwd; the default run has the fwd+bwd cases
(goal: the cpu kernels >= 20x AlgoVision) at two sizes each.
"""

from __future__ import annotations

import torch

from relaxops._backend import unavailable_reason
from relaxops.algorithms import programs
from relaxops.algorithms.functional import bubble_sort, edit_distance

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "algorithms_dp"
BETA = 5.0
BATCH = 64


def _case(op, label, params, mode, default):
    goal = ("algovision", 20.0) if mode == "fwd+bwd" else None
    add_case(
        Case(
            FAMILY,
            op,
            label,
            dict(params, batch=BATCH, dtype="float32"),
            mode,
            "cpu",
            default,
            None,
            goal,
            items=BATCH,
            sweep="n",
        )
    )


def _generator(case):
    return torch.Generator(case.device).manual_seed(0)


def _inputs(case):
    """Leaf inputs and the cotangents of the outputs (bubble: sorted, swaps, any_swap; edit: the distance)."""
    p = case.params
    kw = dict(generator=_generator(case), device=case.device, dtype=getattr(torch, p["dtype"]))
    B, n = p["batch"], p["n"]
    fwd = case.mode == "fwd"
    if case.op == "bubble_sort":
        x = torch.randn(B, n, **kw).requires_grad_()
        cot = (None, None, None) if fwd else (torch.randn(B, n, **kw), torch.randn(B, **kw), torch.randn(B, **kw))
        return [x], cot
    s = torch.softmax(torch.randn(B, n, p["K"], **kw) * 2, -1).requires_grad_()
    t = torch.softmax(torch.randn(B, n, p["K"], **kw) * 2, -1).requires_grad_()
    return [s, t], (None if fwd else torch.randn(B, **kw),)


def _ours(backend):
    def make(case):
        inputs, cot = _inputs(case)
        if case.op == "bubble_sort":
            (x,) = inputs
            return (lambda: tuple(bubble_sort(x, BETA, backend=backend))), inputs, cot
        s, t = inputs
        return (lambda: (edit_distance(s, t, BETA, backend=backend),)), inputs, cot

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        return unavailable_reason(backend, device)

    return Provider(backend, make, skip=skip)


def _algovision_make(case):
    import warnings

    import algovision

    inputs, cot = _inputs(case)
    build = programs.bubble_sort_program if case.op == "bubble_sort" else programs.edit_distance_program
    program = build(BETA, M=algovision)  # the programs of docs/math/algorithms.md §4.1, §4.4 with AlgoVision's classes

    def forward():
        with warnings.catch_warnings():  # its list indexing is deprecated by PyTorch (docs/math/algorithms.md §2.5)
            warnings.simplefilter("ignore", UserWarning)
            out = program(*inputs)
        return tuple(out) if case.op == "bubble_sort" else (out[:, -1, -1],)

    return forward, inputs, cot


add_provider(FAMILY, Provider("algovision", _algovision_make, reference=True, skip=lambda case: missing("algovision")))
for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))

for _mode in ("fwd", "fwd+bwd"):
    for _n in (5, 10, 20, 50):
        _case("bubble_sort", f"n={_n} B={BATCH}", dict(n=_n), _mode, default=_mode == "fwd+bwd" and _n in (5, 20))
    for _K in (2, 4):
        for _n in (8, 16, 32):
            _case(
                "edit_distance",
                f"n=m={_n} K={_K} B={BATCH}",
                dict(n=_n, K=_K),
                _mode,
                default=_mode == "fwd+bwd" and _K == 4 and _n in (8, 32),
            )
