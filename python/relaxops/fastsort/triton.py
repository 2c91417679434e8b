"""Triton kernels of the fast soft sort / soft rank ops: the formulas and layouts of ``csrc/fastsort/fastsort.h``.

The launchers sort the rows of ``sgn x`` with ``torch.sort(stable=True)`` (pads as NaN: ``_rows.exact_order``) and
pass, per row, the sorted values ``y`` (float64), the finite range ``[lo, hi)``, whether the row is NaN (a NaN, or
an infinity for soft_sort) and its real length ``L_b`` (``n`` without ``lengths``). Every program works on its
row's first ``L_b`` positions (PAV, outputs, sums; the pads are never read) and writes the pads: outputs 0,
``block[j] = j``, gradients 0. One program per row:

* forward: PAV, then a vectorized pass that forms the outputs from ``block[j]`` (the start of j's block),
  ``ends[s]`` and ``acc[s]`` (the end and the statistic of the block starting at s). Rows of n < ``LONG_ROW`` run
  the in-place PAV of fastsort.h as a scalar loop and a scalar walk over the blocks; long rows run the chunked PAV
  of fastsort.h (as fastsort.cu's long rows, ``LONG_CHUNKS`` chunks): one lane per chunk, the lanes' PAVs in
  lock-step (``while`` on ``tl.max`` of the lanes still working, masked loads and stores of ``block``/``acc`` in
  global memory), the boundary merges in log2(C) tree rounds (each round's merged blocks shared through a scratch
  buffer), then every lane writes ``block``/``ends`` over its chunk; ``tl.debug_barrier()`` between dependent
  steps (lanes are threads of one program);
* backward: the sums of every block at its start, then a vectorized pass of the vector-Jacobian products. Short
  rows sum in a scalar pass in sorted order; long rows per chunk (one lane each), the parts of a block crossing
  chunk boundaries added in chunk order (fastsort_chunk_totals): deterministic either way.

Statistics, outputs and sums in float64 (as the C++ kernels). The chunked PAV gives the sequential PAV's blocks
(the same merge conditions; merged statistics are the same sums formed in another order, so values agree to
rounding; see fastsort.h for the exact-tie caveat). Runs on CUDA tensors and, with ``TRITON_INTERPRET=1``, on CPU
tensors; ``forward``/``backward`` take ``chunks`` to force the chunked path on short rows (tests). From
``LONG_ROW`` on, rows take ``LONG_CHUNKS`` lanes: on an H200 this kernel took the same time on rows of 1000 (the
scalar path) and 5000 (docs/gpu.md), so the threshold stays where every lane has >= 4 positions.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .._triton import interpreted
from .ops import OPS, reg_code

LONG_ROW = 1024  # rows from this length take the chunked PAV and sums
LONG_CHUNKS = 256  # their chunks (lanes) per row: >= 4 positions each from LONG_ROW


@triton.jit
def _merge_if_violated(y_row, gtab_ptr, p, t, e, ap, a, eps, inv_eps, m, OP: tl.constexpr, REG: tl.constexpr):
    """fastsort_merge_if_violated on the blocks P = [p, t) (statistic ap) and T = [t, e] (statistic a), scalars or
    lanes (loads masked by m): (violated and m, the statistic of [p, e])."""
    cP = (t - p).to(tl.float64)
    cT = (e - t + 1).to(tl.float64)
    if OP == 0 and REG == 0:  # mean_T - mean_P <= eps (cP + cT) / 2, times cP cT; sums relative to y_s
        d = tl.load(y_row + t, mask=m, other=0.0) - tl.load(y_row + p, mask=m, other=0.0)
        hit = d * cP * cT + a * cP - ap * cT <= eps * (cP + cT) * cP * cT * 0.5
        merged = ap + a + cT * d
    elif OP == 1 and REG == 0:  # mean_T - mean_P >= (cP + cT) / (2 eps); means
        hit = a - ap >= (cP + cT) * 0.5 * inv_eps
        merged = ap * (cP / (cP + cT)) + a * (cT / (cP + cT))
    elif OP == 0:  # exp((y_e - y_{t-1}) / eps) S_T W_P <= W_T S_P; S relative to the block max (exp capped at
        # e^700: the right side is below n^3, so a capped E never merges either)
        WP = cP * ((p + t - 1).to(tl.float64) * 0.5 + 1.0)
        WT = cT * ((t + e).to(tl.float64) * 0.5 + 1.0)
        z = (tl.load(y_row + e, mask=m, other=0.0) - tl.load(y_row + t - 1, mask=m, other=0.0)) * inv_eps
        E = tl.exp(tl.minimum(z, 700.0))
        hit = E * a * WP <= WT * ap
        merged = a + ap / E
    else:  # cP / eps + G(cP) - G(cT) <= (y_t - y_p) + log(S_P / S_T); S relative to the block min
        d = tl.load(y_row + t, mask=m, other=0.0) - tl.load(y_row + p, mask=m, other=0.0)
        lhs = (
            cP * inv_eps
            + tl.load(gtab_ptr + (t - p - 1), mask=m, other=0.0)
            - tl.load(gtab_ptr + (e - t), mask=m, other=0.0)
        )
        hit = lhs <= d + tl.log(ap / a)
        merged = ap + tl.exp(-d) * a
    return hit & m, merged


@triton.jit
def _single(ye, OP: tl.constexpr, REG: tl.constexpr):
    """The statistic of a singleton block of value ye (fastsort_single)."""
    if REG == 1:
        return ye * 0.0 + 1.0
    elif OP == 0:
        return ye * 0.0
    else:
        return ye


@triton.jit
def _sequential_pav(
    y_row, blk, acc_row, ends, gtab_ptr, lo, hi, eps, inv_eps, OP: tl.constexpr, REG: tl.constexpr, BLOCK: tl.constexpr
):
    """PAV over [lo, hi) as a scalar loop (push e, merge with the previous block while the pair violates the order),
    then a walk over the blocks from the end: block[j] = s over [s, e], ends[s] = e. Every thread of the program
    runs the scalar loop and one of them stores; the barrier after each position makes its stores visible to all
    before they are read back (without it, the threads of other warps read stale entries and diverge)."""
    for e in range(lo, hi):
        a = _single(tl.load(y_row + e), OP, REG)
        t = e
        go = t > lo
        while go:
            p = tl.load(blk + t - 1).to(tl.int64)
            hit, merged = _merge_if_violated(
                y_row, gtab_ptr, p, t, e, tl.load(acc_row + p), a, eps, inv_eps, go, OP, REG
            )
            if hit:
                a = merged
                t = p
                go = t > lo
            else:
                go = False
        tl.store(acc_row + t, a)
        tl.store(blk + e, t)
        tl.debug_barrier()
    e = hi - 1
    while e >= lo:
        s = tl.load(blk + e).to(tl.int64)
        tl.store(ends + s, e)
        for j0 in range(s, e + 1, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            tl.store(blk + j, s + j * 0, mask=j <= e)
        e = s - 1


@triton.jit
def _chunked_pav(
    y_row,
    blk,
    acc_row,
    ends,
    mrg,
    gtab_ptr,
    lo,
    hi,
    C,
    eps,
    inv_eps,
    OP: tl.constexpr,
    REG: tl.constexpr,
    LANES: tl.constexpr,
):
    """The chunked PAV of fastsort.h over [lo, hi) cut into C <= LANES chunks of L positions, one lane per chunk:
    writes block[j] = s over every block [s, e] and ends[s] = e. blk holds PAV's block ends until then (both ends:
    blk[s] = e, blk[e] = s; interior entries stale), acc[s] the block statistics; mrg: 2 LANES int64 of scratch."""
    k = tl.arange(0, LANES).to(tl.int64)
    L = (hi - lo + C - 1) // C
    c0 = tl.minimum(lo + L * k, hi)
    c1 = tl.minimum(c0 + L, hi)
    # 1. each lane's PAV of its chunk (fastsort_chunk_pav), in lock-step: a step is one merge attempt, or the push
    #    of the block [t, e] that stopped merging and of the next position
    e = c0
    t = c0
    act = e < c1
    a = _single(tl.load(y_row + e, mask=act, other=0.0), OP, REG)
    while tl.max(act.to(tl.int32), 0) > 0:
        tried = act & (t > c0)
        p = tl.load(blk + t - 1, mask=tried, other=0).to(tl.int64)
        hit, merged = _merge_if_violated(
            y_row, gtab_ptr, p, t, e, tl.load(acc_row + p, mask=tried, other=1.0), a, eps, inv_eps, tried, OP, REG
        )
        a = tl.where(hit, merged, a)
        t = tl.where(hit, p, t)
        done = act & ~hit
        tl.store(acc_row + t, a, mask=done)
        tl.store(blk + t, e.to(tl.int32), mask=done)
        tl.store(blk + e, t.to(tl.int32), mask=done)
        e = tl.where(done, e + 1, e)
        t = tl.where(done, e, t)
        act = e < c1
        a = tl.where(done, _single(tl.load(y_row + e, mask=done & act, other=0.0), OP, REG), a)
        tl.debug_barrier()
    # 2. rounds w = 1, 2, 4, ... < C (fastsort_chunk_merge): lane k (k % 2w == 0) pushes the blocks of the segment
    #    [m, sr) of chunks [k + w, k + 2w) onto the segment [c0, m) while they violate the order; the merged block
    #    [p, e] around m is shared through mrg, and every chunk whose start lies in (p, e] records it as the block
    #    crossing into it (cs, ce; -1: the chunk starts a block)
    cs = k * 0 - 1
    ce = cs
    w = 1
    while w < C:
        own = (k % (2 * w) == 0) & (k + w < C)
        m = tl.minimum(lo + L * (k + w), hi)
        sr = tl.minimum(lo + L * tl.minimum(k + 2 * w, C), hi)
        p = m
        e = m - 1
        j = m
        go = own & (j < sr)
        end = tl.load(blk + j, mask=go, other=0).to(tl.int64)
        a = tl.load(acc_row + j, mask=go, other=1.0)
        t = j
        while tl.max(go.to(tl.int32), 0) > 0:
            tried = go & (t > c0)
            q = tl.load(blk + t - 1, mask=tried, other=0).to(tl.int64)
            hit, merged = _merge_if_violated(
                y_row, gtab_ptr, q, t, end, tl.load(acc_row + q, mask=tried, other=1.0), a, eps, inv_eps, tried, OP, REG
            )
            a = tl.where(hit, merged, a)
            t = tl.where(hit, q, t)
            grew = go & ~hit & (t < j)  # the block [j, end] merged down to t: keep [t, end], push the next one
            tl.store(acc_row + t, a, mask=grew)
            tl.store(blk + t, end.to(tl.int32), mask=grew)
            tl.store(blk + end, t.to(tl.int32), mask=grew)
            p = tl.where(grew, t, p)
            e = tl.where(grew, end, e)
            j = tl.where(grew, end + 1, j)
            nxt = grew & (j < sr)
            go = hit | nxt
            end = tl.where(nxt, tl.load(blk + j, mask=nxt, other=0).to(tl.int64), end)
            a = tl.where(nxt, tl.load(acc_row + j, mask=nxt, other=1.0), a)
            t = tl.where(nxt, j, t)
            tl.debug_barrier()
        tl.store(mrg + 2 * k, p, mask=own)
        tl.store(mrg + 2 * k + 1, e, mask=own)
        tl.debug_barrier()
        o = k - k % (2 * w)  # this round's owner of chunk k
        has = o + w < C
        po = tl.load(mrg + 2 * o, mask=has, other=0)
        eo = tl.load(mrg + 2 * o + 1, mask=has, other=-1)
        crossed = has & (po < c0) & (c0 <= eo)
        cs = tl.where(crossed, po, cs)
        ce = tl.where(crossed, eo, ce)
        tl.debug_barrier()  # mrg is rewritten by the next round
        w = w * 2
    # 3. each lane walks its positions (fastsort_chunk_outputs): the crossing block, then the blocks starting in
    #    the chunk (blk[j] = the end of the block starting at j; the lane overwrites only positions it has passed)
    s = cs
    e = tl.where(cs >= 0, ce, c0 - 1)
    for step in range(0, L):
        j = c0 + step
        inside = j < c1
        new = inside & (j > e)
        e = tl.where(new, tl.load(blk + j, mask=new, other=0).to(tl.int64), e)
        s = tl.where(new, j, s)
        tl.store(ends + s, e.to(tl.int32), mask=new)
        tl.store(blk + j, s.to(tl.int32), mask=inside)


@triton.jit
def _forward_kernel(
    y_ptr,
    row_ptr,
    perm_ptr,
    gtab_ptr,
    out_ptr,
    block_ptr,
    acc_ptr,
    ends_ptr,
    mrg_ptr,
    n,
    chunks,
    eps,
    inv_eps,
    sgn,
    OP: tl.constexpr,
    REG: tl.constexpr,
    BLOCK: tl.constexpr,
    LANES: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + b * n
    blk = block_ptr + b * n
    acc_row = acc_ptr + b * n
    ends = ends_ptr + b * n
    lo = tl.load(row_ptr + 4 * b)
    hi = tl.load(row_ptr + 4 * b + 1)
    bad = tl.load(row_ptr + 4 * b + 2)
    nb = tl.load(row_ptr + 4 * b + 3)  # the row's real length
    if LANES == 0:
        _sequential_pav(y_row, blk, acc_row, ends, gtab_ptr, lo, hi, eps, inv_eps, OP, REG, BLOCK)
    else:
        _chunked_pav(
            y_row, blk, acc_row, ends, mrg_ptr + b * (2 * LANES), gtab_ptr, lo, hi, chunks, eps, inv_eps, OP, REG, LANES
        )
    tl.debug_barrier()  # the pass below reads block and ends at positions other threads wrote
    # outputs, vectorized over the sorted positions jv, in the blocks [sv, ev]; the pads [nb, n) get 0
    for j0 in range(0, n, BLOCK):
        jv = j0 + tl.arange(0, BLOCK)
        m = jv < n
        real = jv < nb
        inside = (jv >= lo) & (jv < hi)
        sv = tl.load(blk + jv, mask=inside, other=0)
        ev = tl.load(ends + sv, mask=inside, other=0)
        av = tl.load(acc_row + sv, mask=inside, other=1.0)
        yj = tl.load(y_row + jv, mask=real, other=0.0)
        ys = tl.load(y_row + sv, mask=inside, other=0.0)
        c = (ev - sv + 1).to(tl.float64)
        mid = (sv + ev).to(tl.float64) * 0.5
        jf = jv.to(tl.float64)
        if OP == 0 and REG == 0:
            v = ((yj - ys) - av / c) * inv_eps + mid + 1.0
        elif OP == 0:
            yv = tl.load(y_row + ev, mask=inside, other=0.0)
            v = tl.where(sv == ev, jf + 1.0, tl.exp((yj - yv) * inv_eps) * (c * (mid + 1.0) / av))
        elif REG == 0:
            v = av + (jf - mid) * inv_eps
        else:
            g = tl.load(gtab_ptr + (ev - sv), mask=inside, other=0.0)
            v = tl.where(sv == ev, yj, ys - tl.log(av) + g + (jf - sv.to(tl.float64)) * inv_eps)
        # soft_rank's infinite groups [0, lo) and [hi, nb): their mean rank
        low = jv < lo
        gs = tl.where(low, 0, hi)
        ge = tl.where(low, lo, nb) - 1
        v = tl.where(inside, v, (gs + ge).to(tl.float64) * 0.5 + 1.0)
        start = tl.where(inside, sv, gs)
        v = tl.where(bad != 0, float("nan"), v)
        start = tl.where((bad != 0) | ~real, jv, start)
        tl.store(blk + jv, start.to(tl.int32), mask=m)
        if OP == 0:
            dst = tl.where(real, tl.load(perm_ptr + b * n + jv, mask=real, other=0), jv)
            tl.store(out_ptr + b * n + dst, tl.where(real, v, 0.0).to(out_ptr.dtype.element_ty), mask=m)
        else:
            tl.store(out_ptr + b * n + jv, tl.where(real, sgn * v, 0.0).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _vjp_terms(g_ptr, out_ptr, x_ptr, perm_ptr, row, j, st, m, sgn, OP: tl.constexpr, REG: tl.constexpr):
    """The terms of sorted position j (block start st) in its block's sums, 0 where not m: (g, or r g for rank KL;
    1, or exp(y_st - y_j) for sort KL)."""
    e = tl.load(perm_ptr + row + j, mask=m, other=0)
    if OP == 0:
        gj = tl.load(g_ptr + row + e, mask=m, other=0.0).to(tl.float64)
        if REG == 1:
            gj = gj * tl.load(out_ptr + row + e, mask=m, other=0.0).to(tl.float64)
    else:
        gj = tl.load(g_ptr + row + j, mask=m, other=0.0).to(tl.float64)
    if OP == 1 and REG == 1:
        ys = sgn * tl.load(x_ptr + row + tl.load(perm_ptr + row + st, mask=m, other=0), mask=m, other=0.0).to(
            tl.float64
        )
        cj = tl.where(m, tl.exp(ys - sgn * tl.load(x_ptr + row + e, mask=m, other=0.0).to(tl.float64)), 0.0)
    else:
        cj = m.to(tl.float64)
    return gj, cj


@triton.jit
def _sequential_sums(
    g_ptr, out_ptr, x_ptr, perm_ptr, block_ptr, sums, row, n, sgn, OP: tl.constexpr, REG: tl.constexpr
):
    """A scalar pass in sorted order, flushing the sums at each block start."""
    s = 0
    zero = tl.full([], 0.0, tl.float64)  # (not x * 0: NaN where x[0] is infinite)
    sg = zero
    sc = zero
    for j in range(0, n):
        if tl.load(block_ptr + row + j) == j:
            if j > 0:
                tl.store(sums + 2 * s, sg)
                tl.store(sums + 2 * s + 1, sc)
            s = j
            sg = zero
            sc = zero
        gj, cj = _vjp_terms(g_ptr, out_ptr, x_ptr, perm_ptr, row, j, s, j < n, sgn, OP, REG)
        sg += gj
        sc += cj
    tl.store(sums + 2 * s, sg)
    tl.store(sums + 2 * s + 1, sc)


@triton.jit
def _chunked_sums(
    g_ptr,
    out_ptr,
    x_ptr,
    perm_ptr,
    block_ptr,
    sums,
    part,
    row,
    n,
    C,
    sgn,
    OP: tl.constexpr,
    REG: tl.constexpr,
    LANES: tl.constexpr,
):
    """The chunked sums of fastsort.h over [0, n) cut into C <= LANES chunks, one lane each: every lane sums its
    positions in order, writing the blocks that start and end in its chunk; the part of a block crossing in from
    the left (head) goes to part (2 LANES doubles), one crossing out to the right (tail) stays in the lane, which
    then adds the heads of the chunks its block covers in chunk order (fastsort_chunk_totals)."""
    k = tl.arange(0, LANES).to(tl.int64)
    L = (n + C - 1) // C
    c0 = tl.minimum(L * k, n)
    c1 = tl.minimum(c0 + L, n)
    sg = c0.to(tl.float64) * 0.0
    sc = sg
    s = c0
    head = c0 < c1  # until the chunk's first block start
    for step in range(0, L):
        j = c0 + step
        inside = j < c1
        st = tl.load(block_ptr + row + j, mask=inside, other=0).to(tl.int64)
        start = inside & (st == j)
        flush = start & (j > c0)
        tl.store(part + k, sg, mask=flush & head)
        tl.store(part + LANES + k, sc, mask=flush & head)
        tl.store(sums + 2 * s, sg, mask=flush & ~head)
        tl.store(sums + 2 * s + 1, sc, mask=flush & ~head)
        sg = tl.where(start, 0.0, sg)
        sc = tl.where(start, 0.0, sc)
        s = tl.where(start, j, s)
        head = head & ~start
        gj, cj = _vjp_terms(g_ptr, out_ptr, x_ptr, perm_ptr, row, j, st, inside, sgn, OP, REG)
        sg += gj
        sc += cj
    # the open block at the chunk's end: a head, a tail (it goes on in the next chunk) or complete
    full = c0 < c1
    more = full & (c1 < n)
    tail = more & ~head & (tl.load(block_ptr + row + c1, mask=more, other=0) == s)
    tl.store(part + k, sg, mask=head)
    tl.store(part + LANES + k, sc, mask=head)
    tl.store(sums + 2 * s, sg, mask=full & ~head & ~tail)
    tl.store(sums + 2 * s + 1, sc, mask=full & ~head & ~tail)
    tl.debug_barrier()  # the heads are read by other lanes
    c = k
    go = tail
    while tl.max(go.to(tl.int32), 0) > 0:
        c = c + 1
        cs = tl.minimum(L * c, n)
        more = go & (cs < n)
        go = more & (tl.load(block_ptr + row + cs, mask=more, other=0) == s)  # chunk c goes on with the block
        sg += tl.load(part + c, mask=go, other=0.0)
        sc += tl.load(part + LANES + c, mask=go, other=0.0)
    tl.store(sums + 2 * s, sg, mask=tail)
    tl.store(sums + 2 * s + 1, sc, mask=tail)


@triton.jit
def _backward_kernel(
    g_ptr,
    out_ptr,
    x_ptr,
    perm_ptr,
    block_ptr,
    row_ptr,
    sums_ptr,
    part_ptr,
    gx_ptr,
    n,
    chunks,
    inv_eps,
    sgn,
    OP: tl.constexpr,
    REG: tl.constexpr,
    BLOCK: tl.constexpr,
    LANES: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    row = b * n
    bad = tl.load(row_ptr + 2 * b)
    nb = tl.load(row_ptr + 2 * b + 1)  # the row's real length
    sums = sums_ptr + 2 * row  # at each block start: the block's sum of g (r g for rank KL), its size (S for sort KL)
    if LANES == 0:
        _sequential_sums(g_ptr, out_ptr, x_ptr, perm_ptr, block_ptr, sums, row, nb, sgn, OP, REG)
    else:
        _chunked_sums(
            g_ptr,
            out_ptr,
            x_ptr,
            perm_ptr,
            block_ptr,
            sums,
            part_ptr + b * (2 * LANES),
            row,
            nb,
            chunks,
            sgn,
            OP,
            REG,
            LANES,
        )
    tl.debug_barrier()  # the vector pass reads the sums written above
    for j0 in range(0, n, BLOCK):  # vectorized over the sorted positions jv (element ev, block start st)
        jv = j0 + tl.arange(0, BLOCK)
        real = jv < nb
        st = tl.load(block_ptr + row + jv, mask=real, other=0)
        ev = tl.load(perm_ptr + row + jv, mask=real, other=0)
        tot = tl.load(sums + 2 * st, mask=real, other=0.0)
        c = tl.load(sums + 2 * st + 1, mask=real, other=1.0)
        xe = tl.load(x_ptr + row + ev, mask=real, other=0.0).to(tl.float64)
        if OP == 0:
            gj = tl.load(g_ptr + row + ev, mask=real, other=0.0).to(tl.float64)
            if REG == 0:
                gx = sgn * (gj - tot / c) * inv_eps
            else:
                r = tl.load(out_ptr + row + ev, mask=real, other=0.0).to(tl.float64)
                W = c * (st.to(tl.float64) + (c - 1.0) * 0.5 + 1.0)
                gx = sgn * (r * gj - r / W * tot) * inv_eps
            gx = tl.where(tl.abs(xe) == float("inf"), 0.0, gx)  # the limit does not depend on an infinite element
        elif REG == 0:
            gx = tot / c
        else:
            y0 = sgn * tl.load(x_ptr + row + tl.load(perm_ptr + row + st, mask=real, other=0), mask=real, other=0.0).to(
                tl.float64
            )
            gx = tl.exp(y0 - sgn * xe) / c * tot
        gx = tl.where(real, tl.where(bad != 0, float("nan"), gx), 0.0)
        dst = tl.where(real, ev, jv)  # a pad's gradient is 0
        tl.store(gx_ptr + row + dst, gx.to(gx_ptr.dtype.element_ty), mask=jv < n)


# --- launchers ----------------------------------------------------------------------------------------------


def _on(device):
    """Triton launches on the current CUDA device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _block(n: int, device) -> int:
    cap = 1 << 14 if interpreted(device) else 1024  # the interpreter runs programs one after the other
    return min(cap, 1 << max(0, n - 1).bit_length())


