"""Ranking losses on the relaxed sorting operators: correlation (Spearman, Pearson, Kendall), NDCG@k (NeuralNDCG,
ApproxNDCG) and a top-k recall, along any dimension of padded lists. Definitions: ``docs/ranking.md``.

Every loss takes ``scores`` (the prediction) and ``target`` / ``relevance`` of the same shape, works along ``dim``
and reads only the real entries of each list (``lengths`` or ``mask``, as allRank's padding indicator): a padded
batch gives, list by list, exactly the loss of the unpadded list alone, and no gradient reaches a pad. A loss is
``1 - metric`` per list. A list whose metric is undefined (a constant target, no relevant entry, fewer than two
entries for a correlation) has loss 0 and does not count in the mean: ``reduction="mean"`` averages the lists that
have a metric (0 when none has), ``"sum"`` adds them, ``"none"`` returns one loss per list (x's shape without
``dim``).
"""

from __future__ import annotations

import torch

from .. import _checks, _rows
from ..baselines import neuralsort, softsort
from ..otsort import ot_sort, ot_topk
from ..sortnet import sort, topk
from .functional import _call, _nonempty_rows, _row_lengths, _same_rows, _valid, _zero_pads, soft_ranks_of

REDUCTIONS = ("mean", "sum", "none")
GAINS = ("exp", "linear")


def _ot_matrix(xb, lengths, o):
    """The transport plan of ``ot_sort`` (rows summing to ``1 / L``) times ``L``: a relaxed permutation matrix."""
    _, plan = _call(ot_sort, xb, lengths, {**o, "return_plan": True})
    count = lengths if lengths is not None else torch.full((xb.shape[0],), xb.shape[-1], device=xb.device)
    return plan * count.to(plan.dtype).view(-1, 1, 1)


# name -> (rows [B, n], lengths, options) -> X [B, n, n], X[b, c, r] = weight of element c at ascending position r
MATRICES = {
    "neuralsort": lambda xb, lengths, o: _call(neuralsort, xb, lengths, o),
    "softsort": lambda xb, lengths, o: _call(softsort, xb, lengths, o),
    "sort": lambda xb, lengths, o: _call(sort, xb, lengths, o)[1],
    "ot_sort": _ot_matrix,
}


def _top_membership(op):
    def member(xb, lengths, k, o):
        return _call(op, xb, lengths, {**o, "k": k}).sum(-1)  # the columns of the k largest positions

    return member


# name -> (rows, lengths, k, options) -> [B, n] soft membership of each element in its row's top k
TOPK = {
    "topk": _top_membership(topk),
    "ot_topk": lambda xb, lengths, k, o: _call(ot_topk, xb, lengths, {**o, "k": k}).mask,
    "neuralsort": _top_membership(neuralsort),
    "softsort": _top_membership(softsort),
}


# --- shared front end --------------------------------------------------------------------------------------------


def _lists(scores, target, name, dim, lengths, mask):
    """``scores`` and ``target`` as rows: ``(Rows of scores, target [B, n] in scores' dtype, valid [B, n] | None,
    count [B])``."""
    _checks.floating_tensor(scores, "scores")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(target).__name__}")
    if target.shape != scores.shape:
        raise ValueError(f"{name} must have scores' shape {tuple(scores.shape)}, got {tuple(target.shape)}")
    if target.device != scores.device:
        raise ValueError(f"{name} must be on scores' device {scores.device}, got {target.device}")
    if target.dtype.is_complex:
        raise TypeError(f"{name} must be real, got {target.dtype}")
    r = _nonempty_rows(scores, "scores", dim, lengths, mask)
    tb = _same_rows(r, target.detach().to(scores.dtype))
    valid = r.valid()
    return r, _zero_pads(tb, valid), valid, _row_lengths(r)


