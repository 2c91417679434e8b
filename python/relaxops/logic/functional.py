"""Logic layer and group sum as functions: argument checks, coefficients, layout and backend choice."""

from __future__ import annotations

import torch

from .. import _backend, _checks
from . import ops, reference
from .connections import check_connection, inverse_index
from .gates import gate_coefficients

_KERNEL_DTYPES = {"cpu": (torch.float32, torch.float64)}


def logic_layer(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    weights: torch.Tensor,
    training: bool = True,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """One layer of relaxed logic gates: ``y[..., j] = sum_i p_ji f_i(x[..., a[j]], x[..., b[j]])``.

    Args:
        x: ``[..., n_in]`` float tensor of input probabilities (values in ``[0, 1]``).
        a, b: int64 ``[n_out]`` input indices of each neuron's first (A) and second (B) input.
        weights: ``[n_out, 16]`` gate logits; ``p = softmax(weights)`` in training, the one-hot of the argmax
            (the discretized gate) otherwise. Differentiable in training.
        training: relaxed (True) or discretized (False) gates.
        csr: the inverse index ``connections.inverse_index(a, b, n_in)`` (built here when None).
        backend: ``auto``, ``reference``, ``cpu``, ``cuda`` or ``triton``.

    Returns:
        ``[..., n_out]`` in x's dtype. Computed with the 4-coefficient form; float16/bfloat16 accumulate in
        float32. The compiled kernels work on the transposed (feature-major) layout and return a transposed view,
        so chained layers pass activations without copies.
    """
    _checks.floating_tensor(x, "x")
    n_in = x.shape[-1]
    if not all(isinstance(t, torch.Tensor) for t in (a, b)) or a.dim() != 1 or a.shape != b.shape \
            or a.dtype != torch.int64 or b.dtype != torch.int64:
        raise ValueError(f"a and b must be int64 vectors of one length, got {getattr(a, 'shape', a)!r} "
                         f"{getattr(a, 'dtype', '')} and {getattr(b, 'shape', b)!r} {getattr(b, 'dtype', '')}")
    check_connection(a, "a", n_in, a.shape[0])
    check_connection(b, "b", n_in, a.shape[0])
    if weights.shape != (a.shape[0], 16):
        raise ValueError(f"weights must have shape [n_out, 16] = [{a.shape[0]}, 16], got {tuple(weights.shape)}")
    requested = backend
    backend = _backend.resolve("logic", backend, x.device)
    if backend in _KERNEL_DTYPES and x.dtype not in _KERNEL_DTYPES[backend]:
        if requested != "auto":
            raise TypeError(f"x: backend {backend!r} supports {_KERNEL_DTYPES[backend]}, got {x.dtype}")
        backend = "reference"
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if backend == "reference":
        return reference.logic_layer(x, a, b, gate_coefficients(weights, training, acc))
    if csr is None:
        csr = inverse_index(a, b, n_in)
    batch = x.shape[:-1]
    xt = ops.feature_major(x.reshape(-1, n_in))  # free for the output of a previous layer
    # The op computes the coefficients itself (eval mode: no gradient reaches the logits, as through the argmax).
    w = weights.to(acc).contiguous() if training else weights.detach().to(acc).contiguous()
    yt, _ = ops.logic_fwd(xt, a, b, w, csr[0], csr[1], training, backend)
    y = yt.t()
    return y if len(batch) == 1 else y.reshape(*batch, a.shape[0])


def group_sum(x: torch.Tensor, k: int, tau: float = 1.0) -> torch.Tensor:
    """``x [..., n]`` -> ``[..., k]``: the sums of ``k`` contiguous groups of ``n / k`` outputs, divided by
    ``tau`` (GroupSum of difflogic)."""
    _checks.floating_tensor(x, "x")
    if x.shape[-1] % k:
        raise ValueError(f"k={k} must divide the number of inputs {x.shape[-1]} of GroupSum")
    if x.dim() == 2 and not x.is_contiguous() and x.t().is_contiguous():  # a logic layer's feature-major output
        return (x.t().reshape(k, x.shape[1] // k, x.shape[0]).sum(1) / tau).t()
    return reference.group_sum(x, k, tau)
