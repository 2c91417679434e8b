"""The benchmark registry: cases (what to time) and providers (who does the work).

A family module ``relaxops/bench/<family>.py`` registers its cases with :func:`add_case` and its providers with
:func:`add_provider`. A provider's ``make(case)`` builds the inputs once and returns ``(forward, inputs,
cotangents)``: ``forward()`` returns the outputs (``None`` for one not requested), ``inputs`` are the leaf
tensors that require grad, and ``cotangents`` are fixed tensors, one per output (``None`` for an output the
loss ignores), shared by every provider so that all of them do the same work. :func:`closure` turns these
into the function the harness times, according to the case's mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

MODES = ("fwd", "bwd", "fwd+bwd")


@dataclass
class Case:
    family: str
    op: str
    label: str  # the parameters in short, e.g. "bitonic n=256 B=16 P"
    params: dict
    mode: str
    device: str
    default: bool = False  # in the default run (the headline cases); `--full` runs every case
    out_bytes: int | None = None  # size of the big output (P); GPU rows compare time and peak memory to it
    goal: tuple[str, float] | None = None  # (reference provider, speed-up our best provider must reach)
    items: int | None = None  # samples per call: rows then also report ns per sample and samples per second
    sweep: str | None = None  # the size parameter (a key of params) that plots put on the x axis
    error: Callable | None = None  # (case, inputs, outputs) -> float: the output's error, reported beside the time

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    @property
    def name(self) -> str:
        return f"{self.family}.{self.op} {self.label} {self.mode}"


@dataclass
class Provider:
    name: str
    make: Callable  # case -> (forward, inputs, cotangents)
    reference: bool = False  # speed-ups of the other providers are reported against it
    skip: Callable = field(default=lambda case: None)  # case -> reason not to run it, or None
    full_only: str | None = None  # why it runs only under --full (minutes of setup per job), or None


CASES: list[Case] = []
PROVIDERS: dict[str, list[Provider]] = {}


def add_case(case: Case) -> None:
    CASES.append(case)


def add_provider(family: str, provider: Provider) -> None:
    PROVIDERS.setdefault(family, []).append(provider)


def _loss(outputs, cotangents):
    return sum((o * g).sum() for o, g in zip(outputs, cotangents) if o is not None and g is not None)


def _grads(outputs, inputs, cotangents, retain_graph=False):
    """The gradients of the outputs paired with the cotangents, given as the outputs' gradients: no torch op runs
    between the kernels (the contention mode, where PyTorch's own parallel ops would be timed too)."""
    pairs = [(o, g) for o, g in zip(outputs, cotangents) if o is not None and g is not None]
    return torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], retain_graph=retain_graph)


def closure(mode: str, forward, inputs, cotangents, direct: bool = False) -> Callable[[], object]:
    """The function to time: forward only (no autograd), backward only (graph kept), or both. The backward is that
    of the loss sum((output * cotangent).sum()), or with ``direct`` the same gradients without the loss's ops."""
    if direct and mode != "fwd":
        if mode == "bwd":
            outputs = forward()
            return lambda: _grads(outputs, inputs, cotangents, retain_graph=True)
        return lambda: _grads(forward(), inputs, cotangents)
    if mode == "fwd":

        def run():
            with torch.no_grad():
                return forward()
    elif mode == "bwd":
        loss = _loss(forward(), cotangents)

        def run():
            return torch.autograd.grad(loss, inputs, retain_graph=True)
    else:

        def run():
            return torch.autograd.grad(_loss(forward(), cotangents), inputs)

    return run