def _reduce(loss: torch.Tensor, defined: torch.Tensor, r: _rows.Rows, reduction: str) -> torch.Tensor:
    loss = torch.where(defined, loss, loss.new_zeros(()))
    if reduction == "none":
        return loss.reshape(r.batch)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / defined.sum().clamp(min=1).to(loss.dtype)


def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")


def _safe(den: torch.Tensor) -> torch.Tensor:
    """A denominator with its zeros replaced by 1 (what it divides is 0 there): no inf, and no NaN in gradients."""
    return torch.where(den > 0, den, den.new_ones(()))


def _centred(a: torch.Tensor, valid, count):
    mean = _zero_pads(a, valid).sum(-1, keepdim=True) / count.clamp(min=1).unsqueeze(-1).to(a.dtype)
    return _zero_pads(a - mean, valid)


def _pearson(a, b, valid, count):
    """Pearson correlation of the real entries of each row, and whether it is defined (b not constant, L >= 2); a
    constant ``a`` correlates 0."""
    ca, cb = _centred(a, valid, count), _centred(b, valid, count)
    va, vb = (ca * ca).sum(-1), (cb * cb).sum(-1)
    corr = (ca * cb).sum(-1) / _safe(va).sqrt() / _safe(vb).sqrt()
    return corr, (vb > 0) & (count >= 2)


