"""``difftopk.networks``: ``get_sorting_network`` for the dense network types ``'bitonic'`` and ``'odd_even'``.

Left out: ``sparse_bitonic_network``, ``sparse_splitter_selection_network`` and ``get_sparse_net``, which build
difftopk's torch-sparse layer format for its sparse executor. relaxops evaluates every network sparsely from its
comparator tables, so ``DiffTopkNet(..., sparse=True)`` and ``topk(..., sparse=True)`` need no such matrices.
"""

from __future__ import annotations

from ...sortnet.networks import network_layers, register_network
from ..diffsort import networks as _dense

__all__ = ["get_sorting_network"]

# difftopk network type -> relaxops network kind with the same comparators
_KINDS = {"bitonic": "bitonic_original", "splitter_selection": "splitter_selection", "odd_even": "odd_even"}


class DifftopkCompatError(NotImplementedError, ValueError):
    """Unknown network type, method or distribution: difftopk raises ``NotImplementedError`` there; this is
    also a ``ValueError``."""


def get_sorting_network(type: str, n: int, device, k: int = None) -> list:
    """difftopk's ``get_sorting_network`` for the dense types ``'bitonic'`` and ``'odd_even'`` (float32 layer
    matrices on ``device``, as diffsort's); ``k`` is unused there."""
    if type in ("bitonic", "odd_even"):
        return _dense.get_sorting_network(type, n, device)
    raise DifftopkCompatError(
        f"Sorting network `{type}`: only the dense types 'bitonic' and 'odd_even' are "
        "built as matrices; use DiffTopkNet(..., sparse=True) for the sparse networks"
    )


def topk_network(type: str, n: int, k: int, device) -> list:
    """Dense float32 layers of ``DiffTopkNet``'s network: diffsort's matrices for ``'bitonic'``/``'odd_even'``,
    the top-``k`` splitter selection network's comparators (then pass-through slots) layer by layer."""
    if type in ("bitonic", "odd_even"):
        return _dense.get_sorting_network(type, n, device)
    layers = network_layers(_KINDS[type], n, k)
    return _dense.network_tensors(_dense.dense_network(layers, n), register_network(layers, n), n, device)
