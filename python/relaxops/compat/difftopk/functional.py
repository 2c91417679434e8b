"""``difftopk.functional``: ``topk`` and ``execute_topk`` on dense networks, the relaxations ``s_best`` and
``NormalCDF`` and ``SORTING_NETWORK_TYPE`` (diffsort's, see :mod:`relaxops.compat.diffsort.functional`).

Left out: ``execute_sparse_topk``, which runs difftopk's torch-sparse network format (not built here;
``topk(..., sparse=True)`` evaluates dense networks sparsely), and ``SPARSE_INSTALLED`` (whether torch-sparse
imports: nothing here needs it).
"""

from __future__ import annotations

import torch

from ...sortnet.functional import topk as _topk
from ..diffsort.functional import SORTING_NETWORK_TYPE, NormalCDF, _check_call, _network_key, s_best

__all__ = ["topk", "execute_topk", "s_best", "NormalCDF", "SORTING_NETWORK_TYPE"]


def topk(
    sorting_network: SORTING_NETWORK_TYPE,
    vectors: torch.Tensor,
    k: int,
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    distribution: str = "cauchy",
    sparse: bool = False,
):
    """difftopk's ``topk`` on a dense network (from :func:`get_sorting_network` or diffsort): returns
    ``(None, X_top [B, n, k])``. ``sparse`` is accepted and does not change the result."""
    steepness, art_lambda = _check_call(vectors, distribution, steepness, art_lambda)
    key = _network_key(sorting_network, vectors)
    return None, _topk(vectors, k, key, distribution, steepness, art_lambda)


def execute_topk(
    sorting_network: SORTING_NETWORK_TYPE,
    vectors: torch.Tensor,
    k: int,
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    distribution: str = "cauchy",
):
    """difftopk's dense executor: :func:`topk` with ``sparse=False``."""
    return topk(sorting_network, vectors, k, steepness, art_lambda, distribution)
