"""Exact solvers of linear objectives over structured sets (docs/math/training.md §6.3): each returns the float 0/1
indicator tensor (theta's dtype) of a maximiser, batched over any leading dimensions, with a deterministic and
documented tie rule. They are solvers, not relaxations: outputs never require grad (use them inside the perturbed
predictors, which supply the gradient).

Ordering of NaN: ``argmax_onehot``, ``topk_khot`` and ``sort_perm`` follow PyTorch's sort order, in which NaN is
larger than every number (a NaN score is picked first); ``assignment`` refuses non-finite scores.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks
from . import ops, reference

__all__ = ["argmax_onehot", "topk_khot", "sort_perm", "assignment"]


def _scores(t, name: str, min_dim: int = 1) -> None:
    _checks.floating_tensor(t, name, min_dim)


def argmax_onehot(theta: Tensor) -> Tensor:
    """One-hot indicator of the largest entry along the last dimension.

    Args:
        theta: scores ``[..., m]`` with ``m >= 1``, float16/bfloat16/float32/float64.

    Returns:
        ``[..., m]`` of theta's dtype: 1 at ``argmax_i theta_i``, 0 elsewhere. Ties go to the lowest index.
    """
    _scores(theta, "theta")
    if theta.shape[-1] == 0:
        raise ValueError(f"theta must have at least one entry along its last dimension, got shape {tuple(theta.shape)}")
    with torch.no_grad():
        idx = torch.argmax(theta, dim=-1, keepdim=True)  # first maximum (NaN counts as the largest)
        return torch.zeros_like(theta).scatter_(-1, idx, 1.0)


def topk_khot(theta: Tensor, k: int) -> Tensor:
    """k-hot indicator of the ``k`` largest entries along the last dimension (the k-subset of maximum sum).

    Args:
        theta: scores ``[..., n]``, float16/bfloat16/float32/float64.
        k: subset size, an integer in ``[0, n]``.

    Returns:
        ``[..., n]`` of theta's dtype with exactly ``k`` ones per row. Ties go to the lowest indices (the first
        ``k`` of a stable sort on ``(-score, index)``).
    """
    _scores(theta, "theta")
    n = theta.shape[-1]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k must be an integer in [0, {n}] (the size of theta's last dimension), got {k!r}")
    with torch.no_grad():
        idx = torch.sort(theta, dim=-1, descending=True, stable=True).indices[..., :k]
        return torch.zeros_like(theta).scatter_(-1, idx, 1.0)


def sort_perm(s: Tensor, descending: bool = True) -> Tensor:
    """Permutation matrix that sorts ``s`` along its last dimension.

    ``P[..., i, j] = 1`` iff ``s_i`` is the j-th largest entry (``descending=True``) or the j-th smallest
    (``descending=False``); so ``(P^T s)_j`` is the sorted sequence. Ties are broken by index (stable: of equal
    entries the lower index takes the earlier position). For distinct entries this is the unique maximiser of
    ``sum_ij s_i c_j P_ij`` for any strictly decreasing ``c`` (increasing with ``descending=False``), i.e.
    ``assignment(s[..., :, None] * c)``.

    Args:
        s: values ``[..., n]``, float16/bfloat16/float32/float64.
        descending: sort order (bool).

    Returns:
        ``[..., n, n]`` of s's dtype.
    """
    _scores(s, "s")
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, got {type(descending).__name__}")
    n = s.shape[-1]
    _checks.output_fits((*s.shape, n), s.dtype, s.device, "the permutation matrices of sort_perm")
    with torch.no_grad():
        order = torch.sort(s, dim=-1, descending=descending, stable=True).indices  # order[j] = i
        out = torch.zeros(*s.shape, n, dtype=s.dtype, device=s.device)
        return out.scatter_(-2, order.unsqueeze(-2), 1.0)


def assignment(theta: Tensor, *, backend: str = "auto") -> Tensor:
    """Maximum-weight perfect matching (linear assignment) of square score matrices.

    Returns the permutation matrix ``P`` maximising ``sum_ij theta_ij P_ij``: ``P[..., i, j] = 1`` iff row ``i``
    is matched to column ``j``. Exact: the objective equals ``scipy.optimize.linear_sum_assignment(theta,
    maximize=True)``'s on every item (the sums are formed in float64 from the given values).

    Tie rule (several optimal matchings, e.g. integer scores): deterministic for a given backend and input, but
    the backends may return different optimal matchings (same objective value). The reference inserts the rows in
    index order and takes the nearest column of each shortest-path search, the lowest index among equals; the CPU
    kernel starts from Jonker-Volgenant's column reduction (csrc/training/assignment.h). Scores are compared in
    float64 (float16/bfloat16 converted exactly), so an objective equal in exact arithmetic may be split by
    rounding only when scores of very different magnitudes are summed.

    Args:
        theta: scores ``[..., d, d]`` (any leading dimensions, ``d >= 0``), float16/bfloat16/float32/float64, all
            finite (a non-finite score raises ValueError).
        backend: ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"`` (see ``relaxops._backend``; ``auto`` takes the
            CUDA kernel only where it is verified). ``"triton"`` raises NotImplementedError: there is no Triton
            assignment kernel.

    Returns:
        ``[..., d, d]`` of theta's dtype, a 0/1 permutation matrix per item (no gradient).
    """
    _scores(theta, "theta", min_dim=2)
    if theta.shape[-1] != theta.shape[-2]:
        raise ValueError(f"theta must be square in its last two dimensions [..., d, d], got shape {tuple(theta.shape)}")
    if _backend.requested(backend) == "triton":
        raise NotImplementedError(
            "relaxops: there is no Triton assignment kernel (an exact solver is a sequential augmenting-path search "
            "per item, which Triton's block programs do not express well); use backend 'cuda', 'cpu' or 'reference'"
        )
    chosen = _backend.resolve("assignment", backend, theta.device)
    d = theta.shape[-1]
    lead = theta.shape[:-2]
    _checks.output_fits((*lead, d, d), theta.dtype, theta.device, "the permutation matrices of assignment")
    with torch.no_grad():
        flat = theta.detach().reshape(math.prod(lead), d, d)
        if chosen == "reference":
            if flat.numel() and not bool(torch.isfinite(flat).all()):
                raise ValueError("theta must be finite (assignment refuses NaN and +-inf scores)")
            out = reference.assignment_reference(flat)
        else:  # the kernels check finiteness
            work = flat.to(_checks.compute_dtype(flat.dtype)).contiguous()  # float16/bfloat16 -> float32: exact
            run = ops.assignment_matrix if torch.compiler.is_compiling() else ops.assignment_matrix_impl
            out = run(work, chosen).to(flat.dtype)
    return out.reshape(*lead, d, d)
