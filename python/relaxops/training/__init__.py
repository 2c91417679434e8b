"""Training strategies and perturbed structured predictors (``../shared/spec/training.md``): exact batched solvers
(argmax, top-k, sorting, assignment), noise samplers, perturbed predictors with a learnable noise scale (direct
loss minimisation) and the perturbed optimizer of Berthet et al., splitting backpropagation, Newton losses and
RESGRO."""

from .solvers import argmax_onehot, assignment, sort_perm, topk_khot

__all__ = ["argmax_onehot", "topk_khot", "sort_perm", "assignment"]
