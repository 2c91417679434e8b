"""Smooth top-k SVM loss (Berrada, Zisserman and Kumar, "Smooth Loss Functions for Deep Top-k Classification",
ICLR 2018), the baseline that difftopk's ``SmoothTopKLoss`` / ``SmoothHardTopKLoss`` provide. Pure PyTorch: any
device, float32 and float64.

Reference note
--------------
Scores ``s`` of ``n`` classes, true label ``y``, ``k >= 1``, temperature ``tau > 0``, margin ``alpha``.
``s_{-y}`` are the ``n - 1`` other scores and ``v_[j]`` is the j-th largest entry of a vector ``v``.

Hard top-k SVM. The loss compares the best k-subset that misses ``y`` (each such subset pays the margin) with the
best k-subset that contains ``y``, both scored by their mean::

    l_k(s, y) = max(0, alpha + mean(top k of s_{-y}) - (s_y + sum(top k-1 of s_{-y})) / k)
              = max(0, alpha + ((s_{-y})_[k] - s_y) / k).

Smooth top-k SVM. Replace both maxima over subsets by ``tau * logsumexp(. / tau)``. With ``z_c = exp(s_c / (k tau))``
the exponential of a subset's scaled mean is the product of its ``z``, and a sum of such products over all
j-subsets is the elementary symmetric polynomial ``e_j``. Subsets missing ``y`` sum to ``exp(alpha/tau) e_k(z_{-y})``,
subsets holding ``y`` to ``z_y e_{k-1}(z_{-y})``, so::

    L_{k,tau}(s, y) = tau * log(1 + exp(alpha/tau) e_k(z_{-y}) / (z_y e_{k-1}(z_{-y})))
                    = tau * softplus(alpha/tau + log e_k - log e_{k-1} - s_y / (k tau)).

A ``tau``-logsumexp over a set lies between its maximum and that plus ``tau ln(size)``, so
``-tau ln C(n-1, k-1) <= L_{k,tau} - l_k <= tau ln C(n, k)``: the smooth loss tends to the hard one as ``tau -> 0``.

Evaluation. Sort the other scores, ``s_(1) >= ... >= s_(m)`` (``m = n - 1``), and keep every coefficient relative
to the product of the ``j`` largest variables::

    G_j = log(e_j(z) / (z_(1) ... z_(j))),  0 <= G_j <= ln C(m, j),
    log e_k - log e_{k-1} = s_(k) / (k tau) + G_k - G_{k-1}.

``G`` is built by a pairwise product tree of the factors ``(1 + z_c t)`` over contiguous runs of the sorted scores
(``ceil(log2 m)`` tensor steps, every pair and every sample at once, degrees truncated at ``k``). Merging a run ``L``
with the run ``R`` after it (``U = L + R``, every score of ``L`` >= every score of ``R``)::

    G^U_d = log sum_i exp(G^L_i + G^R_{d-i} + sum_{t < d-i} (R_t - U_{i+t}) / (k tau)),

where ``R_t``, ``U_t`` are the (t+1)-th largest scores of ``R`` and ``U``: the product of the top ``d`` of ``U`` divides
the top ``i`` of ``L`` and the top ``d - i`` of ``R``, and each ``R_t <= U_{i+t}`` (``i <= |L|``). So every exponent is
a sum of non-positive differences of two input scores, each rounded once: no cancellation and no absorption, whatever
the magnitudes (a log-space product of absolute coefficients, ``log e_j ~ s_(1) / (k tau) + ...``, loses every
smaller term once one score is ~1/eps times larger than the others). The gradient is autograd's through these
logsumexps, sums and the sort: convex weights and differences of bounded marginals, finite for finite scores and
accurate to rounding relative to its largest entry (no series, no cancellation-prone backward).

Non-finite scores are the limits of equal large scores: two equal infinities differ by 0 (they tie), an infinite
score differs from a finite one by an infinity. A ``-inf`` other class therefore drops out (``z = 0``) and a ``+inf``
one joins every subset that can hold it: with ``a`` other classes at ``+inf`` and ``a < k`` the loss is finite, the
loss whose subsets all hold them, ``tau * softplus(alpha/tau + log e_{k-a}(z_f) - log e_{k-1-a}(z_f) - s_y/(k tau))``
over the finite others ``z_f``; with ``a >= k`` it is ``+inf`` (unless ``s_y = +inf`` ties with them).

Hard switch. ``SmoothHardTopKLoss`` uses ``l_k`` for samples with ``s_[k] - s_[k+1] >= k tau ln(1000)`` (over all
``n`` scores): there the top-k set outweighs every subset that swaps one of its members out by a factor >= 1000,
so the smooth loss is close to ``l_k`` (difftopk switches there because its gradient is unreliable; ours is not,
the switch is kept for compatibility).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import _checks

__all__ = ["smooth_topk_svm_loss", "SmoothTopKLoss", "SmoothHardTopKLoss"]

REDUCTIONS = ("mean", "sum", "none")


def _difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a - b``, and 0 where both are the same infinity (equal infinite scores tie; gradient 0 there)."""
    return torch.where((a == b) & a.isinf(), 0.0, a - b)


