"""Triton kernels of the sorting-network ops (the six kernels of ``csrc/sortnet/sortnet.h``).

Wire-parallel form: a program owns every wire of a block of rows and applies one whole layer at a time,
driven by per-layer tables padded to ``N_PAD`` wires (``_wire_tables``): ``partner`` (the other wire of
the comparator, or the wire itself), ``comp`` (the comparator id) and ``role`` (0: the wire passes through
unchanged, selected with ``where``; 1: min wire; 2: max wire). The rows' state lives in a per-program global
scratch (two buffers, see ``_buffer``): a layer loads each wire's own value and its partner's, in chunks of
``BLOCK`` wires, writes the other buffer, and a barrier ends it. Both wires of a comparator compute the same
``d = x_j - x_i`` and ``alpha``; the min wire writes the per-comparator outputs. ``P_l`` is
symmetric, so both wires update as ``alpha own + (1 - alpha) partner`` (values) or ``partner + alpha (own -
partner)`` (matrix).

Layouts (row-major, contiguous): ``x, sorted [B, n]``, ``d, alpha [B, C]``, ``X [B, n - col_begin, n]`` with
``X[b, c - col_begin, r] = P[r, c]`` (``col_begin = 0``: ``X = P^T``; top-k runs the reversed network, see
``csrc/sortnet/sortnet.h``). A matrix program owns ``R`` rows and a tile of ``TILE`` columns of
``Y = P_l ... P_1`` as a block ``W[R, N_PAD, TILE]`` (``W[r, w, cc] = Y[w, col0 + cc]``, in its scratch).

Rows of their own lengths (``lengths``, a ``k`` per row; ``networks.RowNetworks``): every kernel takes the rows'
table ``spec [B, 6]`` and the tables of the rows' networks (``ROWS``, see the comment above ``_rows_of``); each row
runs its own network on its ``L_b`` wires, and its pads are never read and come out 0.

Runs on CUDA tensors and, with ``TRITON_INTERPRET=1``, on CPU tensors (blocks are then chosen large, since
the interpreter runs programs one after the other).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import weakref

import numpy as np
import torch
import triton
import triton.language as tl

from .._triton import interpreted
from .networks import RowNetworks
from .relaxations import ART_EPS

# Elements of a chunk (R rows or R * TILE columns times BLOCK wires) on a GPU: 4 per thread at 8 warps.
_CHUNK = 1024
# Bound on the per-launch scratch of matrix_backward (forward differences + partial sums); larger
# problems run in chunks of rows, then of column tiles.
_BACKWARD_SCRATCH_BYTES = 1 << 30
# Bound on the per-launch scratch of matrix_forward (the states, 2 R N_PAD TILE per program: twice the size of X
# for the whole batch); larger problems run in chunks of rows.
_FORWARD_SCRATCH_BYTES = 1 << 28


def _device_fn(fn):
    """@triton.jit for a device helper; a plain function under the interpreter, where every nested jit call
    re-patches triton.language (milliseconds per layer otherwise; triton.language is already patched)."""
    jitted = triton.jit(fn)
    return fn if type(jitted).__name__ == "InterpretedFunction" else jitted


# --- relaxations (ids of relaxations.RELAXATIONS / csrc/common/relax.h) -------------------------------------


@_device_fn
def _relax(d, prm_ptr, KIND: tl.constexpr):
    """(alpha, slope) = (f(d), f'(d)) with v = s d, as relax_alpha in csrc/common/relax.h.

    prm = [s, art_lambda, eps, 1/pi, 1/sqrt(2), 1/sqrt(2 pi)] in the data dtype (older triton versions
    round python float literals to float32). Sigmoids take exp of a non-positive argument only."""
    s = tl.load(prm_ptr)
    v = s * d
    a = tl.abs(v)
    if KIND == 0:  # logistic
        e = tl.exp(-a)
        alpha = tl.where(v >= 0, 1 / (1 + e), e / (1 + e))
        slope = s * alpha * (1 - alpha)
    elif KIND == 1:  # logistic_phi (ART): sigmoid(v (|d| + eps)^-lambda)
        lam = tl.load(prm_ptr + 1)
        eps = tl.load(prm_ptr + 2)
        ad = tl.abs(d)
        scale = tl.exp(tl.log(ad + eps) * (-lam))
        z = s * (d * scale)  # |d scale| <= |d|^(1 - lambda): s d alone may overflow
        e = tl.exp(-tl.abs(z))
        alpha = tl.where(z >= 0, 1 / (1 + e), e / (1 + e))
        slope = s * alpha * (1 - alpha) * scale * (1 - lam * ad / (ad + eps))
    elif KIND == 2:  # gaussian: Phi(v)
        alpha = 0.5 + 0.5 * tl.erf(v * tl.load(prm_ptr + 4))
        slope = s * tl.exp(-0.5 * v * v) * tl.load(prm_ptr + 5)
    elif KIND == 3:  # reciprocal: 1/2 + sign(v) (1 - 2 / (2 + |v|)) / 2
        sgn = tl.where(v > 0, 1.0, tl.where(v < 0, -1.0, 0.0)).to(v.dtype)
        q = 2 + a
        alpha = 0.5 + 0.5 * sgn * (1 - 2 / q)
        slope = s / (q * q)
    elif KIND == 4:  # cauchy: atan(v) / pi + 1/2
        # atan(|v|): reflection to r in [0, 1], three halvings atan(r) = 2 atan(r / (1 + sqrt(1 + r^2)))
        # down to r <= tan(pi/32), then 9 terms of the odd Taylor series (remainder < 1e-18)
        inv_pi = tl.load(prm_ptr + 3)
        one = s * 0 + 1
        big = a > 1
        r = tl.where(big, one / tl.where(big, a, one), a)
        for _ in tl.static_range(3):
            r = r / (1 + tl.sqrt(1 + r * r))
        z = r * r
        p = one / 17
        for k in tl.static_range(7, -1, -1):
            p = one / (2 * k + 1) - z * p
        h = 8 * r * p * inv_pi  # atan(r) / pi
        sgn = tl.where(v > 0, 1.0, tl.where(v < 0, -1.0, 0.0)).to(v.dtype)
        alpha = 0.5 + sgn * tl.where(big, 0.5 - h, h)
        slope = s * inv_pi / (1 + v * v)
    else:  # optimal: v + 1/2 on [-1/4, 1/4], tails 1 - 1/(16 v) and -1/(16 v)
        eps = tl.load(prm_ptr + 2)
        tail = 1 / (16 * (a + eps))
        alpha = tl.where(v > 0.25, 1 - tail, tl.where(v < -0.25, tail, v + 0.5))
        slope = tl.where(a > 0.25, s * 16 * tail * tail, s + 0 * v)
    # an infinite gap is a hard comparison: alpha = 0 or 1, f' = 0 (as relax.h; ART's formula gives NaN there)
    hard = tl.abs(d) == float("inf")
    alpha = tl.where(hard, (d > 0).to(alpha.dtype), alpha)
    slope = tl.where(hard, 0.0, slope).to(alpha.dtype)
    return alpha, slope


@_device_fn
def _mix(a, own, partner, e):
    """a own + (1 - a) partner (P_l is symmetric: the new value of either wire) as partner + a e, e = own - partner
    (0 at ties); a = 0 or 1 passes a wire through exactly, also an infinite one (relaxed_minmax in sortnet.h)."""
    return tl.where(a == 0, partner, tl.where(a == 1, own, partner + a * e))


# Per-layer wire tables, padded to N_PAD wires (see _wire_tables): partner (itself when passing through),
# comparator id (0 when passing through: loads stay in bounds, results are discarded), role (0 pass,
# 1 min wire, 2 max wire). Rows past B are clamped for loads and masked for stores.
#
# Rows of their own lengths (ROWS, networks.RowNetworks): spec [B, 6] int64 is the rows' table (group, wires L_b,
# layer_begin, layer_end, cols, out_first; networks.row_networks) and the tables are those of the rows' networks
# one after the other, after a layer 0 that passes every wire: group g's layer l is table layer off[g] + l. Row b
# takes table layer off[g_b] + l in its layers [layer_begin, layer_end), layer 0 outside them, and passes every
# comparator that reaches a wire >= L_b (bitonic and odd_even: all rows run the network for n, a prefix of it).
# A program loops over the union of its rows' layer ranges. Pads are never read (loads masked to w < L_b, pad
# wires start at 0 and pass through), so their outputs are 0; the launchers zero d, alpha and the partial sums of
# the comparators a row does not run.


@_device_fn
def _rows_of(spec_ptr, off_ptr, rows, B, n, L, col_begin, ROWS: tl.constexpr):
    """(first table layer, wires L_b, layer_begin, layer_end, cols, out_first) of the rows ``rows`` (any shape),
    and the layer range [lo, hi) of the program. Full rows: the network for n, columns col_begin.. of Y."""
    if ROWS:
        sp = spec_ptr + tl.minimum(rows, B - 1) * 6
        lb = tl.load(sp + 2)
        le = tl.load(sp + 3)
        tb = tl.load(off_ptr + tl.load(sp)).to(tl.int64)
        return tb, tl.load(sp + 1), lb, le, tl.load(sp + 4), tl.load(sp + 5), tl.min(lb), tl.max(le)
    else:
        return 0, n, 0, L, n - col_begin, 0, 0, L


@_device_fn
def _layer(partner_ptr, comp_ptr, role_ptr, l, tb, lb, le, Lb, w, N_PAD: tl.constexpr, ROWS: tl.constexpr):
    """(partner, comparator, role) of the wires ``w`` in layer ``l`` of each row's network (see above)."""
    if ROWS:
        t = tl.where((l >= lb) & (l < le), tb + l, 0) * N_PAD + w
    else:
        t = l * N_PAD + w
    p = tl.load(partner_ptr + t)
    c = tl.load(comp_ptr + t)
    role = tl.load(role_ptr + t)
    if ROWS:
        role = tl.where((w < Lb) & (p < Lb), role, 0)
    return p, c, role


# --- row state in global scratch ----------------------------------------------------------------------------


# A program's rows live in its block of a global scratch (L1/L2-resident), not in registers: per row (or row and
# column tile), two buffers of N_PAD wires per state array; layer step k reads buffer k % 2 and writes the other,
# then a barrier. A layer runs in chunks of BLOCK wires, each wire loading its own value and its partner's by
# address, so a thread holds R * BLOCK (* TILE) / threads elements whatever n is (docs/gpu.md: a whole row in
# registers, permuted with tl.gather, spilled).


@_device_fn
def _buffer(scr, k, SIZE: tl.constexpr):
    """Buffer of layer step k (0 or 1) of a state array at scr (two buffers of SIZE elements)."""
    return scr + (k % 2) * SIZE


# --- 1. values forward --------------------------------------------------------------------------------------


@triton.jit
def _values_fwd_kernel(
    x_ptr,
    sorted_ptr,
    d_ptr,
    alpha_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    prm_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    KIND: tl.constexpr,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # scratch [programs * R, 2, N_PAD]: the values v
    pid = tl.program_id(0)
    rows = (pid * R + tl.arange(0, R)).to(tl.int64)[:, None]  # [R, 1]
    j = tl.arange(0, BLOCK)[None, :]  # [1, BLOCK]: the wires of a chunk
    row_ok = rows < B
    tb, Lb, lb, le, _cols, _of, lo, hi = _rows_of(spec_ptr, off_ptr, rows, B, n, L, 0, ROWS)
    cbase = tl.minimum(rows, B - 1) * C  # [R, 1]
    scr = scr_ptr + rows * (2 * N_PAD)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(scr + w, tl.load(x_ptr + rows * n + w, mask=row_ok & (w < Lb), other=0))
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD)
        dst = _buffer(scr, k + 1, N_PAD)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, lo + k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            v = tl.load(src + w)
            vp = tl.load(src + p)
            e = tl.where(v == vp, 0, v - vp)  # equal values (also equal infinities) tie at d = 0
            dd = tl.where(is_min, -e, e)  # x_j - x_i on both wires
            a, _ = _relax(dd, prm_ptr, KIND)
            tl.store(dst + w, tl.where(role != 0, _mix(a, v, vp, e), v))
            m = row_ok & is_min
            tl.store(d_ptr + cbase + c, dd, mask=m)
            tl.store(alpha_ptr + cbase + c, a, mask=m)
    tl.debug_barrier()
    res = _buffer(scr, hi - lo, N_PAD)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(sorted_ptr + rows * n + w, tl.load(res + w), mask=row_ok & (w < n))


# --- 2. values backward -------------------------------------------------------------------------------------


@triton.jit
def _values_bwd_kernel(
    gs_ptr,
    ga_ptr,
    d_ptr,
    alpha_ptr,
    gx_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    prm_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    KIND: tl.constexpr,
    HAS_GS: tl.constexpr,
    HAS_GA: tl.constexpr,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # reverse sweep with g = dl/dx^(l): P_l is symmetric, plus the alpha path
    #   dalpha = grad_alpha - (g_i - g_j) d;  g_i, g_j <- mix(g_i, g_j) -/+ dalpha f'(d)
    # scratch [programs * R, 2, N_PAD]: g
    pid = tl.program_id(0)
    rows = (pid * R + tl.arange(0, R)).to(tl.int64)[:, None]
    j = tl.arange(0, BLOCK)[None, :]
    row_ok = rows < B
    tb, Lb, lb, le, _cols, _of, lo, hi = _rows_of(spec_ptr, off_ptr, rows, B, n, L, 0, ROWS)
    cbase = tl.minimum(rows, B - 1) * C
    scr = scr_ptr + rows * (2 * N_PAD)
    dtype = d_ptr.dtype.element_ty
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        if HAS_GS:
            g = tl.load(gs_ptr + rows * n + w, mask=row_ok & (w < Lb), other=0).to(dtype)
        else:
            g = tl.zeros((R, BLOCK), dtype=dtype)
        tl.store(scr + w, g)
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD)
        dst = _buffer(scr, k + 1, N_PAD)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, hi - 1 - k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            dd = tl.load(d_ptr + cbase + c)
            a = tl.load(alpha_ptr + cbase + c)
            _, slope = _relax(dd, prm_ptr, KIND)
            g = tl.load(src + w)
            gp = tl.load(src + p)
            gi = tl.where(is_min, g, gp)
            gj = tl.where(is_min, gp, g)
            dalpha = -(gi - gj) * dd
            if HAS_GA:
                dalpha = tl.load(ga_ptr + cbase + c) + dalpha
            dds = tl.where(slope == 0, 0, dalpha * slope)  # f'(d) d -> 0 for an infinite gap (no inf * 0)
            new = tl.where(is_min, a * gi + (1 - a) * gj - dds, (1 - a) * gi + a * gj + dds)
            tl.store(dst + w, tl.where(role != 0, new, g))
    tl.debug_barrier()
    res = _buffer(scr, hi - lo, N_PAD)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(gx_ptr + rows * n + w, tl.load(res + w), mask=row_ok & (w < n))


# --- 3. matrix forward --------------------------------------------------------------------------------------


@_device_fn
def _identity_columns(w, o, Lb, cols, out_first, dtype):
    """Y^(0) = I on the output columns o: output column o holds Y-column L_b - cols + (o - out_first) for o in
    [out_first, out_first + cols), nothing (0) elsewhere."""
    ok = (o >= out_first) & (o < out_first + cols)
    return ((w == Lb - cols + o - out_first) & ok).to(dtype)


@_device_fn
def _matrix_sweep(
    partner_ptr,
    comp_ptr,
    role_ptr,
    scr,
    abase,
    diff,
    tb,
    lb,
    le,
    Lb,
    j,
    lo,
    hi,
    N_PAD: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    DIFF: tl.constexpr,
):
    """Y^(l) = P_l Y^(l-1) for l in [lo, hi) on the scratch buffers of scr (W[r, w, cc] at w TILE + cc); DIFF:
    the min wires also store Y_i - Y_j of the state before their comparator at diff + c TILE. Returns the buffer
    that holds the result."""
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD * TILE)
        dst = _buffer(scr, k + 1, N_PAD * TILE)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, lo + k, tb, lb, le, Lb, w, N_PAD, ROWS)
            a = tl.load(abase + c)  # [R, BLOCK, 1]
            W = tl.load(src + w * TILE)
            Wp = tl.load(src + p * TILE)
            e = W - Wp  # Y_i - Y_j on the min wire
            if DIFF:
                tl.store(diff + c * TILE, e, mask=role == 1)
            tl.store(dst + w * TILE, tl.where(role != 0, Wp + a * e, W))
    tl.debug_barrier()
    return _buffer(scr, hi - lo, N_PAD * TILE)


