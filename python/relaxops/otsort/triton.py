"""Triton kernels of the OT sort ops: the math of ``csrc/otsort/otsort.h``, one program per row (problem).

Each program walks the ``n x m`` cost in ``[BI, BJ]`` tiles, recomputed from the points every time: row passes
(tiles of rows, looping over the targets: reductions over j) and column passes (tiles of targets, looping over the
rows: reductions over i). The log-sum-exp sweeps of the Sinkhorn loop are online (running maximum and rescaled
sum), so they need no fallback; the stopping rule reads the column marginals of the state off the column sweep,
``c_j = b_j exp((g_j - g_new_j) / e)``, as the CPU kernel. Vectors a pass hands to the next (potentials, the
conjugate-gradient vectors, the replayed adjoints) live in the output buffers or a per-row workspace of
``6 m + 3 n`` entries; passes are separated by barriers. The loop parameters (epsilon, epsilon0, decay, tolerance)
come in a float64 tensor, so the annealing schedule is the CPU kernel's to the last bit. Runs on CUDA tensors and,
with ``TRITON_INTERPRET=1``, on CPU tensors (one tile per row there: the interpreter runs programs one by one).
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .. import _checks
from .._triton import interpreted

CHECK_EVERY = 5  # kOtCheckEvery


def _on(device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _pow2(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


def _tiles(n: int, m: int, like):
    """``(BI, BJ, num_warps)`` of the kernels' [BI, BJ] cost tiles. On a GPU a thread holds at most 8 float64 (16
    float32) entries of a tile, so that the tile's temporaries (the exponentials, weights, products) stay in
    registers (docs/gpu.md: register spills)."""
    if interpreted(like.device):  # one tile
        return max(2, _pow2(n)), max(2, _pow2(m)), 4
    per_thread = 8 if like.dtype == torch.float64 else 16
    BI, BJ = max(2, min(_pow2(n), 32 if like.dtype == torch.float64 else 64)), max(2, min(_pow2(m), 64))
    return BI, BJ, max(4, BI * BJ // (32 * per_thread))


def _device_fn(fn):
    """@triton.jit for a device helper; a plain function under the interpreter (nested jit calls re-patch
    triton.language on every call there)."""
    jitted = triton.jit(fn)
    return fn if type(jitted).__name__ == "InterpretedFunction" else jitted


def _params(loop, like):
    epsilon, epsilon0, decay, tolerance = loop[:4]
    return _checks.to_device([epsilon, epsilon0, decay, tolerance], torch.float64, like.device)


@_device_fn
def _cost_exp(xs_ptr, y_ptr, fsh, gsh, base_n, base_m, i, j, im, jm, inv_e):
    """``(exp((fsh_i + gsh_j - C_ij) inv_e), xs_i, y_j)`` on a [BI, BJ] tile (0 outside the masks), with the cost
    ``C_ij = -2 xs_i y_j`` of ``csrc/otsort/otsort.h``: ``dC_ij / dxs_i = -2 y_j``, ``dC_ij / dy_j = -2 xs_i``."""
    x = tl.load(xs_ptr + base_n + i, mask=im, other=0)
    yv = tl.load(y_ptr + base_m + j, mask=jm, other=0)
    z = (fsh[:, None] + gsh[None, :] + 2 * x[:, None] * yv[None, :]) * inv_e
    return tl.where(im[:, None] & jm[None, :], tl.exp(z), 0), x, yv


@_device_fn
def _row_sizes(nl_ptr, ml_ptr, r):
    """Row ``r``'s own numbers of sources and targets (``csrc/otsort/otsort.h``), both 0 for an empty row."""
    nr = tl.load(nl_ptr + r).to(tl.int32)  # <= n, m (int32 arguments)
    mr = tl.load(ml_ptr + r).to(tl.int32)
    empty = (nr == 0) | (mr == 0)
    return tl.where(empty, 0, nr), tl.where(empty, 0, mr)


@_device_fn
def _zero_tail(ptr, k, size, B: tl.constexpr):
    """``ptr[k .. size) = 0``: the pads of a row with ``k`` real entries."""
    for i0 in range(k, size, B):
        i = i0 + tl.arange(0, B)
        tl.store(ptr + i, tl.zeros([B], dtype=ptr.dtype.element_ty), mask=i < size)


