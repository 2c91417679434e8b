"""Optimal-transport sort, ranks, quantiles and top-k (Cuturi, Teboul, Vert 2019)."""

from .functional import OTTopK, ot_quantile, ot_rank, ot_sort, ot_topk, quantile_targets, squash  # noqa: F401
from .modules import OTSort, OTSortResult  # noqa: F401
