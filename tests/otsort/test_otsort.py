"""Optimal-transport sort, ranks, quantiles and top-k on every backend against the float64 reference; both backward
modes against finite differences of the forward; the read-outs' invariants and limits."""

import functools
import math

import pytest
import torch
from relaxops import OTSort, _triton, ot_quantile, ot_rank, ot_sort, ot_topk
from relaxops.otsort import squash
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    gapped,
    outputs_and_grads,
)

SIZES = (1, 2, 3, 5, 7, 33, 100)
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]
# converged solves (tolerance far below the comparisons), moderate epsilon so that n = 100 needs few iterations
TIGHT = dict(epsilon=5e-2, tolerance=1e-11, max_iterations=5000)
# the Triton interpreter runs every iteration in Python: a larger epsilon converges in a few iterations (the
# annealing path runs in test_batch_shapes)
TIGHT_TRITON = dict(epsilon=0.3, tolerance=1e-9, max_iterations=2000)
TRITON_SIZES = (1, 2, 7)


def _topk_values_and_mask(x, **kw):
    v, mk = ot_topk(x, max(1, x.shape[-1] // 3), **kw)
    return v, mk


OPS = {
    "sort": ot_sort,
    "rank": ot_rank,
    "sort_m3": functools.partial(ot_sort, num_targets=3),
    "rank_desc": functools.partial(ot_rank, descending=True),
    "quantile": functools.partial(ot_quantile, q=[0.8, 0.25, 0.5]),
    "topk": _topk_values_and_mask,
}


def ot_call(op, x, backend, **kw):
    """A case's call, (function, args, kwargs): what the reference checks run and the op checks
    (tests/otsort/test_compile.py) check the ops of."""
    return OPS[op], (x,), dict(backend=backend, **kw)


def ot_grads(op, x, backend, seed=7, **kw):
    """The outputs of ``op`` and the input gradient of a fixed random linear functional of them."""
    fn, args, kwargs = ot_call(op, x, backend, **kw)
    return outputs_and_grads(fn, *args, seed=seed, **kwargs)


# (backend, device, n): the Triton interpreter (every iteration in Python) on TRITON_SIZES, the rest on SIZES
MATCH_CASES = [
    pytest.param(*p.values, n, id=f"{p.id}-{n}", marks=p.marks)
    for p in KERNEL_BACKEND_DEVICE
    for n in (TRITON_SIZES if p.values == ("triton", "cpu") else SIZES)
]
# the invariant tests below run the Triton interpreter only through the comparisons above (too slow otherwise)
NOT_INTERPRETED = [p for p in BACKEND_DEVICE if p.values != ("triton", "cpu")]


@pytest.mark.parametrize("backend,device,n", MATCH_CASES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("backward", ["implicit", "unrolled"])
def test_matches_reference(backend, device, op, n, backward):
    x = gapped((3, n), gap=0.1)
    kw = dict(TIGHT_TRITON if backend == "triton" else TIGHT, backward=backward)
    ref = ot_grads(op, x, "reference", **kw)
    out = ot_grads(op, x.to(device), backend, **kw)
    scale = max(1.0, n / 10)
    # the implicit gradient is a conjugate-gradient solve to a relative residual of 1e-12 (1e-6 in float32, where
    # the reference's pseudo-inverse is exact to rounding): its error is that times the condition number of the
    # Schur complement, below 1e4 at these settings, so gradients compare to 1e-8 (1e-2) of their largest entry
    gmax = ref[-1].abs().max().item()
    gscale = [scale] * (len(out) - 1) + [max(scale, (1e2 if backward == "implicit" else 1) * gmax)]
    for a, b, sc in zip(out, ref, gscale):
        assert a.shape == b.shape
        assert_close(a.cpu(), b, torch.float64, scale=sc, msg=f"{op} float64")
    kw32 = dict(kw, tolerance=1e-5)  # what float32 reaches (1e-11 would run max_iterations)
    ref32 = ot_grads(op, x.float(), "reference", **kw32)
    out32 = ot_grads(op, x.to(device, torch.float32), backend, **kw32)
    for a, r, b, sc in zip(out32, ref32, ref, gscale):
        assert_as_accurate_as_reference(a.cpu(), r, b, torch.float32, scale=sc * 10, msg=f"{op} float32")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_weights_targets_and_plan(backend, device):
    """Weighted inputs, m != n weighted targets at chosen positions: the read-outs are those of the returned plan,
    whose rows sum to a (exactly after the row sweep) and columns to b (to the tolerance)."""
    n, m = 9, 4
    x = gapped((2, n), gap=0.1).to(device)
    a = torch.rand(2, n, dtype=torch.float64, device=device) + 0.5
    b = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64, device=device)
    y = torch.tensor([0.0, 0.3, 0.5, 1.0], dtype=torch.float64, device=device)
    kw = dict(a=a, b=b, y=y, epsilon=0.05, tolerance=1e-10, return_plan=True, backend=backend)
    vals, T = ot_sort(x, **kw)
    ranks, T2 = ot_rank(x, **kw)
    assert vals.shape == (2, m) and ranks.shape == (2, n) and T.shape == (2, n, m)
    assert_close(T, T2, torch.float64)
    an, bn = a / a.sum(-1, keepdim=True), b / b.sum()
    assert_close(T.sum(-1), an, torch.float64)
    assert_close(T.sum(-2), bn.expand(2, m), torch.float64, scale=1e3)
    assert_close(vals, (T * x.unsqueeze(-1)).sum(-2) / bn, torch.float64)
    assert_close(ranks, (T * (n * bn.cumsum(0) - 1)).sum(-1) / an, torch.float64)


@pytest.mark.parametrize("backend,device", NOT_INTERPRETED)
def test_hard_limit(backend, device):
    """Small epsilon, separated values: the hard sort, ranks, top-k and quantiles."""
    x = gapped((4, 11), gap=0.3).to(device)
    kw = dict(epsilon=1e-4, epsilon0=0.1, tolerance=1e-4, backend=backend, squashing="none")
    x01 = (x - x.amin(-1, keepdim=True)) / (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True))  # spread on [0, 1]
    hard_rank = x.argsort(-1).argsort(-1).double()
    assert_close(ot_rank(x01, **kw), hard_rank, torch.float32, scale=100)
    assert_close(ot_rank(x01, descending=True, **kw), 10 - hard_rank, torch.float32, scale=100)
    assert_close(ot_sort(x01, **kw), x01.sort(-1).values, torch.float32, scale=100)
    top = ot_topk(x01, 3, **kw)
    assert_close(top.values, x01.topk(3).values, torch.float32, scale=100)
    assert_close(top.mask, (hard_rank >= 8).double(), torch.float32, scale=100)
    small = ot_topk(x01, 2, largest=False, **kw)
    assert_close(small.values, x01.topk(2, largest=False).values, torch.float32, scale=100)


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("backward", ["implicit", "unrolled"])
def test_backward_matches_finite_differences(backend, backward):
    """float64 finite differences of the forward. Unrolled: the exact derivative of the computed potentials, at the
    default tolerance (where the iteration count does not change). Implicit: the derivative of the fixed point,
    matched once the forward is converged; at the default tolerance it differs by the truncation error."""
    x = gapped((2, 6), gap=0.2).requires_grad_(True)
    a = (torch.rand(2, 6, dtype=torch.float64) + 0.5).requires_grad_(True)
    y = torch.tensor([0.0, 0.2, 0.7, 1.0], dtype=torch.float64, requires_grad=True)
    tol = 1e-12 if backward == "implicit" else 1e-2
    for fn in (ot_sort, ot_rank):

        def f(x, a, y, fn=fn):
            return fn(x, 0.05, a=a, y=y, tolerance=tol, backward=backward, backend=backend)

        assert torch.autograd.gradcheck(f, (x, a, y), eps=1e-6, atol=1e-5, rtol=1e-4)
    if backward == "implicit":  # not converged: the implicit gradient is that of the fixed point, not of the output

        def loose(v):
            return ot_rank(v, 0.05, tolerance=0.2, backward="implicit", backend=backend)

        assert not torch.autograd.gradcheck(loose, (x,), eps=1e-6, atol=1e-5, rtol=1e-4, raise_exception=False)


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("op", ["quantile", "topk", "sort_m3", "rank_desc"])
def test_gradcheck(backend, op):
    x = gapped((2, 7), gap=0.15).requires_grad_(True)
    for backward, tol in (("implicit", 1e-12), ("unrolled", 1e-2)):

        def f(v, tol=tol, backward=backward):
            return OPS[op](v, epsilon=0.05, tolerance=tol, backward=backward, backend=backend)

        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", CPU_EXACT)
def test_gradcheck_plan_and_target_weights(backend):
    x = gapped((2, 5), gap=0.2).requires_grad_(True)
    b = torch.tensor([0.3, 0.2, 0.5], dtype=torch.float64, requires_grad=True)

    def f(v, w):
        vals, T = ot_sort(v, 0.05, b=w, tolerance=1e-12, return_plan=True, backend=backend)
        return vals, T

    assert torch.autograd.gradcheck(f, (x, b), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend,device", NOT_INTERPRETED)
def test_permutation_equivariance(backend, device):
    x = torch.randn(3, 13, dtype=torch.float64, device=device)
    perm = torch.randperm(13, device=device)
    kw = dict(epsilon=0.01, tolerance=1e-9, backend=backend)
    assert_close(ot_rank(x[:, perm], **kw), ot_rank(x, **kw)[:, perm], torch.float64, scale=1e3)
    assert_close(ot_sort(x[:, perm], **kw), ot_sort(x, **kw), torch.float64, scale=1e3)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7)])
