"""relaxops: fast differentiable algorithms for PyTorch (sorting networks, top-k, rendering, logic gates).

Every op is a PyTorch autograd op with a pure-PyTorch reference, C++ CPU, CUDA and Triton kernels; the
backend is chosen per device (``backend="auto"``, see ``relaxops._backend``).
"""

__version__ = "0.1.0"


def _tag_compile_caches():
    """torch.compile's on-disk caches key a graph by its code, not by the fake kernels of the custom ops in it, so a
    graph compiled with another relaxops whose ops returned other shapes would be replayed; relaxops' version in
    torch's cache key tag keeps them apart (the tag is appended to, never replaced)."""
    import torch.compiler.config as cfg  # torch >= 2.6; older versions have no tag (clear the cache after upgrades)

    tag = f"relaxops-{__version__}"
    if tag not in cfg.cache_key_tag.split():
        cfg.cache_key_tag = f"{cfg.cache_key_tag} {tag}".strip()


try:
    _tag_compile_caches()
except (ImportError, AttributeError):
    pass

from ._backend import BackendUnavailableError  # noqa: E402
from .algorithms import bubble_sort, edit_distance, shortest_path  # noqa: E402  (relaxed algorithms)
from .baselines import SmoothHardTopKLoss, SmoothTopKLoss, neuralsort, smooth_topk_svm_loss, softsort  # noqa: E402
from .fastsort import soft_rank, soft_sort  # noqa: E402
from .logic import (  # noqa: E402
    GroupSum,
    LearnableThermometer,
    LogicConv2d,
    LogicLayer,
    LogicLUTLayer,
    OrPooling2d,
    PackedBits,
    PackedLogicNet,
    Thermometer,
    pack_bits,
    unpack_bits,
)
from .otsort import OTSort, ot_quantile, ot_rank, ot_sort, ot_topk  # noqa: E402  (optimal-transport sort)
from .ranking import losses  # noqa: E402  (and relaxops.ranking: quantiles, quantile normalisation)
from .render import Mesh, Renderer, rasterize  # noqa: E402
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
from .sortnet.losses import TopKCrossEntropyLoss, topk_cross_entropy  # noqa: E402

__all__ = [
    "sort",
    "rank",
    "topk",
    "DiffSortNet",
    "DiffTopkNet",
    "TopKCrossEntropyLoss",
    "topk_cross_entropy",
    "neuralsort",
    "softsort",
    "SmoothTopKLoss",
    "SmoothHardTopKLoss",
    "smooth_topk_svm_loss",
    "network_layers",
    "NETWORKS",
    "RELAXATIONS",
    "MONOTONE_RELAXATIONS",
    "LogicLayer",
    "LogicLUTLayer",
    "LogicConv2d",
    "OrPooling2d",
    "Thermometer",
    "LearnableThermometer",
    "GroupSum",
    "PackedLogicNet",
    "PackedBits",
    "pack_bits",
    "unpack_bits",
    "Renderer",
    "Mesh",
    "rasterize",
    "bubble_sort",
    "edit_distance",
    "shortest_path",
    "BackendUnavailableError",
    "__version__",
]
__all__ += ["soft_rank", "soft_sort"]
__all__ += ["ot_sort", "ot_rank", "ot_quantile", "ot_topk", "OTSort"]  # optimal-transport sort
__all__ += ["ranking", "losses"]
