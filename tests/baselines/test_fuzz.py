"""Property-based fuzzing of the baselines family's public ops: neuralsort, softsort (every backend that runs
here, Triton through the interpreter on small cases) and the smooth top-k SVM losses. Random shapes (empty batch,
1-D, n = 1, odd n), dtypes, layouts, parameters at their extremes, ties, huge and non-finite values."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from relaxops.baselines import neuralsort, smooth_topk_svm_loss, softsort
from strategies import BATCH, FLOAT_DTYPES, LAYOUTS, SIZES, extreme, layout, well_conditioned
from testing import BACKEND_DEVICE, TOLERANCES, assert_as_accurate_as_reference, assert_close, outputs_and_grads

from .smooth_topk_oracle import exact_loss_and_grad

BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
KERNELS = [b for b in BACKENDS if b != "reference"]
METHODS = st.sampled_from(
    [(neuralsort, {}), (softsort, {}), (softsort, {"pow": 2.0}), (softsort, {"pow": 0.5}), (softsort, {"pow": 3.0})]
)
TAUS = st.sampled_from([1e-30, 1e-6, 1e-3, 0.1, 1.0, 10.0, 1e6])
SMALL_N = 17  # largest n run through the Triton interpreter


@st.composite
def problem(draw, values):
    batch, n = draw(BATCH), draw(SIZES)
    shape = (*batch, n)
    k = draw(st.one_of(st.none(), st.integers(1, n)))
    return draw(values(shape)), k


def run(fn, kwargs, x, tau, k, backend, hard=False):
    """X and the gradient of a fixed random linear functional of it (NaN entries of X skipped)."""
    return outputs_and_grads(fn, x, seed=11, skip_nan=True, tau=tau, k=k, hard=hard, backend=backend, **kwargs)


def backends_for(n):
    return [b for b in BACKENDS if b != "triton" or n <= SMALL_N]


@given(
    METHODS,
    problem(lambda s: st.sampled_from(FLOAT_DTYPES).flatmap(lambda d: extreme(s, d, False))),
    TAUS,
    LAYOUTS,
    st.booleans(),
)
@settings(max_examples=40)
def test_finite_input_gives_stochastic_columns(method, prob, tau, kind, hard):
    """Every backend, every finite input (ties, huge values, tiny gaps), every tau: finite columns in [0, 1]
    summing to 1, in x's dtype; a finite gradient where 1 / tau is moderate."""
    (fn, kwargs), (x, k) = method, prob
    x = layout(x, kind)
    for backend in backends_for(x.shape[-1]):
        X, grad = run(fn, kwargs, x, tau, k, backend, hard)
        n = x.shape[-1]
        assert X.shape == (*x.shape, n if k is None else k) and X.dtype == x.dtype
        assert torch.isfinite(X).all(), f"{backend}: {int(X.isnan().sum())} NaN"
        assert ((X >= 0) & (X <= 1)).all()
        sums = X.double().sum(-2)
        tol = 1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-4
        assert (sums - 1).abs().max().item() <= tol * max(1, n / 10) if sums.numel() else True
        if tau >= 1e-3 and x.dtype == torch.float64:
            assert torch.isfinite(grad).all(), backend


@given(METHODS, problem(lambda s: well_conditioned(s, torch.float64)), st.sampled_from([0.05, 0.5, 3.0]), LAYOUTS)
@settings(max_examples=30)
def test_kernels_match_reference(method, prob, tau, kind):
    """Well-conditioned rows (distinct values, offsets up to 1e3): each kernel against the float64 reference on
    X and the gradient, in float64 and (as accurately as the float32 reference) in float32."""
    (fn, kwargs), (x, k) = method, prob
    x = layout(x, kind)
    n = x.shape[-1]
    scale = max(1.0, n / 10) * max(1.0, x.abs().max().item() / tau * 1e-3 if x.numel() else 1.0)
    exact = run(fn, kwargs, x, tau, k, "reference")
    low = run(fn, kwargs, x.float(), tau, k, "reference")
    for backend in [b for b in backends_for(n) if b != "reference"]:
        for a, b, what in zip(run(fn, kwargs, x, tau, k, backend), exact, ("X", "grad")):
            assert_close(a, b, torch.float64, scale=scale, msg=f"{backend} {what} float64")
        for a, r, b, what in zip(run(fn, kwargs, x.float(), tau, k, backend), low, exact, ("X", "grad")):
            assert_as_accurate_as_reference(a, r, b, torch.float32, scale=scale, msg=f"{backend} {what} float32")


