"""Logic layer and group sum as functions: argument checks, coefficients, layout and backend choice."""

from __future__ import annotations

import numbers

import torch

from .. import _backend, _checks
from . import ops, parametrize, reference
from .connections import check_connection, check_conv_leaves, conv_inverse_index, inverse_index
from .gates import NUM_GATES, gate_coefficients

_KERNEL_DTYPES = {"cpu": (torch.float32, torch.float64)}


def _options(parametrization, sampling, temperature, gates, device) -> tuple[float, torch.Tensor | None]:
    """Checked ``(temperature, mask)``; ``gates`` is None, a bool mask ``[16]`` or gate names / ids."""
    tau = parametrize.check_options(parametrization, sampling, temperature)
    if gates is None:
        return tau, None
    if parametrization != "softmax":
        raise ValueError(
            f"gates restricts the 16-gate softmax; it needs parametrization='softmax', got {parametrization!r}"
        )
    if isinstance(gates, torch.Tensor) and gates.dtype == torch.bool:
        bad = f"gates: a bool mask must have shape [16] and allow a gate, got {list(gates.shape)}"
        if gates.shape != (NUM_GATES,):
            raise ValueError(bad)
        if not _checks.on_host(gates):
            _checks.assert_on_device(gates.any(), bad)
        elif not bool(gates.any()):
            raise ValueError(bad)
        return tau, gates.to(device)
    return tau, parametrize.gate_mask(gates, device)


def _fast_path(parametrization, sampling, tau, mask, training) -> bool:
    """Today's op: softmax logits in, the coefficients computed inside the op (training: soft at tau = 1)."""
    return parametrization == "softmax" and mask is None and (not training or (sampling == "soft" and tau == 1.0))


def _table(weights, parametrization, sampling, tau, mask, training, acc) -> tuple[torch.Tensor, int, int, float]:
    """``(coef [n, 4], act code, seed, noise_scale)`` of every configuration but the fast path: the table by
    autograd (``parametrize.lut_table``), the noise seed drawn here (walsh, gumbel modes, training)."""
    q, act = parametrize.lut_table(
        weights.reshape(-1, weights.shape[-1]), parametrization, 2, training, sampling, tau, mask, dtype=acc
    )
    gumbel = training and parametrization == "walsh" and sampling.startswith("gumbel")
    return parametrize.coefficients(q), ops.ACT_CODES[act], (parametrize.new_seed() if gumbel else -1), 1.0 / tau


def logic_layer(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    weights: torch.Tensor,
    training: bool = True,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    parametrization: str = "softmax",
    sampling: str = "soft",
    temperature: float = 1.0,
    gates=None,
) -> torch.Tensor:
    """One layer of relaxed logic gates: ``y[..., j] = sum_i p_ji f_i(x[..., a[j]], x[..., b[j]])``.

    Args:
        x: ``[..., n_in]`` float tensor of input probabilities (values in ``[0, 1]``).
        a, b: int64 ``[n_out]`` input indices of each neuron's first (A) and second (B) input.
        weights: ``[n_out, 16]`` gate logits (softmax; ``p = softmax(weights)`` in training, the one-hot of the
            argmax, the discretized gate, otherwise) or ``[n_out, 4]`` (light, walsh). Differentiable in training.
        training: relaxed (True) or discretized (False) gates.
        csr: the inverse index ``connections.inverse_index(a, b, n_in)`` (built here when None).
        backend: ``auto``, ``reference``, ``cpu``, ``cuda`` or ``triton``.
        parametrization, sampling, temperature: docs/math/logic.md §10 (``parametrize``): ``"softmax"``,
            ``"light"`` or ``"walsh"``; ``"soft"``, ``"hard"``, ``"gumbel_soft"`` or ``"gumbel_hard"``; ``tau > 0``.
        gates: softmax only: the allowed gates (names or ids, or a bool mask ``[16]``); the others get
            probability 0 in training and are never the discretized gate.

    Returns:
        ``[..., n_out]`` in x's dtype. Computed with the 4-coefficient form; float16/bfloat16 accumulate in
        float32. The compiled kernels work on the transposed (feature-major) layout and return a transposed view,
        so chained layers pass activations without copies.
    """
    _checks.floating_tensor(x, "x")
    n_in = x.shape[-1]
    if (
        not all(isinstance(t, torch.Tensor) for t in (a, b))
        or a.dim() != 1
        or a.shape != b.shape
        or a.dtype != torch.int64
        or b.dtype != torch.int64
    ):
        raise ValueError(
            f"a and b must be int64 vectors of one length, got {getattr(a, 'shape', a)!r} "
            f"{getattr(a, 'dtype', '')} and {getattr(b, 'shape', b)!r} {getattr(b, 'dtype', '')}"
        )
    check_connection(a, "a", n_in, a.shape[0])
    check_connection(b, "b", n_in, a.shape[0])
    tau, mask = _options(parametrization, sampling, temperature, gates, weights.device)
    m = parametrize.num_params(parametrization, 2)
    if weights.shape != (a.shape[0], m):
        raise ValueError(f"weights must have shape [n_out, {m}] = [{a.shape[0]}, {m}], got {tuple(weights.shape)}")
    requested = backend
    fast = _fast_path(parametrization, sampling, tau, mask, training)
    # Own family for the other configurations: `auto` on a GPU takes their kernels only once verified themselves.
    backend = _backend.resolve("logic" if fast else "logic_act", backend, x.device)
    if backend in _KERNEL_DTYPES and x.dtype not in _KERNEL_DTYPES[backend]:
        if requested != "auto":
            raise TypeError(f"x: backend {backend!r} supports {_KERNEL_DTYPES[backend]}, got {x.dtype}")
        backend = "reference"
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if not fast:
        coef, act, seed, scale = _table(weights, parametrization, sampling, tau, mask, training, acc)
    if backend == "reference":
        if fast:
            return reference.logic_layer(x, a, b, gate_coefficients(weights, training, acc))
        return reference.logic_layer_act(x, a, b, coef, parametrize.ACTS[act], seed, scale)
    if csr is None:
        csr = inverse_index(a, b, n_in)
    batch = x.shape[:-1]
    xt = ops.feature_major(x.reshape(-1, n_in))  # free for the output of a previous layer
    if fast:
        # The op computes the coefficients itself (eval mode: no gradient reaches the logits, as through the argmax).
        w = weights.to(acc).contiguous() if training else weights.detach().to(acc).contiguous()
        yt, _ = ops.logic_fwd(xt, a, b, w, csr[0], csr[1], training, backend)
    else:
        yt, _ = ops.logic_act_fwd(xt, a, b, coef.contiguous(), csr[0], csr[1], act, seed, scale, backend)
    y = yt.t()
    return y if len(batch) == 1 else y.reshape(*batch, a.shape[0])