def average_ranks(tb: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Exact 1-based ascending ranks ``[B, n]`` of the real entries of each row, ties sharing the mean of their
    ranks (as ``scipy.stats.rankdata``); 0 on the pads. O(n log n) per row."""
    valid = _valid(tb, lengths)
    key = tb if valid is None else torch.where(valid, tb, tb.new_full((), float("inf")))
    s = torch.sort(key, dim=-1).values.contiguous()
    q = _zero_pads(tb, valid).contiguous()
    lower = torch.searchsorted(s, q)
    upper = torch.searchsorted(s, q, right=True)
    if lengths is not None:
        upper = upper.minimum(lengths.unsqueeze(-1))  # a real +inf ties with its row's infinities, not the pads'
    return _zero_pads((lower + upper + 1).to(tb.dtype) / 2, valid)


# --- correlations ------------------------------------------------------------------------------------------------


def spearman_loss(
    scores: torch.Tensor,
    target: torch.Tensor,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    ranker: str = "soft_rank",
    reduction: str = "mean",
    **options,
) -> torch.Tensor:
    """``1 - rho``: Spearman's rank correlation between the soft ranks of ``scores`` (by ``ranker``) and the exact
    ranks of ``target`` (ties sharing their mean rank), i.e. the Pearson correlation of the two rank vectors of each
    list. With exact ranks (a small regularisation, or ``hard=True``) ``rho`` is ``scipy.stats.spearmanr``'s.

    Args:
        scores: ``[...]`` floating, the prediction (differentiated).
        target: scores' shape, real values (not differentiated).
        dim, lengths, mask: the lists (see the module docstring).
        ranker: ``"soft_rank"`` (default), ``"rank"``, ``"ot_rank"``, ``"neuralsort"``, ``"softsort"`` (expected
            positions under their matrices) or ``"pairwise"`` (``1 + sum_j sigmoid((s_i - s_j) / temperature)``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        **options: passed to the ranker (e.g. ``regularization_strength=``, ``hard=``, ``backend=``).
    """
    _check_reduction(reduction)
    r, tb, valid, count = _lists(scores, target, "target", dim, lengths, mask)
    ranks = soft_ranks_of(r.x, r.lengths, ranker, options)
    rho, defined = _pearson(ranks, average_ranks(tb, r.lengths), valid, count)
    return _reduce(1 - rho, defined, r, reduction)


def pearson_loss(
    scores: torch.Tensor, target: torch.Tensor, *, dim: int = -1, lengths=None, mask=None, reduction: str = "mean"
) -> torch.Tensor:
    """``1 - r``: the Pearson correlation of ``scores`` and ``target`` over the real entries of each list
    (``scipy.stats.pearsonr``'s ``r``; no sorting operator). Arguments as :func:`spearman_loss`."""
    _check_reduction(reduction)
    r, tb, valid, count = _lists(scores, target, "target", dim, lengths, mask)
    corr, defined = _pearson(_zero_pads(r.x, valid), tb, valid, count)
    return _reduce(1 - corr, defined, r, reduction)


def kendall_loss(
    scores: torch.Tensor,
    target: torch.Tensor,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    temperature: float = 0.1,
    reduction: str = "mean",
) -> torch.Tensor:
    """``1 - tau``: a soft Kendall tau-b over the pairs of real entries of each list.

    With ``a_ij = tanh((s_i - s_j) / temperature)`` (the soft sign of a score difference), ``b_ij = sign(y_i - y_j)``
    and the sums over the pairs ``i < j``: ``tau = sum a b / sqrt((n0 - n1) (n0 - n2))``, ``n0 = L (L - 1) / 2``, ``n2``
    the pairs tied in the target, ``n1 = sum (1 - |a|)`` the soft count of pairs tied in the scores. As the
    temperature goes to 0 (``a -> sign``) it is ``scipy.stats.kendalltau``'s tau-b; ``|tau| <= 1`` at every
    temperature. O(L^2) time and memory per list.

    Args:
        temperature: > 0, the scale of score differences that count as ordered.
        other arguments: as :func:`spearman_loss`.
    """
    _check_reduction(reduction)
    temperature = _checks.positive_finite(temperature, "temperature")
    r, tb, valid, count = _lists(scores, target, "target", dim, lengths, mask)
    x = _zero_pads(r.x, valid)
    pair = ~torch.eye(r.n, dtype=torch.bool, device=x.device)  # ordered pairs: every sum counts each pair twice
    if valid is not None:
        pair = pair & valid.unsqueeze(-1) & valid.unsqueeze(-2)
    zero = x.new_zeros(())
    a = torch.tanh((x.unsqueeze(-1) - x.unsqueeze(-2)) / temperature)
    b = torch.sign(tb.unsqueeze(-1) - tb.unsqueeze(-2))
    num = torch.where(pair, a * b, zero).sum((-2, -1)) / 2
    n0 = (count * (count - 1)).to(x.dtype) / 2
    n1 = torch.where(pair, 1 - a.abs(), zero).sum((-2, -1)) / 2
    n2 = (pair & (b == 0)).sum((-2, -1)).to(x.dtype) / 2
    tau = num / _safe(n0 - n1).sqrt() / _safe(n0 - n2).sqrt()
    return _reduce(1 - tau, n0 - n2 > 0, r, reduction)


# --- NDCG --------------------------------------------------------------------------------------------------------


def _cutoffs(k, r: _rows.Rows, count: torch.Tensor):
    """``k`` (an int >= 1, or an int tensor of scores' shape without ``dim``, each >= 1) as ``(k_b [B], k for the
    top-k operators)``: ``k_b = min(k, L_b)`` (a list shorter than k counts all its entries), the operators' k
    capped at n."""
    if isinstance(k, torch.Tensor):
        if k.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"k must be an int or an int32/int64 tensor, got a {k.dtype} tensor")
        if k.shape != r.batch:
            raise ValueError(
                f"k as a tensor must have scores' shape without dim, {tuple(r.batch)}, got {tuple(k.shape)}"
            )
        if k.device != r.x.device:
            raise ValueError(f"k must be on scores' device {r.x.device}, got {k.device}")
        kb = k.reshape(-1).to(torch.int64)
        if kb.numel() and not _checks.on_host(kb):
            _checks.assert_on_device(kb >= 1, "k must be >= 1")
        elif kb.numel() and int(kb.min()) < 1:
            raise ValueError(f"k must be >= 1, found {int(kb.min())}")
        return kb.minimum(count), kb.clamp(max=max(r.n, 1))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 or a tensor of them, got {k!r}")
    return count.clamp(max=k), min(k, max(r.n, 1))


def _gains(rel: torch.Tensor, gain: str) -> torch.Tensor:
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {list(GAINS)}, got {gain!r}")
    return torch.exp2(rel) - 1 if gain == "exp" else rel


def _ndcg_setup(scores, relevance, k, dim, lengths, mask, gain, reduction):
    """``(Rows, gains [B, n] (0 on pads), valid, count, k_b [B] (the cut-off of each list), discounts [n],
    ideal DCG@k [B])``."""
    _check_reduction(reduction)
    r, rel, valid, count = _lists(scores, relevance, "relevance", dim, lengths, mask)
    if not torch.compiler.is_compiling():  # NaN fails too
        if not _checks.on_host(rel):
            _checks.assert_on_device(rel >= 0, "relevance must be >= 0 (and not NaN) on the real entries")
        elif not bool((rel >= 0).all()):
            raise ValueError("relevance must be >= 0 (and not NaN) on the real entries")
    g = _zero_pads(_gains(rel, gain), valid)
    kb = count if k is None else _cutoffs(k, r, count)[0]
    pos = torch.arange(r.n, device=g.device)
    disc = 1 / torch.log2(pos.to(g.dtype) + 2)
    cut = pos < kb.unsqueeze(-1)  # [B, n]: the positions counted
    ideal = (torch.sort(g, dim=-1, descending=True).values * disc * cut).sum(-1)
    return r, g, valid, count, kb, disc, cut, ideal


def ndcg(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    k=None,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    gain: str = "exp",
) -> torch.Tensor:
    """The exact NDCG@k of each list (no gradient): the real entries sorted by descending score (ties by index, as
    ``torch.sort(stable=True)``), ``DCG@k = sum_{r < k} gain(rel_(r)) / log2(r + 2)`` divided by the ideal DCG@k (the
    same sum with the entries sorted by relevance); 0 for a list without a relevant entry.

    Args:
        scores, relevance: ``[...]``, relevance >= 0 (graded).
        k: the cut-off: None (the whole list), an int >= 1, or an int tensor of scores' shape without ``dim`` (one
            per list); a list shorter than its k counts all its entries.
        gain: ``"exp"`` (``2^rel - 1``, default) or ``"linear"`` (``rel``).

    Returns:
        scores' shape without ``dim``.
    """
    with torch.no_grad():
        r, g, valid, count, kb, disc, cut, ideal = _ndcg_setup(scores, relevance, k, dim, lengths, mask, gain, "none")
        perm = _rows.exact_order(r.x, r.lengths, descending=True)
        dcg = (g.gather(-1, perm) * disc * cut).sum(-1)
        out = dcg / _safe(ideal)
        return out.reshape(r.batch)


class _Sinkhorn(torch.autograd.Function):
    """Alternate normalisation of the elements' rows and the positions' columns of ``X [B, n, n]`` (columns last, so
    each position's weights sum to 1), each list stopping on its own once every element's row sums to 1 within
    ``tolerance`` (a list's result does not depend on the others in the batch); pads' rows and columns stay 0.

    Each half-step ``Z = W / s`` (``s`` the sums of W along one axis, a zero sum taken as 1) keeps only ``Z`` and
    ``s`` for the backward, ``dW = (dZ - sum(dZ * Z)) / s`` along that axis; a list already stopped passes its
    gradient through unchanged. The row sums that test an iteration are those the next one divides by."""

    @staticmethod
    def forward(ctx, X, valid, iterations: int, tolerance: float):
        done = torch.zeros(X.shape[0], dtype=torch.bool, device=X.device)
        steps = []  # (dim, frozen lists or None) per half-step; its Z and s in ctx.saved_tensors
        saved = []
        for i in range(iterations + 1):
            rows = X.sum(-1, keepdim=True)
            if i > 0:
                done = done | (_zero_pads((rows.squeeze(-1) - 1).abs(), valid).amax(-1) < tolerance)
                if i == iterations or bool(done.all()):
                    break
            frozen = done.clone() if bool(done.any()) else None
            for dim in (-1, -2):
                sums = _safe(rows if dim == -1 else X.sum(-2, keepdim=True))
                Z = X / sums
                if frozen is not None:
                    Z = torch.where(frozen.view(-1, 1, 1), X, Z)
                steps.append((dim, frozen))
                saved += [Z, sums]
                X = Z
        ctx.steps = steps
        ctx.save_for_backward(*saved)
        return X

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        for t in range(len(ctx.steps) - 1, -1, -1):
            dim, frozen = ctx.steps[t]
            Z, sums = saved[2 * t], saved[2 * t + 1]
            g = (grad - (grad * Z).sum(dim, keepdim=True)) / sums
            grad = g if frozen is None else torch.where(frozen.view(-1, 1, 1), grad, g)
        return grad, None, None, None


def neural_ndcg_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    k=None,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    method: str = "neuralsort",
    sinkhorn_iterations: int = 50,
    sinkhorn_tolerance: float = 1e-6,
    gain: str = "exp",
    reduction: str = "mean",
    **options,
) -> torch.Tensor:
    """``1 - NeuralNDCG@k`` (Pobrotyn & Bialobrzeski 2021): NDCG@k with the sort replaced by a relaxed permutation
    matrix of the descending scores.

    ``X = method(-scores)`` (element ``c``, position ``r``: the ``r``-th largest), made doubly stochastic by
    Sinkhorn scaling (alternately each element's weights, then each position's, to sum 1; at most
    ``sinkhorn_iterations``, until the elements' sums are within ``sinkhorn_tolerance`` of 1; 0 iterations keep
    ``X``), gives each position the gain ``sum_c X[c, r] gain(rel_c)``; their discounted sum over the first ``k``
    positions, divided by the exact ideal DCG@k, is NeuralNDCG@k. With NeuralSort and the defaults it is allRank's
    ``neuralNDCG`` (``temperature`` is NeuralSort's ``tau=``); as the relaxation sharpens (or with ``hard=True``)
    it is the exact :func:`ndcg`.

    Args:
        scores: ``[...]`` floating (differentiated).
        relevance: scores' shape, graded relevance >= 0 (not differentiated).
        k, gain: as :func:`ndcg`.
        dim, lengths, mask, reduction: see the module docstring.
        method: the relaxed permutation matrix: ``"neuralsort"`` (default), ``"softsort"``, ``"sort"`` (a relaxed
            sorting network's matrix) or ``"ot_sort"`` (the optimal-transport plan times the list's length).
        sinkhorn_iterations: an int >= 0.
        sinkhorn_tolerance: > 0.
        **options: passed to the operator (e.g. ``tau=``, ``steepness=``, ``hard=``, ``backend=``).
    """
    if isinstance(sinkhorn_iterations, bool) or not isinstance(sinkhorn_iterations, int) or sinkhorn_iterations < 0:
        raise ValueError(f"sinkhorn_iterations must be an int >= 0, got {sinkhorn_iterations!r}")
    sinkhorn_tolerance = _checks.positive_finite(sinkhorn_tolerance, "sinkhorn_tolerance")
    if not isinstance(method, str) or method not in MATRICES:
        raise ValueError(f"method must be one of {list(MATRICES)}, got {method!r}")
    r, g, valid, count, kb, disc, cut, ideal = _ndcg_setup(scores, relevance, k, dim, lengths, mask, gain, reduction)
    X = MATRICES[method](-r.x, r.lengths, options).to(g.dtype)
    if sinkhorn_iterations:
        X = _Sinkhorn.apply(X, valid, sinkhorn_iterations, sinkhorn_tolerance)
    position_gains = (g.unsqueeze(-2) @ X).squeeze(-2)
    dcg = (position_gains * disc * cut).sum(-1)
    defined = ideal > 0
    return _reduce(1 - dcg / _safe(ideal), defined, r, reduction)


def approx_ndcg_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    k=None,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    ranker: str = "soft_rank",
    gain: str = "exp",
    reduction: str = "mean",
    **options,
) -> torch.Tensor:
    """``1 - ApproxNDCG@k`` (Qin, Liu, Li 2010): NDCG with each entry's position replaced by its soft descending
    rank ``p_i`` (1 = the largest score, by ``ranker`` on ``-scores``).

    ``DCG = sum_i gain(rel_i) w_i / log2(1 + p_i)``, divided by the exact ideal DCG@k; the cut-off weight ``w_i =
    clamp(k + 1 - p_i, 0, 1)`` is 1 up to position k, 0 from position k + 1 on, linear between (``k=None``: 1). With
    ``ranker="pairwise"`` (``p_i = 1 + sum_{j != i} sigmoid((s_j - s_i) / temperature)``, Qin et al.'s smooth
    position) and ``k=None`` it is allRank's ``approxNDCGLoss`` with ``alpha = 1 / temperature``; with exact ranks
    (a small regularisation, or ``hard=True``) it is the exact :func:`ndcg`.

    Args:
        ranker: as :func:`spearman_loss` (default ``"soft_rank"``: O(n log n) per list; ``"pairwise"`` is O(n^2)).
        other arguments: as :func:`neural_ndcg_loss`; ``**options`` go to the ranker.
    """
    r, g, valid, count, kb, disc, cut, ideal = _ndcg_setup(scores, relevance, k, dim, lengths, mask, gain, reduction)
    p = soft_ranks_of(-r.x, r.lengths, ranker, options).to(g.dtype)
    d = torch.log2(1 + p)  # p >= 1 on the real entries
    w = _zero_pads(g / (d if valid is None else torch.where(valid, d, 1)), valid)
    if k is not None:
        w = w * (kb.unsqueeze(-1).to(p.dtype) + 1 - p).clamp(0, 1)
    dcg = w.sum(-1)
    return _reduce(1 - dcg / _safe(ideal), ideal > 0, r, reduction)


