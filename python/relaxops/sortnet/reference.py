"""Pure-PyTorch differentiable sorting networks: the test oracle and the fallback backend.

Written for clarity and float64 correctness; gradients come from autograd over an explicit running
matrix (O(L n^2) saved per row). Never changed to match a kernel.
"""

from __future__ import annotations

import torch

from .networks import Network
from .relaxations import relax


def sort(
    x: torch.Tensor,
    net: Network,
    relaxation: str,
    steepness: float,
    art_lambda: float = 0.25,
    return_matrix: bool = True,
):
    """Relaxed sort of the rows of ``x [B, n]`` through ``net``.

    Returns ``(sorted [B, n], X [B, n, n] or None)`` with ``X = P^T`` (code convention: row = input element,
    column = ascending output position), so ``sorted = x @ X``. Untouched wires pass through exactly.
    """
    B, n = x.shape
    values = x
    # Y = P_l ... P_1: row r is the distribution of output wire r over the inputs.
    Y = torch.eye(n, dtype=x.dtype, device=x.device).expand(B, n, n) if return_matrix else None
    for layer in net.layers:
        if not layer:
            continue
        i = torch.tensor([c[0] for c in layer], device=x.device)
        j = torch.tensor([c[1] for c in layer], device=x.device)
        xi, xj = values[:, i], values[:, j]
        alpha = relax(xj - xi, relaxation, steepness, art_lambda)
        values = values.index_copy(1, i, alpha * xi + (1 - alpha) * xj)
        values = values.index_copy(1, j, (1 - alpha) * xi + alpha * xj)
        if Y is not None:
            a = alpha.unsqueeze(-1)
            Yi, Yj = Y[:, i], Y[:, j]
            Y = Y.index_copy(1, i, a * Yi + (1 - a) * Yj)
            Y = Y.index_copy(1, j, (1 - a) * Yi + a * Yj)
    return values, (Y.transpose(1, 2) if Y is not None else None)
