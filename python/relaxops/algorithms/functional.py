"""Public fused relaxed algorithms: one call, one forward and one backward kernel each (argument checks here)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .. import _backend, _checks
from . import ops, reference

# --- shortest path ------------------------------------------------------------------------------------------------


def _sp_check_memory(backend, B, H, W, n_iter, steps, save, dtype, device):
    """Refuse work whose buffers cannot fit: the output, pi and (with a gradient) the saved Jacobians of every round
    (8 n_iter values per cell); the reference's autograd graph keeps about 30 values per cell and round or step."""
    if torch.compiler.is_compiling():  # checked when the eager call runs
        return
    cells = B * H * W
    per_cell = 1 + 8 + (8 * (n_iter - 1) if save else 0)
    hint = "use a smaller batch or fewer rounds (n_iter)"
    if backend == "reference":
        per_cell += 30 * (n_iter + steps)
        hint += ", or a compiled backend"
    _checks.memory_fits(
        cells * per_cell * dtype.itemsize,
        device,
        f"the relaxed shortest path of {B} grid(s) of {H} x {W} with {n_iter} rounds ({dtype}) on backend {backend!r}",
        hint,
    )


def _sp_int(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v < 2**31:
        raise ValueError(f"{name} must be an integer in [{lo}, 2^31), got {v!r}")
    return v


def shortest_path(
    cost: Tensor,
    beta: float = 10.0,
    n_iter: int | None = None,
    *,
    n_trace: int | None = None,
    t_conorm: str = "probabilistic",
    hamacher_p: float | None = None,
    loop: str = "for",
    max_iter: int = 1024,
    epsilon: float = 1e-5,
    backend: str = "auto",
) -> Tensor:
    """Relaxed shortest path on grids: AlgoVision's shortest-path example (relaxed Bellman-Ford with traceback,
    docs/math/algorithms.md §4.2) fused into one forward and one backward kernel.

    The path runs from the top-left cell ``(0, 0)`` to the bottom-right cell ``(H - 1, W - 1)`` over the
    8-neighbourhood, paying the cost of every cell it enters (node weights; the start's cost is never paid). With
    ``d`` the distance map padded by a ring of ``1e12`` and ``d[0, 0] = 0``, each of the ``n_iter`` synchronous rounds
    sets every cell to ``sum_k pi_k N_k + cost`` where ``N`` are its 8 neighbours' previous distances and ``pi =
    softmin(beta N)`` its predecessor distribution (the cell's own distance takes no part; the start is pinned to 0
    after every round). The traceback then moves a unit of mass from the bottom-right cell to the predecessors given
    by the last round's ``pi`` (mass leaving the grid is dropped) and accumulates it into the path with the T-conorm:

    * ``loop="for"``: ``n_trace`` steps (default ``n_iter``, as AlgoVision's example). After reaching the start the
      mass keeps moving (the start's own predecessor distribution is not absorbing), so too many steps make the path
      leak around the start;
    * ``loop="while"``: AlgoVision's ``While(LEq(path[:, 0, 0], 1))``: the mixture over the traceback states weighted
      by the continuation probabilities ``sigmoid(beta (1 - path[0, 0]))``, run while the largest continuation
      probability in the batch exceeds ``epsilon``, at most ``max_iter`` steps; the remaining probability goes to
      the last state. As in AlgoVision the trip count is the batch's (so a row's result may depend, by
      ``epsilon``-weighted terms, on the other rows); rows whose probability is NaN take no part in it.

    Values and gradients equal AlgoVision 0.1.2's program to rounding when torch's default dtype is the cost's (the
    program creates its state in the default dtype: float32 state with float64 costs moves results by ~1e-8), except
    that AlgoVision's while loop stops for the whole batch as soon as one row's probability is NaN. Differentiable with
    respect to ``cost`` (the exact gradient of the computed relaxation; the while loop's trip count is piecewise
    constant; where the path is a constant of the costs, a traceback of at most one step or ``n_iter = 1``, its
    gradient is 0 on every backend). Use ``n_iter >= max(H, W)`` (the default ``H + W`` is enough): before every
    cell is reached its distance is ``1e12`` plus a sum of costs, whose rounding ``beta`` amplifies, so with fewer
    rounds the result is ill-conditioned (and differs between backends by more than rounding). Costs may be any
    finite values (positive node weights in the intended use); non-finite costs give NaN in their row wherever they
    enter it: the gradient once a round's ``pi`` reads them (``n_iter >= 2``), the path once a traceback step also
    reads that ``pi``.

    Args:
        cost: ``[B, H, W]`` or ``[H, W]`` float32/float64 node weights, ``H, W >= 1``, ``B >= 0``.
        beta: inverse temperature of the soft minimum and of the while loop's condition, finite and > 0.
        n_iter: Bellman-Ford rounds, >= 1 (default ``H + W``).
        n_trace: traceback steps of ``loop="for"``, >= 0 (default ``n_iter``); not used by ``loop="while"``.
        t_conorm: path accumulation ``a T b``: ``"probabilistic"`` (``a + b - ab``), ``"hamacher"`` (``(a + b + (p -
            2) ab) / (1 + (p - 1) ab)``) or ``"yager_1"`` (the bounded sum ``min(1, a + b)``).
        hamacher_p: Hamacher's parameter ``p``, finite and > 0: required with ``t_conorm="hamacher"``, else None.
        loop: ``"for"`` or ``"while"``.
        max_iter: ``loop="while"``: at most this many traceback steps, >= 0.
        epsilon: ``loop="while"``: the continuation probability below which the loop stops, finite and >= 0.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``[B, H, W]`` (or ``[H, W]``) in cost's dtype: the relaxed path indicator (in ``[0, 1]``).
    """
    if not isinstance(cost, torch.Tensor):
        raise TypeError(f"cost must be a torch.Tensor, got {type(cost).__name__}")
    if cost.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"cost must be float32 or float64, got {cost.dtype}")
    if cost.dim() not in (2, 3) or cost.shape[-1] < 1 or cost.shape[-2] < 1:
        raise ValueError(f"cost must have shape [B, H, W] or [H, W] with H, W >= 1, got {tuple(cost.shape)}")
    H, W = cost.shape[-2:]
    beta = _checks.positive_finite(beta, "beta")
    n_iter = H + W if n_iter is None else _sp_int(n_iter, "n_iter", 1)
    if not isinstance(loop, str) or loop not in ops.SP_LOOPS:
        raise ValueError(f"loop must be one of {list(ops.SP_LOOPS)}, got {loop!r}")
    if loop == "while" and n_trace is not None:
        raise ValueError(
            "n_trace sets the steps of loop='for'; loop='while' runs until its continuation probability "
            "is <= epsilon (or max_iter steps)"
        )
    n_trace = n_iter if n_trace is None else _sp_int(n_trace, "n_trace", 0)
    if not isinstance(t_conorm, str) or t_conorm not in ops.SP_T_CONORMS:
        raise ValueError(f"t_conorm must be one of {list(ops.SP_T_CONORMS)}, got {t_conorm!r}")
    if t_conorm == "hamacher":
        if hamacher_p is None:
            raise ValueError("hamacher_p is required with t_conorm='hamacher' (a finite number > 0)")
        hamacher_p = _checks.positive_finite(hamacher_p, "hamacher_p")
    elif hamacher_p is not None:
        raise ValueError(f"hamacher_p is the parameter of t_conorm='hamacher', got it with t_conorm={t_conorm!r}")
    max_iter = _sp_int(max_iter, "max_iter", 0)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < float("inf"):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    epsilon = float(epsilon)
    backend = _backend.resolve("shortest_path", backend, cost.device)

    costs = cost if cost.dim() == 3 else cost.unsqueeze(0)
    B = costs.shape[0]
    grad = torch.is_grad_enabled() and cost.requires_grad
    steps = n_trace if loop == "for" else min(max_iter, n_iter + 32)  # the while loop's count is a guess
    _sp_check_memory(backend, B, H, W, n_iter, steps, grad, cost.dtype, cost.device)
    if backend == "reference":
        out = reference.shortest_path(costs, beta, n_iter, n_trace, t_conorm, hamacher_p, loop, max_iter, epsilon)
    else:
        costs = costs.contiguous()
        args = (beta, n_iter, n_trace, t_conorm, 0.0 if hamacher_p is None else hamacher_p, loop, max_iter, epsilon)
        if grad:
            out = ops.ShortestPath.apply(costs, *args, backend)
        else:
            fwd = ops.shortest_path_fwd if torch.compiler.is_compiling() else ops._sp_fwd_impl
            out = fwd(costs, *args, False, backend)[0]
    return out if cost.dim() == 3 else out.squeeze(0)


