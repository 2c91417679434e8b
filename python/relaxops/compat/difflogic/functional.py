"""``difflogic.functional``: the relaxed gates ``bin_op`` / ``bin_op_s``, ``get_unique_connections``, ``GradFactor``
and ``BITS_TO_NP_DTYPE`` (the numpy word types of ``PackBitsTensor.t``)."""

from __future__ import annotations

import numbers

import numpy as np
import torch

from ...logic.connections import unique_connections
from ...logic.gates import NUM_GATES
from ...logic.modules import _GradFactor as GradFactor
from ...logic.reference import gate_values

__all__ = ["bin_op", "bin_op_s", "get_unique_connections", "GradFactor", "BITS_TO_NP_DTYPE"]

BITS_TO_NP_DTYPE = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def bin_op(a: torch.Tensor, b: torch.Tensor, i: int) -> torch.Tensor:
    """Relaxed gate ``i`` (0..15, in the order of ``compiled_model.ALL_OPERATIONS``) of the probabilities ``a``
    and ``b`` (difflogic's formulas, e.g. ``a + b - 2 a b`` for xor, gate 6)."""
    if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < NUM_GATES:
        raise ValueError(f"i must be a gate id in [0, {NUM_GATES}), got {i!r}")
    return gate_values(a, b)[..., int(i)]


def bin_op_s(a: torch.Tensor, b: torch.Tensor, i_s: torch.Tensor) -> torch.Tensor:
    """The expectation ``sum_i i_s[..., i] bin_op(a, b, i)`` over the 16 gates (``i_s [..., 16]`` probabilities)."""
    return (gate_values(a, b) * i_s).sum(-1)


def get_unique_connections(in_dim: int, out_dim: int, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """difflogic's ``'unique'`` connections ``(a, b)`` (int64 ``[out_dim]`` on ``device``): distinct neighbouring
    pairs first, shuffled over the neurons by ``torch.randperm``."""
    a, b = unique_connections(in_dim, out_dim)
    return a.to(device), b.to(device)
