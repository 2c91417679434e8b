"""Traced plans of relaxed programs: a program run as one compiled unit instead of op by op.

A program's Python control flow depends on tensor values only through a few decisions (``If``'s branch skips,
``While``'s continuation, the checks of ``IsTrue``/``IsFalse`` and of hard variables), all taken by
``framework._decide``. For given input shapes, dtypes, devices, hyper-parameters and decision pattern the sequence
of ATen ops is therefore fixed. ``TracedPlans`` captures that sequence once (``make_fx`` on real tensors, each
decision recorded with its value, the tensors it came from stacked into one extra graph output), compiles forward
and backward with a ``torch.compile`` backend, and at each call runs the compiled graph and compares the decisions
it computed with the recorded ones. On a mismatch the call's result is discarded and the eager plan runs (the same
result as without tracing); the new pattern is captured in turn (at most ``max_patterns`` per input signature,
least recently used dropped). Tensors the program reads that are not inputs (``Var`` initial values, tensors a
lambda closes over, e.g. a network's parameters) are passed to the graph as extra inputs, so they get gradients and
may change between calls.

What a captured plan assumes fixed (it is not re-read at later calls): the program's nodes (their local
hyper-parameters; the algorithm's own ``beta``, ``max_iter``, ``epsilon``, ``hard`` are part of the key), Python
values that lambdas close over, and Python values a lambda derives from tensors (a lambda that calls ``.item()``
or branches on a tensor cannot be captured: such a program runs eagerly, with a warning). ``Print`` and ``debug``
output only appear on eager calls; programs with ``Print`` or ``debug=True`` run eagerly.
"""

from __future__ import annotations

import collections
import contextlib
import time
import warnings
from unittest import mock

import torch
from torch import Tensor

# The capture in progress, read by framework._decide and Print: the list that it appends the decisions
# (tensor, value) to, or None; and whether make_fx is capturing a program.
recorder = None
tracing = False


class Untraceable(RuntimeError):
    """Raised while capturing a program that cannot be replayed as a fixed graph (``Print``)."""


def _lift_constants(gm: torch.fx.GraphModule) -> list:
    """Turns the tensors the trace read from outside (``get_attr`` nodes) into trailing graph inputs, in order;
    returns them."""
    gm.graph._codegen = torch.fx.graph.CodeGen()  # flat positional inputs and a tuple output
    lifted = {}  # attribute name -> placeholder
    last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            if node.target not in lifted:
                with gm.graph.inserting_after(last):
                    last = lifted[node.target] = gm.graph.placeholder(f"const_{len(lifted)}")
            node.replace_all_uses_with(lifted[node.target])
            gm.graph.erase_node(node)
    consts = [getattr(gm, name) for name in lifted]
    for name in lifted:
        delattr(gm, name)
    gm.graph.lint()
    gm.recompile()
    return consts


def _no_fake_metadata():
    """make_fx stores a fake-tensor snapshot of every value in ``node.meta`` (about two thirds of its time in real
    mode, a new FakeTensorMode per op); neither torch.compile, which retraces the graph, nor the eager replay reads
    it."""
    from torch.fx.experimental import proxy_tensor

    if not hasattr(proxy_tensor, "extract_val"):
        return contextlib.nullcontext()
    return mock.patch.object(proxy_tensor, "extract_val", lambda val, include_real=False: None)


class _Plan:
    """One captured decision pattern: the compiled graph ``(inputs, constants) -> (*outputs, decisions)``."""

    __slots__ = ("decisions", "fn", "consts", "n_out", "compile_s")

    def __init__(self, decisions: Tensor, fn, consts: list, n_out: int, compile_s: float):
        self.decisions, self.fn, self.consts, self.n_out, self.compile_s = decisions, fn, consts, n_out, compile_s

    def run(self, inputs):
        """The outputs, or None when the decisions computed differ from the recorded ones."""
        res = self.fn(*inputs, *self.consts)
        if self.decisions.numel() and not torch.equal(res[self.n_out], self.decisions):
            return None
        return tuple(res[: self.n_out])


