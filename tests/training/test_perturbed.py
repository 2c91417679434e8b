"""Perturbed structured predictors (docs/math/training.md §5, §6.4-§6.6, §7) and the perturbed optimizer of Berthet
et al.: gradient estimators against closed forms, the official code's update, shapes, modes and errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from relaxops.training import (
    PerturbedArgmax,
    PerturbedMatching,
    PerturbedSort,
    PerturbedTopK,
    argmax_onehot,
    assignment,
    direct_loss,
    fenchel_young_loss,
    hamming_coeffs,
    knn_coeffs,
    matching_sort_coeffs,
    perturbed,
    perturbed_direct,
    sample_noise,
    sort_perm,
    topk_khot,
)

F64 = torch.float64

# --- categorical oracle ----------------------------------------------------------------------------------
#
# With one-hot structures, i.i.d. standard Gumbel noise per class is full Gumbel-max noise, so for scores θ and
# scale σ: P[Y = e_i] = p_i, p = softmax(θ/σ). For the loss vector L, E[ℓ] = ⟨p, L⟩ and
#   ∂E/∂θ = J L / σ,   ∂E/∂σ = −θᵀ J L / σ²,   J = diag(p) − ppᵀ.
# Tolerance derivation. Row b of a batch of N identical instances gets one noise draw, so the per-row gradients
# g_b are i.i.d. and the estimate is their mean. Two error sources:
# (1) Monte Carlo: the mean of N i.i.d. rows has standard error s/√N (s: the rows' sample standard deviation,
#     per coordinate); with a fixed seed we allow 5 standard errors (a two-sided normal tail of 6e-7).
# (2) finite ε: the estimator's expectation is *exactly* a difference quotient. For θ: E[Y_ε] = softmax((θ+εL)/σ)
#     (the Gumbel-max law with scores θ + εL), so E[g] = (p(ε) − p(0))/ε; for σ: E[⟨Γ, Y_ε⟩] = ∂_σ of
#     E max⟨θ + εL + σΓ, φ⟩ = σ lse((θ+εL)/σ) + σγ_E, which is H(p(ε)) + γ_E (H: entropy), so
#     E[g_σ] = (H(p(ε)) − H(p(0)))/ε. We first compare with these exact expectations (error (1) only), then with
#     the derivative, allowing in addition the Taylor remainder |ε|/2 max|f''| on [−|ε|, |ε|]. For θ,
#     |p_i''| ≤ p_i max((v_i − v̄)², Var_p v) ≤ (range(L)/σ)² with v = L/σ; for σ we bound |H''| by its maximum on
#     a grid of the interval (computed with autograd, 10% margin).
THETA = torch.tensor([0.3, -0.5, 1.0, 0.1], dtype=F64)
LOSS = torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=F64)
SIGMA = 0.7
N_ORACLE = 200_000


def _entropy(p):
    return -(p * p.log()).sum(-1)


def _expected(eps):
    p0 = torch.softmax(THETA / SIGMA, 0)
    pe = torch.softmax((THETA + eps * LOSS) / SIGMA, 0)
    jac = torch.diag(p0) - torch.outer(p0, p0)
    return {
        "theta_fd": (pe - p0) / eps,
        "sigma_fd": (_entropy(pe) - _entropy(p0)) / eps,
        "theta": jac @ LOSS / SIGMA,
        "sigma": -THETA @ jac @ LOSS / SIGMA**2,
        "loss": p0 @ LOSS,
    }


def _entropy_curvature(eps):
    worst = 0.0
    for e in torch.linspace(-abs(eps), abs(eps), 41, dtype=F64):
        e = e.clone().requires_grad_()
        h = _entropy(torch.softmax((THETA + e * LOSS) / SIGMA, 0))
        (d1,) = torch.autograd.grad(h, e, create_graph=True)
        (d2,) = torch.autograd.grad(d1, e)
        worst = max(worst, abs(d2.item()))
    return 1.1 * worst


def _oracle_grads(op, eps, seed):
    theta = THETA.repeat(N_ORACLE, 1).requires_grad_()
    sigma = torch.full((N_ORACLE,), SIGMA, dtype=F64, requires_grad=True)
    gen = torch.Generator().manual_seed(seed)
    if op == "direct_loss":
        value = direct_loss(
            theta, sigma, None, (0.0, LOSS.expand(N_ORACLE, 4)), argmax_onehot, eps=eps, noise="gumbel", generator=gen
        )
        value.sum().backward()
    else:
        y = perturbed_direct(theta, sigma, argmax_onehot, eps=eps, noise="gumbel", generator=gen)
        value = y @ LOSS
        value.sum().backward()
    return value.detach(), theta.grad, sigma.grad


@pytest.mark.parametrize("op", ["direct_loss", "perturbed_direct"])
@pytest.mark.parametrize("eps", [-0.05, 0.05])
def test_categorical_oracle(op, eps):
    value, g_theta, g_sigma = _oracle_grads(op, eps, seed=11 if eps < 0 else 12)
    want = _expected(eps)
    n = N_ORACLE
    se_theta, se_sigma, se_value = g_theta.std(0) / n**0.5, g_sigma.std() / n**0.5, value.std() / n**0.5
    assert abs(value.mean() - want["loss"]) < 5 * se_value
    # (1) against the exact expectation at this ε: Monte Carlo error only
    assert (g_theta.mean(0) - want["theta_fd"]).abs().le(5 * se_theta).all(), (g_theta.mean(0), want["theta_fd"])
    assert abs(g_sigma.mean() - want["sigma_fd"]) < 5 * se_sigma, (g_sigma.mean(), want["sigma_fd"])
    # (2) against the derivative: plus the Taylor remainder of the difference quotient
    bias_theta = abs(eps) / 2 * ((LOSS.max() - LOSS.min()) / SIGMA) ** 2
    bias_sigma = abs(eps) / 2 * _entropy_curvature(eps)
    assert (g_theta.mean(0) - want["theta"]).abs().le(5 * se_theta + bias_theta).all()
    assert abs(g_sigma.mean() - want["sigma"]) < 5 * se_sigma + bias_sigma
    # the test can fail: the other sign's estimator, or a wrong sign, is rejected at this sample size
    assert not (g_theta.mean(0) + want["theta_fd"]).abs().le(5 * se_theta).all()


def test_categorical_oracle_scales_gradient_by_upstream():
    # direct_loss multiplies instance b's gradient by the upstream u_b (here 3 and 0)
    theta = THETA.repeat(2, 1).requires_grad_()
    loss = direct_loss(
        theta,
        0.5,
        None,
        (0.0, LOSS.expand(2, 4)),
        argmax_onehot,
        eps=-2.0,
        noise="gumbel",
        generator=torch.Generator().manual_seed(0),
        n_samples=64,
    )
    (loss * torch.tensor([3.0, 0.0], dtype=F64)).sum().backward()
    assert theta.grad[1].abs().sum() == 0 and theta.grad[0].abs().sum() > 0


# --- Berthet et al.'s perturbed optimizer: Gumbel-max argmax is softmax ----------------------------------------


def test_perturbed_optimizer_gumbel_argmax_is_softmax_with_softmax_jacobian():
    n = 200_000
    theta = torch.tensor([[0.2, 1.0, -0.3, 0.5]], dtype=F64, requires_grad=True)
    f = perturbed(argmax_onehot, sigma=1.0, n_samples=n, noise="gumbel", generator=torch.Generator().manual_seed(5))
    y = f(theta)
    p = torch.softmax(theta.detach(), -1)[0]
    # Y_i is Bernoulli(p_i): standard error sqrt(p_i (1 - p_i) / n)
    assert ((y[0].detach() - p).abs() <= 5 * (p * (1 - p) / n).sqrt()).all()
    jac = torch.stack([torch.autograd.grad(y[0, i], theta, retain_graph=True)[0][0] for i in range(4)])
    # entry (i, j) is the mean of y_i (1 - e^{-Z_j}) / σ; e^{-Z} is Exp(1) for standard Gumbel Z, so the score has
    # variance 1 and |y_i| <= 1: each entry's standard error is at most 1/√n
    want = torch.diag(p) - torch.outer(p, p)
    assert (jac - want).abs().max() < 5 / n**0.5, (jac, want)
    assert (jac + 0.5 * want).abs().max() > 5 / n**0.5  # a wrong Jacobian is rejected


def test_perturbed_optimizer_normal_noise_matches_finite_differences_in_expectation():
    # normal noise: J = E[y z^T]/σ; with the same draw the estimate is unbiased for ∇ E[y]. Check J^T g against a
    # central difference of the exact expectation for top-1 of 3 classes computed by dense Monte Carlo with
    # common random numbers (the difference uses the same noise at θ ± h, so its own error is small).
    n, sigma = 200_000, 0.8
    theta = torch.tensor([[0.1, 0.4, -0.2]], dtype=F64, requires_grad=True)
    g = torch.tensor([[1.0, -0.5, 0.25]], dtype=F64)
    f = perturbed(argmax_onehot, sigma=sigma, n_samples=n, noise="normal", generator=torch.Generator().manual_seed(2))
    (grad,) = torch.autograd.grad((f(theta) * g).sum(), theta)
    # exact: E[argmax] for Gaussian noise via a 1-D quadrature is tedious; use a large CRN Monte Carlo instead
    z = torch.randn(2_000_000, 3, dtype=F64, generator=torch.Generator().manual_seed(9))
    h = 1e-2
    fd = []
    for j in range(3):
        e = torch.zeros(3, dtype=F64)
        e[j] = h
        up = argmax_onehot(theta.detach()[0] + e + sigma * z).mean(0) @ g[0]
        dn = argmax_onehot(theta.detach()[0] - e + sigma * z).mean(0) @ g[0]
        fd.append((up - dn) / (2 * h))
    fd = torch.stack(fd)
    # score-function standard error: |<g, y>| <= 1 and Var(z_j) = 1 -> at most 1/(σ √n) per entry; the CRN
    # difference's error is a few 1e-3 at this size and step
    assert (grad[0] - fd).abs().max() < 5 / (sigma * n**0.5) + 5e-3, (grad, fd)


def test_fenchel_young_gradient_is_mean_solution_minus_target():
    theta = torch.randn(3, 5, dtype=F64, requires_grad=True)
    y_true = argmax_onehot(torch.randn(3, 5, dtype=F64))
    loss = fenchel_young_loss(
        theta,
        y_true,
        argmax_onehot,
        sigma=0.5,
        n_samples=50,
        noise="gumbel",
        generator=torch.Generator().manual_seed(1),
    )
    loss.sum().backward()
    y_mean = perturbed(argmax_onehot, 0.5, 50, "gumbel", torch.Generator().manual_seed(1))(theta.detach())
    torch.testing.assert_close(theta.grad, y_mean - y_true, rtol=0, atol=0)
    assert loss.shape == (3,)
    # value: E max<θ + σZ, y> - <θ, y_true> >= <θ, E y> - <θ, y_true> ... and equals it for σ -> 0 on the argmax
    loss0 = fenchel_young_loss(theta.detach(), argmax_onehot(theta.detach()), argmax_onehot, sigma=1e-9)
    assert loss0.abs().max() < 1e-6


# --- uniqueness and tie rule --------------------------------------------------------------------------------


def test_valid_structures_and_generator_determinism():
    theta = torch.randn(6, 5, 5, dtype=F64)
    runs = [
        perturbed_direct(theta, 1.0, assignment, n_samples=3, reduce="none", generator=torch.Generator().manual_seed(4))
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])
    p = runs[0]
    assert ((p == 0) | (p == 1)).all() and (p.sum(-1) == 1).all() and (p.sum(-2) == 1).all()
    other = perturbed_direct(
        theta, 1.0, assignment, n_samples=3, reduce="none", generator=torch.Generator().manual_seed(5)
    )
    assert not torch.equal(p, other)
    k = perturbed_direct(torch.randn(4, 7), 2.0, lambda t: topk_khot(t, 3), n_samples=5, reduce="none")
    assert (k.sum(-1) == 3).all()


def test_zero_sigma_and_zero_scores_apply_the_tie_rule():
    y = perturbed_direct(torch.zeros(3, 4), None, argmax_onehot)
    assert torch.equal(y, torch.eye(4)[[0, 0, 0]])  # ties -> lowest index
    y = perturbed_direct(torch.zeros(2, 5), None, lambda t: topk_khot(t, 2))
    assert torch.equal(y, torch.tensor([[1.0, 1, 0, 0, 0]] * 2))


# --- loss linearisation -------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_matching_sort_coeffs_reproduce_the_quadratic_loss(d):
    perms = torch.stack([torch.eye(d, dtype=F64)[list(p)] for p in itertools.permutations(range(d))])
    m = len(perms)
    Y = perms.repeat_interleave(m, 0)  # every (Y, Ŷ) pair
    Yhat = perms.repeat(m, 1, 1)
    x = torch.rand(m * m, d, dtype=F64, generator=torch.Generator().manual_seed(d))
    t0, t = matching_sort_coeffs(x, Y)
    want = ((x**2).unsqueeze(-2) * (Y - Yhat) ** 2).sum((-2, -1))
    torch.testing.assert_close(t0 + (t * Yhat).sum((-2, -1)), want)


def test_knn_and_hamming_coeffs():
    gen = torch.Generator().manual_seed(0)
    dist = torch.rand(20, 9, dtype=F64, generator=gen)
    y, yhat = topk_khot(torch.randn(20, 9, generator=gen, dtype=F64), 3), topk_khot(torch.randn(20, 9, dtype=F64), 3)
    t0, t = knn_coeffs(dist, y)
    torch.testing.assert_close(t0 + (t * yhat).sum(-1), -(dist * y * yhat).sum(-1))
    t0, t = hamming_coeffs(y)
    torch.testing.assert_close(t0 + (t * yhat).sum(-1), ((y - yhat) ** 2).sum(-1))


# --- the official code's update ------------------------------------------------------------------------------


def _official_direction(theta, sigma, x, Y, S, eps_abs, gamma):
    """A straightforward re-implementation of the official code's training step (docs/math/training.md §5.7): tile θ and
    σ S times, add σγ, match (lapjv on −θ̃, here scipy's linear_sum_assignment), augment entry-wise by ±|ε| x_j² by
    column j, match again, D = P − P_ε; returns (Σ_s D_s [B,d,d], Σ_s Σ_ij γ D_s [B])."""
    from scipy.optimize import linear_sum_assignment

    B, d, _ = theta.shape
    theta_t = theta.repeat(S, 1, 1) + sigma.repeat(S).view(-1, 1, 1) * gamma
    x_t, Y_t = x.repeat(S, 1), Y.repeat(S, 1, 1)

    def match(scores):
        out = torch.zeros_like(scores)
        for b in range(scores.shape[0]):
            rows, cols = linear_sum_assignment(-scores[b].numpy())
            out[b, rows, cols] = 1.0
        return out

    P = match(theta_t)
    aug = theta_t.clone()
    for b in range(B * S):
        for i in range(d):
            for j in range(d):
                if Y_t[b, i, j] == 1:
                    aug[b, i, j] += eps_abs * x_t[b, j] ** 2
                else:
                    aug[b, i, j] -= eps_abs * x_t[b, j] ** 2
    D = P - match(aug)
    return D.view(S, B, d, d).sum(0), (gamma * D).view(S, B, d, d).sum((0, 2, 3))


def test_official_code_direction():
    B, d, S, eps_abs = 4, 6, 5, 12.0
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(B, d, dtype=F64, generator=gen)
    Y = sort_perm(x)  # descending, as the official code
    theta = torch.randn(B, d, d, dtype=F64, generator=gen).requires_grad_()
    sigma = torch.rand(B, dtype=F64, generator=gen).add(0.5).requires_grad_()
    loss = direct_loss(
        theta,
        sigma,
        Y,
        lambda target, ctx: matching_sort_coeffs(ctx, target),
        assignment,
        eps=-eps_abs,
        n_samples=S,
        noise="gumbel_var3",
        grad_scale="none",
        generator=torch.Generator().manual_seed(8),
        loss_context=x,
    )
    loss.sum().backward()
    gamma = sample_noise((S * B, d, d), "gumbel_var3", torch.Generator().manual_seed(8), dtype=F64)
    d_theta, d_sigma = _official_direction(theta.detach(), sigma.detach(), x, Y, S, eps_abs, gamma)
    assert d_theta.abs().sum() > 0  # the test exercises a non-trivial direction
    torch.testing.assert_close(theta.grad * S, d_theta)  # mean over samples vs the official code's sum
    torch.testing.assert_close(sigma.grad * S, d_sigma)
    # perturbed_direct with G = t gives the same direction (the linear-loss case of docs/math/training.md §6.4)
    theta2 = theta.detach().clone().requires_grad_()
    y = perturbed_direct(
        theta2,
        sigma.detach(),
        assignment,
        eps=-eps_abs,
        n_samples=S,
        noise="gumbel_var3",
        grad_scale="none",
        generator=torch.Generator().manual_seed(8),
    )
    (y * matching_sort_coeffs(x, Y)[1]).sum().backward()
    torch.testing.assert_close(theta2.grad * S, d_theta)


def test_adaptive_eps_grows_and_persists():
    # σ = 0 and a large margin: with a tiny |ε| the loss-augmented solve changes nothing although the loss is > 0
    theta = torch.tensor([[3.0, 0.0, 0.0]], requires_grad=True)
    target = torch.tensor([[0.0, 1.0, 0.0]])
    eps = torch.tensor(-0.5)
    loss = direct_loss(theta, None, target, lambda t, _: hamming_coeffs(t), argmax_onehot, eps=eps, adaptive_eps=True)
    loss.sum().backward()
    # needed: |ε| · 2 > 3 (class 1 gains |ε|, class 0 loses |ε|) -> 0.5 · 1.1^k > 1.5 -> k = 12
    assert eps.item() == pytest.approx(-0.5 * 1.1**12)
    assert theta.grad[0, 1] < 0 < theta.grad[0, 0]
    loss2 = direct_loss(theta, None, target, hamming_coeffs(target), argmax_onehot, eps=-0.5)
    theta.grad = None
    loss2.sum().backward()
    assert theta.grad.abs().sum() == 0  # without the rule: no signal


# --- shapes, broadcasting, reduce, modes -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sigma_shape", ["float", (), (5,), (5, 1), (5, 1, 1), (1, 4, 4)])
def test_sigma_shapes_and_gradient_shape(dtype, sigma_shape):
    theta = torch.randn(5, 4, 4, dtype=dtype, requires_grad=True)
    if sigma_shape == "float":
        sigma = 0.8
    else:
        sigma = torch.rand(sigma_shape, dtype=dtype).add(0.5).requires_grad_()
    y = perturbed_direct(theta, sigma, assignment, n_samples=3, generator=torch.Generator().manual_seed(0))
    assert y.shape == theta.shape and y.dtype == dtype
    (y * torch.randn(5, 4, 4, dtype=dtype)).sum().backward()
    assert theta.grad.shape == theta.shape and torch.isfinite(theta.grad).all()
    if sigma_shape != "float":
        assert sigma.grad is not None and sigma.grad.shape == sigma.shape


def test_reduce_none_and_mean_agree():
    theta = torch.randn(3, 6, dtype=F64, requires_grad=True)
    g = torch.randn(3, 6, dtype=F64)
    y_mean = perturbed_direct(theta, 1.0, argmax_onehot, n_samples=7, generator=torch.Generator().manual_seed(1))
    (gm,) = torch.autograd.grad((y_mean * g).sum(), theta)
    y_all = perturbed_direct(
        theta, 1.0, argmax_onehot, n_samples=7, reduce="none", generator=torch.Generator().manual_seed(1)
    )
    assert y_all.shape == (7, 3, 6)
    torch.testing.assert_close(y_all.mean(0), y_mean)
    (gn,) = torch.autograd.grad((y_all * g).sum(), theta)  # the same G for every sample: n times the mean's
    torch.testing.assert_close(gn, 7 * gm)


def test_n_samples_average_is_mean_of_single_sample_calls_on_stacked_noise():
    # n_samples draws are [n, B, *S] from the generator; the output is their mean
    theta = torch.randn(2, 5, dtype=F64)
    y = perturbed_direct(theta, 0.7, argmax_onehot, n_samples=4, generator=torch.Generator().manual_seed(3))
    gamma = sample_noise((4, 2, 5), "gumbel0", torch.Generator().manual_seed(3), dtype=F64)
    torch.testing.assert_close(y, argmax_onehot(theta + 0.7 * gamma).mean(0))


def test_grad_scale_and_relative_eps():
    theta = torch.randn(4, 6, dtype=F64, requires_grad=True)
    g = torch.randn(4, 6, dtype=F64)

    def grad(**kw):
        y = perturbed_direct(theta, 1.0, argmax_onehot, n_samples=5, generator=torch.Generator().manual_seed(2), **kw)
        return torch.autograd.grad((y * g).sum(), theta)[0]

    torch.testing.assert_close(grad(eps=-2.0, grad_scale="none"), 2.0 * grad(eps=-2.0))
    # relative: effective ε_b = ε std(θ̃_b)/max|G_b| per instance; scaling G leaves the direction unchanged
    a = grad(eps=-1.0, eps_mode="relative", grad_scale="none")
    y = perturbed_direct(
        theta,
        1.0,
        argmax_onehot,
        n_samples=5,
        generator=torch.Generator().manual_seed(2),
        eps=-1.0,
        eps_mode="relative",
        grad_scale="none",
    )
    b = torch.autograd.grad((y * g * 100.0).sum(), theta)[0]
    torch.testing.assert_close(a, b)
    c = grad(eps=-1.0, eps_mode="relative")
    assert torch.isfinite(c).all() and c.abs().sum() > 0


def test_sigma_none_is_noise_free_and_still_gives_direct_gradients():
    theta = torch.randn(3, 4, dtype=F64, requires_grad=True)
    y = perturbed_direct(theta, None, argmax_onehot, n_samples=5)
    assert torch.equal(y, argmax_onehot(theta.detach()))
    L = torch.randn(3, 4, dtype=F64)
    (y * L).sum().backward()
    # ε = −1: grad = (Y − Y_ε) with Y_ε = argmax(θ − G); with a huge |ε| the loss-augmented argmax is argmin L
    torch.testing.assert_close(theta.grad, y - argmax_onehot(theta.detach() - L))
    t2 = theta.detach().clone().requires_grad_()
    (perturbed_direct(t2, None, argmax_onehot, eps=-100.0, grad_scale="none") * L).sum().backward()
    torch.testing.assert_close(t2.grad, y - argmax_onehot(-L))


@pytest.mark.parametrize(
    "make, scores_shape, out_shape",
    [
        (lambda **kw: PerturbedArgmax(**kw), (4, 6), (4, 6)),
        (lambda **kw: PerturbedTopK(2, **kw), (4, 6), (4, 6)),
        (lambda **kw: PerturbedMatching(**kw), (4, 5, 5), (4, 5, 5)),
        (lambda **kw: PerturbedSort(**kw), (4, 5), (4, 5, 5)),
    ],
)
def test_modules(make, scores_shape, out_shape):
    scores = torch.randn(scores_shape, dtype=F64, requires_grad=True)
    m = make(sigma=0.5, n_samples=3, generator=torch.Generator().manual_seed(0))
    y = m(scores)
    assert y.shape == out_shape
    (y * torch.randn(out_shape, dtype=F64)).sum().backward()
    assert scores.grad.shape == scores_shape and m.rho.grad is not None and m.rho.grad.shape == ()
    assert float(m.sigma().detach()) == pytest.approx(0.5)
    # eval mode: no noise, generator untouched
    m.eval()
    state = m.generator.get_state()
    y0 = m(scores)
    assert torch.equal(m.generator.get_state(), state)
    if isinstance(m, PerturbedSort):
        assert torch.equal(y0, sort_perm(scores.detach()))
    elif isinstance(m, PerturbedMatching):
        assert torch.equal(y0, assignment(scores.detach()))
    # a network-predicted sigma gets gradients; fixed sigma has no parameter
    net = torch.nn.Sequential(torch.nn.Linear(3, 1, dtype=F64), torch.nn.Softplus(), torch.nn.Flatten(0))
    m2 = make(sigma_module=net, n_samples=2)
    y = m2(scores.detach(), torch.randn(4, 3, dtype=F64))
    (y * torch.randn(out_shape, dtype=F64)).sum().backward()
    assert net[0].weight.grad is not None
    fixed = make(sigma=0.0, learn_sigma=False)
    assert fixed.rho is None and list(fixed.parameters()) == []
    assert torch.equal(fixed(scores.detach()), make(sigma=1.0).eval()(scores.detach()))


def test_perturbed_sort_equals_matching_of_products():
    s = torch.randn(3, 6, dtype=F64)
    c = torch.linspace(1, -1, 6, dtype=F64)
    torch.testing.assert_close(assignment(s.unsqueeze(-1) * c), sort_perm(s))


# --- errors --------------------------------------------------------------------------------------------------------


def test_bad_arguments():
    theta = torch.randn(3, 4)
    with pytest.raises(ValueError, match="theta must be"):
        perturbed_direct(torch.randn(4), 1.0, argmax_onehot)
    with pytest.raises(TypeError, match="theta must be"):
        perturbed_direct(torch.ones(3, 4, dtype=torch.int64), 1.0, argmax_onehot)
    with pytest.raises(TypeError, match="solver must be"):
        perturbed_direct(theta, 1.0, "argmax")
    with pytest.raises(ValueError, match="eps must be"):
        perturbed_direct(theta, 1.0, argmax_onehot, eps=0.0)
    with pytest.raises(ValueError, match="n_samples must be"):
        perturbed_direct(theta, 1.0, argmax_onehot, n_samples=0)
    with pytest.raises(ValueError, match="noise must be one of"):
        perturbed_direct(theta, 1.0, argmax_onehot, noise="uniform")
    with pytest.raises(ValueError, match="reduce must be one of"):
        perturbed_direct(theta, 1.0, argmax_onehot, reduce="sum")
    with pytest.raises(ValueError, match="grad_scale must be one of"):
        perturbed_direct(theta, 1.0, argmax_onehot, grad_scale="eps")
    with pytest.raises(ValueError, match="eps_mode must be one of"):
        perturbed_direct(theta, 1.0, argmax_onehot, eps_mode="rel")
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        perturbed_direct(theta, torch.tensor([1.0, -1.0, 1.0]), argmax_onehot)
    with pytest.raises(ValueError, match="sigma must be a finite number"):
        perturbed_direct(theta, -1.0, argmax_onehot)
    with pytest.raises(ValueError, match="sigma must be a scalar"):
        perturbed_direct(theta, torch.ones(2), argmax_onehot)
    with pytest.raises(TypeError, match="generator must be"):
        perturbed_direct(theta, 1.0, argmax_onehot, generator=1)
    with pytest.raises(ValueError, match="solver must return"):
        perturbed_direct(theta, 1.0, lambda t: t[..., :2])
    with pytest.raises(ValueError, match="loss coefficients t must broadcast"):
        direct_loss(theta, 1.0, None, (0.0, torch.ones(3, 5)), argmax_onehot)
    with pytest.raises(TypeError, match="loss_coeffs must be a pair"):
        direct_loss(theta, 1.0, None, torch.ones(3, 4), argmax_onehot)
    with pytest.raises(ValueError, match="sigma must be a finite number > 0"):
        perturbed(argmax_onehot, sigma=0.0)
    with pytest.raises(ValueError, match="y_true must be"):
        fenchel_young_loss(theta, torch.ones(3, 5), argmax_onehot)
    with pytest.raises(ValueError, match="a learnable sigma"):
        PerturbedArgmax(sigma=0.0)
    with pytest.raises(ValueError, match="k must be"):
        PerturbedTopK(0)
    with pytest.raises(ValueError, match="x must be"):
        matching_sort_coeffs(torch.rand(2, 3), torch.rand(2, 3, 4))


def test_nonfinite_free_for_extreme_sigma():
    theta = torch.randn(2, 5)
    y = perturbed_direct(theta.requires_grad_(), 1e30, argmax_onehot, n_samples=4)
    assert torch.isfinite(y).all() and math.isclose(float(y.detach().sum()), 2.0)
