"""Traced plans (``Algorithm(..., compile=backend)``, relaxops.algorithms.trace): the replayed graph gives the eager
plan's values and gradients (float64, 1e-12 relative) on every program of the framework tests, including calls
whose decisions (branch skips, loop counts) change; a mismatch falls back to the eager plan; patterns are bounded.
The capture is checked with the ``eager`` replay (no compilation: cheap); one small program goes through inductor."""

from __future__ import annotations

import warnings

import pytest
import torch
from relaxops.algorithms import framework as F
from relaxops.algorithms import programs

f64 = torch.float64


def assert_same(traced_alg, eager_alg, *inputs):
    """The traced and the eager algorithm on the same inputs: outputs and gradients equal to rounding."""
    results = []
    for alg in (eager_alg, traced_alg):
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = alg(*xs)
        out = out if isinstance(out, tuple) else (out,)
        w = [torch.linspace(-1, 1, o.numel(), dtype=f64).view(o.shape) for o in out]
        grads = torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(out, w)), [x for x in xs if x.requires_grad])
        results.append(tuple(o.detach() for o in out) + grads)
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12 * float(a.abs().max().clamp(min=1)))


def both(build, backend="eager"):
    return build(), build(compile=backend)


def branchy(**kw):
    """Nested Ifs whose branch skips depend on the data, and a While whose iteration count does."""
    return F.Algorithm(
        F.Input("x"),
        F.Input("c"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.If(
            F.LT("x", "c"),
            if_true=F.If(F.GT("x", 0.0), if_true=F.Let("y", lambda x: x**2), if_false=F.Let("y", 3.0)),
            if_false=F.If(F.GT("c", 1.0), if_true=F.Let("y", lambda x, c: x * c), if_false=F.Let("y", -1.0)),
        ),
        F.While(F.LT("y", 4.0), F.Let("y", lambda y: y + 1.5)),
        F.Output("y"),
        beta=8.0,
        **kw,
    )


def test_programs_equal_eager_over_calls():
    torch.manual_seed(0)
    cases = [
        (lambda **kw: programs.bubble_sort_program(4.0, **kw), lambda: (torch.randn(3, 5, dtype=f64),)),
        (lambda **kw: programs.bubble_sort_program(4.0, hard=True, **kw), lambda: (torch.randn(2, 4, dtype=f64),)),
        (
            lambda **kw: programs.edit_distance_program(3.0, **kw),
            lambda: (
                torch.softmax(torch.randn(2, 3, 3, dtype=f64), -1),
                torch.softmax(torch.randn(2, 2, 3, dtype=f64), -1),
            ),
        ),
        (
            lambda **kw: programs.shortest_path_program(6.0, 4, **kw),
            lambda: (torch.sigmoid(torch.randn(2, 3, 4, dtype=f64)) + 0.2,),
        ),
        (
            lambda **kw: programs.shortest_path_program(6.0, 4, "hamacher", 3.0, "while", **kw),
            lambda: (torch.sigmoid(torch.randn(2, 3, 3, dtype=f64)) + 0.2,),
        ),
    ]
    replayed = 0
    for build, inputs in cases:
        eager, traced = both(build)
        xs = inputs()
        assert_same(traced, eager, *xs)  # captured
        assert_same(traced, eager, *[x * 1.001 for x in xs])  # replayed (or a fallback if it decides otherwise)
        assert traced._traced.stats["captured"] >= 1
        replayed += traced._traced.stats["replayed"]
    assert replayed >= 3


def test_changing_decisions_fall_back_and_are_captured():
    eager, traced = both(branchy)
    x, c = torch.tensor([0.5, -2.0], dtype=f64), torch.tensor([1.0, 3.0], dtype=f64)
    assert_same(traced, eager, x, c)
    assert dict(traced._traced.stats) == {"fallback": 1, "captured": 1}
    assert_same(traced, eager, x + 0.01, c)  # same decisions: replayed
    assert traced._traced.stats["replayed"] == 1
    # other decisions: x > c everywhere skips the true branch, and y starts higher (fewer While iterations)
    assert_same(traced, eager, torch.tensor([3.0, 4.0], dtype=f64), torch.tensor([1.0, 2.0], dtype=f64))
    assert traced._traced.stats["fallback"] == 2 and traced._traced.stats["captured"] == 2
    assert_same(traced, eager, x, c)  # the first pattern again: its plan is found, replayed on the next call
    assert_same(traced, eager, x, c)
    assert traced._traced.stats["captured"] == 2 and traced._traced.stats["replayed"] == 2


def test_pattern_cache_is_bounded():
    eager = F.Algorithm(F.Input("x"), F.While(F.LT("x", 5.0), F.Let("x", lambda x: x + 1)), F.Output("x"), beta=50.0)
    traced = F.Algorithm(*eager.inputs, *eager.instructions, *eager.outputs, beta=50.0, compile="eager")
    traced._traced.max_patterns = 2
    for start in (0.0, 1.0, 2.0, 0.0):  # 5, 4, 3 iterations: three patterns, the first one evicted
        assert_same(traced, eager, torch.full((2,), start, dtype=f64))
    (plans,) = traced._traced.plans.values()
    assert len(plans) == 2 and traced._traced.stats["captured"] == 4


def test_key_hyperparameters_grad_mode_and_shapes():
    eager, traced = both(lambda **kw: programs.bubble_sort_program(4.0, **kw))
    x = torch.randn(3, 4, dtype=f64)
    assert_same(traced, eager, x)
    traced.beta = eager.beta = 1.5  # read at call time: a new plan
    assert_same(traced, eager, x)
    assert_same(traced, eager, torch.randn(2, 6, dtype=f64))
    with torch.no_grad():
        for a, b in zip(traced(x), eager(x)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(traced._traced.plans) == 4


def test_closed_over_parameters_get_gradients():
    w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=f64))

    def build(**kw):
        return F.Algorithm(
            F.Input("x"),
            F.Var("y", torch.zeros(3, dtype=f64)),
            F.If(
                F.GT(lambda x: (x * w).sum(-1), 0.0),
                if_true=F.Let("y", lambda x: x * w),
                if_false=F.Let("y", lambda x: -x),
            ),
            F.Output("y"),
            **kw,
        )

    eager, traced = both(build)
    x = torch.randn(4, 3, dtype=f64)
    grads = []
    for alg in (eager, traced, traced):
        w.grad = None
        alg(x).pow(2).sum().backward()
        grads.append(w.grad.clone())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(grads[2], grads[0], rtol=1e-12, atol=0)
    with torch.no_grad():
        w.mul_(-1)  # a parameter update is seen by the replay (an input of the graph, not a constant)
    torch.testing.assert_close(traced(x), eager(x), rtol=1e-12, atol=0)


