"""Relaxed algorithm cases: the fused kernels of ``relaxops.algorithms`` per backend against the AlgoVision (0.1.2)
programs they replace, run by AlgoVision's own interpreter of relaxed control flow (``Algorithm``, ``For``,
``While``, ``Let``).
"""

from __future__ import annotations

import torch

from relaxops._backend import unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "algorithms"

# --- shortest path ------------------------------------------------------------------------------------------------
# ``shortest_path(cost, beta=10, n_iter=25)`` (the AlgoVision example's values: 25 Bellman-Ford rounds and 25
# traceback steps, probabilistic T-conorm, "for" loop) on float32 ``cost [64, S, S]`` drawn as the example draws them
# (sigmoid(4 z) + 0.2), loss ``(path * g).sum()``. AlgoVision runs its example program (docs/math/algorithms.md §4.2)
# built from its classes here; it creates its state in torch's default dtype (float32, as the inputs). Grid: S = 5, 10,
# 12 (the Warcraft maps), 20; fwd and fwd+bwd; goal (fwd+bwd): the fused CPU kernel >= 20x AlgoVision at every size.

SP_SIZES = (5, 10, 12, 20)
SP_BATCH = 64
SP_ROUNDS = 25
SP_BETA = 10.0


def algovision_shortest_path(beta: float, n_iter: int):
    """AlgoVision's shortest-path example as a program of its classes: d <- softmin-relaxed Bellman-Ford rounds over
    the 3 x 3 neighbourhood (unfold, centre dropped), then n_iter traceback steps with the probabilistic sum."""
    from algovision import Algorithm, For, Input, Let, Output, Var

    def relax(d, cost):
        B, H, W = cost.shape
        patches = torch.nn.functional.unfold(d.unsqueeze(1), kernel_size=3).transpose(1, 2)  # [B, H W, 9]
        N = torch.cat([patches[..., :4], patches[..., 5:]], -1).reshape(B, H, W, 8)
        pi = torch.nn.functional.softmin(N * beta, dim=-1)
        return torch.nn.functional.pad((pi * N).sum(-1) + cost, (1, 1, 1, 1), value=1e12), pi

    def step(trace, pi):
        H, W = trace.shape[1:]
        mass = torch.nn.functional.pad(trace.unsqueeze(-1) * pi, (0, 0, 1, 1, 1, 1))
        offsets = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]
        return sum(mass[:, 1 - a : 1 - a + H, 1 - b : 1 - b + W, k] for k, (a, b) in enumerate(offsets))

    return Algorithm(
        Input("cost"),
        Var("d", lambda cost: torch.full((cost.shape[1] + 2, cost.shape[2] + 2), 1e12)),
        Var("pi", lambda cost: torch.zeros(cost.shape[1], cost.shape[2], 8)),
        Var("trace", lambda cost: torch.zeros(cost.shape[1], cost.shape[2])),
        Var("path", lambda cost: torch.zeros(cost.shape[1], cost.shape[2])),
        Let("d", [1, 1], 0.0),
        Let("trace", [-1, -1], 1.0),
        For("i", n_iter, Let(["d", "pi"], relax), Let("d", [1, 1], 0.0)),
        For("j", n_iter, Let("path", lambda path, trace: path + trace - path * trace), Let("trace", step)),
        Output("path"),
        beta=beta,
    )


def _sp_inputs(case):
    p = case.params
    kw = dict(
        generator=torch.Generator(case.device).manual_seed(0), device=case.device, dtype=getattr(torch, p["dtype"])
    )
    shape = (p["batch"], p["size"], p["size"])
    cost = (torch.sigmoid(torch.randn(shape, **kw) * 4) + 0.2).requires_grad_()
    return cost, (None if case.mode == "fwd" else torch.randn(shape, **kw),)


def _sp_ours(backend):
    def make(case):
        from relaxops.algorithms.functional import shortest_path

        p = case.params
        cost, cot = _sp_inputs(case)
        return (lambda: (shortest_path(cost, p["beta"], p["n_iter"], backend=backend),)), [cost], cot

    def skip(case):
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        return unavailable_reason(backend, device)

    return Provider(backend, make, skip=skip)


def _sp_algovision_make(case):
    p = case.params
    cost, cot = _sp_inputs(case)
    program = algovision_shortest_path(p["beta"], p["n_iter"])
    if cost.device.type != "cpu":
        raise ValueError("the AlgoVision program creates its state on the CPU")
    return (lambda: (program(cost),)), [cost], cot


def _sp_algovision_skip(case):
    reason = missing("algovision")
    if reason:
        return reason
    if case.device != "cpu":
        return "the example program creates its state on the CPU (its device argument is not wired here)"
    return None


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _sp_ours(_backend))
add_provider(FAMILY, Provider("algovision", _sp_algovision_make, reference=True, skip=_sp_algovision_skip))

for _mode in ("fwd+bwd", "fwd"):
    for _size in SP_SIZES:
        add_case(
            Case(
                FAMILY,
                "shortest_path",
                f"{_size}x{_size} B={SP_BATCH}",
                dict(size=_size, batch=SP_BATCH, n_iter=SP_ROUNDS, beta=SP_BETA, dtype="float32"),
                _mode,
                "cpu",
                default=_mode == "fwd+bwd",
                goal=("algovision", 20.0) if _mode == "fwd+bwd" else None,
                items=SP_BATCH,
                sweep="size",
            )
        )
for _size in (12, 20):  # GPU (unverified kernels: run where a GPU is lent)
    add_case(
        Case(
            FAMILY,
            "shortest_path",
            f"{_size}x{_size} B={SP_BATCH}",
            dict(size=_size, batch=SP_BATCH, n_iter=SP_ROUNDS, beta=SP_BETA, dtype="float32"),
            "fwd+bwd",
            "cuda",
            default=_size == 12,
            items=SP_BATCH,
            sweep="size",
        )
    )
