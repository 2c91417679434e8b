"""Relaxed bubble sort (docs/math/algorithms.md §4.1) on every backend against the float64 reference: odd sizes, soft
and hard, values and gradients of all three outputs, gradcheck, opcheck, torch.compile, AlgoVision's programs, the
anchors of docs/math/algorithms.md §3, the hard limit, the sign test of docs/math/algorithms.md §5.3, the batch-wide
loop, bad arguments and non-finite rows."""

import math

import pytest
import torch
from relaxops.algorithms import ops, programs
from relaxops.algorithms.functional import bubble_sort
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    gapped,
    opcheck_calls,
    outputs_and_grads,
)

SIZES = (1, 2, 3, 5, 20, 50)
TRITON_SIZES = (1, 2, 3, 5, 7)  # the interpreter runs every comparator in Python
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]
KERNELS_CPU = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
INTERPRETED = ("triton", "cpu")
MODES = [(False, 1e-5), (False, 0.0), (True, 1e-5)]  # (hard, epsilon)


def bubble_grads(x, backend, beta=5.0, seed=3, **kw):
    """sorted, swaps, any_swap and the gradient of a fixed random linear functional of all three (seed None: their
    sum)."""
    return outputs_and_grads(bubble_sort, x, beta, seed=seed, backend=backend, **kw)


def inversions(row):
    return sum(int(row[i] > row[j]) for i in range(len(row)) for j in range(i + 1, len(row)))


MATCH_CASES = [
    pytest.param(*p.values, n, id=f"{p.id}-{n}", marks=p.marks)
    for p in KERNEL_BACKEND_DEVICE
    for n in (TRITON_SIZES if p.values == INTERPRETED else SIZES)
]


@pytest.mark.parametrize("backend,device,n", MATCH_CASES)
@pytest.mark.parametrize("hard,epsilon", MODES)
def test_matches_reference(backend, device, n, hard, epsilon):
    x = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    ref = bubble_grads(x, "reference", hard=hard, epsilon=epsilon)
    out = bubble_grads(x.to(device), backend, hard=hard, epsilon=epsilon)
    # the kernels mix v + q (b - a) where the reference forms q b + (1 - q) a, over n^2 / 2 comparators; swaps sums
    # n^2 / 2 probabilities
    scale = max(1.0, n * n / 50)
    for a, b, what in zip(out, ref, ("sorted", "swaps", "any_swap", "grad")):
        assert a.shape == b.shape and a.dtype == b.dtype, what
        assert_close(a.cpu(), b, torch.float64, scale=scale, msg=f"{what} float64")
    low = bubble_grads(x.float(), "reference", hard=hard, epsilon=epsilon)
    out32 = bubble_grads(x.to(device, torch.float32), backend, hard=hard, epsilon=epsilon)
    for a, lo, b, what in zip(out32, low, ref, ("sorted", "swaps", "any_swap", "grad")):
        assert_as_accurate_as_reference(a.cpu(), lo, b, torch.float32, scale=scale, msg=f"{what} float32")


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values == INTERPRETED])
def test_triton_interpreted_longer_row(backend, device):
    x = gapped((2, 20), gap=0.1)
    ref = bubble_grads(x, "reference")
    out = bubble_grads(x.to(device), backend)
    for a, b in zip(out, ref):
        assert_close(a.cpu(), b, torch.float64, scale=10)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("B", [0, 1, 3, 9])  # the CPU kernels run rows in groups of 4
