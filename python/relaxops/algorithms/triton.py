"""Triton kernels of the fused relaxed algorithms (launched by ops.py; run on CPU tensors under
``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

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
def _sp_bellman_ford_kernel(cost_ptr, jac_ptr, pi_ptr, ws_ptr, counts_ptr, prm_ptr, H, W, n_iter, max_iter,
                            SAVE: tl.constexpr, WHILE: tl.constexpr, TC: tl.constexpr, BLOCK: tl.constexpr):
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
            m = tl.minimum(tl.minimum(tl.minimum(n0, n1), tl.minimum(n2, n3)),
                           tl.minimum(tl.minimum(n4, n5), tl.minimum(n6, n7)))
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
def _sp_traceback_kernel(pi_ptr, out_ptr, ws_ptr, steps_ptr, prm_ptr, H, W, WHILE: tl.constexpr, TC: tl.constexpr,
                         BLOCK: tl.constexpr):
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
    return -beta * tl.load(pi + K * HQ + ys * Q + xs, mask=ok, other=0.0) * (
        tl.load(gpi + K * H * W + s, mask=ok, other=0.0) - tl.load(S + s, mask=ok, other=0.0))


@_sp_device_fn
def _sp_jac_term(J, gd, y, x, H, W, Q, HQ, cm, K: tl.constexpr, DY: tl.constexpr, DX: tl.constexpr):
    """What (y, x) receives from the cell whose neighbour K it is: gd J_K there."""
    ys, xs, ok = _sp_source(y, x, H, W, cm, DY, DX)
    return tl.load(gd + ys * W + xs, mask=ok, other=0.0) * tl.load(J + K * HQ + ys * Q + xs, mask=ok, other=0.0)


@_sp_device_fn
def _sp_trace_back_term(gt, pi, gpi, p, o, c, bt, HQ, HW, cm, Q, K: tl.constexpr, DY: tl.constexpr,
                        DX: tl.constexpr):
    """gt at neighbour K times pi_K (into the trace gradient); gpi_K += gt there times the trace."""
    g = tl.load(gt + p + DY * Q + DX, mask=cm, other=0.0)
    tl.store(gpi + K * HW + c, tl.load(gpi + K * HW + c, mask=cm, other=0.0) + g * bt, mask=cm)
    return g * tl.load(pi + K * HQ + o, mask=cm, other=0.0)


@triton.jit
def _sp_backward_kernel(g_ptr, jac_ptr, pi_ptr, gc_ptr, ws_ptr, steps_ptr, prm_ptr, H, W, n_iter, WHILE: tl.constexpr,
                        TC: tl.constexpr, BLOCK: tl.constexpr):
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
                    d = tl.load(paths + i * HW + c, mask=cm, other=0.0) - tl.load(paths + j * HW + c, mask=cm,
                                                                                   other=0.0)
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
    cap = 1 << 12 if device.type == "cpu" else 256  # the interpreter runs the programs one after the other
    return max(16, min(cap, 1 << max(0, cells - 1).bit_length()))


def _sp_params(args, device):
    return torch.tensor(args[1], dtype=torch.float64, device=device)  # beta, hamacher_p, epsilon


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
        _sp_bellman_ford_kernel[(B,)](cost, jac if save else pi, pi, ws, counts, prm, H, W, n_iter, max_iter,
                                      SAVE=save, WHILE=loop == 1, TC=t_conorm, BLOCK=block)
        if loop == 1:
            steps.copy_(counts.max().reshape(1))
        else:
            steps.fill_(n_trace)
        _sp_traceback_kernel[(B,)](pi, out, ws, steps, prm, H, W, WHILE=loop == 1, TC=t_conorm, BLOCK=block)


def shortest_path_backward(grad, jac, pi, steps, args, grad_cost):
    (B, H, W, n_iter, n_trace, loop, t_conorm, max_iter), _ = args
    K = int(steps.item())
    if not (K == n_trace if loop == 0 else 0 <= K <= max_iter):
        raise ValueError(f"relaxops::shortest_path_bwd: steps must be n_trace (loop 'for') or in [0, max_iter] (loop "
                         f"'while'), got {K}")
    PP, HW = (H + 2) * (W + 2), H * W
    ws = _sp_work(B * ((K + 1) * (HW + PP) + 2 * (K + 1) + 2 * PP + 13 * HW), grad, True)
    with torch.cuda.device(grad.device if grad.is_cuda else -1):
        _sp_backward_kernel[(B,)](grad, jac if jac.numel() else pi, pi, grad_cost, ws, steps,
                                  _sp_params(args, grad.device), H, W, n_iter, WHILE=loop == 1, TC=t_conorm,
                                  BLOCK=_sp_block(HW, grad.device))


# --- edit distance ------------------------------------------------------------------------------------------------



# --- bubble sort --------------------------------------------------------------------------------------------------

