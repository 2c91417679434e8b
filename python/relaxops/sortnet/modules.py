"""``nn.Module`` front ends of the sorting-network family."""

from __future__ import annotations

import torch

from .functional import sort


class DiffSortNet(torch.nn.Module):
    """Differentiable sorting network as a module: ``forward(x [..., n]) -> (sorted, X)``.

    Args:
        network: ``"bitonic"``, ``"odd_even"`` or ``"bitonic_original"``.
        size: n, the number of elements per row (checked in forward).
        relaxation, steepness, art_lambda, descending, backend: as in :func:`relaxops.sort`.
        return_matrix: return the relaxed permutation matrix (code convention ``sorted = x @ X``).
    """

    def __init__(self, network: str, size: int, relaxation: str = "cauchy", steepness: float = 10.0,
                 art_lambda: float = 0.25, return_matrix: bool = True, descending: bool = False,
                 backend: str = "auto"):
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        self.network, self.size, self.relaxation = network, size, relaxation
        self.steepness, self.art_lambda = steepness, art_lambda
        self.return_matrix, self.descending, self.backend = return_matrix, descending, backend
        sort(torch.zeros(1, size), network, relaxation, steepness, art_lambda, False, descending, "reference")

    def forward(self, x: torch.Tensor):
        if x.shape[-1] != self.size:
            raise ValueError(f"x must have size {self.size} in its last dimension, got shape {tuple(x.shape)}")
        return sort(x, self.network, self.relaxation, self.steepness, self.art_lambda, self.return_matrix,
                    self.descending, self.backend)

    def extra_repr(self) -> str:
        return (f"network={self.network!r}, size={self.size}, relaxation={self.relaxation!r}, "
                f"steepness={self.steepness}, art_lambda={self.art_lambda}")
