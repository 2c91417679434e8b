"""Training strategies and perturbed structured predictors (``../shared/spec/training.md``): exact batched solvers
(argmax, top-k, sorting, assignment), noise samplers, perturbed predictors with a learnable noise scale (direct
loss minimisation) and the perturbed optimizer of Berthet et al., splitting backpropagation, Newton losses and
RESGRO."""

from .solvers import argmax_onehot, assignment, sort_perm, topk_khot

__all__ = ["argmax_onehot", "topk_khot", "sort_perm", "assignment"]

# perturbed structured predictors (spec parts E, F.2, F.4-F.6)
from .modules import PerturbedArgmax, PerturbedMatching, PerturbedSort, PerturbedTopK  # noqa: E402
from .noise import NOISE_KINDS, sample_noise  # noqa: E402
from .perturbed import (  # noqa: E402
    direct_loss,
    fenchel_young_loss,
    hamming_coeffs,
    knn_coeffs,
    matching_sort_coeffs,
    perturbed,
    perturbed_direct,
)

__all__ += [
    "NOISE_KINDS", "sample_noise", "perturbed_direct", "direct_loss", "matching_sort_coeffs", "knn_coeffs",
    "hamming_coeffs", "perturbed", "fenchel_young_loss", "PerturbedArgmax", "PerturbedTopK", "PerturbedMatching",
    "PerturbedSort",
]
