"""Triton kernels of the fast soft sort / soft rank ops: the formulas and layouts of ``csrc/fastsort/fastsort.h``.

The launchers sort the rows of ``sgn x`` with ``torch.sort(stable=True)`` and pass, per row, the sorted values
``y`` (float64), the finite range ``[lo, hi)`` and whether the row is NaN (a NaN, or an infinity for soft_sort).
One program per row:

* forward: the in-place PAV of fastsort.h as a scalar loop (``block[e]`` = start of the block ending at ``e``,
  ``acc[s]`` = the statistic of the block starting at ``s``), a scalar walk over the blocks that writes ``block``
  for every position and the block ends, then a vectorized pass that forms the outputs;
* backward: a scalar pass of block sums in sorted order (deterministic), then a vectorized pass of the
  vector-Jacobian products.

Statistics, outputs and sums in float64 (as the C++ kernels). Runs on CUDA tensors and, with
``TRITON_INTERPRET=1``, on CPU tensors.

Long rows keep the scalar PAV loop here; the CUDA kernels cut them into chunks (the chunked PAV of fastsort.h).
That algorithm is expressible in a Triton program (a vector of chunk states, one lane per chunk; each PAV step's
cascade and each round's boundary walk as a ``while`` on ``tl.max`` of the lanes still merging, with masked gathers
and scatters of ``block``/``acc`` in global memory and a ``tl.debug_barrier()`` between dependent steps), but it is
not ported yet: on the GPU it is unmeasured against the CUDA version, and under the interpreter every masked
step costs a Python-level vector operation.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .ops import OPS, reg_code


@triton.jit
def _forward_kernel(y_ptr, row_ptr, perm_ptr, gtab_ptr, out_ptr, block_ptr, acc_ptr, ends_ptr, n, eps, inv_eps, sgn,
                    OP: tl.constexpr, REG: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + b * n
    blk = block_ptr + b * n
    acc_row = acc_ptr + b * n
    ends = ends_ptr + b * n
    lo = tl.load(row_ptr + 3 * b)
    hi = tl.load(row_ptr + 3 * b + 1)
    bad = tl.load(row_ptr + 3 * b + 2)
    # PAV over [lo, hi): push e, merge with the previous block while the pair violates the order
    for e in range(lo, hi):
        ye = tl.load(y_row + e)
        if OP == 0 and REG == 0:
            a = ye * 0.0
        elif OP == 1 and REG == 0:
            a = ye
        else:
            a = ye * 0.0 + 1.0
        t = e
        go = t > lo
        while go:
            p = tl.load(blk + t - 1).to(tl.int64)
            ap = tl.load(acc_row + p)
            cP = (t - p).to(tl.float64)
            cT = (e - t + 1).to(tl.float64)
            if OP == 0 and REG == 0:  # mean_T - mean_P <= eps (cP + cT) / 2, times cP cT; sums relative to y_s
                d = tl.load(y_row + t) - tl.load(y_row + p)
                hit = d * cP * cT + a * cP - ap * cT <= eps * (cP + cT) * cP * cT * 0.5
                merged = ap + a + cT * d
            elif OP == 1 and REG == 0:  # mean_T - mean_P >= (cP + cT) / (2 eps); means
                hit = a - ap >= (cP + cT) * 0.5 * inv_eps
                merged = ap * (cP / (cP + cT)) + a * (cT / (cP + cT))
            elif OP == 0:  # exp((y_e - y_{t-1}) / eps) S_T W_P <= W_T S_P; S relative to the block max (exp capped
                # at e^700: the right side is below n^3, so a capped E never merges either)
                WP = cP * ((p + t - 1).to(tl.float64) * 0.5 + 1.0)
                WT = cT * ((t + e).to(tl.float64) * 0.5 + 1.0)
                E = tl.exp(tl.minimum((ye - tl.load(y_row + t - 1)) * inv_eps, 700.0))
                hit = E * a * WP <= WT * ap
                merged = a + ap / E
            else:  # cP / eps + G(cP) - G(cT) <= (y_t - y_p) + log(S_P / S_T); S relative to the block min
                d = tl.load(y_row + t) - tl.load(y_row + p)
                lhs = cP * inv_eps + tl.load(gtab_ptr + (t - p - 1)) - tl.load(gtab_ptr + (e - t))
                hit = lhs <= d + tl.log(ap / a)
                merged = ap + tl.exp(-d) * a
            if hit:
                a = merged
                t = p
                go = t > lo
            else:
                go = False
        tl.store(acc_row + t, a)
        tl.store(blk + e, t)
    # walk the blocks from the end: block[j] = s over [s, e], ends[s] = e
    e = hi - 1
    while e >= lo:
        s = tl.load(blk + e).to(tl.int64)
        tl.store(ends + s, e)
        for j0 in range(s, e + 1, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            tl.store(blk + j, s + j * 0, mask=j <= e)
        e = s - 1
    # outputs, vectorized over the sorted positions jv, in the blocks [sv, ev]
    for j0 in range(0, n, BLOCK):
        jv = j0 + tl.arange(0, BLOCK)
        m = jv < n
        inside = (jv >= lo) & (jv < hi) & m
        sv = tl.load(blk + jv, mask=inside, other=0)
        ev = tl.load(ends + sv, mask=inside, other=0)
        av = tl.load(acc_row + sv, mask=inside, other=1.0)
        yj = tl.load(y_row + jv, mask=m, other=0.0)
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
        # soft_rank's infinite groups [0, lo) and [hi, n): their mean rank
        low = jv < lo
        gs = tl.where(low, 0, hi)
        ge = tl.where(low, lo, n) - 1
        v = tl.where(inside, v, (gs + ge).to(tl.float64) * 0.5 + 1.0)
        start = tl.where(inside, sv, gs)
        v = tl.where(bad != 0, float("nan"), v)
        start = tl.where(bad != 0, jv, start)
        tl.store(blk + jv, start.to(tl.int32), mask=m)
        if OP == 0:
            dst = tl.load(perm_ptr + b * n + jv, mask=m, other=0)
            tl.store(out_ptr + b * n + dst, v.to(out_ptr.dtype.element_ty), mask=m)
        else:
            tl.store(out_ptr + b * n + jv, (sgn * v).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _backward_kernel(g_ptr, out_ptr, x_ptr, perm_ptr, block_ptr, bad_ptr, sums_ptr, gx_ptr, n, inv_eps, sgn,
                     OP: tl.constexpr, REG: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    row = b * n
    sums = sums_ptr + 2 * row  # at each block start: the block's sum of g (r g for rank KL), its size (S for sort KL)
    s = 0
    zero = tl.load(x_ptr + row).to(tl.float64) * 0.0
    sg = zero
    sc = zero
    ys = zero
    for j in range(0, n):  # scalar, in sorted order: deterministic sums, flushed at each block start
        if tl.load(block_ptr + row + j) == j:
            if j > 0:
                tl.store(sums + 2 * s, sg)
                tl.store(sums + 2 * s + 1, sc)
            s = j
            sg = zero
            sc = zero
            ys = sgn * tl.load(x_ptr + row + tl.load(perm_ptr + row + j)).to(tl.float64)
        e = tl.load(perm_ptr + row + j)
        if OP == 0:
            gj = tl.load(g_ptr + row + e).to(tl.float64)
            if REG == 1:
                gj = gj * tl.load(out_ptr + row + e).to(tl.float64)
        else:
            gj = tl.load(g_ptr + row + j).to(tl.float64)
        if OP == 1 and REG == 1:
            sc += tl.exp(ys - sgn * tl.load(x_ptr + row + e).to(tl.float64))
        else:
            sc += 1.0
        sg += gj
    tl.store(sums + 2 * s, sg)
    tl.store(sums + 2 * s + 1, sc)
    tl.debug_barrier()  # the vector pass reads the sums written above
    bad = tl.load(bad_ptr + b)
    for j0 in range(0, n, BLOCK):  # vectorized over the sorted positions jv (element ev, block start st)
        jv = j0 + tl.arange(0, BLOCK)
        m = jv < n
        st = tl.load(block_ptr + row + jv, mask=m, other=0)
        ev = tl.load(perm_ptr + row + jv, mask=m, other=0)
        tot = tl.load(sums + 2 * st, mask=m, other=0.0)
        c = tl.load(sums + 2 * st + 1, mask=m, other=1.0)
        xe = tl.load(x_ptr + row + ev, mask=m, other=0.0).to(tl.float64)
        if OP == 0:
            gj = tl.load(g_ptr + row + ev, mask=m, other=0.0).to(tl.float64)
            if REG == 0:
                gx = sgn * (gj - tot / c) * inv_eps
            else:
                r = tl.load(out_ptr + row + ev, mask=m, other=0.0).to(tl.float64)
                W = c * (st.to(tl.float64) + (c - 1.0) * 0.5 + 1.0)
                gx = sgn * (r * gj - r / W * tot) * inv_eps
            gx = tl.where(tl.abs(xe) == float("inf"), 0.0, gx)  # the limit does not depend on an infinite element
        elif REG == 0:
            gx = tot / c
        else:
            y0 = sgn * tl.load(x_ptr + row + tl.load(perm_ptr + row + st, mask=m, other=0), mask=m,
                               other=0.0).to(tl.float64)
            gx = tl.exp(y0 - sgn * xe) / c * tot
        gx = tl.where(bad != 0, float("nan"), gx)
        tl.store(gx_ptr + row + ev, gx.to(gx_ptr.dtype.element_ty), mask=m)


# --- launchers ----------------------------------------------------------------------------------------------


def _on(device):
    """Triton launches on the current CUDA device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _block(n: int, device) -> int:
    cap = 1 << 14 if device.type == "cpu" else 1024  # the interpreter runs programs one after the other
    return min(cap, 1 << max(0, n - 1).bit_length())