@triton.jit
def _sinkhorn_kernel(
    xs_ptr,
    y_ptr,
    la_ptr,
    lb_ptr,
    f_ptr,
    g_ptr,
    eps_ptr,
    it_ptr,
    h_ptr,
    ws_ptr,
    prm_ptr,
    nl_ptr,
    ml_ptr,
    n,
    m,
    max_it,
    H,
    HIST: tl.constexpr,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    nr, mr = _row_sizes(nl_ptr, ml_ptr, r)
    bn, bm = r * n, r * m
    gw = ws_ptr + r * (6 * m + 3 * n)  # the new g
    _zero_tail(f_ptr + bn, nr, n, BI)
    _zero_tail(g_ptr + bm, mr, m, BJ)
    epsilon = tl.load(prm_ptr)
    e = tl.maximum(tl.load(prm_ptr + 1), epsilon)
    decay = tl.load(prm_ptr + 2)
    tol = tl.load(prm_ptr + 3)
    dtype = f_ptr.dtype.element_ty
    bad = 0
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        v = tl.load(xs_ptr + bn + i, mask=im, other=0) + tl.load(la_ptr + bn + i, mask=im, other=0)
        bad += tl.sum(((v != v) | (tl.abs(v) == float("inf"))).to(tl.int32), axis=0)
        tl.store(f_ptr + bn + i, tl.zeros([BI], dtype=dtype), mask=im)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        v = tl.load(y_ptr + bm + j, mask=jm, other=0) + tl.load(lb_ptr + bm + j, mask=jm, other=0)
        bad += tl.sum(((v != v) | (tl.abs(v) == float("inf"))).to(tl.int32), axis=0)
        tl.store(g_ptr + bm + j, tl.zeros([BJ], dtype=dtype), mask=jm)
    tl.debug_barrier()
    t = 0
    e_prev = -1.0 * epsilon
    done = ((bad > 0) | (nr == 0)).to(tl.int32)  # a NaN or an empty row: no iterations
    while (t < max_it) & (done == 0):
        inv_e = (1.0 / e).to(dtype)
        # column sweep: gnew_j = e logb_j - e LSE_i((f_i - C_ij) / e), and the column error of the state
        err = 0.0 * e
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            mx = tl.full([BJ], float("-inf"), dtype=dtype)
            s = tl.zeros([BJ], dtype=dtype)
            for i0 in range(0, nr, BI):
                i = i0 + tl.arange(0, BI)
                im = i < nr
                x = tl.load(xs_ptr + bn + i, mask=im, other=0)
                yv = tl.load(y_ptr + bm + j, mask=jm, other=0)
                fv = tl.load(f_ptr + bn + i, mask=im, other=0)
                z = tl.where(im[:, None], (fv[:, None] + 2 * x[:, None] * yv[None, :]) * inv_e, float("-inf"))
                new = tl.maximum(mx, tl.max(z, axis=0))
                s = s * tl.where(new == mx, 1.0, tl.exp(mx - new)) + tl.sum(tl.exp(z - new[None, :]), axis=0)
                mx = new
            lb = tl.load(lb_ptr + bm + j, mask=jm, other=0)
            gold = tl.load(g_ptr + bm + j, mask=jm, other=0)
            gnew = (e * lb - e * (mx + tl.log(s))).to(dtype)
            tl.store(gw + j, gnew, mask=jm)
            colerr = tl.abs(tl.exp(((gold - gnew) * inv_e).to(tl.float64)) - 1)
            err = tl.maximum(err, tl.max(tl.where(jm, colerr, 0), axis=0))
        tl.debug_barrier()
        check = (t > 0) & (t % 5 == 0) & (e_prev == epsilon)
        if check & (err <= tol):
            done = 1
        else:
            for j0 in range(0, mr, BJ):
                j = j0 + tl.arange(0, BJ)
                jm = j < mr
                tl.store(g_ptr + bm + j, tl.load(gw + j, mask=jm, other=0), mask=jm)
            tl.debug_barrier()
            # row sweep: f_i = e loga_i - e LSE_j((g_j - C_ij) / e)
            for i0 in range(0, nr, BI):
                i = i0 + tl.arange(0, BI)
                im = i < nr
                x = tl.load(xs_ptr + bn + i, mask=im, other=0)
                mx = tl.full([BI], float("-inf"), dtype=dtype)
                s = tl.zeros([BI], dtype=dtype)
                for j0 in range(0, mr, BJ):
                    j = j0 + tl.arange(0, BJ)
                    jm = j < mr
                    yv = tl.load(y_ptr + bm + j, mask=jm, other=0)
                    gv = tl.load(g_ptr + bm + j, mask=jm, other=0)
                    z = tl.where(jm[None, :], (gv[None, :] + 2 * x[:, None] * yv[None, :]) * inv_e, float("-inf"))
                    new = tl.maximum(mx, tl.max(z, axis=1))
                    s = s * tl.where(new == mx, 1.0, tl.exp(mx - new)) + tl.sum(tl.exp(z - new[:, None]), axis=1)
                    mx = new
                la = tl.load(la_ptr + bn + i, mask=im, other=0)
                fnew = (e * la - e * (mx + tl.log(s))).to(dtype)
                tl.store(f_ptr + bn + i, fnew, mask=im)
                if HIST:
                    tl.store(h_ptr + (r * H + t) * (n + m) + i, fnew, mask=im)
            if HIST:
                for j0 in range(0, mr, BJ):
                    j = j0 + tl.arange(0, BJ)
                    jm = j < mr
                    tl.store(h_ptr + (r * H + t) * (n + m) + n + j, tl.load(g_ptr + bm + j, mask=jm, other=0), mask=jm)
            tl.debug_barrier()
            e_prev = e
            e = tl.maximum(decay * e, epsilon)
            t += 1
    if bad > 0:
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            tl.store(f_ptr + bn + i, tl.full([BI], float("nan"), dtype=dtype), mask=i < nr)
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            tl.store(g_ptr + bm + j, tl.full([BJ], float("nan"), dtype=dtype), mask=j < mr)
        tl.store(eps_ptr + r, float("nan"))
    else:
        tl.store(eps_ptr + r, tl.where(nr == 0, epsilon, e_prev).to(dtype))
    tl.store(it_ptr + r, t.to(tl.int32))


@triton.jit
def _apply_fwd_kernel(
    xs_ptr,
    y_ptr,
    f_ptr,
    g_ptr,
    eps_ptr,
    la_ptr,
    lb_ptr,
    u_ptr,
    v_ptr,
    cols_ptr,
    rows_ptr,
    P_ptr,
    nl_ptr,
    ml_ptr,
    n,
    m,
    PLAN: tl.constexpr,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    nr, mr = _row_sizes(nl_ptr, ml_ptr, r)
    bn, bm = r * n, r * m
    inv_e = 1 / tl.load(eps_ptr + r)
    _zero_tail(rows_ptr + bn, nr, n, BI)
    _zero_tail(cols_ptr + bm, mr, m, BJ)
    for i0 in range(0, nr, BI):  # rows_i = sum_j T_ij v_j / a_i (and the plan)
        i = i0 + tl.arange(0, BI)
        im = i < nr
        fv = tl.load(f_ptr + bn + i, mask=im, other=0)
        acc = tl.zeros([BI], dtype=fv.dtype)
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            T, _, _ = _cost_exp(
                xs_ptr, y_ptr, fv, tl.load(g_ptr + bm + j, mask=jm, other=0), bn, bm, i, j, im, jm, inv_e
            )
            acc += tl.sum(T * tl.load(v_ptr + bm + j, mask=jm, other=0)[None, :], axis=1)
            if PLAN:
                tl.store(P_ptr + (bn + i[:, None]) * m + j[None, :], T, mask=im[:, None] & jm[None, :])
        tl.store(rows_ptr + bn + i, acc / tl.exp(tl.load(la_ptr + bn + i, mask=im, other=0)), mask=im)
    for j0 in range(0, mr, BJ):  # cols_j = sum_i T_ij u_i / b_j
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        gv = tl.load(g_ptr + bm + j, mask=jm, other=0)
        acc = tl.zeros([BJ], dtype=gv.dtype)
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            T, _, _ = _cost_exp(
                xs_ptr, y_ptr, tl.load(f_ptr + bn + i, mask=im, other=0), gv, bn, bm, i, j, im, jm, inv_e
            )
            acc += tl.sum(T * tl.load(u_ptr + bn + i, mask=im, other=0)[:, None], axis=0)
        tl.store(cols_ptr + bm + j, acc / tl.exp(tl.load(lb_ptr + bm + j, mask=jm, other=0)), mask=jm)


@triton.jit
def _apply_bwd_kernel(
    gc_ptr,
    gr_ptr,
    gp_ptr,
    xs_ptr,
    y_ptr,
    f_ptr,
    g_ptr,
    eps_ptr,
    la_ptr,
    lb_ptr,
    u_ptr,
    v_ptr,
    cols_ptr,
    rows_ptr,
    gxs_ptr,
    gy_ptr,
    gf_ptr,
    gg_ptr,
    gu_ptr,
    gv_ptr,
    gla_ptr,
    glb_ptr,
    nl_ptr,
    ml_ptr,
    n,
    m,
    GPLAN: tl.constexpr,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    # D_ij = T_ij (gcols_j u_i / b_j + grows_i v_j / a_i + gplan_ij) / e (otsort.h, item 2)
    r = tl.program_id(0).to(tl.int64)
    nr, mr = _row_sizes(nl_ptr, ml_ptr, r)
    bn, bm = r * n, r * m
    _zero_tail(gxs_ptr + bn, nr, n, BI)
    _zero_tail(gf_ptr + bn, nr, n, BI)
    _zero_tail(gu_ptr + bn, nr, n, BI)
    _zero_tail(gla_ptr + bn, nr, n, BI)
    _zero_tail(gy_ptr + bm, mr, m, BJ)
    _zero_tail(gg_ptr + bm, mr, m, BJ)
    _zero_tail(gv_ptr + bm, mr, m, BJ)
    _zero_tail(glb_ptr + bm, mr, m, BJ)
    inv_e = 1 / tl.load(eps_ptr + r)
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        fv = tl.load(f_ptr + bn + i, mask=im, other=0)
        u = tl.load(u_ptr + bn + i, mask=im, other=0)
        gr = tl.load(gr_ptr + bn + i, mask=im, other=0)
        gra = gr / tl.exp(tl.load(la_ptr + bn + i, mask=im, other=0))
        af = tl.zeros([BI], dtype=fv.dtype)
        ax = tl.zeros([BI], dtype=fv.dtype)
        au = tl.zeros([BI], dtype=fv.dtype)
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            T, _, yv = _cost_exp(
                xs_ptr, y_ptr, fv, tl.load(g_ptr + bm + j, mask=jm, other=0), bn, bm, i, j, im, jm, inv_e
            )
            gcb = tl.load(gc_ptr + bm + j, mask=jm, other=0) / tl.exp(tl.load(lb_ptr + bm + j, mask=jm, other=0))
            W = gcb[None, :] * u[:, None] + gra[:, None] * tl.load(v_ptr + bm + j, mask=jm, other=0)[None, :]
            if GPLAN:
                W += tl.load(gp_ptr + (bn + i[:, None]) * m + j[None, :], mask=im[:, None] & jm[None, :], other=0)
            D = T * W * inv_e  # gC_ij = -D_ij
            af += tl.sum(D, axis=1)
            ax += 2 * tl.sum(D * yv[None, :], axis=1)
            au += tl.sum(T * gcb[None, :], axis=1)
        tl.store(gf_ptr + bn + i, af, mask=im)
        tl.store(gxs_ptr + bn + i, ax, mask=im)
        tl.store(gu_ptr + bn + i, au, mask=im)
        tl.store(gla_ptr + bn + i, -gr * tl.load(rows_ptr + bn + i, mask=im, other=0), mask=im)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        gv = tl.load(g_ptr + bm + j, mask=jm, other=0)
        gc = tl.load(gc_ptr + bm + j, mask=jm, other=0)
        gcb = gc / tl.exp(tl.load(lb_ptr + bm + j, mask=jm, other=0))
        vv = tl.load(v_ptr + bm + j, mask=jm, other=0)
        ag = tl.zeros([BJ], dtype=gv.dtype)
        ay = tl.zeros([BJ], dtype=gv.dtype)
        av = tl.zeros([BJ], dtype=gv.dtype)
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            T, x, _ = _cost_exp(
                xs_ptr, y_ptr, tl.load(f_ptr + bn + i, mask=im, other=0), gv, bn, bm, i, j, im, jm, inv_e
            )
            u = tl.load(u_ptr + bn + i, mask=im, other=0)
            gra = tl.load(gr_ptr + bn + i, mask=im, other=0) / tl.exp(tl.load(la_ptr + bn + i, mask=im, other=0))
            W = gcb[None, :] * u[:, None] + gra[:, None] * vv[None, :]
            if GPLAN:
                W += tl.load(gp_ptr + (bn + i[:, None]) * m + j[None, :], mask=im[:, None] & jm[None, :], other=0)
            D = T * W * inv_e
            ag += tl.sum(D, axis=0)
            ay += 2 * tl.sum(D * x[:, None], axis=0)
            av += tl.sum(T * gra[:, None], axis=0)
        tl.store(gg_ptr + bm + j, ag, mask=jm)
        tl.store(gy_ptr + bm + j, ay, mask=jm)
        tl.store(gv_ptr + bm + j, av, mask=jm)
        tl.store(glb_ptr + bm + j, -gc * tl.load(cols_ptr + bm + j, mask=jm, other=0), mask=jm)


@_device_fn
def _row_pass(
    xs_ptr,
    y_ptr,
    f_ptr,
    g_ptr,
    bn,
    bm,
    n,
    m,
    inv_e,
    vin_ptr,
    win_ptr,
    r_ptr,
    wout_ptr,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    """wout_i = (sum_j T_ij vin_j - win_i) / r_i."""
    for i0 in range(0, n, BI):
        i = i0 + tl.arange(0, BI)
        im = i < n
        fv = tl.load(f_ptr + bn + i, mask=im, other=0)
        acc = tl.zeros([BI], dtype=tl.float64)
        for j0 in range(0, m, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < m
            T, _, _ = _cost_exp(
                xs_ptr, y_ptr, fv, tl.load(g_ptr + bm + j, mask=jm, other=0), bn, bm, i, j, im, jm, inv_e
            )
            acc += tl.sum(T.to(tl.float64) * tl.load(vin_ptr + j, mask=jm, other=0)[None, :], axis=1)
        w = (acc - tl.load(win_ptr + i, mask=im, other=0)) / tl.load(r_ptr + i, mask=im, other=1)
        tl.store(wout_ptr + i, w, mask=im)


@_device_fn
def _column_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, n, m, inv_e, w_ptr, out_ptr, BI: tl.constexpr, BJ: tl.constexpr):
    """out_j = sum_i T_ij w_i."""
    for j0 in range(0, m, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < m
        gv = tl.load(g_ptr + bm + j, mask=jm, other=0)
        acc = tl.zeros([BJ], dtype=tl.float64)
        for i0 in range(0, n, BI):
            i = i0 + tl.arange(0, BI)
            im = i < n
            T, _, _ = _cost_exp(
                xs_ptr, y_ptr, tl.load(f_ptr + bn + i, mask=im, other=0), gv, bn, bm, i, j, im, jm, inv_e
            )
            acc += tl.sum(T.to(tl.float64) * tl.load(w_ptr + i, mask=im, other=0)[:, None], axis=0)
        tl.store(out_ptr + j, acc, mask=jm)


@triton.jit
def _implicit_bwd_kernel(
    gf_ptr,
    gg_ptr,
    xs_ptr,
    y_ptr,
    f_ptr,
    g_ptr,
    eps_ptr,
    la_ptr,
    lb_ptr,
    gxs_ptr,
    gy_ptr,
    gla_ptr,
    glb_ptr,
    ws_ptr,
    nl_ptr,
    ml_ptr,
    n,
    m,
    max_cg,
    cg_tol,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    # otsort.h item 3: PCG on S = diag(c) - T^t diag(1/r) T, all vectors float64 in the workspace:
    # r (n), w (n), nuf (n), c, x, res, dir, q, ones (m each)
    r = tl.program_id(0).to(tl.int64)
    nr, mr = _row_sizes(nl_ptr, ml_ptr, r)
    bn, bm = r * n, r * m
    _zero_tail(gxs_ptr + bn, nr, n, BI)
    _zero_tail(gla_ptr + bn, nr, n, BI)
    _zero_tail(gy_ptr + bm, mr, m, BJ)
    _zero_tail(glb_ptr + bm, mr, m, BJ)
    ws = ws_ptr + r * (6 * m + 3 * n)
    rs, w, nuf = ws, ws + n, ws + 2 * n
    cs, xv, res, dv, q, ones = (
        ws + 3 * n,
        ws + 3 * n + m,
        ws + 3 * n + 2 * m,
        ws + 3 * n + 3 * m,
        ws + 3 * n + 4 * m,
        ws + 3 * n + 5 * m,
    )
    e = tl.load(eps_ptr + r)
    inv_e = 1 / e
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        tl.store(w + i, tl.zeros([BI], dtype=tl.float64), mask=i < nr)
        tl.store(rs + i, tl.full([BI], 1.0, dtype=tl.float64), mask=i < nr)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        tl.store(ones + j, tl.full([BJ], 1.0, dtype=tl.float64), mask=j < mr)
    tl.debug_barrier()
    _row_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, ones, w, rs, rs, BI, BJ)  # r = T 1
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        tl.store(w + i, tl.full([BI], 1.0, dtype=tl.float64), mask=i < nr)
    tl.debug_barrier()
    _column_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, w, cs, BI, BJ)  # c = T^t 1
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        gfv = tl.load(gf_ptr + bn + i, mask=im, other=0).to(tl.float64)
        tl.store(w + i, -gfv / tl.load(rs + i, mask=im, other=1), mask=im)
    tl.debug_barrier()
    _column_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, w, q, BI, BJ)  # q = -T^t (gf / r)
    tl.debug_barrier()
    total = 0.0 * e.to(tl.float64)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        v = tl.load(gg_ptr + bm + j, mask=jm, other=0).to(tl.float64) + tl.load(q + j, mask=jm, other=0)
        total += tl.sum(tl.where(jm, v, 0), axis=0)
        tl.store(res + j, v, mask=jm)
    mean = total / tl.maximum(mr, 1)
    rn = 0.0 * total
    rz = 0.0 * total
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        v = tl.where(jm, tl.load(res + j, mask=jm, other=0) - mean, 0)
        z = v / tl.load(cs + j, mask=jm, other=1)
        tl.store(res + j, v, mask=jm)
        tl.store(dv + j, z, mask=jm)
        tl.store(xv + j, tl.zeros([BJ], dtype=tl.float64), mask=jm)
        rn += tl.sum(v * v, axis=0)
        rz += tl.sum(v * z, axis=0)
    tl.debug_barrier()
    stop = cg_tol * tl.sqrt(rn)
    it = 0
    go = rn > 0
    while (it < max_cg) & go:
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            tl.store(w + i, tl.zeros([BI], dtype=tl.float64), mask=i < nr)
        tl.debug_barrier()
        _row_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, dv, w, rs, w, BI, BJ)
        tl.debug_barrier()
        _column_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, w, q, BI, BJ)
        tl.debug_barrier()
        pq = 0.0 * rz
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            dj = tl.load(dv + j, mask=jm, other=0)
            qj = tl.where(jm, tl.load(cs + j, mask=jm, other=0) * dj - tl.load(q + j, mask=jm, other=0), 0)
            tl.store(q + j, qj, mask=jm)
            pq += tl.sum(dj * qj, axis=0)
        tl.debug_barrier()
        if pq > 0:
            alpha = rz / pq
            rsum = 0.0 * rz
            for j0 in range(0, mr, BJ):
                j = j0 + tl.arange(0, BJ)
                jm = j < mr
                tl.store(xv + j, tl.load(xv + j, mask=jm, other=0) + alpha * tl.load(dv + j, mask=jm, other=0), mask=jm)
                v = tl.where(jm, tl.load(res + j, mask=jm, other=0) - alpha * tl.load(q + j, mask=jm, other=0), 0)
                tl.store(res + j, v, mask=jm)
                rsum += tl.sum(v, axis=0)
            tl.debug_barrier()
            rmean = rsum / tl.maximum(mr, 1)
            rn = 0.0 * rz
            rz_new = 0.0 * rz
            for j0 in range(0, mr, BJ):
                j = j0 + tl.arange(0, BJ)
                jm = j < mr
                v = tl.where(jm, tl.load(res + j, mask=jm, other=0) - rmean, 0)
                tl.store(res + j, v, mask=jm)
                rn += tl.sum(v * v, axis=0)
                rz_new += tl.sum(v * v / tl.load(cs + j, mask=jm, other=1), axis=0)
            tl.debug_barrier()
            if tl.sqrt(rn) <= stop:
                go = False
            else:
                beta = rz_new / rz
                rz = rz_new
                for j0 in range(0, mr, BJ):
                    j = j0 + tl.arange(0, BJ)
                    jm = j < mr
                    z = tl.load(res + j, mask=jm, other=0) / tl.load(cs + j, mask=jm, other=1)
                    tl.store(dv + j, z + beta * tl.load(dv + j, mask=jm, other=0), mask=jm)
                tl.debug_barrier()
        else:
            go = False
        it += 1
    # nu_f = (gf - T x) / r; gC_ij = T_ij (nu_f_i + x_j)
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        tl.store(w + i, tl.load(gf_ptr + bn + i, mask=im, other=0).to(tl.float64), mask=im)
    tl.debug_barrier()
    _row_pass(xs_ptr, y_ptr, f_ptr, g_ptr, bn, bm, nr, mr, inv_e, xv, w, rs, nuf, BI, BJ)  # (T x - gf) / r = -nu_f
    tl.debug_barrier()
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        fv = tl.load(f_ptr + bn + i, mask=im, other=0)
        nf = -tl.load(nuf + i, mask=im, other=0)
        ax = tl.zeros([BI], dtype=tl.float64)
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            T, _, yv = _cost_exp(
                xs_ptr, y_ptr, fv, tl.load(g_ptr + bm + j, mask=jm, other=0), bn, bm, i, j, im, jm, inv_e
            )
            gc = T.to(tl.float64) * (nf[:, None] + tl.load(xv + j, mask=jm, other=0)[None, :])
            ax -= 2 * tl.sum(gc * yv.to(tl.float64)[None, :], axis=1)
        tl.store(gxs_ptr + bn + i, ax.to(gxs_ptr.dtype.element_ty), mask=im)
        la = tl.load(la_ptr + bn + i, mask=im, other=0).to(tl.float64)
        tl.store(gla_ptr + bn + i, (e.to(tl.float64) * tl.exp(la) * nf).to(gla_ptr.dtype.element_ty), mask=im)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        gv = tl.load(g_ptr + bm + j, mask=jm, other=0)
        xj = tl.load(xv + j, mask=jm, other=0)
        ay = tl.zeros([BJ], dtype=tl.float64)
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            T, x, _ = _cost_exp(
                xs_ptr, y_ptr, tl.load(f_ptr + bn + i, mask=im, other=0), gv, bn, bm, i, j, im, jm, inv_e
            )
            gc = T.to(tl.float64) * (-tl.load(nuf + i, mask=im, other=0)[:, None] + xj[None, :])
            ay -= 2 * tl.sum(gc * x.to(tl.float64)[:, None], axis=0)
        tl.store(gy_ptr + bm + j, ay.to(gy_ptr.dtype.element_ty), mask=jm)
        lb = tl.load(lb_ptr + bm + j, mask=jm, other=0).to(tl.float64)
        tl.store(glb_ptr + bm + j, (e.to(tl.float64) * tl.exp(lb) * xj).to(glb_ptr.dtype.element_ty), mask=jm)


@triton.jit
def _unrolled_bwd_kernel(
    gf_ptr,
    gg_ptr,
    xs_ptr,
    y_ptr,
    la_ptr,
    lb_ptr,
    it_ptr,
    h_ptr,
    gxs_ptr,
    gy_ptr,
    gla_ptr,
    glb_ptr,
    ws_ptr,
    prm_ptr,
    nl_ptr,
    ml_ptr,
    n,
    m,
    H,
    BI: tl.constexpr,
    BJ: tl.constexpr,
):
    # otsort.h item 4, replayed from the history; F (n), G (m), dG (m) in the workspace (data dtype)
    r = tl.program_id(0).to(tl.int64)
    nr, mr = _row_sizes(nl_ptr, ml_ptr, r)
    bn, bm = r * n, r * m
    _zero_tail(gxs_ptr + bn, nr, n, BI)
    _zero_tail(gla_ptr + bn, nr, n, BI)
    _zero_tail(gy_ptr + bm, mr, m, BJ)
    _zero_tail(glb_ptr + bm, mr, m, BJ)
    ws = ws_ptr + r * (6 * m + 3 * n)
    F, Fn, G = ws, ws + n, ws + 2 * n
    K = tl.load(it_ptr + r)
    epsilon = tl.load(prm_ptr)
    decay = tl.load(prm_ptr + 2)
    dtype = gxs_ptr.dtype.element_ty
    for i0 in range(0, nr, BI):
        i = i0 + tl.arange(0, BI)
        im = i < nr
        tl.store(F + i, tl.load(gf_ptr + bn + i, mask=im, other=0), mask=im)
        tl.store(gxs_ptr + bn + i, tl.zeros([BI], dtype=dtype), mask=im)
        tl.store(gla_ptr + bn + i, tl.zeros([BI], dtype=dtype), mask=im)
    for j0 in range(0, mr, BJ):
        j = j0 + tl.arange(0, BJ)
        jm = j < mr
        tl.store(G + j, tl.load(gg_ptr + bm + j, mask=jm, other=0), mask=jm)
        tl.store(gy_ptr + bm + j, tl.zeros([BJ], dtype=dtype), mask=jm)
        tl.store(glb_ptr + bm + j, tl.zeros([BJ], dtype=dtype), mask=jm)
    tl.debug_barrier()
    for tt in range(0, K):
        t = K - 1 - tt
        e = tl.maximum(tl.load(prm_ptr + 1), epsilon)  # e_t of the schedule
        for _decay in range(0, t):
            e = tl.maximum(decay * e, epsilon)
        inv_e = (1.0 / e).to(dtype)
        et = e.to(dtype)
        h1 = h_ptr + (r * H + t) * (n + m)
        h0 = h_ptr + (r * H + t - 1) * (n + m)
        # row sweep t: P_ij = exp((f1_i - e loga_i + g1_j - C_ij) / e); G_j -= sum_i P_ij F_i
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            g1 = tl.load(h1 + n + j, mask=jm, other=0)
            dG = tl.zeros([BJ], dtype=dtype)
            ay = tl.zeros([BJ], dtype=dtype)
            for i0 in range(0, nr, BI):
                i = i0 + tl.arange(0, BI)
                im = i < nr
                sh = tl.load(h1 + i, mask=im, other=0) - et * tl.load(la_ptr + bn + i, mask=im, other=0)
                P, x, _ = _cost_exp(xs_ptr, y_ptr, sh, g1, bn, bm, i, j, im, jm, inv_e)
                wv = P * tl.load(F + i, mask=im, other=0)[:, None]  # gC_ij
                dG -= tl.sum(wv, axis=0)
                ay -= 2 * tl.sum(wv * x[:, None], axis=0)
            Gj = tl.load(G + j, mask=jm, other=0) + dG
            tl.store(G + j, Gj, mask=jm)
            tl.store(gy_ptr + bm + j, tl.load(gy_ptr + bm + j, mask=jm, other=0) + ay, mask=jm)
            tl.store(glb_ptr + bm + j, tl.load(glb_ptr + bm + j, mask=jm, other=0) + et * Gj, mask=jm)
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            Fi = tl.load(F + i, mask=im, other=0)
            sh = tl.load(h1 + i, mask=im, other=0) - et * tl.load(la_ptr + bn + i, mask=im, other=0)
            ax = tl.zeros([BI], dtype=dtype)
            for j0 in range(0, mr, BJ):
                j = j0 + tl.arange(0, BJ)
                jm = j < mr
                P, _, yv = _cost_exp(
                    xs_ptr, y_ptr, sh, tl.load(h1 + n + j, mask=jm, other=0), bn, bm, i, j, im, jm, inv_e
                )
                ax -= 2 * tl.sum(P * Fi[:, None] * yv[None, :], axis=1)
            tl.store(gxs_ptr + bn + i, tl.load(gxs_ptr + bn + i, mask=im, other=0) + ax, mask=im)
            tl.store(gla_ptr + bn + i, tl.load(gla_ptr + bn + i, mask=im, other=0) + et * Fi, mask=im)
        tl.debug_barrier()
        # column sweep t: Q_ij = exp((f0_i + g1_j - e logb_j - C_ij) / e); F_i = -sum_j Q_ij G_j
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            f0 = tl.load(h0 + i, mask=im & ((tl.zeros([BI], dtype=tl.int32) + t) > 0), other=0)
            aq = tl.zeros([BI], dtype=dtype)
            ax = tl.zeros([BI], dtype=dtype)
            for j0 in range(0, mr, BJ):
                j = j0 + tl.arange(0, BJ)
                jm = j < mr
                sh = tl.load(h1 + n + j, mask=jm, other=0) - et * tl.load(lb_ptr + bm + j, mask=jm, other=0)
                Q, _, yv = _cost_exp(xs_ptr, y_ptr, f0, sh, bn, bm, i, j, im, jm, inv_e)
                wv = Q * tl.load(G + j, mask=jm, other=0)[None, :]  # gC_ij
                aq -= tl.sum(wv, axis=1)
                ax -= 2 * tl.sum(wv * yv[None, :], axis=1)
            tl.store(Fn + i, aq, mask=im)
            tl.store(gxs_ptr + bn + i, tl.load(gxs_ptr + bn + i, mask=im, other=0) + ax, mask=im)
        for j0 in range(0, mr, BJ):
            j = j0 + tl.arange(0, BJ)
            jm = j < mr
            sh = tl.load(h1 + n + j, mask=jm, other=0) - et * tl.load(lb_ptr + bm + j, mask=jm, other=0)
            Gj = tl.load(G + j, mask=jm, other=0)
            ay = tl.zeros([BJ], dtype=dtype)
            for i0 in range(0, nr, BI):
                i = i0 + tl.arange(0, BI)
                im = i < nr
                f0 = tl.load(h0 + i, mask=im & ((tl.zeros([BI], dtype=tl.int32) + t) > 0), other=0)
                Q, x, _ = _cost_exp(xs_ptr, y_ptr, f0, sh, bn, bm, i, j, im, jm, inv_e)
                ay -= 2 * tl.sum(Q * Gj[None, :] * x[:, None], axis=0)
            tl.store(gy_ptr + bm + j, tl.load(gy_ptr + bm + j, mask=jm, other=0) + ay, mask=jm)
            tl.store(G + j, tl.zeros([BJ], dtype=dtype), mask=jm)
        tl.debug_barrier()
        for i0 in range(0, nr, BI):
            i = i0 + tl.arange(0, BI)
            im = i < nr
            tl.store(F + i, tl.load(Fn + i, mask=im, other=0), mask=im)
        tl.debug_barrier()


def _workspace(xs, y, dtype):
    R, n = xs.shape
    m = y.shape[1]
    return torch.empty(max(1, R * (6 * m + 3 * n)), dtype=dtype, device=xs.device)


def _lengths(lens, xs, y):
    """The rows' own numbers of sources and targets, int64 [R] each (full rows where None)."""
    R, n = xs.shape
    m = y.shape[1]
    n_len, m_len = lens
    full = xs.new_empty(0, dtype=torch.int64)
    n_len = full.new_full((R,), n) if n_len is None else n_len
    m_len = full.new_full((R,), m) if m_len is None else m_len
    return n_len, m_len


def _valid(lengths, size):
    return torch.arange(size, device=lengths.device) < lengths.unsqueeze(-1)


def _nan_rows(bad, outs, n_len, m_len):
    """NaN on the real entries of the rows ``bad`` of ``(gxs, gy, gloga, glogb)`` (the pads stay 0); off the CPU
    without asking first whether there are any (``_checks.on_host``)."""
    if not _checks.on_host(bad) or bool(bad.any()):
        vn, vm = _valid(n_len, outs[0].shape[1]), _valid(m_len, outs[1].shape[1])
        for o, v in zip(outs, (vn, vm, vn, vm)):
            o.masked_fill_(bad.unsqueeze(-1) & v, float("nan"))


def _finite_rows(n_len, m_len, xs, y, loga, logb):
    """Rows whose real entries are all finite."""
    vn, vm = _valid(n_len, xs.shape[1]), _valid(m_len, y.shape[1])
    ok_n = (xs.isfinite() & loga.isfinite()) | ~vn
    ok_m = (y.isfinite() & logb.isfinite()) | ~vm
    return ok_n.all(-1) & ok_m.all(-1)


def sinkhorn_forward(xs, y, loga, logb, loop, f, g, eps, iters, history, lens):
    R, n = xs.shape
    m = y.shape[1]
    if R == 0:
        return
    if loop[4] < 1:
        raise ValueError("relaxops: ot_sinkhorn_forward: max_iterations must be >= 1")
    BI, BJ, warps = _tiles(n, m, xs)
    H = loop[5]
    with _on(xs.device):
        _sinkhorn_kernel[(R,)](
            xs,
            y,
            loga,
            logb,
            f,
            g,
            eps,
            iters,
            history if history is not None else f,
            _workspace(xs, y, xs.dtype),
            _params(loop, xs),
            *_lengths(lens, xs, y),
            n,
            m,
            loop[4],
            max(H, 1),
            HIST=history is not None,
            BI=BI,
            BJ=BJ,
            num_warps=warps,
        )


def apply_forward(xs, y, f, g, eps, loga, logb, u, v, cols, rows, plan, lens):
    R, n = xs.shape
    m = y.shape[1]
    if R == 0:
        return
    BI, BJ, warps = _tiles(n, m, xs)
    n_len, m_len = _lengths(lens, xs, y)
    with _on(xs.device):
        _apply_fwd_kernel[(R,)](
            xs,
            y,
            f,
            g,
            eps,
            loga,
            logb,
            u,
            v,
            cols,
            rows,
            plan if plan is not None else cols,
            n_len,
            m_len,
            n,
            m,
            PLAN=plan is not None,
            BI=BI,
            BJ=BJ,
            num_warps=warps,
        )
    if plan is not None and lens != (None, None):  # the plan's pad rows and columns (the kernel writes the rest)
        plan.masked_fill_(~(_valid(n_len, n).unsqueeze(-1) & _valid(m_len, m).unsqueeze(-2)), 0)


def apply_backward(gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, outs, lens):
    R, n = xs.shape
    m = y.shape[1]
    if R == 0:
        return
    BI, BJ, warps = _tiles(n, m, xs)
    gxs, gy, gf, gg, gu, gv, gla, glb = outs
    with _on(xs.device):
        _apply_bwd_kernel[(R,)](
            gcols,
            grows,
            gplan if gplan is not None else gcols,
            xs,
            y,
            f,
            g,
            eps,
            loga,
            logb,
            u,
            v,
            cols,
            rows,
            gxs,
            gy,
            gf,
            gg,
            gu,
            gv,
            gla,
            glb,
            *_lengths(lens, xs, y),
            n,
            m,
            GPLAN=gplan is not None,
            BI=BI,
            BJ=BJ,
            num_warps=warps,
        )


def implicit_backward(gf, gg, xs, y, f, g, eps, loga, logb, loop, outs, lens):
    R, n = xs.shape
    m = y.shape[1]
    if R == 0:
        return
    BI, BJ, warps = _tiles(n, m, xs)
    tol = 1e-6 if xs.dtype == torch.float32 else 1e-12  # kCgTolerance
    gxs, gy, gla, glb = outs
    n_len, m_len = _lengths(lens, xs, y)
    with _on(xs.device):
        _implicit_bwd_kernel[(R,)](
            gf,
            gg,
            xs,
            y,
            f,
            g,
            eps,
            loga,
            logb,
            gxs,
            gy,
            gla,
            glb,
            _workspace(xs, y, torch.float64),
            n_len,
            m_len,
            n,
            m,
            2 * m + 100,
            tol,
            BI=BI,
            BJ=BJ,
            num_warps=warps,
        )
    _nan_rows(~eps.isfinite(), outs, n_len, m_len)  # NaN rows of the forward


def unrolled_backward(gf, gg, xs, y, loga, logb, iters, history, loop, outs, lens):
    R, n = xs.shape
    m = y.shape[1]
    if R == 0:
        return
    H = history.numel() // max(1, R * (n + m))
    # off the CPU: asserted on the device by ops.ot_sinkhorn_bwd
    if iters.numel() and _checks.on_host(iters) and not bool(((iters >= 0) & (iters <= H)).all()):
        raise ValueError("relaxops: ot_unrolled_backward: iters must be in [0, history_len]")
    BI, BJ, warps = _tiles(n, m, xs)
    n_len, m_len = _lengths(lens, xs, y)
    with _on(xs.device):
        _unrolled_bwd_kernel[(R,)](
            gf,
            gg,
            xs,
            y,
            loga,
            logb,
            iters,
            history,
            *outs,
            _workspace(xs, y, xs.dtype),
            _params(loop, xs),
            n_len,
            m_len,
            n,
            m,
            max(H, 1),
            BI=BI,
            BJ=BJ,
            num_warps=warps,
        )
    _nan_rows(~_finite_rows(n_len, m_len, xs, y, loga, logb), outs, n_len, m_len)  # NaN rows of the forward