# --- edit distance ------------------------------------------------------------------------------------------------


def _edit_distance_args(s, t, beta, return_matrix):
    for name, x in (("s", s), ("t", t)):
        _checks.floating_tensor(x, name, min_dim=2)
    if t.dtype != s.dtype:
        raise TypeError(f"t must have the dtype of s ({s.dtype}), got {t.dtype}")
    if t.device != s.device:
        raise ValueError(f"t must be on the device of s ({s.device}), got {t.device}")
    if s.shape[-1] < 1 or t.shape[-1] != s.shape[-1]:
        raise ValueError(
            f"s and t must have the same letter dimension K >= 1 (their last), got shapes "
            f"{tuple(s.shape)} and {tuple(t.shape)}"
        )
    if t.shape[:-2] != s.shape[:-2]:
        raise ValueError(
            f"s [..., n, K] and t [..., m, K] must have the same batch dimensions, got shapes "
            f"{tuple(s.shape)} and {tuple(t.shape)}"
        )
    beta = _checks.positive_finite(beta, "beta")
    if not isinstance(return_matrix, bool):
        raise TypeError(f"return_matrix must be a bool, got {type(return_matrix).__name__}")
    return beta


def edit_distance(
    s: Tensor, t: Tensor, beta: float = 5.0, *, return_matrix: bool = False, backend: str = "auto"
) -> Tensor | tuple[Tensor, Tensor]:
    """Relaxed edit (Levenshtein) distance of two sequences of letter distributions, AlgoVision's program
    (docs/math/algorithms.md §4.4).

    The dynamic program of the Levenshtein distance with the relaxed minimum ``Min_beta(X) = sum_k softmin(beta
    X)_k X_k`` and the substitution cost ``1 - cos(s_i, t_j)``::

        D[i, 0] = i,  D[0, j] = j
        D[i + 1, j + 1] = Min_beta(D[i, j + 1] + 1, D[i + 1, j] + 1, D[i, j] + 1 - cos(s_i, t_j))

    and the distance ``D[n, m]``. The cosine is ``torch.nn.functional.cosine_similarity``'s (eps = 1e-8): ``<x /
    max(|x|, eps), y / max(|y|, eps)>``, each norm clamped on its own, the clamp not differentiated (the gradient
    with respect to a letter of norm below eps is of order 1 / eps; a norm that overflows gives cosine 0). For
    one-hot letters the cost is the 0/1 substitution cost, and as ``beta`` grows the distance tends to the exact
    edit distance.
    This is AlgoVision's program (its ``If(CosineSimilarity)`` gives ``cost = 1 - cos``) computed exactly: AlgoVision
    skips a branch whose probability is at most its ``epsilon`` for the whole batch, which the fused op never does
    (it equals the program built with ``epsilon = 0``). One forward and one backward kernel per call: O(n m K) time
    and O(n m) memory per row.

    Non-finite letters make the cosines they enter NaN: the distance of their row and the row's gradient are NaN;
    other rows are unaffected.

    Args:
        s: ``[..., n, K]`` float16/bfloat16/float32/float64 (half types computed in float32), ``n >= 0``: the first
            sequence, one vector of ``K >= 1`` letter probabilities (or any non-negative scores) per position.
        t: ``[..., m, K]``, ``m >= 0``, the same batch dimensions, dtype and device as ``s``.
        beta: inverse temperature of the relaxed minimum, finite and > 0 (AlgoVision's ``Min(beta)``).
        return_matrix: also return the DP matrix ``D``.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        the distance ``[...]`` (``n`` if ``m = 0`` and ``m`` if ``n = 0``), and with ``return_matrix`` also ``D [...,
        n + 1, m + 1]``; in s's dtype, differentiable with respect to ``s`` and ``t``.
    """
    beta = _edit_distance_args(s, t, beta, return_matrix)
    backend = _backend.resolve("edit_distance", backend, s.device)
    cdtype = _checks.compute_dtype(s.dtype)
    batch, n, m, K = tuple(s.shape[:-2]), s.shape[-2], t.shape[-2], s.shape[-1]
    rows = 1
    for d in batch:
        rows *= d
    if not torch.compiler.is_compiling():
        # D, cos and the backward's G and cos gradient per cell; the reference's graph keeps ~20 tensors per cell
        per_row = (4 * (n + 1) * (m + 1) + (n + m) * K * 3) * cdtype.itemsize
        if backend == "reference":
            per_row += 20 * (n + 1) * (m + 1) * cdtype.itemsize
        _checks.memory_fits(
            rows * per_row,
            s.device,
            f"the edit distance of shapes {tuple(s.shape)} and {tuple(t.shape)} ({cdtype}) on backend {backend!r}",
            "use a smaller batch",
        )
    sb = s.reshape(rows, n, K).to(cdtype)
    tb = t.reshape(rows, m, K).to(cdtype)
    if backend == "reference":
        D = reference.edit_distance(sb, tb, beta)
        distance = D[:, n, m]
    else:
        distance, D = ops.EditDistance.apply(sb.contiguous(), tb.contiguous(), beta, backend)
    distance = distance.reshape(batch).to(s.dtype)
    return (distance, D.reshape(*batch, n + 1, m + 1).to(s.dtype)) if return_matrix else distance


