"""Differentiable sorting networks: relaxed comparator networks, permutation matrices and ranks."""

from .functional import rank, sort
from .modules import DiffSortNet
from .networks import NETWORKS, get_network, network_layers
from .relaxations import MONOTONE_RELAXATIONS, RELAXATIONS

__all__ = ["sort", "rank", "DiffSortNet", "network_layers", "get_network", "NETWORKS", "RELAXATIONS",
           "MONOTONE_RELAXATIONS"]
