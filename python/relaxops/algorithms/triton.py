"""Triton kernels of the fused relaxed algorithms (launched by ops.py; run on CPU tensors under
``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------
# One program per row; the formulas and layouts of csrc/algorithms/edit_distance.h. Both directions run the DP as an
# anti-diagonal wavefront over lanes of BLOCK cells, D (or G) in global memory, a barrier between diagonals (every
# load reads cells written before the last barrier). beta comes as a 1-element tensor of the compute dtype (a
# Python float argument would be float32). Workspace per row (elements of the dtype): the norms |s_i|, |t_j|
# [n + m]; in the backward also G [(n + 1)(m + 1)], the partials dMin/dX [3 n m] and gcos [n m]. Per-row sizes
# below 2^31 (int32 offsets within a row).

_ED_COS_EPS = tl.constexpr(1e-8)  # torch.nn.functional.cosine_similarity's eps


@triton.jit
def _ed_clamp(r):
    return tl.where(r < _ED_COS_EPS, _ED_COS_EPS, r)


@triton.jit
def _ed_cell(beta, up, left, diag, cost):
    """(Min_beta, dMin/dX_0, dMin/dX_1, dMin/dX_2) of a cell (edit_distance_cell)."""
    x0 = up + 1.0
    x1 = left + 1.0
    x2 = diag + cost
    mn = tl.minimum(tl.minimum(x0, x1), x2)
    e0 = tl.exp(-beta * (x0 - mn))
    e1 = tl.exp(-beta * (x1 - mn))
    e2 = tl.exp(-beta * (x2 - mn))
    inv = 1.0 / (e0 + e1 + e2)
    v = mn + (e0 * (x0 - mn) + e1 * (x1 - mn) + e2 * (x2 - mn)) * inv
    w0 = e0 * inv
    w1 = e1 * inv
    w2 = e2 * inv
    d0 = tl.where(w0 == 0.0, 0.0, w0 * (1.0 - beta * (x0 - v)))
    d1 = tl.where(w1 == 0.0, 0.0, w1 * (1.0 - beta * (x1 - v)))
    d2 = tl.where(w2 == 0.0, 0.0, w2 * (1.0 - beta * (x2 - v)))
    return v, d0, d1, d2


@triton.jit
def _ed_norms(s_row, t_row, nrm, n, m, K, BLOCK: tl.constexpr):
    """|s_i| for r < n and |t_{r - n}| after, into nrm[r]."""
    for r0 in range(0, n + m, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        inside = r < n + m
        is_s = r < n
        off = tl.where(is_s, r, r - n) * K
        acc = tl.zeros([BLOCK], dtype=nrm.dtype.element_ty)
        for k in range(0, K):
            x = tl.load(s_row + off + k, mask=inside & is_s, other=0.0) + tl.load(t_row + off + k,
                                                                             mask=inside & (r >= n), other=0.0)
            acc += x * x
        tl.store(nrm + r, tl.sqrt(acc), mask=inside)


@triton.jit
def _ed_forward_kernel(s_ptr, t_ptr, beta_ptr, D_ptr, cos_ptr, ws_ptr, n, m, K, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    W = m + 1
    s_row = s_ptr + b * n * K
    t_row = t_ptr + b * m * K
    D_row = D_ptr + b * (n + 1) * W
    c_row = cos_ptr + b * n * m
    nrm = ws_ptr + b * (n + m)
    beta = tl.load(beta_ptr)
    _ed_norms(s_row, t_row, nrm, n, m, K, BLOCK)
    tl.debug_barrier()
    for c0 in range(0, n * m, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        inside = c < n * m
        i = c // m
        j = c % m
        dot = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        for k in range(0, K):
            dot += tl.load(s_row + i * K + k, mask=inside, other=0.0) * tl.load(t_row + j * K + k, mask=inside,
                                                                                 other=0.0)
        ns = _ed_clamp(tl.load(nrm + i, mask=inside, other=1.0))
        nt = _ed_clamp(tl.load(nrm + n + j, mask=inside, other=1.0))
        tl.store(c_row + c, dot / ns / nt, mask=inside)
    for j0 in range(0, W, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        tl.store(D_row + j, j.to(D_ptr.dtype.element_ty), mask=j < W)
    for i0 in range(0, n, BLOCK):
        i = i0 + tl.arange(0, BLOCK)
        tl.store(D_row + (i + 1) * W, (i + 1).to(D_ptr.dtype.element_ty), mask=i < n)
    tl.debug_barrier()
    for d in range(0, n + m - 1):  # inner cells (i + 1, j + 1), i + j = d
        lo = tl.maximum(d - m + 1, 0)
        hi = tl.minimum(d, n - 1)
        for i0 in range(lo, hi + 1, BLOCK):
            i = i0 + tl.arange(0, BLOCK)
            inside = i <= hi
            j = d - i
            up = tl.load(D_row + i * W + j + 1, mask=inside, other=0.0)
            left = tl.load(D_row + (i + 1) * W + j, mask=inside, other=0.0)
            diag = tl.load(D_row + i * W + j, mask=inside, other=0.0)
            cost = 1.0 - tl.load(c_row + i * m + j, mask=inside, other=0.0)
            v, _, _, _ = _ed_cell(beta, up, left, diag, cost)
            tl.store(D_row + (i + 1) * W + j + 1, v, mask=inside)
        tl.debug_barrier()


@triton.jit
def _ed_backward_kernel(gD_ptr, s_ptr, t_ptr, D_ptr, cos_ptr, beta_ptr, gs_ptr, gt_ptr, ws_ptr, n, m, K,
                        BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    W = m + 1
    cells = (n + 1) * W
    s_row = s_ptr + b * n * K
    t_row = t_ptr + b * m * K
    D_row = D_ptr + b * cells
    gD_row = gD_ptr + b * cells
    c_row = cos_ptr + b * n * m
    nrm = ws_ptr + b * ((n + m) + cells + 4 * n * m)
    G = nrm + (n + m)
    A = G + cells  # A[3 (i m + j) + k]: dMin/dX_k of cell (i + 1, j + 1)
    gcos = A + 3 * n * m
    beta = tl.load(beta_ptr)
    _ed_norms(s_row, t_row, nrm, n, m, K, BLOCK)
    for c0 in range(0, cells, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        tl.store(G + c, tl.load(gD_row + c, mask=c < cells, other=0.0), mask=c < cells)
    for c0 in range(0, n * m, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        inside = c < n * m
        i = c // m
        j = c % m
        up = tl.load(D_row + i * W + j + 1, mask=inside, other=0.0)
        left = tl.load(D_row + (i + 1) * W + j, mask=inside, other=0.0)
        diag = tl.load(D_row + i * W + j, mask=inside, other=0.0)
        cost = 1.0 - tl.load(c_row + c, mask=inside, other=0.0)
        _, d0, d1, d2 = _ed_cell(beta, up, left, diag, cost)
        tl.store(A + 3 * c, d0, mask=inside)
        tl.store(A + 3 * c + 1, d1, mask=inside)
        tl.store(A + 3 * c + 2, d2, mask=inside)
    tl.debug_barrier()
    # G[p][q] of the inner cells, diagonals d = p + q from n + m down to 2, pulling from the consumers
    for dd in range(0, n + m - 1):
        d = n + m - dd
        lo = tl.maximum(d - m, 1)
        hi = tl.minimum(d - 1, n)
        for p0 in range(lo, hi + 1, BLOCK):
            p = p0 + tl.arange(0, BLOCK)
            q = d - p
            inside = p <= hi
            down = inside & (p < n)
            right = inside & (q < m)
            g = tl.load(G + p * W + q, mask=inside, other=0.0)
            g += tl.load(G + (p + 1) * W + q, mask=down, other=0.0) * tl.load(A + 3 * (p * m + q - 1), mask=down,
                                                                             other=0.0)
            g += tl.load(G + p * W + q + 1, mask=right, other=0.0) * tl.load(A + 3 * ((p - 1) * m + q) + 1,
                                                                            mask=right, other=0.0)
            g += tl.load(G + (p + 1) * W + q + 1, mask=down & right, other=0.0) * tl.load(
                A + 3 * (p * m + q) + 2, mask=down & right, other=0.0)
            tl.store(G + p * W + q, g, mask=inside)
        tl.debug_barrier()
    for c0 in range(0, n * m, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        inside = c < n * m
        i = c // m
        j = c % m
        g = tl.load(G + (i + 1) * W + j + 1, mask=inside, other=0.0)
        tl.store(gcos + c, -g * tl.load(A + 3 * c + 2, mask=inside, other=0.0), mask=inside)
    tl.debug_barrier()
    # d cos_ij / d s_i = t_j / (N(s_i) N(t_j)) - cos_ij / N(s_i) * s_i / |s_i|, lanes over (i, k); t likewise
    for c0 in range(0, n * K, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        inside = c < n * K
        i = c // K
        k = c % K
        lin = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        radial = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        for j in range(0, m):
            g = tl.load(gcos + i * m + j, mask=inside, other=0.0)
            lin += g * tl.load(t_row + j * K + k, mask=inside, other=0.0) / _ed_clamp(tl.load(nrm + n + j))
            radial += g * tl.load(c_row + i * m + j, mask=inside, other=0.0)
        r = tl.load(nrm + i, mask=inside, other=1.0)
        x = tl.load(s_row + c, mask=inside, other=0.0)
        N = _ed_clamp(r)
        out = lin / N - radial / (N * tl.where(r == 0.0, 1.0, r)) * tl.where(r == 0.0, 0.0, x)  # 0 at |x| = 0
        tl.store(gs_ptr + b * n * K + c, out, mask=inside)
    for c0 in range(0, m * K, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        inside = c < m * K
        j = c // K
        k = c % K
        lin = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        radial = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        for i in range(0, n):
            g = tl.load(gcos + i * m + j, mask=inside, other=0.0)
            lin += g * tl.load(s_row + i * K + k, mask=inside, other=0.0) / _ed_clamp(tl.load(nrm + i))
            radial += g * tl.load(c_row + i * m + j, mask=inside, other=0.0)
        r = tl.load(nrm + n + j, mask=inside, other=1.0)
        x = tl.load(t_row + c, mask=inside, other=0.0)
        N = _ed_clamp(r)
        out = lin / N - radial / (N * tl.where(r == 0.0, 1.0, r)) * tl.where(r == 0.0, 0.0, x)  # 0 at |x| = 0
        tl.store(gt_ptr + b * m * K + c, out, mask=inside)


def _ed_block(n: int, m: int, K: int, device) -> int:
    """Lanes: the largest loop of a program (cells, letters of a sequence, norms); at most 4096 in the interpreter
    (numpy: wide is cheap), 256 on a GPU."""
    cap = 1 << 12 if device.type == "cpu" else 256
    return min(cap, triton.next_power_of_2(max(n * m, n * K, m * K, n + m + 1)))


def _ed_check_sizes(n: int, m: int, K: int) -> None:
    if (n + 1) * (m + 1) + 4 * n * m + n + m >= 2**31 or max(n, m) * K >= 2**31:
        raise ValueError(f"relaxops: the triton edit distance needs per-row sizes below 2^31 elements, got n = {n}, "
                         f"m = {m}, K = {K}; use backend='cuda'")


def _on_device(device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def edit_distance_forward(s, t, beta, D, cos):
    B, n, K = s.shape
    m = t.shape[1]
    _ed_check_sizes(n, m, K)
    ws = s.new_empty(max(1, B * (n + m)))
    beta_t = torch.full((1,), beta, dtype=s.dtype, device=s.device)
    with _on_device(s.device):
        _ed_forward_kernel[(B,)](s, t, beta_t, D, cos, ws, n, m, K, BLOCK=_ed_block(n, m, K, s.device))


def edit_distance_backward(grad_D, s, t, D, cos, beta, grad_s, grad_t):
    B, n, K = s.shape
    m = t.shape[1]
    _ed_check_sizes(n, m, K)
    ws = s.new_empty(max(1, B * ((n + m) + (n + 1) * (m + 1) + 4 * n * m)))
    beta_t = torch.full((1,), beta, dtype=s.dtype, device=s.device)
    with _on_device(s.device):
        _ed_backward_kernel[(B,)](grad_D, s, t, D, cos, beta_t, grad_s, grad_t, ws, n, m, K,
                                  BLOCK=_ed_block(n, m, K, s.device))




# --- bubble sort --------------------------------------------------------------------------------------------------

