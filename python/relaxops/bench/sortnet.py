"""Sorting-network cases: ``relaxops.sort`` per backend against the original ``diffsort``.

Every provider sorts the same ``x [B, n]`` (requires grad) with the same network, relaxation and steepness;
with P the loss is ``(sorted * g1).sum() + (P * g2).sum()``, values-only ``(sorted * g1).sum()``.
``diffsort`` always builds P (it has no values-only mode), and the ``reference`` backend with P stores a
matrix per layer: both cost about ``layers * B * n^3`` and are left out of the cases where that is too slow.
"""

from __future__ import annotations

import importlib.util

import torch

import relaxops
from relaxops._backend import unavailable_reason
from relaxops.sortnet.networks import get_network

from .registry import Case, Provider, add_case, add_provider

FAMILY = "sortnet"
DENSE_COST_LIMIT = {"cpu": 1e10, "cuda": 1e13}  # layers * B * n^3 up to which the dense providers run
DIFFSORT_NETWORKS = {"bitonic": "bitonic", "bitonic_original": "bitonic", "odd_even": "odd_even"}


def _case(device, network, n, batch, matrix=True, mode="fwd+bwd", default=False, goal=None):
    params = dict(network=network, n=n, batch=batch, matrix=matrix, relaxation="cauchy", steepness=10.0,
                  dtype="float32")
    label = f"{network} n={n} B={batch} {'P' if matrix else 'values'}"
    out_bytes = batch * n * n * 4 if matrix else None
    add_case(Case(FAMILY, "sort", label, params, mode, device, default, out_bytes, goal))


def _inputs(case):
    """x, and the cotangents (g1, g2) for a loss; the same for every provider (fixed seed)."""
    p = case.params
    gen = torch.Generator(case.device).manual_seed(0)
    kw = dict(generator=gen, device=case.device, dtype=getattr(torch, p["dtype"]))
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    if case.mode == "fwd":
        return x, (None, None)
    g1 = torch.randn(p["batch"], p["n"], **kw)
    g2 = torch.randn(p["batch"], p["n"], p["n"], **kw) if p["matrix"] else None
    return x, (g1, g2)


def _too_dense(case):
    p = case.params
    cost = get_network(p["network"], p["n"]).num_layers * p["batch"] * p["n"] ** 3
    limit = DENSE_COST_LIMIT[torch.device(case.device).type]
    return f"layers*B*n^3 = {cost:.1e} > {limit:.0e}: too slow to time" if cost > limit else None


def _ours(backend):
    def make(case):
        p = case.params
        x, cotangents = _inputs(case)

        def forward():
            return relaxops.sort(x, p["network"], p["relaxation"], p["steepness"], return_matrix=p["matrix"],
                                 backend=backend)
        return forward, [x], cotangents

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        dense = backend == "reference" and case.params["matrix"]
        return unavailable_reason(backend, device) or (_too_dense(case) if dense else None)

    return Provider(backend, make, reference=backend == "reference", skip=skip)


def _diffsort_make(case):
    import diffsort

    p = case.params
    x, cotangents = _inputs(case)
    net = diffsort.DiffSortNet(DIFFSORT_NETWORKS[p["network"]], p["n"], device=case.device,
                               steepness=p["steepness"], distribution=p["relaxation"])
    return (lambda: net(x)), [x], cotangents


def _diffsort_skip(case):
    p = case.params
    if importlib.util.find_spec("diffsort") is None:
        return "diffsort is not installed"
    if p["network"] not in DIFFSORT_NETWORKS:
        return f"diffsort has no {p['network']} network"
    if p["network"] == "bitonic" and p["n"] & (p["n"] - 1):
        return "diffsort's bitonic wiring differs from ours when n is not a power of two"
    return _too_dense(case)


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("diffsort", _diffsort_make, reference=True, skip=_diffsort_skip))

# CPU: the targets (fwd+bwd with P, B=16, >= 50x faster than diffsort: bitonic n=256 and odd-even
# n=128), a grid over n with and without P, and the bitonic target's forward and backward alone.
for _n in (32, 128, 256, 1024):
    for _matrix in (True, False):
        _target = _n == 256 and _matrix
        _case("cpu", "bitonic", _n, 16, _matrix, default=_target, goal=("diffsort", 50.0) if _target else None)
for _mode in ("fwd", "bwd"):
    _case("cpu", "bitonic", 256, 16, mode=_mode)
_case("cpu", "odd_even", 128, 16, default=True, goal=("diffsort", 50.0))

# GPU: bitonic n=1024, B=128 (P is 512 MiB), with and without P, and the forward and backward alone.
for _mode in ("fwd+bwd", "fwd", "bwd"):
    _case("cuda", "bitonic", 1024, 128, mode=_mode, default=_mode == "fwd+bwd")
_case("cuda", "bitonic", 1024, 128, matrix=False)
