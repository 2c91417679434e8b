"""Pure-PyTorch reference of the training family's kernels, written for clarity; the test oracle of the compiled
backends and the fallback when nothing is compiled.

``assignment_reference`` is the shortest augmenting path algorithm (Hungarian method with potentials, in the
Jonker-Volgenant form) for the *minimum*-cost assignment of ``cost = -theta``, run in float64 for every item of
the batch at once (the items that have already finished a step are masked out).
"""

from __future__ import annotations

import torch
from torch import Tensor


def assignment_perm_reference(theta: Tensor) -> Tensor:
    """Column of every row in a maximum-weight perfect matching of ``theta`` ``[B, d, d]`` (finite values).

    Returns an int64 tensor ``[B, d]``: ``perm[b, i] = j`` means row ``i`` is matched to column ``j``.

    Algorithm (per item, vectorised over the batch): rows are inserted one at a time; for row ``i`` a Dijkstra
    search over the columns with reduced costs ``cost[r, j] - u[r] - v[j] >= 0`` (``u``, ``v`` the dual potentials)
    finds the shortest augmenting path to a free column, the potentials are updated by the distances, and the
    matching is flipped along the path. After the last row the matching is optimal (the reduced costs of its edges
    are 0 and all others >= 0, i.e. complementary slackness). Column 0 is a virtual column that holds the row being
    inserted; real columns are 1..d.

    Tie rule: deterministic. At every step of the search the free column of smallest distance is taken, the lowest
    index among equal distances (``argmin`` returns the first minimum); rows are inserted in index order.
    """
    B, d, _ = theta.shape
    dev = theta.device
    if d == 0 or B == 0:
        return torch.zeros(B, d, dtype=torch.int64, device=dev)
    inf = float("inf")
    # cost with a padding row 0 / column 0 so that the algorithm reads 1-based as in its textbook form
    cost = torch.zeros(B, d + 1, d + 1, dtype=torch.float64, device=dev)
    cost[:, 1:, 1:] = -theta.to(torch.float64)
    u = torch.zeros(B, d + 1, dtype=torch.float64, device=dev)
    v = torch.zeros(B, d + 1, dtype=torch.float64, device=dev)
    p = torch.zeros(B, d + 1, dtype=torch.int64, device=dev)  # p[j]: row matched to column j (0: free)
    way = torch.zeros(B, d + 1, dtype=torch.int64, device=dev)  # predecessor column on the shortest path
    ar = torch.arange(B, device=dev)
    for i in range(1, d + 1):
        p[:, 0] = i
        j0 = torch.zeros(B, dtype=torch.int64, device=dev)
        minv = torch.full((B, d + 1), inf, dtype=torch.float64, device=dev)
        used = torch.zeros(B, d + 1, dtype=torch.bool, device=dev)
        active = torch.ones(B, dtype=torch.bool, device=dev)
        while bool(active.any()):
            used[ar, j0] |= active
            i0 = p[ar, j0]
            cur = cost[ar, i0] - u[ar, i0].unsqueeze(1) - v  # reduced costs of row i0
            upd = (~used) & (cur < minv) & active.unsqueeze(1)
            minv = torch.where(upd, cur, minv)
            way = torch.where(upd, j0.unsqueeze(1), way)
            delta, j1 = torch.where(used, inf, minv).min(dim=1)
            delta = torch.where(active, delta, 0.0)
            dd = delta.unsqueeze(1)
            u.scatter_add_(1, p, torch.where(used, dd, 0.0))  # rows of used columns are distinct
            v = v - torch.where(used, dd, 0.0)
            minv = minv - torch.where(used, 0.0, dd)
            j0 = torch.where(active, j1, j0)
            active = active & (p[ar, j0] != 0)
        # flip the matching along the path, column j0 (free) back to the virtual column 0
        while bool((j0 != 0).any()):
            moving = j0 != 0
            j1 = way[ar, j0]
            p[ar, j0] = torch.where(moving, p[ar, j1], p[ar, j0])
            j0 = torch.where(moving, j1, j0)
    perm = torch.empty(B, d, dtype=torch.int64, device=dev)
    perm.scatter_(1, p[:, 1:] - 1, torch.arange(d, device=dev).expand(B, d).contiguous())
    return perm


def assignment_reference(theta: Tensor) -> Tensor:
    """Permutation matrix ``[B, d, d]`` (theta's dtype) of the maximum-weight perfect matching of ``theta``
    ``[B, d, d]``; see :func:`assignment_perm_reference`."""
    B, d, _ = theta.shape
    perm = assignment_perm_reference(theta)
    out = torch.zeros(B, d, d, dtype=theta.dtype, device=theta.device)
    return out.scatter_(2, perm.unsqueeze(2), 1.0)
