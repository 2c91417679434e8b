"""The 18 occlusion distributions and 10 T-conorms against the properties and anchors of docs/math/render.md
§2.4, §3, §7.2 and §7.4 (float64)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest
import torch
from relaxops.render import relaxations as R

SMOOTH = [d for d in R.DISTRIBUTIONS if d != "hard"]
# (name, shape, shift) for every distribution, shifts on the families that read them
CONFIGS = (
    [(d, 0.0, 0.0) for d in SMOOTH if d not in ("gamma", "gamma_rev")]
    + [(d, k, 0.0) for d in ("gamma", "gamma_rev") for k in (0.5, 2.0)]
    + [(d, 2.0 if "gamma" in d else 0.0, 0.7) for d in R.SHIFTED_DISTRIBUTIONS]
)
T_PARAMS = (
    [("max", 0.0), ("probabilistic", 0.0), ("einstein", 0.0)]
    + [("hamacher", p) for p in (0, 0.5, 1, 2, 4)]
    + [("frank", p) for p in (1e-30, 0.5, 2, 10, 1e30)]
    + [("yager", p) for p in (0.5, 1, 2, 4)]
    + [("aczel_alsina", p) for p in (0.5, 1, 2, 4)]
    + [("dombi", p) for p in (0.5, 1, 2, 4)]
    + [("schweizer_sklar", p) for p in (-0.5, -1, -2, -4)]
)
TAU = 0.05


def F_of_u(u, name, shape=0.0, shift=0.0):
    return R.occlusion(u * TAU, TAU, name, shape, shift)


@pytest.mark.parametrize("name,shape,shift", CONFIGS)
def test_cdf_is_monotone_with_limits_and_density_is_its_derivative(name, shape, shift):
    u = torch.linspace(-40, 40, 40001, dtype=torch.float64)
    F, phi = F_of_u(u, name, shape, shift)
    # gamma: the kernel's 32-term series of P(k, z) falls short by up to ~7e-5 as z nears the cap at 15
    # (docs/math/render.md §2.4), so it decreases there by up to ~1.5e-7 per step of this grid; everything else is
    # monotone to rounding
    assert (F.diff() >= (-1e-6 if "gamma" in name else -1e-15)).all() and F.min() >= 0 and F.max() <= 1
    assert (phi >= 0).all()
    if name not in ("cauchy", "reciprocal", "levy", "levy_rev"):  # heavy tails reach 0 / 1 beyond u = 40
        assert F[0] < 1e-6 and F[-1] > 1 - 1e-6
    # f = dF/du away from branch points (and below the gamma cap, where the series is truncated)
    ug = torch.tensor([-3.3, -1.7, -0.6, -0.23, 0.31, 0.77, 1.4, 2.9, 6.1], dtype=torch.float64)
    ug = ug[(ug + shift).abs() > 0.05] if name in R.SHIFTED_DISTRIBUTIONS else ug
    h = 1e-6
    fd = (F_of_u(ug + h, name, shape, shift)[0] - F_of_u(ug - h, name, shape, shift)[0]) / (2 * h)
    tol = 1e-4 if "gamma" in name else 1e-6
    torch.testing.assert_close(F_of_u(ug, name, shape, shift)[1] * TAU, fd, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", R.SYMMETRIC_DISTRIBUTIONS)
def test_symmetric_distributions_are_one_half_on_the_edge(name):
    u = torch.linspace(-5, 5, 1001, dtype=torch.float64)
    F = F_of_u(u, name)[0]
    torch.testing.assert_close(F + F.flip(0), torch.ones_like(F), rtol=0, atol=1e-12)
    assert F_of_u(torch.zeros(1, dtype=torch.float64), name)[0].item() == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize(
    "name,edge",
    [
        ("gumbel_max", math.exp(-1)),
        ("gumbel_min", 1 - math.exp(-1)),
        ("exponential", 0.0),
        ("exponential_rev", 1.0),
        ("levy", 0.0),
        ("levy_rev", 1.0),
    ],
)
def test_asymmetric_edge_values(name, edge):
    assert F_of_u(torch.zeros(1, dtype=torch.float64), name)[0].item() == pytest.approx(edge, abs=1e-12)


@pytest.mark.parametrize(
    "name,rev,shape", [("exponential", "exponential_rev", 0.0), ("gamma", "gamma_rev", 2.0), ("levy", "levy_rev", 0.0)]
)
def test_reversed_is_mirrored(name, rev, shape):
    u = torch.tensor([-7.0, -2.5, -0.4, 0.3, 1.1, 4.0], dtype=torch.float64)
    torch.testing.assert_close(F_of_u(u, rev, shape)[0], 1 - F_of_u(-u, name, shape)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "name,cut",
    [
        ("gaussian", 4.7535),
        ("laplace", 13.1224),
        ("logistic", 13.8156),
        ("gudermannian", 13.364),
        ("gumbel_max", 2.6258),
        ("uniform", 1.0),
    ],
)
def test_probability_cut_points(name, cut):
    """The cut u_c of docs/math/render.md §2.4: F(-u) <= 1e-6 from u_c on (checked 0.1% past and before the cut)."""
    F = F_of_u(torch.tensor([-cut * 1.001, -cut * 0.999], dtype=torch.float64), name)[0]
    assert F[0] <= 1e-6 < F[1] or (name == "uniform" and F[0] == 0 < F[1])


def test_gamma_matches_the_regularized_incomplete_gamma_below_the_cap_and_is_capped():
    z = torch.linspace(0.01, 15, 300, dtype=torch.float64)
    for k in (0.5, 1.0, 2.0, 4.0):
        F = F_of_u(z, "gamma", k)[0]
        torch.testing.assert_close(
            F, torch.special.gammainc(torch.tensor(k, dtype=torch.float64), z), rtol=0, atol=1e-4
        )
        assert F_of_u(torch.tensor([15.001], dtype=torch.float64), "gamma", k)[0].item() == 1.0
        assert F_of_u(torch.tensor([-15.001], dtype=torch.float64), "gamma_rev", k)[0].item() == 0.0


def test_shift_moves_the_support():
    u = torch.tensor([-0.69, -0.71], dtype=torch.float64)
    F = F_of_u(u, "exponential", 0.0, 0.7)[0]
    assert F[0] > 0 and F[1] == 0
    F = F_of_u(-u, "exponential_rev", 0.0, 0.7)[0]
    assert F[0] < 1 and F[1] == 1


def _rand(n, seed):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.99


@pytest.mark.parametrize("name,p", T_PARAMS)
def test_t_conorm_axioms(name, p):
    a, b, c = _rand(2000, 1), _rand(2000, 2), _rand(2000, 3)
    T = lambda x, y: R.t_conorm(x, y, name, p)  # noqa: E731
    torch.testing.assert_close(T(a, b), T(b, a), rtol=0, atol=1e-12)
    torch.testing.assert_close(T(T(a, b), c), T(a, T(b, c)), rtol=0, atol=1e-12)
    torch.testing.assert_close(T(a, torch.zeros_like(a)), a, rtol=0, atol=1e-12)
    torch.testing.assert_close(T(a, torch.ones_like(a)), torch.ones_like(a), rtol=0, atol=1e-12)
    assert (T(a, b) >= torch.maximum(a, b) - 1e-12).all()
    assert (T((a + 0.005).clamp(max=0.99), b) >= T(a, b) - 1e-12).all()


@pytest.mark.parametrize(
    "name,p,want",
    [
        ("hamacher", 0, 0.5227),
        ("hamacher", 0.5, 0.5532),
        ("hamacher", 1, 0.58),
        ("hamacher", 2, 0.625),
        ("hamacher", 4, 0.6912),
        ("frank", 0.5, 0.5625),
        ("frank", 2, 0.5972),
        ("frank", 10, 0.6329),
        ("yager", 0.5, 1.0),
        ("yager", 1, 0.7),
        ("yager", 2, 0.5),
        ("yager", 4, 0.4285),
        ("aczel_alsina", 0.5, 0.8211),
        ("aczel_alsina", 1, 0.58),
        ("aczel_alsina", 2, 0.4637),
        ("aczel_alsina", 4, 0.4166),
        ("dombi", 0.5, 0.684),
        ("dombi", 1, 0.5227),
        ("dombi", 2, 0.4421),
        ("dombi", 4, 0.4095),
        ("schweizer_sklar", -4, 0.4494),
        ("schweizer_sklar", -2, 0.4883),
        ("schweizer_sklar", -1, 0.5227),
        ("schweizer_sklar", -0.5, 0.5473),
    ],
)
def test_t_conorm_anchor_values(name, p, want):
    """The T-conorm values at (a, b) = (0.3, 0.4) (docs/math/render.md §3.2), printed to 4 digits."""
    got = R.t_conorm(torch.tensor(0.3, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64), name, p)
    assert got.item() == pytest.approx(want, abs=6e-5)


def test_t_conorm_special_cases():
    a, b = _rand(500, 4), _rand(500, 5)
    T = R.t_conorm
    prob = T(a, b, "probabilistic")
    for other in (T(a, b, "hamacher", 1), T(a, b, "aczel_alsina", 1)):
        torch.testing.assert_close(other, prob, rtol=0, atol=1e-12)
    torch.testing.assert_close(T(a, b, "hamacher", 2), T(a, b, "einstein"), rtol=0, atol=1e-12)
    torch.testing.assert_close(T(a, b, "yager", 1), (a + b).clamp(max=1), rtol=0, atol=1e-12)
    h0 = T(a, b, "hamacher", 0)
    for other in (T(a, b, "dombi", 1), T(a, b, "schweizer_sklar", -1)):
        torch.testing.assert_close(other, h0, rtol=0, atol=1e-12)
    torch.testing.assert_close(T(a, b, "frank", 1 + 1e-4), prob, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name,p", T_PARAMS)
def test_fold_is_order_independent_and_its_gradient_is_the_generator_ratio(name, p):
    D = _rand(5 * 64, 6).reshape(64, 5) * 0.6 + 0.01  # small enough that yager / nilpotent members rarely saturate
    A = R.fold(D, name, p)
    torch.testing.assert_close(R.fold(D.flip(-1), name, p), A, rtol=0, atol=1e-12)
    if name == "max":
        return
    Dg = D.clone().requires_grad_()
    (auto,) = torch.autograd.grad(R.fold(Dg, name, p).sum(), Dg)
    grad = R.fold_grad(A[:, None], D, name, p)
    keep = (A < 1)[:, None].expand_as(D)  # saturated pixels: zero gradient in both
    # The kernel's formulas carry 1e-6 guards (frank's copysign(1e-6, q) in the denominator, aczel_alsina's
    # clamps inside log1p), so they match the exact derivative to ~1e-6 absolute; docs/math/render.md §7.4 bounds the
    # relative error by 1e-4 (measured 1.2e-4 for aczel_alsina 0.5), hence rtol 2e-4 on top of that absolute floor.
    torch.testing.assert_close(grad[keep], auto[keep], rtol=2e-4, atol=1e-6)


def test_closed_n_ary_forms():
    D = _rand(6 * 50, 7).reshape(50, 6)
    torch.testing.assert_close(R.fold(D, "probabilistic"), 1 - (1 - D).prod(-1), rtol=0, atol=1e-14)
    torch.testing.assert_close(R.fold(D, "einstein"), torch.tanh(torch.atanh(D).sum(-1)), rtol=0, atol=1e-12)
    torch.testing.assert_close(R.fold(D, "yager", 2), D.pow(2).sum(-1).sqrt().clamp(max=1), rtol=0, atol=1e-12)
    lam = 3.0
    Q = ((1 + (lam - 1) * D) / (1 - D)).prod(-1)
    torch.testing.assert_close(R.fold(D, "hamacher", lam), (Q - 1) / (Q + lam - 1), rtol=0, atol=1e-12)


def test_hard_and_max_gradients():
    D = torch.tensor([[0.2, 0.7, 0.7, 0.4]], dtype=torch.float64)
    assert R.fold(D, "hard").item() == 1.0 and R.fold(D[:, :1], "hard").item() == 0.0
    assert R.fold_grad(torch.tensor([[1.0]]), D, "hard").eq(1).all()
    A = R.fold(D, "max")
    assert R.fold_grad(A[:, None], D, "max").tolist() == [[0.0, 1.0, 1.0, 0.0]]


def test_names_ids_and_bad_parameters():
    assert R.distribution_name("heaviside") == "hard" and R.distribution_name(7) == "gudermannian"
    assert R.distribution_name("hyperbolic_secant") == "gudermannian" and R.t_conorm_name(6) == "yager"
    for bad, arg in (
        (lambda: R.distribution_name("nope"), "dist_func"),
        (lambda: R.t_conorm_name(11), "aggr_alpha_func"),
        (lambda: R.check_distribution("logistic", 0.0), "dist_scale"),
        (lambda: R.check_distribution("gamma", 0.1, 0.0), "dist_shape"),
        (lambda: R.check_distribution("gamma_rev", 0.1, -1.0), "dist_shape"),
        (lambda: R.check_distribution("logistic", float("nan")), "dist_scale"),
    ):
        with pytest.raises(ValueError, match=arg):
            bad()
    assert R.check_distribution("hard", 0.0) == ("hard", 0.0, 0.0, 0.0)
    for name, p in (
        ("hamacher", -0.1),
        ("frank", 0.0),
        ("frank", 1.0),
        ("yager", 0.0),
        ("aczel_alsina", -1.0),
        ("dombi", 0.0),
        ("schweizer_sklar", 0.0),
        ("schweizer_sklar", 1.0),
    ):
        with pytest.raises(ValueError, match="aggr_alpha_t_conorm_p"):
            R.check_t_conorm(name, p)
    assert R.check_t_conorm("probabilistic", None) == ("probabilistic", 0.0)


def test_average_is_the_mean_with_gradient_one_over_the_face_count():
    """``average`` (docs/math/render.md §3.4): the fold is the faces' mean, accumulated as ``A + D / F``; every face
    gets ``dA / dD = 1 / F``; it is no T-conorm (no binary form) and ignores the parameter."""
    D = _rand(5 * 40, 8).reshape(40, 5)
    A = R.fold(D, "average")
    torch.testing.assert_close(A, D.mean(-1), rtol=0, atol=1e-15)
    torch.testing.assert_close(R.fold(D, "average", 3.0), A, rtol=0, atol=0)
    Dg = D.clone().requires_grad_()
    (auto,) = torch.autograd.grad(R.fold(Dg, "average").sum(), Dg)
    torch.testing.assert_close(R.fold_grad(A[:, None], D, "average", faces=5), auto, rtol=0, atol=1e-15)
    # culled faces count in F: two faces' D folded into a mesh of four
    step = R.fold_step(
        R.fold_step(torch.zeros(40, dtype=torch.float64), D[:, 0], "average", faces=4), D[:, 1], 10, 0, 4
    )
    torch.testing.assert_close(step, (D[:, 0] + D[:, 1]) / 4, rtol=0, atol=1e-15)
    assert A.max() < 1 and (A < torch.maximum(D[:, 0], D[:, 1:].amax(-1))).all()  # below max: no T-conorm
    assert R.t_conorm_name(10) == "average" and R.check_t_conorm("average", None) == ("average", 0.0)
    assert "average" not in R.PARAMETRIC_T_CONORMS
    with pytest.raises(ValueError, match="aggr_alpha_func"):
        R.t_conorm(D[:, 0], D[:, 1], "average")
    for faces in (None, 0, 2.0, True):
        with pytest.raises(ValueError, match="faces"):
            R.fold_grad(A[:, None], D, "average", faces=faces)
        with pytest.raises(ValueError, match="faces"):
            R.fold_step(A, D[:, 0], "average", faces=faces)


# Frank's parameter over its whole admitted range (0, 1e30], != 1: the classical limits max (p -> 0), probabilistic
# (p -> 1) and bounded sum (p -> inf), and 1e-17 .. 1e-16, where 1 - p rounds to 1 and the textbook form overflowed
FRANK_PS = (5e-324, 1e-300, 1e-30, 1e-20, 1e-17, 1e-16, 1e-10, 0.1, 0.3, 1 - 1e-9, 1 + 1e-9, 2, 10, 1e6, 1e20, 1e30)
EPS = torch.finfo(torch.float64).eps


def _frank_exact(a, b, p, grad=False):
    """Frank's T-conorm (or, with ``grad``, its guarded fold gradient ``dA / dD`` at ``(a, b) = (A, D)``) of
    docs/math/render.md §3.2 in the textbook form, in decimal arithmetic with enough digits to absorb the
    cancellation of ``1 + (p^a' - 1)(p^b' - 1) / (p - 1)`` (about ``|log10 p|`` digits)."""
    with localcontext() as ctx:
        ctx.prec = 120 + 2 * int(abs(math.log10(p)))
        lam, a, b = Decimal(p), Decimal(a), Decimal(b)
        L = lam.ln()
        if grad:  # lam^(A - D) (lam^(1 - A) - 1) / (q + copysign(CLAMP, q)), q = lam^(1 - D) - 1
            q = ((1 - b) * L).exp() - 1
            guard = Decimal(R.CLAMP) if q >= 0 else -Decimal(R.CLAMP)
            return float(((a - b) * L).exp() * (((1 - a) * L).exp() - 1) / (q + guard))
        x, y = ((1 - a) * L).exp() - 1, ((1 - b) * L).exp() - 1
        return float(1 - (1 + x * y / (lam - 1)).ln() / L)


def _frank_points():
    g = torch.Generator().manual_seed(12)
    a, b = torch.rand(150, generator=g, dtype=torch.float64), torch.rand(150, generator=g, dtype=torch.float64)
    # the boundary, tiny coverages (relative accuracy), ties and sums near 1 (the two forms of the T-conorm)
    extra = [(0, 0), (0, 0.3), (1, 0.3), (1, 1), (1e-6, 2e-6), (1e-9, 1e-12), (0.5, 0.5), (0.3, 0.7), (1 - 1e-9, 0.6)]
    return torch.cat([a, a.new_tensor([e[0] for e in extra])]), torch.cat([b, b.new_tensor([e[1] for e in extra])])


@pytest.mark.parametrize("p", FRANK_PS)
def test_frank_t_conorm_and_its_gradient_against_a_high_precision_oracle(p):
    """Finite and accurate over the whole range of p: the value to 4 ulp relative (S >= max(a, b), so a + b - T(a,
    b) does not cancel; measured 1 ulp), the fold gradient (guard included) to 8 eps (1 + |ln p|) relative, the
    conditioning of lam^(A - D) in the rounding of A - D (measured 6.5e-14 at p = 1e-300)."""
    a, b = _frank_points()
    S = R.t_conorm(a, b, "frank", p)
    want = torch.tensor([_frank_exact(x, y, p) for x, y in zip(a.tolist(), b.tolist())], dtype=torch.float64)
    assert torch.isfinite(S).all() and (S <= 1).all() and (S >= torch.maximum(a, b)).all()
    torch.testing.assert_close(S, want, rtol=4 * EPS, atol=0)
    assert torch.equal(R.t_conorm(a, torch.zeros_like(a), "frank", p), a)  # neutral 0 and absorbing 1: exact
    assert R.t_conorm(a, torch.ones_like(a), "frank", p).eq(1).all()
    A, D = torch.maximum(S, a), a  # A >= D as in the fold
    G = R.fold_grad(A, D, "frank", p)
    want = torch.tensor([_frank_exact(x, y, p, grad=True) for x, y in zip(A.tolist(), D.tolist())], dtype=A.dtype)
    assert torch.isfinite(G).all()
    torch.testing.assert_close(G, want, rtol=8 * EPS * (1 + abs(math.log(p))), atol=0)


@pytest.mark.parametrize("p", [1e-12, 1e-6, 0.01, 0.3, 1 - 1e-6, 1 + 1e-6, 2, 1e6, 1e30])
def test_frank_t_conorm_keeps_the_textbook_values_where_they_were_finite(p):
    """The textbook form the T-conorm had before (1 - log1p((p^a' - 1)(p^b' - 1) / (p - 1)) / ln p) agrees within its
    own rounding error: the cancellation in (p^x - 1) / (p - 1), eps / |ln p| as p -> 1, and in 1 + ..., whose value
    p^min(a', b') (p < 1) makes its error eps p^-min(a', b') / |ln p| (bound: 8 times those)."""
    a, b = _frank_points()
    ac, bc = 1 - a, 1 - b
    old = 1 - torch.log1p((p**ac - 1) * (p**bc - 1) / (p - 1)) / math.log(p)
    bound = 8 * EPS * (1 + 1 / abs(math.log(p))) * (p ** -torch.minimum(ac, bc) if p < 1 else 1)
    assert torch.isfinite(old).all()
    assert ((R.t_conorm(a, b, "frank", p) - old).abs() <= bound).all()


def test_frank_tends_to_its_classical_limits():
    """max as p -> 0, probabilistic as p -> 1, bounded sum as p -> inf (docs/math/render.md §3.2; the gradients are
    compared with autograd in test_fold_is_order_independent_and_its_gradient_is_the_generator_ratio); the distance
    to max and to the bounded sum is at most ln 2 / |ln p| (reached at a = b, hence the rounding margin)."""
    a, b = _frank_points()
    for p, limit in ((1e-300, torch.maximum(a, b)), (1e30, (a + b).clamp(max=1))):
        bound = math.log(2) / abs(math.log(p)) * (1 + 1e-12)
        torch.testing.assert_close(R.t_conorm(a, b, "frank", p), limit, rtol=0, atol=bound)
    torch.testing.assert_close(R.t_conorm(a, b, "frank", 1 + 1e-12), a + b - a * b, rtol=0, atol=1e-11)
    D = _rand(64 * 3, 13).reshape(64, 3) * 0.9 + 0.05
    torch.testing.assert_close(R.fold(D, "frank", 1e-300), D.max(-1).values, rtol=0, atol=2 * math.log(2) / 690)
