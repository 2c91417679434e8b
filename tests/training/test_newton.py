"""Newton losses (docs/math/training.md §2, §7): closed forms against autograd, the three
variants against an independent solve, singular handling, the parameter gradient, and the sampling estimators."""

from __future__ import annotations

import math

import pytest
import torch
from relaxops.training import (
    GRAD_HESS,
    NewtonLoss,
    SingularCurvatureError,
    newton_target,
    perturbed_argmax_fy,
    smoothing_grad_hess,
)
from relaxops.training.newton import autograd_grad_hess
from torch import nn

F64 = torch.float64
VARIANTS = ["hessian", "fisher", "elementwise_hessian"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# per-sample losses written out (not the closed forms): autograd differentiates these
def smce_loss(y, t):
    return nn.functional.cross_entropy(y, t, reduction="none")


def bce_loss(y, p):
    return -(p * y.log() + (1 - p) * (1 - y).log()).sum(-1)


def sbce_loss(y, p):
    return nn.functional.binary_cross_entropy_with_logits(y, p, reduction="none").sum(-1)


def mse_loss(y, t):
    return 0.5 * (y - t).square().sum(-1)


def inputs(name, N=6, m=4, seed=0):
    g = gen(seed)
    y = torch.randn(N, m, dtype=F64, generator=g)
    if name == "smce":
        return y, torch.randint(m, (N,), generator=g), smce_loss
    if name == "bce":
        return torch.rand(N, m, dtype=F64, generator=g) * 0.9 + 0.05, torch.rand(N, m, dtype=F64, generator=g), bce_loss
    if name == "sbce":
        return y, torch.rand(N, m, dtype=F64, generator=g), sbce_loss
    return y, torch.randn(N, m, dtype=F64, generator=g), mse_loss


def per_sample_hessians(loss, y, t):
    """Independent oracle: torch.func.hessian of each row's loss, vmapped over the rows."""

    def single(yi, ti):
        return loss(yi[None], ti[None])[0]

    return torch.func.vmap(torch.func.hessian(single))(y, t)


def damped_step(C, g, lam):
    """(C + lam I)^-1 g_n for every row by a plain linear solve (independent of the implementation's eigh)."""
    m = g.shape[1]
    A = C + lam * torch.eye(m, dtype=C.dtype)
    if A.dim() == 2:
        return torch.linalg.solve(A, g.T).T
    return torch.linalg.solve(A, g[..., None])[..., 0]


# ------------------------------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("name", ["smce", "bce", "sbce", "mse"])
def test_closed_forms_equal_autograd(name):
    y, t, loss = inputs(name)
    g, H = GRAD_HESS[name](y, t)
    yy = y.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(loss(yy, t).sum(), yy)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(H, per_sample_hessians(loss, y, t), rtol=1e-10, atol=1e-12)
    g2, H2 = autograd_grad_hess(loss, y, t)  # NewtonLoss's own autograd path
    torch.testing.assert_close(g2, g_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(H2, H, rtol=1e-10, atol=1e-12)


def test_smce_accepts_distributions_and_bce_clamps():
    y, t, _ = inputs("smce")
    p = nn.functional.one_hot(t, 4).to(F64)
    for a, b in zip(GRAD_HESS["smce"](y, t), GRAD_HESS["smce"](y, p)):
        torch.testing.assert_close(a, b)
    y = torch.tensor([[0.0, 1.0, 0.5]], dtype=F64)
    g, H = GRAD_HESS["bce"](y, torch.tensor([[1.0, 0.0, 0.5]], dtype=F64))
    assert torch.isfinite(g).all() and torch.isfinite(H).all()


@pytest.mark.parametrize("name", ["smce", "bce", "sbce", "mse"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lam", [1e-2, 0.5])
def test_variants_are_the_documented_damped_steps(name, variant, lam):
    """y - (C + lam I)^-1 g with C = H_n, mean H_n or mean g g^T; closed form and autograd paths agree."""
    y, t, loss = inputs(name, N=7, m=4, seed=3)
    g, H = GRAD_HESS[name](y, t)
    C = {"elementwise_hessian": H, "hessian": H.mean(0), "fisher": g.T @ g / len(g)}[variant]
    expected = y - damped_step(C, g, lam)
    z = newton_target(y, g, H, variant, lam)
    torch.testing.assert_close(z, expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(
        NewtonLoss(variant=variant, lam=lam, grad_hess_fn=name).target(y, t), expected, rtol=1e-9, atol=1e-11
    )
    torch.testing.assert_close(NewtonLoss(loss, variant=variant, lam=lam).target(y, t), expected, rtol=1e-9, atol=1e-11)


def test_relative_damping_uses_the_trace():
    y, t, _ = inputs("sbce", N=5, m=3)
    g, H = GRAD_HESS["sbce"](y, t)
    C = H.mean(0)
    lam = 0.3 * torch.trace(C).item() / 3
    torch.testing.assert_close(newton_target(y, g, H, "hessian", 0.3, lam_mode="relative"), y - damped_step(C, g, lam))


@pytest.mark.parametrize("variant", ["hessian", "elementwise_hessian"])
def test_elementwise_equals_empirical_for_one_sample(variant):
    y, t, _ = inputs("smce", N=1, m=5)
    g, H = GRAD_HESS["smce"](y, t)
    torch.testing.assert_close(
        newton_target(y, g, H, variant, 1e-2), newton_target(y, g, H, "elementwise_hessian", 1e-2)
    )


# ---------------------------------------------------------------------------------------------------------- MSE


@pytest.mark.parametrize("variant", ["hessian", "elementwise_hessian"])
@pytest.mark.parametrize("how", ["closed", "autograd"])
def test_mse_newton_loss_is_the_mse_loss(variant, how):
    y, t, loss = inputs("mse", N=5, m=3)
    y.requires_grad_(True)
    make = (
        (lambda lam: NewtonLoss(variant=variant, lam=lam, grad_hess_fn="mse"))
        if how == "closed"
        else (lambda lam: NewtonLoss(loss, variant=variant, lam=lam))
    )
    value = make(0.0)(y, t)
    ref = loss(y, t).mean()
    torch.testing.assert_close(value, ref)
    torch.testing.assert_close(torch.autograd.grad(value, y)[0], torch.autograd.grad(ref, y)[0])
    lam = 0.7
    value = make(lam)(y, t)
    (grad,) = torch.autograd.grad(value, y)
    torch.testing.assert_close(grad, (y.detach() - t) / (1 + lam) / len(y))
    torch.testing.assert_close(value, ref.detach() / (1 + lam) ** 2)


# --------------------------------------------------------------------------------------------- singularity


@pytest.mark.parametrize("variant", VARIANTS)
def test_smce_without_damping_raises_or_uses_the_pseudo_inverse(variant):
    y, t, _ = inputs("smce", N=8, m=4)
    g, H = GRAD_HESS["smce"](y, t)
    with pytest.raises(SingularCurvatureError, match="singular.*lam > 0"):
        newton_target(y, g, H, variant, 0.0)
    z = newton_target(y, g, H, variant, 0.0, singular="pinv")
    C = {"elementwise_hessian": H, "hessian": H.mean(0), "fisher": g.T @ g / len(g)}[variant]
    expected = (
        y - (torch.linalg.pinv(C, hermitian=True) @ g[..., None])[..., 0]
        if variant == "elementwise_hessian"
        else y - g @ torch.linalg.pinv(C, hermitian=True)
    )
    torch.testing.assert_close(z, expected, rtol=1e-8, atol=1e-10)
    assert torch.isfinite(z).all()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lam", [1e-4, 1e-1])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_smce_steps_are_orthogonal_to_ones(variant, lam, dtype):
    """with lam > 0 the step y - z* sums to zero over the classes (g and C's range are orthogonal to 1)."""
    y, t, _ = inputs("smce", N=9, m=6, seed=2)
    y = (3 * y).to(dtype)
    z = NewtonLoss(variant=variant, lam=lam, grad_hess_fn="smce").target(y, t)
    step = y - z
    assert z.dtype == dtype and torch.isfinite(z).all()
    # rounding leaves a component of g along 1 of about eps |g|, and C + lam I divides it by lam (its eigenvalue
    # there) while the rest of the step is divided by eigenvalues up to ~1/2: relative to the step, the sum is
    # about eps / lam; allowed: 50 eps / lam (float64, lam = 1e-4: 1e-10; float32: 6e-2, 6e-5 at lam = 0.1)
    scale = step.abs().amax(-1)
    tol = 50 * torch.finfo(dtype).eps / lam
    assert (step.sum(-1).abs() <= tol * scale).all()
    assert step.abs().max() > 1e-3  # not a trivial zero step
    # softmax(z*) is shift invariant: shifting y by a constant per row shifts z* by the same constant
    z_shift = NewtonLoss(variant=variant, lam=lam, grad_hess_fn="smce").target(y + 5.0, t)
    # (up to that same component along 1, which the softmax ignores)
    torch.testing.assert_close(
        torch.softmax(z_shift, -1), torch.softmax(z, -1), rtol=0, atol=1e-3 if dtype == torch.float32 else 1e-9
    )


@pytest.mark.parametrize("singular", ["raise", "pinv"])
def test_fisher_with_fewer_samples_than_outputs_is_never_nan(singular):
    """N < m and lam = 0: rank(F) <= N < m; raise or a finite pseudo-inverse step, never NaN/inf."""
    y, t, _ = inputs("mse", N=2, m=5)
    g, _ = GRAD_HESS["mse"](y, t)
    if singular == "raise":
        with pytest.raises(SingularCurvatureError, match="empirical Fisher"):
            newton_target(y, g, None, "fisher", 0.0)
    else:
        z = newton_target(y, g, None, "fisher", 0.0, singular=singular)
        assert torch.isfinite(z).all()
        # g lies in F's range, so the pseudo-inverse step still solves F step = g there
        F = g.T @ g / len(g)
        torch.testing.assert_close((y - z) @ F, g, rtol=1e-8, atol=1e-10)
    z = newton_target(y, g, None, "fisher", 1e-3)  # damping makes it regular
    assert torch.isfinite(z).all()


def test_indefinite_hessian_raises_unless_floored():
    y = torch.zeros(3, 2, dtype=F64)
    g = torch.ones(3, 2, dtype=F64)
    H = torch.diag(torch.tensor([1.0, -2.0], dtype=F64)).expand(3, 2, 2)
    with pytest.raises(SingularCurvatureError, match="indefinite"):
        newton_target(y, g, H, "hessian", 1.0)
    z = newton_target(y, g, H, "hessian", 1.0, eig_floor=0.5)
    torch.testing.assert_close(y - z, g / torch.tensor([2.0, 0.5], dtype=F64))
    torch.testing.assert_close(y - newton_target(y, g, H, "hessian", 3.0), g / torch.tensor([4.0, 1.0], dtype=F64))


def test_zero_gradients_give_the_current_point_with_pinv():
    y = torch.randn(4, 3, dtype=F64)
    z = newton_target(y, torch.zeros_like(y), None, "fisher", 0.0, singular="pinv")
    torch.testing.assert_close(z, y)


# ---------------------------------------------------------------------------------------- parameter gradient


@pytest.mark.parametrize("variant", VARIANTS)
def test_parameter_gradient_is_jacobian_transpose_times_newton_direction(variant):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)).double()
    X = torch.randn(6, 3, dtype=F64, generator=gen(1))
    t = torch.randint(4, (6,), generator=gen(2))
    lam = 0.05
    loss = NewtonLoss(variant=variant, lam=lam, grad_hess_fn="smce")(model(X), t)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    # independent: explicit Jacobian of the flat outputs w.r.t. the flat parameters, times the damped step
    params = {k: v.detach() for k, v in model.named_parameters()}
    jac = torch.func.jacrev(lambda p: torch.func.functional_call(model, p, (X,)))(params)
    y = model(X).detach()
    g, H = GRAD_HESS["smce"](y, t)
    C = {"elementwise_hessian": H, "hessian": H.mean(0), "fisher": g.T @ g / len(g)}[variant]
    direction = damped_step(C, g, lam) / len(y)  # [N, m]
    for (name, _), grad in zip(model.named_parameters(), grads):
        J = jac[name].reshape(y.numel(), -1)
        torch.testing.assert_close(grad.reshape(-1), J.T @ direction.reshape(-1), rtol=1e-9, atol=1e-12)


def test_reductions_and_half_precision():
    y, t, _ = inputs("smce", N=5, m=3)
    nl = {r: NewtonLoss(variant="fisher", lam=0.1, grad_hess_fn="smce", reduction=r) for r in ("mean", "sum", "none")}
    torch.testing.assert_close(nl["sum"](y, t), 5 * nl["mean"](y, t))
    assert nl["none"](y, t).shape == (5,)
    h = y.half().requires_grad_(True)
    out = NewtonLoss(variant="hessian", lam=0.1, grad_hess_fn="smce")(h, t)
    out.backward()
    assert out.dtype == torch.float16 and torch.isfinite(h.grad).all()


def test_double_backward_failure_names_the_fallbacks():
    class Once(torch.autograd.Function):  # differentiable once only
        @staticmethod
        def forward(ctx, y):
            ctx.save_for_backward(y)
            return y.square().sum(-1)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, go):
            (y,) = ctx.saved_tensors
            return 2 * y * go[:, None]

    y = torch.randn(3, 2, dtype=F64)
    with pytest.raises(RuntimeError, match="twice-differentiable.*fisher"):
        NewtonLoss(lambda v: Once.apply(v), variant="hessian", lam=0.1).target(y)
    assert torch.isfinite(NewtonLoss(lambda v: Once.apply(v), variant="fisher", lam=0.1).target(y)).all()


# ------------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda y, g: newton_target(y, g, None, "newton", 0.1), ValueError, "variant"),
        (lambda y, g: newton_target(y, g, None, "fisher", -1.0), ValueError, "lam"),
        (lambda y, g: newton_target(y, g, None, "fisher", 0.1, lam_mode="rel"), ValueError, "lam_mode"),
        (lambda y, g: newton_target(y, g, None, "fisher", 0.1, singular="ignore"), ValueError, "singular"),
        (lambda y, g: newton_target(y, g, None, "fisher", 0.1, eig_floor=0.0), ValueError, "eig_floor"),
        (lambda y, g: newton_target(y, g, None, "hessian", 0.1), ValueError, "H is required"),
        (lambda y, g: newton_target(y, g[:2], None, "fisher", 0.1), ValueError, "g must have shape"),
        (lambda y, g: newton_target(y, g, torch.zeros(4, 3, 2), "hessian", 0.1), ValueError, "H must have shape"),
        (lambda y, g: newton_target(y[0], g[0], None, "fisher", 0.1), ValueError, r"y must be \[N, m\]"),
        (lambda y, g: newton_target(y, g * math.nan, None, "fisher", 0.1), ValueError, "g contains NaN"),
        (lambda y, g: NewtonLoss(), ValueError, "base_loss"),
        (lambda y, g: NewtonLoss(grad_hess_fn="ce"), ValueError, "grad_hess_fn"),
        (lambda y, g: NewtonLoss(grad_hess_fn="mse", reduction="avg"), ValueError, "reduction"),
        (lambda y, g: NewtonLoss(lambda v: v.sum(), variant="fisher")(y), ValueError, "per-sample"),
        (lambda y, g: NewtonLoss(grad_hess_fn="smce")(y, torch.tensor([0, 1, 2, 7])), ValueError, "class indices"),
        (lambda y, g: NewtonLoss(grad_hess_fn="sbce")(y, y[:, :2]), ValueError, "target must have shape"),
    ],
)
def test_bad_arguments_name_themselves(call, error, words):
    y = torch.randn(4, 3)
    with pytest.raises(error, match=words):
        call(y, torch.randn(4, 3))


