"""``difftopk.difftopk``: the module ``DiffTopkNet`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...sortnet import modules as _modules
from ...sortnet.functional import topk as _topk
from ..diffsort.functional import used_art_lambda
from .functional import topk
from .networks import _KINDS, DifftopkCompatError, topk_network

__all__ = ["DiffTopkNet"]


class DiffTopkNet(_modules.DiffTopkNet):
    """difftopk's ``DiffTopkNet``: ``forward(vectors [B, size]) -> (None, X_top [B, size, k])``.

    Args:
        sorting_network_type: ``'bitonic'`` (difftopk's wiring), ``'splitter_selection'`` or ``'odd_even'``.
        size, k, sparse, device, steepness, art_lambda, interpolation_type, distribution: as in difftopk
            (see :class:`relaxops.DiffTopkNet`); ``art_lambda`` is read only by ``'logistic_phi'``.

    ``sorting_network`` (dense layer matrices, see the package docstring) is built on first access; forward runs
    the comparator tables directly unless it was read or replaced.
    """

    def __init__(
        self,
        sorting_network_type: str,
        size: int,
        k: int,
        sparse: bool = False,
        device: str = "cpu",
        steepness: float = 10.0,
        art_lambda: float = 0.25,
        interpolation_type: str = None,
        distribution: str = "cauchy",
    ):
        if sorting_network_type not in _KINDS:
            raise DifftopkCompatError(
                f"Sorting network `{sorting_network_type}` unknown; difftopk's network types are {list(_KINDS)}"
            )
        used = used_art_lambda(interpolation_type or distribution, art_lambda)
        super().__init__(
            sorting_network_type, size, k, sparse, device, steepness, used, interpolation_type, distribution
        )
        self.art_lambda = art_lambda
        self._dense = None

    def _network(self) -> str:
        return _KINDS[self.sorting_network_type]

    @property
    def sorting_network(self) -> list:
        if self._dense is None:
            self._dense = topk_network(self.sorting_network_type, self.size, self.k, self.device)
        return self._dense

    @sorting_network.setter
    def sorting_network(self, value) -> None:
        self._dense = value

    def forward(self, vectors):
        if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or vectors.shape[1] != self.size:
            shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
            raise ValueError(f"vectors must be a 2-D tensor [batch, {self.size}], got {shape}")
        if self._dense is not None:  # read or replaced by the user: run what it holds now
            return topk(self._dense, vectors, self.k, self.steepness, self.art_lambda, self.distribution)
        return None, _topk(
            vectors,
            self.k,
            self._network(),
            self.distribution,
            self.steepness,
            used_art_lambda(self.distribution, self.art_lambda),
            self.backend,
        )
