"""The dual T-norms of the T-conorms (docs/math/render.md §3.5) against the axioms, the duality, the special cases
and their limits (float64)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from relaxops.render import relaxations as R

N_PARAMS = (
    [("min", None), ("probabilistic", None), ("einstein", None)]
    + [("hamacher", p) for p in (0, 0.5, 1, 2, 4)]
    + [("frank", p) for p in (1e-6, 0.1, 0.5, 2, 10, 1e6)]
    + [("yager", p) for p in (0.5, 1, 2, 4)]
    + [("aczel_alsina", p) for p in (0.5, 1, 2, 4)]
    + [("dombi", p) for p in (0.5, 1, 2, 4)]
    + [("schweizer_sklar", p) for p in (-0.5, -1, -2, -4)]
)


def _rand(n, seed):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _with_corners(x):
    """``x`` with the boundary values 0 and 1 appended."""
    return torch.cat([x, x.new_tensor([0.0, 1.0, 0.0, 1.0])])


def test_names_duals_and_parameter_checks():
    assert R.T_NORMS == ("min",) + R.T_CONORMS[2:10]  # the T-conorms' names, hard and average left out
    assert R.T_NORM_DUALS["min"] == "max" and all(R.T_NORM_DUALS[n] == n for n in R.T_NORMS[1:])
    x = torch.rand(3, dtype=torch.float64)
    for bad in ("hard", "average", "max", "nope", 1, None):
        with pytest.raises(ValueError, match="name"):
            R.t_norm(x, x, bad)
    with pytest.raises(ValueError, match="no dual T-norm"):
        R.t_norm(x, x, "average")
    # the T-conorms' parameter ranges, the error naming t_norm's argument p
    for name, p in (
        ("hamacher", -0.1),
        ("frank", 0.0),
        ("frank", 1.0),
        ("yager", 0.0),
        ("yager", None),
        ("aczel_alsina", -1.0),
        ("dombi", 0.0),
        ("schweizer_sklar", 0.0),
        ("schweizer_sklar", 1.0),
        ("dombi", float("nan")),
        ("dombi", math.inf),
    ):
        with pytest.raises(ValueError, match="p must be"):
            R.t_norm(x, x, name, p)
    for bad in ("2", True, [2.0]):
        with pytest.raises(TypeError, match="p must be a real number"):
            R.t_norm(x, x, "yager", bad)
    # the non-parametric members ignore p, as the T-conorms do
    torch.testing.assert_close(R.t_norm(x, x, "einstein", 7.0), R.t_norm(x, x, "einstein"), rtol=0, atol=0)


@pytest.mark.parametrize("name,p", N_PARAMS)
def test_t_norm_axioms(name, p):
    a, b, c = _with_corners(_rand(2000, 1)), _with_corners(_rand(2000, 2)), _with_corners(_rand(2000, 3))
    T = lambda x, y: R.t_norm(x, y, name, p)  # noqa: E731
    torch.testing.assert_close(T(a, b), T(b, a), rtol=0, atol=1e-12)
    torch.testing.assert_close(T(T(a, b), c), T(a, T(b, c)), rtol=0, atol=1e-12)
    one, zero = torch.ones_like(a), torch.zeros_like(a)
    torch.testing.assert_close(T(a, one), a, rtol=0, atol=1e-14)  # neutral element 1
    assert torch.equal(T(a, zero), zero) and torch.equal(T(zero, a), zero)  # 0 absorbs, exactly
    assert T(one, one).eq(1).all()
    out = T(a, b)
    assert torch.isfinite(out).all() and (out >= 0).all()
    assert (out <= torch.minimum(a, b) + 1e-14).all()  # every T-norm lies below min
    assert (T((a + 0.005).clamp(max=1), b) >= out - 1e-12).all()  # monotone


@pytest.mark.parametrize("name,p", N_PARAMS)
def test_duality_with_the_t_conorm(name, p):
    """``T(a, b) = 1 - S(1 - a, 1 - b)`` and the reverse, on the T-conorms' parameters."""
    a, b = _with_corners(_rand(3000, 4)), _with_corners(_rand(3000, 5))
    S = R.T_NORM_DUALS[name]
    q = 0.0 if p is None else p
    torch.testing.assert_close(R.t_norm(a, b, name, p), 1 - R.t_conorm(1 - a, 1 - b, S, q), rtol=0, atol=1e-12)
    torch.testing.assert_close(R.t_conorm(a, b, S, q), 1 - R.t_norm(1 - a, 1 - b, name, p), rtol=0, atol=1e-12)


