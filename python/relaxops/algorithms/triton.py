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
    """|s_i| for r < n and |t_{r - n}| after, into nrm[r] (edit_distance_norm: |x_0| for K = 1)."""
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
        first = tl.load(s_row + off, mask=inside & is_s, other=0.0) + tl.load(t_row + off, mask=inside & (r >= n),
                                                                             other=0.0)
        tl.store(nrm + r, tl.where(K == 1, tl.abs(first), tl.sqrt(acc)), mask=inside)


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
        ns = _ed_clamp(tl.load(nrm + i, mask=inside, other=1.0))
        nt = _ed_clamp(tl.load(nrm + n + j, mask=inside, other=1.0))
        dot = tl.zeros([BLOCK], dtype=D_ptr.dtype.element_ty)
        for k in range(0, K):  # of the unit vectors, as torch (a norm that overflows gives 0, not inf / inf)
            dot += (tl.load(s_row + i * K + k, mask=inside, other=0.0) / ns) * (
                tl.load(t_row + j * K + k, mask=inside, other=0.0) / nt)
        tl.store(c_row + c, dot, mask=inside)
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
def _ed_backward_kernel(gd_ptr, gD_ptr, s_ptr, t_ptr, D_ptr, cos_ptr, beta_ptr, gs_ptr, gt_ptr, ws_ptr, n, m, K,
                        HAS_GD: tl.constexpr, BLOCK: tl.constexpr):
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
    gd = tl.load(gd_ptr + b)
    for c0 in range(0, cells, BLOCK):  # G = grad_D (0 without it) + grad_distance at D[n][m]
        c = c0 + tl.arange(0, BLOCK)
        g = tl.where(c == cells - 1, gd, 0.0)
        if HAS_GD:
            g += tl.load(gD_row + c, mask=c < cells, other=0.0)
        tl.store(G + c, g, mask=c < cells)
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


def edit_distance_backward(grad_distance, grad_D, s, t, D, cos, beta, grad_s, grad_t):
    B, n, K = s.shape
    m = t.shape[1]
    _ed_check_sizes(n, m, K)
    ws = s.new_empty(max(1, B * ((n + m) + (n + 1) * (m + 1) + 4 * n * m)))
    beta_t = torch.full((1,), beta, dtype=s.dtype, device=s.device)
    with _on_device(s.device):
        _ed_backward_kernel[(B,)](grad_distance, D if grad_D is None else grad_D, s, t, D, cos, beta_t, grad_s, grad_t,
                                  ws, n, m, K, HAS_GD=grad_D is not None, BLOCK=_ed_block(n, m, K, s.device))




# --- bubble sort --------------------------------------------------------------------------------------------------
# One program per row, the row functions of csrc/algorithms/bubble_sort.h as scalar loops (the comparators of a row
# form one chain). The launchers keep the states in a work buffer full [B, passes + 1, n + 3] whose slot 0 is state
# 0 (x, 1, 0, 0), so pass i reads slot i - 1 and writes slot i; they find the non-finite rows and reduce the trip
# count on the device (no synchronisation): a first kernel runs each row until its own P <= epsilon, a second runs
# every row on to the batch's T and forms the mixture. A barrier separates a store from any load of it. beta and
# epsilon come in a tensor of the compute dtype (Python floats would be float32).


