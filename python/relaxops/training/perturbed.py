"""Randomly perturbed structured predictors (docs/math/training.md §5 and §6.4/§6.5) and the perturbed optimizer
of Berthet et al. (2020), as autograd ops around any exact solver.

A *solver* is a callable that maximises a linear objective over a finite set of structures, batched over leading
dimensions: ``solver(theta[..., *S]) -> Y[..., *S]``, ``Y`` the 0/1 indicator of the maximiser (one-hot, k-hot,
permutation matrix). ``relaxops.training.solvers`` has ``argmax_onehot``, ``topk_khot``, ``sort_perm`` and
``assignment``; ``functools.partial(topk_khot, k=3)`` is a solver too. The ops call the solver on all noise
samples of a call at once (one ``[n_samples, B, *S]`` tensor), and once more on all loss-augmented problems in the
backward pass: never in a Python loop over samples.

Conventions: ``theta`` is ``[B, *S]`` (dimension 0 is the batch; the rest is the structure); the noise scale
``sigma`` is ``None`` (no noise: σ = 0), a number, a ``[B]`` tensor (one σ per instance, docs/math/training.md §5.4) or
a tensor that broadcasts to ``theta``; ``eps`` is the loss-perturbation weight ε of the paper (negative by default:
"towards better" loss-augmented inference, docs/math/training.md §5.5).
"""

from __future__ import annotations

import math

import torch

from .noise import check_noise_kind, noise_score, sample_noise

REDUCES = ("mean", "none")
GRAD_SCALES = ("inv_eps", "none")
EPS_MODES = ("absolute", "relative")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ADAPTIVE_EPS_FACTOR = 1.1  # the official code: |ε| grows by 10% while the loss-augmented solve changes nothing
_ADAPTIVE_EPS_MAX_STEPS = 200  # 1.1^200 ~ 2e8: gives up (gradient 0) instead of looping forever


# --- argument checks -----------------------------------------------------------------------------------------


def _check_theta(theta, name: str = "theta") -> None:
    if not isinstance(theta, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(theta).__name__}")
    if theta.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {theta.dtype}")
    if theta.dim() < 2:
        raise ValueError(
            f"{name} must be [B, *S] (a batch dimension and at least one structure dimension), "
            f"got shape {tuple(theta.shape)}"
        )


def _check_solver(solver) -> None:
    if not callable(solver):
        raise TypeError(f"solver must be a callable theta[..., *S] -> Y[..., *S], got {type(solver).__name__}")


def _check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _check_n_samples(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_samples must be an int >= 1, got {n!r}")
    return n


def _check_eps(eps, name: str = "eps") -> float:
    if isinstance(eps, torch.Tensor) and eps.numel() == 1:
        eps = eps.item()
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps == 0:
        raise ValueError(f"{name} must be a finite non-zero number, got {eps!r}")
    return float(eps)


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _sigma_view(sigma, theta: torch.Tensor):
    """sigma as a tensor that broadcasts to theta (``[B]`` becomes ``[B, 1, ...]``), or None for no noise."""
    if sigma is None:
        return None
    if isinstance(sigma, (int, float)) and not isinstance(sigma, bool):
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"sigma must be a finite number >= 0, a tensor or None, got {sigma!r}")
        return torch.tensor(float(sigma), dtype=theta.dtype, device=theta.device)
    if not isinstance(sigma, torch.Tensor):
        raise TypeError(f"sigma must be None, a number or a tensor, got {type(sigma).__name__}")
    if sigma.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"sigma must be a floating tensor, got {sigma.dtype}")
    if sigma.device != theta.device:
        raise ValueError(f"sigma is on {sigma.device} but theta is on {theta.device}")
    if (
        1 <= sigma.dim() < theta.dim() and sigma.shape[0] == theta.shape[0] and all(s == 1 for s in sigma.shape[1:])
    ):  # [B], [B, 1], ...: one sigma per instance
        sigma = sigma.reshape(theta.shape[0], *([1] * (theta.dim() - 1)))
    try:
        ok = torch.broadcast_shapes(sigma.shape, theta.shape) == theta.shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"sigma must be a scalar, [B] = [{theta.shape[0]}] or broadcastable to theta's shape "
            f"{tuple(theta.shape)}, got shape {tuple(sigma.shape)}"
        )
    if bool((sigma.detach() < 0).any()):
        raise ValueError("sigma must be >= 0 everywhere (use softplus upstream)")
    return sigma.to(theta.dtype)


