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

Forward. ``e_j(z)`` is the coefficient of ``t^j`` in ``prod_c (1 + z_c t)``. The ``m = n - 1`` degree-1 factors are
multiplied pairwise in a tree (``ceil(log2 m)`` tensor steps, every pair and every sample at once), each product
truncated at degree ``K = k + p - 1``, ``p = floor(1 + k/5)``, and every coefficient is kept as its logarithm: a
product of coefficients is a sum of logs, a sum of products a logsumexp. No overflow for any score magnitude.

Backward. Since ``e_j(z) = e_j(z_{-c}) + z_c e_{j-1}(z_{-c})``::

    d log e_j / d log z_c = z_c e_{j-1}(z_{-c}) / e_j(z),      d log z_c / d s_c = 1 / (k tau).

Unrolling the same identity gives the alternating series
``e_{j-1}(z_{-c}) = sum_{t=0}^{j-1} (-z_c)^t e_{j-1-t}(z)``, evaluated as (log of the even terms) minus (log of the
odd terms). When ``z_c`` dominates, the two parts nearly cancel; where their log gap is below ``1e-5`` of the
magnitude of the odd part, the series is replaced by the expansion in ``1 / z_c`` obtained by solving the identity
for ``e_{j-1}(z_{-c})`` repeatedly::

    e_{j-1}(z_{-c}) = sum_{t>=0} (-1)^t e_{j+t}(z) / z_c^(t+1),    truncated after p terms,

whose terms shrink like powers of ``z_d / z_c`` in exactly that regime; the ``p - 1`` coefficients above degree
``k`` are computed for it. ``e_0 = 1`` has derivative 0.