# ----------------------------------------------------------------------------------- sampling estimators, FY


@pytest.mark.parametrize("noise", ["gaussian", "logistic"])
@pytest.mark.parametrize("control_variate", [True, False])
def test_smoothing_estimators_of_the_quadratic(noise, control_variate):
    """for l(y) = 1/2||y||^2 the smoothed loss is l(y) + const under any zero-mean noise, so the estimates
    have mean y and I. The N rows of one call are N independent estimates (same y, independent noise): their mean
    is compared with the truth at 5 standard errors (sd over rows / sqrt(N); a 5-sigma miss has probability ~6e-7
    per entry, and the seed is fixed). A wrong estimator misses by O(1) (e.g. without the -hess(nu) term H is off
    by 1/s^2 = 4 on the diagonal; without the 1/s^2 of grad(nu), g is off by a factor s^2), far outside."""
    N, m, s, S = 400, 3, 0.5, 200
    y = torch.tensor([0.7, -0.4, 1.2], dtype=F64).expand(N, m)
    g, H = smoothing_grad_hess(lambda z: 0.5 * z.square().sum(-1), y, s, S, noise, control_variate, gen(5))
    assert g.shape == (N, m) and H.shape == (N, m, m)
    for est, truth in ((g, y[0]), (H, torch.eye(m, dtype=F64))):
        mean, se = est.mean(0), est.std(0) / math.sqrt(N)
        assert ((mean - truth).abs() <= 5 * se + 1e-12).all(), (mean, truth, se)
    # more samples, less spread: sd over rows ~ 1/sqrt(S) (ratio sqrt(10) ~ 3.2 for 10x the samples)
    g2, _ = smoothing_grad_hess(lambda z: 0.5 * z.square().sum(-1), y, s, 10 * S, noise, control_variate, gen(6))
    ratio = (g.std(0) / g2.std(0)).mean().item()
    assert 2.5 < ratio < 4.0, ratio


