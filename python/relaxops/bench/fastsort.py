"""Fast soft sort / soft rank cases: ``relaxops.soft_rank`` and ``relaxops.soft_sort`` per backend against the peer
``torchsort`` (0.1.10, the same algorithm: Blondel et al.'s permutahedron projection by PAV, O(n log n)).

Every provider computes the same op with the same regularization (L2, strength 1.0: both libraries' default) on
the same float32 ``x [B, n]`` (requires grad), loss ``(out * g).sum()``: the rows compare costs of identical
results (tests/fastsort/test_compat_torchsort.py checks they agree). Grid: n = 100, 1000, 5000, B = 16, 128, fwd
and fwd+bwd; the default run has soft_rank fwd+bwd (the issue's goal: at least as fast as torchsort.soft_rank
at every size), ``--full`` adds the forward alone and soft_sort. The ``reference`` backend (PAV in Python loops)
runs up to B n = 16000.
"""

from __future__ import annotations

import torch

import relaxops
from relaxops._backend import unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "fastsort"
STRENGTH = 1.0
REFERENCE_LIMIT = 16000  # B * n up to which the Python reference is timed (B = 128, n = 5000 takes seconds)


def _case(op, n, batch, mode, default=False):
    params = dict(n=n, batch=batch, regularization="l2", strength=STRENGTH, dtype="float32")
    goal = ("torchsort", 1.0) if op == "soft_rank" else None
    add_case(Case(FAMILY, op, f"n={n} B={batch}", params, mode, "cpu", default, None, goal, items=batch, sweep="n"))


def _inputs(case):
    p = case.params
    kw = dict(
        generator=torch.Generator(case.device).manual_seed(0), device=case.device, dtype=getattr(torch, p["dtype"])
    )
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    return x, (None if case.mode == "fwd" else torch.randn(p["batch"], p["n"], **kw),)


def _ours(backend):
    def make(case):
        p = case.params
        x, cot = _inputs(case)
        fn = getattr(relaxops, case.op)
        return (lambda: (fn(x, p["regularization"], p["strength"], backend=backend),)), [x], cot

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        if backend == "reference" and case.params["batch"] * case.params["n"] > REFERENCE_LIMIT:
            return f"B*n > {REFERENCE_LIMIT}: the Python PAV is too slow to time"
        return unavailable_reason(backend, device)

    return Provider(backend, make, reference=backend == "reference", skip=skip)


def _torchsort_make(case):
    import torchsort

    p = case.params
    x, cot = _inputs(case)
    fn = getattr(torchsort, case.op)
    return (lambda: (fn(x, p["regularization"], p["strength"]),)), [x], cot


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("torchsort", _torchsort_make, reference=True, skip=lambda case: missing("torchsort")))

for _op in ("soft_rank", "soft_sort"):
    for _mode in ("fwd+bwd", "fwd"):
        for _batch in (16, 128):
            for _n in (100, 1000, 5000):
                _case(_op, _n, _batch, _mode, default=_op == "soft_rank" and _mode == "fwd+bwd")
for _op in ("soft_rank", "soft_sort"):  # GPU (unverified kernels: run where a GPU is lent)
    for _n in (1000, 5000):
        add_case(
            Case(
                FAMILY,
                _op,
                f"n={_n} B=128",
                dict(n=_n, batch=128, regularization="l2", strength=STRENGTH, dtype="float32"),
                "fwd+bwd",
                "cuda",
                _n == 1000,
                None,
                ("torchsort", 1.0) if _op == "soft_rank" else None,
                items=128,
                sweep="n",
            )
        )
