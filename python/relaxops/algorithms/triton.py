"""Triton kernels of the fused relaxed algorithms (launched by ops.py; run on CPU tensors under
``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .. import _checks
from .._triton import interpreted

# --- shortest path ------------------------------------------------------------------------------------------------
# The math and layouts of csrc/algorithms/shortest_path.h (pi / jac planes of pitch W + 2, zero padding entries), as
# the CUDA kernels: one program per grid (batch row), its cells in tiles of BLOCK (flat index c = y W + x, each lane
# computing its own cells from the previous state: gathers, no atomics), the padded maps and traceback states in a
# per-row slice of a workspace in global memory, rounds and steps separated by barriers. beta, hamacher_p and
# epsilon come in a float64 tensor (float64 inputs are computed with beta to the last bit, as the other backends).


def _sp_device_fn(fn):
    """@triton.jit for a device helper; a plain function under the interpreter (nested jit calls re-patch
    triton.language on every call there)."""
    jitted = triton.jit(fn)
    return fn if type(jitted).__name__ == "InterpretedFunction" else jitted


@_sp_device_fn
def _sp_t_conorm(a, b, p, TC: tl.constexpr):
    if TC == 0:
        return a + b - a * b
    elif TC == 1:
        return (a + b + (p - 2) * a * b) / (1 + (p - 1) * a * b)
    else:
        u = 1 - a - b
        return 1 - tl.where(u < 0, 0.0, u)  # relu keeps NaN


@_sp_device_fn
def _sp_t_conorm_grad(a, b, p, TC: tl.constexpr):
    if TC == 0:
        return 1 - b, 1 - a
    elif TC == 1:
        inv = 1 / ((1 + (p - 1) * a * b) * (1 + (p - 1) * a * b))
        return (1 - b) * (1 + (p - 1) * b) * inv, (1 - a) * (1 + (p - 1) * a) * inv
    else:
        g = tl.where(1 - a - b > 0, 1.0, 0.0)
        return g, g


@_sp_device_fn
def _sp_continuation(beta, path00):
    """AlgoVision's LEq(path[:, 0, 0], 1): sigmoid(-(path00 - 1) beta)."""
    return 1 / (1 + tl.exp((path00 - 1) * beta))


@_sp_device_fn
def _sp_source(y, x, H, W, cm, DY: tl.constexpr, DX: tl.constexpr):
    """The cell (y - DY, x - DX) whose neighbour in direction (DY, DX) is (y, x), and whether it is in the grid."""
    ys = y - DY
    xs = x - DX
    return ys, xs, cm & (ys >= 0) & (ys < H) & (xs >= 0) & (xs < W)


@_sp_device_fn
def _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, K: tl.constexpr, DY: tl.constexpr, DX: tl.constexpr):
    """The mass that moves into (y, x) from its neighbour whose predecessor in direction K = (DY, DX) it is."""
    ys, xs, ok = _sp_source(y, x, H, W, cm, DY, DX)
    return tl.load(src + p - DY * Q - DX, mask=ok, other=0.0) * tl.load(pi + K * HQ + ys * Q + xs, mask=ok, other=0.0)


@_sp_device_fn
def _sp_trace_step(pi, path, src, dst, H, W, hp, TC: tl.constexpr, BLOCK: tl.constexpr):
    """path <- path T trace (src), dst <- the moved mass; src, dst padded maps with zero rings."""
    Q = W + 2
    HQ = H * Q
    for c0 in range(0, H * W, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        cm = c < H * W
        y = c // W
        x = c - y * W
        p = (y + 1) * Q + x + 1
        tr = tl.load(src + p, mask=cm, other=0.0)
        a = tl.load(path + c, mask=cm, other=0.0)
        tl.store(path + c, _sp_t_conorm(a, tr, hp, TC), mask=cm)
        v = _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 0, -1, -1)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 1, -1, 0)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 2, -1, 1)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 3, 0, -1)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 4, 0, 1)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 5, 1, -1)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 6, 1, 0)
        v += _sp_moved(src, pi, p, y, x, H, W, Q, HQ, cm, 7, 1, 1)
        tl.store(dst + p, v, mask=cm)
    tl.debug_barrier()


