"""Drop-in replacement for ``torchsort`` 0.1.10 (Blondel et al.'s fast soft sort and soft rank): ``soft_rank`` and
``soft_sort`` with its signatures, conventions and results, computed by relaxops' kernels.

Switch with one import: ``from relaxops.compat import torchsort``. Same arguments (``values`` a 2-D ``[B, n]``
tensor, ``regularization`` ``"l2"`` or ``"kl"``, ``regularization_strength``), same errors for a tensor that is not
2-D or an unknown regularization, same values (ascending, ranks 1-based) and gradients. Deliberate differences:

* accurate in float32 at small strengths (torchsort's ``soft_sort`` forms ``rho / eps`` and loses ~0.1 at n = 1000,
  eps = 1e-4), and finite KL gradients where torchsort's overflow (it exponentiates ``x / eps`` unshifted);
* the backward uses the block structure recorded by the forward, not blocks recovered with a 1e-9 tolerance;
* bfloat16 works (computed in float32), and so does a CPU build next to nvcc without CUDA torch;
* a ``regularization_strength`` that is not a finite number > 0 raises ``ValueError`` (torchsort returns NaN/inf).

``relaxops.soft_rank`` / ``relaxops.soft_sort`` take any batch dimensions and a ``descending`` flag as well.
"""

from __future__ import annotations

import torch

from .. import fastsort

__all__ = ["soft_rank", "soft_sort"]


def _check(values, regularization):
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"'values' should be a torch.Tensor, got {type(values).__name__}")
    if len(values.shape) != 2:
        raise ValueError(f"'values' should be a 2d-tensor but got {values.shape}")
    if regularization not in ["l2", "kl"]:
        raise ValueError("'regularization' should be a 'l2' or 'kl'")


def soft_rank(values: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
    """Soft ranks of each row of ``values [B, n]``: 1-based, ascending (the largest gets ~n), torchsort's values."""
    _check(values, regularization)
    return fastsort.soft_rank(values, regularization, regularization_strength)


def soft_sort(values: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
    """Soft sorted values of each row of ``values [B, n]``, ascending, torchsort's values."""
    _check(values, regularization)
    return fastsort.soft_sort(values, regularization, regularization_strength)
