"""Autograd ops of the fast soft sort and soft rank, registered with ``torch.library``.

Each is a forward and a backward kernel (math, layouts and non-finite rules in ``csrc/fastsort/fastsort.h``):

* ``relaxops::soft_rank_fwd(x, regularization, regularization_strength, descending, backend, lengths=None) ->
  (out, perm, block)``, backward ``relaxops::soft_rank_bwd(grad, out, x, perm, block, ..., backend, lengths=None)``;
* ``relaxops::soft_sort_fwd(...)`` likewise, backward ``relaxops::soft_sort_bwd``.

``x [B, n]`` contiguous float32/float64, ``n >= 1``; ``out [B, n]`` in x's dtype (soft ranks at the elements'
places, or soft sorted values); ``perm [B, n]`` int64, the stable ascending sort permutation of ``sgn x``
(``sgn = -1`` if ``descending``); ``block [B, n]`` int32, the first sorted position of each sorted position's
block: the block structure of the isotonic regression RECORDED by the forward and used by the backward (torchsort
recovers it from the outputs with a 1e-9 tolerance). ``perm`` and ``block`` are not differentiable. Saved for
backward: ``x``, ``out``, ``perm``, ``block`` (and ``lengths``): O(n) per row. ``backend`` is a concrete backend
(``cpu``, ``cuda``, ``triton``).

``lengths``: ``None`` (every row full) or int64 ``[B]`` on x's device, each in ``[0, n]``: row ``b`` is then its
first ``L_b = lengths[b]`` entries alone (the kernels sort, pool and differentiate only those; the pads are never
read), and the pads of every output are ``out = 0``, ``perm[j] = j``, ``block[j] = j``, ``grad_x = 0``.

The ops are public (``torch.ops.relaxops.*``): each checks its arguments before any kernel runs (dtypes, shapes,
device, contiguity, ``regularization`` in {"l2", "kl"}, the strength finite and > 0, the entries of ``perm`` and
``block`` in ``[0, n)``: for the cpu backend the C++ kernel checks those, and that ``block`` is a partition into
runs, raising ValueError). The backward ops
expect the ``out``, ``perm`` and ``block`` their forward returned (other values of the right form give
meaningless gradients, never out-of-bounds memory access).
"""

from __future__ import annotations

import math
import sys

import torch
from torch import Tensor

from .. import _backend, _checks, _ext, _rows

_KERNEL_BACKENDS = ("cpu", "cuda", "triton")
_FLOATS = (torch.float32, torch.float64)
REGULARIZATIONS = ("l2", "kl")
OPS = {"rank": 0, "sort": 1}  # FastSortOp of fastsort.h
MIN_STRENGTH = sys.float_info.min  # the smallest normal float64: the kernels multiply by 1 / strength


def reg_code(regularization: str) -> int:
    """FastSortReg of fastsort.h."""
    return REGULARIZATIONS.index(regularization)


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers; the forward sorts the rows itself)."""

    @staticmethod
    def forward(op, x, reg, eps, descending, out, perm, block, lengths):
        B, n = x.shape
        _ext._C.fastsort_forward(
            _ext.dtype_code(x),
            OPS[op],
            reg_code(reg),
            eps,
            int(descending),
            B,
            n,
            _ext.ptr(x),
            _ext.ptr(out),
            _ext.ptr(perm),
            _ext.ptr(block),
            _lengths_ptr(lengths),
        )

    @staticmethod
    def backward(op, grad, out, x, perm, block, reg, eps, descending, grad_x, lengths):
        B, n = x.shape
        _ext._C.fastsort_backward(
            _ext.dtype_code(x),
            OPS[op],
            reg_code(reg),
            eps,
            int(descending),
            B,
            n,
            _ext.ptr(grad),
            _ext.ptr(out),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(block),
            _ext.ptr(grad_x),
            _lengths_ptr(lengths),
        )


def _lengths_ptr(lengths) -> int:
    """The kernels' ``lengths`` argument: a pointer, or 0 for full rows."""
    return 0 if lengths is None else _ext.ptr(lengths)