@_sp_device_fn
def _sp_fill(ptr, n, value, BLOCK: tl.constexpr):
    for q0 in range(0, n, BLOCK):
        q = q0 + tl.arange(0, BLOCK)
        tl.store(ptr + q, tl.zeros([BLOCK], ptr.dtype.element_ty) + value, mask=q < n)


@_sp_device_fn
def _sp_trace_start(path, ta, tb, H, W, BLOCK: tl.constexpr):
    PP = (H + 2) * (W + 2)
    _sp_fill(path, H * W, 0.0, BLOCK)
    _sp_fill(ta, PP, 0.0, BLOCK)
    _sp_fill(tb, PP, 0.0, BLOCK)
    tl.debug_barrier()
    tl.store(ta + H * (W + 2) + W, 1.0)  # (H - 1, W - 1)
    tl.debug_barrier()


@triton.jit
def _sp_bellman_ford_kernel(
    cost_ptr,
    jac_ptr,
    pi_ptr,
    ws_ptr,
    counts_ptr,
    prm_ptr,
    H,
    W,
    n_iter,
    max_iter,
    SAVE: tl.constexpr,
    WHILE: tl.constexpr,
    TC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The rounds of one row (pi, jac), then for "while" its own trip count. Workspace per row: 4 padded maps and 2
    planes (the traceback kernel's layout)."""
    b = tl.program_id(0).to(tl.int64)
    Q = W + 2
    HW = H * W
    HQ = H * Q
    PP = (H + 2) * Q
    dtype = pi_ptr.dtype.element_ty
    beta = tl.load(prm_ptr).to(dtype)
    hp = tl.load(prm_ptr + 1).to(dtype)
    eps = tl.load(prm_ptr + 2).to(dtype)
    ws = ws_ptr + b * (4 * PP + 2 * HW)
    cost = cost_ptr + b * HW
    pi = pi_ptr + b * 8 * HQ
    jac = jac_ptr + b * (n_iter - 1) * 8 * HQ
    _sp_fill(ws, 2 * PP, 1e12, BLOCK)
    for q0 in range(0, 2 * H, BLOCK):  # the padding entries of the saved planes
        q = q0 + tl.arange(0, BLOCK)
        e = (q // 2) * Q + W + (q % 2)
        qm = q < 2 * H
        zero = tl.zeros([BLOCK], dtype)
        for k in tl.static_range(8):
            tl.store(pi + k * HQ + e, zero, mask=qm)
        if SAVE:
            for t in range(0, n_iter - 1):
                for k in tl.static_range(8):
                    tl.store(jac + (t * 8 + k) * HQ + e, zero, mask=qm)
    tl.debug_barrier()
    tl.store(ws + Q + 1, 0.0)  # the start
    tl.debug_barrier()
    for t in range(0, n_iter):
        src = ws + (t % 2) * PP
        dst = ws + ((t + 1) % 2) * PP
        for c0 in range(0, HW, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            cm = c < HW
            y = c // W
            x = c - y * W
            p = (y + 1) * Q + x + 1
            o = y * Q + x
            n0 = tl.load(src + p - Q - 1, mask=cm, other=0.0)
            n1 = tl.load(src + p - Q, mask=cm, other=0.0)
            n2 = tl.load(src + p - Q + 1, mask=cm, other=0.0)
            n3 = tl.load(src + p - 1, mask=cm, other=0.0)
            n4 = tl.load(src + p + 1, mask=cm, other=0.0)
            n5 = tl.load(src + p + Q - 1, mask=cm, other=0.0)
            n6 = tl.load(src + p + Q, mask=cm, other=0.0)
            n7 = tl.load(src + p + Q + 1, mask=cm, other=0.0)
            # softmin(beta N) shifted by m = min N (exactly 1 at the minimum, see shortest_path.h)
            m = tl.minimum(
                tl.minimum(tl.minimum(n0, n1), tl.minimum(n2, n3)), tl.minimum(tl.minimum(n4, n5), tl.minimum(n6, n7))
            )
            e0 = tl.exp(beta * (m - n0))
            e1 = tl.exp(beta * (m - n1))
            e2 = tl.exp(beta * (m - n2))
            e3 = tl.exp(beta * (m - n3))
            e4 = tl.exp(beta * (m - n4))
            e5 = tl.exp(beta * (m - n5))
            e6 = tl.exp(beta * (m - n6))
            e7 = tl.exp(beta * (m - n7))
            inv = 1 / (e0 + e1 + e2 + e3 + e4 + e5 + e6 + e7)
            e0 *= inv
            e1 *= inv
            e2 *= inv
            e3 *= inv
            e4 *= inv
            e5 *= inv
            e6 *= inv
            e7 *= inv
            if t == n_iter - 1:
                tl.store(pi + o, e0, mask=cm)
                tl.store(pi + HQ + o, e1, mask=cm)
                tl.store(pi + 2 * HQ + o, e2, mask=cm)
                tl.store(pi + 3 * HQ + o, e3, mask=cm)
                tl.store(pi + 4 * HQ + o, e4, mask=cm)
                tl.store(pi + 5 * HQ + o, e5, mask=cm)
                tl.store(pi + 6 * HQ + o, e6, mask=cm)
                tl.store(pi + 7 * HQ + o, e7, mask=cm)
            else:
                s = e0 * n0 + e1 * n1 + e2 * n2 + e3 * n3 + e4 * n4 + e5 * n5 + e6 * n6 + e7 * n7
                d = s + tl.load(cost + c, mask=cm, other=0.0)
                tl.store(dst + p, tl.where(c == 0, 0.0, d), mask=cm)  # the start is pinned
                if SAVE:  # J_k = pi_k (1 - beta (N_k - s))
                    J = jac + t * 8 * HQ + o
                    tl.store(J, e0 * (1 - beta * (n0 - s)), mask=cm)
                    tl.store(J + HQ, e1 * (1 - beta * (n1 - s)), mask=cm)
                    tl.store(J + 2 * HQ, e2 * (1 - beta * (n2 - s)), mask=cm)
                    tl.store(J + 3 * HQ, e3 * (1 - beta * (n3 - s)), mask=cm)
                    tl.store(J + 4 * HQ, e4 * (1 - beta * (n4 - s)), mask=cm)
                    tl.store(J + 5 * HQ, e5 * (1 - beta * (n5 - s)), mask=cm)
                    tl.store(J + 6 * HQ, e6 * (1 - beta * (n6 - s)), mask=cm)
                    tl.store(J + 7 * HQ, e7 * (1 - beta * (n7 - s)), mask=cm)
        tl.debug_barrier()
    if WHILE:  # this row's own trip count: steps until P <= epsilon (0 for NaN), at most max_iter
        ta = ws + 2 * PP
        tb = ws + 3 * PP
        path = ws + 4 * PP
        _sp_trace_start(path, ta, tb, H, W, BLOCK)
        Pc = _sp_continuation(beta, tl.load(path))
        i = 0
        while (i < max_iter) & (Pc > eps):
            _sp_trace_step(pi, path, ws + (2 + i % 2) * PP, ws + (3 - i % 2) * PP, H, W, hp, TC, BLOCK)
            Pc = Pc * _sp_continuation(beta, tl.load(path))
            i += 1
            tl.debug_barrier()
        tl.store(counts_ptr + b, i)


@triton.jit
def _sp_traceback_kernel(
    pi_ptr, out_ptr, ws_ptr, steps_ptr, prm_ptr, H, W, WHILE: tl.constexpr, TC: tl.constexpr, BLOCK: tl.constexpr
):
    """K = steps[0] traceback steps of one row into out: path^K ("for") or the While mixture ("while")."""
    b = tl.program_id(0).to(tl.int64)
    Q = W + 2
    HW = H * W
    PP = (H + 2) * Q
    dtype = pi_ptr.dtype.element_ty
    beta = tl.load(prm_ptr).to(dtype)
    hp = tl.load(prm_ptr + 1).to(dtype)
    K = tl.load(steps_ptr)
    ws = ws_ptr + b * (4 * PP + 2 * HW)
    pi = pi_ptr + b * 8 * H * Q
    path = ws + 4 * PP
    acc = path + HW
    _sp_trace_start(path, ws + 2 * PP, ws + 3 * PP, H, W, BLOCK)
    Pc = _sp_continuation(beta, tl.load(path))
    if WHILE:
        _sp_fill(acc, HW, 0.0, BLOCK)  # (1 - P_0) path^0
    for s in range(0, K):
        _sp_trace_step(pi, path, ws + (2 + s % 2) * PP, ws + (3 - s % 2) * PP, H, W, hp, TC, BLOCK)
        if WHILE:
            Pn = Pc * _sp_continuation(beta, tl.load(path))
            for c0 in range(0, HW, BLOCK):
                c = c0 + tl.arange(0, BLOCK)
                cm = c < HW
                tl.store(acc + c, tl.load(acc + c, mask=cm) + (Pc - Pn) * tl.load(path + c, mask=cm), mask=cm)
            Pc = Pn
            tl.debug_barrier()
    for c0 in range(0, HW, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        cm = c < HW
        v = tl.load(path + c, mask=cm)
        if WHILE:
            v = tl.load(acc + c, mask=cm) + Pc * v
        tl.store(out_ptr + b * HW + c, v, mask=cm)


@_sp_device_fn
def _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, K: tl.constexpr, DY: tl.constexpr, DX: tl.constexpr):
    """What (y, x) receives from the cell whose neighbour K it is: -beta pi_K (gpi_K - S) there."""
    ys, xs, ok = _sp_source(y, x, H, W, cm, DY, DX)
    s = ys * W + xs
    return (
        -beta
        * tl.load(pi + K * HQ + ys * Q + xs, mask=ok, other=0.0)
        * (tl.load(gpi + K * H * W + s, mask=ok, other=0.0) - tl.load(S + s, mask=ok, other=0.0))
    )


@_sp_device_fn
def _sp_jac_term(J, gd, y, x, H, W, Q, HQ, cm, K: tl.constexpr, DY: tl.constexpr, DX: tl.constexpr):
    """What (y, x) receives from the cell whose neighbour K it is: gd J_K there."""
    ys, xs, ok = _sp_source(y, x, H, W, cm, DY, DX)
    return tl.load(gd + ys * W + xs, mask=ok, other=0.0) * tl.load(J + K * HQ + ys * Q + xs, mask=ok, other=0.0)


@_sp_device_fn
def _sp_trace_back_term(gt, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, K: tl.constexpr, DY: tl.constexpr, DX: tl.constexpr):
    """gt at neighbour K times pi_K (into the trace gradient); gpi_K += gt there times the trace."""
    g = tl.load(gt + p + DY * Q + DX, mask=cm, other=0.0)
    tl.store(gpi + K * HW + c, tl.load(gpi + K * HW + c, mask=cm, other=0.0) + g * bt, mask=cm)
    return g * tl.load(pi + K * HQ + o, mask=cm, other=0.0)


@triton.jit
def _sp_backward_kernel(
    g_ptr,
    jac_ptr,
    pi_ptr,
    gc_ptr,
    ws_ptr,
    steps_ptr,
    prm_ptr,
    H,
    W,
    n_iter,
    WHILE: tl.constexpr,
    TC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The traceback recomputed (every state kept) and reversed, then the rounds reversed through jac. Workspace per
    row: K + 1 paths, K + 1 padded traces, P_i and c_i (K + 1 each), 2 padded maps, 13 planes."""
    b = tl.program_id(0).to(tl.int64)
    Q = W + 2
    HW = H * W
    HQ = H * Q
    PP = (H + 2) * Q
    dtype = pi_ptr.dtype.element_ty
    beta = tl.load(prm_ptr).to(dtype)
    hp = tl.load(prm_ptr + 1).to(dtype)
    K = tl.load(steps_ptr).to(tl.int64)
    paths = ws_ptr + b * ((K + 1) * HW + (K + 1) * PP + 2 * (K + 1) + 2 * PP + 13 * HW)
    traces = paths + (K + 1) * HW  # trace^0..trace^K (trace^K is not needed: scratch)
    Ps = traces + (K + 1) * PP
    cs = Ps + (K + 1)
    gt = cs + (K + 1)  # gt, gt2: padded maps; then the planes gpi (8), gp, S, gd, gd2, gc
    gpi = gt + 2 * PP
    gp = gpi + 8 * HW
    S = gp + HW
    gd = S + HW
    gc = gd + 2 * HW
    g = g_ptr + b * HW
    pi = pi_ptr + b * 8 * HQ
    jac = jac_ptr + b * (n_iter - 1) * 8 * HQ

    # recompute the traceback, keeping every state
    _sp_trace_start(paths, traces, traces + PP, H, W, BLOCK)
    for i in range(1, K + 1):
        _sp_fill(traces + i * PP, PP, 0.0, BLOCK)
        for c0 in range(0, HW, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            cm = c < HW
            tl.store(paths + i * HW + c, tl.load(paths + (i - 1) * HW + c, mask=cm), mask=cm)
        tl.debug_barrier()
        _sp_trace_step(pi, paths + i * HW, traces + (i - 1) * PP, traces + i * PP, H, W, hp, TC, BLOCK)
    Pc = _sp_continuation(beta, tl.load(paths))
    tl.store(cs, Pc)
    tl.store(Ps, Pc)
    for i in range(1, K + 1):
        ci = _sp_continuation(beta, tl.load(paths + i * HW))
        Pc = Pc * ci
        tl.store(cs + i, ci)
        tl.store(Ps + i, Pc)
    _sp_fill(gt, 2 * PP, 0.0, BLOCK)
    _sp_fill(gpi, 8 * HW, 0.0, BLOCK)
    tl.debug_barrier()

    # reverse traceback: gp = dL/dpath^i, gt = dL/dtrace^i (padded, zero ring; gt and gt2 alternate)
    w_last = tl.load(Ps) * 0.0 + 1.0
    if WHILE:
        if K > 0:
            w_last = (tl.load(Ps + K - 1) - tl.load(Ps + K)) + tl.load(Ps + K)
    for c0 in range(0, HW, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        cm = c < HW
        tl.store(gp + c, w_last * tl.load(g + c, mask=cm), mask=cm)
    tl.debug_barrier()
    G_next = tl.load(Ps) * 0.0
    for ii in range(0, K):
        i = K - ii
        gsrc = gt + (ii % 2) * PP
        gdst = gt + (1 - ii % 2) * PP
        a = paths + (i - 1) * HW
        tr = traces + (i - 1) * PP
        for c0 in range(0, HW, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            cm = c < HW
            y = c // W
            x = c - y * W
            p = (y + 1) * Q + x + 1
            o = y * Q + x
            bt = tl.load(tr + p, mask=cm, other=0.0)
            acc = _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 0, -1, -1)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 1, -1, 0)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 2, -1, 1)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 3, 0, -1)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 4, 0, 1)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 5, 1, -1)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 6, 1, 0)
            acc += _sp_trace_back_term(gsrc, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, 7, 1, 1)
            da, db = _sp_t_conorm_grad(tl.load(a + c, mask=cm, other=0.0), bt, hp, TC)
            gpc = tl.load(gp + c, mask=cm, other=0.0)
            tl.store(gdst + p, acc + gpc * db, mask=cm)
            tl.store(gp + c, gpc * da, mask=cm)
        tl.debug_barrier()
        if WHILE:
            j = i - 1  # gp is dL/dpath^j but for path^j's own terms in the output
            if j >= 1:
                direct = G_next * 0.0
                for c0 in range(0, HW, BLOCK):
                    c = c0 + tl.arange(0, BLOCK)
                    cm = c < HW
                    d = tl.load(paths + i * HW + c, mask=cm, other=0.0) - tl.load(
                        paths + j * HW + c, mask=cm, other=0.0
                    )
                    direct += tl.sum(tl.load(g + c, mask=cm, other=0.0) * d, axis=0)
                G = direct + G_next * tl.load(cs + i)
                G_next = G
                w = tl.load(Ps + j - 1) - tl.load(Ps + j)
                cj = tl.load(cs + j)
                chain = G * tl.load(Ps + j - 1) * cj * (1 - cj) * -beta
                for c0 in range(0, HW, BLOCK):
                    c = c0 + tl.arange(0, BLOCK)
                    cm = c < HW
                    v = tl.load(gp + c, mask=cm, other=0.0) + w * tl.load(g + c, mask=cm, other=0.0)
                    tl.store(gp + c, v + tl.where(c == 0, chain, 0.0), mask=cm)
                tl.debug_barrier()

    # the last round (pi = softmin(beta N) of d^{n_iter-1}), then rounds n_iter - 1 .. 1 through jac; gd and gd2 (the
    # two planes after S) alternate as dL/dd^t, 0 at the pinned start
    for c0 in range(0, HW, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        cm = c < HW
        y = c // W
        x = c - y * W
        o = y * Q + x
        sv = tl.load(pi + o, mask=cm, other=0.0) * tl.load(gpi + c, mask=cm, other=0.0)
        for k in tl.static_range(1, 8):
            sv += tl.load(pi + k * HQ + o, mask=cm, other=0.0) * tl.load(gpi + k * HW + c, mask=cm, other=0.0)
        tl.store(S + c, sv, mask=cm)
        tl.store(gc + c, tl.zeros([BLOCK], dtype), mask=cm)
    tl.debug_barrier()
    if n_iter > 1:
        for c0 in range(0, HW, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            cm = c < HW
            y = c // W
            x = c - y * W
            v = _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 0, -1, -1)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 1, -1, 0)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 2, -1, 1)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 3, 0, -1)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 4, 0, 1)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 5, 1, -1)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 6, 1, 0)
            v += _sp_softmin_term(pi, gpi, S, y, x, H, W, Q, HQ, cm, beta, 7, 1, 1)
            tl.store(gd + c, tl.where(c == 0, 0.0, v), mask=cm)
        tl.debug_barrier()
        for tt in range(0, n_iter - 1):
            t = n_iter - 1 - tt
            gsrc = gd + (tt % 2) * HW
            gdst = gd + (1 - tt % 2) * HW
            J = jac + (t - 1) * 8 * HQ
            for c0 in range(0, HW, BLOCK):
                c = c0 + tl.arange(0, BLOCK)
                cm = c < HW
                tl.store(gc + c, tl.load(gc + c, mask=cm) + tl.load(gsrc + c, mask=cm), mask=cm)
                if t > 1:
                    y = c // W
                    x = c - y * W
                    v = _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 0, -1, -1)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 1, -1, 0)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 2, -1, 1)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 3, 0, -1)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 4, 0, 1)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 5, 1, -1)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 6, 1, 0)
                    v += _sp_jac_term(J, gsrc, y, x, H, W, Q, HQ, cm, 7, 1, 1)
                    tl.store(gdst + c, tl.where(c == 0, 0.0, v), mask=cm)
            tl.debug_barrier()
    for c0 in range(0, HW, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        cm = c < HW
        tl.store(gc_ptr + b * HW + c, tl.load(gc + c, mask=cm), mask=cm)


def _sp_block(cells: int, device) -> int:
    cap = 1 << 12 if interpreted(device) else 256  # the interpreter runs the programs one after the other
    return max(16, min(cap, 1 << max(0, cells - 1).bit_length()))


def _sp_params(args, device):
    return _checks.to_device(list(args[1]), torch.float64, device)  # beta, hamacher_p, epsilon


def _sp_work(n, t, backward):
    from .ops import sp_check_workspace  # ops loads this module on first use

    sp_check_workspace(n, t, backward)
    return t.new_empty(n)


def shortest_path_forward(cost, args, out, jac, pi, steps):
    (B, H, W, n_iter, n_trace, loop, t_conorm, max_iter), _ = args
    PP, HW = (H + 2) * (W + 2), H * W
    ws = _sp_work(B * (4 * PP + 2 * HW), cost, False)
    counts = torch.zeros(B, dtype=torch.int32, device=cost.device)
    prm = _sp_params(args, cost.device)
    block = _sp_block(HW, cost.device)
    save = jac.numel() > 0
    with torch.cuda.device(cost.device if cost.is_cuda else -1):
        _sp_bellman_ford_kernel[(B,)](
            cost,
            jac if save else pi,
            pi,
            ws,
            counts,
            prm,
            H,
            W,
            n_iter,
            max_iter,
            SAVE=save,
            WHILE=loop == 1,
            TC=t_conorm,
            BLOCK=block,
        )
        if loop == 1:
            steps.copy_(counts.max().reshape(1))
        else:
            steps.fill_(n_trace)
        _sp_traceback_kernel[(B,)](pi, out, ws, steps, prm, H, W, WHILE=loop == 1, TC=t_conorm, BLOCK=block)


def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
    (B, H, W, n_iter, n_trace, loop, t_conorm, max_iter), _ = args
    from .ops import sp_backward_steps

    K = sp_backward_steps(steps, args)
    if not (K == n_trace if loop == 0 else 0 <= K <= max_iter):
        raise ValueError(
            f"relaxops::shortest_path_bwd: steps must be n_trace (loop 'for') or in [0, max_iter] (loop "
            f"'while'), got {K}"
        )
    PP, HW = (H + 2) * (W + 2), H * W
    ws = _sp_work(B * ((K + 1) * (HW + PP) + 2 * (K + 1) + 2 * PP + 13 * HW), grad, True)
    with torch.cuda.device(grad.device if grad.is_cuda else -1):
        _sp_backward_kernel[(B,)](
            grad,
            jac if jac.numel() else pi,
            pi,
            grad_cost,
            ws,
            steps,
            _sp_params(args, grad.device),
            H,
            W,
            n_iter,
            WHILE=loop == 1,
            TC=t_conorm,
            BLOCK=_sp_block(HW, grad.device),
        )


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
            x = tl.load(s_row + off + k, mask=inside & is_s, other=0.0) + tl.load(
                t_row + off + k, mask=inside & (r >= n), other=0.0
            )
            acc += x * x
        first = tl.load(s_row + off, mask=inside & is_s, other=0.0) + tl.load(
            t_row + off, mask=inside & (r >= n), other=0.0
        )
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
                tl.load(t_row + j * K + k, mask=inside, other=0.0) / nt
            )
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
def _ed_backward_kernel(
    gd_ptr,
    gD_ptr,
    s_ptr,
    t_ptr,
    D_ptr,
    cos_ptr,
    beta_ptr,
    gs_ptr,
    gt_ptr,
    ws_ptr,
    n,
    m,
    K,
    HAS_GD: tl.constexpr,
    BLOCK: tl.constexpr,
):
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
            g += tl.load(G + (p + 1) * W + q, mask=down, other=0.0) * tl.load(
                A + 3 * (p * m + q - 1), mask=down, other=0.0
            )
            g += tl.load(G + p * W + q + 1, mask=right, other=0.0) * tl.load(
                A + 3 * ((p - 1) * m + q) + 1, mask=right, other=0.0
            )
            g += tl.load(G + (p + 1) * W + q + 1, mask=down & right, other=0.0) * tl.load(
                A + 3 * (p * m + q) + 2, mask=down & right, other=0.0
            )
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
    cap = 1 << 12 if interpreted(device) else 256
    return min(cap, triton.next_power_of_2(max(n * m, n * K, m * K, n + m + 1)))


def _ed_check_sizes(n: int, m: int, K: int) -> None:
    if (n + 1) * (m + 1) + 4 * n * m + n + m >= 2**31 or max(n, m) * K >= 2**31:
        raise ValueError(
            f"relaxops: the triton edit distance needs per-row sizes below 2^31 elements, got n = {n}, "
            f"m = {m}, K = {K}; use backend='cuda'"
        )


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
        _ed_backward_kernel[(B,)](
            grad_distance,
            D if grad_D is None else grad_D,
            s,
            t,
            D,
            cos,
            beta_t,
            grad_s,
            grad_t,
            ws,
            n,
            m,
            K,
            HAS_GD=grad_D is not None,
            BLOCK=_ed_block(n, m, K, s.device),
        )


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
def _bubble_mixture_kernel(
    full_ptr,
    par_ptr,
    bad_ptr,
    rowt_ptr,
    trips_ptr,
    sorted_ptr,
    swaps_ptr,
    any_ptr,
    n,
    passes,
    HARD: tl.constexpr,
    BLOCK: tl.constexpr,
):
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
def _bubble_backward_kernel(
    full_ptr,
    par_ptr,
    bad_ptr,
    trips_ptr,
    gsorted_ptr,
    gswaps_ptr,
    gany_ptr,
    gx_ptr,
    ws_ptr,
    n,
    passes,
    HARD: tl.constexpr,
    BLOCK: tl.constexpr,
):
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
            tl.store(gx_ptr + b * n + j, tl.load(gb + j, mask=j < n, other=0.0).to(gx_ptr.dtype.element_ty), mask=j < n)


def _bubble_full(x, passes, states=None):
    """[B, passes + 1, n + 3]: state 0 (x, 1, 0, 0), then the states after the passes (if given)."""
    B, n = x.shape
    full = x.new_empty(B, passes + 1, n + 3)
    full[:, 0, :n] = x
    full[:, 0, n] = 1
    full[:, 0, n + 1 :] = 0
    if states is not None:
        full[:, 1:] = states
    return full


def _bubble_block(n: int, device) -> int:
    return min(1 << 12 if interpreted(device) else 128, triton.next_power_of_2(n + 3))


def bubble_sort_forward(x, beta, hard, epsilon, sorted_, swaps, any_swap, states, trips):
    B, n = x.shape
    passes = states.shape[1]
    full = _bubble_full(x, passes)
    par = _checks.to_device([beta, epsilon], x.dtype, x.device)
    bad = (~x.isfinite().all(1)).to(torch.int32)
    row_trips = torch.empty(B, dtype=torch.int32, device=x.device)
    with _on_device(x.device):
        _bubble_passes_kernel[(B,)](full, par, bad, row_trips, n, passes, HARD=hard, num_warps=1)
        trips.copy_(row_trips.amax().clamp_min(0).reshape(1))
        _bubble_mixture_kernel[(B,)](
            full,
            par,
            bad,
            row_trips,
            trips,
            sorted_,
            swaps,
            any_swap,
            n,
            passes,
            HARD=hard,
            BLOCK=_bubble_block(n, x.device),
            num_warps=1,
        )
    states.copy_(full[:, 1:])


def bubble_sort_backward(grad_sorted, grad_swaps, grad_any, x, states, trips, beta, hard, grad_x):
    B, n = x.shape
    passes = states.shape[1]
    full = _bubble_full(x, passes, states)
    par = _checks.to_device([beta, 0.0], x.dtype, x.device)
    bad = (~x.isfinite().all(1)).to(torch.int32)
    ws = x.new_empty(B * (6 * n + 3 * (n + 3) + 2 * (passes + 1)))
    with _on_device(x.device):
        _bubble_backward_kernel[(B,)](
            full,
            par,
            bad,
            trips,
            grad_sorted,
            grad_swaps,
            grad_any,
            grad_x,
            ws,
            n,
            passes,
            HARD=hard,
            BLOCK=_bubble_block(n, x.device),
            num_warps=1,
        )