def test_batch_shapes(backend, device, shape):
    x = torch.randn(shape, dtype=torch.float64)
    for op in ("sort", "rank", "topk", "quantile"):
        ref = ot_grads(op, x, "reference", epsilon=0.05)
        out = ot_grads(op, x.to(device), backend, epsilon=0.05)
        for a, b in zip(out, ref):
            assert a.shape == b.shape
            assert_close(a.cpu(), b, torch.float64, scale=10)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    x = torch.randn(3, 17, dtype=torch.float64)
    for op in ("sort", "rank"):
        exact = ot_grads(op, x, "reference", epsilon=0.05)
        low = ot_grads(op, x.to(dtype), "reference", epsilon=0.05)
        out = ot_grads(op, x.to(device, dtype), backend, epsilon=0.05)
        for a, lr, e in zip(out, low, exact):
            assert a.dtype == dtype
            assert_low_precision_close(a.cpu(), lr, e, slack=2e-2 * max(1.0, e.abs().max().item()))


@pytest.mark.parametrize("backend,device", NOT_INTERPRETED)
def test_default_settings(backend, device):
    """The authors' defaults (epsilon 1e-3 annealed from 0.1, tolerance 1e-2; docs/math/otsort.md §2): close to the
    hard ranks; the column marginals within the tolerance."""
    x = gapped((2, 40), gap=0.1).to(device)
    r, T = ot_rank(x, return_plan=True, backend=backend)
    hard = x.argsort(-1).argsort(-1).double()
    assert (r - hard).abs().max() < 1.0
    assert ((T.sum(-2) * 40 - 1).abs().max()) <= 1e-2 + 1e-9


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_module(backend, device):
    x = torch.randn(2, 3, 8, dtype=torch.float64, device=device)
    mod = OTSort(0.05, descending=True, backend=backend)
    values, ranks = mod(x)
    assert_close(values, ot_sort(x, 0.05, descending=True, backend=backend), torch.float64)
    assert_close(ranks, ot_rank(x, 0.05, descending=True, backend=backend), torch.float64)
    assert "epsilon=0.05" in repr(mod)