def _solve(solver, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    y = solver(x)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"solver must return a tensor of its input's shape {tuple(x.shape)}, got {shape}")
    return y.to(dtype)


def _structure_dims(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.dim()))


def _forward_samples(solver, theta, sigma, n_samples, noise, generator):
    """Draws the noise and solves every sample in one solver call. Without noise (sigma None) the single solution
    is expanded to ``n_samples`` (all samples agree)."""
    if sigma is None:
        y = _solve(solver, theta.detach().unsqueeze(0), theta.dtype)
        theta_t = theta.detach().unsqueeze(0).expand(n_samples, *theta.shape)
        return None, theta_t, y.expand(n_samples, *theta.shape)
    gamma = sample_noise((n_samples, *theta.shape), noise, generator, dtype=theta.dtype, device=theta.device)
    theta_t = theta.detach() + sigma.detach() * gamma
    return gamma, theta_t, _solve(solver, theta_t, theta.dtype)


# --- perturbed_direct (docs/math/training.md §6.4) --------------------------------------------------------------------


class _PerturbedDirect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, theta, sigma, solver, eps, n_samples, noise, reduce, grad_scale, eps_mode, generator):
        n = 1 if (sigma is None and reduce == "mean") else n_samples
        gamma, theta_t, y = _forward_samples(solver, theta, sigma, n, noise, generator)
        ctx.solver, ctx.eps, ctx.reduce, ctx.grad_scale, ctx.eps_mode = solver, eps, reduce, grad_scale, eps_mode
        ctx.has_sigma = sigma is not None
        ctx.sigma_shape = sigma.shape if sigma is not None else None
        ctx.save_for_backward(theta_t, y, gamma)
        return y.mean(0) if reduce == "mean" else y.clone()

    @staticmethod
    def backward(ctx, grad_y):
        theta_t, y, gamma = ctx.saved_tensors
        n, eps = y.shape[0], ctx.eps
        g = grad_y.to(theta_t.dtype)
        g = g.unsqueeze(0) if ctx.reduce == "mean" else g  # [1 or n, B, *S]
        if ctx.eps_mode == "absolute":
            step = eps * g
            scale = 1.0 / eps if ctx.grad_scale == "inv_eps" else math.copysign(1.0, eps)
        else:  # per (sample, instance): eps · G · std(θ̃) / max|G|
            dims = _structure_dims(theta_t)
            std = theta_t.std(dim=dims, keepdim=True, correction=0)
            std = torch.where(std > 0, std, torch.ones_like(std))
            gmax = g.abs().amax(dim=dims, keepdim=True)
            ratio = torch.where(
                gmax > 0, std / torch.where(gmax > 0, gmax, torch.ones_like(gmax)), torch.zeros_like(gmax)
            )
            step = (eps * ratio) * g
            if ctx.grad_scale == "inv_eps":
                safe = torch.where(ratio > 0, ratio, torch.ones_like(ratio))
                scale = torch.where(ratio > 0, 1.0 / (eps * safe), torch.zeros_like(ratio))
            else:
                scale = math.copysign(1.0, eps)
        y_eps = _solve(ctx.solver, theta_t + step, theta_t.dtype)  # all loss-augmented problems in one call
        weight = 1.0 / n if ctx.reduce == "mean" else 1.0
        d = (y_eps - y) * (scale * weight)
        grad_theta = d.sum(0) if ctx.needs_input_grad[0] else None
        grad_sigma = None
        if ctx.has_sigma and ctx.needs_input_grad[1]:
            grad_sigma = (gamma * d).sum(0).sum_to_size(ctx.sigma_shape)
        return grad_theta, grad_sigma, None, None, None, None, None, None, None, None