@given(METHODS, problem(lambda s: extreme(s, torch.float64)), st.sampled_from([0.1, 1.0]))
@settings(max_examples=30)
def test_nonfinite_backends_agree(method, prob, tau):
    """NaN / +-inf / ties / huge values: every backend gives the reference's X and gradient (NaN where it has
    NaN), the infinite elements gradient 0, rows without NaN finite stochastic columns."""
    (fn, kwargs), (x, k) = method, prob
    ref = run(fn, kwargs, x, tau, k, "reference")
    # The logits carry rounding errors of ~eps n (max - min) / tau in any evaluation order (mixed magnitudes up
    # to 1e7 make that ~1e-7 in float64): atol 1e-10 grows by that condition number (1e-5 x it = 1e-15 x it
    # absolute, ~10 eps), the gradient's (which is ~n / tau times larger) by n / tau as well.
    n = x.shape[-1]
    finite = x[x.isfinite()]
    spread = (finite.max() - finite.min()).item() if finite.numel() else 0.0
    scale = max(1.0, n / 10, 1e-5 * n * spread / tau)
    for backend in [b for b in backends_for(n) if b != "reference"]:
        for a, b, what, s in zip(run(fn, kwargs, x, tau, k, backend), ref, ("X", "grad"), (1.0, max(1.0, n / tau))):
            assert_close(a, b, torch.float64, scale=scale * s, msg=f"{backend} {what}")
    X, grad = ref
    clean = ~x.isnan().any(-1)
    assert torch.isfinite(X[clean]).all()
    assert (grad[x.isinf()] == 0).all()
    if X[clean].numel():
        assert_close(X[clean].sum(-2), torch.ones_like(X[clean].sum(-2)), torch.float64, scale=1e3)


@st.composite
def topk_problem(draw):
    k = draw(st.integers(1, 6))
    n = k + k // 5 + 1 + draw(st.integers(0, 12))
    B = draw(st.integers(0, 5))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0, 1e4]))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    ties = draw(st.booleans())
    scores = (
        torch.randint(0, 3, (B, n), generator=g).double()
        if ties
        else torch.randn(B, n, generator=g, dtype=torch.float64)
    ) * scale
    # dominant scores: some entries (any class) at +-big, up to ~1/eps times the others
    big = draw(st.sampled_from([None, 1e8, 1e15, 1e30]))
    if big is not None:
        picked = torch.rand(B, n, generator=g) < 0.25
        sign = torch.randint(0, 2, (B, n), generator=g) * 2 - 1
        scores = torch.where(picked, sign * big * (1 + torch.rand(B, n, generator=g, dtype=torch.float64)), scores)
    return scores, torch.randint(0, n, (B,), generator=g), k


@given(
    topk_problem(),
    st.sampled_from([0.01, 0.3, 1.0, 5.0]),
    st.sampled_from([0.0, 1.0]),
    st.sampled_from([None, 1000.0]),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_smooth_topk_finite_and_bounded(prob, tau, alpha, hard_threshold, dtype):
    """Finite scores (ties, dominant scores): a finite loss and gradient, within the smoothing bounds of the hard
    top-k SVM loss ``-tau ln C(n-1, k-1) <= L - l_k <= tau ln C(n, k)`` (module note), 0 <= loss; for small n
    the smooth loss and its gradient equal the high-precision enumeration of the k-subsets."""
    scores, labels, k = prob
    n = scores.shape[1]
    s = scores.to(dtype).requires_grad_(True)
    loss = smooth_topk_svm_loss(s, labels, k, tau, alpha, hard_threshold, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), s)
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    others = scores.masked_fill(torch.nn.functional.one_hot(labels, n).bool(), -math.inf)
    kth = others.topk(k, dim=1).values[:, k - 1]
    hard = (alpha + (kth - scores.gather(1, labels[:, None]).squeeze(1)) / k).clamp(min=0)
    # rounding the scores (float32) and the differences of scores: the loss is exact to a few eps times the
    # largest |score|
    eps = torch.finfo(dtype).eps
    slack = 1e-9 + 4 * eps * (1 + scores.abs().amax(1))
    lower = hard - tau * math.log(math.comb(n - 1, k - 1)) - slack
    upper = hard + tau * math.log(math.comb(n, k)) + slack
    assert (loss.double() >= lower).all() and (loss.double() <= upper).all()
    assert (loss >= 0).all()
    if hard_threshold is None and n <= 8 and scores.numel():
        # against the 80-digit oracle on the same (dtype-rounded) scores. Conditioning: rounding k tau and the
        # score differences moves the softplus argument u by ~eps max|s| / (k tau), the loss by tau times that
        # and the gradient (tau sigmoid'(u) du/ds, sigmoid' <= 1/4, |du/ds| <= 2 / (k tau)) by half of it
        exact_loss, exact_grad = exact_loss_and_grad(s.detach(), labels, k, tau, alpha)
        du = 4 * eps * (1 + s.detach().double().abs().amax()) / (k * tau)
        tol = TOLERANCES[dtype]
        torch.testing.assert_close(loss.double(), exact_loss, rtol=tol["rtol"], atol=tol["atol"] + tau * du.item())
        torch.testing.assert_close(
            grad.double(),
            exact_grad,
            rtol=tol["rtol"],
            atol=tol["atol"] * max(1.0, exact_grad.abs().max().item()) + du.item() / 2,
        )