def _logsumexp(v: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.logsumexp`` with gradient 0 rather than NaN where every term is ``-inf`` (result ``-inf``)."""
    none = (v == -math.inf).all(dim, keepdim=True)
    return torch.logsumexp(v.masked_fill(none, 0.0), dim).masked_fill(none.squeeze(dim), -math.inf)


def _merge(g_l, top_l, g_r, top_r, degree: int, scale: float) -> torch.Tensor:
    """``G`` of the union of adjacent sorted runs ``L`` >= ``R`` (module note), truncated at ``degree``.

    Args:
        g_l, g_r: ``[B, N, w + 1]`` ``G`` of the runs (``-inf`` above a run's size).
        top_l, top_r: ``[B, N, w]`` their ``w`` largest scores, descending (anything past a run's size).
        scale: ``k tau``, the divisor of the scores.
    Returns:
        ``[B, N, min(2 w, degree) + 1]``.
    """
    w = top_l.shape[-1]
    top_u = torch.cat((top_l, top_r), dim=-1)  # the largest of U: those of L first (L is full wherever R is not empty)
    # term (i, r), degree d = i + r, i, r = 0 .. w: exponent sum_{t < r} (R_t - U_{i+t}), non-positive terms
    gaps = _difference(top_r.unsqueeze(-2), top_u.unfold(-1, w, 1))  # [B, N, w + 1 (i), w (t)]
    shift = torch.nn.functional.pad(torch.cumsum(gaps, dim=-1) / scale, (1, 0), value=0.0)
    base = g_l.unsqueeze(-1) + g_r.unsqueeze(-2)
    # runs shorter than the degree: -inf (the padded scores past their size may give any shift, even NaN)
    term = torch.where(base == -math.inf, -math.inf, base + shift)
    # term (i, r) to column i + r: pad every row with w + 1 columns of -inf, flatten, re-cut into rows of 2 w + 1
    size = w + 1
    skewed = torch.nn.functional.pad(term, (0, size), value=-math.inf).flatten(-2)[..., : size * (2 * size - 1)]
    skewed = skewed.reshape(*term.shape[:-1], 2 * size - 1)
    return _logsumexp(skewed[..., : min(2 * w, degree) + 1], dim=-2)


def _log_normalized_elementary_symmetric(sorted_scores: torch.Tensor, degree: int, scale: float) -> torch.Tensor:
    """``G_j = log(e_j(z) / (z_(1) ... z_(j)))`` for ``j = 0 .. degree``, ``z = exp(scores / scale)``.

    Args:
        sorted_scores: ``[B, m]`` scores in descending order, ``m >= degree``.
        degree: highest degree computed.
        scale: ``k tau > 0``.
    Returns:
        ``[B, degree + 1]`` in the dtype and on the device of the scores.
    """
    # leaves: one score each, G = (log 1, log(z_c / z_c)) = (0, 0)
    g = torch.zeros_like(sorted_scores).unsqueeze(-1).expand(-1, -1, 2)
    top = sorted_scores.unsqueeze(-1)
    while g.shape[1] > 1:
        if g.shape[1] % 2:  # pair every run: an empty run (the polynomial 1) after the last one
            empty_g = torch.full_like(g[:, :1], -math.inf)
            empty_g[..., 0] = 0.0
            g = torch.cat((g, empty_g), dim=1)
            top = torch.cat((top, torch.zeros_like(top[:, :1])), dim=1)
        g = _merge(g[:, 0::2], top[:, 0::2], g[:, 1::2], top[:, 1::2], degree, scale)
        top = torch.cat((top[:, 0::2], top[:, 1::2]), dim=-1)[..., :degree]
    return g[:, 0]


def _hard_topk_svm(others: torch.Tensor, true: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """``max(0, alpha + (others_[k] - true) / k)`` per row; ``others`` ``[B, n-1]``, ``true`` ``[B]``."""
    kth = others.topk(k, dim=1).values[:, k - 1]
    return torch.clamp(alpha + (kth - true) / k, min=0.0)


def _smooth_topk_svm(others: torch.Tensor, true: torch.Tensor, k: int, tau: float, alpha: float) -> torch.Tensor:
    """``tau * softplus(alpha/tau + (s_(k) - s_y) / (k tau) + G_k - G_{k-1})`` per row (module note)."""
    ordered = others.sort(dim=1, descending=True).values
    g = _log_normalized_elementary_symmetric(ordered, k, k * tau)
    u = alpha / tau + _difference(ordered[:, k - 1], true) / (k * tau) + g[:, k] - g[:, k - 1]
    return tau * torch.logaddexp(torch.zeros_like(u), u)


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    needed = k + k // 5  # difftopk's limit (its backward needs degrees up to k + floor(1 + 0.2 k) - 1), kept
    if needed > n - 1:
        raise ValueError(
            f"k={k} is too large for {n} classes: difftopk's smooth top-k SVM loss needs k + floor(1 + 0.2 k) - 1 = "
            f"{needed} <= n - 1 = {n - 1}"
        )
    return k


def _check_inputs(scores, labels, k, tau, alpha, hard_threshold, reduction) -> tuple[int, float, float]:
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"scores must be float32 or float64, got {scores.dtype}")
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape [B, n], got shape {tuple(scores.shape)}")
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor of class indices, got {type(labels).__name__}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    if labels.shape != scores.shape[:1]:
        raise ValueError(f"labels must have shape [B] = {tuple(scores.shape[:1])}, got {tuple(labels.shape)}")
    if labels.device != scores.device:
        raise ValueError(f"labels must be on the device of scores ({scores.device}), got {labels.device}")
    n = scores.shape[1]
    # a value check (skipped while compiling: data-dependent; gather then checks the indices)
    if labels.numel() and not torch.compiler.is_compiling():
        if not _checks.on_host(labels):
            _checks.assert_on_device((labels >= 0) & (labels < n), f"labels must lie in [0, n) = [0, {n})")
        elif int(labels.min()) < 0 or int(labels.max()) >= n:
            raise ValueError(
                f"labels must lie in [0, n) = [0, {n}), got values in [{int(labels.min())}, {int(labels.max())}]"
            )
    _check_k(k, n)
    tau = _checks.positive_finite(tau, "tau")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not -math.inf < alpha < math.inf:
        raise ValueError(f"alpha must be a finite number, got {alpha!r}")
    if hard_threshold is not None:
        _checks.positive_finite(hard_threshold, "hard_threshold")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return n, tau, alpha


def smooth_topk_svm_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    k: int,
    tau: float = 1.0,
    alpha: float = 1.0,
    hard_threshold: float | None = 1000.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Smooth top-k SVM loss of Berrada et al. (see the module note for the math).

    Per sample, ``L = tau * log(1 + exp(alpha/tau) e_k(z_{-y}) / (z_y e_{k-1}(z_{-y})))`` with
    ``z_c = exp(s_c / (k tau))``. With ``hard_threshold`` set, samples whose k-th and (k+1)-th largest scores (over
    all ``n``) differ by at least ``k tau ln(hard_threshold)`` take the hard top-k SVM loss
    ``max(0, alpha + ((s_{-y})_[k] - s_y) / k)`` instead (difftopk's ``SmoothHardTopKLoss``); ``None`` keeps the
    smooth loss everywhere (difftopk's ``SmoothTopKLoss``).

    Args:
        scores: ``[B, n]`` float32 or float64 class scores, any device. Non-finite scores: a NaN makes its
            sample's loss and gradient NaN. Otherwise infinities are limits, equal infinities tying: a +inf true
            score gives loss 0, a -inf one loss +inf; a -inf score of another class drops out (gradient 0); ``a``
            other classes at +inf join every subset: for ``a < k`` the loss is the finite limit (the loss of the
            finite classes with subsets of size ``k - a`` scored as before, gradient 0 on the +inf scores), for
            ``a >= k`` it is +inf (0-gradient ties where the true score is +inf too).
        labels: ``[B]`` integer class indices in ``[0, n)``, on the device of ``scores``.
        k: top-k size, ``k >= 1`` with ``k + floor(1 + 0.2 k) - 1 <= n - 1``.
        tau: temperature ``> 0``.
        alpha: margin.
        hard_threshold: ratio ``> 0`` for the switch to the hard loss, or ``None`` for the smooth loss only.
        reduction: ``"mean"`` (sum of the per-sample losses divided by ``B``, as difftopk; NaN for ``B = 0``),
            ``"sum"`` or ``"none"``.

    Returns:
        The loss in the dtype of ``scores``: a scalar, or ``[B]`` for ``reduction="none"``. Differentiable with
        respect to ``scores``.
    """
    n, tau, alpha = _check_inputs(scores, labels, k, tau, alpha, hard_threshold, reduction)
    labels = labels.long()
    batch = scores.shape[0]
    # columns of the n - 1 other classes, in order: c + (c >= y)
    cols = torch.arange(n - 1, device=scores.device).expand(batch, n - 1)
    others = scores.gather(1, cols + (cols >= labels[:, None]).long())
    true = scores.gather(1, labels[:, None]).squeeze(1)

    if hard_threshold is None:
        losses = _smooth_topk_svm(others, true, k, tau, alpha)
    else:
        top = scores.detach().topk(k + 1, dim=1).values
        hard = (top[:, k - 1] - top[:, k]) >= k * tau * math.log(hard_threshold)
        # the smooth loss sees zeros on the hard rows, so that their unreliable gradients never meet the
        # selected ones (a where() alone would multiply them by 0: NaN stays NaN); no data-dependent shapes
        safe = hard[:, None]
        smooth = _smooth_topk_svm(others.masked_fill(safe, 0.0), true.masked_fill(hard, 0.0), k, tau, alpha)
        losses = torch.where(hard, _hard_topk_svm(others, true, k, alpha), smooth)

    if reduction == "none":
        return losses
    total = losses.sum()
    return total if reduction == "sum" else total / batch


class _TopKSVMLossBase(nn.Module):
    hard_threshold: float | None = None

    def __init__(self, num_classes: int, k: int, tau: float = 1.0, alpha: float = 1.0, reduction: str = "mean"):
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        self.num_classes = num_classes
        self.k = _check_k(k, num_classes)
        self.tau = _checks.positive_finite(tau, "tau")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number, got {alpha!r}")
        self.alpha = float(alpha)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    def forward(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Args: ``scores`` ``[B, num_classes]`` float32/float64, ``labels`` ``[B]`` integer in ``[0, num_classes)``.

        Returns: the loss (scalar, or ``[B]`` for ``reduction="none"``).
        """
        if isinstance(scores, torch.Tensor) and scores.dim() == 2 and scores.shape[1] != self.num_classes:
            raise ValueError(
                f"scores must have num_classes = {self.num_classes} columns, got shape {tuple(scores.shape)}"
            )
        return smooth_topk_svm_loss(scores, labels, self.k, self.tau, self.alpha, self.hard_threshold, self.reduction)

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, k={self.k}, tau={self.tau}, alpha={self.alpha}, "
            f"reduction={self.reduction!r}"
        )


class SmoothTopKLoss(_TopKSVMLossBase):
    """Smooth top-k SVM loss on every sample (difftopk's ``SmoothTopKLoss``).

    Args:
        num_classes: ``n``, the number of columns of the scores.
        k: top-k size, ``k + floor(1 + 0.2 k) - 1 <= n - 1``.
        tau: temperature ``> 0``.
        alpha: margin.
        reduction: ``"mean"`` (sum / B), ``"sum"`` or ``"none"``.

    ``forward(scores [B, n], labels [B])`` returns :func:`smooth_topk_svm_loss` with ``hard_threshold=None``.
    """


class SmoothHardTopKLoss(_TopKSVMLossBase):
    """Smooth top-k SVM loss with the hard loss on well-separated samples (difftopk's ``SmoothHardTopKLoss``).

    Samples with ``s_[k] - s_[k+1] >= k tau ln(1000)`` use ``max(0, alpha + ((s_{-y})_[k] - s_y) / k)``.

    Args:
        num_classes: ``n``, the number of columns of the scores.
        k: top-k size, ``k + floor(1 + 0.2 k) - 1 <= n - 1``.
        tau: temperature ``> 0``.
        alpha: margin.
        reduction: ``"mean"`` (sum / B), ``"sum"`` or ``"none"``.

    ``forward(scores [B, n], labels [B])`` returns :func:`smooth_topk_svm_loss` with ``hard_threshold=1000``.
    """

    hard_threshold = 1000.0