def test_control_variate_reduces_the_variance():
    y = torch.full((300, 2), 2.0, dtype=F64)
    loss = lambda z: 0.5 * z.square().sum(-1) + 10.0  # noqa: E731  (a large constant: pure noise without the cv)
    g_cv, _ = smoothing_grad_hess(loss, y, 0.3, 50, generator=gen(1))
    g_raw, _ = smoothing_grad_hess(loss, y, 0.3, 50, control_variate=False, generator=gen(1))
    assert g_cv.std(0).max() * 3 < g_raw.std(0).min()


def test_smoothing_is_deterministic_and_calls_the_loss_once():
    calls = []

    def loss(z):
        calls.append(z.shape)
        return z.sum(-1)

    y = torch.randn(4, 3)
    a = smoothing_grad_hess(loss, y, 0.1, 7, generator=gen(3))
    b = smoothing_grad_hess(loss, y, 0.1, 7, generator=gen(3))
    assert calls == [(8, 4, 3), (8, 4, 3)]
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    with pytest.raises(ValueError, match="noise"):
        smoothing_grad_hess(loss, y, 0.1, 7, noise="cauchy")
    with pytest.raises(ValueError, match="S "):
        smoothing_grad_hess(loss, y, 0.1, 0)
    with pytest.raises(ValueError, match="loss must map"):
        smoothing_grad_hess(lambda z: z.sum(), y, 0.1, 3)


