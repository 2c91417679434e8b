"""Triton kernels of the NeuralSort / SoftSort ops: the formulas and layouts of ``csrc/baselines/baselines.h``.

The launchers sort the rows (``_rows.exact_order``: the real entries stably, pads last) and pass the permutation,
the row lengths ``L [B]`` and the kept columns per row ``k_b = min(ks, L) [B]`` (int64); every kernel works on
the first ``L`` entries of its row only (loops bounded by ``L``), column ``j`` at ascending position ``j + shift``
(``shift = 0`` if ``LEFT``, else ``L - k``), kept for ``j`` in ``[L - k_b - shift, L - shift)``; dropped
columns, pad rows and pad gradients are written 0. The kernels are
* column kernels, one program per (row, block of ``BK`` columns) looping over the elements in blocks of
  ``BC``: the softmax (the column maximum is known in closed form: a sum pass, then the write pass) and,
  backward, ``dot_j = sum_c X G`` (for SoftSort also the sorted-value adjoint ``gt_j``);
* element kernels, one program per (row, block of ``BC`` elements) looping over the columns: the direct
  gradient (and NeuralSort's ``beta = dl/db``);
* row kernels, one program per row, chunked prefix sums with a carry: NeuralSort's ``D_q = 2 S_q + t_q``
  (float64) and the adjoint of ``b`` (prefix sums of beta in sorted order, the tie group of each position by
  binary search in the sorted values); SoftSort's scatter of ``gt``.

Scalars ``1 / tau`` and ``pow`` come in a small tensor of the data dtype (kernel float arguments are float32).
Runs on CUDA tensors and, with ``TRITON_INTERPRET=1``, on CPU tensors (blocks are then large, since the
interpreter runs programs one after the other).
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton
import triton.language as tl

from .. import _checks, _rows
from .._triton import interpreted

# SoftSort exponent kinds (kPowOne, kPowTwo, kPowGeneral in baselines.h).
_POW_ONE, _POW_TWO, _POW_GENERAL = 0, 1, 2


def _device_fn(fn):
    """@triton.jit for a device helper; a plain function under the interpreter (nested jit calls re-patch
    triton.language on every call there)."""
    jitted = triton.jit(fn)
    return fn if type(jitted).__name__ == "InterpretedFunction" else jitted


@_device_fn
def _phi(d, p, POW: tl.constexpr):
    """|d|^p, 0 at d = 0."""
    a = tl.abs(d)
    if POW == 0:
        out = a
    elif POW == 1:
        out = d * d
    else:
        pos = a != 0  # NaN stays NaN
        out = tl.where(pos, tl.exp(p * tl.log(tl.where(pos, a, 1))), 0)
    return out


@_device_fn
def _dphi(d, p, POW: tl.constexpr):
    """d/dd |d|^p = p |d|^(p-1) sign(d), 0 at d = 0."""
    sgn = tl.where(d > 0, 1.0, tl.where(d < 0, -1.0, 0.0)).to(d.dtype)
    if POW == 0:
        out = sgn
    elif POW == 1:
        out = 2 * d
    else:
        a = tl.abs(d)
        pos = a != 0
        out = sgn * p * tl.exp((p - 1) * tl.log(tl.where(pos, a, 1)))
    return out


@_device_fn
def _is_inf(v):
    return tl.abs(v) == float("inf")


@_device_fn
def _gap(t, x):
    """softsort_gap: t - x, 0 for equal values (also equal infinities)."""
    return tl.where(t == x, 0, t - x)


@_device_fn
def _columns(len_ptr, kb_ptr, b, j, k, LEFT: tl.constexpr):
    """(L, kept [BK], r [BK]): the row's length, which columns j are kept, their ascending positions."""
    L = tl.load(len_ptr + b)
    if LEFT:
        shift = L * 0
    else:
        shift = L - k
    lo = L - tl.load(kb_ptr + b) - shift
    return L, (j >= lo) & (j < L - shift) & (j < k), j + shift


