"""The relaxed-algorithm framework (docs/math/algorithms.md §2, §3 and §5): conditions, control structures, the anchors,
and AlgoVision 0.1.2's results on the same programs (values and gradients, float64)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from relaxops.algorithms import framework as F
from relaxops.algorithms import programs
from relaxops.compat import algovision as compat

f64 = torch.float64


def assert_close(actual, expected, atol=1e-12, rtol=1e-12):
    """float64 programs against closed forms or AlgoVision: equal up to rounding unless a bound is given."""
    torch.testing.assert_close(actual, expected.to(actual.dtype), atol=atol, rtol=rtol)


# --- conditions (docs/math/algorithms.md §5.1) ------------------------------------------------------------------------


def cond(c, **state):
    state = {k: torch.as_tensor(v, dtype=f64) for k, v in state.items()}
    return c.prob(state, F._HP(2.0, 8, 1e-5, False, False))


def test_condition_formulas():
    torch.manual_seed(0)
    a, b = torch.randn(7, dtype=f64), torch.randn(7, dtype=f64)
    beta = 2.0
    assert_close(cond(F.LT("a", "b"), a=a, b=b), torch.sigmoid(beta * (b - a)), atol=1e-12, rtol=1e-12)
    assert_close(cond(F.GT("a", "b"), a=a, b=b), torch.sigmoid(beta * (a - b)), atol=1e-12, rtol=1e-12)
    assert_close(cond(F.LT("a", "b"), a=a, b=b) + cond(F.GT("a", "b"), a=a, b=b), torch.ones(7, dtype=f64))
    assert F.LEq is F.LT and F.GEq is F.GT
    eq = cond(F.Eq("a", "b"), a=a, b=b)
    assert_close(eq, 1 / torch.cosh(beta * (a - b) / 2) ** 2, atol=1e-12, rtol=1e-12)
    assert_close(eq, cond(F.Eq("b", "a"), a=a, b=b))
    assert_close(cond(F.NEq("a", "b"), a=a, b=b), 1 - eq, atol=1e-15, rtol=0)
    assert bool((eq > 0).all() and (eq <= 1).all())
    assert_close(cond(F.Eq("a", "a"), a=a), torch.ones(7, dtype=f64))
    assert_close(cond(F.LT("a", "a"), a=a), torch.full((7,), 0.5, dtype=f64))
    x, y = torch.rand(7, 3, dtype=f64), torch.rand(7, 3, dtype=f64)
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
    assert_close(cond(F.CosineSimilarity("x", "y"), x=x, y=y), cos)
    assert_close(cond(F.CatProbEq("x", "y"), x=x, y=y), 1 / torch.cosh(beta * (1 - cos)), atol=1e-12, rtol=1e-12)
    assert_close(cond(F.CatProbEq("x", "x"), x=x), torch.ones(7, dtype=f64))
    p = torch.rand(7, dtype=f64)
    assert_close(cond(F.IsTrue("p"), p=p), p)
    assert_close(cond(F.IsFalse("p"), p=p), 1 - p)
    with pytest.raises(ValueError, match=r"IsTrue\('p'\).*\[0, 1\]"):
        cond(F.IsTrue("p"), p=p + 1)
    q = cond(F.GT("a", "b"), a=a, b=b)
    assert_close(cond(F.LT("a", "b") & F.GT("a", "b"), a=a, b=b), (1 - q) * q)
    assert_close(cond(F.LT("a", "b") | F.GT("a", "b"), a=a, b=b), 1 - q + q - (1 - q) * q)


def test_condition_gradients_and_hard_limit():
    a = torch.randn(9, dtype=f64, requires_grad=True)
    b = torch.randn(9, dtype=f64)
    beta = 3.0
    lt = F.LT("a", "b", beta=beta).prob({"a": a, "b": b}, None)
    (g,) = torch.autograd.grad(lt.sum(), a)
    assert_close(g, -beta * lt * (1 - lt))
    eq = F.Eq("a", "b", beta=beta).prob({"a": a, "b": b}, None)
    (g,) = torch.autograd.grad(eq.sum(), a)
    assert_close(g, -beta * torch.tanh(beta * (a - b) / 2) * eq)
    # far apart: cosh overflows in AlgoVision's formula, the value is 0 and the gradient finite (0)
    far = F.Eq("a", "b", beta=1e3).prob({"a": a, "b": b + 10}, None)
    (g,) = torch.autograd.grad(far.sum(), a)
    assert torch.isfinite(g).all() and float(far.detach().max()) < 1e-100
    big = F.GT("a", "b", beta=1e9).prob({"a": a.detach(), "b": b}, None)
    assert torch.equal(big, (a.detach() > b).to(f64))


def test_soft_min_max():
    torch.manual_seed(1)
    xs = [torch.randn(5, 3, dtype=f64) for _ in range(4)]
    X = torch.stack(xs, -1)
    for cls, ref in ((F.Min, -1), (F.Max, 1)):
        w = torch.softmax(ref * 4.0 * X, -1)
        assert_close(cls(4.0)(*xs), (w * X).sum(-1))
        assert bool((cls(4.0)(*xs) <= X.amax(-1) + 1e-12).all() and (cls(4.0)(*xs) >= X.amin(-1) - 1e-12).all())
        assert_close(cls(1e6)(*xs), X.amin(-1) if ref < 0 else X.amax(-1))
        perm = [2, 0, 3, 1]
        assert_close(cls(4.0)(*[xs[i] for i in perm]), cls(4.0)(*xs))
    assert_close(F.ArgMin(4.0)(*xs), torch.softmax(-4.0 * X, -1))
    assert_close(F.ArgMax(4.0)(*xs).sum(-1), torch.ones(5, 3, dtype=f64))
    assert_close(F.Min(3.0)(xs[0], xs[0], xs[0]), xs[0])
    with pytest.raises(TypeError, match="beta must be given"):
        F.Min(None)


# --- control structures (docs/math/algorithms.md §5.2) ----------------------------------------------------------------


def branch_program(p_expr, hard=False, epsilon=1e-5):
    return F.Algorithm(
        F.Input("x"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.Var("z", torch.tensor(5.0, dtype=f64)),
        F.If(
            F.IsTrue(p_expr),
            if_true=[F.Let("y", lambda x: x * 2), F.Let("z", 1.0)],
            if_false=F.Let("y", lambda x: x - 1),
        ),
        F.Output("y"),
        F.Output("z"),
        hard=hard,
        epsilon=epsilon,
    )


def test_if_mixes_branches():
    x = torch.tensor([1.0, 2.0, 3.0], dtype=f64)

    def constant(p):
        return lambda x: torch.full_like(x, p)

    for p in (0.0, 1.0, 0.3):
        y, z = branch_program(constant(p))(x)
        assert_close(y, p * 2 * x + (1 - p) * (x - 1))
        assert_close(z, p * 1.0 + (1 - p) * 5.0 * torch.ones_like(x))
    y, _ = branch_program(lambda x: torch.tensor([0.2, 0.7, 0.5], dtype=f64), hard=True)(x)
    assert_close(y, torch.tensor([0.0, 4.0, 2.0], dtype=f64))  # p > 0.5 picks the true branch


def test_if_gradient_and_nesting():
    torch.manual_seed(2)
    x = torch.randn(6, dtype=f64, requires_grad=True)
    c = torch.randn(6, dtype=f64, requires_grad=True)
    beta = 1.7
    alg = F.Algorithm(
        F.Input("x"),
        F.Input("c"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.If(
            F.LT("x", "c"),
            if_true=F.If(F.GT("x", 0.0), if_true=F.Let("y", lambda x: x**2), if_false=F.Let("y", 3.0)),
            if_false=F.If(F.GT("c", 1.0), if_true=F.Let("y", lambda x, c: x * c), if_false=F.Let("y", -1.0)),
        ),
        F.Output("y"),
        beta=beta,
        epsilon=0.0,
    )
    y = alg(x, c)
    p, q, r = torch.sigmoid(beta * (c - x)), torch.sigmoid(beta * x), torch.sigmoid(beta * (c - 1))
    expected = p * (q * x**2 + (1 - q) * 3.0) + (1 - p) * (r * x * c + (1 - r) * -1.0)
    assert_close(y, expected)
    g = torch.autograd.grad(y.sum(), (x, c))
    h = torch.autograd.grad(expected.sum(), (x, c))
    for a, b in zip(g, h):
        assert_close(a, b)
    assert torch.autograd.gradcheck(lambda x, c: alg(x, c), (x, c))


def test_while_weights_sum_to_one_and_anchors():
    ones = F.Algorithm(
        F.Input("x"),
        F.Var("one", torch.tensor(1.0, dtype=f64)),
        F.While(F.LT("x", 5), F.Let("x", lambda x: x + 1), F.Let("one", lambda one: one * 1.0)),
        F.Output("one"),
        beta=1.0,
    )
    assert_close(ones(torch.zeros(3, dtype=f64)), torch.ones(3, dtype=f64), atol=1e-15, rtol=0)
    # docs/math/algorithms.md §3: While(LT(x, 5), x = x + 1) from x = 0
    for beta, expected in ((1.25, 4.980389277), (1.0, 4.704317191), (5.0, 5.493170484), (50.0, 5.5)):
        alg = F.Algorithm(F.Input("x"), F.While(F.LT("x", 5), F.Let("x", lambda x: x + 1)), F.Output("x"), beta=beta)
        assert abs(float(alg(torch.zeros(1, dtype=f64))) - expected) < 1e-8


def test_while_max_iter_gives_the_rest_to_the_last_state():
    alg = F.Algorithm(
        F.Input("x"), F.While(F.LT("x", 100), F.Let("x", lambda x: x + 1), max_iter=3), F.Output("x"), beta=0.01
    )
    cs = [torch.sigmoid(torch.tensor(0.01 * (100.0 - i), dtype=f64)) for i in range(4)]
    P = [cs[0]]
    for i in range(1, 4):
        P.append(P[-1] * cs[i])
    expected = (1 - P[0]) * 0 + sum((P[i - 1] - P[i]) * i for i in range(1, 4)) + P[3] * 3
    assert abs(float(alg(torch.zeros(1, dtype=f64))) - float(expected)) < 1e-12


def test_for_equals_unrolling_and_scopes():
    alg = F.Algorithm(
        F.Input("x"),
        F.VarInt("n", lambda x: x.shape[1]),
        F.For("i", "n", F.Let("x", [lambda i: i], lambda x, i: x[:, i] * (i + 1))),
        F.For("i", [2, 0], F.Let("x", ["i"], lambda x, i: x[:, i] + 10)),
        F.Output("x"),
    )
    x = torch.arange(6.0, dtype=f64).view(2, 3)
    expected = x * torch.tensor([1.0, 2.0, 3.0], dtype=f64)
    expected[:, 2] += 10
    expected[:, 0] += 10
    assert_close(alg(x), expected)
    with pytest.raises(NameError, match="must not exist"):
        F.Algorithm(F.Input("x"), F.VarInt("i", 0), F.For("i", 2, F.LetInt("i", 1)), F.Output("x"))(x)
    leak = F.Algorithm(F.Input("x"), F.For("i", 2, F.Let("x", lambda x: x)), F.Let("x", lambda i: i), F.Output("x"))
    with pytest.raises(NameError, match="'i' is not defined"):
        leak(x)


def test_hard_variables_cannot_be_relaxed():
    alg = F.Algorithm(
        F.Input("x"),
        F.VarInt("k", 0),
        F.If(F.GT("x", 0.0), if_true=F.LetInt("k", 1), if_false=F.LetInt("k", 2)),
        F.Output("x"),
    )
    with pytest.raises(ValueError, match="hard variable 'k'"):
        alg(torch.tensor([0.3, -0.2], dtype=f64))


def test_hyperparameters_are_read_at_call_time():
    cond_ = F.GT("x", 0.0)
    body = [F.If(cond_, if_true=F.Let("y", 1.0))]
    alg = F.Algorithm(F.Input("x"), F.Var("y", torch.tensor(0.0, dtype=f64)), *body, F.Output("y"), beta=1.0)
    x = torch.tensor([0.5], dtype=f64)
    assert_close(alg(x), torch.sigmoid(torch.tensor([0.5], dtype=f64)))
    alg.beta = 4.0
    assert_close(alg(x), torch.sigmoid(torch.tensor([2.0], dtype=f64)))
    hard = F.Algorithm(F.Input("x"), F.Var("y", torch.tensor(0.0, dtype=f64)), *body, F.Output("y"), hard=True)
    assert_close(hard(x), torch.ones(1, dtype=f64))  # the same nodes, in another algorithm
    assert_close(alg(x), torch.sigmoid(torch.tensor([2.0], dtype=f64)))
    local = F.Algorithm(
        F.Input("x"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.If(F.GT("x", 0.0, beta=2.0), if_true=F.Let("y", 1.0)),
        F.Output("y"),
        beta=100.0,
    )
    assert_close(local(x), torch.sigmoid(torch.tensor([1.0], dtype=f64)))  # the local beta wins


def test_let_forms():
    x = torch.arange(12.0, dtype=f64).view(2, 6)
    alg = F.Algorithm(
        F.Input("x"),
        F.Var("a", torch.tensor(0.0, dtype=f64)),
        F.Var("v", torch.zeros(3, dtype=f64)),
        F.Var("u", torch.zeros(3, dtype=f64)),
        F.Var("w", torch.zeros(3, dtype=f64)),
        F.VarInt("k", 2),
        F.Let("a", "x", ["k"]),
        F.Let("v", "x", [slice(0, 6, 2)]),
        F.Let("u", [1], "x", [lambda k: k + 1]),
        F.Let("w", torch.tensor([1.0, 2.0, 3.0], dtype=f64)),
        F.Let("w", [torch.tensor([0.0, 0.5, 1.0], dtype=f64)], 10.0),
        F.Let(["a", "k"], lambda a, k: (a + 1, k + 1)),
        F.Output("a"),
        F.Output("v"),
        F.Output("u"),
        F.Output("w"),
    )
    a, v, u, w = alg(x)
    assert_close(a, x[:, 2] + 1)
    assert_close(v, x[:, 0::2])
    assert_close(u, torch.stack([torch.zeros(2, dtype=f64), x[:, 3], torch.zeros(2, dtype=f64)], 1))
    assert_close(w, torch.tensor([[1.0, 6.0, 10.0]] * 2, dtype=f64))


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda: F.Algorithm(F.Input("x")), SyntaxError, "at least one Input and one Output"),
        (lambda: F.Algorithm(F.Input("x"), F.Output("x"), 3), SyntaxError, "is not an Input"),
        (lambda: F.Algorithm(F.Input("x"), F.Var("x", torch.zeros(1)), F.Output("x")), SyntaxError, "declared twice"),
        (lambda: F.Input("1x"), ValueError, "invalid"),
        (lambda: F.Let("a"), SyntaxError, "invalid arguments"),
        (lambda: F.Let("a", object()), TypeError, "must be a name, lambda"),
        (lambda: F.If("x > 0"), TypeError, "must be a Condition"),
        (lambda: F.VarInt("k", 1.5), TypeError, "int or a list of ints"),
        (lambda: F.Var("v", 3), TypeError, "tensor or a lambda"),
    ],
)
def test_bad_programs(bad, error, match):
    with pytest.raises(error, match=match):
        bad()


def test_bad_calls():
    alg = F.Algorithm(F.Input("x", shape=(3,)), F.Var("y", torch.zeros(2)), F.Let("y", lambda x: x), F.Output("y"))
    with pytest.raises(TypeError, match="expected 1 inputs"):
        alg()
    with pytest.raises(ValueError, match=r"shape \[B, 3\]"):
        alg(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="shapes never change"):
        alg(torch.zeros(2, 3))


def test_batch_independence_up_to_epsilon():
    torch.manual_seed(3)
    x = torch.randn(5, 6, dtype=f64)
    alg = programs.bubble_sort_program(beta=3.0)
    whole = alg(x)
    for i in range(5):
        single = alg(x[i : i + 1])
        for a, b in zip(whole, single):
            assert float((a[i] - b[0]).abs().max()) <= 1e-5 * float(x.abs().max()) * 36


# --- whole algorithms and AlgoVision ----------------------------------------------------------------------------


def test_bubble_sort_anchors_and_hard_limit():
    alg = programs.bubble_sort_program(beta=5.0)
    x = torch.tensor([[3.0, 1.0, 2.0]], dtype=f64, requires_grad=True)
    values, swaps, _ = alg(x)
    assert_close(values, torch.tensor([[1.00661042, 2.00017563, 2.99321394]], dtype=f64), atol=1e-8, rtol=0)
    assert abs(float(swaps) - 1.99973559) < 1e-8
    (g,) = torch.autograd.grad(swaps.sum(), x)
    assert_close(g, torch.tensor([[0.0343374, 0.03194674, -0.06628414]], dtype=f64), atol=1e-8, rtol=0)
    assert float(g[0, 2]) < 0  # docs/math/algorithms.md §5.3 sign test: raising the last element reduces the swaps
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=f64, requires_grad=True)
    values, swaps, any_swap = alg(x)
    assert abs(float(swaps) - 0.01325774) < 1e-8 and abs(float(any_swap) - 0.013213222) < 1e-9
    (g,) = torch.autograd.grad(any_swap.sum(), x)
    assert_close(g, torch.tensor([[0.03286329, -0.00071416, -0.03214913]], dtype=f64), atol=1e-8, rtol=0)
    torch.manual_seed(4)
    x = torch.randn(8, 6, dtype=f64)
    values, swaps, _ = programs.bubble_sort_program(beta=5.0, hard=True)(x)
    assert torch.equal(values, x.sort(-1).values)
    inversions = sum((x[:, i] > x[:, j]).to(f64) for i, j in itertools.combinations(range(6), 2))
    assert torch.equal(swaps, inversions)


def test_edit_distance_anchors():
    ab = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=f64)
    D = programs.edit_distance_program(beta=5.0)(ab, ab.flip(1))
    assert_close(
        D[0],
        torch.tensor([[0, 1, 2], [1, 1.01329671, 1.00643830], [2, 1.00643830, 2.00867247]], dtype=f64),
        atol=1e-8,
        rtol=0,
    )
    s = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]], dtype=f64, requires_grad=True)
    t = torch.tensor([[[0.3, 0.7], [0.6, 0.4]]], dtype=f64)
    D = programs.edit_distance_program(beta=5.0)(s, t)
    assert abs(float(D[0, -1, -1]) - 0.772178071) < 1e-9
    (g,) = torch.autograd.grad(D[0, -1, -1], s)
    assert_close(
        g[0], torch.tensor([[0.10823497, -0.97411473], [-0.80101865, 0.20025466]], dtype=f64), atol=1e-8, rtol=0
    )


def test_shortest_path_anchors():
    path = programs.shortest_path_program(10.0, 8)(torch.tensor([[[1.0, 5, 1], [1, 5, 1], [1, 1, 1]]]))
    expected = torch.tensor([[1, 1.3e-17, 9.3e-14], [1, 9.4e-14, 4.54e-5], [4.54e-5, 0.999955, 1]])
    assert_close(path[0], expected, atol=2e-7, rtol=0.03)
    path = programs.shortest_path_program(10.0, 6)(torch.ones(1, 3, 3))
    expected = torch.tensor([[1, 0.5555, 4.5e-9], [0.5555, 0.99996, 4.5e-5], [4.5e-9, 4.5e-5, 1]])
    assert_close(path[0], expected, atol=1e-4, rtol=0.02)


def algovision_cases():
    torch.manual_seed(5)
    s = torch.softmax(torch.randn(3, 5, 3, dtype=f64), -1)
    t = torch.softmax(torch.randn(3, 4, 3, dtype=f64), -1)
    cost = torch.sigmoid(torch.randn(2, 6, 5, dtype=f64) * 4) + 0.2
    yield "bubble", lambda M, **kw: programs.bubble_sort_program(4.0, M=M, **kw), (torch.randn(4, 7, dtype=f64),)
    yield (
        "bubble_hard",
        lambda M, **kw: programs.bubble_sort_program(4.0, M=M, hard=True, **kw),
        (torch.randn(3, 5, dtype=f64),),
    )
    yield "edit_distance", lambda M, **kw: programs.edit_distance_program(3.0, M=M, **kw), (s, t)
    for tc, p, loop in (("probabilistic", None, "for"), ("hamacher", 3.0, "while"), ("yager_1", None, "for")):
        yield (
            f"shortest_path_{tc}_{loop}",
            (lambda M, tc=tc, p=p, loop=loop, **kw: programs.shortest_path_program(6.0, 9, tc, p, loop, M=M, **kw)),
            (cost,),
        )


@pytest.mark.parametrize("name, build, inputs", list(algovision_cases()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("epsilon", [1e-5, 0.0])
def test_equals_algovision(name, build, inputs, epsilon):
    av = pytest.importorskip("algovision")
    outs = []
    for M in (av, compat):
        xs = [x.clone().requires_grad_(True) for x in inputs]
        with pytest.warns() if M is av else _no_warnings():
            out = build(M, epsilon=epsilon)(*xs)
        out = out if isinstance(out, tuple) else (out,)
        w = [torch.linspace(-1, 1, o.numel(), dtype=f64).view(o.shape) for o in out]
        grads = torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(out, w)), xs)
        outs.append((out, grads))
    for a, b in zip(outs[0][0] + outs[0][1], outs[1][0] + outs[1][1]):
        assert_close(b, a, atol=1e-9, rtol=1e-9)


class _no_warnings:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def test_compat_names():
    av = pytest.importorskip("algovision")
    public = [n for n in dir(av) if not n.startswith("_") and n[0].isupper()]
    for name in public:
        assert hasattr(compat, name), name
    assert math.isclose(float(compat.Algorithm(compat.Input("x"), compat.Output("x"))(torch.ones(1))), 1.0)


# --- the eager plan's shortcuts equal the exact forms ------------------------------------------------------------


def decision_cases():
    """Probabilities around the thresholds of the branch skips, in every float dtype, with the eps values whose
    rounding to the dtype or to 1 - p decides (eps just below a representable p, eps >= 0.5, eps < -1)."""
    inf, nan = math.inf, math.nan
    rows = [
        [0.1, 0.2],
        [1e-5, 1 - 1e-5],
        [0.0, 1.0],
        [0.3],
        [nan, 0.7],
        [nan],
        [0.999999, nan],
        [-0.5, 0.2],
        [2.5, 3.0],
        [-inf, 0.5],
        [inf, 0.5],
        [inf],
        [0.25, 0.75],
        [0.5],
        [1e-30, 0.4],
        [1.5, 2.0],
    ]
    eps = [
        1e-5,
        0.0,
        0.1,
        0.1 - 1e-12,
        0.1 + 1e-12,
        0.0999,
        0.3,
        0.5,
        0.6,
        0.7 - 1e-9,
        0.75,
        1.0,
        2.0,
        -1.0,
        -2.5,
        -0.5,
        inf,
        nan,
    ]
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        for row in rows:
            p = torch.tensor(row, dtype=dtype)
            eps_here = eps + [p[0].item() * (1 - 1e-4), 1 - p[-1].item() + 1e-9, 1 - p[-1].item() - 1e-9]
            for e in eps_here:
                yield p, e


def test_branch_tests_equal_the_exact_tests():
    n = 0
    for p, eps in decision_cases():
        exact = (bool((p > eps).any()), bool((1 - p > eps).any()))
        for need in itertools.product((False, True), repeat=2):
            got = F._branch_tests(p, eps, *need)
            assert got == (need[0] and exact[0], need[1] and exact[1]), (p, eps, need)
            n += 1
    assert n > 1000


def test_while_continuation_and_probability_check_with_nan(monkeypatch):
    alg = F.Algorithm(
        F.Input("x"),
        F.Var("y", torch.tensor(0.0, dtype=f64)),
        F.While(F.IsTrue("x"), F.Let("y", lambda y: y + 1), F.Let("x", lambda x: x * 0.5)),
        F.Output("y"),
        epsilon=0.3,
    )
    finite = torch.tensor([0.2, 0.5, 0.9], dtype=f64)
    with_nan = torch.tensor([0.2, math.nan, 0.9], dtype=f64)
    fast = [alg(finite), alg(with_nan)]
    monkeypatch.setattr(F.trace, "recorder", [])  # as under a capture: every decision from the exact tensor tests
    exact = [alg(finite), alg(with_nan)]
    for a, b in zip(fast, exact):
        torch.testing.assert_close(a, b, equal_nan=True, atol=0, rtol=0)
    assert float(fast[0][2]) > 1 and not fast[1].any()  # a NaN continuation probability stops the loop at once
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        alg(torch.tensor([0.5, 1.5], dtype=f64))


def test_whole_index_writes_equal_the_generic_write():
    torch.manual_seed(4)
    D = torch.randn(3, 4, 5, dtype=f64, requires_grad=True)
    v = torch.randn(3, dtype=torch.float32, requires_grad=True)  # a float32 value into a float64 array: promoted

    def program(*index):
        return F.Algorithm(F.Input("D"), F.Input("v"), F.VarInt("i", 2), F.Let("D", list(index), "v"), F.Output("D"))

    for index in ((1, 3), ("i", -1), (lambda i: i - 3, 0)):
        out = program(*index)(D, v)
        i, j = (2 if a == "i" else -1 if callable(a) else a for a in index)
        expected = D.clone()
        expected[:, i, j] = v.to(f64)
        assert_close(out, expected)
        g = torch.randn_like(out)
        grads = torch.autograd.grad((out * g).sum(), (D, v)), torch.autograd.grad((expected * g).sum(), (D, v))
        for a, b in zip(*grads):
            assert_close(a, b)
    with pytest.raises(IndexError, match="out of range for dim 2 of size 5"):
        program(0, 5)(D, v)
    assert torch.autograd.gradcheck(lambda D, v: program(1, 2)(D, v), (D, v.detach().to(f64).requires_grad_()))


def test_programs_gradcheck():
    """The eager plan's gradients are exact on the programs of docs/math/algorithms.md §4 (float64, both branches,
    loops, index writes)."""
    torch.manual_seed(6)
    x = torch.randn(2, 3, dtype=f64, requires_grad=True)
    assert torch.autograd.gradcheck(programs.bubble_sort_program(2.0), (x,))
    s = torch.softmax(torch.randn(1, 2, 3, dtype=f64), -1).requires_grad_()
    t = torch.softmax(torch.randn(1, 2, 3, dtype=f64), -1).requires_grad_()
    assert torch.autograd.gradcheck(programs.edit_distance_program(2.0), (s, t))
