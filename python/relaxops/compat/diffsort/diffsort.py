"""``diffsort.diffsort``: the module ``DiffSortNet`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...sortnet import networks as _networks
from .functional import DiffsortCompatError, _check_call, _run, sort
from .networks import _KINDS, _check_n, get_sorting_network

__all__ = ["DiffSortNet"]


class DiffSortNet(torch.nn.Module):
    """diffsort's ``DiffSortNet``: ``forward(vectors [B, size]) -> (sorted [B, size], X [B, size, size])``.

    Args:
        sorting_network_type: ``'bitonic'`` (diffsort's wiring, relaxops' ``"bitonic_original"``; warns for
            the sizes where it does not sort every input) or ``'odd_even'``.
        size: n, the number of elements per row (>= 1; n = 1 gives the identity).
        device: device of ``sorting_network`` and of the inputs.
        steepness, art_lambda, distribution: as in :func:`sort`; read at every forward.
        interpolation_type: deprecated alias of ``distribution`` (as in diffsort: it overrides
            ``distribution`` unless that was set to something other than ``'cauchy'``, which is an error).

    Attributes ``sorting_network_type``, ``size``, ``sorting_network``, ``steepness``, ``art_lambda`` and
    ``distribution`` are those of diffsort. ``sorting_network`` (the dense matrices) is built on first access;
    forward runs the comparator tables directly unless it was read or replaced.
    """

    def __init__(
        self,
        sorting_network_type: str,
        size: int,
        device: str = "cpu",
        steepness: float = 10.0,
        art_lambda: float = 0.25,
        interpolation_type: str = None,
        distribution: str = "cauchy",
    ):
        super().__init__()
        if sorting_network_type not in _KINDS:
            raise DiffsortCompatError(
                f"Sorting network `{sorting_network_type}` unknown; diffsort's network "
                "types are 'bitonic' and 'odd_even'"
            )
        size = _check_n(size)
        self.sorting_network_type = sorting_network_type
        self.size = size
        self._kind = _KINDS[sorting_network_type]
        self._device = torch.empty(0, device=device).device  # resolves e.g. "cuda" to "cuda:0", like .to()
        self._dense = None
        if interpolation_type is not None:
            if not (distribution is None or distribution == "cauchy" or distribution == interpolation_type):
                raise ValueError(
                    f"Two different distributions have been set (distribution={distribution} and "
                    f"interpolation_type={interpolation_type}); however, they have the same interpretation "
                    "and interpolation_type is a deprecated argument"
                )
            distribution = interpolation_type
        self.steepness = steepness
        self.art_lambda = art_lambda
        self.distribution = distribution
        _networks.warn_if_not_sorting(self._kind, size)

    @property
    def sorting_network(self):
        if self._dense is None:
            self._dense = get_sorting_network(self.sorting_network_type, self.size, self._device)
        return self._dense

    @sorting_network.setter
    def sorting_network(self, value):
        self._dense = value

    def forward(self, vectors):
        if not isinstance(vectors, torch.Tensor):
            raise TypeError(f"vectors must be a torch.Tensor, got {type(vectors).__name__}")
        if vectors.dim() != 2 or vectors.shape[1] != self.size:
            raise ValueError(
                f"DiffSortNet(size={self.size}) sorts 2-D inputs [batch, {self.size}], got shape {tuple(vectors.shape)}"
            )
        if self._dense is not None:  # read or replaced by the user: run what it holds now
            return sort(self._dense, vectors, self.steepness, self.art_lambda, self.distribution)
        steepness, art_lambda = _check_call(vectors, self.distribution, self.steepness, self.art_lambda)
        if vectors.device != self._device:
            raise ValueError(
                f"The sorting network is on device {self._device} while the vectors are on "
                f"device {vectors.device}, but they both need to be on the same device."
            )
        return _run(vectors, self._kind, self.distribution, steepness, art_lambda)

    def extra_repr(self) -> str:
        return (
            f"sorting_network_type={self.sorting_network_type!r}, size={self.size}, "
            f"steepness={self.steepness}, art_lambda={self.art_lambda}, "
            f"distribution={self.distribution!r}"
        )