def test_special_cases():
    a, b = _with_corners(_rand(500, 6)), _with_corners(_rand(500, 7))
    T = R.t_norm
    prod = a * b
    torch.testing.assert_close(T(a, b), prod, rtol=0, atol=0)  # the default is the product
    for other in (T(a, b, "hamacher", 1), T(a, b, "aczel_alsina", 1), T(a, b, "frank", 1 + 1e-9)):
        torch.testing.assert_close(other, prod, rtol=0, atol=1e-7)
    torch.testing.assert_close(T(a, b, "hamacher", 1), prod, rtol=0, atol=1e-15)
    torch.testing.assert_close(T(a, b, "hamacher", 2), T(a, b, "einstein"), rtol=0, atol=1e-15)
    torch.testing.assert_close(T(a, b, "einstein"), a * b / (2 - (a + b - a * b)), rtol=0, atol=1e-15)
    torch.testing.assert_close(T(a, b, "yager", 1), (a + b - 1).clamp(min=0), rtol=0, atol=1e-15)  # Lukasiewicz
    h0 = T(a, b, "hamacher", 0)
    s = a + b - a * b
    torch.testing.assert_close(h0, torch.where(s > 0, a * b / s, 0), rtol=0, atol=1e-15)
    for other in (T(a, b, "dombi", 1), T(a, b, "schweizer_sklar", -1)):
        torch.testing.assert_close(other, h0, rtol=0, atol=1e-14)
    assert torch.equal(T(a, b, "min"), torch.minimum(a, b))


def test_anchor_values():
    """Hand values at (a, b) = (0.3, 0.4): 1 - the T-conorm anchors of test_relaxations at (0.7, 0.6)."""
    a, b = torch.tensor(0.3, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64)
    want = {
        ("min", None): 0.3,
        ("probabilistic", None): 0.12,
        ("einstein", None): 0.12 / 1.42,
        ("hamacher", 0): 0.12 / 0.58,
        ("frank", 2): math.log2(1 + (2**0.3 - 1) * (2**0.4 - 1)),
        ("yager", 2): 1 - math.hypot(0.7, 0.6),
        ("aczel_alsina", 2): math.exp(-math.hypot(math.log(0.3), math.log(0.4))),
        ("dombi", 2): 1 / (1 + math.hypot(7 / 3, 6 / 4)),
        ("schweizer_sklar", -2): (0.3**-2 + 0.4**-2 - 1) ** -0.5,
    }
    for (name, p), value in want.items():
        assert R.t_norm(a, b, name, p).item() == pytest.approx(value, rel=1e-14, abs=1e-15), name


def test_limits_of_the_parameters_approach_min_and_drastic_without_overflow():
    """Large |p| (small p for Frank) tends to min, where the textbook forms overflow (``((1-a)/a)^1000``); Frank to
    Lukasiewicz as p -> inf. The bounds: ``m <= (x^p + y^p)^(1/p) <= 2^(1/p) m`` for the power sums."""
    a, b = _rand(1000, 8) * 0.98 + 0.01, _rand(1000, 9) * 0.98 + 0.01
    mn = torch.minimum(a, b)
    for name, p in (("yager", 1e3), ("aczel_alsina", 1e3), ("dombi", 1e3), ("schweizer_sklar", -1e3)):
        out = R.t_norm(a, b, name, p)
        assert torch.isfinite(out).all() and (out <= mn + 1e-15).all(), name
        # yager: |1 - 2^(1/p)| (1 - m) <= 7e-4; aczel_alsina: m^(2^(1/p)) vs m, |ln m| m 7e-4 <= 3e-4; dombi and
        # schweizer_sklar alike
        torch.testing.assert_close(out, mn, rtol=0, atol=1e-3)
    for p in (1e-30, 1e-100):
        out = R.t_norm(a, b, "frank", p)
        # log_p(p^m + p^M) ... = m - ln(1 + p^(M-m)...)/ln(1/p) within ln(2) / ln(1/p) of min
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, mn, rtol=0, atol=math.log(2) / -math.log(p))
    out = R.t_norm(a, b, "frank", 1e30)
    torch.testing.assert_close(out, (a + b - 1).clamp(min=0), rtol=0, atol=math.log(2) / math.log(1e30))
    # Hamacher tends to the drastic T-norm (0 inside) as p -> inf: its denominator p (1 - a)(1 - b) + (a + b - ab)
    # is above p (1 - a)(1 - b)
    bound = a * b / (1e12 * (1 - a) * (1 - b))
    assert (R.t_norm(a, b, "hamacher", 1e12) <= bound * (1 + 1e-12)).all()