@_device_fn
def _logits(x_ptr, perm_ptr, D_ptr, b, i, im, r, t, Dr, c, inv_tau, p, n, SOFTSORT: tl.constexpr, POW: tl.constexpr):
    """Logits [BC, BK] relative to the column maxima (<= 0) of elements / sorted positions i (mask im) in
    the columns of positions r; t: the columns' sorted values. NeuralSort iterates sorted positions q = i:
    neuralsort_delta of baselines.h (Dr: the columns' centred D, c: the row's centre)."""
    if SOFTSORT:
        xc = tl.load(x_ptr + b * n + i, mask=im, other=0)
        z = -_phi(_gap(t[None, :], xc[:, None]), p, POW) * inv_tau
    else:
        e = tl.load(perm_ptr + b * n + i, mask=im, other=0)
        tq = tl.load(x_ptr + b * n + e, mask=im, other=0)
        Dq = tl.load(D_ptr + b * n + i, mask=im, other=0)
        steps = (r[None, :] - i[:, None]).to(tq.dtype)
        d = 2 * steps * (tq - c)[:, None] + (Dq[:, None] - Dr[None, :])
        z = tl.where(d < 0, d, 0) * inv_tau
        z = tl.where(_is_inf(tq)[:, None], float("-inf"), z)
        z = tl.where(_is_inf(t)[None, :], tl.where(tq[:, None] == t[None, :], 0, float("-inf")), z)
        z = tl.where((tq != tq)[:, None] | (t != t)[None, :], tq[:, None] + t[None, :], z)
    return z


@triton.jit
def _neuralsort_prefix_kernel(x_ptr, perm_ptr, D_ptr, centre_ptr, len_ptr, n, BLOCK: tl.constexpr):
    # D_q = 2 S_q + t_q - c in sorted order over the finite values of the L real ones, S the exclusive prefix
    # sum of t_q - c, t_q = x[perm[q]], c the row's centre (float64); D of the pad positions is not written
    b = tl.program_id(0).to(tl.int64)
    L = tl.load(len_ptr + b)
    c = tl.load(centre_ptr + b).to(tl.float64)
    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float64), axis=0)
    for base in range(0, L, BLOCK):
        q = base + tl.arange(0, BLOCK)
        m = q < L
        e = tl.load(perm_ptr + b * n + q, mask=m, other=0)
        t = tl.load(x_ptr + b * n + e, mask=m, other=0).to(tl.float64)
        t = tl.where((t == t) & ~_is_inf(t), t - c, 0)
        S = carry + tl.cumsum(t, axis=0) - t
        tl.store(D_ptr + b * n + q, (2 * S + t).to(D_ptr.dtype.element_ty), mask=m)
        carry += tl.sum(t, axis=0)


@triton.jit
def _softmax_kernel(
    x_ptr,
    perm_ptr,
    D_ptr,
    centre_ptr,
    len_ptr,
    kb_ptr,
    X_ptr,
    prm_ptr,
    n,
    k,
    SOFTSORT: tl.constexpr,
    POW: tl.constexpr,
    LEFT: tl.constexpr,
    BC: tl.constexpr,
    BK: tl.constexpr,
):
    # X[row(i), j] = exp(z) / sum_i exp(z) over the L real elements, z the logits relative to the column
    # maximum (<= 0, 0 at the element sorted at r_j). Pass 1 sums, pass 2 writes, pass 3 writes the zeros
    # (pad rows, dropped columns).
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BK + tl.arange(0, BK)
    jm = j < k
    L, kept, r = _columns(len_ptr, kb_ptr, b, j, k, LEFT)
    inv_tau = tl.load(prm_ptr)
    p = tl.load(prm_ptr + 1)
    dtype = X_ptr.dtype.element_ty
    t = tl.load(x_ptr + b * n + tl.load(perm_ptr + b * n + r, mask=kept, other=0), mask=kept, other=0)
    c = tl.load(centre_ptr + b)  # NeuralSort's D and centre (SoftSort: unused, D_ptr = centre_ptr = x_ptr)
    Dr = tl.load(D_ptr + b * n + r, mask=kept, other=0)
    s = tl.zeros([BK], dtype=dtype)
    for base in range(0, L, BC):
        i = base + tl.arange(0, BC)
        im = i < L
        z = _logits(x_ptr, perm_ptr, D_ptr, b, i, im, r, t, Dr, c, inv_tau, p, n, SOFTSORT, POW)
        z = tl.where(im[:, None] & kept[None, :], z, 0)  # padding lanes: exp(0), discarded
        s += tl.sum(tl.where(im[:, None], tl.exp(z), 0), axis=0)
    inv = 1 / tl.where(kept, s, 1)  # dropped columns: no sum
    for base in range(0, L, BC):
        i = base + tl.arange(0, BC)
        im = i < L
        z = _logits(x_ptr, perm_ptr, D_ptr, b, i, im, r, t, Dr, c, inv_tau, p, n, SOFTSORT, POW)
        z = tl.where(im[:, None] & kept[None, :], z, 0)
        if SOFTSORT:
            row = i.to(tl.int64)
        else:
            row = tl.load(perm_ptr + b * n + i, mask=im, other=0)
        out = tl.exp(z) * inv[None, :]
        tl.store(X_ptr + (b * n + row[:, None]) * k + j[None, :], out, mask=im[:, None] & kept[None, :])
    for base in range(0, n, BC):  # element rows c: zero where c is a pad or the column is dropped
        cr = base + tl.arange(0, BC)
        zm = (cr < n)[:, None] & jm[None, :] & ((cr >= L)[:, None] | ~kept[None, :])
        tl.store(X_ptr + (b * n + cr[:, None]) * k + j[None, :], tl.zeros([BC, BK], dtype=dtype), mask=zm)