def test_batch_sizes_and_shapes(backend, device, B):
    x = torch.randn(B, 6, dtype=torch.float64)
    ref = bubble_grads(x, "reference")
    out = bubble_grads(x.to(device), backend)
    for a, b in zip(out, ref):
        assert a.shape == b.shape
        assert_close(a.cpu(), b, torch.float64)
    x2 = torch.randn(2, 3, 5, dtype=torch.float64)
    r = bubble_sort(x2.to(device), backend=backend)
    assert r.sorted.shape == (2, 3, 5) and r.swaps.shape == (2, 3) and r.any_swap.shape == (2, 3)
    flat = bubble_sort(x2.reshape(6, 5), backend="reference")
    assert_close(r.swaps.cpu(), flat.swaps.reshape(2, 3), torch.float64)
    one = bubble_sort(x2[0, 0].to(device), backend=backend)  # a 1-D input is a batch of one
    assert one.sorted.shape == (5,) and one.swaps.shape == ()


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("hard,epsilon", [(False, 0.0), (False, 1e-5), (True, 0.0)])
def test_gradcheck(backend, hard, epsilon):
    """float64 finite differences of all three outputs at separated values (the trip count, piecewise constant
    in x, does not change within the steps; in the hard mode only the values' permutation has a gradient)."""
    for n in (2, 4, 6):
        x = gapped((3, n), gap=0.2).requires_grad_(True)
        assert torch.autograd.gradcheck(
            lambda v: tuple(bubble_sort(v, 3.0, hard=hard, epsilon=epsilon, backend=backend)),
            (x,),
            eps=1e-6,
            atol=1e-6,
            rtol=1e-5,
        )