@pytest.mark.parametrize("name,p", N_PARAMS)
def test_gradients_are_finite_inside_and_match_finite_differences(name, p):
    a = (_rand(64, 10) * 0.9 + 0.05).requires_grad_()
    b = (_rand(64, 11) * 0.9 + 0.05).requires_grad_()
    out = R.t_norm(a, b, name, p)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    assert torch.isfinite(ga).all() and torch.isfinite(gb).all()
    if name in ("min", "yager"):  # kinks at a = b (min) and on the line where yager reaches 0
        return
    assert torch.autograd.gradcheck(lambda x, y: R.t_norm(x, y, name, p), (a[:8], b[:8]))


def test_t_norm_fold():
    x = _rand(5 * 40, 12).reshape(40, 5)
    torch.testing.assert_close(R.t_norm_fold(x), x.prod(-1), rtol=0, atol=1e-15)
    torch.testing.assert_close(R.t_norm_fold(x, "min"), x.min(-1).values, rtol=0, atol=0)
    torch.testing.assert_close(
        R.t_norm_fold(x, "yager", 1), (x.sum(-1) - x.shape[-1] + 1).clamp(min=0), rtol=0, atol=1e-14
    )
    torch.testing.assert_close(R.t_norm_fold(x, "dombi", 2), R.t_norm_fold(x.flip(-1), "dombi", 2), rtol=0, atol=1e-12)
    # the dual of the T-conorm fold
    torch.testing.assert_close(R.t_norm_fold(x, "einstein"), 1 - R.fold(1 - x, "einstein"), rtol=0, atol=1e-12)
    assert R.t_norm_fold(x[:, :0]).eq(1).all()


unit = st.floats(0.0, 1.0, allow_nan=False)
families = st.sampled_from([np for np in N_PARAMS if np[1] not in (1e-6, 1e6)])


@settings(max_examples=300, deadline=None)
@given(families, unit, unit, unit, unit)
def test_property_axioms_and_duality(family, x, y, z, w):
    name, p = family
    a, b, c = (torch.tensor(v, dtype=torch.float64) for v in (x, y, z))
    T = lambda u, v: R.t_norm(u, v, name, p).item()  # noqa: E731
    ab = T(a, b)
    assert 0 <= ab <= min(x, y) + 1e-15
    assert ab == pytest.approx(T(b, a), abs=1e-12)
    assert T(torch.tensor(ab, dtype=torch.float64), c) == pytest.approx(
        T(a, torch.tensor(T(b, c), dtype=torch.float64)), abs=1e-12
    )
    if w >= x:
        assert T(torch.tensor(w, dtype=torch.float64), b) >= ab - 1e-12
    S = R.T_NORM_DUALS[name]
    # the T-conorms aczel_alsina and dombi are exactly 1 once a complement is below SATURATION, and hamacher 0's
    # denominator a + b - ab is clamped at CLAMP: there the T-norm (no threshold, no clamp) is below min(a, b), itself
    # below the threshold
    tol = 1e-12
    if name in ("aczel_alsina", "dombi") and min(x, y) < R.SATURATION:
        tol = R.SATURATION
    if name == "hamacher" and p == 0 and x + y - x * y < R.CLAMP:
        tol = R.CLAMP
    assert ab == pytest.approx(1 - R.t_conorm(1 - a, 1 - b, S, 0.0 if p is None else p).item(), abs=tol)
