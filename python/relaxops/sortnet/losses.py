"""Top-k classification loss (Petersen et al. 2022, "Differentiable Top-k Classification Learning").

With ``P[r, c]`` the relaxed probability that class ``c`` has rank ``r`` (1 = highest score) and ``P_K`` a
distribution over ``k = 1..K``, the loss is ``-log sum_k P_K(k) sum_{r <= k} P[r, y]``; summing over ``k``
first gives rank weights ``w_r = sum_{k >= r} P_K(k)``, so only the label's row of the ``[n, K]`` top-k matrix
is reduced: O(K) per sample after the top-k op. The top-1 term can come from the ranking (``top1_mode='sort'``),
from a softmax over the scores (``'sm'``, mixed into the probability) or from a separate softmax cross-entropy
(``'smce'``), as in the original ``difftopk`` code, including its smoothing ``log(q (1 - 2e-7) + 1e-7)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import _backend, _checks, _rows
from ..baselines.functional import neuralsort, softsort
from ..otsort.functional import ot_sort
from . import ops
from .functional import _exact_topk, topk_rows
from .networks import NETWORKS

TOP1_MODES = ("sm", "smce", "sort")
REDUCTIONS = ("mean", "sum", "none")
# Ranking methods: the comparator networks, the NeuralSort / SoftSort baselines and the optimal-transport sort.
METHODS = NETWORKS + ("neuralsort", "softsort", "ot_sort")
_SMOOTH = 1e-7


def check_p_k(p_k) -> torch.Tensor:
    """``p_k`` as a float64 vector ``[K]``: non-negative, summing to 1 (to 1e-4, as difftopk)."""
    if isinstance(p_k, torch.Tensor):
        t = p_k.detach().to("cpu", torch.float64)
    else:
        try:
            t = torch.tensor([float(v) for v in p_k], dtype=torch.float64)
        except (TypeError, ValueError):
            raise TypeError(f"p_k must be a sequence of numbers or a tensor, got {p_k!r}") from None
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"p_k must be a non-empty 1-D sequence (P_K(1), ..., P_K(K)), got shape {tuple(t.shape)}")
    _check_distribution(t, "p_k")
    return t


def _check_distribution(t: torch.Tensor, name: str) -> None:
    if torch.compiler.is_compiling():  # data-dependent: checked by eager calls (a module checks its p_k when built)
        return
    if not _checks.on_host(t):
        _checks.assert_on_device(torch.isfinite(t) & (t >= 0), f"{name} must be finite and non-negative")
        _checks.assert_on_device((t.sum(-1) - 1).abs() < 1e-4, f"{name} must sum to 1 (P_K is a distribution over k)")
        return
    if not torch.isfinite(t).all() or (t < 0).any():
        raise ValueError(f"{name} must be finite and non-negative, got {t.tolist()}")
    s = t.sum(-1)
    if ((s - 1).abs() >= 1e-4).any():
        raise ValueError(f"{name} must sum to 1 (P_K is a distribution over k), got sums {s.flatten().tolist()[:8]}")


def _check_options(method, top1_mode, reduction, inverse_temperature) -> float:
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if top1_mode not in TOP1_MODES:
        raise ValueError(f"top1_mode must be one of {list(TOP1_MODES)}, got {top1_mode!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    return _checks.positive_finite(inverse_temperature, "inverse_temperature")


def topk_cross_entropy(
    input: torch.Tensor,
    target: torch.Tensor,
    p_k,
    method: str = "splitter_selection",
    relaxation: str = "cauchy",
    inverse_temperature: float = 1.0,
    art_lambda: float = 0.25,
    m: int | None = None,
    top1_mode: str = "sm",
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    backend: str = "auto",
    *,
    lengths: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    hard: bool = False,
) -> torch.Tensor:
    """Differentiable top-k cross-entropy of class scores ``input [B, n]`` against labels ``target [B]``.

    Args:
        input: ``[B, n]`` scores (logits), float.
        target: ``[B]`` int64 class indices in ``[0, n)`` (or ``ignore_index``: such samples are skipped).
        p_k: ``P_K``: a sequence of ``K`` probabilities ``(P_K(1), ..., P_K(K))`` summing to 1, or a per-sample
            tensor ``[B, K]`` whose rows sum to 1.
        method: the differentiable ranking: ``"splitter_selection"`` (default), ``"bitonic"``,
            ``"odd_even"``, ``"bitonic_original"`` (relaxed networks, :func:`relaxops.topk`), ``"neuralsort"``
            or ``"softsort"`` (with ``tau = 1 / inverse_temperature``), or ``"ot_sort"`` (the thesis'
            SinkhornSort: ``n`` times the plan of :func:`relaxops.ot_sort` with ``epsilon = 1 /
            inverse_temperature``, its defaults otherwise; the scores are squashed to [0, 1] first, so useful
            inverse temperatures are about 100 to 1000).
        relaxation, art_lambda: of the networks, as in :func:`relaxops.sort`.
        inverse_temperature: steepness of the networks, ``1/tau`` of NeuralSort/SoftSort, ``1/epsilon`` of the
            optimal-transport sort (> 0).
        m: top-m preselection: rank only the true class and the ``m - 1`` highest other scores (true class
            first, then the others by descending score, as difftopk; requires ``K < m < n``); ``None`` ranks
            all ``n``. The top-1 softmax of ``'sm'``/``'smce'`` then also runs over these ``m`` scores.
        top1_mode: ``'sm'`` (P_K(1) times the softmax probability of the label, mixed in), ``'smce'``
            (P_K(1) times softmax cross-entropy, added) or ``'sort'`` (the ranking alone).
        weight: optional class weights ``[n]`` as in ``torch.nn.CrossEntropyLoss`` (per-sample factor
            ``weight[target]``; the mean divides by their sum).
        ignore_index, reduction: as in ``torch.nn.CrossEntropyLoss`` (``'mean'``, ``'sum'`` or ``'none'``).
        backend: kernel backend of the ranking op.
        lengths: int32/int64 ``[B]``, each in ``[0, n]``: sample b's real classes are ``0 .. lengths[b] - 1`` (padded
            class lists); or
        mask: bool ``[B, n]``, True on each sample's real classes. At most one; only with the network methods and
            ``m=None``. Each sample's loss is that of its real classes alone (the network for their number, the
            top-1 softmax over them, a k above their number counts all of them); the pads' scores are never read
            and get no gradient; ``target`` must name a real class (or ``ignore_index``).
        hard: the exact top-k attribution forward (the label's rank among the real classes, ties by index: the
            later index ranks higher), the relaxed one's gradient backward (straight-through); with the smoothing
            ``log(q (1 - 2e-7) + 1e-7)`` the loss stays finite (at most ``-log(1e-7) = 16.1``) when the label is
            outside every top k. The ``'sm'``/``'smce'`` softmax terms are unchanged.

    Returns:
        The loss: a scalar, or ``[B]`` for ``reduction='none'`` (0 for ignored samples); float32 for half
        inputs, else input's dtype.
    """
    _checks.floating_tensor(input, "input", min_dim=2)
    if input.dim() != 2:
        raise ValueError(f"input must be [batch, classes], got shape {tuple(input.shape)}")
    B, n = input.shape
    if not isinstance(target, torch.Tensor) or target.dtype not in (
        torch.int64,
        torch.int32,
        torch.int16,
        torch.uint8,
        torch.int8,
    ):
        raise TypeError(
            f"target must be an integer tensor of class indices, got {type(target).__name__}"
            + (f" of {target.dtype}" if isinstance(target, torch.Tensor) else "")
        )
    if target.shape != (B,):
        raise ValueError(f"target must have shape [{B}] (one class index per row of input), got {tuple(target.shape)}")
    inverse_temperature = _check_options(method, top1_mode, reduction, inverse_temperature)
    target = target.long()
    keep = target != ignore_index
    # data-dependent: checked by eager calls (in a compiled graph, torch.gather checks the indices itself)
    if not torch.compiler.is_compiling() and not _checks.on_host(target):
        _checks.assert_on_device(
            ~keep | ((target >= 0) & (target < n)),
            f"target must hold class indices in [0, {n}) (or ignore_index={ignore_index})",
        )
    elif not torch.compiler.is_compiling() and not ((target[keep] >= 0) & (target[keep] < n)).all():
        bad = target[keep][(target[keep] < 0) | (target[keep] >= n)]
        raise ValueError(
            f"target must hold class indices in [0, {n}) (or ignore_index={ignore_index}), got {bad[:5].tolist()}"
        )
    if isinstance(p_k, torch.Tensor) and p_k.dim() == 2:
        if p_k.shape[0] != B:
            raise ValueError(f"a per-sample p_k must have shape [{B}, K], got {tuple(p_k.shape)}")
        _check_distribution(p_k.detach().double(), "p_k")
        pk = p_k.detach().to(input.device, _checks.compute_dtype(input.dtype))
    else:
        pk = check_p_k(p_k).to(input.device, _checks.compute_dtype(input.dtype)).expand(B, -1)
    K = pk.shape[1]
    if m is not None:
        if isinstance(m, bool) or not isinstance(m, int) or not K < m < n:
            raise ValueError(f"m must be an integer with K < m < n = {K} < m < {n} (K = len(p_k)), got {m!r}")
    elif K > n:
        raise ValueError(f"p_k has K = {K} entries, more than the n = {n} classes")
    if weight is not None and (not isinstance(weight, torch.Tensor) or weight.shape != (n,)):
        raise ValueError(
            f"weight must be a tensor of shape [{n}] (one weight per class), got "
            f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}"
        )

    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    if hard and method not in NETWORKS:
        raise ValueError(f"hard=True takes the network methods {list(NETWORKS)}, got method={method!r}")
    padded = lengths is not None or mask is not None
    if padded and (method not in NETWORKS or m is not None):
        raise ValueError(
            f"lengths and mask take the network methods {list(NETWORKS)} with m=None, got method={method!r}, m={m!r}"
        )
    rows = _rows.rows(input, -1, lengths, mask)
    L = rows.lengths
    safe_target = torch.where(keep, target, 0)
    scores, label = rows.x.to(_checks.compute_dtype(input.dtype)), safe_target
    if padded:
        if rows.dest is not None:  # the label's place among the compacted real classes
            label = rows.dest.gather(1, safe_target[:, None]).squeeze(1)
        if not torch.compiler.is_compiling() and not _checks.on_host(label):
            _checks.assert_on_device(
                ~keep | (label < L), "target must name a real class of its sample (lengths / mask)"
            )
        elif not torch.compiler.is_compiling() and bool((keep & (label >= L)).any()):
            bad = target[keep & (label >= L)]
            raise ValueError(f"target must name a real class of its sample (lengths / mask), got {bad[:5].tolist()}")
    cpu = _cpu_kernels(input, backend) and not padded
    if m is not None:
        scores, label = _preselect(scores, safe_target, m, cpu)
    # the label's row of P_topk [B, n', K] (column K - r is rank r): [B, K], column j: rank K - j
    if method in ("neuralsort", "softsort"):
        fn = neuralsort if method == "neuralsort" else softsort
        P = fn(scores, 1.0 / inverse_temperature, k=K, backend=backend)
        p_label = P.gather(1, label.view(B, 1, 1).expand(B, 1, K)).squeeze(1)
    elif method == "ot_sort":
        plan = ot_sort(scores, 1.0 / inverse_temperature, return_plan=True, backend=backend)[1]  # [B, n', n']
        p_label = scores.shape[1] * plan.gather(1, label.view(B, 1, 1).expand(B, 1, plan.shape[2]))[:, 0, -K:]
    else:
        p_label = None
        if not hard or (torch.is_grad_enabled() and input.requires_grad):
            p_label = topk_rows(scores, K, label, method, relaxation, inverse_temperature, art_lambda, backend, L)
        if hard:
            kb = None if L is None else torch.clamp(L, max=K)
            exact = _exact_topk(scores, L, kb, K).gather(1, label.view(B, 1, 1).expand(B, 1, K)).squeeze(1)
            p_label = exact if p_label is None else _rows.straight_through(exact, p_label)
    if padded:  # the pads' scores take no part in the top-1 softmax terms
        scores = torch.where(torch.arange(scores.shape[1], device=scores.device) < L[:, None], scores, -math.inf)
    # rank weights w_r = sum_{k >= r} P_K(k), with the k = 1 term left out unless top1_mode == 'sort'
    pk_rank = pk if top1_mode == "sort" else torch.cat([torch.zeros_like(pk[:, :1]), pk[:, 1:]], 1)
    w = pk_rank.flip(1).cumsum(1).flip(1)  # [B, K], w[:, r - 1] for rank r
    q = (p_label * w.flip(1).to(p_label.dtype)).sum(1)
    p1 = pk[:, 0].to(q.dtype)
    if top1_mode == "sm":
        q = q + p1 * _label_softmax(scores, label, cpu)
    loss = -_log(q * (1 - 2 * _SMOOTH) + _SMOOTH, cpu)
    if top1_mode == "smce":
        loss = p1 * F.cross_entropy(scores, label, reduction="none") + pk[:, 1:].sum(1).to(q.dtype) * loss
    return _reduce(loss, keep, safe_target, weight, reduction)


def _cpu_kernels(input: torch.Tensor, backend: str) -> bool:
    """The loss's own CPU kernels run (eager calls on the cpu backend): they replace PyTorch ops that run in parallel
    on small tensors and stall on a shared CPU (docs/shared-cpu.md)."""
    return (
        input.device.type == "cpu"
        and _backend.resolve("sortnet", backend, input.device) == "cpu"
        and not torch.compiler.is_compiling()
    )


def _log(z: torch.Tensor, cpu: bool) -> torch.Tensor:
    """``log(z)`` for ``z`` in (0, 1]. With the CPU kernels, from ``log1p``: PyTorch's ``log`` runs in parallel from a
    few hundred elements and stalls on a shared CPU, ``log1p`` does not. ``z - 1`` is exact for ``z >= 0.5``, and
    ``1 / z - 1`` below has a relative error of about an ulp, so both branches are within ~1 ulp of ``log(z)``."""
    if not cpu:
        return torch.log(z)
    return torch.where(z >= 0.5, torch.log1p(z - 1), -torch.log1p(1 / z - 1))


def _label_softmax(scores: torch.Tensor, label: torch.Tensor, cpu: bool) -> torch.Tensor:
    """``softmax(scores)[b, label[b]]``, ``[B]`` (``cpu``: with the CPU kernel, ``_cpu_kernels``)."""
    if cpu:
        return ops.label_softmax(scores, label)
    return torch.softmax(scores, -1).gather(1, label.view(-1, 1)).squeeze(1)


def _preselect(input: torch.Tensor, target: torch.Tensor, m: int, cpu: bool):
    """``[s_y, the m - 1 highest other scores in descending order]`` and labels 0 (difftopk's order). With the CPU
    kernels (``cpu``) in one pass each way (``ops.preselect``; ties in index order)."""
    if cpu:
        return ops.preselect(input, target, m), torch.zeros_like(target)
    true = input.gather(1, target.unsqueeze(1))
    # the label masked out by -inf: a gather-based selection (no boolean indexing), the same values
    others = input.scatter(1, target.unsqueeze(1), float("-inf"))
    # a stable descending sort: tied scores are taken in index order, as the CPU kernel takes them (topk's order
    # among ties is unspecified, and the gradient goes to the scores taken)
    top = others.sort(dim=1, descending=True, stable=True).values[:, : m - 1]
    return torch.cat([true, top], 1), torch.zeros_like(target)


def _reduce(loss, keep, target, weight, reduction):
    w = keep.to(loss.dtype)
    if weight is not None:
        w = w * weight.to(loss.device, loss.dtype)[target]
    loss = loss * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


class TopKCrossEntropyLoss(torch.nn.Module):
    """Top-k classification loss, a drop-in for ``torch.nn.CrossEntropyLoss``: ``loss(input [B, n], target [B])``.

    ``method``, ``relaxation``, ``inverse_temperature``, ``art_lambda``, ``m``, ``top1_mode``, ``weight``,
    ``ignore_index``, ``reduction`` and ``backend`` are as in :func:`topk_cross_entropy`.

    Args:
        p_k: ``P_K`` as a sequence ``(P_K(1), ..., P_K(K))`` summing to 1, e.g. ``[.5, 0, 0, 0, .5]``
            (top-1 and top-5 equally); ``forward`` also takes a per-sample ``[B, K]`` tensor.
        hard: as in :func:`topk_cross_entropy` (keyword only).

    ``forward(input, target, p_k=None, *, lengths=None, mask=None)``: ``lengths`` / ``mask`` mark each sample's real
    classes, as in :func:`topk_cross_entropy`.
    """

    def __init__(
        self,
        p_k,
        method: str = "splitter_selection",
        relaxation: str = "cauchy",
        inverse_temperature: float = 1.0,
        art_lambda: float = 0.25,
        m: int | None = None,
        top1_mode: str = "sm",
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        backend: str = "auto",
        *,
        hard: bool = False,
    ):
        super().__init__()
        if not isinstance(hard, bool):
            raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
        self.hard = hard
        self.p_k = check_p_k(p_k).tolist()
        _check_options(method, top1_mode, reduction, inverse_temperature)
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m <= len(self.p_k)):
            raise ValueError(f"m must be an integer > K = len(p_k) = {len(self.p_k)}, got {m!r}")
        self.method, self.relaxation, self.art_lambda = method, relaxation, art_lambda
        self.inverse_temperature, self.m, self.top1_mode = inverse_temperature, m, top1_mode
        self.ignore_index, self.reduction, self.backend = ignore_index, reduction, backend
        self.register_buffer("weight", weight)

    def forward(
        self,
        input: torch.Tensor,
        target: torch.Tensor,
        p_k: torch.Tensor | None = None,
        *,
        lengths: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return topk_cross_entropy(
            input,
            target,
            self.p_k if p_k is None else p_k,
            self.method,
            self.relaxation,
            self.inverse_temperature,
            self.art_lambda,
            self.m,
            self.top1_mode,
            self.weight,
            self.ignore_index,
            self.reduction,
            self.backend,
            lengths=lengths,
            mask=mask,
            hard=self.hard,
        )

    def extra_repr(self) -> str:
        return (
            f"p_k={self.p_k}, method={self.method!r}, relaxation={self.relaxation!r}, "
            f"inverse_temperature={self.inverse_temperature}, m={self.m}, top1_mode={self.top1_mode!r}"
        )