def test_reference_is_the_dense_formula():
    """The oracle itself against the loop of docs/math/otsort.md §2 written out for one row (no annealing), so that
    the reference cannot drift with the kernels: T has marginals a, b; ranks are n T cs(b) / a - 1."""
    x = torch.randn(1, 6, dtype=torch.float64)
    xs = squash(x)
    z = (x - x.mean()) / x.std(unbiased=False)
    assert_close(xs, torch.sigmoid(z * math.pi / math.sqrt(3)), torch.float64)
    y = torch.linspace(0, 1, 6, dtype=torch.float64)
    C = (xs[0, :, None] - y[None]) ** 2
    f, g, e = torch.zeros(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64), 0.05
    for _ in range(500):
        g = e * math.log(1 / 6) - e * torch.logsumexp((f[:, None] - C) / e, 0)
        f = e * math.log(1 / 6) - e * torch.logsumexp((g[None] - C) / e, 1)
    T = torch.exp((f[:, None] + g[None] - C) / e)
    r = ot_rank(x, e, epsilon0=None, tolerance=0.0, max_iterations=500, backend="reference")
    cs = torch.arange(1, 7, dtype=torch.float64) / 6  # cumulative target weights
    assert_close(r[0], 6 * (T @ cs) / (1 / 6) - 1, torch.float64)
    assert_close(
        ot_sort(x, e, epsilon0=None, tolerance=0.0, max_iterations=500, backend="reference")[0],
        (T * x[0, :, None]).sum(0) * 6,
        torch.float64,
    )


@pytest.mark.heavy
@pytest.mark.skipif(("triton", "cpu") not in [p.values for p in BACKEND_DEVICE], reason="Triton is not available")
@pytest.mark.parametrize("backward", ["implicit", "unrolled"])
def test_gpu_tiling_matches_reference(monkeypatch, backward):
    """The Triton kernels with a GPU's launch plan (relaxops._triton.PLAN_FOR_GPU: float64 tiles of 32 x 64 and
    float32 tiles of 64 x 64 on 8 warps), run by the interpreter: n = 70 sources and targets span 3 x 2 float64
    tiles and 2 x 2 float32 tiles, the last ones partial."""
    monkeypatch.setattr(_triton, "PLAN_FOR_GPU", True)
    x = gapped((2, 70), gap=0.1)
    kw = dict(TIGHT_TRITON, backward=backward)
    ref = ot_grads("rank", x, "reference", **kw)  # ot_sort runs the same kernels
    out = ot_grads("rank", x, "triton", **kw)
    gmax = ref[-1].abs().max().item()
    gscale = [7.0] * (len(out) - 1) + [max(7.0, (1e2 if backward == "implicit" else 1) * gmax)]
    for a, b, sc in zip(out, ref, gscale):  # the bounds of test_matches_reference at n = 70
        assert_close(a, b, torch.float64, scale=sc, msg="float64")
    kw32 = dict(kw, tolerance=1e-5)
    ref32 = ot_grads("rank", x.float(), "reference", **kw32)
    out32 = ot_grads("rank", x.float(), "triton", **kw32)
    for a, r, b, sc in zip(out32, ref32, ref, gscale):
        assert_as_accurate_as_reference(a, r, b, torch.float32, scale=sc * 10, msg="float32")