def test_untraceable_programs_run_eagerly():
    def build(**kw):  # a lambda that turns a tensor value into a Python number
        return F.Algorithm(F.Input("x"), F.Let("x", lambda x: x * float(x.detach().abs().max())), F.Output("x"), **kw)

    eager, traced = both(build)
    x = torch.randn(3, 2, dtype=f64)
    with pytest.warns(UserWarning, match="cannot be traced"):
        assert_same(traced, eager, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(traced, eager, x)  # no second capture
    assert traced._traced.stats["fallback"] == 2 and not traced._traced.plans
    printing = F.Algorithm(F.Input("x"), F.Print(lambda x: x.shape), F.Output("x"), compile="eager")
    with pytest.warns(UserWarning, match="cannot be traced"):
        printing(x)
    with pytest.raises(TypeError, match="compile must be None or a torch.compile backend"):
        F.Algorithm(F.Input("x"), F.Output("x"), compile=True)


def test_errors_are_the_eager_ones():
    traced = F.Algorithm(
        F.Input("p"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.If(F.IsTrue("p"), if_true=F.Let("y", 1.0)),
        F.Output("y"),
        compile="eager",
    )
    p = torch.tensor([0.2, 0.9], dtype=f64)
    traced(p)
    traced(p)
    assert traced._traced.stats["replayed"] == 1
    with pytest.raises(ValueError, match=r"\[0, 1\]"):  # the range check is a recorded decision: replay refuses
        traced(p + 1)
    with pytest.raises(ValueError, match="shape"):
        F.Algorithm(F.Input("x", shape=(2,)), F.Output("x"), compile="eager")(torch.zeros(3, 3))


@pytest.mark.slow
def test_inductor_equals_eager(monkeypatch):
    # conftest's NaN-filled torch.empty would be traced by inductor's backward decompositions as an in-place fill of
    # a fresh tensor, which AOTAutograd refuses; the outputs are compared with the eager plan's here instead
    monkeypatch.setattr(torch, "empty", torch._C._VariableFunctions.empty)
    monkeypatch.setattr(torch, "empty_like", torch._C._VariableFunctions.empty_like)
    monkeypatch.setattr(torch.Tensor, "new_empty", torch._C.TensorBase.new_empty)
    eager, traced = both(branchy, backend="inductor")
    x, c = torch.tensor([0.5, -2.0, 0.1], dtype=f64), torch.tensor([1.0, 3.0, -1.0], dtype=f64)
    assert_same(traced, eager, x, c)
    assert_same(traced, eager, x * 1.01, c)
    assert traced._traced.stats["replayed"] == 1