@triton.jit
def _matrix_fwd_kernel(
    alpha_ptr,
    X_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    col_begin,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # W[r, w, cc] = Y[w, column of output column o = pid_t TILE + cc] of row r (full rows: Y-column col_begin + o);
    # Y^(0) = I; each layer: W_w <- W_p + alpha (W_w - W_p). Scratch [programs, R, 2, N_PAD, TILE]: W.
    pid_r = tl.program_id(0)
    pid_t = tl.program_id(1)
    rl = (pid_r * R + tl.arange(0, R)).to(tl.int64)[:, None, None]  # [R, 1, 1]
    j = tl.arange(0, BLOCK)[None, :, None]  # [1, BLOCK, 1]
    cc = tl.arange(0, TILE)[None, None, :]  # [1, 1, TILE]
    o = pid_t * TILE + cc
    m = n - col_begin  # output columns
    dtype = alpha_ptr.dtype.element_ty
    tb, Lb, lb, le, cols, of, lo, hi = _rows_of(spec_ptr, off_ptr, rl, B, n, L, col_begin, ROWS)
    abase = alpha_ptr + tl.minimum(rl, B - 1) * C
    q = (pid_r * tl.num_programs(1) + pid_t).to(tl.int64)
    scr = scr_ptr + (q * R + tl.arange(0, R)[:, None, None]) * (2 * N_PAD * TILE) + cc  # [R, 1, TILE]
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(scr + w * TILE, tl.zeros((R, BLOCK, TILE), dtype=dtype) + _identity_columns(w, o, Lb, cols, of, dtype))
    res = _matrix_sweep(
        partner_ptr,
        comp_ptr,
        role_ptr,
        scr,
        abase,
        scr,
        tb,
        lb,
        le,
        Lb,
        j,
        lo,
        hi,
        N_PAD,
        TILE,
        BLOCK,
        ROWS,
        False,
    )
    # stored transposed: X[b, o, r] = Y[r, column of o], X is [B, m, n]; int64 offsets (rl is int64; o * n alone
    # can pass 2^31)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(X_ptr + (rl * m + o) * n + w, tl.load(res + w * TILE), mask=(rl < B) & (w < n) & (o < m))


# --- 4. matrix backward -------------------------------------------------------------------------------------


@triton.jit
def _matrix_bwd_kernel(
    alpha_ptr,
    gX_ptr,
    part_ptr,
    diff_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    col_begin,
    t0,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # grad_alpha_c = sum over the tile's columns of (H_i - H_j)(Y_i - Y_j), H = dl/dY after comparator c
    # (H = grad_X^T after the last layer), Y the state before it. The forward pass stores Y_i - Y_j per
    # comparator (diff[q, r, c, cc]); the reverse pass writes partial sums part[b, tile - t0, c]. Output
    # columns o as _matrix_fwd_kernel; grad_X is [B, n - col_begin, n]. Scratch as _matrix_fwd_kernel's: W, then H.
    pid_r = tl.program_id(0)
    pid_t = tl.program_id(1)
    nt = tl.num_programs(1)
    rl = (pid_r * R + tl.arange(0, R)).to(tl.int64)[:, None, None]
    j = tl.arange(0, BLOCK)[None, :, None]
    cc = tl.arange(0, TILE)[None, None, :]
    o = (t0 + pid_t) * TILE + cc
    m = n - col_begin
    row_ok = rl < B
    dtype = alpha_ptr.dtype.element_ty
    tb, Lb, lb, le, cols, of, lo, hi = _rows_of(spec_ptr, off_ptr, rl, B, n, L, col_begin, ROWS)
    abase = alpha_ptr + tl.minimum(rl, B - 1) * C
    q = (pid_r * nt + pid_t).to(tl.int64)
    rq = q * R + tl.arange(0, R)[:, None, None]
    scr = scr_ptr + rq * (2 * N_PAD * TILE) + cc  # [R, 1, TILE]
    diff = diff_ptr + (rq * C) * TILE + cc  # [R, 1, TILE]
    part = part_ptr + (rl * nt + pid_t) * C  # [R, 1, 1]
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(scr + w * TILE, tl.zeros((R, BLOCK, TILE), dtype=dtype) + _identity_columns(w, o, Lb, cols, of, dtype))
    _matrix_sweep(
        partner_ptr,
        comp_ptr,
        role_ptr,
        scr,
        abase,
        diff,
        tb,
        lb,
        le,
        Lb,
        j,
        lo,
        hi,
        N_PAD,
        TILE,
        BLOCK,
        ROWS,
        True,
    )  # (ends with a barrier: the differences are read back below)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        H = tl.load(gX_ptr + (rl * m + o) * n + w, mask=row_ok & (w < Lb) & (o < m), other=0).to(dtype)
        tl.store(scr + w * TILE, H)
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD * TILE)
        dst = _buffer(scr, k + 1, N_PAD * TILE)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, hi - 1 - k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            a = tl.load(abase + c)
            H = tl.load(src + w * TILE)
            Hp = tl.load(src + p * TILE)
            e = H - Hp  # H_i - H_j on the min wire
            y = tl.load(diff + c * TILE, mask=is_min, other=0)
            tl.store(part + c, tl.sum(e * y, axis=2)[:, :, None], mask=row_ok & is_min)
            tl.store(dst + w * TILE, tl.where(role != 0, Hp + a * e, H))


# --- 5. rank forward ----------------------------------------------------------------------------------------


@triton.jit
def _rank_fwd_kernel(
    x_ptr,
    rank_ptr,
    alpha_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    prm_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    KIND: tl.constexpr,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # the values pass of _values_fwd_kernel (alpha to a workspace), then rank = P_1 ... P_L pos: pos = 1..L_b (0 on
    # pads) mixed from the last layer back with those alphas (read back after a barrier: the min wires wrote them).
    # Scratch [programs * R, 2, N_PAD]: v, then the ranks r.
    pid = tl.program_id(0)
    rows = (pid * R + tl.arange(0, R)).to(tl.int64)[:, None]
    j = tl.arange(0, BLOCK)[None, :]
    row_ok = rows < B
    tb, Lb, lb, le, _cols, _of, lo, hi = _rows_of(spec_ptr, off_ptr, rows, B, n, L, 0, ROWS)
    cbase = tl.minimum(rows, B - 1) * C
    scr = scr_ptr + rows * (2 * N_PAD)
    dtype = scr_ptr.dtype.element_ty
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(scr + w, tl.load(x_ptr + rows * n + w, mask=row_ok & (w < Lb), other=0))
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD)
        dst = _buffer(scr, k + 1, N_PAD)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, lo + k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            v = tl.load(src + w)
            vp = tl.load(src + p)
            e = tl.where(v == vp, 0, v - vp)
            a, _ = _relax(tl.where(is_min, -e, e), prm_ptr, KIND)
            tl.store(dst + w, tl.where(role != 0, _mix(a, v, vp, e), v))
            tl.store(alpha_ptr + cbase + c, a, mask=row_ok & is_min)
    tl.debug_barrier()  # every v is read, every alpha written
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(scr + w, tl.zeros((R, BLOCK), dtype=dtype) + tl.where(w < Lb, w + 1, 0).to(dtype))
    for k in range(hi - lo):
        tl.debug_barrier()
        src = _buffer(scr, k, N_PAD)
        dst = _buffer(scr, k + 1, N_PAD)
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, hi - 1 - k, tb, lb, le, Lb, w, N_PAD, ROWS)
            a = tl.load(alpha_ptr + cbase + c)
            r = tl.load(src + w)
            rp = tl.load(src + p)
            tl.store(dst + w, tl.where(role != 0, rp + a * (r - rp), r))
    tl.debug_barrier()
    res = _buffer(scr, hi - lo, N_PAD)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(rank_ptr + rows * n + w, tl.load(res + w), mask=row_ok & (w < n))