def _bad_rows(op: str, x: torch.Tensor) -> torch.Tensor:
    """Rows whose outputs and gradients are NaN: a NaN, or (soft_sort) an infinity."""
    return (x.isnan() if op == "rank" else ~x.isfinite()).any(1).to(torch.int32)


def _log_geometric(n: int, eps: float, device) -> torch.Tensor:
    """G(c) = log sum_{k < c} exp(-k / eps) for c = 1..n (fastsort_log_geometric), float64."""
    c = torch.arange(1, n + 1, dtype=torch.float64, device=device)
    g = (torch.expm1(-c / eps) / torch.expm1(torch.tensor(-1.0 / eps, dtype=torch.float64))).log()
    return torch.where(c <= 1, 0.0, g).contiguous()


def forward(op, x, reg, eps, descending, out, perm, block):
    B, n = x.shape
    sgn = -1.0 if descending else 1.0
    xs = -x if descending else x
    perm.copy_(torch.sort(xs, dim=-1, stable=True).indices)
    y = xs.gather(1, perm).double().contiguous()
    lo = (y == -torch.inf).sum(1)
    hi = n - (y == torch.inf).sum(1) - y.isnan().sum(1)
    bad = _bad_rows(op, x)
    lo, hi = torch.where(bad != 0, 0, lo), torch.where(bad != 0, 0, hi)  # no PAV in a NaN row
    rows = torch.stack([lo, hi, bad.long()], 1).contiguous()
    acc = torch.empty(B, n, dtype=torch.float64, device=x.device)
    ends = torch.empty(B, n, dtype=torch.int32, device=x.device)
    gtab = _log_geometric(n, eps, x.device)
    with _on(x.device):
        _forward_kernel[(B,)](y, rows, perm, gtab, out, block, acc, ends, n, eps, 1.0 / eps, sgn, OP=OPS[op],
                              REG=reg_code(reg), BLOCK=_block(n, x.device))


def backward(op, grad, out, x, perm, block, reg, eps, descending, grad_x):
    B, n = x.shape
    sums = torch.empty(B, 2 * n, dtype=torch.float64, device=x.device)
    with _on(x.device):
        _backward_kernel[(B,)](grad, out, x, perm, block, _bad_rows(op, x), sums, grad_x, n, 1.0 / eps,
                               -1.0 if descending else 1.0, OP=OPS[op], REG=reg_code(reg), BLOCK=_block(n, x.device))
