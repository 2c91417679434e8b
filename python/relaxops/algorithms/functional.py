"""Public fused relaxed algorithms: one call, one forward and one backward kernel each (argument checks here)."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _checks
from . import ops, reference

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------


def _edit_distance_args(s, t, beta, return_matrix):
    for name, x in (("s", s), ("t", t)):
        _checks.floating_tensor(x, name, min_dim=2)
    if t.dtype != s.dtype:
        raise TypeError(f"t must have the dtype of s ({s.dtype}), got {t.dtype}")
    if t.device != s.device:
        raise ValueError(f"t must be on the device of s ({s.device}), got {t.device}")
    if s.shape[-1] < 1 or t.shape[-1] != s.shape[-1]:
        raise ValueError(f"s and t must have the same letter dimension K >= 1 (their last), got shapes "
                         f"{tuple(s.shape)} and {tuple(t.shape)}")
    if t.shape[:-2] != s.shape[:-2]:
        raise ValueError(f"s [..., n, K] and t [..., m, K] must have the same batch dimensions, got shapes "
                         f"{tuple(s.shape)} and {tuple(t.shape)}")
    beta = _checks.positive_finite(beta, "beta")
    if not isinstance(return_matrix, bool):
        raise TypeError(f"return_matrix must be a bool, got {type(return_matrix).__name__}")
    return beta


def edit_distance(s: Tensor, t: Tensor, beta: float = 5.0, *, return_matrix: bool = False,
                  backend: str = "auto") -> Tensor | tuple[Tensor, Tensor]:
    """Relaxed edit (Levenshtein) distance of two sequences of letter distributions (AlgoVision, spec 4.4).

    The dynamic program of the Levenshtein distance with the relaxed minimum ``Min_beta(X) = sum_k softmin(beta
    X)_k X_k`` and the substitution cost ``1 - cos(s_i, t_j)``::

        D[i, 0] = i,  D[0, j] = j
        D[i + 1, j + 1] = Min_beta(D[i, j + 1] + 1, D[i + 1, j] + 1, D[i, j] + 1 - cos(s_i, t_j))

    and the distance ``D[n, m]``. The cosine is ``torch.nn.functional.cosine_similarity``'s (eps = 1e-8): ``<x, y> /
    (max(|x|, eps) max(|y|, eps))``, each norm clamped on its own, the clamp not differentiated. For one-hot letters
    the cost is the 0/1 substitution cost, and as ``beta`` grows the distance tends to the exact edit distance.
    This is AlgoVision's program (its ``If(CosineSimilarity)`` gives ``cost = 1 - cos``) computed exactly: AlgoVision
    skips a branch whose probability is at most its ``epsilon`` for the whole batch, which the fused op never does
    (it equals the program built with ``epsilon = 0``). One forward and one backward kernel per call: O(n m K) time
    and O(n m) memory per row.

    Non-finite letters make the cosines they enter NaN: the distance of their row and the row's gradient are NaN;
    other rows are unaffected.

    Args:
        s: ``[..., n, K]`` float16/bfloat16/float32/float64 (half types computed in float32), ``n >= 0``: the first
            sequence, one vector of ``K >= 1`` letter probabilities (or any non-negative scores) per position.
        t: ``[..., m, K]``, ``m >= 0``, the same batch dimensions, dtype and device as ``s``.
        beta: inverse temperature of the relaxed minimum, finite and > 0 (AlgoVision's ``Min(beta)``).
        return_matrix: also return the DP matrix ``D``.
        backend: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"triton"`` or ``"reference"``.

    Returns:
        the distance ``[...]`` (``n`` if ``m = 0`` and ``m`` if ``n = 0``), and with ``return_matrix`` also ``D [...,
        n + 1, m + 1]``; in s's dtype, differentiable with respect to ``s`` and ``t``.
    """
    beta = _edit_distance_args(s, t, beta, return_matrix)
    backend = _backend.resolve("edit_distance", backend, s.device)
    cdtype = _checks.compute_dtype(s.dtype)
    batch, n, m, K = tuple(s.shape[:-2]), s.shape[-2], t.shape[-2], s.shape[-1]
    rows = 1
    for d in batch:
        rows *= d
    if not torch.compiler.is_compiling():
        # D, cos and the backward's G and cos gradient per cell; the reference's graph keeps ~20 tensors per cell
        per_row = (4 * (n + 1) * (m + 1) + (n + m) * K * 3) * cdtype.itemsize
        if backend == "reference":
            per_row += 20 * (n + 1) * (m + 1) * cdtype.itemsize
        _checks.memory_fits(rows * per_row, s.device, f"the edit distance of shapes {tuple(s.shape)} and "
                            f"{tuple(t.shape)} ({cdtype}) on backend {backend!r}", "use a smaller batch")
    sb = s.reshape(rows, n, K).to(cdtype)
    tb = t.reshape(rows, m, K).to(cdtype)
    if backend == "reference":
        D = reference.edit_distance(sb, tb, beta)
    else:
        D, _ = ops.edit_distance_fwd(sb.contiguous(), tb.contiguous(), beta, backend)
    D = D.reshape(*batch, n + 1, m + 1).to(s.dtype)
    distance = D[..., n, m]
    return (distance, D) if return_matrix else distance




# --- bubble sort --------------------------------------------------------------------------------------------------