# --- top-k ---------------------------------------------------------------------------------------------------------


def topk_recall_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    k,
    *,
    dim: int = -1,
    lengths=None,
    mask=None,
    method: str = "topk",
    reduction: str = "mean",
    **options,
) -> torch.Tensor:
    """``1 - recall@k``, soft: the share of a list's relevant entries (``relevance > 0``) that a relaxed top-k puts
    among its k largest scores.

    ``recall@k = sum_{i relevant} m_i / min(k, |relevant|)``, ``m_i`` the soft membership of entry ``i`` in the
    top k (the sum of its row of a relaxed top-k matrix, or ``ot_topk``'s mask). With an exact top-k (a sharp
    relaxation, or ``hard=True``) it is the exact recall@k of the k largest scores (ties by index); 1 when every
    relevant entry is there or the k slots are all relevant.

    Args:
        k: an int >= 1 or an int tensor of scores' shape without ``dim`` (one k per list); a list shorter than its
            k takes its length.
        method: ``"topk"`` (a relaxed selection network, default), ``"ot_topk"``, ``"neuralsort"`` or ``"softsort"``
            (their last k columns).
        other arguments: as :func:`neural_ndcg_loss`; ``**options`` go to the top-k operator.
    """
    _check_reduction(reduction)
    if not isinstance(method, str) or method not in TOPK:
        raise ValueError(f"method must be one of {list(TOPK)}, got {method!r}")
    r, rel, valid, count = _lists(scores, relevance, "relevance", dim, lengths, mask)
    kb, k_rows = _cutoffs(k, r, count)
    member = TOPK[method](r.x, r.lengths, k_rows, options).to(rel.dtype)
    relevant = _zero_pads(rel > 0, valid)
    total = relevant.sum(-1)
    hits = torch.where(relevant, member, member.new_zeros(())).sum(-1)
    recall = hits / kb.minimum(total).clamp(min=1).to(hits.dtype)
    return _reduce(1 - recall, total > 0, r, reduction)
