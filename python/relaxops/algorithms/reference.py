"""Pure-PyTorch references of the fused relaxed algorithms (the test oracles; written for clarity, float64-correct).

Each follows the AlgoVision program it replaces (``../shared/spec/algorithms.md`` section 4) exactly, except that
no branch is skipped for a small probability (AlgoVision's batch-wide ``epsilon`` skip of ``If``): the fused ops
compute the relaxation itself, which the framework computes too when ``epsilon=0``.
"""

from __future__ import annotations

import torch

# --- shortest path (relaxed Bellman-Ford on grids, spec 4.2) ------------------------------------------------------



# --- edit distance (relaxed Levenshtein, spec 4.4) -----------------------------------------------------------------


def edit_distance(s: torch.Tensor, t: torch.Tensor, beta: float) -> torch.Tensor:
    """The matrix ``D [B, n + 1, m + 1]`` of the relaxed edit distance of ``s [B, n, K]`` and ``t [B, m, K]``.

    AlgoVision's program cell by cell: ``cost = 1 - cos(s_i, t_j)`` (``torch.cosine_similarity``, its eps = 1e-8),
    ``D[i + 1, j + 1] = Min_beta(D[i, j + 1] + 1, D[i + 1, j] + 1, D[i, j] + cost)`` with ``Min_beta(X) =
    sum softmin(beta X) X``, ``D[i, 0] = i``, ``D[0, j] = j``. The distance is ``D[:, n, m]``.
    """
    B, n, m = s.shape[0], s.shape[1], t.shape[1]
    cost = 1 - torch.nn.functional.cosine_similarity(s[:, :, None, :], t[:, None, :, :], dim=-1)  # [B, n, m]
    ramp = torch.arange(max(n, m) + 1, dtype=s.dtype, device=s.device)
    D = [[None] * (m + 1) for _ in range(n + 1)]  # D[i][j]: [B]
    for j in range(m + 1):
        D[0][j] = ramp[j].expand(B)
    for i in range(n):
        D[i + 1][0] = ramp[i + 1].expand(B)
        for j in range(m):
            X = torch.stack([D[i][j + 1] + 1, D[i + 1][j] + 1, D[i][j] + cost[:, i, j]], -1)
            D[i + 1][j + 1] = (torch.softmax(-beta * X, -1) * X).sum(-1)
    D = torch.stack([torch.stack(row, -1) for row in D], -2)
    if n == 0 or m == 0:  # constant: connected to the inputs through the (empty) costs, so that gradients are zeros
        D = D + cost.sum((1, 2))[:, None, None]
    return D



# --- bubble sort (relaxed bubble sort with the While mixture, spec 4.1) ---------------------------------------------


def bubble_sort(x: torch.Tensor, beta: float, hard: bool, max_iter: int, epsilon: float
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sorted [B, n], swaps [B], any_swap [B])`` of the relaxed bubble sort of ``x [B, n]``.

    AlgoVision's program statement by statement: the While over passes, each pass resetting ``swapped`` and running
    the relaxed swaps of adjacent pairs ``k < m`` (``m = n - 1`` decreasing by one per pass) in an If whose merge
    weight is ``q = sigmoid(beta (a - b))`` (``[q > 1/2]`` if ``hard``); the While's mixture of the states after the
    passes, continuing while some row's continuation probability exceeds ``epsilon`` and fewer than ``max_iter``
    passes ran. No If branch is skipped. Rows with a non-finite value are NaN (their gradient too) and do not take
    part in the batch-wide loop condition.
    """
    B, n = x.shape
    bad = ~x.isfinite().all(-1)
    xs = torch.where(bad[:, None], torch.zeros_like(x), x)
    values = list(xs.unbind(-1))  # values[k]: [B]
    swapped, swaps, any_swap = xs.new_ones(B), xs.new_zeros(B), xs.new_zeros(B)

    def state():
        return [*values, swapped, swaps, any_swap]

    P = swapped  # IsTrue(swapped)
    acc = [(1 - P) * v for v in state()]
    m, it = n - 1, 0
    while bool(((P > epsilon) & ~bad).any()) and it < max_iter:
        swapped = torch.zeros_like(swapped)
        for k in range(m):
            a, b = values[k], values[k + 1]
            p = torch.sigmoid(beta * (a - b))
            q = (p > 0.5).to(p.dtype) if hard else p
            values[k], values[k + 1] = q * b + (1 - q) * a, q * a + (1 - q) * b
            swapped = q * 1.0 + (1 - q) * swapped
            any_swap = q * 1.0 + (1 - q) * any_swap
            swaps = q * (swaps + 1) + (1 - q) * swaps
        m -= 1
        P_new = P * swapped
        acc = [u + (P - P_new) * v for u, v in zip(acc, state())]
        P = P_new
        it += 1
    acc = [u + P * v for u, v in zip(acc, state())]
    # NaN with a NaN gradient in the bad rows, 0 with a 0 gradient elsewhere
    nan = (x * torch.where(bad, float("nan"), 0.0)[:, None]).sum(-1)
    out = torch.stack(acc[:n], -1), acc[n + 1], acc[n + 2]
    return torch.where(bad[:, None], nan[:, None], out[0]), torch.where(bad, nan, out[1]), torch.where(bad, nan, out[2])