@triton.jit
def _column_adjoint_kernel(
    X_ptr,
    G_ptr,
    x_ptr,
    perm_ptr,
    dot_ptr,
    gt_ptr,
    prm_ptr,
    len_ptr,
    kb_ptr,
    n,
    k,
    SOFTSORT: tl.constexpr,
    POW: tl.constexpr,
    LEFT: tl.constexpr,
    BC: tl.constexpr,
    BK: tl.constexpr,
):
    # over the L real rows c: dot_j = sum_c X G; SoftSort: gt_j = -sum_c X (G - dot_j) phi'(t_j - x_c) / tau;
    # both 0 for a dropped column
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BK + tl.arange(0, BK)
    jm = j < k
    L, kept, r = _columns(len_ptr, kb_ptr, b, j, k, LEFT)
    dtype = X_ptr.dtype.element_ty
    acc = tl.zeros([BK], dtype=dtype)
    for base in range(0, L, BC):
        i = base + tl.arange(0, BC)
        msk = (i < L)[:, None] & kept[None, :]
        off = (b * n + i[:, None]) * k + j[None, :]
        acc += tl.sum(tl.load(X_ptr + off, mask=msk, other=0) * tl.load(G_ptr + off, mask=msk, other=0), axis=0)
    tl.store(dot_ptr + b * k + j, acc, mask=jm)
    if SOFTSORT:
        inv_tau = tl.load(prm_ptr)
        p = tl.load(prm_ptr + 1)
        t = tl.load(x_ptr + b * n + tl.load(perm_ptr + b * n + r, mask=kept, other=0), mask=kept, other=0)
        g = tl.zeros([BK], dtype=dtype)
        for base in range(0, L, BC):
            i = base + tl.arange(0, BC)
            im = i < L
            msk = im[:, None] & kept[None, :]
            off = (b * n + i[:, None]) * k + j[None, :]
            dz = tl.load(X_ptr + off, mask=msk, other=0) * (tl.load(G_ptr + off, mask=msk, other=0) - acc[None, :])
            xc = tl.load(x_ptr + b * n + i, mask=im, other=0)
            g += tl.sum(tl.where(dz == 0, 0, dz * _dphi(_gap(t[None, :], xc[:, None]), p, POW)), axis=0)
        tl.store(gt_ptr + b * k + j, -g * inv_tau, mask=jm)


