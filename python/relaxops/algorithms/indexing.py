"""Relaxed indexing (docs/math/algorithms.md §1.9, §2.9): read an array at a real-valued position through a normalised
logistic (or Gaussian) filter, or at a categorical distribution over positions. Usable inside lambdas of the framework
and as the weights of a relaxed write (``Let('arr', [weights], value)``).

``A<i> = sum_j c_j A_j`` with ``c_j = g(j - i) / stop_gradient(sum_k g(k - i))`` over all valid positions: the
normalisation holds in the forward pass only, so the optimiser cannot exploit the filter mass that falls outside the
array (relaxops' choice; AlgoVision has no such helper). ``g`` is the logistic density ``(beta / 4) sech^2(beta d / 2)``
(scale ``1 / beta``) or the Gaussian ``exp(-(beta d)^2 / 2)`` (std ``1 / beta``); several dims use the separable
product.
"""

from __future__ import annotations

import torch
from torch import Tensor

KERNELS = ("logistic", "gaussian")


def _check(i: Tensor, beta, kernel: str):
    if not isinstance(i, Tensor) or i.dim() != 2 or not i.is_floating_point():
        raise ValueError(
            f"i must be a floating tensor of shape [B, k] (k indexed dims), got "
            f"{list(i.shape) if isinstance(i, Tensor) else type(i).__name__}"
        )
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise ValueError(f"beta must be a positive number, got {beta!r}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def _weights_1d(n: int, i: Tensor, beta: float, kernel: str) -> Tensor:
    """``[B, n]`` filter weights at the positions ``0..n-1`` around ``i [B]``, normalised by a constant."""
    d = torch.arange(n, dtype=i.dtype, device=i.device) - i.unsqueeze(-1)
    if kernel == "logistic":
        e = torch.exp(-(beta * d).abs())  # (beta / 4) sech^2(beta d / 2) = beta e / (1 + e)^2, no overflow
        g = beta * e / (1 + e) ** 2
    else:
        g = torch.exp(-0.5 * (beta * d) ** 2)
    return g / g.sum(-1, keepdim=True).detach().clamp_min(torch.finfo(g.dtype).tiny)


def soft_index_weights(shape, i: Tensor, beta: float, kernel: str = "logistic") -> Tensor:
    """The weights ``c [B, *shape]`` of reading an array whose first indexed dims have sizes ``shape`` at the real
    positions ``i [B, len(shape)]`` (they sum to 1 unless every weight underflows)."""
    _check(i, beta, kernel)
    shape = tuple(int(s) for s in shape)
    if i.shape[1] != len(shape) or any(s < 1 for s in shape):
        raise ValueError(
            f"i must have one column per indexed dim ({len(shape)}) and the dims must be >= 1, got i "
            f"{list(i.shape)} for shape {list(shape)}"
        )
    c = _weights_1d(shape[0], i[:, 0], float(beta), kernel)
    for d in range(1, len(shape)):
        c = c.unsqueeze(-1) * _weights_1d(shape[d], i[:, d], float(beta), kernel).view(
            (i.shape[0],) + (1,) * d + (shape[d],)
        )
    return c


def soft_index(A: Tensor, i: Tensor, beta: float, kernel: str = "logistic") -> Tensor:
    """``A [B, n_1..n_k, *rest]`` read at the real positions ``i [B, k]``: ``[B, *rest]``."""
    _check(i, beta, kernel)
    k = i.shape[1]
    if not isinstance(A, Tensor) or A.dim() < k + 1 or A.shape[0] != i.shape[0]:
        raise ValueError(
            f"A must have shape [B, n_1..n_{k}, ...] with B = {i.shape[0]}, got "
            f"{list(A.shape) if isinstance(A, Tensor) else type(A).__name__}"
        )
    c = soft_index_weights(A.shape[1 : 1 + k], i, beta, kernel)
    return cat_index(A.flatten(1, k) if k > 1 else A, c.flatten(1))


def cat_index(A: Tensor, pi: Tensor) -> Tensor:
    """``sum_j pi_j A_j``: ``A [B, n, *rest]`` read at the categorical distribution ``pi [B, n]``: ``[B, *rest]``."""
    if (
        not isinstance(A, Tensor)
        or not isinstance(pi, Tensor)
        or pi.dim() != 2
        or A.dim() < 2
        or (A.shape[:2] != pi.shape)
    ):
        raise ValueError(
            f"A [B, n, ...] and pi [B, n] must agree, got {list(getattr(A, 'shape', []))} and "
            f"{list(getattr(pi, 'shape', []))}"
        )
    rest = A.shape[2:]
    return torch.bmm(pi.unsqueeze(1).to(A.dtype), A.reshape(A.shape[0], A.shape[1], -1)).view(A.shape[0], *rest)
