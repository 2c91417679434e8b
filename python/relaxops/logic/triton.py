"""Triton kernels of the logic layer: the formulas and feature-major layouts of ``csrc/logic/logic.h``.

* forward: one program per tile of ``BJ`` neurons x ``BS`` samples: two gathered input rows, 3 FMAs;
* coefficient gradient: one program per ``BJ`` neurons, looping over the batch in chunks of ``BS`` with
  accumulators of the accumulation dtype (a fixed order: deterministic);
* input gradient: one program per (input, ``BS`` samples), looping over the input's CSR list (entries
  ``2 j + role``): a deterministic gather, no atomics.

Computation in float32 (float64 for float64 data); loads of float16/bfloat16 data are widened. Runs on CUDA
tensors and, with ``TRITON_INTERPRET=1``, on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _forward_kernel(xt, a, b, coef, yt, B, n_out, n_sblocks, BJ: tl.constexpr, BS: tl.constexpr):
    pid = tl.program_id(0)  # 1-D grid over (neuron block, sample block): no 65535 limit on a second axis
    j = (pid // n_sblocks) * BJ + tl.arange(0, BJ)
    s = (pid % n_sblocks) * BS + tl.arange(0, BS)
    mj, ms = j < n_out, s < B
    m = mj[:, None] & ms[None, :]
    ia = tl.load(a + j, mask=mj, other=0)
    ib = tl.load(b + j, mask=mj, other=0)
    c0 = tl.load(coef + 4 * j, mask=mj, other=0)[:, None]
    c1 = tl.load(coef + 4 * j + 1, mask=mj, other=0)[:, None]
    c2 = tl.load(coef + 4 * j + 2, mask=mj, other=0)[:, None]
    c3 = tl.load(coef + 4 * j + 3, mask=mj, other=0)[:, None]
    xa = tl.load(xt + ia[:, None] * B + s[None, :], mask=m, other=0).to(c0.dtype)
    xb = tl.load(xt + ib[:, None] * B + s[None, :], mask=m, other=0).to(c0.dtype)
    y = c0 + c1 * xa + (c2 + c3 * xa) * xb
    tl.store(yt + j[:, None].to(tl.int64) * B + s[None, :], y.to(yt.dtype.element_ty), mask=m)


@triton.jit
def _coef_grad_kernel(xt, a, b, grad_yt, grad_coef, B, n_out, BJ: tl.constexpr, BS: tl.constexpr):
    j = tl.program_id(0) * BJ + tl.arange(0, BJ)
    mj = j < n_out
    ia = tl.load(a + j, mask=mj, other=0)
    ib = tl.load(b + j, mask=mj, other=0)
    acc_ty = grad_coef.dtype.element_ty
    s0 = tl.zeros((BJ, BS), dtype=acc_ty)
    s1 = tl.zeros((BJ, BS), dtype=acc_ty)
    s2 = tl.zeros((BJ, BS), dtype=acc_ty)
    s3 = tl.zeros((BJ, BS), dtype=acc_ty)
    for start in range(0, B, BS):
        s = start + tl.arange(0, BS)
        m = mj[:, None] & (s < B)[None, :]
        g = tl.load(grad_yt + j[:, None].to(tl.int64) * B + s[None, :], mask=m, other=0).to(acc_ty)
        xa = tl.load(xt + ia[:, None] * B + s[None, :], mask=m, other=0).to(acc_ty)
        xb = tl.load(xt + ib[:, None] * B + s[None, :], mask=m, other=0).to(acc_ty)
        ga = g * xa
        s0 += g
        s1 += ga
        s2 += g * xb
        s3 += ga * xb
    tl.store(grad_coef + 4 * j, tl.sum(s0, 1), mask=mj)
    tl.store(grad_coef + 4 * j + 1, tl.sum(s1, 1), mask=mj)
    tl.store(grad_coef + 4 * j + 2, tl.sum(s2, 1), mask=mj)
    tl.store(grad_coef + 4 * j + 3, tl.sum(s3, 1), mask=mj)


@triton.jit
def _input_grad_kernel(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, B, n_sblocks, BS: tl.constexpr):
    pid = tl.program_id(0)
    c = pid // n_sblocks
    s = (pid % n_sblocks) * BS + tl.arange(0, BS)
    ms = s < B
    acc_ty = coef.dtype.element_ty
    acc = tl.zeros((BS,), dtype=acc_ty)
    for e in range(tl.load(csr_start + c), tl.load(csr_start + c + 1)):
        entry = tl.load(csr_entry + e)
        j = entry // 2
        as_b = (entry % 2) == 1
        k1 = tl.where(as_b, tl.load(coef + 4 * j + 2), tl.load(coef + 4 * j + 1))
        k3 = tl.load(coef + 4 * j + 3)
        other = tl.where(as_b, tl.load(a + j), tl.load(b + j))  # the neuron's other input
        g = tl.load(grad_yt + j * B + s, mask=ms, other=0).to(acc_ty)
        xo = tl.load(xt + other * B + s, mask=ms, other=0).to(acc_ty)
        acc += g * (k1 + k3 * xo)
    tl.store(grad_xt + c.to(tl.int64) * B + s, acc.to(grad_xt.dtype.element_ty), mask=ms)


def _sample_block(B: int, interpret: bool) -> int:
    return min(4096 if interpret else 256, triton.next_power_of_2(max(B, 1)))


def _interpret(t: torch.Tensor) -> bool:
    return t.device.type == "cpu"


def forward(xt, a, b, coef, yt) -> None:
    """``yt [n_out, B] = c0 + c1 xa + c2 xb + c3 xa xb`` (feature-major buffers, ``coef [n_out, 4]``)."""
    n_out, B = yt.shape
    if n_out == 0 or B == 0:
        return
    BS = _sample_block(B, _interpret(xt))
    BJ = max(1, min(triton.next_power_of_2(n_out), 4096 // BS))
    n_sblocks = triton.cdiv(B, BS)
    _forward_kernel[(triton.cdiv(n_out, BJ) * n_sblocks,)](xt, a, b, coef, yt, B, n_out, n_sblocks, BJ=BJ, BS=BS)


def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef) -> None:
    """``grad_coef [n_out, 4]`` and ``grad_xt [n_in, B]`` (either may be None) from ``grad_yt [n_out, B]``."""
    n_in, B = xt.shape
    n_out = a.shape[0]
    interpret = _interpret(xt)
    if grad_coef is not None:
        if B == 0 or n_out == 0:
            grad_coef.zero_()
        else:
            BS = _sample_block(B, interpret)
            BJ = max(1, min(triton.next_power_of_2(n_out), (4096 if interpret else 2048) // BS))
            _coef_grad_kernel[(triton.cdiv(n_out, BJ),)](xt, a, b, grad_yt, grad_coef, B, n_out, BJ=BJ, BS=BS)
    if grad_xt is not None and B > 0:
        BS = _sample_block(B, interpret)
        n_sblocks = triton.cdiv(B, BS)
        _input_grad_kernel[(n_in * n_sblocks,)](xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, B, n_sblocks,
                                                BS=BS)
