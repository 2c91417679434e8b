"""Newton losses (docs/math/training.md §2; thesis chapter 7): a Newton step of the loss in output space, then
first-order training of the network on the regression onto it.

Module layout of the training strategies: ``split.py`` (splitting backpropagation, :func:`split_loss`), this
module (Newton losses) and ``resgro.py`` (RESGRO).

Per sample n, with the gradient ``g_n`` and Hessian ``H_n`` of the loss w.r.t. the network output ``y_n``
(``[m]`` and ``[m, m]``, from the per-sample loss *without* batch averaging), the target is

    z_n = y_n - (C + lam I)^-1 g_n,   C = H_n ("elementwise_hessian"), mean_n H_n ("hessian")
                                       or mean_n g_n g_n^T ("fisher", the empirical Fisher),

and the network is trained on ``1/2 ||z_n - y_n||^2`` with ``z`` constant, whose gradient w.r.t. ``y_n`` is the
damped Newton direction ``(C + lam I)^-1 g_n`` (over N for the mean reduction).

Numerics (design choices, docs/math/training.md §2.2/§2.5, §7): the second-order algebra runs in float64 for float64
inputs and in float32 otherwise (half-precision networks included); ``C`` is symmetrised (``(C + C^T)/2``: Hessians and
Fisher matrices are symmetric, sampled estimates only approximately) and solved through its eigendecomposition
(``torch.linalg.eigh``, batched for the element-wise variant), which also measures how singular it is. A matrix
``C + lam I`` with an eigenvalue at most ``8 m eps max|eigenvalue|`` is singular (the softmax cross-entropy
Hessian always is, along the all-ones vector; the Fisher matrix is when N < m): by default that raises
:class:`SingularCurvatureError` naming ``lam`` and the fallbacks; ``singular="pinv"`` instead uses the
pseudo-inverse (the step in the null space is 0). A negative eigenvalue (an indefinite Hessian of a non-convex
loss: the step would not be a descent direction) raises unless ``eig_floor`` clamps the eigenvalues from below.
No path returns NaN or inf for finite inputs.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from .._checks import floating_tensor
from .split import check_reduction, regression_to_target

VARIANTS = ("hessian", "fisher", "elementwise_hessian")
LAM_MODES = ("absolute", "relative")
SINGULAR_MODES = ("raise", "pinv")
SMOOTHING_NOISES = ("gaussian", "logistic")


class SingularCurvatureError(ValueError):
    """The curvature matrix ``C + lam I`` of a Newton step is singular or indefinite (no finite descent step)."""


# --------------------------------------------------------------------------------------------------------------
# argument checks


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_variant(variant) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
    return variant


def _check_lam(lam, lam_mode, eig_floor, singular) -> None:
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0 <= lam < math.inf:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    if lam_mode not in LAM_MODES:
        raise ValueError(f"lam_mode must be one of {', '.join(map(repr, LAM_MODES))}, got {lam_mode!r}")
    if eig_floor is not None and (
        isinstance(eig_floor, bool) or not isinstance(eig_floor, (int, float)) or not 0 < eig_floor < math.inf
    ):
        raise ValueError(f"eig_floor must be None or a finite number > 0, got {eig_floor!r}")
    if singular not in SINGULAR_MODES:
        raise ValueError(f"singular must be one of {', '.join(map(repr, SINGULAR_MODES))}, got {singular!r}")


def _check_outputs(y, name="y") -> None:
    floating_tensor(y, name)
    if y.dim() != 2:
        raise ValueError(f"{name} must be [N, m] (one row per sample), got shape {tuple(y.shape)}")
    if y.shape[0] == 0 or y.shape[1] == 0:
        raise ValueError(f"{name} must have N >= 1 samples and m >= 1 outputs, got shape {tuple(y.shape)}")


def _check_like(t, name, shape) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


# --------------------------------------------------------------------------------------------------------------
# the Newton step


def _solve_symmetric(A: torch.Tensor, g: torch.Tensor, eig_floor, singular: str, what: str) -> torch.Tensor:
    """``A^-1 g`` per row of g ``[N, m]`` for a symmetric ``A`` ``[m, m]`` (shared) or ``[N, m, m]``."""
    m = A.shape[-1]
    w, V = torch.linalg.eigh(A)
    scale = w.abs().amax(-1, keepdim=True)
    tol = 8 * m * torch.finfo(A.dtype).eps * scale
    if eig_floor is not None:
        w = w.clamp_min(eig_floor)
        inv_w = 1 / w
    else:
        if bool((w < -tol).any()):
            raise SingularCurvatureError(
                f"{what} is indefinite (smallest eigenvalue {w.min().item():.3g}): the Newton step would not be a "
                "descent direction; raise lam above minus that eigenvalue or set eig_floor > 0"
            )
        small = w <= tol
        if bool(small.any()):
            if singular == "raise":
                raise SingularCurvatureError(
                    f"{what} is singular (smallest eigenvalue {w.min().item():.3g} against largest "
                    f"{scale.max().item():.3g}); use lam > 0 (Tikhonov damping), singular='pinv' (pseudo-inverse) "
                    "or eig_floor > 0"
                )
            inv_w = torch.where(small, torch.zeros_like(w), 1 / torch.where(small, torch.ones_like(w), w))
        else:
            inv_w = 1 / w
    if A.dim() == 2:  # shared: g V diag(1/w) V^T
        return ((g @ V) * inv_w) @ V.mT
    return torch.einsum("nij,nj->ni", V, torch.einsum("nji,nj->ni", V, g) * inv_w)


def curvature(g: torch.Tensor, H: torch.Tensor | None, variant: str) -> torch.Tensor:
    """The matrix C of the Newton step: ``H`` ``[N, m, m]`` (elementwise_hessian), ``H.mean(0)`` (hessian) or the
    empirical Fisher ``mean_n g_n g_n^T`` ``[m, m]`` (fisher), symmetrised."""
    if variant == "fisher":
        C = g.mT @ g / g.shape[0]
    elif variant == "hessian":
        C = H.mean(0)
    else:
        C = H
    return 0.5 * (C + C.mT)


def newton_target(
    y: torch.Tensor,
    g: torch.Tensor,
    H: torch.Tensor | None = None,
    variant: str = "hessian",
    lam: float = 1e-3,
    *,
    lam_mode: str = "absolute",
    eig_floor: float | None = None,
    singular: str = "raise",
) -> torch.Tensor:
    """The Newton-loss target ``z* = y - (C + lam I)^-1 g`` (docs/math/training.md §2.2), a pure function of y, g and H.

    Args:
        y: ``[N, m]`` network outputs (detached or not; no gradient flows into z*).
        g: ``[N, m]`` gradients of the per-sample loss w.r.t. ``y_n`` (not divided by N: docs/math/training.md §2.2's
            scaling convention; with mean-reduced gradients the Fisher step would be N times too large).
        H: ``[N, m, m]`` per-sample Hessians; ignored (may be None) for ``variant="fisher"``, required otherwise.
        variant: ``"hessian"`` (C = mean over the batch of H_n; the thesis's preferred, more stable than e.w.),
            ``"fisher"`` (C = empirical Fisher mean_n g_n g_n^T, needs no second derivatives) or
            ``"elementwise_hessian"`` (C = H_n per sample, N batched solves).
        lam: Tikhonov damping ``>= 0`` (not reported in the thesis; tune it, docs/math/training.md §8).
        lam_mode: ``"absolute"`` (lam as given) or ``"relative"`` (``lam * trace(C) / m``, per matrix).
        eig_floor: optional ``> 0``: eigenvalues of ``C + lam I`` are clamped to at least this (makes indefinite
            or singular matrices usable; off by default).
        singular: what a singular ``C + lam I`` does: ``"raise"`` (default, :class:`SingularCurvatureError`) or
            ``"pinv"`` (pseudo-inverse: the null-space component of the step is 0).

    Returns:
        ``z*`` ``[N, m]``, detached, in y's dtype (computed in float64 for float64 inputs, float32 otherwise).

    Raises:
        SingularCurvatureError: (a ValueError) for a singular (unless ``singular="pinv"``) or indefinite (unless
            ``eig_floor``) ``C + lam I``.
        ValueError, TypeError: for bad shapes, options or non-finite g/H.
    """
    _check_outputs(y)
    _check_variant(variant)
    _check_lam(lam, lam_mode, eig_floor, singular)
    N, m = y.shape
    floating_tensor(g, "g")
    _check_like(g, "g", (N, m))
    work = _work_dtype(y.dtype)
    g = g.detach().to(work)
    if variant != "fisher":
        if H is None:
            raise ValueError(f"H is required for variant={variant!r} (only 'fisher' needs no Hessian)")
        floating_tensor(H, "H")
        _check_like(H, "H", (N, m, m))
        H = H.detach().to(work)
        if not bool(torch.isfinite(H).all()):
            raise ValueError("H contains NaN or inf")
    if not bool(torch.isfinite(g).all()):
        raise ValueError("g contains NaN or inf")
    C = curvature(g, H, variant)
    eye = torch.eye(m, dtype=work, device=y.device)
    if lam_mode == "relative":
        damping = lam * torch.diagonal(C, dim1=-2, dim2=-1).sum(-1) / m
        A = C + damping[..., None, None] * eye
    else:
        A = C + lam * eye
    if not bool(torch.isfinite(A).all()):
        raise ValueError(
            f"the curvature matrix of variant={variant!r} overflows {work} (|g| or |H| too large); "
            "rescale the loss or compute in float64"
        )
    what = {
        "fisher": "the empirical Fisher",
        "hessian": "the batch-mean Hessian",
        "elementwise_hessian": "a per-sample Hessian",
    }[variant] + f" + lam I (lam={lam:g}, {lam_mode})"
    step = _solve_symmetric(A, g, eig_floor, singular, what)
    return (y.detach().to(work) - step).to(y.dtype)


# --------------------------------------------------------------------------------------------------------------
# closed-form gradients and Hessians (docs/math/training.md §2.3), per sample, un-averaged:
# (y [N, m], target) -> (g [N, m], H [N, m, m])


def _probabilities(target, y, name="target") -> torch.Tensor:
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(target).__name__}")
    if target.dim() == 1 and not target.is_floating_point():  # class indices
        if target.shape[0] != y.shape[0]:
            raise ValueError(f"{name} (class indices) must have shape ({y.shape[0]},), got {tuple(target.shape)}")
        if bool(((target < 0) | (target >= y.shape[1])).any()):
            raise ValueError(f"{name} class indices must be in [0, {y.shape[1]}), got values outside")
        return nn.functional.one_hot(target, y.shape[1]).to(y.dtype)
    floating_tensor(target, name)
    _check_like(target, name, y.shape)
    return target.to(y.dtype)


def smce_grad_hess(y: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax cross-entropy ``-sum_i p_i log softmax(y)_i``: ``g = q - p``, ``H = diag(q) - q q^T`` (q = softmax(y)).

    ``y``: ``[N, m]`` logits; ``target``: ``[N]`` integer class indices or ``[N, m]`` distributions (rows sum to 1).
    H is singular along the all-ones vector: use lam > 0 or ``singular="pinv"``.
    """
    _check_outputs(y)
    p = _probabilities(target, y)
    q = torch.softmax(y, -1)
    return q - p, torch.diag_embed(q) - q[:, :, None] * q[:, None, :]


def bce_grad_hess(y: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary cross-entropy on probabilities ``-sum_i p_i log y_i + (1 - p_i) log(1 - y_i)`` (derived in
    docs/math/training.md §2.3): ``g = (y - p) / (y (1 - y))``, ``H = diag(p / y^2 + (1 - p) / (1 - y)^2)``, with y
    clamped to [eps, 1 - eps].

    ``y``: ``[N, m]`` probabilities; ``target``: ``[N, m]`` probabilities p in [0, 1].
    """
    _check_outputs(y)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 0.5:
        raise ValueError(f"eps must be a number in (0, 0.5), got {eps!r}")
    p = _probabilities(target, y)
    y = y.clamp(eps, 1 - eps)
    g = (y - p) / (y * (1 - y))
    return g, torch.diag_embed(p / y.square() + (1 - p) / (1 - y).square())


def sbce_grad_hess(y: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary cross-entropy on logits ``BCE(sigmoid(y), p)``: ``g = sigmoid(y) - p``, ``H = diag(s - s^2)``.

    ``y``: ``[N, m]`` logits; ``target``: ``[N, m]`` probabilities p in [0, 1].
    """
    _check_outputs(y)
    p = _probabilities(target, y)
    s = torch.sigmoid(y)
    return s - p, torch.diag_embed(s * (1 - s))


def mse_grad_hess(y: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared error ``1/2 ||y - y_gt||^2``: ``g = y - y_gt``, ``H = I`` (so the Newton target is y_gt at lam = 0).

    ``y``, ``target``: ``[N, m]``.
    """
    _check_outputs(y)
    floating_tensor(target, "target")
    _check_like(target, "target", y.shape)
    eye = torch.eye(y.shape[1], dtype=y.dtype, device=y.device)
    return y - target.to(y.dtype), eye.expand(y.shape[0], -1, -1).clone()


GRAD_HESS = {"smce": smce_grad_hess, "bce": bce_grad_hess, "sbce": sbce_grad_hess, "mse": mse_grad_hess}


# --------------------------------------------------------------------------------------------------------------
# gradients and Hessians through autograd


HESSIAN_METHODS = ("autograd", "finite_difference")


def _loss_gradient(base_loss: Callable, y: torch.Tensor, targets, create_graph: bool):
    y0 = y.detach().requires_grad_(True)
    per_sample = base_loss(y0, *targets)
    if not isinstance(per_sample, torch.Tensor) or tuple(per_sample.shape) != (y.shape[0],):
        got = tuple(per_sample.shape) if isinstance(per_sample, torch.Tensor) else type(per_sample).__name__
        raise ValueError(f"base_loss must return the [N] = ({y.shape[0]},) per-sample losses (not averaged), got {got}")
    (g,) = torch.autograd.grad(per_sample.sum(), y0, create_graph=create_graph, allow_unused=True)
    return y0, (torch.zeros_like(y0) if g is None else g)


def autograd_grad_hess(
    base_loss: Callable, y: torch.Tensor, *targets, need_hessian: bool = True, method: str = "autograd"
):
    """``(g [N, m], H [N, m, m] or None)`` of ``base_loss(y, *targets)`` (which must return ``[N]`` per-sample,
    un-averaged losses) at ``y`` ``[N, m]``: g by one backward; H, one output coordinate k at a time (a loop over
    the m outputs, never over samples), by

    * ``method="autograd"``: double backward, ``H[:, k, :] = d g[:, k].sum() / dy``; needs a loss whose backward
      is itself differentiable *correctly* (ops with a custom backward may run but miss second-order terms:
      relaxops.sort's reference backend treats the relaxation's slope as a constant, so its double backward
      lacks f''; use finite differences there);
    * ``method="finite_difference"``: central differences of the autograd gradient,
      ``H[:, :, k] = (g(y + h e_k) - g(y - h e_k)) / 2h`` with ``h = eps^(1/3) max(1, |y_k|)`` per row, 2m extra
      backward passes, error O(h^2) (about 1e-10 relative in float64, 1e-5 in float32: use float64 y). Works with
      any first-order op (e.g. the C++ sorting-network kernels). Symmetrised.

    Both yield the per-sample Hessians when sample n's loss depends on row n only; for losses that couple rows
    they sum the off-diagonal blocks into the diagonal one (pass a ``grad_hess_fn`` there).
    """
    if method not in HESSIAN_METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, HESSIAN_METHODS))}, got {method!r}")
    with torch.enable_grad():
        y0, g = _loss_gradient(base_loss, y, targets, need_hessian and method == "autograd")
        if not need_hessian:
            return g.detach(), None
        if method == "finite_difference":
            h = torch.finfo(y0.dtype).eps ** (1 / 3) * y0.detach().abs().clamp_min(1.0)  # [N, m]
            cols = []
            for k in range(y.shape[1]):
                e = torch.zeros_like(y0)
                e[:, k] = h[:, k]
                plus = _loss_gradient(base_loss, y0 + e, targets, False)[1]
                minus = _loss_gradient(base_loss, y0 - e, targets, False)[1]
                cols.append((plus - minus) / (2 * h[:, k : k + 1]))
            H = torch.stack(cols, -1).detach()
            return g.detach(), 0.5 * (H + H.mT)
        if g.grad_fn is None:
            raise RuntimeError(
                "the gradient of base_loss does not depend on y through autograd: either the loss is "
                "linear in y (Hessian 0) or its backward is not differentiable; the Hessian variants "
                "need a twice-differentiable base_loss (use variant='fisher', "
                "hessian_method='finite_difference' or a grad_hess_fn)"
            )
        rows = []
        try:
            for k in range(y.shape[1]):
                (row,) = torch.autograd.grad(g[:, k].sum(), y0, retain_graph=True, allow_unused=True)
                rows.append(torch.zeros_like(y0) if row is None else row)
        except RuntimeError as e:
            raise RuntimeError(
                f"the Hessian variants need a twice-differentiable base_loss ({e}); use "
                "variant='fisher' (first derivatives only), hessian_method='finite_difference' "
                "(central differences of the gradient) or a grad_hess_fn"
            ) from e
    return g.detach(), torch.stack(rows, 1).detach()


class NewtonLoss(nn.Module):
    """Newton loss around a base loss (docs/math/training.md §2.5): ``1/2 ||z* - y||^2`` with
    ``z* = newton_target(...)`` constant.

    Args:
        base_loss: ``(y [N, m], *targets) -> [N]`` per-sample losses, **not averaged** over the batch
            (docs/math/training.md §2.2's scaling convention); differentiated by autograd (twice for the Hessian
            variants). May be None when ``grad_hess_fn`` is given.
        variant: ``"hessian"`` (default), ``"fisher"`` or ``"elementwise_hessian"`` (see :func:`newton_target`).
        lam, lam_mode, eig_floor, singular: damping and singular handling, as in :func:`newton_target`.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over the samples of ``1/2 ||z*_n - y_n||^2``.
        grad_hess_fn: optional closed form ``(y, *targets) -> (g [N, m], H [N, m, m] or None)``, or one of the
            names ``"smce"``, ``"bce"``, ``"sbce"``, ``"mse"`` (:data:`GRAD_HESS`); replaces autograd.
        hessian_method: how the Hessian variants differentiate ``base_loss`` twice: ``"autograd"`` (default,
            double backward) or ``"finite_difference"`` (central differences of the gradient; for ops without a
            correct double backward, such as relaxops' sorting networks); see :func:`autograd_grad_hess`.

    ``forward(y, *targets)``: ``y`` ``[N, m]`` (any float dtype; the second-order algebra runs in float32/64);
    returns the loss (scalar, or ``[N]`` for ``"none"``) whose gradient w.r.t. ``y_n`` is
    ``(C + lam I)^-1 g_n`` (over N for ``"mean"``). ``target(y, *targets)`` returns z* itself.
    """

    def __init__(
        self,
        base_loss: Callable | None = None,
        variant: str = "hessian",
        lam: float = 1e-3,
        lam_mode: str = "absolute",
        reduction: str = "mean",
        grad_hess_fn: Callable | str | None = None,
        *,
        eig_floor: float | None = None,
        singular: str = "raise",
        hessian_method: str = "autograd",
    ):
        super().__init__()
        if hessian_method not in HESSIAN_METHODS:
            raise ValueError(
                f"hessian_method must be one of {', '.join(map(repr, HESSIAN_METHODS))}, got {hessian_method!r}"
            )
        self.hessian_method = hessian_method
        _check_variant(variant)
        _check_lam(lam, lam_mode, eig_floor, singular)
        check_reduction(reduction)
        if isinstance(grad_hess_fn, str):
            if grad_hess_fn not in GRAD_HESS:
                raise ValueError(
                    f"grad_hess_fn must be a callable or one of {', '.join(map(repr, GRAD_HESS))}, got {grad_hess_fn!r}"
                )
            grad_hess_fn = GRAD_HESS[grad_hess_fn]
        if grad_hess_fn is not None and not callable(grad_hess_fn):
            raise TypeError(f"grad_hess_fn must be callable, a name or None, got {type(grad_hess_fn).__name__}")
        if base_loss is None and grad_hess_fn is None:
            raise ValueError("NewtonLoss needs base_loss (differentiated by autograd) or grad_hess_fn")
        if base_loss is not None and not callable(base_loss):
            raise TypeError(f"base_loss must be callable, got {type(base_loss).__name__}")
        self.base_loss, self.grad_hess_fn = base_loss, grad_hess_fn
        self.variant, self.lam, self.lam_mode, self.reduction = variant, lam, lam_mode, reduction
        self.eig_floor, self.singular = eig_floor, singular

    def grad_hess(self, y: torch.Tensor, *targets):
        """``(g, H or None)`` at y, from ``grad_hess_fn`` or autograd, in the working precision."""
        _check_outputs(y)
        y0 = y.detach().to(_work_dtype(y.dtype))
        if self.grad_hess_fn is not None:
            g, H = self.grad_hess_fn(y0, *targets)
            if self.variant != "fisher" and H is None:
                raise ValueError(f"grad_hess_fn returned no Hessian, which variant={self.variant!r} needs")
            return g, H
        return autograd_grad_hess(
            self.base_loss, y0, *targets, need_hessian=self.variant != "fisher", method=self.hessian_method
        )

    def target(self, y: torch.Tensor, *targets) -> torch.Tensor:
        """The Newton target z* ``[N, m]`` (detached)."""
        g, H = self.grad_hess(y, *targets)
        return newton_target(
            y.detach(),
            g,
            H,
            self.variant,
            self.lam,
            lam_mode=self.lam_mode,
            eig_floor=self.eig_floor,
            singular=self.singular,
        )

    def forward(self, y: torch.Tensor, *targets) -> torch.Tensor:
        return regression_to_target(y, self.target(y, *targets), self.reduction)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, lam={self.lam:g}, lam_mode={self.lam_mode!r}, reduction={self.reduction!r}"


# --------------------------------------------------------------------------------------------------------------
# estimators for losses that are only available through sampling (docs/math/training.md §2.4)


def _check_sampling(y, s, S, generator) -> None:
    _check_outputs(y)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < math.inf:
        raise ValueError(f"s (noise scale) must be a finite number > 0, got {s!r}")
    if isinstance(S, bool) or not isinstance(S, int) or S < 1:
        raise ValueError(f"S (number of samples) must be an int >= 1, got {S!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def smoothing_grad_hess(
    loss: Callable,
    y: torch.Tensor,
    s: float,
    S: int,
    noise: str = "gaussian",
    control_variate: bool = True,
    generator: torch.Generator | None = None,
):
    """Gradient and Hessian of the stochastically smoothed loss ``E_xi[loss(y + xi)]`` (docs/math/training.md §2.4),
    estimated with S
    noise samples: ``g = E[l(y + xi) grad nu(xi)]``, ``H = E[l(y + xi) (grad nu grad nu^T - hess nu)]`` for the noise
    density ``exp(-nu)``; with ``control_variate`` l(y + xi) is replaced by ``l(y + xi) - l(y)`` (both noises are
    symmetric, so the estimators stay unbiased).

    Args:
        loss: ``[..., N, m] -> [..., N]`` per-sample losses (a black box: may be discontinuous, need not be
            differentiable); called once, on ``[S (+1), N, m]`` (the current point first when control_variate).
        y: ``[N, m]`` point of evaluation.
        s: noise scale > 0; ``noise="gaussian"``: xi ~ N(0, s^2 I), grad nu = xi / s^2, hess nu = I / s^2;
            ``"logistic"``: i.i.d. logistic(0, s) coordinates, grad nu = tanh(xi / 2s) / s,
            hess nu = diag(sech^2(xi / 2s)) / (2 s^2).
        S: number of samples >= 1 (Newton losses need >= 10 for useful curvature, per the thesis).
        generator: optional torch.Generator (deterministic results).

    Returns:
        ``(g [N, m], H [N, m, m])`` in y's working dtype (float64 for float64, else float32); H is symmetric.
    """
    _check_sampling(y, s, S, generator)
    if noise not in SMOOTHING_NOISES:
        raise ValueError(f"noise must be one of {', '.join(map(repr, SMOOTHING_NOISES))}, got {noise!r}")
    work = _work_dtype(y.dtype)
    y = y.detach().to(work)
    shape = (S, *y.shape)
    if noise == "gaussian":
        xi = s * torch.randn(shape, generator=generator, dtype=work, device=y.device)
        d1 = xi / s**2
        d2 = torch.full_like(xi, 1 / s**2)
    else:
        tiny = torch.finfo(work).tiny
        u = torch.rand(shape, generator=generator, dtype=work, device=y.device).clamp(tiny, 1 - torch.finfo(work).eps)
        xi = s * (torch.log(u) - torch.log1p(-u))
        d1 = torch.tanh(xi / (2 * s)) / s
        d2 = 1 / (2 * s**2 * torch.cosh(xi / (2 * s)).square())
    points = torch.cat([y[None], y + xi]) if control_variate else y + xi
    with torch.no_grad():
        values = loss(points)
    if not isinstance(values, torch.Tensor) or tuple(values.shape) != tuple(points.shape[:2]):
        got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise ValueError(f"loss must map [K, N, m] to [K, N] = {tuple(points.shape[:2])} per-sample losses, got {got}")
    values = values.to(work)
    if not bool(torch.isfinite(values).all()):
        raise ValueError(
            "loss returned NaN or inf at some of the sampled points; the smoothing estimators need finite loss values"
        )
    if control_variate:
        values = values[1:] - values[:1]
    g = torch.einsum("sn,snm->nm", values, d1) / S
    H = torch.einsum("sn,sni,snj->nij", values, d1, d1) / S
    H = H - torch.diag_embed(torch.einsum("sn,snm->nm", values, d2) / S)
    return g, 0.5 * (H + H.mT)


def perturbed_argmax_fy(
    solver: Callable,
    y: torch.Tensor,
    w_gt: torch.Tensor,
    s: float,
    S: int,
    generator: torch.Generator | None = None,
    control_variate: bool = True,
):
    """Gradient and Hessian of the Fenchel-Young loss of a perturbed optimiser ``max_{w in C} <y, w>``
    (docs/math/training.md §2.4),
    from S Gaussian samples: ``grad = E[solver(y + s xi)] - w_gt`` and the Jacobian of the perturbed argmax (the
    loss Hessian) ``J = (1/s) E[solver(y + s xi) xi^T]``, xi ~ N(0, I); with ``control_variate`` the solution at y
    itself is subtracted inside J (``E[xi] = 0``: unbiased, far less variance when most samples keep the argmax).

    Args:
        solver: maps scores ``[..., N, m]`` to 0/1 (one-hot, k-hot, path, flattened permutation) tensors of the
            same shape, e.g. ``lambda t: one_hot(t.argmax(-1), m)``; called once on ``[S, N, m]`` (and on y).
        y: ``[N, m]`` scores; w_gt: ``[N, m]`` ground-truth structure.
        s: noise scale > 0; S: samples >= 1; generator: optional torch.Generator.

    Returns:
        ``(grad [N, m], J [N, m, m])``; J is the raw (not symmetrised) estimate (``newton_target`` uses its
        symmetric part), e.g. ``newton_target(y, grad, J, "hessian", lam)``.
    """
    _check_sampling(y, s, S, generator)
    if not callable(solver):
        raise TypeError(f"solver must be callable, got {type(solver).__name__}")
    floating_tensor(w_gt, "w_gt")
    _check_like(w_gt, "w_gt", y.shape)
    work = _work_dtype(y.dtype)
    y = y.detach().to(work)
    xi = torch.randn((S, *y.shape), generator=generator, dtype=work, device=y.device)
    with torch.no_grad():
        W = solver(y + s * xi)
        if not isinstance(W, torch.Tensor) or W.shape != xi.shape:
            got = tuple(W.shape) if isinstance(W, torch.Tensor) else type(W).__name__
            raise ValueError(f"solver must return a tensor of its input's shape {tuple(xi.shape)}, got {got}")
        W = W.to(work)
        grad = W.mean(0) - w_gt.to(work)
        if control_variate:
            W0 = solver(y[None]).to(work)
            W = W - W0
    J = torch.einsum("sni,snj->nij", W, xi) / (S * s)
    return grad, J
