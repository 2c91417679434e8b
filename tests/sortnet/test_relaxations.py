"""The six relaxations: ids shared with C++, f(0) = 1/2, symmetry, derivatives, error bounds, monotonicity."""

import math

import pytest
import torch
from relaxops import _ext
from relaxops.sortnet.relaxations import MONOTONE_RELAXATIONS, RELAXATION_IDS, RELAXATIONS, alpha_and_slope

S = 1.7
GRID = torch.cat(
    [
        -torch.logspace(-4, 4, 400, dtype=torch.float64).flip(0),
        torch.zeros(1, dtype=torch.float64),
        torch.logspace(-4, 4, 400, dtype=torch.float64),
    ]
)


def f(d, name, s=S, lam=0.25):
    return alpha_and_slope(d, name, s, lam)


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
def test_ids_agree_with_cpp():
    assert _ext._C.relaxation_ids() == RELAXATION_IDS


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
@pytest.mark.parametrize("name", RELAXATIONS)
def test_cpp_equals_python(name):
    a, s = f(GRID, name)
    cpp = torch.tensor(
        [_ext._C.relax_alpha(RELAXATION_IDS[name], S, 0.25, float(d)) for d in GRID], dtype=torch.float64
    )
    torch.testing.assert_close(cpp[:, 0], a, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(cpp[:, 1], s, rtol=1e-13, atol=1e-15)


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
@pytest.mark.parametrize("name", RELAXATIONS)
def test_cpu_kernels_float_path_is_accurate(name):
    """The float path of the cpu kernels (float32 data, a comparator per row of ``[0, d]``: the lane loops with
    their branch-free exp, log, atan and erfc): alpha within 2e-7 of the float64 value at the float input (4 ulp
    at 1/2; atan_float 1.6e-7 / pi, fast_erfc 2.8e-7 / 2), the slope (the backward of alpha alone) within 2e-6
    relative or 1e-6 s absolute (where alpha rounds to 1 in float, the logistic slope s alpha (1 - alpha) is 0)."""
    d32 = GRID.float()
    x = torch.stack([torch.zeros_like(d32), d32], 1)
    args = ("bitonic", RELAXATION_IDS[name], S, 0.25, "cpu")
    _, d, alpha = torch.ops.relaxops.sortnet_values_fwd(x, *args)
    grad_x = torch.ops.relaxops.sortnet_values_bwd(None, torch.ones_like(alpha), d, alpha, 2, *args)
    a, s = f(d32.double(), name)
    assert torch.equal(d[:, 0], d32)
    torch.testing.assert_close(alpha[:, 0].double(), a, rtol=0, atol=2e-7)
    torch.testing.assert_close(grad_x[:, 1].double(), s, rtol=2e-6, atol=1e-6 * S)


@pytest.mark.parametrize("name", RELAXATIONS)
def test_half_at_zero_symmetry_and_limits(name):
    a0, _ = f(torch.zeros(1, dtype=torch.float64), name)
    assert a0.item() == 0.5
    a, _ = f(GRID, name)
    b, _ = f(-GRID, name)
    torch.testing.assert_close(a + b, torch.ones_like(a), rtol=0, atol=2.3e-16)
    assert (a.diff() >= 0).all(), "f must be non-decreasing"
    big = torch.tensor([-1e12, 1e12], dtype=torch.float64)
    torch.testing.assert_close(f(big, name)[0], torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", RELAXATIONS)
def test_slope_matches_finite_differences(name):
    d = GRID[GRID.abs() >= 1e-3]
    if name == "optimal":  # C^1 but not C^2 at |s d| = 1/4
        d = d[((S * d).abs() - 0.25).abs() > 1e-3]
    h = 1e-6 * d.abs().clamp(min=1e-3)
    fd = (f(d + h, name)[0] - f(d - h, name)[0]) / (2 * h)
    torch.testing.assert_close(f(d, name)[1], fd, rtol=1e-5, atol=1e-9)


def test_art_lambda_zero_is_logistic():
    a, s = f(GRID, "logistic_phi", lam=0.0)
    b, t = f(GRID, "logistic")
    assert torch.equal(a, b)
    torch.testing.assert_close(s, t, rtol=1e-15, atol=0)


@pytest.mark.parametrize(
    "name,bound",
    [("logistic", 0.27846), ("gaussian", 0.16997), ("reciprocal", 1.0), ("cauchy", 1 / math.pi), ("optimal", 1 / 16)],
)
def test_error_bound(name, bound):
    """sup_x x f(-x) at steepness 1 (the per-swap deviation from the hard min)."""
    x = torch.logspace(-3, 7, 200001, dtype=torch.float64)
    sup = (x * f(-x, name, s=1.0)[0]).max().item()
    assert sup == pytest.approx(bound, rel=1e-3)


@pytest.mark.parametrize("name", RELAXATIONS)
def test_monotone_swap(name):
    """min_f(x, 0) = x f(-x) is non-decreasing exactly for the monotone relaxations."""
    x = torch.linspace(0, 50, 20001, dtype=torch.float64)
    m = x * f(-x, name, s=1.0)[0]
    if name in MONOTONE_RELAXATIONS:
        # optimal: the code's eps in the tail 1/(16 (|v| + 1e-10)) steps down by 2.5e-11 at |v| = 1/4
        assert (m.diff() >= -3e-11).all()
    else:
        assert (m.diff() < -1e-6).any()


def test_logistic_counterexample():
    m = lambda x: x * f(torch.tensor([-x], dtype=torch.float64), "logistic", s=1.0)[0].item()  # noqa: E731
    assert m(1.28) > m(3.0)


@pytest.mark.parametrize("name", RELAXATIONS)
def test_relaxed_min_max_axioms(name):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(1000, generator=g, dtype=torch.float64), torch.randn(1000, generator=g, dtype=torch.float64)
    al = f(b - a, name)[0]
    mn, mx = al * a + (1 - al) * b, (1 - al) * a + al * b
    al2 = f(a - b, name)[0]
    torch.testing.assert_close(al2 * b + (1 - al2) * a, mn, rtol=0, atol=1e-14)  # symmetry
    torch.testing.assert_close(mn + mx, a + b, rtol=0, atol=1e-14)  # sum preservation
    assert (mn >= torch.minimum(a, b) - 1e-14).all() and (mx <= torch.maximum(a, b) + 1e-14).all()
    assert (mn <= mx + 1e-14).all()
    al3 = f((b + 3) - (a + 3), name)[0]
    torch.testing.assert_close(al3 * (a + 3) + (1 - al3) * (b + 3), mn + 3, rtol=0, atol=1e-12)  # shift


def test_reciprocal_is_finite_at_infinity():
    a, s = f(torch.tensor([-math.inf, math.inf], dtype=torch.float64), "reciprocal")
    assert a.tolist() == [0.0, 1.0] and s.tolist() == [0.0, 0.0]
