"""Differentiable sorting and top-k networks: relaxed comparator networks, permutation and top-k matrices, ranks."""

from .functional import rank, sort, topk
from .modules import DiffSortNet, DiffTopkNet
from .networks import NETWORKS, get_network, network_layers
from .relaxations import MONOTONE_RELAXATIONS, RELAXATIONS

__all__ = [
    "sort",
    "rank",
    "topk",
    "DiffSortNet",
    "DiffTopkNet",
    "network_layers",
    "get_network",
    "NETWORKS",
    "RELAXATIONS",
    "MONOTONE_RELAXATIONS",
]
