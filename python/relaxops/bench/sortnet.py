"""Sorting-network cases: ``relaxops.sort`` and ``relaxops.rank`` per backend against the original ``diffsort``
and the peer ``torchsort``.

* ``sort``: every provider sorts the same ``x [B, n]`` (requires grad) with the same network, relaxation and
  steepness; with P the loss is ``(sorted * g1).sum() + (P * g2).sum()``, values-only ``(sorted * g1).sum()``.
  ``diffsort`` always builds P (it has no values-only mode), and the ``reference`` backend with P stores a matrix
  per layer: both cost about ``layers * B * n^3`` and are left out of the cases where that is too slow.
  ``torchsort.soft_sort`` joins the values-only cases.
* ``rank``: ``relaxops.rank`` (the expected positions under the relaxed permutation matrix of a sorting network,
  computed without the matrix: O(L n) per row) against ``torchsort.soft_rank`` (the projection onto the
  permutahedron with L2 regularization, Blondel et al. 2020, O(n log n)), loss ``(ranks * g).sum()``. Different
  algorithms for the same use (differentiable ranks for a ranking loss): steepness 10 and regularization_strength
  1.0 are each library's default, not the same softness, so the rows compare costs, not results. The goal
  (docs/math/sortnet.md §11): at least as fast as torchsort (>= 1x) at n = 100, 1000, 5000 and B = 16, 128,
  forward and fwd+bwd.
"""

from __future__ import annotations

import torch

import relaxops
from relaxops._backend import unavailable_reason
from relaxops.sortnet.networks import get_network

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "sortnet"
DENSE_COST_LIMIT = {"cpu": 1e10, "cuda": 1e13}  # layers * B * n^3 up to which the dense providers run
REFERENCE_RANK_LIMIT = 5e6  # B * comparators up to which the reference ranks run (n = 1000, B = 128: 0.25 s)
DIFFSORT_NETWORKS = {"bitonic": "bitonic", "bitonic_original": "bitonic", "odd_even": "odd_even"}
TORCHSORT_STRENGTH = 1.0  # torchsort's regularization_strength (its default)


def _case(device, network, n, batch, matrix=True, mode="fwd+bwd", default=False, goal=None, op="sort"):
    params = dict(
        network=network, n=n, batch=batch, matrix=matrix, relaxation="cauchy", steepness=10.0, dtype="float32"
    )
    label = f"{network} n={n} B={batch}" + ("" if op == "rank" else " P" if matrix else " values")
    out_bytes = batch * n * n * 4 if matrix else None
    add_case(Case(FAMILY, op, label, params, mode, device, default, out_bytes, goal, sweep="n"))


def _inputs(case):
    """x, and the cotangents (g1, g2) of the outputs (values or ranks, P); the same for every provider."""
    p = case.params
    gen = torch.Generator(case.device).manual_seed(0)
    kw = dict(generator=gen, device=case.device, dtype=getattr(torch, p["dtype"]))
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    if case.mode == "fwd":
        return x, (None, None)
    g1 = torch.randn(p["batch"], p["n"], **kw)
    g2 = torch.randn(p["batch"], p["n"], p["n"], **kw) if p["matrix"] and case.op == "sort" else None
    return x, (g1, g2)


def _too_dense(case):
    p = case.params
    cost = get_network(p["network"], p["n"]).num_layers * p["batch"] * p["n"] ** 3
    limit = DENSE_COST_LIMIT[torch.device(case.device).type]
    return f"layers*B*n^3 = {cost:.1e} > {limit:.0e}: too slow to time" if cost > limit else None


def _too_many_comparators(case):
    p = case.params
    work = p["batch"] * get_network(p["network"], p["n"]).num_comparators
    return (
        f"B * comparators = {work:.1e} > {REFERENCE_RANK_LIMIT:.0e}: too slow to time"
        if work > REFERENCE_RANK_LIMIT
        else None
    )