@triton.jit
def _element_kernel(
    X_ptr,
    G_ptr,
    x_ptr,
    perm_ptr,
    dot_ptr,
    prm_ptr,
    gx_ptr,
    beta_ptr,
    len_ptr,
    kb_ptr,
    n,
    k,
    SOFTSORT: tl.constexpr,
    POW: tl.constexpr,
    LEFT: tl.constexpr,
    BC: tl.constexpr,
    BK: tl.constexpr,
):
    # over the kept columns, dz = X (G - dot_j); NeuralSort: grad_x_c = sum_j dz (2 r_j + 1 - L) / tau,
    # beta_c = -sum_j dz / tau; SoftSort: grad_x_c = sum_j dz phi'(t_j - x_c) / tau; both 0 for an infinite x_c
    # and for a pad c >= L
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    L = tl.load(len_ptr + b)
    cm = c < n
    real = c < L
    inv_tau = tl.load(prm_ptr)
    p = tl.load(prm_ptr + 1)
    dtype = X_ptr.dtype.element_ty
    xc = tl.load(x_ptr + b * n + c, mask=real, other=0)
    acc = tl.zeros([BC], dtype=dtype)
    s = tl.zeros([BC], dtype=dtype)
    for jb in range(0, k, BK):
        j = jb + tl.arange(0, BK)
        _, kept, r = _columns(len_ptr, kb_ptr, b, j, k, LEFT)
        msk = real[:, None] & kept[None, :]
        off = (b * n + c[:, None]) * k + j[None, :]
        dt = tl.load(dot_ptr + b * k + j, mask=kept, other=0)
        dz = tl.load(X_ptr + off, mask=msk, other=0) * (tl.load(G_ptr + off, mask=msk, other=0) - dt[None, :])
        if SOFTSORT:
            t = tl.load(x_ptr + b * n + tl.load(perm_ptr + b * n + r, mask=kept, other=0), mask=kept, other=0)
            acc += tl.sum(tl.where(dz == 0, 0, dz * _dphi(_gap(t[None, :], xc[:, None]), p, POW)), axis=1)
        else:
            coef = (2 * r + 1 - L).to(dtype)
            acc += tl.sum(dz * coef[None, :], axis=1)
            s += tl.sum(dz, axis=1)
    zero = _is_inf(xc) | ~real
    tl.store(gx_ptr + b * n + c, tl.where(zero, 0, acc * inv_tau), mask=cm)
    if not SOFTSORT:
        tl.store(beta_ptr + b * n + c, tl.where(zero, 0, -s * inv_tau), mask=cm)


@_device_fn
def _search(t_ptr, v, n, steps, UPPER: tl.constexpr):
    """Per lane, the first index p in [0, n) with t[p] > v (UPPER) or t[p] >= v, t ascending (n if none)."""
    lo = tl.zeros(v.shape, dtype=tl.int32)
    hi = lo + n
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        tm = tl.load(t_ptr + mid, mask=active, other=0)
        if UPPER:
            right = active & (tm <= v)
        else:
            right = active & (tm < v)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    return lo


@triton.jit
def _b_adjoint_kernel(x_ptr, perm_ptr, beta_ptr, gx_ptr, t_ptr, P_ptr, len_ptr, n, steps, BLOCK: tl.constexpr):
    # over the L real sorted positions: grad_x[perm[q]] += beta (lo - (L - hi)) + P_lo - (P_L - P_hi) for q's
    # tie group [lo, hi), P the exclusive prefix sums of beta in sorted order (float64). Pass 1 stores the
    # sorted values t and P in scratch rows; pass 2 finds lo, hi by binary search in t (interpreter-friendly:
    # no custom scans).
    b = tl.program_id(0).to(tl.int64)
    L = tl.load(len_ptr + b).to(tl.int32)  # as n (i32) in the binary searches
    t_row = t_ptr + b * n
    P_row = P_ptr + b * (n + 1)
    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float64), axis=0)
    for base in range(0, L, BLOCK):
        q = base + tl.arange(0, BLOCK)
        m = q < L
        e = tl.load(perm_ptr + b * n + q, mask=m, other=0)
        be = tl.load(beta_ptr + b * n + e, mask=m, other=0).to(tl.float64)
        tl.store(t_row + q, tl.load(x_ptr + b * n + e, mask=m, other=0), mask=m)
        tl.store(P_row + q, carry + tl.cumsum(be, axis=0) - be, mask=m)
        carry += tl.sum(be, axis=0)
    tl.store(P_row + L, carry)
    tl.debug_barrier()  # pass 2 reads t and P written by other lanes
    for base in range(0, L, BLOCK):
        q = base + tl.arange(0, BLOCK)
        m = q < L
        e = tl.load(perm_ptr + b * n + q, mask=m, other=0)
        v = tl.load(t_row + q, mask=m, other=0)
        lo = tl.minimum(_search(t_row, v, L, steps, False), q)
        hi = tl.maximum(_search(t_row, v, L, steps, True), q + 1)
        be = tl.load(beta_ptr + b * n + e, mask=m, other=0).to(tl.float64)
        P_lo = tl.load(P_row + lo, mask=m, other=0)
        P_hi = tl.load(P_row + hi, mask=m, other=0)
        g = be * (lo - (L - hi)).to(tl.float64) + P_lo - (carry - P_hi)
        old = tl.load(gx_ptr + b * n + e, mask=m, other=0)
        tl.store(gx_ptr + b * n + e, old + tl.where(_is_inf(v), 0, g.to(old.dtype)), mask=m)


