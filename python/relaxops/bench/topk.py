"""Top-k cases: ``relaxops.topk``, ``TopKCrossEntropyLoss``, ``neuralsort`` / ``softsort`` against ``difftopk``.

* ``topk``: every provider computes ``X_top [B, n, k]`` of the same ``x`` (loss ``(X_top * g).sum()``). Ours runs
  the case's network; the ``difftopk`` provider always runs difftopk's bitonic network with its dense
  evaluation (its sparse one needs torch-sparse), so each row's speed-up reads "against difftopk's bitonic".
* ``loss``: ``TopKCrossEntropyLoss`` with top-m preselection; difftopk runs ``'bitonic__non_sparse'``.
* ``neuralsort`` / ``softsort`` with ``k``: our fused k-column kernels against difftopk's full ``n x n`` modules
  (whose last ``k`` columns are the same numbers).
"""

from __future__ import annotations

import contextlib
import io

import torch

import relaxops
from relaxops._backend import unavailable_reason
from relaxops.sortnet.networks import get_network

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "topk"
# layers * B * n^2 up to which difftopk's dense bitonic network runs (it stores two [B, n, n/2] alpha matrices
# per layer: n = 1000, B = 16 takes ~6 s and ~3.5 GB)
DENSE_COST_LIMIT = {"cpu": 1e10, "cuda": 1e12}


def _difftopk():
    with contextlib.redirect_stdout(io.StringIO()):  # it prints a note when torch-sparse is missing
        import difftopk
    return difftopk


def _case(device, op, label, params, mode="fwd+bwd", default=False, goal=None):
    params = {"relaxation": "cauchy", "steepness": 10.0, "dtype": "float32", **params}
    add_case(Case(FAMILY, op, label, params, mode, device, default, None, goal, sweep="n"))


def _gen(case):
    return dict(
        generator=torch.Generator(case.device).manual_seed(0),
        device=case.device,
        dtype=getattr(torch, case.params["dtype"]),
    )


def _topk_inputs(case):
    p = case.params
    kw = _gen(case)
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    return x, (torch.randn(p["batch"], p["n"], p["k"], **kw),)


def _loss_inputs(case):
    p = case.params
    kw = _gen(case)
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    labels = torch.randint(0, p["n"], (p["batch"],), generator=kw["generator"], device=case.device)
    return x, labels, (torch.ones((), device=case.device, dtype=x.dtype),)


def _too_dense(case):
    p = case.params
    cost = get_network("bitonic_original", p["n"]).num_layers * p["batch"] * p["n"] ** 2
    limit = DENSE_COST_LIMIT[torch.device(case.device).type]
    return f"layers*B*n^2 = {cost:.1e} > {limit:.0e}: too slow to time" if cost > limit else None


def _ours(backend):
    def make(case):
        p = case.params
        if case.op == "topk":
            x, cot = _topk_inputs(case)
            return (
                (lambda: (relaxops.topk(x, p["k"], p["network"], p["relaxation"], p["steepness"], backend=backend),)),
                [x],
                cot,
            )
        if case.op == "loss":
            x, labels, cot = _loss_inputs(case)
            loss = relaxops.TopKCrossEntropyLoss(
                p["p_k"], p["network"], p["relaxation"], p["steepness"], m=p["m"], backend=backend
            )
            return (lambda: (loss(x, labels),)), [x], cot
        x, cot = _topk_inputs(case)
        fn = getattr(relaxops, case.op)
        return (lambda: (fn(x, 1.0 / p["steepness"], k=p["k"], backend=backend),)), [x], cot

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        return unavailable_reason(backend, device)

    return Provider(backend, make, reference=backend == "reference", skip=skip)