def onehot_argmax(theta):
    return nn.functional.one_hot(theta.argmax(-1), theta.shape[-1]).to(theta.dtype)


@pytest.mark.parametrize("control_variate", [True, False])
def test_perturbed_argmax_fy_against_the_two_class_closed_form(control_variate):
    """m = 2, Gaussian noise: P(class 0) = Phi(d / (s sqrt 2)) with d = y0 - y1, so the Jacobian of E[argmax] is
    +-phi(d / (s sqrt 2)) / (s sqrt 2). N rows are independent estimates; 5 standard errors of their mean."""
    N, S, s = 500, 100, 0.8
    y = torch.tensor([0.3, -0.1], dtype=F64).expand(N, 2)
    w_gt = torch.tensor([0.0, 1.0], dtype=F64).expand(N, 2)
    grad, J = perturbed_argmax_fy(onehot_argmax, y, w_gt, s, S, gen(4), control_variate)
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=F64), 1.0)
    u = torch.tensor(0.4 / (s * math.sqrt(2)), dtype=F64)
    p0 = normal.cdf(u)
    dens = normal.log_prob(u).exp() / (s * math.sqrt(2))
    truths = (
        (grad, torch.stack([p0, 1 - p0]) - w_gt[0]),
        (J, torch.stack([torch.stack([dens, -dens]), torch.stack([-dens, dens])])),
    )
    for est, truth in truths:
        mean, se = est.mean(0), est.std(0) / math.sqrt(N)
        assert ((mean - truth).abs() <= 5 * se + 1e-12).all(), (mean, truth, se)
    z = newton_target(y, grad, J, "hessian", 0.1)
    assert z.shape == (N, 2) and torch.isfinite(z).all()