def test_anchors():
    """The anchors of docs/math/algorithms.md §3 (AlgoVision, float64, its default epsilon = 1e-5). For [3, 1, 2] and
    [1, 2, 3] at beta = 5 AlgoVision skips no branch (its result at epsilon = 0 is the same), so they hold to 1e-7
    relative; for [0.3, -1.2, 0.8, 0.1] at beta = 8 its skip moves the values by 9e-6 and swaps by 4e-6 from the
    relaxation the
    fused op computes, and the anchor has 5 decimals: 1e-5 absolute."""
    for backend in CPU_EXACT:
        x = torch.tensor([[3.0, 1.0, 2.0]], dtype=torch.float64, requires_grad=True)
        r = bubble_sort(x, 5.0, backend=backend)
        want = torch.tensor([[1.00661042, 2.00017563, 2.99321394]], dtype=torch.float64)
        torch.testing.assert_close(r.sorted, want, rtol=1e-7, atol=1e-8)
        assert abs(r.swaps.item() - 1.99973559) <= 1e-7 * 2
        (g,) = torch.autograd.grad(r.swaps.sum(), x)
        torch.testing.assert_close(
            g, torch.tensor([[0.0343374, 0.03194674, -0.06628414]], dtype=torch.float64), rtol=1e-6, atol=1e-8
        )
        assert g[0, 2] < 0  # docs/math/algorithms.md §5.3: increasing the last element reduces the swaps
        x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
        r = bubble_sort(x, 5.0, backend=backend)
        torch.testing.assert_close(
            r.sorted, torch.tensor([[1.00678311, 1.99973423, 2.99348266]], dtype=torch.float64), rtol=1e-7, atol=1e-8
        )
        assert abs(r.swaps.item() - 0.01325774) <= 1e-7 * 0.01325774 + 5e-9
        assert abs(r.any_swap.item() - 0.013213222) <= 1e-7 * 0.013213222 + 5e-10
        (g_swaps,) = torch.autograd.grad(r.swaps.sum(), x, retain_graph=True)
        (g_any,) = torch.autograd.grad(r.any_swap.sum(), x)
        torch.testing.assert_close(
            g_swaps, torch.tensor([[0.03308486, -0.00071483, -0.03237003]], dtype=torch.float64), rtol=1e-6, atol=1e-8
        )
        torch.testing.assert_close(
            g_any, torch.tensor([[0.03286329, -0.00071416, -0.03214913]], dtype=torch.float64), rtol=1e-6, atol=1e-8
        )
        x = torch.tensor([[0.3, -1.2, 0.8, 0.1]], dtype=torch.float64)
        r = bubble_sort(x, 8.0, backend=backend)
        torch.testing.assert_close(
            r.sorted, torch.tensor([[-1.19996, 0.13594, 0.27575, 0.78827]], dtype=torch.float64), rtol=0, atol=1e-5
        )
        assert abs(r.swaps.item() - 2.85293) <= 1e-5
        assert bubble_sort(x, 8.0, hard=True, backend=backend).swaps.item() == 3.0


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_hard_limit(backend, device):
    """hard=True: torch.sort's values and the number of inversions, exactly; a large beta on separated values
    approaches them."""
    n = 7 if (backend, device) == INTERPRETED else 12
    x = gapped((5, n), gap=0.1).to(device)
    r = bubble_sort(x, 5.0, hard=True, backend=backend)
    assert torch.equal(r.sorted, x.sort(-1).values)
    want = torch.tensor([inversions(row.tolist()) for row in x.cpu()], dtype=torch.float64)
    assert torch.equal(r.swaps.cpu(), want)
    assert torch.equal(r.any_swap.cpu(), (want > 0).double())
    soft = bubble_sort(x, 400.0, epsilon=0.0, backend=backend)
    assert_close(soft.sorted, x.sort(-1).values, torch.float32)
    assert_close(soft.swaps.cpu(), want, torch.float32)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_sortedness(backend, device):
    """docs/math/algorithms.md §5.3: on well separated sorted rows the swap loss goes to 0 as beta grows; the gradient
    of swaps moves out-of-order pairs towards the right order."""
    x = torch.arange(6, dtype=torch.float64, device=device)[None]
    losses = [bubble_sort(x, beta, backend=backend).swaps.item() for beta in (1.0, 4.0, 16.0)]
    assert losses[0] > losses[1] > losses[2] and losses[2] < 1e-6
    v = torch.tensor([[3.0, 1.0, 2.0]], dtype=torch.float64, device=device, requires_grad=True)
    (g,) = torch.autograd.grad(bubble_sort(v, 5.0, backend=backend).swaps.sum(), v)
    assert g[0, 2] < 0 and g[0, 0] > 0


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_loop_limits(backend, device):
    """max_iter = 0 returns the input; max_iter = 1 the state after one pass (the remaining mass goes to the last
    state, docs/math/algorithms.md §5.2); epsilon >= 1 runs no pass; the pass count is at most n."""
    x = torch.randn(3, 6, dtype=torch.float64, device=device)
    r = bubble_sort(x, max_iter=0, backend=backend)
    assert torch.equal(r.sorted, x) and (r.swaps == 0).all() and (r.any_swap == 0).all()
    r = bubble_sort(x, epsilon=1.0, backend=backend)
    assert torch.equal(r.sorted, x) and (r.swaps == 0).all()
    one = bubble_sort(x, 5.0, max_iter=1, backend=backend)
    v = list(x.cpu().unbind(-1))
    swaps, any_swap = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for k in range(5):
        p = torch.sigmoid(5.0 * (v[k] - v[k + 1]))
        v[k], v[k + 1] = p * v[k + 1] + (1 - p) * v[k], p * v[k] + (1 - p) * v[k + 1]
        swaps, any_swap = swaps + p, p + (1 - p) * any_swap
    assert_close(one.sorted.cpu(), torch.stack(v, -1), torch.float64)
    assert_close(one.swaps.cpu(), swaps, torch.float64)
    assert_close(one.any_swap.cpu(), any_swap, torch.float64)
    if backend != "reference":
        *_, states, trips = ops.bubble_sort_fwd(x.contiguous(), 5.0, False, 1024, 0.0, backend)
        assert states.shape == (3, 6, 9) and trips.item() == 6  # epsilon = 0: until the pass without pairs


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_batch_wide_loop(backend, device):
    """Every row runs the batch's trip count: at epsilon = 0 a row's result does not depend on the batch (the extra
    passes have weight 0); at epsilon > 0 it depends on it by at most ~epsilon max|x| per output."""
    x = torch.stack([torch.linspace(0, 5, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64) * 3]).to(device)
    for epsilon, tol in ((0.0, 1e-12), (1e-3, 1e-3 * 8 * 5)):
        both = bubble_sort(x, 5.0, epsilon=epsilon, backend=backend)
        alone = bubble_sort(x[:1], 5.0, epsilon=epsilon, backend=backend)
        for a, b in zip(both, alone):
            assert (a[:1] - b).abs().max() <= tol
    alone = bubble_sort(x[:1], 5.0, epsilon=1e-3, backend=backend)
    both = bubble_sort(x, 5.0, epsilon=1e-3, backend=backend)
    assert (both.sorted[0] - alone.sorted[0]).abs().max() > 0  # the sorted row ran more passes in the batch


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_row(backend, device, bad):
    """A row with a non-finite value is NaN (outputs and gradient) and takes no part in the trip count: the other
    rows are those of the batch without it."""
    x = torch.randn(6, 5, dtype=torch.float64)
    x[4, 2] = bad
    keep = [0, 1, 2, 3, 5]
    out = bubble_grads(x.to(device), backend, seed=None)
    clean = bubble_grads(x[keep].to(device), backend, seed=None)
    assert all(o[4].isnan().all() for o in out)
    for a, c in zip(out, clean):
        assert_close(a[keep].cpu(), c.cpu(), torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    x = gapped((3, 7), gap=0.1)
    exact = bubble_grads(x, "reference")
    low = bubble_grads(x.to(dtype), "reference")
    out = bubble_grads(x.to(device, dtype), backend)
    for a, lo, e in zip(out, low, exact):
        assert a.dtype == dtype
        assert_low_precision_close(a.cpu(), lo, e, slack=1e-2 * max(1.0, e.abs().max().item()))


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls make: every mode of MODES, a pass limit that stops the
    loop early, an empty batch."""
    x = gapped((3, 5), gap=0.2).to(device)
    cases = [(x, dict(hard=hard, epsilon=epsilon)) for hard, epsilon in MODES]
    cases += [(x, dict(max_iter=2, epsilon=0.0)), (x[:0], {})]
    for values, kw in cases:
        names = opcheck_calls(bubble_sort, values, 4.0, backend=backend, **kw)
        assert names == ["relaxops::bubble_sort_fwd", "relaxops::bubble_sort_bwd"], (kw, names)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic):
    backend = "cpu" if "cpu" in KERNELS_CPU else "reference"
    torch._dynamo.reset()

    def f(v):
        r = bubble_sort(v, 4.0, backend=backend)
        return r.sorted, r.swaps, r.any_swap

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for shape in ((3, 6), (4, 9)):
        x = gapped(shape, gap=0.2).requires_grad_(True)
        eager, comp = f(x), compiled(x)
        for a, b in zip(comp, eager):
            assert_close(a, b, torch.float64)
        g1 = torch.autograd.grad(sum(o.sum() for o in comp), x)[0]
        g2 = torch.autograd.grad(sum(o.sum() for o in eager), x)[0]
        assert_close(g1, g2, torch.float64)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(beta=0.0), ValueError, "beta must be a finite number > 0"),
        (dict(beta=math.nan), ValueError, "beta must be a finite number > 0"),
        (dict(hard=1), TypeError, "hard must be a bool"),
        (dict(max_iter=2.0), TypeError, "max_iter must be an int"),
        (dict(max_iter=-1), ValueError, r"max_iter must be in \[0, 2\^31 - 1\]"),
        (dict(epsilon=-1e-5), ValueError, "epsilon must be a finite number >= 0"),
        (dict(epsilon=math.inf), ValueError, "epsilon must be a finite number >= 0"),
        (dict(epsilon="0"), ValueError, "epsilon must be a finite number >= 0"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        bubble_sort(torch.randn(2, 5), **kwargs)


def test_bad_values():
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        bubble_sort([1.0, 2.0])
    with pytest.raises(TypeError, match="values must be float16, bfloat16, float32 or float64"):
        bubble_sort(torch.arange(5))
    with pytest.raises(ValueError, match=r"n >= 1"):
        bubble_sort(torch.zeros(3, 0))
    with pytest.raises(ValueError, match=r"values must have at least 1 dimension"):
        bubble_sort(torch.tensor(1.0))


def test_memory_refusal():
    x = torch.zeros(1, 20000).expand(10**4, 20000)
    with pytest.raises(MemoryError, match=r"GiB.*use a smaller batch or max_iter"):
        bubble_sort(x, backend="cpu" if "cpu" in KERNELS_CPU else "reference")


@pytest.mark.parametrize("backend", KERNELS_CPU)
def test_registered_ops_check_arguments(backend):
    x = gapped((2, 4), gap=0.2)
    cases = [
        ((x.float().t(), 1.0, False, 10, 0.0, backend), ValueError, "x must be contiguous"),
        ((x[:, :0], 1.0, False, 10, 0.0, backend), ValueError, "n >= 1"),
        ((x.long(), 1.0, False, 10, 0.0, backend), TypeError, "x must have dtype"),
        ((x, 0.0, False, 10, 0.0, backend), ValueError, "beta must be a finite number > 0"),
        ((x, 1.0, False, -1, 0.0, backend), ValueError, "max_iter must be an integer"),
        ((x, 1.0, False, 10, -1.0, backend), ValueError, "epsilon must be a finite number >= 0"),
        ((x, 1.0, False, 10, 0.0, "reference"), ValueError, "backend must be one of"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            ops.bubble_sort_fwd(*args)
    s, w, a, states, trips = ops.bubble_sort_fwd(x, 1.0, False, 10, 0.0, backend)
    with pytest.raises(ValueError, match=r"states must have shape \[2, \*, 7\]"):
        ops.bubble_sort_bwd(s, w, a, x, states[..., :6].contiguous(), trips, 1.0, False, backend)
    with pytest.raises(ValueError, match="states must have at most n = 4 passes"):
        ops.bubble_sort_bwd(s, w, a, x, torch.cat([states, states], 1), trips, 1.0, False, backend)
    with pytest.raises(TypeError, match="trips must have dtype"):
        ops.bubble_sort_bwd(s, w, a, x, states, trips.long(), 1.0, False, backend)
    with pytest.raises((ValueError, IndexError), match="trips must"):
        ops.bubble_sort_bwd(s, w, a, x, states, trips + 10, 1.0, False, backend)


# --- AlgoVision's programs (docs/math/algorithms.md §4.1 and its examples/bubble.py) ----------------------------------


def algovision_bubble(beta, epsilon, hard=False):
    """AlgoVision's program (docs/math/algorithms.md §4.1) built with its own classes: sorted values, swaps and
    any_swap."""
    av = pytest.importorskip("algovision")
    return programs.bubble_sort_program(beta, M=av, epsilon=epsilon, hard=hard)


def algovision_example(beta, epsilon):
    """AlgoVision's examples/bubble.py (`array`, `loss_sum`, the second index through an integer variable j)."""
    av = pytest.importorskip("algovision")
    z = torch.float64
    return av.Algorithm(
        av.Input("array"),
        av.Var("a", torch.tensor(0.0, dtype=z)),
        av.Var("b", torch.tensor(0.0, dtype=z)),
        av.Var("swapped", torch.tensor(1.0, dtype=z)),
        av.Var("loss_sum", torch.tensor(0.0, dtype=z)),
        av.VarInt("j", 0),
        av.VarInt("n", lambda array: array.shape[1] - 1),
        av.While(
            av.IsTrue("swapped"),
            av.Let("swapped", 0),
            av.For(
                "i",
                "n",
                av.LetInt("j", lambda i: i + 1),
                av.Let("a", "array", ["i"]),
                av.Let("b", "array", ["j"]),
                av.If(
                    av.GT("a", "b"),
                    if_true=[
                        av.Let("array", [lambda i: i + 1], "a"),
                        av.Let("array", ["i"], "b"),
                        av.Let("swapped", lambda swapped: 1.0),
                        av.Let("loss_sum", lambda loss_sum: loss_sum + 1.0),
                    ],
                ),
            ),
            av.LetInt("n", lambda n: n - 1),
        ),
        av.Output("array"),
        av.Output("loss_sum"),
        beta=beta,
        epsilon=epsilon,
    )


@pytest.mark.parametrize("epsilon", [0.0, 1e-9])
@pytest.mark.parametrize("hard", [False, True])
def test_matches_algovision(epsilon, hard):
    """AlgoVision's program with (almost) no branch skipping, float64: the three outputs and their gradients."""
    x = torch.randn(4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2
    x[0] = torch.arange(9.0)  # sorted: tiny swap probabilities, skipped at AlgoVision's default epsilon
    x = x.requires_grad_(True)
    w = torch.randn(4, 9, dtype=torch.float64)
    av_out = algovision_bubble(6.0, epsilon, hard)(x)
    av_grad = torch.autograd.grad((av_out[0] * w).sum() + av_out[1].sum() + 2 * av_out[2].sum(), x)[0]
    for backend in CPU_EXACT:
        out = bubble_sort(x, 6.0, hard=hard, epsilon=epsilon, backend=backend)
        grad = torch.autograd.grad((out[0] * w).sum() + out[1].sum() + 2 * out[2].sum(), x)[0]
        for a, b in zip((*out, grad), (*av_out, av_grad)):
            assert_close(a, b, torch.float64, scale=10)


def test_matches_algovision_example():
    """AlgoVision's own example program (loss_sum = swaps) at epsilon = 0."""
    x = torch.randn(5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    array, loss_sum = algovision_example(5.0, 0.0)(x)
    av_grad = torch.autograd.grad(loss_sum.sum() + array[:, 0].sum(), x)[0]
    for backend in CPU_EXACT:
        out = bubble_sort(x, 5.0, epsilon=0.0, backend=backend)
        grad = torch.autograd.grad(out.swaps.sum() + out.sorted[:, 0].sum(), x)[0]
        assert_close(out.sorted, array, torch.float64, scale=10)
        assert_close(out.swaps, loss_sum, torch.float64, scale=10)
        assert_close(grad, av_grad, torch.float64, scale=10)


def test_algovision_default_epsilon():
    """At AlgoVision's default epsilon = 1e-5 a swap whose probability is <= 1e-5 for the whole batch is skipped;
    the fused op computes it. One row, beta = 8: the skip moves the values by ~1e-6 and the gradient of swaps by
    ~1e-5 relative (measured 2.4e-5 of 6.8)."""
    x = torch.randn(1, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_(True)
    av_out = algovision_bubble(8.0, 1e-5)(x)
    av_grad = torch.autograd.grad(av_out[1].sum(), x)[0]
    out = bubble_sort(x, 8.0, backend="reference")
    grad = torch.autograd.grad(out.swaps.sum(), x)[0]
    assert 0 < (out.sorted - av_out[0]).abs().max() < 1e-4
    assert 0 < (grad - av_grad).abs().max() < 1e-3 * grad.abs().max()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_double_backward_raises(backend, device):
    """Eager calls bypass the dispatcher, but not under create_graph: a second derivative through the kernels
    raises instead of silently leaving out this op's term."""
    x = gapped((2, 5), gap=0.1).to(device).requires_grad_(True)
    (g,) = torch.autograd.grad((bubble_sort(x, backend=backend).swaps ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="bubble_sort_bwd.*no autograd formula"):
        torch.autograd.grad(g.sum() + (x**3).sum(), x)
