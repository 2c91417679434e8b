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