def test_perturbed_argmax_fy_bad_solver():
    y = torch.randn(3, 4)
    with pytest.raises(ValueError, match="solver must return"):
        perturbed_argmax_fy(lambda t: t[..., :2], y, torch.zeros(3, 4), 0.1, 5)
    with pytest.raises(ValueError, match="w_gt must have shape"):
        perturbed_argmax_fy(onehot_argmax, y, torch.zeros(3, 2), 0.1, 5)
    with pytest.raises(ValueError, match="s "):
        perturbed_argmax_fy(onehot_argmax, y, torch.zeros(3, 4), 0.0, 5)


def test_perturbed_argmax_control_variate_reduces_the_variance():
    """A clear argmax (most samples keep it): subtracting the unperturbed solution removes most of J's noise."""
    y = torch.tensor([2.0, 0.0, -1.0], dtype=F64).expand(300, 3)
    w = torch.zeros(300, 3, dtype=F64)
    _, J_cv = perturbed_argmax_fy(onehot_argmax, y, w, 0.5, 40, gen(1))
    _, J_raw = perturbed_argmax_fy(onehot_argmax, y, w, 0.5, 40, gen(1), control_variate=False)
    assert J_cv.std(0).sum() * 2 < J_raw.std(0).sum()


def odd_even_logistic_oracle(x, steepness):
    """An independent, plainly twice-differentiable relaxed odd-even sorting network (logistic relaxation):
    X [B, n, n] with X[b, c, r] the weight of input c at ascending position r."""
    from relaxops.sortnet.networks import network_layers

    B, n = x.shape
    values = list(x.unbind(-1))  # wire values [B] each (lists: no in-place writes, so vmap/hessian work)
    Y = list(torch.eye(n, dtype=x.dtype).expand(B, n, n).unbind(1))  # row r: output wire r over the inputs
    for layer in network_layers("odd_even", n):
        for i, j in layer:
            a = torch.sigmoid(steepness * (values[j] - values[i]))  # ~1 when already in order
            vi, vj, Yi, Yj = values[i], values[j], Y[i], Y[j]
            values[i], values[j] = a * vi + (1 - a) * vj, (1 - a) * vi + a * vj
            Y[i], Y[j] = a[:, None] * Yi + (1 - a[:, None]) * Yj, (1 - a[:, None]) * Yi + a[:, None] * Yj
    Y = torch.stack(Y, 1)
    return Y.transpose(1, 2)