Hard switch. ``SmoothHardTopKLoss`` uses ``l_k`` for samples with ``s_[k] - s_[k+1] >= k tau ln(1000)`` (over all
``n`` scores): there the top-k set outweighs every subset that swaps one of its members out by a factor >= 1000,
so the smooth loss is close to ``l_k``, while its gradient is numerically unreliable (difftopk's rationale).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

__all__ = ["smooth_topk_svm_loss", "SmoothTopKLoss", "SmoothHardTopKLoss"]

REDUCTIONS = ("mean", "sum", "none")
# Relative log-space gap under which the alternating series is considered cancelled (difftopk's threshold).
_UNSTABLE_GAP = 1e-5


def _positive_finite(v, name: str):
    # comparisons rather than math.isfinite: under torch.compile(dynamic=True) v may be a symbolic float
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return v


def _expansion_terms(k: int) -> int:
    """``p = floor(1 + 0.2 k)``: terms of the asymptotic expansion used in backward (coefficients up to k + p - 1)."""
    return 1 + k // 5


def _log1mexp(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(u))`` for ``u <= 0``, accurate at both ends (Maechler's switch at ``-ln 2``)."""
    near_zero = u > -math.log(2.0)
    return torch.where(near_zero, torch.log(-torch.expm1(u)), torch.log1p(-torch.exp(u)))


def _log_signed_sum(log_terms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``log(sum_t (-1)^t exp(log_terms[..., t]))`` and a mask of where it is cancellation-prone.

    The even and odd terms are summed apart (logsumexp); the result is ``pos + log(1 - exp(neg - pos))``.
    """
    pos = torch.logsumexp(log_terms[..., 0::2], dim=-1)
    if log_terms.shape[-1] > 1:
        neg = torch.logsumexp(log_terms[..., 1::2], dim=-1)
    else:
        neg = torch.full_like(pos, -math.inf)
    # Gap relative to the log magnitude; neg = -inf (no odd term) gives inf < inf: never cancelled.
    cancelled = (pos - neg) < _UNSTABLE_GAP * (neg.abs() + _UNSTABLE_GAP)
    return pos + _log1mexp(neg - pos), cancelled


def _log_poly_mul(a: torch.Tensor, b: torch.Tensor, degree: int) -> torch.Tensor:
    """Product of polynomials given by log coefficients, truncated at ``degree``.

    Args:
        a, b: ``[..., D + 1]`` log coefficients (``-inf`` for a zero coefficient), same shape.
        degree: highest degree kept.
    Returns:
        ``[..., min(2 D, degree) + 1]``: ``c_d = log sum_{i + j = d} exp(a_i + b_j)``.
    """
    d_in = a.shape[-1] - 1
    d_out = min(2 * d_in, degree)
    # row i: a_i + b_j placed at degree i + j (-inf elsewhere); padded slices rather than a gather, which
    # torch.compile's Inductor cannot lower here (indirect index of unknown range)
    rows = []
    for i in range(min(d_in, d_out) + 1):
        width = min(d_in, d_out - i) + 1
        rows.append(torch.nn.functional.pad(a[..., i : i + 1] + b[..., :width], (i, d_out + 1 - i - width),
                                            value=-math.inf))
    return torch.logsumexp(torch.stack(rows, dim=-2), dim=-2)


def _log_elementary_symmetric(log_z: torch.Tensor, degree: int) -> torch.Tensor:
    """``log e_j(z)`` for ``j = 0 .. degree`` by a pairwise product tree of the factors ``(1 + z_c t)`` in log space.

    Args:
        log_z: ``[B, m]`` logarithms of the positive variables ``z``; ``m >= degree``.
        degree: highest degree computed.
    Returns:
        ``[B, degree + 1]`` in the dtype and on the device of ``log_z``.
    """
    # [B, m, 2]: log coefficients (log 1, log z_c) of each factor 1 + z_c t
    polys = torch.stack((torch.zeros_like(log_z), log_z), dim=-1)
    while polys.shape[1] > 1:
        if polys.shape[1] % 2:  # pad with the constant polynomial 1 to pair every factor
            one = torch.full_like(polys[:, :1], -math.inf)
            one[..., 0] = 0.0
            polys = torch.cat((polys, one), dim=1)
        polys = _log_poly_mul(polys[:, 0::2], polys[:, 1::2], degree)
    return polys[:, 0]


def _dlog_e_dlog_z(log_z: torch.Tensor, log_e: torch.Tensor, j: int, p: int) -> torch.Tensor:
    """``d log e_j(z) / d log z_c = z_c e_{j-1}(z_{-c}) / e_j(z)`` for every ``c``, shape ``[B, m]``.

    ``log_e`` holds ``log e_i(z)`` for ``i = 0 .. j + p - 1`` (``[B, >= j + p]``), ``j >= 1``.
    """
    lz = log_z.unsqueeze(-1)
    # e_{j-1}(z_{-c}) = sum_{t<j} (-z_c)^t e_{j-1-t}(z); term t in log space: t log z_c + log e_{j-1-t}
    t = torch.arange(j, dtype=log_z.dtype, device=log_z.device)
    series, cancelled = _log_signed_sum(t * lz + log_e[:, None, :j].flip(-1))
    # where it cancels: e_{j-1}(z_{-c}) ~ sum_{t<p} (-1)^t e_{j+t}(z) / z_c^(t+1)
    t = torch.arange(p, dtype=log_z.dtype, device=log_z.device)
    expansion, _ = _log_signed_sum(log_e[:, None, j : j + p] - (t + 1) * lz)
    log_e_without_c = torch.where(cancelled, expansion, series)
    # z_c = 0 (a -inf score) has derivative 0 (its series is NaN: -inf * 0 in t log z_c)
    return torch.exp(log_z + log_e_without_c - log_e[:, j : j + 1]).masked_fill(log_z == -math.inf, 0.0)


class _LogTopkElementarySymmetric(torch.autograd.Function):
    """``(log e_{k-1}(z), log e_k(z))`` from ``log z``, with the cancellation-safe backward of the module note."""

    @staticmethod
    def forward(ctx, log_z: torch.Tensor, k: int) -> torch.Tensor:
        p = _expansion_terms(k)
        log_e = _log_elementary_symmetric(log_z, k + p - 1)
        ctx.save_for_backward(log_z, log_e)
        ctx.k, ctx.p = k, p
        return log_e[:, k - 1 : k + 1]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        log_z, log_e = ctx.saved_tensors
        k, p = ctx.k, ctx.p
        grad_log_z = grad[:, 1:2] * _dlog_e_dlog_z(log_z, log_e, k, p)
        if k > 1:  # log e_0 = 0 is constant
            grad_log_z = grad_log_z + grad[:, 0:1] * _dlog_e_dlog_z(log_z, log_e, k - 1, p)
        return grad_log_z, None


def _hard_topk_svm(others: torch.Tensor, true: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """``max(0, alpha + (others_[k] - true) / k)`` per row; ``others`` ``[B, n-1]``, ``true`` ``[B]``."""
    kth = others.topk(k, dim=1).values[:, k - 1]
    return torch.clamp(alpha + (kth - true) / k, min=0.0)


def _smooth_topk_svm(others: torch.Tensor, true: torch.Tensor, k: int, tau: float, alpha: float) -> torch.Tensor:
    """``tau * softplus(alpha/tau + log e_k(z_{-y}) - log e_{k-1}(z_{-y}) - log z_y)`` per row."""
    log_e = _LogTopkElementarySymmetric.apply(others / (k * tau), k)
    u = alpha / tau + log_e[:, 1] - log_e[:, 0] - true / (k * tau)
    return tau * torch.logaddexp(torch.zeros_like(u), u)


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    needed = k + _expansion_terms(k) - 1
    if needed > n - 1:
        raise ValueError(
            f"k={k} is too large for {n} classes: the smooth top-k SVM loss needs k + floor(1 + 0.2 k) - 1 = "
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
    if labels.numel() and not torch.compiler.is_compiling() and (int(labels.min()) < 0 or int(labels.max()) >= n):
        raise ValueError(
            f"labels must lie in [0, n) = [0, {n}), got values in [{int(labels.min())}, {int(labels.max())}]"
        )
    _check_k(k, n)
    tau = _positive_finite(tau, "tau")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not -math.inf < alpha < math.inf:
        raise ValueError(f"alpha must be a finite number, got {alpha!r}")
    if hard_threshold is not None:
        _positive_finite(hard_threshold, "hard_threshold")
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
            sample's loss and gradient NaN; a +inf true score gives loss 0, a -inf true score loss +inf (the
            limits), a -inf score of another class drops out (gradient 0); a +inf score of another class
            gives NaN (its limit, the loss of the remaining classes with k - 1, is not computed).
        labels: ``[B]`` integer class indices in ``[0, n)``, on the device of ``scores``.
        k: top-k size, ``k >= 1`` with ``k + floor(1 + 0.2 k) - 1 <= n - 1``.
        tau: temperature ``> 0``.
        alpha: margin.
        hard_threshold: ratio ``> 0`` for the switch to the hard loss, or ``None`` for the smooth loss only.
        reduction: ``"mean"`` (sum of the per-sample losses divided by ``B``, as difftopk; NaN for ``B = 0``),
            ``"sum"`` or ``"none"``.

    Returns:
        The loss in the dtype of ``scores``: a scalar, or ``[B]`` for ``reduction="none"``. Differentiable with
        respect to ``scores`` (once).
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
        self.tau = _positive_finite(tau, "tau")
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
            raise ValueError(f"scores must have num_classes = {self.num_classes} columns, got shape "
                             f"{tuple(scores.shape)}")
        return smooth_topk_svm_loss(scores, labels, self.k, self.tau, self.alpha, self.hard_threshold,
                                    self.reduction)

    def extra_repr(self) -> str:
        return (f"num_classes={self.num_classes}, k={self.k}, tau={self.tau}, alpha={self.alpha}, "
                f"reduction={self.reduction!r}")


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
