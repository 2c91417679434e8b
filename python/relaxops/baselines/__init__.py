"""Baselines the relaxed networks are compared against: NeuralSort, SoftSort, the smooth top-k SVM loss."""

from .functional import neuralsort, softsort  # noqa: F401  (public API)
from .smooth_topk import SmoothHardTopKLoss, SmoothTopKLoss, smooth_topk_svm_loss  # noqa: F401