@triton.jit
def _bubble_pass(prev, nxt, tape, n, m, beta, HARD: tl.constexpr, TAPE: tl.constexpr):
    """bubble_pass_forward: m comparators from state prev to state nxt, the tape if TAPE."""
    carry = tl.load(prev)
    s = carry * 0.0
    w = tl.load(prev + n + 1)
    y = tl.load(prev + n + 2)
    for k in range(0, m):
        a = carry
        b = tl.load(prev + k + 1)
        z = beta * (a - b)
        e = tl.exp(-tl.abs(z))
        r = 1.0 / (1.0 + e)
        p = tl.where(z >= 0.0, r, e * r)
        np_ = tl.where(z >= 0.0, e * r, r)
        if HARD:
            q = tl.where(p > 0.5, 1.0, 0.0).to(p.dtype)
            nq = 1.0 - q
            slope = p * 0.0
        else:
            q = p
            nq = np_
            slope = beta * p * np_
        d = tl.where(a == b, 0.0, b - a)
        lo = tl.where(nq == 0.0, b, tl.where(nq == 1.0, a, b - nq * d))  # relaxed_minmax, alpha = 1 - q
        hi = tl.where(nq == 0.0, a, tl.where(nq == 1.0, b, a + nq * d))
        if TAPE:
            tl.store(tape + 6 * k, q)
            tl.store(tape + 6 * k + 1, nq)
            tl.store(tape + 6 * k + 2, d)
            tl.store(tape + 6 * k + 3, slope)
            tl.store(tape + 6 * k + 4, s)
            tl.store(tape + 6 * k + 5, y)
        tl.store(nxt + k, lo)
        carry = hi
        s = q + nq * s
        y = q + nq * y
        w = w + q
    tl.store(nxt + m, carry)
    for j in range(m + 1, n):
        tl.store(nxt + j, tl.load(prev + j))
    tl.store(nxt + n, s)
    tl.store(nxt + n + 1, w)
    tl.store(nxt + n + 2, y)


@triton.jit
def _bubble_pass_backward(tape, gnext, gprev, n, m):
    """bubble_pass_backward: the gradient of the state after the pass -> of the state before it."""
    gs = tl.load(gnext + n)
    gw = tl.load(gnext + n + 1)
    gy = tl.load(gnext + n + 2)
    gcarry = tl.load(gnext + m)
    for j in range(m + 1, n):
        tl.store(gprev + j, tl.load(gnext + j))
    for kk in range(0, m):
        k = m - 1 - kk
        q = tl.load(tape + 6 * k)
        nq = tl.load(tape + 6 * k + 1)
        d = tl.load(tape + 6 * k + 2)
        slope = tl.load(tape + 6 * k + 3)
        gq = gs * (1.0 - tl.load(tape + 6 * k + 4)) + gy * (1.0 - tl.load(tape + 6 * k + 5)) + gw
        gs = gs * nq
        gy = gy * nq
        gi = tl.load(gnext + k)
        gj = gcarry
        dd = tl.where(slope == 0.0, 0.0, (-gq - (gi - gj) * d) * slope)  # relaxed_gap_grad, dl/dalpha = -gq
        tl.store(gprev + k + 1, q * gi + nq * gj + dd)
        gcarry = nq * gi + q * gj - dd
    tl.store(gprev, gcarry)
    tl.store(gprev + n, gs * 0.0)
    tl.store(gprev + n + 1, gw)
    tl.store(gprev + n + 2, gy)