def perturbed_direct(
    theta: torch.Tensor,
    sigma,
    solver,
    eps: float = -1.0,
    n_samples: int = 1,
    noise: str = "gumbel0",
    reduce: str = "mean",
    grad_scale: str = "inv_eps",
    eps_mode: str = "absolute",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Perturbed structured prediction with direct-loss gradients for the scores and the noise scale
    (docs/math/training.md §6.4).

    Forward: draws ``Γ ~ noise`` of shape ``[n_samples, B, *S]``, solves ``Y_s = solver(θ + σ Γ_s)`` for all
    samples in one call. ``sigma=None`` adds no noise (``Y = solver(θ)``; use it for evaluation).

    Backward with the incoming gradient ``G`` (the downstream loss is treated as linear in the structure, exact
    for linear losses): ``Y_ε,s = solver(θ̃_s + ε G_s)`` with the same noise (one more solver call),
    ``D_s = Y_ε,s − Y_s``, ``∂/∂θ = c w Σ_s D_s`` and ``∂/∂σ = c w Σ_s Σ_S Γ_s ⊙ D_s`` summed to sigma's shape,
    with ``w = 1/n_samples`` (reduce='mean') or 1 ('none') and ``c = 1/ε`` (grad_scale='inv_eps') or ``sign(ε)``
    ('none', the official code's direction without the 1/|ε| factor). For ``L = Σ_b ⟨t_b, Y_b⟩`` these are the
    estimators of docs/math/training.md §5.4 at finite ε.

    Args:
        theta: scores ``[B, *S]``, float16/bfloat16/float32/float64.
        sigma: None (no noise, σ = 0), a number >= 0, a ``[B]`` tensor (one σ per instance) or a tensor
            broadcastable to ``[B, *S]``; must be >= 0 (use softplus upstream). Its gradient has its shape.
        solver: exact maximiser ``[..., *S] -> [..., *S]`` returning 0/1 indicators (batched over leading dims).
        eps: loss-perturbation weight ε (finite, non-zero; negative = towards lower loss, as in the paper).
        n_samples: noise draws per instance.
        noise: a kind of ``relaxops.training.noise.NOISE_KINDS`` (default zero-mean Gumbel).
        reduce: 'mean' returns the average ``[B, *S]`` of the samples; 'none' returns all ``[n_samples, B, *S]``.
        grad_scale: 'inv_eps' (consistent estimator) or 'none' (direction only, the official code's convention).
        eps_mode: 'absolute' uses ``ε G``; 'relative' uses ``ε G_b std(θ̃_b) / max|G_b|`` per sample and instance
            (and, with 'inv_eps', divides by that effective ε, so the estimator stays consistent).
        generator: ``torch.Generator`` for the noise (same state, same result).

    Returns:
        ``[B, *S]`` (reduce='mean') or ``[n_samples, B, *S]`` (reduce='none'), theta's dtype.
    """
    _check_theta(theta)
    _check_solver(solver)
    eps = _check_eps(eps)
    n_samples = _check_n_samples(n_samples)
    check_noise_kind(noise)
    _check_choice(reduce, "reduce", REDUCES)
    _check_choice(grad_scale, "grad_scale", GRAD_SCALES)
    _check_choice(eps_mode, "eps_mode", EPS_MODES)
    _check_generator(generator)
    sigma = _sigma_view(sigma, theta)
    return _PerturbedDirect.apply(theta, sigma, solver, eps, n_samples, noise, reduce, grad_scale, eps_mode, generator)


# --- direct_loss (docs/math/training.md §6.5) and loss coefficients ---------------------------------------------------


class _DirectLoss(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, theta, sigma, t0, t, solver, eps, eps_state, n_samples, noise, adaptive_eps, grad_scale, generator
    ):
        n = 1 if sigma is None else n_samples
        gamma, theta_t, y = _forward_samples(solver, theta, sigma, n, noise, generator)
        dims = _structure_dims(y)
        per_sample = t0.unsqueeze(0) + (y * t.unsqueeze(0)).sum(dims)  # [n, B]
        loss = per_sample.mean(0)
        ctx.solver, ctx.eps, ctx.eps_state, ctx.adaptive = solver, eps, eps_state, adaptive_eps
        ctx.grad_scale, ctx.has_sigma = grad_scale, sigma is not None
        ctx.sigma_shape = sigma.shape if sigma is not None else None
        ctx.loss_positive = bool((loss.detach() > 0).any()) if adaptive_eps else False
        ctx.save_for_backward(theta_t, y, gamma, t)
        return loss

    @staticmethod
    def backward(ctx, u):
        theta_t, y, gamma, t = ctx.saved_tensors
        n, eps = y.shape[0], ctx.eps
        steps = 0
        while True:
            y_eps = _solve(ctx.solver, theta_t + eps * t.unsqueeze(0), theta_t.dtype)
            if not (ctx.adaptive and ctx.loss_positive) or steps >= _ADAPTIVE_EPS_MAX_STEPS:
                break
            if bool((y_eps != y).any()):
                break
            eps *= _ADAPTIVE_EPS_FACTOR
            steps += 1
        if ctx.eps_state is not None and steps:
            ctx.eps_state.fill_(eps)  # persists the grown |ε| for the next call (as the official code)
        scale = 1.0 / eps if ctx.grad_scale == "inv_eps" else math.copysign(1.0, eps)
        u = u.to(theta_t.dtype).reshape(1, -1, *([1] * (theta_t.dim() - 2)))
        d = (y_eps - y) * u * (scale / n)
        grad_theta = d.sum(0) if ctx.needs_input_grad[0] else None
        grad_sigma = None
        if ctx.has_sigma and ctx.needs_input_grad[1]:
            grad_sigma = (gamma * d).sum(0).sum_to_size(ctx.sigma_shape)
        grad_t0 = u.reshape(-1) if ctx.needs_input_grad[2] else None
        grad_t = (y.mean(0) * u[0]) if ctx.needs_input_grad[3] else None
        return grad_theta, grad_sigma, grad_t0, grad_t, None, None, None, None, None, None, None, None


def direct_loss(
    theta: torch.Tensor,
    sigma,
    target,
    loss_coeffs,
    solver,
    eps=-1.0,
    n_samples: int = 1,
    noise: str = "gumbel0",
    adaptive_eps: bool = False,
    grad_scale: str = "inv_eps",
    generator: torch.Generator | None = None,
    loss_context=None,
) -> torch.Tensor:
    """Direct loss minimisation for a task loss that is linear in the structure (docs/math/training.md §6.5; exactly the
    paper's estimator).

    The task loss is ``ℓ(target, ŷ) = t0 + ⟨t, φ(ŷ)⟩`` with ``(t0, t) = loss_coeffs(target, loss_context)``.
    Forward: ``Y_s = solver(θ + σ Γ_s)`` for ``n_samples`` noise draws (one solver call) and the per-instance
    estimate ``mean_s (t0 + ⟨t, Y_s⟩)`` (a value for logging; its true derivative is 0 almost everywhere).
    Backward with upstream ``u [B]``: ``Y_ε,s = solver(θ̃_s + ε t)`` with the same noise, ``D_s = Y_ε,s − Y_s``,
    ``∂/∂θ_b = u_b c mean_s D_s``, ``∂/∂σ = u_b c mean_s Σ_S Γ_s ⊙ D_s`` (summed to sigma's shape), ``c = 1/ε``
    (grad_scale='inv_eps') or ``sign(ε)`` ('none'). ``t0`` and ``t`` get their true gradients (``u``, ``u·E[Y]``).

    Args:
        theta: scores ``[B, *S]``.
        sigma: as in ``perturbed_direct`` (None: no noise, plain direct loss with σ = 0).
        target: the labels handed to ``loss_coeffs`` (unused when ``loss_coeffs`` is a pair).
        loss_coeffs: a callable ``(target, loss_context) -> (t0 [B], t [B, *S])`` or such a pair itself, e.g.
            ``matching_sort_coeffs(x, Y)``, ``knn_coeffs(dist, y)``, ``hamming_coeffs(Y)``.
        solver: exact maximiser, as in ``perturbed_direct``.
        eps: loss-perturbation weight ε (non-zero; negative by default, docs/math/training.md §5.5). A one-element
            tensor is updated in place when ``adaptive_eps`` grows it (so the growth persists across steps, as in the
            official code).
        n_samples: noise draws per instance.
        noise: noise kind (``NOISE_KINDS``).
        adaptive_eps: the official code's rule: while every ``D`` is 0 and the loss is > 0, ``ε ← 1.1 ε`` (at most 200
            times).
        grad_scale: 'inv_eps' or 'none' (the official code: no 1/|ε|).
        generator: ``torch.Generator`` for the noise.
        loss_context: second argument of a callable ``loss_coeffs``.

    Returns:
        ``[B]`` per-instance expected task-loss estimate, theta's dtype.
    """
    _check_theta(theta)
    _check_solver(solver)
    eps_state = None
    if adaptive_eps and isinstance(eps, torch.Tensor):
        if eps.numel() != 1 or not eps.is_floating_point():
            raise ValueError(f"eps as a tensor must have one floating element, got shape {tuple(eps.shape)}")
        eps_state = eps
    eps_value = _check_eps(eps)
    n_samples = _check_n_samples(n_samples)
    check_noise_kind(noise)
    _check_choice(grad_scale, "grad_scale", GRAD_SCALES)
    _check_generator(generator)
    if not isinstance(adaptive_eps, bool):
        raise TypeError(f"adaptive_eps must be a bool, got {adaptive_eps!r}")
    sigma = _sigma_view(sigma, theta)
    coeffs = loss_coeffs(target, loss_context) if callable(loss_coeffs) else loss_coeffs
    if not (isinstance(coeffs, (tuple, list)) and len(coeffs) == 2):
        raise TypeError("loss_coeffs must be a pair (t0 [B], t [B, *S]) or a callable returning one")
    t0, t = coeffs
    t0 = torch.as_tensor(t0, dtype=theta.dtype, device=theta.device)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"the loss coefficients t must be a tensor, got {type(t).__name__}")
    try:
        t_ok = torch.broadcast_shapes(t.shape, theta.shape) == theta.shape
        t0_ok = torch.broadcast_shapes(t0.shape, theta.shape[:1]) == theta.shape[:1]
    except RuntimeError:
        t_ok = t0_ok = False
    if not t_ok:
        raise ValueError(
            f"loss coefficients t must broadcast to theta's shape {tuple(theta.shape)}, got {tuple(t.shape)}"
        )
    if not t0_ok:
        raise ValueError(f"loss coefficient t0 must be a scalar or [B] = [{theta.shape[0]}], got {tuple(t0.shape)}")
    t = t.to(theta.dtype).expand_as(theta)
    t0 = t0.expand(theta.shape[0])
    return _DirectLoss.apply(
        theta, sigma, t0, t, solver, eps_value, eps_state, n_samples, noise, adaptive_eps, grad_scale, generator
    )


def matching_sort_coeffs(x: torch.Tensor, Y: torch.Tensor):
    """Linearised sorting loss of the paper and its official code (docs/math/training.md §5.6 (1)):
    ``ℓ(Y, Ŷ) = Σ_ij x_j² (Y_ij − Ŷ_ij)²`` for 0/1 matrices, as ``t0 = Σ_ij x_j² Y_ij`` and
    ``t_ij = x_j² (1 − 2 Y_ij)``; ``j`` is the column (sorted position) and ``x_j`` the j-th entry of the *unsorted*
    input, exactly as the official code does.

    Args: x ``[B, d]``, Y ``[B, d, d]`` (the true permutation matrix). Returns ``(t0 [B], t [B, d, d])``.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(Y, torch.Tensor):
        raise TypeError("x and Y must be tensors")
    if x.dim() != 2 or Y.shape != (*x.shape, x.shape[-1]):
        raise ValueError(f"x must be [B, d] and Y [B, d, d], got {tuple(x.shape)} and {tuple(Y.shape)}")
    w = (x * x).unsqueeze(-2).to(Y.dtype if Y.is_floating_point() else x.dtype)  # [B, 1, d]: x_j² by column
    Yf = Y.to(w.dtype)
    return (w * Yf).sum((-2, -1)), w * (1 - 2 * Yf)


def knn_coeffs(dist: torch.Tensor, y: torch.Tensor):
    """k-NN loss of the paper (docs/math/training.md §5.6 (2)): ``ℓ(y, ŷ) = −Σ_i dist_i y_i ŷ_i``: ``t0 = 0``,
    ``t_i = −dist_i y_i``.

    Args: dist ``[B, n]`` (candidate distances to the query), y ``[B, n]`` (0/1, the true neighbours).
    Returns ``(t0 [B], t [B, n])``.
    """
    if not isinstance(dist, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("dist and y must be tensors")
    if dist.dim() != 2 or dist.shape != y.shape:
        raise ValueError(f"dist and y must both be [B, n], got {tuple(dist.shape)} and {tuple(y.shape)}")
    t = -dist * y.to(dist.dtype)
    return torch.zeros(dist.shape[0], dtype=dist.dtype, device=dist.device), t


def hamming_coeffs(Y: torch.Tensor):
    """Hamming loss between 0/1 indicators, ``ℓ(Y, Ŷ) = Σ (Y − Ŷ)²``: ``t0 = Σ Y``, ``t = 1 − 2Y``.

    Args: Y ``[B, *S]`` 0/1. Returns ``(t0 [B], t [B, *S])``.
    """
    if not isinstance(Y, torch.Tensor) or Y.dim() < 2:
        raise ValueError("Y must be a [B, *S] tensor")
    Yf = Y if Y.is_floating_point() else Y.float()
    return Yf.sum(tuple(range(1, Y.dim()))), 1 - 2 * Yf


# --- the perturbed optimizer of Berthet et al. (2020) --------------------------------------------------------


class _PerturbedOptimizer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, theta, solver, sigma, n_samples, noise, generator):
        z = sample_noise((n_samples, *theta.shape), noise, generator, dtype=theta.dtype, device=theta.device)
        y = _solve(solver, theta.detach() + sigma * z, theta.dtype)
        ctx.sigma = sigma
        ctx.save_for_backward(y, noise_score(z, noise))
        return y.mean(0)

    @staticmethod
    def backward(ctx, grad_y):
        y, score = ctx.saved_tensors
        # Jacobian J = E[y*(θ + σZ) ∇ν(Z)ᵀ] / σ, so Jᵀ G = E[⟨G, y*_s⟩ ∇ν(Z_s)] / σ per instance
        inner = (grad_y.to(y.dtype).unsqueeze(0) * y).sum(_structure_dims(y), keepdim=True)
        return (inner * score).mean(0) / ctx.sigma, None, None, None, None, None


def _check_positive_sigma(sigma) -> float:
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (0 < sigma < math.inf):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    return float(sigma)


def perturbed(
    solver, sigma: float = 1.0, n_samples: int = 1, noise: str = "normal", generator: torch.Generator | None = None
):
    """The perturbed optimizer of Berthet et al. (2020): returns ``f(theta) = E[solver(θ + σ Z)]`` (Monte Carlo
    over ``n_samples`` draws, one solver call) whose backward pass is the score-function Jacobian estimator
    ``J = E[solver(θ + σZ) ∇ν(Z)ᵀ] / σ`` for the noise density ``∝ exp(−ν)`` (any of ``NOISE_KINDS``; normal:
    ``∇ν(z) = z``, Gumbel: ``1 − e^{−z}``). With Gumbel noise and ``argmax_onehot``, ``f(θ) = softmax(θ/σ)``.

    Args:
        solver: exact maximiser ``[..., *S] -> [..., *S]``.
        sigma: noise scale (a number > 0).
        n_samples: noise draws per call.
        noise: noise kind (default 'normal', as in Berthet et al.).
        generator: ``torch.Generator`` for the noise.

    Returns:
        A function ``theta [B, *S] -> [B, *S]``.
    """
    _check_solver(solver)
    sigma = _check_positive_sigma(sigma)
    n_samples = _check_n_samples(n_samples)
    check_noise_kind(noise)
    _check_generator(generator)

    def perturbed_solver(theta: torch.Tensor) -> torch.Tensor:
        _check_theta(theta)
        return _PerturbedOptimizer.apply(theta, solver, sigma, n_samples, noise, generator)

    return perturbed_solver


class _FenchelYoung(torch.autograd.Function):
    @staticmethod
    def forward(ctx, theta, y_true, solver, sigma, n_samples, noise, generator):
        z = sample_noise((n_samples, *theta.shape), noise, generator, dtype=theta.dtype, device=theta.device)
        theta_t = theta.detach() + sigma * z
        y = _solve(solver, theta_t, theta.dtype)
        dims = tuple(range(1, theta.dim()))
        value = (theta_t * y).sum(_structure_dims(y)).mean(0) - (theta.detach() * y_true).sum(dims)
        y_mean = y.mean(0)
        ctx.save_for_backward(y_mean, y_true, theta.detach())
        return value

    @staticmethod
    def backward(ctx, u):
        y_mean, y_true, theta = ctx.saved_tensors
        u = u.to(theta.dtype).reshape(-1, *([1] * (theta.dim() - 1)))
        grad_theta = (y_mean - y_true) * u if ctx.needs_input_grad[0] else None
        grad_y = -theta * u if ctx.needs_input_grad[1] else None
        return grad_theta, grad_y, None, None, None, None, None


def fenchel_young_loss(
    theta: torch.Tensor,
    y_true: torch.Tensor,
    solver,
    sigma: float = 1.0,
    n_samples: int = 1,
    noise: str = "normal",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Perturbed Fenchel-Young loss of Berthet et al. (2020), per instance:
    ``F_σ(θ) − ⟨θ, y_true⟩`` with ``F_σ(θ) = E[max_y ⟨θ + σZ, y⟩]`` estimated from ``n_samples`` draws (one solver
    call); the regulariser ``Ω(y_true)`` is a constant and left out, so the value can be negative. Gradient with
    respect to theta: ``E[solver(θ + σZ)] − y_true`` (Monte Carlo, no 1/σ factor, no score function).

    Args: theta ``[B, *S]``; y_true ``[B, *S]`` (the target structure, or any point of its convex hull);
    solver, sigma (> 0), n_samples, noise, generator as in ``perturbed``. Returns ``[B]``.
    """
    _check_theta(theta)
    if not isinstance(y_true, torch.Tensor) or y_true.shape != theta.shape:
        shape = tuple(y_true.shape) if isinstance(y_true, torch.Tensor) else type(y_true).__name__
        raise ValueError(f"y_true must be a tensor of theta's shape {tuple(theta.shape)}, got {shape}")
    _check_solver(solver)
    sigma = _check_positive_sigma(sigma)
    n_samples = _check_n_samples(n_samples)
    check_noise_kind(noise)
    _check_generator(generator)
    return _FenchelYoung.apply(theta, y_true.to(theta.dtype), solver, sigma, n_samples, noise, generator)
