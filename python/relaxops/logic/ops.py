"""Autograd op of the logic layer, registered with ``torch.library``.

``relaxops::logic_fwd(xt, a, b, w, csr_start, csr_entry, training, backend) -> (yt, coef)`` on FEATURE-MAJOR
contiguous buffers (``csrc/logic/logic.h``): ``xt [n_in, B]``, ``yt [n_out, B]``, the gate logits ``w [n_out, 16]``
and the coefficients ``coef [n_out, 4]`` the op derives from them (softmax in training, argmax in eval mode;
float32, float64 for float64 data; ``coef`` is returned for the backward and is not differentiable). Its backward
``relaxops::logic_bwd`` returns ``(grad_xt, grad_w)``, an empty tensor for a gradient not asked for: the kernels
give the coefficient gradient, mapped to the logits by the softmax Jacobian (C++ on CPU, torch elsewhere). Saved
for backward: ``xt``, ``w`` and ``coef`` (the output is not needed). The CSR inverse index
(``connections.inverse_index``) is an input so that the backward gathers deterministically without atomics.
``backend`` is a concrete backend (``cpu``, ``cuda``, ``triton``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks, _ext
from .connections import check_conv_inverse_index, check_inverse_index, check_lut_inverse_index
from .gates import coef_matrix, gate_coefficients

_CUDA_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}
# Data dtypes of each concrete backend (coefficients and logits: float32, float64 for float64 data).
_DATA_DTYPES = {"cpu": (torch.float32, torch.float64), "cuda": tuple(_CUDA_DTYPES), "triton": tuple(_CUDA_DTYPES)}


class _CpuKernels:
    @staticmethod
    def transpose(x, out):
        _ext._C.logic_transpose(_ext.dtype_code(x), x.shape[0], x.shape[1], _ext.ptr(x), _ext.ptr(out))

    @staticmethod
    def coef(w, training, coef):
        _ext._C.logic_coef(_ext.dtype_code(w), w.shape[0], _ext.ptr(w), training, _ext.ptr(coef))

    @staticmethod
    def coef_backward(w, grad_coef, grad_w):
        _ext._C.logic_coef_backward(_ext.dtype_code(w), w.shape[0], _ext.ptr(w), _ext.ptr(grad_coef), _ext.ptr(grad_w))

    @staticmethod
    def forward(xt, a, b, coef, yt):
        _ext._C.logic_forward(
            _ext.dtype_code(xt),
            xt.shape[1],
            xt.shape[0],
            a.shape[0],
            _ext.ptr(xt),
            _ext.ptr(a),
            _ext.ptr(b),
            _ext.ptr(coef),
            _ext.ptr(yt),
        )

    @staticmethod
    def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef):
        _ext._C.logic_backward(
            _ext.dtype_code(xt),
            xt.shape[1],
            xt.shape[0],
            a.shape[0],
            _ext.ptr(xt),
            _ext.ptr(a),
            _ext.ptr(b),
            _ext.ptr(coef),
            _ext.ptr(grad_yt),
            _ext.ptr(csr_start),
            _ext.ptr(csr_entry),
            _ext.ptr(grad_xt),
            _ext.ptr(grad_coef),
        )

    @staticmethod
    def act_forward(xt, a, b, coef, act, seed, noise_scale, yt, st):
        _ext._C.logic_forward_act(
            _ext.dtype_code(xt), xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt), _ext.ptr(a), _ext.ptr(b),
            _ext.ptr(coef), act, seed, noise_scale, _ext.ptr(yt), _ext.ptr(st),
        )  # fmt: skip

    @staticmethod
    def act_grad(grad_yt, sig, grad_u):
        _ext._C.logic_act_grad(
            _ext.dtype_code(grad_yt), grad_yt.numel(), _ext.ptr(grad_yt), _ext.ptr(sig), _ext.ptr(grad_u)
        )

    @staticmethod
    def conv_act_forward(x, leaves, coef, geometry, act, seed, noise_scale, y):
        _ext._C.logic_conv_forward_act(
            _ext.dtype_code(x), _conv_shape_args(x, leaves), tuple(geometry), _ext.ptr(x), _ext.ptr(leaves),
            _ext.ptr(coef), act, seed, noise_scale, _ext.ptr(y),
        )  # fmt: skip

    @staticmethod
    def conv_act_backward(x, leaves, coef, geometry, act, seed, noise_scale, grad_y, csr_start, csr_entry, grad_x,
                          grad_coef):  # fmt: skip
        _ext._C.logic_conv_backward_act(
            _ext.dtype_code(x), _conv_shape_args(x, leaves), tuple(geometry), _ext.ptr(x), _ext.ptr(leaves),
            _ext.ptr(coef), act, seed, noise_scale, _ext.ptr(grad_y), _ext.ptr(csr_start), _ext.ptr(csr_entry),
            _ext.ptr(grad_x), _ext.ptr(grad_coef),
        )  # fmt: skip

    @staticmethod
    def conv_forward(x, leaves, coef, geometry, y):
        _ext._C.logic_conv_forward(
            _ext.dtype_code(x),
            _conv_shape_args(x, leaves),
            tuple(geometry),
            _ext.ptr(x),
            _ext.ptr(leaves),
            _ext.ptr(coef),
            _ext.ptr(y),
        )

    @staticmethod
    def conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef):
        _ext._C.logic_conv_backward(
            _ext.dtype_code(x),
            _conv_shape_args(x, leaves),
            tuple(geometry),
            _ext.ptr(x),
            _ext.ptr(leaves),
            _ext.ptr(coef),
            _ext.ptr(grad_y),
            _ext.ptr(csr_start),
            _ext.ptr(csr_entry),
            _ext.ptr(grad_x),
            _ext.ptr(grad_coef),
        )


class _CudaKernels:
    @staticmethod
    def forward(xt, a, b, coef, yt):
        _ext._cuda.logic_forward(
            _CUDA_DTYPES[xt.dtype],
            xt.shape[1],
            xt.shape[0],
            a.shape[0],
            _ext.ptr(xt),
            _ext.ptr(a),
            _ext.ptr(b),
            _ext.ptr(coef),
            _ext.ptr(yt),
            _ext.stream(xt.device),
        )

    @staticmethod
    def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef):
        _ext._cuda.logic_backward(
            _CUDA_DTYPES[xt.dtype],
            xt.shape[1],
            xt.shape[0],
            a.shape[0],
            _ext.ptr(xt),
            _ext.ptr(a),
            _ext.ptr(b),
            _ext.ptr(coef),
            _ext.ptr(grad_yt),
            _ext.ptr(csr_start),
            _ext.ptr(csr_entry),
            _ext.ptr(grad_xt),
            _ext.ptr(grad_coef),
            _ext.stream(xt.device),
        )

    @staticmethod
    def conv_forward(x, leaves, coef, geometry, y):
        _ext._cuda.logic_conv_forward(
            _CUDA_DTYPES[x.dtype],
            _conv_shape_args(x, leaves),
            tuple(geometry),
            _ext.ptr(x),
            _ext.ptr(leaves),
            _ext.ptr(coef),
            _ext.ptr(y),
            _ext.stream(x.device),
        )

    @staticmethod
    def act_forward(xt, a, b, coef, act, seed, noise_scale, yt, st):
        _ext._cuda.logic_forward_act(
            _CUDA_DTYPES[xt.dtype], xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt), _ext.ptr(a), _ext.ptr(b),
            _ext.ptr(coef), act, seed, noise_scale, _ext.ptr(yt), _ext.ptr(st), _ext.stream(xt.device),
        )  # fmt: skip

    @staticmethod
    def act_grad(grad_yt, sig, grad_u):
        _ext._cuda.logic_act_grad(
            _CUDA_DTYPES[grad_yt.dtype], grad_yt.numel(), _ext.ptr(grad_yt), _ext.ptr(sig), _ext.ptr(grad_u),
            _ext.stream(grad_yt.device),
        )  # fmt: skip

    @staticmethod
    def conv_act_forward(x, leaves, coef, geometry, act, seed, noise_scale, y):
        _ext._cuda.logic_conv_forward_act(
            _CUDA_DTYPES[x.dtype], _conv_shape_args(x, leaves), tuple(geometry), _ext.ptr(x), _ext.ptr(leaves),
            _ext.ptr(coef), act, seed, noise_scale, _ext.ptr(y), _ext.stream(x.device),
        )  # fmt: skip

    @staticmethod
    def conv_act_backward(x, leaves, coef, geometry, act, seed, noise_scale, grad_y, csr_start, csr_entry, grad_x,
                          grad_coef):  # fmt: skip
        code, shape = _CUDA_DTYPES[x.dtype], _conv_shape_args(x, leaves)
        nbytes = _ext._cuda.logic_conv_backward_workspace(
            code, shape, tuple(geometry), grad_x is not None, grad_coef is not None
        )
        workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=x.device)
        _ext._cuda.logic_conv_backward_act(
            code, shape, tuple(geometry), _ext.ptr(x), _ext.ptr(leaves), _ext.ptr(coef), act, seed, noise_scale,
            _ext.ptr(grad_y), _ext.ptr(csr_start), _ext.ptr(csr_entry), _ext.ptr(grad_x), _ext.ptr(grad_coef),
            _ext.ptr(workspace), _ext.stream(x.device),
        )  # fmt: skip

    @staticmethod
    def conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef):
        code, shape = _CUDA_DTYPES[x.dtype], _conv_shape_args(x, leaves)
        nbytes = _ext._cuda.logic_conv_backward_workspace(
            code, shape, tuple(geometry), grad_x is not None, grad_coef is not None
        )
        workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=x.device)
        _ext._cuda.logic_conv_backward(
            code,
            shape,
            tuple(geometry),
            _ext.ptr(x),
            _ext.ptr(leaves),
            _ext.ptr(coef),
            _ext.ptr(grad_y),
            _ext.ptr(csr_start),
            _ext.ptr(csr_entry),
            _ext.ptr(grad_x),
            _ext.ptr(grad_coef),
            _ext.ptr(workspace),
            _ext.stream(x.device),
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels, f"{__package__}.triton")


def _coef(kernels, w: Tensor, training: bool) -> Tensor:
    if hasattr(kernels, "coef"):
        coef = w.new_empty(w.shape[0], 4)
        kernels.coef(w, training, coef)
        return coef
    return gate_coefficients(w, training, w.dtype)


def _coef_backward(kernels, w: Tensor, grad_coef: Tensor) -> Tensor:
    """``d loss / d w`` from ``d loss / d coef`` through ``coef = softmax(w) M``."""
    if hasattr(kernels, "coef_backward"):
        grad_w = torch.empty_like(w)
        kernels.coef_backward(w, grad_coef, grad_w)
        return grad_w
    p = torch.softmax(w, -1)
    u = grad_coef @ coef_matrix(w.dtype, w.device).t()
    return p * (u - (p * u).sum(-1, keepdim=True))


def _check_args(op: str, xt, a, b, w, csr_start, csr_entry, backend) -> None:
    """The registered ops are public: everything the kernels index with is checked first (plain ``if``s, errors
    naming the op and the argument). The CSR content is checked by the backward, the op that reads it (the C++
    kernel checks it itself, in one pass)."""
    if not isinstance(backend, str) or backend not in _DATA_DTYPES:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_DATA_DTYPES)}, got {backend!r}")
    _checks.kernel_tensor(op, "xt", xt, dtypes=_DATA_DTYPES[backend], shape=(None, None))
    _backend.require(f"relaxops::{op}", backend, xt.device)
    n_in, dev = xt.shape[0], xt.device
    _checks.index_tensor(op, "a", a, n_in, dtypes=(torch.int64,), device=dev, shape=(None,))
    n_out = a.shape[0]
    _checks.index_tensor(op, "b", b, n_in, dtypes=(torch.int64,), device=dev, shape=(n_out,))
    _checks.kernel_tensor(op, "w", w, dtypes=(_checks.compute_dtype(xt.dtype),), device=dev, shape=(n_out, 16))
    _checks.kernel_tensor(op, "csr_start", csr_start, dtypes=(torch.int64,), device=dev, shape=(n_in + 1,))
    _checks.kernel_tensor(op, "csr_entry", csr_entry, dtypes=(torch.int64,), device=dev, shape=(2 * n_out,))


@torch.library.custom_op("relaxops::logic_fwd", mutates_args=())
def logic_fwd(
    xt: Tensor, a: Tensor, b: Tensor, w: Tensor, csr_start: Tensor, csr_entry: Tensor, training: bool, backend: str
) -> tuple[Tensor, Tensor]:
    _check_args("logic_fwd", xt, a, b, w, csr_start, csr_entry, backend)
    kernels = _kernels("logic_fwd", backend, xt.device)
    coef = _coef(kernels, w, training)
    yt = xt.new_empty(a.shape[0], xt.shape[1])
    kernels.forward(xt, a, b, coef, yt)
    return yt, coef


@logic_fwd.register_fake
def _(xt, a, b, w, csr_start, csr_entry, training, backend):
    _check_args("logic_fwd", xt, a, b, w, csr_start, csr_entry, backend)
    return xt.new_empty(a.shape[0], xt.shape[1]), w.new_empty(w.shape[0], 4)


def _check_bwd_args(grad_yt, xt, a, b, w, coef, csr_start, csr_entry, need_x, backend) -> None:
    _check_args("logic_bwd", xt, a, b, w, csr_start, csr_entry, backend)
    _checks.kernel_tensor(
        "logic_bwd", "grad_yt", grad_yt, dtypes=(xt.dtype,), device=xt.device, shape=(a.shape[0], xt.shape[1])
    )
    _checks.kernel_tensor("logic_bwd", "coef", coef, dtypes=(w.dtype,), device=xt.device, shape=(a.shape[0], 4))
    if need_x and backend != "cpu":
        check_inverse_index("logic_bwd", a, b, csr_start, csr_entry)


@torch.library.custom_op("relaxops::logic_bwd", mutates_args=())
def logic_bwd(
    grad_yt: Tensor,
    xt: Tensor,
    a: Tensor,
    b: Tensor,
    w: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    need_x: bool,
    need_w: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _check_bwd_args(grad_yt, xt, a, b, w, coef, csr_start, csr_entry, need_x, backend)
    kernels = _kernels("logic_bwd", backend, xt.device)
    grad_xt = torch.empty_like(xt) if need_x else xt.new_empty(0)
    grad_coef = torch.empty_like(coef) if need_w else None
    if need_x or need_w:
        kernels.backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt if need_x else None, grad_coef)
    return grad_xt, (_coef_backward(kernels, w, grad_coef) if need_w else w.new_empty(0))


@logic_bwd.register_fake
def _(grad_yt, xt, a, b, w, coef, csr_start, csr_entry, need_x, need_w, backend):
    _check_bwd_args(grad_yt, xt, a, b, w, coef, csr_start, csr_entry, need_x, backend)
    return (torch.empty_like(xt) if need_x else xt.new_empty(0), torch.empty_like(w) if need_w else w.new_empty(0))


@torch.library.custom_op("relaxops::logic_transpose", mutates_args=())
def logic_transpose(x: Tensor) -> Tensor:
    """``x [R, C]`` -> contiguous ``[C, R]``: the change between the sample-major layout of PyTorch and the
    feature-major one of the kernels (a tiled C++ kernel for CPU float32/float64, torch elsewhere)."""
    _check_transpose(x)
    if x.dtype in _ext._DTYPE_CODES and _backend.unavailable_reason("cpu", x.device) is None:
        out = x.new_empty(x.shape[1], x.shape[0])
        _kernels("logic_transpose", "cpu", x.device).transpose(x.contiguous(), out)
        return out
    return x.t().clone(memory_format=torch.contiguous_format)  # never x itself (a custom op must not alias)


def _check_transpose(x) -> None:
    _checks.kernel_tensor("logic_transpose", "x", x, shape=(None, None), contiguous=False)


@logic_transpose.register_fake
def _(x):
    _check_transpose(x)
    return x.new_empty(x.shape[1], x.shape[0])


def _transpose_setup(ctx, inputs, output):
    pass


# The gradient goes back as a transposed view: no copy (autograd accepts any strides).
logic_transpose.register_autograd(lambda ctx, grad: grad.t(), setup_context=_transpose_setup)


def feature_major(x: Tensor) -> Tensor:
    """The contiguous transpose of a 2-D tensor; free when ``x`` is itself the transposed view of one."""
    return x.t() if x.t().is_contiguous() else logic_transpose(x.contiguous())


def _setup(ctx, inputs, output):
    xt, a, b, w, csr_start, csr_entry, training, backend = inputs
    ctx.save_for_backward(xt, a, b, w, output[1], csr_start, csr_entry)
    ctx.mark_non_differentiable(output[1])
    ctx.backend, ctx.training = backend, training


def _backward(ctx, grad_yt, _grad_coef):
    xt, a, b, w, coef, csr_start, csr_entry = ctx.saved_tensors
    # Eval mode: the argmax passes no gradient to the logits.
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[3] and ctx.training
    grad_xt, grad_w = logic_bwd(
        feature_major(grad_yt.t()), xt, a, b, w, coef, csr_start, csr_entry, need_x, need_w, ctx.backend
    )
    return (grad_xt if need_x else None), None, None, (grad_w if need_w else None), None, None, None, None


logic_fwd.register_autograd(_backward, setup_context=_setup)


# --- tree convolutions (LogicConv2d, csrc/logic/conv.h) --------------------------------------------------
#
# ``relaxops::logic_conv_fwd(x, leaves, w, csr_start, csr_entry, geometry, training, backend) -> (y, coef)``:
# ``x [B, C_in, H, W]``, ``leaves`` int64 ``[C_out, L, 3]`` = (channel, dy, dx), the node logits ``w [C_out, L - 1,
# 16]`` (float32; float64 for float64 data), ``geometry = [kh, kw, sh, sw, ph, pw]`` -> ``y [B, C_out, Ho, Wo]``
# and the node coefficients ``coef [C_out, L - 1, 4]`` (softmax in training, argmax in eval; not
# differentiable, returned for the backward). Saved for backward: ``x``, ``w``, ``coef`` (the backward
# recomputes the trees instead of saving their node values). ``relaxops::logic_conv_bwd`` returns ``(grad_x,
# grad_w)``, an empty tensor for a gradient not asked for. Backends: ``cpu`` (float32/float64), ``cuda`` and
# ``triton`` (also float16/bfloat16 data, float32 coefficients; Triton: trees of depth <= 12). The GPU backends'
# inverse index is checked here (the C++ CPU kernel checks its own).

_CONV_BACKENDS = ("cpu", "cuda", "triton")
TRITON_MAX_CONV_DEPTH = 12  # the Triton conv kernels' limit (logic/triton.py imports it from here)


def _conv_check_args(op: str, x, leaves, w, csr_start, csr_entry, geometry, backend) -> tuple[int, ...]:
    if not isinstance(backend, str) or backend not in _CONV_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_CONV_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "x", x, dtypes=_DATA_DTYPES[backend], shape=(None, None, None, None))
    _backend.require(f"relaxops::{op}", backend, x.device)
    if not isinstance(geometry, (list, tuple)) or len(geometry) != 6:
        raise ValueError(f"relaxops::{op}: geometry must be [kh, kw, sh, sw, ph, pw], got {geometry!r}")
    kh, kw, sh, sw, ph, pw = geometry
    for name, v, lo in (("kh", kh, 1), ("kw", kw, 1), ("sh", sh, 1), ("sw", sw, 1), ("ph", ph, 0), ("pw", pw, 0)):
        _checks.int_in_range(op, name, v, lo, 1 << 20)
    B, C_in, H, W = x.shape
    if C_in < 1 or H < 1 or W < 1:
        raise ValueError(f"relaxops::{op}: x must have at least one channel, row and column, got {list(x.shape)}")
    if H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(
            f"relaxops::{op}: the kernel {kh}x{kw} is larger than the padded input {H + 2 * ph}x{W + 2 * pw}"
        )
    _checks.kernel_tensor(op, "leaves", leaves, dtypes=(torch.int64,), device=x.device, shape=(None, None, 3))
    C_out, L = leaves.shape[0], leaves.shape[1]
    if L < 2 or L & (L - 1) or L > 1 << 16:
        raise ValueError(f"relaxops::{op}: leaves per tree must be a power of two in [2, 65536], got {L}")
    checked = ("leaves", C_in, kh, kw)
    if leaves.numel() and not _checks.values_unknown(leaves) and not _checks.already_checked(checked, leaves):
        for i, (name, high) in enumerate((("channel", C_in), ("dy", kh), ("dx", kw))):
            t = leaves[..., i]
            if not _checks.on_host(t):
                _checks.assert_on_device(
                    (t >= 0) & (t < high), f"relaxops::{op}: leaves' {name} must lie in [0, {high})"
                )
                continue
            lo, hi = (int(v) for v in torch.aminmax(t))
            if lo < 0 or hi >= high:
                raise IndexError(f"relaxops::{op}: leaves' {name} must lie in [0, {high}), found [{lo}, {hi}]")
        _checks.mark_checked(checked, leaves)
    if w is not None:
        _checks.kernel_tensor(
            op, "w", w, dtypes=(_checks.compute_dtype(x.dtype),), device=x.device, shape=(C_out, L - 1, 16)
        )
    _checks.kernel_tensor(op, "csr_start", csr_start, dtypes=(torch.int64,), device=x.device, shape=(C_in + 1,))
    _checks.kernel_tensor(op, "csr_entry", csr_entry, dtypes=(torch.int64,), device=x.device, shape=(C_out * L,))
    if backend == "triton" and L > 1 << TRITON_MAX_CONV_DEPTH:  # the tile holds all L leaves of a position
        raise ValueError(
            f"relaxops::{op}: the Triton kernels take trees of depth <= {TRITON_MAX_CONV_DEPTH} "
            f"(L <= {1 << TRITON_MAX_CONV_DEPTH}), got L = {L}; use backend 'cuda' or 'cpu'"
        )
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    return B, C_in, H, W, C_out, L, Ho, Wo


def _conv_shape_args(x, leaves):
    B, C_in, H, W = x.shape
    return (B, C_in, H, W, leaves.shape[0], leaves.shape[1])


@torch.library.custom_op("relaxops::logic_conv_fwd", mutates_args=())
def logic_conv_fwd(
    x: Tensor,
    leaves: Tensor,
    w: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    geometry: list[int],
    training: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_args(
        "logic_conv_fwd", x, leaves, w, csr_start, csr_entry, geometry, backend
    )
    kernels = _kernels("logic_conv_fwd", backend, x.device)
    coef = _coef(kernels, w.reshape(-1, 16), training).reshape(C_out, L - 1, 4)
    y = x.new_empty(B, C_out, Ho, Wo)
    kernels.conv_forward(x, leaves, coef, geometry, y)
    return y, coef


@logic_conv_fwd.register_fake
def _(x, leaves, w, csr_start, csr_entry, geometry, training, backend):
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_args(
        "logic_conv_fwd", x, leaves, w, csr_start, csr_entry, geometry, backend
    )
    return x.new_empty(B, C_out, Ho, Wo), w.new_empty(C_out, L - 1, 4)


def _conv_check_bwd_args(grad_y, x, leaves, w, coef, csr_start, csr_entry, geometry, need_x, backend) -> None:
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_args(
        "logic_conv_bwd", x, leaves, w, csr_start, csr_entry, geometry, backend
    )
    _checks.kernel_tensor(
        "logic_conv_bwd", "grad_y", grad_y, dtypes=(x.dtype,), device=x.device, shape=(B, C_out, Ho, Wo)
    )
    _checks.kernel_tensor("logic_conv_bwd", "coef", coef, dtypes=(w.dtype,), device=x.device, shape=(C_out, L - 1, 4))
    if need_x and backend != "cpu":
        check_conv_inverse_index("logic_conv_bwd", leaves, csr_start, csr_entry)


@torch.library.custom_op("relaxops::logic_conv_bwd", mutates_args=())
def logic_conv_bwd(
    grad_y: Tensor,
    x: Tensor,
    leaves: Tensor,
    w: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    geometry: list[int],
    need_x: bool,
    need_w: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _conv_check_bwd_args(grad_y, x, leaves, w, coef, csr_start, csr_entry, geometry, need_x, backend)
    kernels = _kernels("logic_conv_bwd", backend, x.device)
    grad_x = torch.empty_like(x) if need_x else x.new_empty(0)
    grad_coef = torch.empty_like(coef) if need_w else None
    if need_x or need_w:
        kernels.conv_backward(
            x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x if need_x else None, grad_coef
        )
    if not need_w:
        return grad_x, w.new_empty(0)
    grad_w = _coef_backward(kernels, w.reshape(-1, 16), grad_coef.reshape(-1, 4)).reshape(w.shape)
    return grad_x, grad_w


@logic_conv_bwd.register_fake
def _(grad_y, x, leaves, w, coef, csr_start, csr_entry, geometry, need_x, need_w, backend):
    _conv_check_bwd_args(grad_y, x, leaves, w, coef, csr_start, csr_entry, geometry, need_x, backend)
    return (torch.empty_like(x) if need_x else x.new_empty(0), torch.empty_like(w) if need_w else w.new_empty(0))


def _conv_setup(ctx, inputs, output):
    x, leaves, w, csr_start, csr_entry, geometry, training, backend = inputs
    ctx.save_for_backward(x, leaves, w, output[1], csr_start, csr_entry)
    ctx.mark_non_differentiable(output[1])
    ctx.geometry, ctx.backend, ctx.training = geometry, backend, training


def _conv_backward(ctx, grad_y, _grad_coef):
    x, leaves, w, coef, csr_start, csr_entry = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2] and ctx.training
    grad_x, grad_w = logic_conv_bwd(
        grad_y.contiguous(), x, leaves, w, coef, csr_start, csr_entry, ctx.geometry, need_x, need_w, ctx.backend
    )
    return (grad_x if need_x else None), None, (grad_w if need_w else None), None, None, None, None, None


logic_conv_fwd.register_autograd(_conv_backward, setup_context=_conv_setup)


# --- parametrized layers: coefficients in, output activation and noise (docs/math/logic.md §10) -----------------
#
# ``relaxops::logic_act_fwd(xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend) -> (yt, st)``
# takes the coefficients ``coef [n_out, 4]`` themselves (computed by the caller with autograd from any parametrization,
# ``parametrize.lut_table``), and ``yt[j, s] = act(u + noise_scale L(seed, s n_out + j))`` with ``u`` the bilinear
# form of the plain op, ``act`` 0 (none), 1 (sigmoid) or 2 (sigmoid_st: forward ``1[z > 0]``, backward
# ``sigmoid'(z)``), ``L`` the counter-based logistic noise of ``parametrize.logistic_noise`` at the SAMPLE-MAJOR flat
# output index (``seed < 0``: no noise); ``st = sigmoid(z)`` for sigmoid_st, empty ``[0]`` otherwise. Its backward
# ``relaxops::logic_act_bwd`` returns ``(grad_xt, grad_coef)``: the kernels first form ``grad_u = grad_yt sig (1 -
# sig)`` from the saved sigmoid ``sig`` (``yt`` for the sigmoid, ``st`` for sigmoid_st; z and the noise are not
# recomputed) and then run the plain backward on it. ``relaxops::logic_conv_act_fwd`` / ``logic_conv_act_bwd``: the
# same for the tree convolution, with the activation and noise at every node (noise index ``((((b C_out + k) Ho +
# oy) Wo + ox) (L - 1) + node)``); there the node values are not stored, so its backward recomputes them, ``z`` and
# the noise. Saved for the conv's backward: the inputs (not the output).

ACT_CODES = {"none": 0, "sigmoid": 1, "sigmoid_st": 2}


def _check_act_args(op: str, coef, shape: tuple, act, seed, noise_scale, data) -> None:
    dtypes = (_checks.compute_dtype(data.dtype),)
    _checks.kernel_tensor(op, "coef", coef, dtypes=dtypes, device=data.device, shape=shape)
    if isinstance(act, bool) or act not in (0, 1, 2):
        raise ValueError(f"relaxops::{op}: act must be 0 (none), 1 (sigmoid) or 2 (sigmoid_st), got {act!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not -1 <= seed < 2**32:
        raise ValueError(f"relaxops::{op}: seed must be an integer in [-1, 2^32), got {seed!r}")
    if not isinstance(noise_scale, (int, float)) or not math.isfinite(noise_scale):
        raise ValueError(f"relaxops::{op}: noise_scale must be a finite number, got {noise_scale!r}")


def _plain(act: int, seed: int) -> bool:
    return act == 0 and seed < 0


def _check_dense_act_args(op, xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend) -> None:
    if not isinstance(backend, str) or backend not in _DATA_DTYPES:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_DATA_DTYPES)}, got {backend!r}")
    _checks.kernel_tensor(op, "xt", xt, dtypes=_DATA_DTYPES[backend], shape=(None, None))
    _backend.require(f"relaxops::{op}", backend, xt.device)
    n_in, dev = xt.shape[0], xt.device
    _checks.index_tensor(op, "a", a, n_in, dtypes=(torch.int64,), device=dev, shape=(None,))
    n_out = a.shape[0]
    _checks.index_tensor(op, "b", b, n_in, dtypes=(torch.int64,), device=dev, shape=(n_out,))
    _checks.kernel_tensor(op, "csr_start", csr_start, dtypes=(torch.int64,), device=dev, shape=(n_in + 1,))
    _checks.kernel_tensor(op, "csr_entry", csr_entry, dtypes=(torch.int64,), device=dev, shape=(2 * n_out,))
    _check_act_args(op, coef, (n_out, 4), act, seed, noise_scale, xt)


@torch.library.custom_op("relaxops::logic_act_fwd", mutates_args=())
def logic_act_fwd(
    xt: Tensor,
    a: Tensor,
    b: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    act: int,
    seed: int,
    noise_scale: float,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _check_dense_act_args("logic_act_fwd", xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend)
    kernels = _kernels("logic_act_fwd", backend, xt.device)
    yt, st = _dense_act_outputs(xt, a, act)
    if _plain(act, seed):
        kernels.forward(xt, a, b, coef, yt)
    else:
        kernels.act_forward(xt, a, b, coef, act, seed, noise_scale, yt, st)
    return yt, st


def _dense_act_outputs(xt, a, act) -> tuple[Tensor, Tensor]:
    yt = xt.new_empty(a.shape[0], xt.shape[1])
    return yt, (torch.empty_like(yt) if act == 2 else xt.new_empty(0))


@logic_act_fwd.register_fake
def _(xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend):
    _check_dense_act_args("logic_act_fwd", xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend)
    return _dense_act_outputs(xt, a, act)


def _check_dense_act_bwd(grad_yt, xt, a, b, coef, csr_start, csr_entry, sig, act, need_x, backend):
    _check_dense_act_args("logic_act_bwd", xt, a, b, coef, csr_start, csr_entry, act, -1, 0.0, backend)
    for name, t in (("grad_yt", grad_yt), ("sig", sig)) if act != 0 else (("grad_yt", grad_yt),):
        _checks.kernel_tensor(
            "logic_act_bwd", name, t, dtypes=(xt.dtype,), device=xt.device, shape=(a.shape[0], xt.shape[1])
        )
    if need_x and backend != "cpu":
        check_inverse_index("logic_act_bwd", a, b, csr_start, csr_entry)


@torch.library.custom_op("relaxops::logic_act_bwd", mutates_args=())
def logic_act_bwd(
    grad_yt: Tensor,
    xt: Tensor,
    a: Tensor,
    b: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    sig: Tensor,
    act: int,
    need_x: bool,
    need_coef: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _check_dense_act_bwd(grad_yt, xt, a, b, coef, csr_start, csr_entry, sig, act, need_x, backend)
    kernels = _kernels("logic_act_bwd", backend, xt.device)
    grad_xt = torch.empty_like(xt) if need_x else xt.new_empty(0)
    grad_coef = torch.empty_like(coef) if need_coef else coef.new_empty(0)
    if need_x or need_coef:
        grad_u = grad_yt
        if act != 0:  # d act / d z = sig (1 - sig); noise alone shifts z and passes the gradient unchanged
            grad_u = torch.empty_like(grad_yt)
            kernels.act_grad(grad_yt, sig, grad_u)
        kernels.backward(
            xt,
            a,
            b,
            coef,
            grad_u,
            csr_start,
            csr_entry,
            grad_xt if need_x else None,
            grad_coef if need_coef else None,
        )
    return grad_xt, grad_coef


@logic_act_bwd.register_fake
def _(grad_yt, xt, a, b, coef, csr_start, csr_entry, sig, act, need_x, need_coef, backend):
    _check_dense_act_bwd(grad_yt, xt, a, b, coef, csr_start, csr_entry, sig, act, need_x, backend)
    return (
        torch.empty_like(xt) if need_x else xt.new_empty(0),
        torch.empty_like(coef) if need_coef else coef.new_empty(0),
    )


def _act_setup(ctx, inputs, output):
    xt, a, b, coef, csr_start, csr_entry, act, seed, noise_scale, backend = inputs
    yt, st = output
    ctx.save_for_backward(xt, a, b, coef, csr_start, csr_entry, st if act == 2 else yt)
    ctx.args = (act, backend)
    ctx.mark_non_differentiable(st)


def _act_backward(ctx, grad_yt, grad_st):
    xt, a, b, coef, csr_start, csr_entry, sig = ctx.saved_tensors
    act, backend = ctx.args
    need_x, need_coef = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
    grad_xt, grad_coef = logic_act_bwd(
        feature_major(grad_yt.t()), xt, a, b, coef, csr_start, csr_entry, sig, act, need_x, need_coef, backend
    )
    return (grad_xt if need_x else None), None, None, (grad_coef if need_coef else None), *([None] * 6)


logic_act_fwd.register_autograd(_act_backward, setup_context=_act_setup)


def _conv_check_act_args(op, x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend):
    sizes = _conv_check_args(op, x, leaves, None, csr_start, csr_entry, geometry, backend)  # no logits here
    C_out, L = sizes[4], sizes[5]
    _check_act_args(op, coef, (C_out, L - 1, 4), act, seed, noise_scale, x)
    return sizes


@torch.library.custom_op("relaxops::logic_conv_act_fwd", mutates_args=())
def logic_conv_act_fwd(
    x: Tensor,
    leaves: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    geometry: list[int],
    act: int,
    seed: int,
    noise_scale: float,
    backend: str,
) -> Tensor:
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_act_args(
        "logic_conv_act_fwd", x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend
    )
    kernels = _kernels("logic_conv_act_fwd", backend, x.device)
    y = x.new_empty(B, C_out, Ho, Wo)
    if _plain(act, seed):
        kernels.conv_forward(x, leaves, coef, geometry, y)
    else:
        kernels.conv_act_forward(x, leaves, coef, geometry, act, seed, noise_scale, y)
    return y


@logic_conv_act_fwd.register_fake
def _(x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend):
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_act_args(
        "logic_conv_act_fwd", x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend
    )
    return x.new_empty(B, C_out, Ho, Wo)


def _conv_check_act_bwd(
    grad_y, x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, need_x, backend
):
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_check_act_args(
        "logic_conv_act_bwd", x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend
    )
    _checks.kernel_tensor(
        "logic_conv_act_bwd", "grad_y", grad_y, dtypes=(x.dtype,), device=x.device, shape=(B, C_out, Ho, Wo)
    )
    if need_x and backend != "cpu":
        check_conv_inverse_index("logic_conv_act_bwd", leaves, csr_start, csr_entry)


@torch.library.custom_op("relaxops::logic_conv_act_bwd", mutates_args=())
def logic_conv_act_bwd(
    grad_y: Tensor,
    x: Tensor,
    leaves: Tensor,
    coef: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    geometry: list[int],
    act: int,
    seed: int,
    noise_scale: float,
    need_x: bool,
    need_coef: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _conv_check_act_bwd(
        grad_y, x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, need_x, backend
    )
    kernels = _kernels("logic_conv_act_bwd", backend, x.device)
    grad_x = torch.empty_like(x) if need_x else x.new_empty(0)
    grad_coef = torch.empty_like(coef) if need_coef else coef.new_empty(0)
    gx, gc = (grad_x if need_x else None), (grad_coef if need_coef else None)
    if not (need_x or need_coef):
        pass
    elif _plain(act, seed):
        kernels.conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, gx, gc)
    else:
        kernels.conv_act_backward(
            x, leaves, coef, geometry, act, seed, noise_scale, grad_y, csr_start, csr_entry, gx, gc
        )
    return grad_x, grad_coef


@logic_conv_act_bwd.register_fake
def _(grad_y, x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, need_x, need_coef, backend):
    _conv_check_act_bwd(
        grad_y, x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, need_x, backend
    )
    return (
        torch.empty_like(x) if need_x else x.new_empty(0),
        torch.empty_like(coef) if need_coef else coef.new_empty(0),
    )


def _conv_act_setup(ctx, inputs, output):
    x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, backend = inputs
    ctx.save_for_backward(x, leaves, coef, csr_start, csr_entry)
    ctx.args = (geometry, act, seed, noise_scale, backend)


def _conv_act_backward(ctx, grad_y):
    x, leaves, coef, csr_start, csr_entry = ctx.saved_tensors
    geometry, act, seed, noise_scale, backend = ctx.args
    need_x, need_coef = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    grad_x, grad_coef = logic_conv_act_bwd(
        grad_y.contiguous(), x, leaves, coef, csr_start, csr_entry, geometry, act, seed, noise_scale, need_x,
        need_coef, backend,
    )  # fmt: skip
    return (grad_x if need_x else None), None, (grad_coef if need_coef else None), *([None] * 7)


logic_conv_act_fwd.register_autograd(_conv_act_backward, setup_context=_conv_act_setup)


# --- lookup-table layers (LogicLUTLayer, csrc/logic/lut.h) ------------------------------------------------
#
# ``relaxops::logic_lut_fwd(xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend) -> (yt, st)``:
# ``xt [n_in, B]`` -> ``yt [n_out, B]`` (feature-major), ``indices`` int64 ``[k, n_out]`` (slot-major), ``table
# [n_out, 2^k]`` in xt's dtype (float32 or float64), ``act`` 0 none / 1 sigmoid / 2 sigmoid_st, per-output logistic
# noise ``noise_scale * L`` before the activation when ``seed >= 0`` (parametrize.logistic_noise at the flat index
# ``s n_out + j``). ``st [n_out, B]`` = sigmoid(z) for sigmoid_st, empty ``[0]`` otherwise. ``relaxops::logic_lut_bwd``
# returns ``(grad_xt, grad_table)``, an empty tensor for a gradient not asked for. Saved for backward: ``xt``,
# ``table``, the indices and the saved sigmoid ``sig`` (``yt`` for the sigmoid, ``st`` for sigmoid_st): act'(z) = sig (1
# - sig), so the backward never recomputes z or the noise.
# ``(csr_start, csr_entry)`` is ``connections.lut_inverse_index``, an input so that the backward gathers the input
# gradient deterministically without atomics.

LUT_ACTS = {"none": 0, "sigmoid": 1, "sigmoid_st": 2}
_LUT_BACKENDS = ("cpu", "cuda", "triton")
_LUT_DTYPES = (torch.float32, torch.float64)


def _lut_cpu_forward(xt, idx, table, act, seed, noise_scale, yt, st):
    _ext._C.logic_lut_forward(
        _ext.dtype_code(xt), xt.shape[1], xt.shape[0], idx.shape[1], idx.shape[0], _ext.ptr(xt), _ext.ptr(idx),
        _ext.ptr(table), act, seed, noise_scale, _ext.ptr(yt), _ext.ptr(st),
    )  # fmt: skip


def _lut_cpu_backward(xt, idx, table, act, grad_yt, s, csr_start, csr_entry, grad_xt, grad_table):
    _ext._C.logic_lut_backward(
        _ext.dtype_code(xt), xt.shape[1], xt.shape[0], idx.shape[1], idx.shape[0], _ext.ptr(xt), _ext.ptr(idx),
        _ext.ptr(table), act, _ext.ptr(grad_yt), _ext.ptr(s), _ext.ptr(csr_start), _ext.ptr(csr_entry),
        _ext.ptr(grad_xt), _ext.ptr(grad_table),
    )  # fmt: skip


def _lut_cuda_forward(xt, idx, table, act, seed, noise_scale, yt, st):
    _ext._cuda.logic_lut_forward(
        _CUDA_DTYPES[xt.dtype], xt.shape[1], xt.shape[0], idx.shape[1], idx.shape[0], _ext.ptr(xt), _ext.ptr(idx),
        _ext.ptr(table), act, seed, noise_scale, _ext.ptr(yt), _ext.ptr(st), _ext.stream(xt.device),
    )  # fmt: skip


def _lut_cuda_backward(xt, idx, table, act, grad_yt, s, csr_start, csr_entry, grad_xt, grad_table):
    _ext._cuda.logic_lut_backward(
        _CUDA_DTYPES[xt.dtype], xt.shape[1], xt.shape[0], idx.shape[1], idx.shape[0], _ext.ptr(xt), _ext.ptr(idx),
        _ext.ptr(table), act, _ext.ptr(grad_yt), _ext.ptr(s), _ext.ptr(csr_start), _ext.ptr(csr_entry),
        _ext.ptr(grad_xt), _ext.ptr(grad_table), _ext.stream(xt.device),
    )  # fmt: skip


_CpuKernels.lut_forward = staticmethod(_lut_cpu_forward)
_CpuKernels.lut_backward = staticmethod(_lut_cpu_backward)
_CudaKernels.lut_forward = staticmethod(_lut_cuda_forward)
_CudaKernels.lut_backward = staticmethod(_lut_cuda_backward)


def _lut_check_args(op: str, xt, indices, table, csr_start, csr_entry, act, backend) -> None:
    if not isinstance(backend, str) or backend not in _LUT_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_LUT_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "xt", xt, dtypes=_LUT_DTYPES, shape=(None, None))
    _backend.require(f"relaxops::{op}", backend, xt.device)
    n_in, dev = xt.shape[0], xt.device
    _checks.kernel_tensor(op, "indices", indices, dtypes=(torch.int64,), device=dev, shape=(None, None))
    k, n_out = indices.shape
    if not 2 <= k <= 6:
        raise ValueError(f"relaxops::{op}: indices must have k in [2, 6] rows ([k, n_out]), got {list(indices.shape)}")
    _checks.index_tensor(op, "indices", indices, n_in, dtypes=(torch.int64,), device=dev, shape=(k, n_out))
    _checks.kernel_tensor(op, "table", table, dtypes=(xt.dtype,), device=dev, shape=(n_out, 1 << k))
    _checks.kernel_tensor(op, "csr_start", csr_start, dtypes=(torch.int64,), device=dev, shape=(n_in + 1,))
    _checks.kernel_tensor(op, "csr_entry", csr_entry, dtypes=(torch.int64,), device=dev, shape=(k * n_out,))
    _checks.int_in_range(op, "act", act, 0, 2)


def _lut_check_fwd_args(xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend) -> None:
    op = "logic_lut_fwd"
    _lut_check_args(op, xt, indices, table, csr_start, csr_entry, act, backend)
    _checks.int_in_range(op, "seed", seed, -1, 2**63 - 1)
    if isinstance(noise_scale, bool) or not isinstance(noise_scale, (int, float)) or not math.isfinite(noise_scale):
        raise ValueError(f"relaxops::{op}: noise_scale must be a finite number, got {noise_scale!r}")


def _lut_outputs(xt, indices, act) -> tuple[Tensor, Tensor]:
    yt = xt.new_empty(indices.shape[1], xt.shape[1])
    return yt, (torch.empty_like(yt) if act == 2 else xt.new_empty(0))


@torch.library.custom_op("relaxops::logic_lut_fwd", mutates_args=())
def logic_lut_fwd(
    xt: Tensor,
    indices: Tensor,
    table: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    act: int,
    seed: int,
    noise_scale: float,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _lut_check_fwd_args(xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend)
    yt, st = _lut_outputs(xt, indices, act)
    kernels = _kernels("logic_lut_fwd", backend, xt.device)
    kernels.lut_forward(xt, indices, table, act, seed, float(noise_scale), yt, st)
    return yt, st


@logic_lut_fwd.register_fake
def _(xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend):
    _lut_check_fwd_args(xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend)
    return _lut_outputs(xt, indices, act)


def _lut_check_bwd_args(grad_yt, xt, indices, table, csr_start, csr_entry, sig, act, need_x, backend) -> None:
    _lut_check_args("logic_lut_bwd", xt, indices, table, csr_start, csr_entry, act, backend)
    for name, t in (("grad_yt", grad_yt), ("sig", sig)) if act != 0 else (("grad_yt", grad_yt),):
        _checks.kernel_tensor(
            "logic_lut_bwd", name, t, dtypes=(xt.dtype,), device=xt.device, shape=(indices.shape[1], xt.shape[1])
        )
    if need_x and backend != "cpu":  # the C++ CPU kernel checks the index itself
        check_lut_inverse_index("logic_lut_bwd", indices, csr_start, csr_entry)


@torch.library.custom_op("relaxops::logic_lut_bwd", mutates_args=())
def logic_lut_bwd(
    grad_yt: Tensor,
    xt: Tensor,
    indices: Tensor,
    table: Tensor,
    csr_start: Tensor,
    csr_entry: Tensor,
    sig: Tensor,
    act: int,
    need_x: bool,
    need_table: bool,
    backend: str,
) -> tuple[Tensor, Tensor]:
    _lut_check_bwd_args(grad_yt, xt, indices, table, csr_start, csr_entry, sig, act, need_x, backend)
    grad_xt = torch.empty_like(xt) if need_x else xt.new_empty(0)
    grad_table = torch.empty_like(table) if need_table else table.new_empty(0)
    if need_x or need_table:
        _kernels("logic_lut_bwd", backend, xt.device).lut_backward(
            xt, indices, table, act, grad_yt, sig, csr_start, csr_entry, grad_xt if need_x else None,
            grad_table if need_table else None,
        )  # fmt: skip
    return grad_xt, grad_table


@logic_lut_bwd.register_fake
def _(grad_yt, xt, indices, table, csr_start, csr_entry, sig, act, need_x, need_table, backend):
    _lut_check_bwd_args(grad_yt, xt, indices, table, csr_start, csr_entry, sig, act, need_x, backend)
    return (
        torch.empty_like(xt) if need_x else xt.new_empty(0),
        torch.empty_like(table) if need_table else table.new_empty(0),
    )


def _lut_setup(ctx, inputs, output):
    xt, indices, table, csr_start, csr_entry, act, seed, noise_scale, backend = inputs
    yt, st = output
    ctx.save_for_backward(xt, indices, table, csr_start, csr_entry, st if act == 2 else yt)
    ctx.act, ctx.backend = act, backend
    ctx.mark_non_differentiable(st)


def _lut_backward(ctx, grad_yt, grad_st):
    xt, indices, table, csr_start, csr_entry, sig = ctx.saved_tensors
    need_x, need_table = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    grad_xt, grad_table = logic_lut_bwd(
        feature_major(grad_yt.t()), xt, indices, table, csr_start, csr_entry, sig, ctx.act, need_x, need_table,
        ctx.backend,
    )  # fmt: skip
    return (grad_xt if need_x else None), None, (grad_table if need_table else None), None, None, None, None, None, None


logic_lut_fwd.register_autograd(_lut_backward, setup_context=_lut_setup)
