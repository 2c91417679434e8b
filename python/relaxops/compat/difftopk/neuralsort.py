"""``difftopk.neuralsort``: ``NeuralSort`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...baselines.functional import neuralsort

__all__ = ["NeuralSort"]


class NeuralSort(torch.nn.Module):
    """difftopk's ``NeuralSort(tau, hard)``: ``forward(scores [B, n]) -> X [B, n, n]`` with ``X[b, c, r]`` the
    weight of element ``c`` at ascending position ``r`` (see :func:`relaxops.neuralsort`).

    ``hard=True`` is difftopk's straight-through variant: each ELEMENT's row becomes the one-hot of its most
    likely position (not necessarily a permutation; ``relaxops.neuralsort(hard=True)`` takes each position's
    most likely element instead, as Grover et al.)."""

    def __init__(self, tau=1.0, hard=False):
        super().__init__()
        self.hard, self.tau = hard, tau

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        X = neuralsort(scores, self.tau)
        if not self.hard:
            return X
        one_hot = torch.zeros_like(X).scatter_(-1, X.argmax(-1, keepdim=True), 1.0)
        return (one_hot - X).detach() + X