class TracedPlans:
    """The traced plans of one ``Algorithm``, keyed by input signature, hyper-parameters and grad mode (see the
    module docstring). ``backend`` is a ``torch.compile`` backend name: ``"inductor"`` generates fused C++/Triton
    kernels (the fast one; compiling takes seconds to minutes for large programs), ``"aot_eager"`` only splits
    forward and backward (cheaper to compile, not faster than eager), ``"eager"`` replays the captured graph op by op
    (no compilation: checks a capture)."""

    def __init__(self, algorithm, backend: str = "inductor", max_patterns: int = 8, max_captures: int = 32):
        self.algorithm, self.backend = algorithm, backend
        self.max_patterns, self.max_captures = max_patterns, max_captures
        self.plans: dict = {}  # key -> OrderedDict(decision tuple -> _Plan), most recently used last
        self.captures = 0  # captures so far (beyond max_captures, new patterns run eagerly)
        self.untraceable: set = set()  # keys whose capture failed
        self.stats = collections.Counter()  # replayed / fallback / captured (for tests and benchmarks)

    def key(self, inputs, hp) -> tuple:
        return (
            hp,
            torch.is_grad_enabled(),
            tuple((tuple(x.shape), x.dtype, x.device, x.requires_grad) for x in inputs),
        )

    def __call__(self, inputs: tuple, hp) -> tuple:
        key = self.key(inputs, hp)
        plans = self.plans.get(key)
        if plans:
            plan = next(reversed(plans.values()))  # the pattern of the last call that matched
            outs = plan.run(inputs)
            if outs is not None:
                self.stats["replayed"] += 1
                return outs
        self.stats["fallback"] += 1
        record = []
        outs = self._eager(inputs, record)
        pattern = tuple(v for _, v in record)
        if plans is not None and pattern in plans:
            plans.move_to_end(pattern)
        elif key not in self.untraceable and self.captures < self.max_captures:
            self.captures += 1
            plan = self._capture(inputs, pattern)
            if plan is None:
                self.untraceable.add(key)
            else:
                plans = self.plans.setdefault(key, collections.OrderedDict())
                plans[pattern] = plan
                if len(plans) > self.max_patterns:
                    plans.popitem(last=False)
        return outs

    def _eager(self, inputs, record):
        global recorder
        saved, recorder = recorder, record
        try:
            return self.algorithm._forward_eager(inputs)
        finally:
            recorder = saved

    def _capture(self, inputs, pattern):
        from torch.fx.experimental.proxy_tensor import make_fx

        record = []

        def program(*xs):
            outs = self._eager(xs, record)
            dec = [t.reshape(()) for t, _ in record]
            return outs + ((torch.stack(dec),) if dec else ())

        start = time.perf_counter()
        global tracing
        saved, tracing = tracing, True
        try:
            with torch.no_grad(), _no_fake_metadata():
                gm = make_fx(program, tracing_mode="real")(*[x.detach() for x in inputs])
        except Exception as e:  # a lambda that reads tensor values into Python, Print, ...
            warnings.warn(
                f"Algorithm: the program cannot be traced ({type(e).__name__}: {e}); it runs eagerly", stacklevel=4
            )
            return None
        finally:
            tracing = saved
        if tuple(v for _, v in record) != pattern:  # cannot happen for a deterministic program
            warnings.warn(
                "Algorithm: the program took other decisions on the same inputs (random?); it runs eagerly",
                stacklevel=4,
            )
            return None
        consts = _lift_constants(gm)
        # "eager" replays the captured graph op by op (what torch.compile's eager backend would do, without dynamo)
        fn = gm if self.backend == "eager" else torch.compile(gm, backend=self.backend, dynamic=False, fullgraph=True)
        decisions = torch.tensor(pattern, dtype=torch.bool, device=inputs[0].device)
        plan = _Plan(decisions, fn, consts, len(self.algorithm.outputs), 0.0)
        if plan.run(inputs) is None:  # compiles; the compiled graph must take the recorded decisions
            warnings.warn(
                "Algorithm: the compiled program took other decisions than the eager one; it runs eagerly", stacklevel=4
            )
            return None
        plan.compile_s = time.perf_counter() - start
        self.stats["captured"] += 1
        return plan
