"""``torchsort.ops``: ``soft_rank``, ``soft_sort`` and the autograd functions ``SoftRank`` / ``SoftSort``
(``apply(values, regularization, regularization_strength)``), backed by relaxops' fast soft sort kernels (see the
package docstring).

Left out of torchsort's ``ops`` module: its isotonic regression solvers, the per-device dicts ``isotonic_l2``,
``isotonic_kl``, ``isotonic_l2_backward``, ``isotonic_kl_backward`` and the extension functions in them
(``isotonic_l2_cpu``, ``isotonic_kl_cpu``, ``isotonic_l2_backward_cpu``, ``isotonic_kl_backward_cpu``,
``isotonic_l2_cuda``, ``isotonic_kl_cuda``, ``isotonic_l2_backward_cuda``, ``isotonic_kl_backward_cuda``): relaxops'
kernels fuse the pool-adjacent-violators pass into the sort and its backward, so there is no separate solver to
expose; and the private helpers ``_arange_like`` and ``_inv_permutation``.
"""

from __future__ import annotations

import torch

from ... import fastsort

__all__ = ["soft_rank", "soft_sort", "SoftRank", "SoftSort"]


def _check(values, regularization) -> torch.Tensor:
    """torchsort's checks; integer tensors become the default float dtype (torchsort's result dtype for them)."""
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"'values' should be a torch.Tensor, got {type(values).__name__}")
    if len(values.shape) != 2:
        raise ValueError(f"'values' should be a 2d-tensor but got {values.shape}")
    if regularization not in ["l2", "kl"]:
        raise ValueError("'regularization' should be a 'l2' or 'kl'")
    if values.dtype == torch.bool or values.dtype.is_complex:
        raise TypeError(f"'values' should hold real numbers, got {values.dtype}")
    if not values.dtype.is_floating_point:
        values = values.to(torch.get_default_dtype())
    return values


def soft_rank(values: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
    """Soft ranks of each row of ``values [B, n]``: 1-based, ascending (the largest gets ~n), torchsort's values."""
    values = _check(values, regularization)
    return fastsort.soft_rank(values, regularization, regularization_strength)


def soft_sort(values: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
    """Soft sorted values of each row of ``values [B, n]``, ascending, torchsort's values."""
    values = _check(values, regularization)
    return fastsort.soft_sort(values, regularization, regularization_strength)


class SoftRank:
    """torchsort's ``SoftRank`` autograd function: ``SoftRank.apply(tensor [B, n], regularization="l2",
    regularization_strength=1.0)`` is :func:`soft_rank` (relaxops' op carries the autograd)."""

    @staticmethod
    def apply(tensor: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
        return soft_rank(tensor, regularization, regularization_strength)


class SoftSort:
    """torchsort's ``SoftSort`` autograd function: ``SoftSort.apply(tensor [B, n], regularization="l2",
    regularization_strength=1.0)`` is :func:`soft_sort`."""

    @staticmethod
    def apply(tensor: torch.Tensor, regularization: str = "l2", regularization_strength: float = 1.0) -> torch.Tensor:
        return soft_sort(tensor, regularization, regularization_strength)
