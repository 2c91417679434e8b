"""Public fused relaxed algorithms: one call, one forward and one backward kernel each (argument checks here)."""

from __future__ import annotations

import torch
from torch import Tensor

# --- shortest path ------------------------------------------------------------------------------------------------
from .. import _backend, _checks
from . import ops, reference


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
    _checks.memory_fits(cells * per_cell * dtype.itemsize, device,
                        f"the relaxed shortest path of {B} grid(s) of {H} x {W} with {n_iter} rounds ({dtype}) on "
                        f"backend {backend!r}", hint)


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
    spec algorithms.md 4.2) fused into one forward and one backward kernel.

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
    constant). Use ``n_iter >= max(H, W)`` (the default ``H + W`` is enough): before every cell is reached its
    distance is ``1e12`` plus a sum of costs, whose rounding ``beta`` amplifies, so with fewer rounds the result is
    ill-conditioned (and differs between backends by more than rounding). Costs may be any finite values (positive
    node weights in the intended use); non-finite costs give NaN in their row.

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
        raise ValueError("n_trace sets the steps of loop='for'; loop='while' runs until its continuation probability "
                         "is <= epsilon (or max_iter steps)")
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



# --- bubble sort --------------------------------------------------------------------------------------------------