class _CudaKernels:
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream). The rows of
    ``sgn x`` are sorted here with ``torch.sort(stable=True)``, pads as NaN (``_rows.exact_order``: they follow
    the row's own entries); the forward's workspace (B n doubles, the block statistics) comes from torch's
    allocator."""

    @staticmethod
    def forward(op, x, reg, eps, descending, out, perm, block, lengths):
        B, n = x.shape
        perm.copy_(_rows.exact_order(x, lengths, descending))
        workspace = torch.empty(B * n, dtype=torch.float64, device=x.device)
        _ext._cuda.fastsort_forward(
            _ext.dtype_code(x),
            OPS[op],
            reg_code(reg),
            eps,
            int(descending),
            B,
            n,
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(out),
            _ext.ptr(block),
            _ext.ptr(workspace),
            _ext.stream(x.device),
            _lengths_ptr(lengths),
        )

    @staticmethod
    def backward(op, grad, out, x, perm, block, reg, eps, descending, grad_x, lengths):
        B, n = x.shape
        _ext._cuda.fastsort_backward(
            _ext.dtype_code(x),
            OPS[op],
            reg_code(reg),
            eps,
            int(descending),
            B,
            n,
            _ext.ptr(grad),
            _ext.ptr(out),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(block),
            _ext.ptr(grad_x),
            _ext.stream(x.device),
            _lengths_ptr(lengths),
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels, f"{__package__}.triton")


# The fake kernels may see symbolic scalars (torch.compile with dynamic shapes): compared, never converted.
_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


def _check_forward(op: str, x, regularization, strength, descending, backend, lengths, values: bool) -> None:
    """Also the values of ``lengths`` if ``values`` (not on fake tensors; the C++ CPU kernels check them too)."""
    if backend not in _KERNEL_BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(_KERNEL_BACKENDS)}, got {backend!r}")
    _checks.kernel_tensor(op, "x", x, dtypes=_FLOATS, shape=(None, None))
    if x.shape[1] < 1 or x.shape[1] >= 2**31:
        raise ValueError(f"relaxops::{op}: x must have shape [B, n] with 1 <= n < 2^31, got {list(x.shape)}")
    if regularization not in REGULARIZATIONS:
        raise ValueError(
            f"relaxops::{op}: regularization must be one of {list(REGULARIZATIONS)}, got {regularization!r}"
        )
    if isinstance(strength, bool) or not isinstance(strength, _NUMBERS) or not MIN_STRENGTH <= strength < math.inf:
        raise ValueError(
            f"relaxops::{op}: regularization_strength must be a finite number >= {MIN_STRENGTH} "
            f"(1 / it finite), got {strength!r}"
        )
    if not isinstance(descending, bool):
        raise TypeError(f"relaxops::{op}: descending must be a bool, got {type(descending).__name__}")
    if lengths is not None:
        shape = (x.shape[0],)
        if values and backend != "cpu":
            _checks.index_tensor(
                op, "lengths", lengths, x.shape[1] + 1, dtypes=(torch.int64,), device=x.device, shape=shape
            )
        else:
            _checks.kernel_tensor(op, "lengths", lengths, dtypes=(torch.int64,), device=x.device, shape=shape)


def _check_backward(
    op: str, grad, out, x, perm, block, regularization, strength, descending, backend, lengths, values: bool
) -> None:
    """Also the values of ``lengths``, ``perm`` and ``block`` if ``values`` (not on fake tensors)."""
    _check_forward(op, x, regularization, strength, descending, backend, lengths, values)
    shape = tuple(x.shape)
    for name, t in (("grad", grad), ("out", out)):
        _checks.kernel_tensor(op, name, t, dtypes=(x.dtype,), device=x.device, shape=shape)
    n = x.shape[1]
    for name, t, dtype in (("perm", perm, torch.int64), ("block", block, torch.int32)):
        if values and backend != "cpu":  # the C++ kernel checks them itself (and that block is a partition)
            _checks.index_tensor(op, name, t, n, dtypes=(dtype,), device=x.device, shape=shape)
        else:
            _checks.kernel_tensor(op, name, t, dtypes=(dtype,), device=x.device, shape=shape)


def _outputs(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.int64), torch.empty_like(x, dtype=torch.int32)


def _define(op: str):
    """The registered forward and backward ops of ``op`` ("rank" or "sort"), their autograd, and their
    implementations as plain functions (what the ops run: checks, then the kernels)."""
    fwd_name, bwd_name = f"soft_{op}_fwd", f"soft_{op}_bwd"

    def fwd_impl(x, regularization, regularization_strength, descending, backend, lengths=None):
        _check_forward(fwd_name, x, regularization, regularization_strength, descending, backend, lengths, True)
        kernels = _kernels(fwd_name, backend, x.device)
        out, perm, block = _outputs(x)
        if x.shape[0]:
            kernels.forward(
                op, x, regularization, float(regularization_strength), descending, out, perm, block, lengths
            )
        return out, perm, block

    def bwd_impl(grad, out, x, perm, block, regularization, regularization_strength, descending, backend, lengths=None):
        _check_backward(
            bwd_name,
            grad,
            out,
            x,
            perm,
            block,
            regularization,
            regularization_strength,
            descending,
            backend,
            lengths,
            values=True,
        )
        kernels = _kernels(bwd_name, backend, x.device)
        grad_x = torch.empty_like(x)
        if x.shape[0]:
            kernels.backward(
                op,
                grad,
                out,
                x,
                perm,
                block,
                regularization,
                float(regularization_strength),
                descending,
                grad_x,
                lengths,
            )
        return grad_x

    @torch.library.custom_op(f"relaxops::{fwd_name}", mutates_args=())
    def fwd(
        x: Tensor,
        regularization: str,
        regularization_strength: float,
        descending: bool,
        backend: str,
        lengths: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        return fwd_impl(x, regularization, regularization_strength, descending, backend, lengths)

    @fwd.register_fake
    def _(x, regularization, regularization_strength, descending, backend, lengths=None):
        _check_forward(fwd_name, x, regularization, regularization_strength, descending, backend, lengths, False)
        return _outputs(x)

    @torch.library.custom_op(f"relaxops::{bwd_name}", mutates_args=())
    def bwd(
        grad: Tensor,
        out: Tensor,
        x: Tensor,
        perm: Tensor,
        block: Tensor,
        regularization: str,
        regularization_strength: float,
        descending: bool,
        backend: str,
        lengths: Tensor | None = None,
    ) -> Tensor:
        return bwd_impl(
            grad, out, x, perm, block, regularization, regularization_strength, descending, backend, lengths
        )

    @bwd.register_fake
    def _(grad, out, x, perm, block, regularization, regularization_strength, descending, backend, lengths=None):
        _check_backward(
            bwd_name,
            grad,
            out,
            x,
            perm,
            block,
            regularization,
            regularization_strength,
            descending,
            backend,
            lengths,
            values=False,
        )
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        x, regularization, strength, descending, backend, lengths = inputs
        out, perm, block = output
        ctx.save_for_backward(x, out, perm, block, lengths)
        ctx.args = (regularization, strength, descending, backend)
        ctx.set_materialize_grads(False)  # no zero tensors for the integer outputs' gradients

    def backward(ctx, grad_out, grad_perm, grad_block):
        if grad_out is None:
            return None, None, None, None, None, None
        x, out, perm, block, lengths = ctx.saved_tensors
        return bwd(grad_out.contiguous(), out, x, perm, block, *ctx.args, lengths), None, None, None, None, None

    fwd.register_autograd(backward, setup_context=setup_context)
    return fwd, bwd, fwd_impl, bwd_impl


soft_rank_fwd, soft_rank_bwd, _rank_fwd_impl, _rank_bwd_impl = _define("rank")
soft_sort_fwd, soft_sort_bwd, _sort_fwd_impl, _sort_bwd_impl = _define("sort")
_OPS = {"rank": (soft_rank_fwd, soft_rank_bwd), "sort": (soft_sort_fwd, soft_sort_bwd)}
_IMPLS = {"rank": (_rank_fwd_impl, _rank_bwd_impl), "sort": (_sort_fwd_impl, _sort_bwd_impl)}


class SoftSortRank(torch.autograd.Function):
    """What the public functions call: the registered forward and backward ops in a plain autograd Function, which
    ``torch.compile`` traces. In eager mode it runs the ops' implementations directly (the same checks and
    kernels): the dispatcher and ``register_autograd``'s wrapper cost ~70 us a forward and backward, more than the
    kernels at n = 100, B = 16. ``apply(x, op, regularization, strength, descending, backend, lengths)`` -> the
    output (``lengths``: int64 ``[B]`` or None)."""

    @staticmethod
    def forward(ctx, x, op, regularization, strength, descending, backend, lengths=None):
        fwd = _OPS[op][0] if torch.compiler.is_compiling() else _IMPLS[op][0]
        out, perm, block = fwd(x, regularization, strength, descending, backend, lengths)
        ctx.save_for_backward(x, out, perm, block, lengths)
        ctx.args = (op, regularization, strength, descending, backend)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out, perm, block, lengths = ctx.saved_tensors
        op, *args = ctx.args
        # the registered op under create_graph too: its output then raises on a double backward (the kernels'
        # output alone would not be connected to x, and a second derivative would silently miss this term)
        bwd = _OPS[op][1] if torch.compiler.is_compiling() or torch.is_grad_enabled() else _IMPLS[op][1]
        return bwd(grad.contiguous(), out, x, perm, block, *args, lengths), None, None, None, None, None, None
