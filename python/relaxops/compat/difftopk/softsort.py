"""``difftopk.softsort``: ``SoftSort`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...baselines.functional import softsort

__all__ = ["SoftSort"]


class SoftSort(torch.nn.Module):
    """difftopk's ``SoftSort(tau, hard, pow)``: ``forward(scores [B, n]) -> P [B, n, n]`` with rows = descending
    ranks, ``P[b, r, c] = softmax_c(-|s_[r] - s_c|^pow / tau)`` (the transpose of :func:`relaxops.softsort`
    of ``-scores``)."""

    def __init__(self, tau=1.0, hard=False, pow=1.0):
        super().__init__()
        self.hard, self.tau, self.pow = hard, tau, pow

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return softsort(-scores, self.tau, hard=self.hard, pow=self.pow).transpose(-2, -1)
