"""``nn.Module`` front ends of the sorting-network family."""

from __future__ import annotations

import torch

from .functional import sort, topk


def _check_size(x, name: str, size: int, dim: int) -> None:
    """``x`` is a tensor with ``size`` entries along ``dim``."""
    ok = isinstance(x, torch.Tensor) and x.dim() >= 1 and -x.dim() <= dim < x.dim() and x.shape[dim] == size
    if not ok:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must have size {size} along dim = {dim}, got {shape}")


class DiffSortNet(torch.nn.Module):
    """Differentiable sorting network as a module: ``forward(x, *, lengths=None, mask=None) -> (sorted, X)``.

    Args:
        network: ``"bitonic"``, ``"odd_even"`` or ``"bitonic_original"``.
        size: n, the number of elements per row along ``dim`` (checked in forward).
        relaxation, steepness, art_lambda, descending, backend: as in :func:`relaxops.sort`.
        return_matrix: return the relaxed permutation matrix (code convention ``sorted = x @ X``).
        dim, hard: as in :func:`relaxops.sort` (keyword only); ``forward``'s ``lengths`` / ``mask`` too.
    """

    def __init__(
        self,
        network: str,
        size: int,
        relaxation: str = "cauchy",
        steepness: float = 10.0,
        art_lambda: float = 0.25,
        return_matrix: bool = True,
        descending: bool = False,
        backend: str = "auto",
        *,
        dim: int = -1,
        hard: bool = False,
    ):
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if not isinstance(hard, bool):
            raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
        self.dim, self.hard = dim, hard
        self.network, self.size, self.relaxation = network, size, relaxation
        self.steepness, self.art_lambda = steepness, art_lambda
        self.return_matrix, self.descending, self.backend = return_matrix, descending, backend
        sort(torch.zeros(1, size), network, relaxation, steepness, art_lambda, False, descending, "reference")

    def forward(self, x: torch.Tensor, *, lengths: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        _check_size(x, "x", self.size, self.dim)
        return sort(
            x,
            self.network,
            self.relaxation,
            self.steepness,
            self.art_lambda,
            self.return_matrix,
            self.descending,
            self.backend,
            dim=self.dim,
            lengths=lengths,
            mask=mask,
            hard=self.hard,
        )

    def extra_repr(self) -> str:
        return (
            f"network={self.network!r}, size={self.size}, relaxation={self.relaxation!r}, dim={self.dim}, "
            f"hard={self.hard}, "
            f"steepness={self.steepness}, art_lambda={self.art_lambda}"
        )


class DiffTopkNet(torch.nn.Module):
    """Differentiable top-k network with difftopk's signature: ``forward(x [..., size]) -> (None, X_top)``.

    Args:
        sorting_network_type: ``"splitter_selection"`` (a selection network for the top k), or a sorting
            network: ``"bitonic"`` (relaxops' corrected wiring), ``"odd_even"``, ``"bitonic_original"``.
        size: n, the number of elements per row (checked in forward).
        k: number of top elements, ``1 <= k <= size``.
        sparse: accepted for compatibility; relaxops always evaluates the top-k product sparsely
            (bi-directionally, O(L n k)), which is what ``sparse=True`` selects in difftopk.
        device: accepted for compatibility (the network tables follow the input's device).
        steepness, art_lambda: as in :func:`relaxops.sort`.
        interpolation_type: deprecated alias of ``distribution`` (as in difftopk).
        distribution: the relaxation (``"cauchy"``, ``"logistic"``, ``"logistic_phi"``, ``"gaussian"``,
            ``"reciprocal"``, ``"optimal"``).
        backend: as in :func:`relaxops.sort` (keyword only).
        dim, hard: as in :func:`relaxops.topk` (keyword only).

    ``forward(vectors, *, k=None, lengths=None, mask=None)``: ``k`` an integer tensor of a k per row (each in
    ``[1, size]``; default: the module's k), ``lengths`` / ``mask`` as in :func:`relaxops.topk`.
    Returns ``(None, X_top [*batch, size, K])`` like difftopk (column ``K - 1`` = rank 1, K the largest k), see
    :func:`relaxops.topk`.
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
        interpolation_type: str | None = None,
        distribution: str = "cauchy",
        *,
        backend: str = "auto",
        dim: int = -1,
        hard: bool = False,
    ):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if not isinstance(hard, bool):
            raise TypeError(f"hard must be a bool, got {type(hard).__name__}")
        self.dim, self.hard = dim, hard
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= size:
            raise ValueError(f"k must be an integer in [1, size] = [1, {size}], got {k!r}")
        if interpolation_type is not None:
            if distribution not in (None, "cauchy", interpolation_type):
                raise ValueError(
                    f"two different distributions were set (distribution={distribution!r}, "
                    f"interpolation_type={interpolation_type!r}); interpolation_type is a deprecated "
                    "alias of distribution"
                )
            distribution = interpolation_type
        self.sorting_network_type, self.size, self.k, self.sparse = sorting_network_type, size, k, sparse
        self.device = device
        self.steepness, self.art_lambda, self.distribution, self.backend = steepness, art_lambda, distribution, backend
        topk(torch.zeros(1, size), k, self._network(), distribution, steepness, art_lambda, "reference")

    def _network(self) -> str:
        return self.sorting_network_type

    def forward(
        self,
        vectors: torch.Tensor,
        *,
        k: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ):
        _check_size(vectors, "vectors", self.size, self.dim)
        return None, topk(
            vectors,
            self.k if k is None else k,
            self._network(),
            self.distribution,
            self.steepness,
            self.art_lambda,
            self.backend,
            dim=self.dim,
            lengths=lengths,
            mask=mask,
            hard=self.hard,
        )

    def extra_repr(self) -> str:
        return (
            f"sorting_network_type={self.sorting_network_type!r}, size={self.size}, k={self.k}, "
            f"distribution={self.distribution!r}, steepness={self.steepness}, art_lambda={self.art_lambda}"
        )