@triton.jit
def _scatter_kernel(perm_ptr, x_ptr, gt_ptr, gx_ptr, len_ptr, kb_ptr, n, k, LEFT: tl.constexpr, BLOCK: tl.constexpr):
    # grad_x[perm[r_j]] += gt_j for the kept columns unless that element is infinite (distinct elements: no
    # collisions)
    b = tl.program_id(0).to(tl.int64)
    for jb in range(0, k, BLOCK):
        j = jb + tl.arange(0, BLOCK)
        _, jm, r = _columns(len_ptr, kb_ptr, b, j, k, LEFT)
        e = tl.load(perm_ptr + b * n + r, mask=jm, other=0)
        old = tl.load(gx_ptr + b * n + e, mask=jm, other=0)
        gt = tl.load(gt_ptr + b * k + j, mask=jm, other=0)
        xe = tl.load(x_ptr + b * n + e, mask=jm, other=0)
        tl.store(gx_ptr + b * n + e, old + tl.where(_is_inf(xe), 0, gt), mask=jm)


# --- launchers ----------------------------------------------------------------------------------------------


def _on(device):
    """Triton launches on the current CUDA device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _pow2(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


def _tiles(n: int, k: int, device):
    """(BC, BK, row BLOCK): [BC, BK] tiles of the column/element kernels and the row kernels' chunk."""
    interp = interpreted(device)
    budget, row_max = ((1 << 16), (1 << 16)) if interp else (4096, 1024)
    bk = min(_pow2(k), 128 if interp else 32)
    bc = max(1, min(_pow2(n), budget // bk))
    return bc, bk, min(_pow2(n), row_max)


def _element_block(n: int, bk: int, device) -> int:
    """BC of the element kernel: on a GPU a quarter of the column kernels' tile, 8 entries of [BC, BK] per thread
    (its loads of X and G, dz and the products then stay in registers; docs/gpu.md: register spills)."""
    return max(1, min(_pow2(n), (1 << 16 if interpreted(device) else 1024) // bk))


def _pow_kind(pow: float) -> int:
    return _POW_ONE if pow == 1.0 else (_POW_TWO if pow == 2.0 else _POW_GENERAL)


def _params(tau: float, pow: float, like: torch.Tensor) -> torch.Tensor:
    """``[1 / tau, pow]``; 1 / tau clamped to the dtype's largest value (``inverse_tau`` in baselines.h)."""
    return _checks.to_device([min(1.0 / tau, torch.finfo(like.dtype).max), pow], like.dtype, like.device)


def _centres(x, perm, L):
    """Per row, the median finite value of the L real ones (0 if none): NeuralSort's centre, as the CPU and CUDA
    kernels."""
    t = x.gather(1, perm)  # sorted: -inf, finite, +inf, NaN, then the pads
    real = torch.arange(x.shape[1], device=x.device) < L[:, None]
    lo, hi = ((t == -math.inf) & real).sum(1), ((t < math.inf) & real).sum(1)
    mid = torch.div(lo + hi, 2, rounding_mode="floor").clamp(max=x.shape[1] - 1)
    return torch.where(lo < hi, t.gather(1, mid[:, None]).squeeze(1), 0).contiguous()


def _row_layout(x, k, lengths, ks):
    """``(L, k_b)`` int64 ``[B]``: the row lengths (n where ``lengths`` is None) and kept columns min(ks, L)."""
    B, n = x.shape
    L = lengths if lengths is not None else torch.full((B,), n, dtype=torch.int64, device=x.device)
    kb = torch.minimum(ks if ks is not None else torch.full_like(L, k), L).contiguous()
    return L, kb


def neuralsort_forward(x, tau, X, perm, lengths, ks, left):
    B, n = x.shape
    k = X.shape[2]
    perm.copy_(_rows.exact_order(x, lengths))
    if B == 0:
        return
    bc, bk, blk = _tiles(n, k, x.device)
    L, kb = _row_layout(x, k, lengths, ks)
    D = torch.empty_like(x)
    centre = _centres(x, perm, L)
    prm = _params(tau, 1.0, x)
    with _on(x.device):
        _neuralsort_prefix_kernel[(B,)](x, perm, D, centre, L, n, BLOCK=blk)
        _softmax_kernel[(B, triton.cdiv(k, bk))](
            x, perm, D, centre, L, kb, X, prm, n, k, SOFTSORT=False, POW=_POW_ONE, LEFT=left, BC=bc, BK=bk
        )


def neuralsort_backward(grad_X, X, x, perm, tau, lengths, ks, left, grad_x):
    B, n = x.shape
    k = X.shape[2]
    if B == 0:
        return
    bc, bk, blk = _tiles(n, k, x.device)
    L, kb = _row_layout(x, k, lengths, ks)
    dot = x.new_empty(B, k)
    beta = torch.empty_like(x)
    prm = _params(tau, 1.0, x)
    with _on(x.device):
        _column_adjoint_kernel[(B, triton.cdiv(k, bk))](
            X, grad_X, x, perm, dot, dot, prm, L, kb, n, k, SOFTSORT=False, POW=_POW_ONE, LEFT=left, BC=bc, BK=bk
        )
        ec = _element_block(n, bk, x.device)
        _element_kernel[(B, triton.cdiv(n, ec))](
            X,
            grad_X,
            x,
            perm,
            dot,
            prm,
            grad_x,
            beta,
            L,
            kb,
            n,
            k,
            SOFTSORT=False,
            POW=_POW_ONE,
            LEFT=left,
            BC=ec,
            BK=bk,
        )
        t_sorted = torch.empty_like(x)
        P = torch.empty(B, n + 1, dtype=torch.float64, device=x.device)
        _b_adjoint_kernel[(B,)](x, perm, beta, grad_x, t_sorted, P, L, n, n.bit_length(), BLOCK=blk)


def softsort_forward(x, tau, pow, X, perm, lengths, ks, left):
    B, n = x.shape
    k = X.shape[2]
    perm.copy_(_rows.exact_order(x, lengths))
    if B == 0:
        return
    bc, bk, _ = _tiles(n, k, x.device)
    L, kb = _row_layout(x, k, lengths, ks)
    with _on(x.device):
        _softmax_kernel[(B, triton.cdiv(k, bk))](
            x,
            perm,
            x,
            x,
            L,
            kb,
            X,
            _params(tau, pow, x),
            n,
            k,
            SOFTSORT=True,
            POW=_pow_kind(pow),
            LEFT=left,
            BC=bc,
            BK=bk,
        )


def softsort_backward(grad_X, X, x, perm, tau, pow, lengths, ks, left, grad_x):
    B, n = x.shape
    k = X.shape[2]
    if B == 0:
        return
    bc, bk, blk = _tiles(n, k, x.device)
    L, kb = _row_layout(x, k, lengths, ks)
    dot = x.new_empty(B, k)
    gt = x.new_empty(B, k)
    prm = _params(tau, pow, x)
    kind = _pow_kind(pow)
    with _on(x.device):
        _column_adjoint_kernel[(B, triton.cdiv(k, bk))](
            X, grad_X, x, perm, dot, gt, prm, L, kb, n, k, SOFTSORT=True, POW=kind, LEFT=left, BC=bc, BK=bk
        )
        ec = _element_block(n, bk, x.device)
        _element_kernel[(B, triton.cdiv(n, ec))](
            X, grad_X, x, perm, dot, prm, grad_x, grad_x, L, kb, n, k, SOFTSORT=True, POW=kind, LEFT=left, BC=ec, BK=bk
        )
        _scatter_kernel[(B,)](perm, x, gt, grad_x, L, kb, n, k, LEFT=left, BLOCK=min(_pow2(k), blk))