# --- 6. rank backward ---------------------------------------------------------------------------------------


@triton.jit
def _rank_bwd_kernel(
    x_ptr,
    gr_ptr,
    gx_ptr,
    d_ptr,
    alpha_ptr,
    du_ptr,
    partner_ptr,
    comp_ptr,
    role_ptr,
    prm_ptr,
    scr_ptr,
    spec_ptr,
    off_ptr,
    B,
    n,
    C,
    L,
    KIND: tl.constexpr,
    R: tl.constexpr,
    N_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # forward sweep: the values pass again (d, alpha to workspaces) and u = grad_rank pushed through each layer
    # after it (u <- P_l u) storing du = u_i - u_j; then, from the last layer back, v = P_{l+1} ... P_L pos and the
    # values backward of g with grad_alpha = du (v_i - v_j). Scratch [programs * R, 2, 2, N_PAD]: v and u, then v
    # and g (state array 1 at + 2 N_PAD).
    pid = tl.program_id(0)
    rows = (pid * R + tl.arange(0, R)).to(tl.int64)[:, None]
    j = tl.arange(0, BLOCK)[None, :]
    row_ok = rows < B
    tb, Lb, lb, le, _cols, _of, lo, hi = _rows_of(spec_ptr, off_ptr, rows, B, n, L, 0, ROWS)
    cbase = tl.minimum(rows, B - 1) * C
    scr = scr_ptr + rows * (4 * N_PAD)
    scr_u = scr + 2 * N_PAD
    dtype = scr_ptr.dtype.element_ty
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        ld = row_ok & (w < Lb)
        tl.store(scr + w, tl.load(x_ptr + rows * n + w, mask=ld, other=0))
        tl.store(scr_u + w, tl.load(gr_ptr + rows * n + w, mask=ld, other=0))
    for k in range(hi - lo):
        tl.debug_barrier()
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, lo + k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            m = row_ok & is_min
            src = _buffer(scr, k, N_PAD)
            v = tl.load(src + w)
            vp = tl.load(src + p)
            e = tl.where(v == vp, 0, v - vp)
            dd = tl.where(is_min, -e, e)
            a, _ = _relax(dd, prm_ptr, KIND)
            tl.store(_buffer(scr, k + 1, N_PAD) + w, tl.where(role != 0, _mix(a, v, vp, e), v))
            tl.store(d_ptr + cbase + c, dd, mask=m)
            tl.store(alpha_ptr + cbase + c, a, mask=m)
            src = _buffer(scr_u, k, N_PAD)
            u = tl.load(src + w)
            up = tl.load(src + p)
            eu = u - up  # u_i - u_j on the min wire
            tl.store(du_ptr + cbase + c, eu, mask=m)
            tl.store(_buffer(scr_u, k + 1, N_PAD) + w, tl.where(role != 0, up + a * eu, u))
    scr_g = scr_u
    tl.debug_barrier()  # every v and u is read; d, alpha, du are read back below
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        zero = tl.zeros((R, BLOCK), dtype=dtype)
        tl.store(scr + w, zero + tl.where(w < Lb, w + 1, 0).to(dtype))
        tl.store(scr_g + w, zero)
    for k in range(hi - lo):
        tl.debug_barrier()
        for w0 in range(0, N_PAD, BLOCK):
            w = w0 + j
            p, c, role = _layer(partner_ptr, comp_ptr, role_ptr, hi - 1 - k, tb, lb, le, Lb, w, N_PAD, ROWS)
            is_min = role == 1
            dd = tl.load(d_ptr + cbase + c)
            a = tl.load(alpha_ptr + cbase + c)
            du = tl.load(du_ptr + cbase + c)
            _, slope = _relax(dd, prm_ptr, KIND)
            src = _buffer(scr, k, N_PAD)
            v = tl.load(src + w)
            vp = tl.load(src + p)
            src = _buffer(scr_g, k, N_PAD)
            g = tl.load(src + w)
            gp = tl.load(src + p)
            ve = v - vp
            gi = tl.where(is_min, g, gp)
            gj = tl.where(is_min, gp, g)
            dalpha = du * tl.where(is_min, ve, -ve) - (gi - gj) * dd
            dds = tl.where(slope == 0, 0, dalpha * slope)  # f'(d) d -> 0 for an infinite gap (no inf * 0)
            new = tl.where(is_min, a * gi + (1 - a) * gj - dds, (1 - a) * gi + a * gj + dds)
            tl.store(_buffer(scr_g, k + 1, N_PAD) + w, tl.where(role != 0, new, g))
            tl.store(_buffer(scr, k + 1, N_PAD) + w, tl.where(role != 0, vp + a * ve, v))
    tl.debug_barrier()
    res = _buffer(scr_g, hi - lo, N_PAD)
    for w0 in range(0, N_PAD, BLOCK):
        w = w0 + j
        tl.store(gx_ptr + rows * n + w, tl.load(res + w), mask=row_ok & (w < n))


# --- launchers ----------------------------------------------------------------------------------------------


_TABLES: weakref.WeakKeyDictionary[object, dict] = weakref.WeakKeyDictionary()


def _wire_tables(net, device, n_pad):
    """(partner, comp, role) int32/int32/int8 [L, n_pad] on device, cached per network (see the kernels)."""
    per_net = _TABLES.setdefault(net, {})
    key = (str(device), n_pad)
    if key not in per_net:
        partner, comp_of = net.wire_tables()
        L, n = partner.shape
        w = np.arange(n, dtype=np.int32)
        P = np.tile(np.arange(n_pad, dtype=np.int32), (L, 1))
        P[:, :n] = partner
        act = comp_of >= 0
        comp = np.zeros((L, n_pad), dtype=np.int32)
        comp[:, :n] = np.where(act, comp_of, 0)
        role = np.zeros((L, n_pad), dtype=np.int8)
        if net.num_comparators:  # (layers without comparators: a row's network for 1 wire)
            role[:, :n] = np.where(act, np.where(net.cmin[comp[:, :n]] == w, 1, 2), 0)
        per_net[key] = tuple(torch.from_numpy(a).to(device) for a in (P, comp, role))
    return per_net[key]


# The tables of the rows' networks (RowNetworks.nets) of the last few calls, keyed by the networks.
_ROW_TABLES: collections.OrderedDict = collections.OrderedDict()


def _row_tables(nets, device, n_pad):
    """(partner, comp, role, off) for rows of their own lengths (see the kernels): a layer 0 that passes every
    wire, then the tables of ``nets`` one after the other; ``off`` int32 [G]: group g's first table layer."""
    key = (nets, str(device), n_pad)
    if key in _ROW_TABLES:
        _ROW_TABLES.move_to_end(key)
        return _ROW_TABLES[key]
    pass_layer = (
        torch.arange(n_pad, dtype=torch.int32, device=device)[None],
        torch.zeros(1, n_pad, dtype=torch.int32, device=device),
        torch.zeros(1, n_pad, dtype=torch.int8, device=device),
    )
    parts = [pass_layer, *(_wire_tables(net, device, n_pad) for net in nets)]
    tables = tuple(torch.cat([t[i] for t in parts]).contiguous() for i in range(3))
    off = np.cumsum([1] + [net.num_layers for net in nets[:-1]], dtype=np.int32)
    _ROW_TABLES[key] = (*tables, torch.from_numpy(off).to(device))
    while len(_ROW_TABLES) > 16:
        _ROW_TABLES.popitem(last=False)
    return _ROW_TABLES[key]


def _net_args(net, device, n_pad):
    """The kernels' network arguments: (partner, comp, role, spec, off) and (C, L, ROWS). ``net``: a ``Network``
    (full rows; spec and off unused) or the ``RowNetworks`` of rows of their own lengths (C: the row stride of d
    and alpha; L: unused, the kernels read the rows' layer ranges)."""
    if isinstance(net, RowNetworks):
        P, comp, role, off = _row_tables(net.nets, device, n_pad)
        return (P, comp, role, net.spec, off), (net.C, 0, True)
    tables = _wire_tables(net, device, n_pad)
    return (*tables, tables[0], tables[0]), (net.num_comparators, net.num_layers, False)


def _comparators(net) -> int:
    return net.C if isinstance(net, RowNetworks) else net.num_comparators


def _pads(net, n, device):
    """bool [B, n]: the pads of rows of their own lengths; None for full rows."""
    if not isinstance(net, RowNetworks):
        return None
    return torch.arange(n, device=device) >= net.spec[:, 1:2]


def _on(device):
    """Triton launches on the current CUDA device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _pow2(k: int) -> int:
    return 1 << max(0, int(k) - 1).bit_length()


@functools.lru_cache(maxsize=64)
def _params_cached(steepness: float, art_lambda: float, dtype, device_str: str):
    vals = [steepness, art_lambda, ART_EPS, 1 / math.pi, 1 / math.sqrt(2.0), 1 / math.sqrt(2 * math.pi)]
    return torch.tensor(vals, dtype=dtype, device=device_str)


def _params(steepness, art_lambda, dtype, device):
    return _params_cached(float(steepness), float(art_lambda), dtype, str(device))


def _num_warps(elements: int) -> int:
    """Warps for a chunk of ``elements``: 4 elements per thread (fp64 cauchy, the heaviest: 165 registers)."""
    return max(1, min(8, _pow2(elements // 128)))


def _values_cfg(B, n, device):
    """(R, N_PAD, BLOCK): rows per program, padded wires, wires per chunk (the interpreter: one chunk)."""
    n_pad = _pow2(n)
    if interpreted(device):
        R = max(1, min(_pow2(B), (1 << 16) // n_pad))
        return R, n_pad, n_pad
    R = max(1, min(_CHUNK // n_pad, _pow2(triton.cdiv(B, 264))))
    return R, n_pad, min(n_pad, _CHUNK // R)


def _matrix_cfg(B, n, dtype, device):
    """(R, N_PAD, TILE, BLOCK): rows and columns per program (a program's scratch: 2 R N_PAD TILE elements, 32 KB on
    a GPU), padded wires, wires per chunk (the interpreter: one chunk)."""
    n_pad = _pow2(n)
    if interpreted(device):
        budget = 1 << 16
        tile = max(1, min(n_pad, budget // n_pad))
        R = max(1, min(_pow2(B), budget // (n_pad * tile)))
        return R, n_pad, tile, n_pad
    budget = 4096 if dtype == torch.float32 else 2048
    tile = max(1, min(n_pad, 16, budget // n_pad))
    R = max(1, min(budget // (n_pad * tile), _pow2(triton.cdiv(B * triton.cdiv(n, tile), 264))))
    return R, n_pad, tile, max(1, min(n_pad, _CHUNK // (R * tile)))


def _values_launch(B, n, net, like, states=1):
    """Launch setup shared by the values and rank kernels: (R, n_pad, block, network arguments, (C, L, ROWS), grid,
    scratch of two buffers per state array and row)."""
    R, n_pad, block = _values_cfg(B, n, like.device)
    args, sizes = _net_args(net, like.device, n_pad)
    grid = (triton.cdiv(B, R),)
    scr = torch.empty(grid[0] * R * states * 2 * n_pad, dtype=like.dtype, device=like.device)
    return R, n_pad, block, args, sizes, grid, scr


def values_forward(x, net, relaxation, steepness, art_lambda, sorted_, d, alpha):
    B, n = x.shape
    if B == 0:
        return
    if _comparators(net) == 0:
        sorted_.copy_(x)
        pads = _pads(net, n, x.device)
        if pads is not None:
            sorted_.masked_fill_(pads, 0)
        return
    R, n_pad, block, args, (C, L, rows), grid, scr = _values_launch(B, n, net, x)
    if rows:  # the comparators a row does not run
        d.zero_()
        alpha.zero_()
    prm = _params(steepness, art_lambda, x.dtype, x.device)
    with _on(x.device):
        _values_fwd_kernel[grid](
            x,
            sorted_,
            d,
            alpha,
            *args[:3],
            prm,
            scr,
            *args[3:],
            B,
            n,
            C,
            L,
            KIND=int(relaxation),
            R=R,
            N_PAD=n_pad,
            BLOCK=block,
            ROWS=rows,
            num_warps=_num_warps(R * block),
        )


def values_backward(grad_sorted, grad_alpha, d, alpha, net, relaxation, steepness, art_lambda, grad_x):
    B, n = grad_x.shape
    if B == 0:
        return
    if _comparators(net) == 0 or (grad_sorted is None and grad_alpha is None):
        if grad_sorted is None:
            grad_x.zero_()
        else:
            grad_x.copy_(grad_sorted)
            pads = _pads(net, n, d.device)
            if pads is not None:
                grad_x.masked_fill_(pads, 0)
        return
    R, n_pad, block, args, (C, L, rows), grid, scr = _values_launch(B, n, net, d)
    with _on(d.device):
        _values_bwd_kernel[grid](
            grad_sorted if grad_sorted is not None else d,
            grad_alpha if grad_alpha is not None else d,
            d,
            alpha,
            grad_x,
            *args[:3],
            _params(steepness, art_lambda, d.dtype, d.device),
            scr,
            *args[3:],
            B,
            n,
            C,
            L,
            KIND=int(relaxation),
            HAS_GS=grad_sorted is not None,
            HAS_GA=grad_alpha is not None,
            R=R,
            N_PAD=n_pad,
            BLOCK=block,
            ROWS=rows,
            num_warps=_num_warps(R * block),
        )


def _identity(net, col_begin, X):
    """X of a network without comparators: Y = I on the output columns (``_identity_columns``)."""
    B, m, n = X.shape
    if not isinstance(net, RowNetworks):
        X.copy_(torch.eye(n, dtype=X.dtype, device=X.device)[col_begin:].expand(B, m, n))
        return
    o = torch.arange(m, device=X.device)[None, :, None]
    w = torch.arange(n, device=X.device)[None, None, :]
    Lb, cols, of = (net.spec[:, i, None, None] for i in (1, 4, 5))
    X.copy_((w == Lb - cols + o - of) & (o >= of) & (o < of + cols))


def matrix_forward(alpha, net, col_begin, X):
    B, n = X.shape[0], net.n
    if B == 0:
        return
    if _comparators(net) == 0:
        _identity(net, col_begin, X)
        return
    R, n_pad, tile, block = _matrix_cfg(B, n, alpha.dtype, alpha.device)
    args, (C, L, rows) = _net_args(net, alpha.device, n_pad)
    tiles = triton.cdiv(n - col_begin, tile)
    per_row_block = 2 * R * n_pad * tile * tiles * alpha.element_size()
    rows_chunk = R * max(1, _FORWARD_SCRATCH_BYTES // per_row_block)
    for b0 in range(0, B, rows_chunk):
        nb = min(rows_chunk, B - b0)
        grid = (triton.cdiv(nb, R), tiles)
        scr = torch.empty(grid[0] * grid[1] * R * 2 * n_pad * tile, dtype=alpha.dtype, device=alpha.device)
        with _on(alpha.device):
            _matrix_fwd_kernel[grid](
                alpha[b0:],
                X[b0:],
                *args[:3],
                scr,
                args[3][b0:] if rows else args[3],
                args[4],
                nb,
                n,
                C,
                L,
                col_begin,
                R=R,
                N_PAD=n_pad,
                TILE=tile,
                BLOCK=block,
                ROWS=rows,
                num_warps=_num_warps(R * block * tile),
            )


def matrix_backward(alpha, grad_X, net, col_begin, grad_alpha):
    B = alpha.shape[0]
    n = net.n
    if B == 0 or _comparators(net) == 0:
        return
    R, n_pad, tile, block = _matrix_cfg(B, n, alpha.dtype, alpha.device)
    args, (C, L, rows) = _net_args(net, alpha.device, n_pad)
    el = 2 * R * n_pad * tile  # the state's two buffers
    tiles = triton.cdiv(n - col_begin, tile)
    esize = alpha.element_size()
    # scratch per program: differences R*C*TILE, partial sums R*C, the state's buffers
    per_prog = esize * (R * C * tile + R * C + el)
    progs = max(1, _BACKWARD_SCRATCH_BYTES // per_prog)
    if progs >= tiles:
        rows_chunk, tiles_chunk = R * (progs // tiles), tiles
    else:
        rows_chunk, tiles_chunk = R, progs
    for b0 in range(0, B, rows_chunk):
        nb = min(rows_chunk, B - b0)
        spec = args[3][b0:] if rows else args[3]
        for t0 in range(0, tiles, tiles_chunk):
            nt = min(tiles_chunk, tiles - t0)
            grid = (triton.cdiv(nb, R), nt)
            nprog = grid[0] * grid[1]
            diff = torch.empty(nprog * R * C * tile, dtype=alpha.dtype, device=alpha.device)
            # rows of their own lengths: 0 for the comparators a row does not run
            part = (torch.zeros if rows else torch.empty)((nb, nt, C), dtype=alpha.dtype, device=alpha.device)
            scr = torch.empty(nprog * el, dtype=alpha.dtype, device=alpha.device)
            with _on(alpha.device):
                _matrix_bwd_kernel[grid](
                    alpha[b0:],
                    grad_X[b0:],
                    part,
                    diff,
                    *args[:3],
                    scr,
                    spec,
                    args[4],
                    nb,
                    n,
                    C,
                    L,
                    col_begin,
                    t0,
                    R=R,
                    N_PAD=n_pad,
                    TILE=tile,
                    BLOCK=block,
                    ROWS=rows,
                    num_warps=_num_warps(R * block * tile),
                )
            # fixed-order reduction over the tiles: deterministic
            s = part.sum(1)
            if t0 == 0:
                grad_alpha[b0 : b0 + nb].copy_(s)
            else:
                grad_alpha[b0 : b0 + nb].add_(s)


def rank_forward(x, net, relaxation, steepness, art_lambda, rank):
    B, n = x.shape
    if B == 0:
        return
    if _comparators(net) == 0:
        rank.copy_(torch.arange(1, n + 1, dtype=x.dtype, device=x.device).expand(B, n))
        pads = _pads(net, n, x.device)
        if pads is not None:
            rank.masked_fill_(pads, 0)
        return
    R, n_pad, block, args, (C, L, rows), grid, scr = _values_launch(B, n, net, x)
    alpha = torch.empty(B, C, dtype=x.dtype, device=x.device)
    prm = _params(steepness, art_lambda, x.dtype, x.device)
    with _on(x.device):
        _rank_fwd_kernel[grid](
            x,
            rank,
            alpha,
            *args[:3],
            prm,
            scr,
            *args[3:],
            B,
            n,
            C,
            L,
            KIND=int(relaxation),
            R=R,
            N_PAD=n_pad,
            BLOCK=block,
            ROWS=rows,
            num_warps=_num_warps(R * block),
        )


def rank_backward(x, grad_rank, net, relaxation, steepness, art_lambda, grad_x):
    B, n = x.shape
    if B == 0:
        return
    if _comparators(net) == 0:
        grad_x.zero_()
        return
    R, n_pad, block, args, (C, L, rows), grid, scr = _values_launch(B, n, net, x, states=2)
    d, alpha, du = torch.empty(3, B, C, dtype=x.dtype, device=x.device)  # du: u_i - u_j per comparator
    with _on(x.device):
        _rank_bwd_kernel[grid](
            x,
            grad_rank,
            grad_x,
            d,
            alpha,
            du,
            *args[:3],
            _params(steepness, art_lambda, x.dtype, x.device),
            scr,
            *args[3:],
            B,
            n,
            C,
            L,
            KIND=int(relaxation),
            R=R,
            N_PAD=n_pad,
            BLOCK=block,
            ROWS=rows,
            num_warps=_num_warps(R * block),
        )
