"""Training strategies and perturbed structured predictors (docs/math/training.md): exact batched solvers
(argmax, top-k, sorting, assignment), noise samplers, perturbed predictors with a learnable noise scale (direct
loss minimisation) and the perturbed optimizer of Berthet et al., splitting backpropagation, Newton losses and
RESGRO.

Files: solvers.py (+ reference.py, ops.py and csrc/training/ for the assignment kernel); noise.py, perturbed.py and
modules.py (perturbed predictors, docs/math/training.md §5, §6.2, §6.4-§6.6); split.py, newton.py, resgro.py (§1-§3,
§6.1)."""

from .modules import PerturbedArgmax, PerturbedMatching, PerturbedSort, PerturbedTopK
from .newton import (
    GRAD_HESS,
    NewtonLoss,
    SingularCurvatureError,
    bce_grad_hess,
    mse_grad_hess,
    newton_target,
    perturbed_argmax_fy,
    sbce_grad_hess,
    smce_grad_hess,
    smoothing_grad_hess,
)
from .noise import NOISE_KINDS, sample_noise
from .perturbed import (
    direct_loss,
    fenchel_young_loss,
    hamming_coeffs,
    knn_coeffs,
    matching_sort_coeffs,
    perturbed,
    perturbed_direct,
)
from .resgro import ResgroLoss, resgro_target
from .solvers import argmax_onehot, assignment, sort_perm, topk_khot
from .split import split_loss

__all__ = [
    "argmax_onehot",
    "topk_khot",
    "sort_perm",
    "assignment",
    "NOISE_KINDS",
    "sample_noise",
    "perturbed_direct",
    "direct_loss",
    "matching_sort_coeffs",
    "knn_coeffs",
    "hamming_coeffs",
    "perturbed",
    "fenchel_young_loss",
    "PerturbedArgmax",
    "PerturbedTopK",
    "PerturbedMatching",
    "PerturbedSort",
    "split_loss",
    "newton_target",
    "NewtonLoss",
    "SingularCurvatureError",
    "GRAD_HESS",
    "smce_grad_hess",
    "bce_grad_hess",
    "sbce_grad_hess",
    "mse_grad_hess",
    "smoothing_grad_hess",
    "perturbed_argmax_fy",
    "resgro_target",
    "ResgroLoss",
]