def set_loss(X):
    Q = torch.eye(X.shape[-1], dtype=X.dtype).expand_as(X)
    return nn.functional.binary_cross_entropy(X, Q, reduction="none").mean((-2, -1))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_newton_loss_through_a_relaxed_sorting_network(backend):
    """The demo's set-up: the Hessian of a sorting-network loss (relaxops' ops have no double backward)
    by central differences of its gradient, against autograd's Hessian of an independent pure-PyTorch network."""
    import relaxops
    from relaxops import _backend

    if _backend.unavailable_reason(backend, torch.device("cpu")) is not None:
        pytest.skip(f"backend {backend} not built")
    steep = 5.0

    def loss(s):
        _, X = relaxops.sort(s, "odd_even", "logistic", steepness=steep, return_matrix=True, backend=backend)
        return set_loss(X)

    s = torch.randn(6, 4, dtype=F64, generator=gen(0)) * 0.5
    torch.testing.assert_close(
        relaxops.sort(s, "odd_even", "logistic", steepness=steep, backend=backend)[1],
        odd_even_logistic_oracle(s, steep),
    )
    H_oracle = torch.func.vmap(torch.func.hessian(lambda v: set_loss(odd_even_logistic_oracle(v[None], steep))[0]))(s)
    g, H = autograd_grad_hess(loss, s, method="finite_difference")
    # central differences with h = eps^(1/3): truncation h^2 |f'''| / 6 + rounding eps |g| / h, both ~1e-10 here
    torch.testing.assert_close(H, H_oracle, rtol=1e-6, atol=1e-8)
    z = NewtonLoss(loss, variant="hessian", lam=0.1, hessian_method="finite_difference").target(s)
    C = H_oracle.mean(0) + 0.1 * torch.eye(4, dtype=F64)
    torch.testing.assert_close(z, s - torch.linalg.solve(C, g.T).T, rtol=1e-6, atol=1e-8)
    if backend == "cpu":  # the C++ kernel has no double backward: a clear error naming the fallbacks
        with pytest.raises(RuntimeError, match="twice-differentiable.*finite_difference"):
            NewtonLoss(loss, variant="hessian", lam=1.0).target(s)


def test_overflowing_curvature_and_nonfinite_smoothing_values_are_refused():
    y = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="overflows"):
        newton_target(y, torch.full((3, 2), 1e30), None, "fisher", 0.1)
    with pytest.raises(ValueError, match="NaN or inf"):
        smoothing_grad_hess(lambda z: 1 / (z - z).sum(-1), y, 0.1, 4)
