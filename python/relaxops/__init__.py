"""relaxops: fast differentiable algorithms for PyTorch (sorting networks, top-k, rendering, logic gates).

Every op is a PyTorch autograd op with a pure-PyTorch reference, C++ CPU, CUDA and Triton kernels; the
backend is chosen per device (``backend="auto"``, see ``relaxops._backend``).
"""

__version__ = "0.1.0"

from .sortnet import (  # noqa: E402
    MONOTONE_RELAXATIONS,
    NETWORKS,
    RELAXATIONS,
    DiffSortNet,
    DiffTopkNet,
    network_layers,
    rank,
    sort,
    topk,
)

__all__ = ["sort", "rank", "topk", "DiffSortNet", "DiffTopkNet", "network_layers", "NETWORKS", "RELAXATIONS",
           "MONOTONE_RELAXATIONS", "__version__"]
