"""Property-based fuzzing of the fused relaxed edit distance and bubble sort on every backend that runs here (Triton
through the interpreter on small cases): random batch shapes (empty, 1-D), sizes, dtypes, layouts, temperatures,
loop settings, and values that are tied, huge, tiny or non-finite."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from relaxops.algorithms.functional import bubble_sort, edit_distance
from strategies import BATCH, FLOAT_DTYPES, LAYOUTS, extreme, layout, well_conditioned
from testing import BACKEND_DEVICE, assert_close

BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
SMALL = st.one_of(st.integers(0, 7), st.sampled_from([16, 17]))  # edit distance lengths (0 allowed)
ROWS = st.one_of(st.integers(1, 9), st.sampled_from([16, 17, 33]))  # bubble sort lengths
BETAS = st.sampled_from([1e-3, 0.5, 5.0, 100.0, 1e6])
SMALL_TRITON = 7  # largest length run through the Triton interpreter


def backends_for(n):
    return [b for b in BACKENDS if b != "triton" or n <= SMALL_TRITON]


# --- edit distance ---------------------------------------------------------------------------------------------------


@st.composite
def letter_pairs(draw):
    """(s [..., n, K], t [..., m, K]) in one dtype: distributions, or extreme non-negative scores (ties, huge,
    tiny, zero letters)."""
    batch, n, m, K = draw(BATCH), draw(SMALL), draw(SMALL), draw(st.integers(1, 5))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    kind = draw(st.sampled_from(["softmax", "one_hot", "extreme", "zeros"]))

    def make(length):
        shape = (*batch, length, K)
        if kind == "softmax":
            return torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64) * 3, -1).to(dtype)
        if kind == "one_hot":
            return torch.nn.functional.one_hot(torch.randint(0, K, shape[:-1], generator=g), K).to(dtype)
        if kind == "zeros":
            return torch.zeros(shape, dtype=dtype)
        return draw(extreme(shape, dtype, allow_nonfinite=False)).abs()

    return make(n), make(m)


@given(letter_pairs(), BETAS, LAYOUTS)
@settings(max_examples=40)
def test_edit_distance_finite_input_invariants(pair, beta, kind):
    """Finite letters, every temperature and layout: finite distances and gradients in the input dtype, within [0,
    max(n, m)] up to the relaxation's excess (at most log(3) (n + m) / beta), equal on every backend. The gradient
    with respect to a letter of norm r below eps = 1e-8 is of order 1 / eps (torch's cosine does not differentiate
    its clamp), beyond the half types' range: their gradients are checked when every norm is above 1e-2."""
    s, t = (layout(x, kind) if x.dim() > 2 else x for x in pair)
    n, m = s.shape[-2], t.shape[-2]
    low = s.dtype in (torch.float16, torch.bfloat16)
    norms = torch.cat([s.double().norm(dim=-1).flatten(), t.double().norm(dim=-1).flatten()])
    grads_finite = not low or norms.numel() == 0 or norms.min() > 1e-2
    outs = []
    for backend in backends_for(max(n, m)):
        ss, tt = s.detach().requires_grad_(True), t.detach().requires_grad_(True)
        d = edit_distance(ss, tt, beta, backend=backend)
        gs, gt = torch.autograd.grad(d.sum(), (ss, tt))
        assert d.shape == s.shape[:-2] and d.dtype == s.dtype and gs.dtype == s.dtype
        assert d.isfinite().all(), backend
        assert not grads_finite or (gs.isfinite().all() and gt.isfinite().all()), backend
        slack = math.log(3) * (n + m) / beta + 1e-2 * max(n, m, 1)
        assert ((d.double() >= -slack) & (d.double() <= max(n, m) + slack)).all(), backend
        outs.append(d.double())
    for d in outs[1:]:
        assert_close(
            d,
            outs[0],
            torch.float32 if low or s.dtype == torch.float32 else torch.float64,
            scale=1e3 * max(1, n + m) if low else max(1, n + m),
        )


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
@settings(max_examples=20)
def test_edit_distance_non_finite_rows(n, m, K, seed):
    """A NaN or infinite letter: its row's distance and gradient are NaN on every backend; other rows equal those
    of the batch without it."""
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(3, n, K, generator=g, dtype=torch.float64)
    t = torch.rand(3, m, K, generator=g, dtype=torch.float64)
    s[1, int(torch.randint(0, n, (1,), generator=g)), 0] = [math.nan, math.inf, -math.inf][seed % 3]
    for backend in backends_for(max(n, m)):
        ss = s.clone().requires_grad_(True)
        d = edit_distance(ss, t, backend=backend)
        (gs,) = torch.autograd.grad(d.sum(), ss)
        assert d[1].isnan() and gs[1].isnan().all(), backend
        clean = edit_distance(s[[0, 2]], t[[0, 2]], backend=backend)
        assert_close(d[[0, 2]], clean, torch.float64)


