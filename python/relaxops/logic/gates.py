"""The 16 two-input gates (docs/math/logic.md §1): ids, names, truth tables and relaxed coefficients.

The gate id is the truth table read in the input order (A, B) = 00, 01, 10, 11 with 00 the most significant
bit: ``id = 8 T(0,0) + 4 T(0,1) + 2 T(1,0) + T(1,1)``. The probabilistic relaxation of gate i is bilinear,
``f_i(a, b) = c0 + c1 a + c2 b + c3 a b`` with ``[c0, c1, c2, c3] = GATE_COEF[i]`` (``csrc/logic/logic.h`` holds
the same table; a test asserts they agree).
"""

from __future__ import annotations

import math

import torch

from .. import _checks

NUM_GATES = 16

# difflogic's compiler names, in id order.
GATE_NAMES = (
    "zero", "and", "not_implies", "a", "not_implied_by", "b", "xor", "or",
    "not_or", "not_xor", "not_b", "implied_by", "not_a", "implies", "not_and", "one",
)  # fmt: skip

# TRUTH[i] = [T(0,0), T(0,1), T(1,0), T(1,1)] of gate i.
TRUTH = tuple(tuple((i >> (3 - k)) & 1 for k in range(4)) for i in range(NUM_GATES))

# [c0, c1, c2, c3] = T @ K (docs/math/logic.md §1.2):
# c0 = T00, c1 = T10 - T00, c2 = T01 - T00, c3 = T11 - T10 - T01 + T00.
GATE_COEF = tuple((t00, t10 - t00, t01 - t00, t11 - t10 - t01 + t00) for (t00, t01, t10, t11) in TRUTH)


def coef_matrix(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The 16 x 4 matrix M with ``f_i(a, b) = M[i] . [1, a, b, a b]``."""
    return _checks.to_device(GATE_COEF, dtype, device)


def gate_coefficients(weights: torch.Tensor, training: bool, dtype: torch.dtype) -> torch.Tensor:
    """``[n_out, 4]`` coefficients ``p^T M`` of the neurons: ``p = softmax(weights)`` in training, the one-hot of
    ``argmax(weights)`` (ties: lowest id) in eval mode; computed in ``dtype`` (float32, or float64)."""
    if training:
        p = torch.softmax(weights.to(dtype), dim=-1)
    else:
        p = torch.nn.functional.one_hot(weights.argmax(-1), NUM_GATES).to(dtype)
    return p @ coef_matrix(dtype, weights.device)


def truth_matrix(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The 16 x 4 matrix T with ``f_i(a, b) = T[i] . [(1-a)(1-b), (1-a) b, a (1-b), a b]``."""
    return _checks.to_device(TRUTH, dtype, device)


def gate_ids(weights: torch.Tensor) -> torch.Tensor:
    """Gate id of each neuron in eval mode: ``argmax`` of its 16 logits (ties: lowest id, as torch.argmax)."""
    return weights.argmax(-1)


GATE_A = GATE_NAMES.index("a")  # the pass-through of the first input (truth table 0011)
GATE_INITS = ("random", "residual")


def init_gate_logits(
    n: int, init: str = "random", residual_probability: float = 0.9, device=None, dtype=None
) -> torch.Tensor:
    """Initial gate logits ``[n, 16]``: ``"random"``, difflogic's ``N(0, 1)``; ``"residual"`` (Petersen et al.
    2024, convolutional logic gate networks), every neuron starting as the pass-through gate ``a``: logit
    ``log(15 p / (1 - p))`` for it and 0 for the other 15 gates, so ``softmax`` gives it probability ``p =
    residual_probability``, and deep networks start close to the identity on their first inputs."""
    if init not in GATE_INITS:
        raise ValueError(f"init must be one of {list(GATE_INITS)}, got {init!r}")
    if init == "random":
        return torch.randn(n, NUM_GATES, device=device, dtype=dtype)
    p = residual_probability
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 1 / NUM_GATES < p < 1:
        raise ValueError(f"residual_probability must be a number in (1/16, 1), got {p!r}")
    logits = torch.zeros(n, NUM_GATES, device=device, dtype=dtype)
    logits[:, GATE_A] = math.log(15 * p / (1 - p))  # in float64, then rounded once to dtype
    return logits
