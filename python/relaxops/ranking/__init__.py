"""Ranking on the relaxed sorting operators: soft quantiles, medians and quantile normalisation
(:mod:`relaxops.ranking.functional`) and ranking losses (:mod:`relaxops.ranking.losses`, also ``relaxops.losses``),
along any dimension of padded rows. Conventions and definitions: ``docs/ranking.md``."""

from . import losses
from .functional import quantile_normalize, soft_median, soft_quantile
from .losses import (
    approx_ndcg_loss,
    kendall_loss,
    ndcg,
    neural_ndcg_loss,
    pearson_loss,
    spearman_loss,
    topk_recall_loss,
)

__all__ = [
    "soft_quantile",
    "soft_median",
    "quantile_normalize",
    "spearman_loss",
    "pearson_loss",
    "kendall_loss",
    "ndcg",
    "neural_ndcg_loss",
    "approx_ndcg_loss",
    "topk_recall_loss",
    "losses",
]
