"""Autograd op of the logic layer, registered with ``torch.library``.

``relaxops::logic_fwd(xt, a, b, coef, csr_start, csr_entry, backend) -> yt`` on FEATURE-MAJOR contiguous buffers
(``csrc/logic/logic.h``): ``xt [n_in, B]``, ``yt [n_out, B]``, ``coef [n_out, 4]`` (float32, float64 for float64
data). Its backward ``relaxops::logic_bwd`` returns ``(grad_xt, grad_coef)``, an empty tensor for a gradient not
asked for. Saved for backward: ``xt`` and ``coef`` (the output is not needed). The CSR inverse index
(``connections.inverse_index``) is an input so that the backward gathers deterministically without atomics.
``backend`` is a concrete backend (``cpu``, ``cuda``, ``triton``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _ext

_CUDA_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


class _CpuKernels:
    @staticmethod
    def forward(xt, a, b, coef, yt):
        _ext._C.logic_forward(_ext.dtype_code(xt), xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt), _ext.ptr(a),
                              _ext.ptr(b), _ext.ptr(coef), _ext.ptr(yt))

    @staticmethod
    def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef):
        _ext._C.logic_backward(_ext.dtype_code(xt), xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt), _ext.ptr(a),
                               _ext.ptr(b), _ext.ptr(coef), _ext.ptr(grad_yt), _ext.ptr(csr_start),
                               _ext.ptr(csr_entry), _ext.ptr(grad_xt), _ext.ptr(grad_coef))


class _CudaKernels:
    @staticmethod
    def forward(xt, a, b, coef, yt):
        _ext._cuda.logic_forward(_CUDA_DTYPES[xt.dtype], xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt),
                                 _ext.ptr(a), _ext.ptr(b), _ext.ptr(coef), _ext.ptr(yt), _ext.stream(xt.device))

    @staticmethod
    def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef):
        _ext._cuda.logic_backward(_CUDA_DTYPES[xt.dtype], xt.shape[1], xt.shape[0], a.shape[0], _ext.ptr(xt),
                                  _ext.ptr(a), _ext.ptr(b), _ext.ptr(coef), _ext.ptr(grad_yt), _ext.ptr(csr_start),
                                  _ext.ptr(csr_entry), _ext.ptr(grad_xt), _ext.ptr(grad_coef),
                                  _ext.stream(xt.device))


def _kernels(backend: str):
    return _backend.kernels(backend, _CpuKernels, _CudaKernels, __package__, "the logic ops")


@torch.library.custom_op("relaxops::logic_fwd", mutates_args=())
def logic_fwd(xt: Tensor, a: Tensor, b: Tensor, coef: Tensor, csr_start: Tensor, csr_entry: Tensor,
              backend: str) -> Tensor:
    yt = xt.new_empty(a.shape[0], xt.shape[1])
    _kernels(backend).forward(xt, a, b, coef, yt)
    return yt


@logic_fwd.register_fake
def _(xt, a, b, coef, csr_start, csr_entry, backend):
    return xt.new_empty(a.shape[0], xt.shape[1])


@torch.library.custom_op("relaxops::logic_bwd", mutates_args=())
def logic_bwd(grad_yt: Tensor, xt: Tensor, a: Tensor, b: Tensor, coef: Tensor, csr_start: Tensor, csr_entry: Tensor,
              need_x: bool, need_coef: bool, backend: str) -> tuple[Tensor, Tensor]:
    grad_xt = torch.empty_like(xt) if need_x else xt.new_empty(0)
    grad_coef = torch.empty_like(coef) if need_coef else coef.new_empty(0)
    if need_x or need_coef:
        _kernels(backend).backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt if need_x else None,
                                   grad_coef if need_coef else None)
    return grad_xt, grad_coef


@logic_bwd.register_fake
def _(grad_yt, xt, a, b, coef, csr_start, csr_entry, need_x, need_coef, backend):
    return (torch.empty_like(xt) if need_x else xt.new_empty(0),
            torch.empty_like(coef) if need_coef else coef.new_empty(0))


@torch.library.custom_op("relaxops::logic_transpose", mutates_args=())
def logic_transpose(x: Tensor) -> Tensor:
    """``x [R, C]`` -> contiguous ``[C, R]``: the change between the sample-major layout of PyTorch and the
    feature-major one of the kernels (a tiled C++ kernel for CPU float32/float64, torch elsewhere)."""
    if x.device.type == "cpu" and x.dtype in _ext._DTYPE_CODES and _ext.has_cpu():
        out = x.new_empty(x.shape[1], x.shape[0])
        _ext._C.logic_transpose(_ext.dtype_code(x), x.shape[0], x.shape[1], _ext.ptr(x.contiguous()), _ext.ptr(out))
        return out
    return x.t().contiguous()


@logic_transpose.register_fake
def _(x):
    return x.new_empty(x.shape[1], x.shape[0])


def _transpose_setup(ctx, inputs, output):
    pass


# The gradient goes back as a transposed view: no copy (autograd accepts any strides).
logic_transpose.register_autograd(lambda ctx, grad: grad.t(), setup_context=_transpose_setup)


def feature_major(x: Tensor) -> Tensor:
    """The contiguous transpose of a 2-D tensor; free when ``x`` is itself the transposed view of one."""
    return x.t() if x.t().is_contiguous() else logic_transpose(x.contiguous())


def _setup(ctx, inputs, output):
    xt, a, b, coef, csr_start, csr_entry, backend = inputs
    ctx.save_for_backward(xt, a, b, coef, csr_start, csr_entry)
    ctx.backend = backend


def _backward(ctx, grad_yt):
    xt, a, b, coef, csr_start, csr_entry = ctx.saved_tensors
    need_x, need_coef = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
    grad_xt, grad_coef = logic_bwd(feature_major(grad_yt.t()), xt, a, b, coef, csr_start, csr_entry, need_x, need_coef,
                                   ctx.backend)
    return (grad_xt if need_x else None), None, None, (grad_coef if need_coef else None), None, None, None


logic_fwd.register_autograd(_backward, setup_context=_setup)
