"""Training strategies and perturbed structured predictors (``../shared/spec/training.md``): exact batched solvers
(argmax, top-k, sorting, assignment), noise samplers, perturbed predictors with a learnable noise scale (direct
loss minimisation) and the perturbed optimizer of Berthet et al., splitting backpropagation, Newton losses and
RESGRO."""

# Splitting backpropagation, Newton losses, RESGRO (spec parts A-C, F.1): split.py, newton.py, resgro.py
from .newton import (  # noqa: E402
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
from .resgro import ResgroLoss, resgro_target  # noqa: E402
from .split import split_loss  # noqa: E402

__all__ = [
    "split_loss", "newton_target", "NewtonLoss", "SingularCurvatureError", "GRAD_HESS", "smce_grad_hess",
    "bce_grad_hess", "sbce_grad_hess", "mse_grad_hess", "smoothing_grad_hess", "perturbed_argmax_fy",
    "resgro_target", "ResgroLoss",
]