def _lanes(n: int, chunks) -> tuple[int, int]:
    """(chunks, lanes): the chunked path with ``chunks`` chunks in a power of two of lanes, or (1, 0): the
    sequential one (``chunks`` 0)."""
    if chunks is None:
        chunks = LONG_CHUNKS if n >= LONG_ROW else 0
    return (chunks, triton.next_power_of_2(chunks)) if chunks >= 1 else (1, 0)


def _bad_rows(op: str, x: torch.Tensor, valid) -> torch.Tensor:
    """Rows whose outputs and gradients are NaN: a NaN, or (soft_sort) an infinity among the real entries."""
    hit = x.isnan() if op == "rank" else ~x.isfinite()
    return (hit if valid is None else hit & valid).any(1).to(torch.int32)


def _row_lengths(x: torch.Tensor, lengths) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(each row's real length [B] int64, the real entries [B, n] bool or None when every row is full)."""
    B, n = x.shape
    if lengths is None:
        return torch.full((B,), n, dtype=torch.int64, device=x.device), None
    return lengths, torch.arange(n, device=x.device) < lengths.unsqueeze(-1)


def _log_geometric(n: int, eps: float, device) -> torch.Tensor:
    """G(c) = log sum_{k < c} exp(-k / eps) for c = 1..n (fastsort_log_geometric), float64."""
    c = torch.arange(1, n + 1, dtype=torch.float64, device=device)
    g = (torch.expm1(-c / eps) / torch.expm1(torch.tensor(-1.0 / eps, dtype=torch.float64))).log()
    return torch.where(c <= 1, 0.0, g).contiguous()


def forward(op, x, reg, eps, descending, out, perm, block, lengths=None, chunks=None):
    """``chunks``: the chunked PAV with that many chunks (>= 1) on any row length, 0: the sequential PAV; None:
    chunked (LONG_CHUNKS) from n = LONG_ROW."""
    B, n = x.shape
    sgn = -1.0 if descending else 1.0
    nb, valid = _row_lengths(x, lengths)
    key = -x if descending else x
    if valid is not None:
        key = key.masked_fill(~valid, torch.nan)  # the pads sort last and count as neither finite nor bad
    perm.copy_(torch.sort(key, dim=-1, stable=True).indices)
    y = key.gather(1, perm).double().contiguous()
    lo = (y == -torch.inf).sum(1)
    hi = n - (y == torch.inf).sum(1) - y.isnan().sum(1)
    bad = _bad_rows(op, x, valid)
    lo, hi = torch.where(bad != 0, 0, lo), torch.where(bad != 0, 0, hi)  # no PAV in a NaN row
    rows = torch.stack([lo, hi, bad.long(), nb], 1).contiguous()
    acc = torch.empty(B, n, dtype=torch.float64, device=x.device)
    ends = torch.empty(B, n, dtype=torch.int32, device=x.device)
    gtab = _log_geometric(n, eps, x.device)
    chunks, lanes = _lanes(n, chunks)
    mrg = torch.empty(B, 2 * max(lanes, 1), dtype=torch.int64, device=x.device)  # the chunked merges' scratch
    with _on(x.device):
        _forward_kernel[(B,)](
            y,
            rows,
            perm,
            gtab,
            out,
            block,
            acc,
            ends,
            mrg,
            n,
            chunks,
            eps,
            1.0 / eps,
            sgn,
            OP=OPS[op],
            REG=reg_code(reg),
            BLOCK=_block(n, x.device),
            LANES=lanes,
        )


def backward(op, grad, out, x, perm, block, reg, eps, descending, grad_x, lengths=None, chunks=None):
    """``chunks`` as in ``forward`` (the backward's chunks cut [0, L_b), independent of the forward's)."""
    B, n = x.shape
    nb, valid = _row_lengths(x, lengths)
    rows = torch.stack([_bad_rows(op, x, valid), nb.to(torch.int32)], 1).contiguous()  # (NaN row, real length)
    sums = torch.empty(B, 2 * n, dtype=torch.float64, device=x.device)
    chunks, lanes = _lanes(n, chunks)
    part = torch.empty(B, 2 * max(lanes, 1), dtype=torch.float64, device=x.device)  # the chunks' head sums
    with _on(x.device):
        _backward_kernel[(B,)](
            grad,
            out,
            x,
            perm,
            block,
            rows,
            sums,
            part,
            grad_x,
            n,
            chunks,
            1.0 / eps,
            -1.0 if descending else 1.0,
            OP=OPS[op],
            REG=reg_code(reg),
            BLOCK=_block(n, x.device),
            LANES=lanes,
        )