@triton.jit
def _bubble_passes_kernel(full_ptr, par_ptr, bad_ptr, rowt_ptr, n, passes, HARD: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    L = n + 3
    st = full_ptr + b * (passes + 1) * L
    beta = tl.load(par_ptr)
    eps = tl.load(par_ptr + 1)
    if tl.load(bad_ptr + b) != 0:
        tl.store(rowt_ptr + b, -1)
    else:
        prob = beta * 0.0 + 1.0
        i = 0
        while (i < passes) & (prob > eps):
            _bubble_pass(st + i * L, st + (i + 1) * L, st, n, n - 1 - i, beta, HARD, False)
            tl.debug_barrier()
            prob = prob * tl.load(st + (i + 1) * L + n)
            i += 1
        tl.store(rowt_ptr + b, i)


@triton.jit
def _bubble_mixture_kernel(full_ptr, par_ptr, bad_ptr, rowt_ptr, trips_ptr, sorted_ptr, swaps_ptr, any_ptr, n,
                           passes, HARD: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    L = n + 3
    st = full_ptr + b * (passes + 1) * L
    beta = tl.load(par_ptr)
    T = tl.load(trips_ptr)
    if tl.load(bad_ptr + b) != 0:
        for j0 in range(0, n, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            tl.store(sorted_ptr + b * n + j, tl.full([BLOCK], float("nan"), sorted_ptr.dtype.element_ty), mask=j < n)
        tl.store(swaps_ptr + b, float("nan"))
        tl.store(any_ptr + b, float("nan"))
        for c0 in range(0, passes * L, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            tl.store(st + L + c, tl.full([BLOCK], float("nan"), full_ptr.dtype.element_ty), mask=c < passes * L)
    else:
        for i in range(tl.load(rowt_ptr + b), T):
            _bubble_pass(st + i * L, st + (i + 1) * L, st, n, n - 1 - i, beta, HARD, False)
            tl.debug_barrier()
        # out = sum_{i=1..T} (P_{i-1} - P_i) state_i + P_T state_T over the values, swaps and any_swap (j >= n + 1)
        for j0 in range(0, L, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            mask = (j < L) & (j != n)
            prob = beta * 0.0 + 1.0
            acc = tl.zeros([BLOCK], dtype=full_ptr.dtype.element_ty)
            for i in range(1, T + 1):
                nxt = prob * tl.load(st + i * L + n)
                acc += (prob - nxt) * tl.load(st + i * L + j, mask=mask, other=0.0)
                prob = nxt
            acc += prob * tl.load(st + T * L + j, mask=mask, other=0.0)
            tl.store(sorted_ptr + b * n + j, acc.to(sorted_ptr.dtype.element_ty), mask=j < n)
            tl.store(swaps_ptr + b + (j - n - 1), acc.to(swaps_ptr.dtype.element_ty), mask=j == n + 1)
            tl.store(any_ptr + b + (j - n - 2), acc.to(any_ptr.dtype.element_ty), mask=j == n + 2)
        for i in range(T + 1, passes + 1):  # the unused slots: the last state
            for j0 in range(0, L, BLOCK):
                j = j0 + tl.arange(0, BLOCK)
                tl.store(st + i * L + j, tl.load(st + T * L + j, mask=j < L, other=0.0), mask=j < L)


@triton.jit
def _bubble_backward_kernel(full_ptr, par_ptr, bad_ptr, trips_ptr, gsorted_ptr, gswaps_ptr, gany_ptr, gx_ptr,
                            ws_ptr, n, passes, HARD: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    L = n + 3
    st = full_ptr + b * (passes + 1) * L
    ws = ws_ptr + b * (6 * n + 3 * L + 2 * (passes + 1))
    nxt = ws
    ga = nxt + L
    gb = ga + L
    tape = gb + L
    prob_a = tape + 6 * n
    e_a = prob_a + passes + 1
    beta = tl.load(par_ptr)
    T = tl.load(trips_ptr)
    gw = tl.load(gswaps_ptr + b)
    gy = tl.load(gany_ptr + b)
    if tl.load(bad_ptr + b) != 0:
        for j0 in range(0, n, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            tl.store(gx_ptr + b * n + j, tl.full([BLOCK], float("nan"), gx_ptr.dtype.element_ty), mask=j < n)
    else:
        # P_i and e_i = <g, state_i>, i = 0..T
        prob = beta * 0.0 + 1.0
        for i in range(0, T + 1):
            if i > 0:
                prob = prob * tl.load(st + i * L + n)
            e = gw * tl.load(st + i * L + n + 1) + gy * tl.load(st + i * L + n + 2)
            for j0 in range(0, n, BLOCK):
                j = j0 + tl.arange(0, BLOCK)
                g = tl.load(gsorted_ptr + b * n + j, mask=j < n, other=0.0)
                e += tl.sum(g * tl.load(st + i * L + j, mask=j < n, other=0.0))
            tl.store(prob_a + i, prob)
            tl.store(e_a + i, e)
        tl.debug_barrier()
        # state T: weight P_{T-1}; no gradient into swapped_T (P_T's cancels); state 0 (T = 0): weight 1
        cT = tl.where(T > 0, tl.load(prob_a + tl.maximum(T - 1, 0)), 1.0)
        for j0 in range(0, L, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            g = tl.load(gsorted_ptr + b * n + j, mask=j < n, other=0.0)
            g = tl.where(j == n + 1, gw, tl.where(j == n + 2, gy, g))
            tl.store(ga + j, cT * g, mask=j < L)
            tl.store(gb + j, cT * g, mask=j < L)  # the result if T = 0
        tl.debug_barrier()
        gprob = beta * 0.0
        for ii in range(0, T):
            i = T - ii
            _bubble_pass(st + (i - 1) * L, nxt, tape, n, n - i, beta, HARD, True)
            tl.debug_barrier()
            _bubble_pass_backward(tape, ga, gb, n, n - i)
            tl.debug_barrier()
            if i > 1:  # state i - 1: weight P_{i-2} - P_{i-1}, dl/dswapped_{i-1} = dl/dP_{i-1} P_{i-2}
                gprob = (tl.load(e_a + i) - tl.load(e_a + i - 1)) + gprob * tl.load(st + i * L + n)
                p2 = tl.load(prob_a + i - 2)
                c = p2 - tl.load(prob_a + i - 1)
                for j0 in range(0, L, BLOCK):
                    j = j0 + tl.arange(0, BLOCK)
                    g = tl.load(gsorted_ptr + b * n + j, mask=j < n, other=0.0)
                    g = tl.where(j == n + 1, gw, tl.where(j == n + 2, gy, g))
                    val = tl.load(gb + j, mask=j < L, other=0.0) + c * g
                    val = tl.where(j == n, gprob * p2, val)
                    tl.store(ga + j, val, mask=j < L)
                tl.debug_barrier()
        for j0 in range(0, n, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            tl.store(gx_ptr + b * n + j, tl.load(gb + j, mask=j < n, other=0.0).to(gx_ptr.dtype.element_ty),
                     mask=j < n)


def _bubble_full(x, passes, states=None):
    """[B, passes + 1, n + 3]: state 0 (x, 1, 0, 0), then the states after the passes (if given)."""
    B, n = x.shape
    full = x.new_empty(B, passes + 1, n + 3)
    full[:, 0, :n] = x
    full[:, 0, n] = 1
    full[:, 0, n + 1:] = 0
    if states is not None:
        full[:, 1:] = states
    return full


def _bubble_block(n: int, device) -> int:
    return min(1 << 12 if device.type == "cpu" else 128, triton.next_power_of_2(n + 3))


def bubble_sort_forward(x, beta, hard, epsilon, sorted_, swaps, any_swap, states, trips):
    B, n = x.shape
    passes = states.shape[1]
    full = _bubble_full(x, passes)
    par = torch.tensor([beta, epsilon], dtype=x.dtype, device=x.device)
    bad = (~x.isfinite().all(1)).to(torch.int32)
    row_trips = torch.empty(B, dtype=torch.int32, device=x.device)
    with _on_device(x.device):
        _bubble_passes_kernel[(B,)](full, par, bad, row_trips, n, passes, HARD=hard, num_warps=1)
        trips.copy_(row_trips.amax().clamp_min(0).reshape(1))
        _bubble_mixture_kernel[(B,)](full, par, bad, row_trips, trips, sorted_, swaps, any_swap, n, passes, HARD=hard,
                                     BLOCK=_bubble_block(n, x.device), num_warps=1)
    states.copy_(full[:, 1:])


def bubble_sort_backward(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, grad_x):
    B, n = x.shape
    passes = states.shape[1]
    full = _bubble_full(x, passes, states)
    par = torch.tensor([beta, 0.0], dtype=x.dtype, device=x.device)
    bad = (~x.isfinite().all(1)).to(torch.int32)
    ws = x.new_empty(B * (6 * n + 3 * (n + 3) + 2 * (passes + 1)))
    with _on_device(x.device):
        _bubble_backward_kernel[(B,)](full, par, bad, trips, grad_sorted, grad_swaps, grad_any, grad_x, ws, n, passes,
                                      HARD=hard, BLOCK=_bubble_block(n, x.device), num_warps=1)