def group_sum(x: torch.Tensor, k: int, tau: float = 1.0, beta=0.0) -> torch.Tensor:
    """``x [..., n]`` -> ``[..., k]``: the sums of ``k`` contiguous groups of ``n / k`` outputs, divided by
    ``tau``, plus ``beta`` (a number or a tensor ``[k]``, one offset per output): ``sum / tau + beta`` (GroupSum of
    difflogic for ``beta = 0``; the regression head of docs/math/logic.md §12)."""
    _checks.floating_tensor(x, "x")
    if x.shape[-1] % k:
        raise ValueError(f"k={k} must divide the number of inputs {x.shape[-1]} of GroupSum")
    if isinstance(beta, torch.Tensor) and beta.shape not in ((), (k,)):
        raise ValueError(f"beta must be a number or a tensor [k] = [{k}], got shape {tuple(beta.shape)}")
    if x.dim() == 2 and not x.is_contiguous() and x.t().is_contiguous():  # a logic layer's feature-major output
        return (x.t().reshape(k, x.shape[1] // k, x.shape[0]).sum(1) / tau).t() + beta
    return reference.group_sum(x, k, tau, beta)


def _pair_arg(v, name: str, lo: int) -> tuple[int, int]:
    """``v`` as ``(height, width)``: an integer for both, or a pair of integers, each ``>= lo``."""
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(t) != 2 or any(isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < lo for i in t):
        raise ValueError(f"{name} must be an integer >= {lo} or a pair of them, got {v!r}")
    return int(t[0]), int(t[1])


def logic_conv2d(
    x: torch.Tensor,
    leaves: torch.Tensor,
    weights: torch.Tensor,
    kernel_size,
    stride=1,
    padding=0,
    training: bool = True,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    parametrization: str = "softmax",
    sampling: str = "soft",
    temperature: float = 1.0,
    gates=None,
) -> torch.Tensor:
    """Convolution with logic gate trees (see :class:`relaxops.logic.LogicConv2d` for the conventions).

    Args:
        x: ``[B, C_in, H, W]`` float tensor of probabilities (values in ``[0, 1]``), or a Boolean tensor.
        leaves: int64 ``[C_out, L, 3]``: ``(channel, dy, dx)`` of each tree's ``L = 2**d`` leaves.
        weights: ``[C_out, L - 1, 16]`` gate logits of the tree nodes (node order: the ``L / 2`` nodes above the
            leaves first, the root last). ``softmax`` in training, ``argmax`` otherwise. ``[C_out, L - 1, 4]`` for
            the light and walsh parametrizations.
        parametrization, sampling, temperature, gates: per node, as :func:`logic_layer` (docs/math/logic.md §10;
            walsh's gumbel noise is drawn per node output).
        kernel_size, stride, padding: integers or pairs ``(h, w)``; zero padding.
        training: relaxed (True) or discretized (False) gates.
        csr: ``connections.conv_inverse_index(leaves, C_in)`` (built here when None).
        backend: ``auto``, ``reference``, ``cpu``, ``cuda`` or ``triton`` (Triton: depth <= 12). On GPUs ``auto``
            takes a CUDA / Triton kernel only once verified (``_backend.VERIFIED_GPU`` or ``python -m relaxops
            selftest`` on this device), else the reference.

    Returns:
        ``[B, C_out, Ho, Wo]``, ``Ho = (H + 2 ph - kh) // sh + 1`` (same for W); in x's dtype, Boolean for a
        Boolean ``x`` in eval mode (exact: the argmax gates on 0/1 values give 0/1).
    """
    kh, kw = _pair_arg(kernel_size, "kernel_size", 1)
    sh, sw = _pair_arg(stride, "stride", 1)
    ph, pw = _pair_arg(padding, "padding", 0)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    boolean = x.dtype == torch.bool
    if boolean:
        x = x.to(weights.dtype if weights.dtype.is_floating_point else torch.float32)
    _checks.floating_tensor(x, "x")
    if x.dim() != 4:
        raise ValueError(f"x must have shape [B, C_in, H, W], got {tuple(x.shape)}")
    B, C_in, H, W = x.shape
    if not isinstance(leaves, torch.Tensor) or leaves.dim() != 3 or leaves.shape[-1] != 3:
        raise ValueError(f"leaves must be an int64 tensor [C_out, L, 3], got {getattr(leaves, 'shape', leaves)!r}")
    C_out, L = leaves.shape[0], leaves.shape[1]
    if L < 2 or L & (L - 1):
        raise ValueError(f"leaves: the number of leaves per tree must be a power of two >= 2, got {L}")
    check_conv_leaves(leaves, "leaves", C_in, C_out, L, (kh, kw))
    tau, mask = _options(parametrization, sampling, temperature, gates, x.device)
    m = parametrize.num_params(parametrization, 2)
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (C_out, L - 1, m):
        raise ValueError(
            f"weights must have shape [C_out, L - 1, {m}] = [{C_out}, {L - 1}, {m}], got "
            f"{tuple(getattr(weights, 'shape', ()))}"
        )
    if H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(f"kernel_size {(kh, kw)} is larger than the padded input {(H + 2 * ph, W + 2 * pw)}")
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    if not torch.compiler.is_compiling():
        _checks.output_fits((B, C_out, Ho, Wo), x.dtype, x.device, "logic_conv2d output")
    requested = backend
    # Own family for the backend choice: `auto` takes a GPU conv kernel only once it is verified itself.
    backend = _backend.resolve("logic_conv", backend, x.device)
    if backend != "reference" and x.dtype not in ops._DATA_DTYPES[backend]:
        if requested != "auto":
            raise ValueError(
                f"backend {backend!r} has no logic_conv2d kernel for {x.dtype} (cpu: float32/float64; "
                "cuda, triton: float32/float64/float16/bfloat16)"
            )
        backend = "reference"
    if backend == "triton" and requested == "auto" and L > 1 << ops.TRITON_MAX_CONV_DEPTH:
        backend = "reference"  # deeper trees than the Triton tile holds (an explicit request raises)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    geometry = [kh, kw, sh, sw, ph, pw]
    fast = _fast_path(parametrization, sampling, tau, mask, training)
    if not fast:
        coef, act, seed, scale = _table(weights, parametrization, sampling, tau, mask, training, acc)
        coef = coef.reshape(C_out, L - 1, 4)
    if backend == "reference" and fast:
        y = reference.logic_conv2d(x, leaves, gate_coefficients(weights, training, acc), (kh, kw), (sh, sw), (ph, pw))
    elif backend == "reference":
        y = reference.logic_conv2d_act(
            x, leaves, coef, (kh, kw), (sh, sw), (ph, pw), parametrize.ACTS[act], seed, scale
        )
    elif not fast:
        if csr is None:
            csr = conv_inverse_index(leaves, C_in)
        y = ops.logic_conv_act_fwd(
            x.contiguous(), leaves.to(torch.int64).contiguous(), coef.contiguous(), csr[0], csr[1], geometry, act,
            seed, scale, backend,
        )  # fmt: skip
    else:
        if csr is None:
            csr = conv_inverse_index(leaves, C_in)
        w = weights.to(acc).contiguous() if training else weights.detach().to(acc).contiguous()
        y, _ = ops.logic_conv_fwd(
            x.contiguous(),
            leaves.to(torch.int64).contiguous(),
            w,
            csr[0],
            csr[1],
            geometry,
            training,
            backend,
        )
    return y.to(torch.bool) if boolean and not training else y