# --- bubble sort -----------------------------------------------------------------------------------------------------


@st.composite
def rows(draw, values):
    shape = (*draw(BATCH), draw(ROWS))
    return draw(values(shape))


LOOPS = st.tuples(st.booleans(), st.sampled_from([0.0, 1e-5, 0.3]), st.sampled_from([0, 1, 3, 1024]))


@given(rows(lambda s: st.sampled_from(FLOAT_DTYPES).flatmap(lambda d: extreme(s, d, False))), BETAS, LOOPS, LAYOUTS)
@settings(max_examples=40)
def test_bubble_sort_finite_input_invariants(x, beta, loop, kind):
    """Finite values (ties, huge, tiny gaps), every temperature and loop setting: finite outputs and gradients in
    x's dtype; the values' sum is kept (every swap and the mixture are convex combinations that keep it); sorted
    values within [min x, max x]; swaps in [0, n (n - 1) / 2]; any_swap in [0, 1]; hard: torch.sort."""
    hard, epsilon, max_iter = loop
    x = layout(x, kind)
    n = x.shape[-1]
    for backend in backends_for(n):
        xx = x.detach().requires_grad_(True)
        r = bubble_sort(xx, beta, hard=hard, epsilon=epsilon, max_iter=max_iter, backend=backend)
        (grad,) = torch.autograd.grad(sum(o.float().sum() for o in r), xx)
        assert r.sorted.shape == x.shape and r.swaps.shape == x.shape[:-1] and r.sorted.dtype == x.dtype
        assert all(o.isfinite().all() for o in r), backend
        bad = ~grad.isfinite()
        if bad.any() and x.dtype in (torch.float16, torch.bfloat16):
            # computed in float32: a gradient too large for the half type (slope beta / 4 at ties) overflows in
            # the cast back, and only such a one may
            xf = x.float().requires_grad_(True)
            rf = bubble_sort(xf, beta, hard=hard, epsilon=epsilon, max_iter=max_iter, backend=backend)
            (g32,) = torch.autograd.grad(sum(o.sum() for o in rf), xf)
            assert g32.isfinite().all() and (g32[bad].abs() > torch.finfo(x.dtype).max).all(), backend
        else:
            assert not bad.any(), backend
        if not x.numel():
            continue
        xd, sd = x.double(), r.sorted.double()
        scale = xd.abs().amax(-1)
        rel = 1e-2 if x.dtype in (torch.float16, torch.bfloat16) else (1e-5 if x.dtype == torch.float32 else 1e-12)
        assert ((sd.sum(-1) - xd.sum(-1)).abs() <= rel * n * n * scale + 1e-30).all(), backend
        assert (
            (sd >= xd.amin(-1, keepdim=True) - rel * scale[..., None])
            & (sd <= xd.amax(-1, keepdim=True) + rel * scale[..., None])
        ).all(), backend
        w = r.swaps.double()
        assert ((w >= -rel * n * n) & (w <= n * (n - 1) / 2 * (1 + rel))).all(), backend
        assert ((r.any_swap.double() >= -rel) & (r.any_swap.double() <= 1 + rel)).all(), backend
        if hard and max_iter >= n and epsilon < 1:
            assert torch.equal(r.sorted, x.sort(-1).values), backend


@given(rows(well_conditioned), st.sampled_from([0.5, 5.0, 40.0]), LOOPS)
@settings(max_examples=30)
def test_bubble_sort_kernels_match_reference(x, beta, loop):
    """Separated values in float64: every kernel equals the reference, outputs and gradient."""
    hard, epsilon, max_iter = loop
    n = x.shape[-1]

    def run(backend):
        xx = x.detach().requires_grad_(True)
        r = bubble_sort(xx, beta, hard=hard, epsilon=epsilon, max_iter=max_iter, backend=backend)
        g = torch.Generator().manual_seed(5)
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64)).sum() for o in r)
        return [*r, torch.autograd.grad(loss, xx)[0]]

    ref = run("reference")
    scale = max(1.0, n * n / 50) * max([1.0] + x.abs().flatten().tolist())
    for backend in backends_for(n):
        if backend == "reference":
            continue
        for a, b in zip(run(backend), ref):
            assert_close(a, b, torch.float64, scale=scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bubble_sort_huge_beta_and_values(backend):
    """beta (a - b) overflowing, and values near the float32 range: a hard comparison, no NaN."""
    big = torch.finfo(torch.float32).max / 4
    x = torch.tensor([[big, -big, 0.0, 1.0], [1e-30, -1e-30, 0.0, 2e-30]], dtype=torch.float32)
    for beta in (1e30, 1e-30):
        r = bubble_sort(x, beta, backend=backend)
        assert all(o.isfinite().all() for o in r)
    r = bubble_sort(x, 1e30, backend=backend)
    assert torch.equal(r.sorted[0], x[0].sort().values)
