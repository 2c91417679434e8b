"""Property-based fuzzing of relaxops.soft_rank / soft_sort on every backend that runs here (Triton through the
interpreter on small cases): random shapes (empty batch, 1-D, n = 1, odd n), dtypes, layouts, strengths at their
extremes, both regularizations, descending, ties, huge, tiny-gap and non-finite values."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from relaxops import soft_rank, soft_sort
from strategies import BATCH, FLOAT_DTYPES, LAYOUTS, SIZES, extreme, layout, well_conditioned
from testing import BACKEND_DEVICE, assert_as_accurate_as_reference, assert_close, outputs_and_grads

BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
FNS = st.sampled_from([soft_rank, soft_sort])
REGS = st.sampled_from(["l2", "kl"])
STRENGTHS = st.sampled_from([1e-30, 1e-6, 1e-3, 0.1, 1.0, 10.0, 1e4, 1e30])
SMALL_N = 17  # largest n run through the Triton interpreter


@st.composite
def problem(draw, values):
    shape = (*draw(BATCH), draw(SIZES))
    return draw(values(shape))


def run(fn, x, reg, eps, descending, backend):
    """The output and the gradient of a fixed random linear functional of it (NaN entries skipped)."""
    return outputs_and_grads(fn, x, reg, eps, descending, seed=11, skip_nan=True, backend=backend)


def backends_for(n):
    return [b for b in BACKENDS if b != "triton" or n <= SMALL_N]


@given(
    FNS,
    REGS,
    problem(lambda s: st.sampled_from(FLOAT_DTYPES).flatmap(lambda d: extreme(s, d, False))),
    STRENGTHS,
    st.booleans(),
    LAYOUTS,
)
@settings(max_examples=40)
def test_finite_input_invariants(fn, reg, x, eps, descending, kind):
    """Every backend, finite input (ties, huge values, tiny gaps), every strength: finite outputs and gradients in
    x's dtype; ranks in [1, n] summing to n (n + 1) / 2; sorted values monotone in the requested direction."""
    x = layout(x, kind)
    n = x.shape[-1]
    for backend in backends_for(n):
        out, grad = run(fn, x, reg, eps, descending, backend)
        assert out.shape == x.shape and out.dtype == x.dtype and grad.dtype == x.dtype
        assert torch.isfinite(out).all() and torch.isfinite(grad.double()).all(), backend
        if not out.numel():
            continue
        o = out.double()
        low = x.dtype in (torch.float16, torch.bfloat16)
        if fn is soft_rank:
            tol = (1e-2 if low else 1e-6) * n
            assert ((o >= 1 - tol) & (o <= n + tol)).all(), backend
            assert ((o.sum(-1) - n * (n + 1) / 2).abs() <= tol * n).all(), backend
        else:
            steps = o.diff(dim=-1) * (-1 if descending else 1)
            mag = o.abs().amax(-1, keepdim=True).clamp(min=1)
            assert (steps >= -(3e-2 if low else 1e-6) * mag).all(), backend


@given(
    FNS,
    REGS,
    problem(lambda s: well_conditioned(s, torch.float64)),
    st.sampled_from([0.03, 0.5, 4.0]),
    st.booleans(),
    LAYOUTS,
)
@settings(max_examples=30)
def test_kernels_match_reference(fn, reg, x, eps, descending, kind):
    """Well-conditioned rows (gaps >= 0.05 scaled, offsets up to 1e3): each kernel against the float64 reference,
    output and gradient, in float64 and (as accurately as the float32 reference) in float32."""
    x = layout(x, kind)
    n = x.shape[-1]
    mag = max(1.0, x.abs().max().item()) if x.numel() else 1.0
    s_out = max(1.0, n / 10) * (mag * max(1.0, n / eps) if fn is soft_sort else 1.0)
    s_grad = max(1.0, 1 / eps) * max(1.0, n / 10)
    exact = run(fn, x, reg, eps, descending, "reference")
    low = run(fn, x.float(), reg, eps, descending, "reference")
    for backend in [b for b in backends_for(n) if b != "reference"]:
        for a, b, s, what in zip(run(fn, x, reg, eps, descending, backend), exact, (s_out, s_grad), ("out", "grad")):
            assert_close(a, b, torch.float64, scale=s, msg=f"{backend} {what} float64")
        for a, r, b, s, what in zip(
            run(fn, x.float(), reg, eps, descending, backend), low, exact, (s_out, s_grad), ("out", "grad")
        ):
            assert_as_accurate_as_reference(a, r, b, torch.float32, scale=s, msg=f"{backend} {what} float32")


@given(FNS, REGS, problem(lambda s: extreme(s, torch.float64)), st.sampled_from([0.1, 1.0]), st.booleans())
@settings(max_examples=30)
def test_nonfinite_backends_agree(fn, reg, x, eps, descending):
    """NaN / +-inf / ties / huge values: every backend gives the reference's output and gradient (NaN where it has
    NaN); rows without NaN (soft_rank) or without non-finite values (soft_sort) are finite."""
    n = x.shape[-1]
    ref = run(fn, x, reg, eps, descending, "reference")
    finite = x[x.isfinite()]
    spread = (finite.max() - finite.min()).item() if finite.numel() else 0.0
    # rounding of values up to 1e7 apart (mixed magnitudes): ~eps_64 spread / eps on ranks, spread on values
    scale = max(1.0, n / 10) * max(1.0, 1e-5 * spread / eps) * (max(1.0, spread) if fn is soft_sort else 1.0)
    for backend in [b for b in backends_for(n) if b != "reference"]:
        for a, b, what in zip(run(fn, x, reg, eps, descending, backend), ref, ("out", "grad")):
            assert_close(a, b, torch.float64, scale=scale * max(1.0, 1 / eps), msg=f"{backend} {what}")
    out, grad = ref
    clean = ~(x.isnan() if fn is soft_rank else ~x.isfinite()).any(-1)
    assert torch.isfinite(out[clean]).all() and torch.isfinite(grad[clean]).all()
    assert out[~clean].isnan().all() or not (~clean).any()
    if fn is soft_rank:
        assert (grad[x.isinf() & clean.unsqueeze(-1)] == 0).all()