# --- bubble sort --------------------------------------------------------------------------------------------------


class BubbleSortResult(NamedTuple):
    """``sorted [..., n]`` (the relaxed sorted values, ascending), ``swaps [...]`` (the expected number of swaps,
    AlgoVision's ``loss_sum``) and ``any_swap [...]`` (the probability that some pass swapped, ``loss_prod``)."""

    sorted: Tensor
    swaps: Tensor
    any_swap: Tensor


def _bubble_args(values, beta, hard, max_iter, epsilon):
    _checks.floating_tensor(values, "values")
    if values.shape[-1] < 1:
        raise ValueError(
            f"values must have at least one element in its last dimension (n >= 1), got shape {tuple(values.shape)}"
        )
    beta = _checks.positive_finite(beta, "beta")
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int):
        raise TypeError(f"max_iter must be an int, got {type(max_iter).__name__}")
    if not 0 <= max_iter <= 2**31 - 1:
        raise ValueError(f"max_iter must be in [0, 2^31 - 1], got {max_iter}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < float("inf"):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    return beta, float(epsilon)


def bubble_sort(
    values: Tensor,
    beta: float = 5.0,
    *,
    hard: bool = False,
    max_iter: int = 1024,
    epsilon: float = 1e-5,
    backend: str = "auto",
) -> BubbleSortResult:
    """Relaxed bubble sort, AlgoVision's program: the sorting loss of Petersen et al.'s sorting supervision
    (docs/math/algorithms.md §4.1).

    Bubble sort with every comparison relaxed: each pass runs the adjacent pairs ``(k, k + 1)``, ``k < m`` (``m = n -
    1`` decreasing by one per pass) in order, swapping with probability ``p = sigmoid(beta (a - b))``::

        v[k], v[k + 1] = p b + (1 - p) a, p a + (1 - p) b
        swapped = p + (1 - p) swapped    (reset to 0 before each pass)
        any_swap = p + (1 - p) any_swap,  swaps = swaps + p

    and the passes run in a relaxed ``while swapped`` loop: the outputs are the mixture ``sum_i (P_{i-1} - P_i)
    state_i + P_T state_T`` of the states after the passes, ``P_i = P_{i-1} swapped_i`` the probability that pass
    ``i + 1`` runs. The loop stops when no row's ``P`` exceeds ``epsilon`` or after ``max_iter`` passes: the batch
    shares one trip count (AlgoVision's rule, so rows depend on each other by at most ~``epsilon``), at most ``n``
    since the pass with no pairs sets ``swapped = 0``. ``swaps`` is the expected number of swaps (the number of
    inversions in the hard limit); ``any_swap`` the probability that the input was not sorted. With ``hard=True``
    the swaps use ``q = [p > 1/2]``: the values are ``torch.sort``'s and ``swaps`` the number of inversions (no
    gradient through q; the values' gradient is the permutation's). AlgoVision also skips an If branch whose
    probability is at most ``epsilon`` for the whole batch; the fused op never does (it is the program with that
    skip off: ``epsilon`` only ends the loop). One forward and one backward kernel per call, O(n^2) per row.

    Rows with a NaN or infinite value: every output of the row and its gradient are NaN, and the row takes no part
    in the trip count.

    Args:
        values: ``[..., n]`` float16/bfloat16/float32/float64 (half types computed in float32), ``n >= 1``; all
            leading dimensions are one batch (the trip count is shared by all rows).
        beta: inverse temperature of the comparisons, finite and > 0.
        hard: mix with the thresholded ``[p > 1/2]`` (AlgoVision's ``hard=True``).
        max_iter: the most passes (>= 0; 0 returns the input).
        epsilon: the loop runs while some row's probability of another pass exceeds it (finite, >= 0).
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        ``BubbleSortResult(sorted [..., n], swaps [...], any_swap [...])`` in values' dtype, differentiable with
        respect to ``values``.
    """
    beta, epsilon = _bubble_args(values, beta, hard, max_iter, epsilon)
    backend = _backend.resolve("bubble_sort", backend, values.device)
    cdtype = _checks.compute_dtype(values.dtype)
    batch, n = tuple(values.shape[:-1]), values.shape[-1]
    rows = 1
    for d in batch:
        rows *= d
    if not torch.compiler.is_compiling():
        # the states after each pass (saved for the backward) and the kernels' scratch; the reference's graph keeps
        # ~15 tensors of [B] per comparator
        per_row = (min(max_iter, n) * (n + 3) + 8 * n) * cdtype.itemsize
        if backend == "reference":
            per_row += 15 * min(max_iter, n) * n * cdtype.itemsize
        _checks.memory_fits(
            rows * per_row,
            values.device,
            f"the bubble sort of shape {tuple(values.shape)} ({cdtype}) on backend {backend!r}",
            "use a smaller batch or max_iter",
        )
    x = values.reshape(rows, n).to(cdtype)
    if backend == "reference":
        out = reference.bubble_sort(x, beta, hard, max_iter, epsilon)
    else:
        out = ops.BubbleSort.apply(x.contiguous(), beta, hard, max_iter, epsilon, backend)
    sorted_, swaps, any_swap = (o.to(values.dtype) for o in out)
    return BubbleSortResult(sorted_.reshape(*batch, n), swaps.reshape(batch), any_swap.reshape(batch))