def _ours(backend):
    def make(case):
        p = case.params
        x, cotangents = _inputs(case)

        def forward():
            if case.op == "rank":
                return (relaxops.rank(x, p["network"], p["relaxation"], p["steepness"], backend=backend),)
            return relaxops.sort(
                x, p["network"], p["relaxation"], p["steepness"], return_matrix=p["matrix"], backend=backend
            )

        return forward, [x], cotangents

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        dense = backend == "reference" and case.params["matrix"]
        return (
            unavailable_reason(backend, device)
            or (_too_dense(case) if dense else None)
            or (_too_many_comparators(case) if backend == "reference" and case.op == "rank" else None)
        )

    return Provider(backend, make, reference=backend == "reference", skip=skip)


def _diffsort_make(case):
    import diffsort

    p = case.params
    x, cotangents = _inputs(case)
    net = diffsort.DiffSortNet(
        DIFFSORT_NETWORKS[p["network"]],
        p["n"],
        device=case.device,
        steepness=p["steepness"],
        distribution=p["relaxation"],
    )
    return (lambda: net(x)), [x], cotangents


def _diffsort_skip(case):
    p = case.params
    if case.op != "sort":
        return "the rank cases compare with torchsort"
    reason = missing("diffsort")
    if reason:
        return reason
    if p["network"] not in DIFFSORT_NETWORKS:
        return f"diffsort has no {p['network']} network"
    if p["network"] == "bitonic" and p["n"] & (p["n"] - 1):
        return "diffsort's bitonic wiring differs from ours when n is not a power of two"
    return _too_dense(case)


def _torchsort_make(case):
    import torchsort

    x, cotangents = _inputs(case)
    fn = torchsort.soft_rank if case.op == "rank" else torchsort.soft_sort
    return (lambda: (fn(x, regularization_strength=TORCHSORT_STRENGTH),)), [x], cotangents


def _torchsort_skip(case):
    if case.op == "sort" and case.params["matrix"]:
        return "torchsort has no permutation matrix (it joins the values-only and rank cases)"
    return missing("torchsort")


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("diffsort", _diffsort_make, reference=True, skip=_diffsort_skip))
add_provider(FAMILY, Provider("torchsort", _torchsort_make, reference=True, skip=_torchsort_skip))

# CPU, default run: bitonic with and without P at n = 32, 128, 256 (the plotted sweeps; with P at n = 256 is the
# issue's target: B = 16, fwd+bwd, >= 50x faster than diffsort), the odd-even target (n = 128, also >= 50x), and
# ranks against torchsort, fwd+bwd, at n = 100 and 1000 (B = 16) and n = 5000 (B = 128, the issue-16 case whose
# matrix did not fit). Every diffsort or dense-reference call of these takes under a second on 2 cores (load
# average ~3). --full adds n = 1024, the n = 256 target's forward and backward alone, and the rest of the rank
# grid (n = 100, 1000, 5000 x B = 16, 128 x fwd, fwd+bwd).
for _n in (32, 128, 256, 1024):
    for _matrix in (True, False):
        _target = _n == 256 and _matrix
        _case("cpu", "bitonic", _n, 16, _matrix, default=_n <= 256, goal=("diffsort", 50.0) if _target else None)
for _mode in ("fwd", "bwd"):
    _case("cpu", "bitonic", 256, 16, mode=_mode)
_case("cpu", "odd_even", 128, 16, default=True, goal=("diffsort", 50.0))
for _n in (100, 1000, 5000):
    for _b in (16, 128):
        for _mode in ("fwd+bwd", "fwd"):
            _case(
                "cpu",
                "bitonic",
                _n,
                _b,
                matrix=False,
                mode=_mode,
                op="rank",
                goal=("torchsort", 1.0),
                default=_mode == "fwd+bwd" and (_n, _b) in ((100, 16), (1000, 16), (5000, 128)),
            )

# GPU: bitonic n=1024, B=128 (P is 512 MiB), with and without P, and the forward and backward alone; ranks.
for _mode in ("fwd+bwd", "fwd", "bwd"):
    _case("cuda", "bitonic", 1024, 128, mode=_mode, default=_mode == "fwd+bwd")
_case("cuda", "bitonic", 1024, 128, matrix=False)
for _n in (100, 1000, 5000):
    _case("cuda", "bitonic", _n, 128, matrix=False, op="rank", default=_n == 1000)