def _difftopk_make(case):
    difftopk = _difftopk()
    p = case.params
    if case.op == "topk":
        x, cot = _topk_inputs(case)
        net = difftopk.DiffTopkNet(
            "bitonic",
            p["n"],
            p["k"],
            sparse=False,
            device=case.device,
            steepness=p["steepness"],
            distribution=p["relaxation"],
        )
        return (lambda: (net(x)[1],)), [x], cot
    if case.op == "loss":
        x, labels, cot = _loss_inputs(case)
        loss = difftopk.TopKCrossEntropyLoss(
            "bitonic__non_sparse",
            p["steepness"],
            p["p_k"],
            p["n"],
            m=p["m"],
            distribution=p["relaxation"],
            device=case.device,
        )
        return (lambda: (loss(x, labels),)), [x], cot
    x, cot = _topk_inputs(case)
    if case.op == "neuralsort":
        module = difftopk.NeuralSort(1.0 / p["steepness"])
        return (lambda: (module(x)[..., -p["k"] :],)), [x], cot
    module = difftopk.SoftSort(1.0 / p["steepness"])
    return (lambda: (module(-x).transpose(-2, -1)[..., -p["k"] :],)), [x], cot


def _difftopk_skip(case):
    return missing("difftopk") or (_too_dense(case) if case.op == "topk" else None)


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("difftopk", _difftopk_make, reference=True, skip=_difftopk_skip))

# CPU: splitter selection at n = 250, 500, 1000 (the plotted sweep) and our bitonic network at n = 1000, both
# against difftopk's bitonic network (n = 1000, k = 5, B = 16, fwd+bwd: the goal is >= 100x faster), and the loss.
# The default run stops at n = 500: difftopk's call at n = 1000 takes ~7.6 s and 7 GB on 2 cores (1.7 GB at
# n = 500). --full adds n = 1000, the forward and backward alone, n = 10450, and NeuralSort / SoftSort.
for _n in (250, 500, 1000):
    _case(
        "cpu",
        "topk",
        f"splitter_selection n={_n} k=5 B=16",
        dict(network="splitter_selection", n=_n, k=5, batch=16),
        default=_n < 1000,
        goal=("difftopk", 100.0) if _n == 1000 else None,
    )
_case(
    "cpu", "topk", "bitonic n=1000 k=5 B=16", dict(network="bitonic", n=1000, k=5, batch=16), goal=("difftopk", 100.0)
)
for _net in ("splitter_selection", "bitonic"):
    for _mode in ("fwd", "bwd"):
        _case("cpu", "topk", f"{_net} n=1000 k=5 B=16", dict(network=_net, n=1000, k=5, batch=16), mode=_mode)
_case("cpu", "topk", "splitter_selection n=10450 k=5 B=16", dict(network="splitter_selection", n=10450, k=5, batch=16))
_case(
    "cpu",
    "loss",
    "splitter_selection n=1000 m=16 B=500",
    dict(network="splitter_selection", n=1000, batch=500, m=16, p_k=[0.2] * 5),
    default=True,
)
for _op in ("neuralsort", "softsort"):
    _case("cpu", _op, "n=1000 k=5 B=16", dict(n=1000, k=5, batch=16, steepness=1.0))

# GPU: the loss at batch 500, 1000 classes, m = 16, P_K = [.2] * 5 (goal: >= 20x against difftopk), and the
# networks at n = 1000 and n = 10450 with k = 5.
for _net in ("splitter_selection", "bitonic"):
    _case(
        "cuda",
        "loss",
        f"{_net} n=1000 m=16 B=500",
        dict(network=_net, n=1000, batch=500, m=16, p_k=[0.2] * 5),
        default=_net == "splitter_selection",
        goal=("difftopk", 20.0),
    )
    for _n in (1000, 10450):
        _case("cuda", "topk", f"{_net} n={_n} k=5 B=128", dict(network=_net, n=_n, k=5, batch=128), default=_n == 1000)
for _op in ("neuralsort", "softsort"):
    _case("cuda", _op, "n=1000 k=5 B=128", dict(n=1000, k=5, batch=128, steepness=1.0))
