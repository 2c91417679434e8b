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

from .._triton import interpreted
from .parametrize import hash32


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


def forward(xt, a, b, coef, yt) -> None:
    """``yt [n_out, B] = c0 + c1 xa + c2 xb + c3 xa xb`` (feature-major buffers, ``coef [n_out, 4]``)."""
    n_out, B = yt.shape
    if n_out == 0 or B == 0:
        return
    BS = _sample_block(B, interpreted(xt.device))
    BJ = max(1, min(triton.next_power_of_2(n_out), 4096 // BS))
    n_sblocks = triton.cdiv(B, BS)
    _forward_kernel[(triton.cdiv(n_out, BJ) * n_sblocks,)](xt, a, b, coef, yt, B, n_out, n_sblocks, BJ=BJ, BS=BS)


def backward(xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, grad_coef) -> None:
    """``grad_coef [n_out, 4]`` and ``grad_xt [n_in, B]`` (either may be None) from ``grad_yt [n_out, B]``."""
    n_in, B = xt.shape
    n_out = a.shape[0]
    interpret = interpreted(xt.device)
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
        _input_grad_kernel[(n_in * n_sblocks,)](
            xt, a, b, coef, grad_yt, csr_start, csr_entry, grad_xt, B, n_sblocks, BS=BS
        )


# --- output activation and counter-based noise (parametrized layers; csrc/logic/logic.h, docs/math/logic.md §10)
#
# ACT: 0 none, 1 sigmoid, 2 sigmoid_st (forward 1[z > 0], backward sigmoid'(z)); NOISE: add noise_scale L(seed, i)
# before the activation, L the logistic noise of the lowbias32 hash of the flat output index i (seed_hash =
# hash32(seed), passed as the int32 of the same bits). noise_scale is a float32 argument.


@triton.jit
def _hash32(x):
    """lowbias32 on uint32 ``x`` (parametrize.hash32)."""
    x = x ^ (x >> 16)
    x = x * tl.full(x.shape, 0x7FEB352D, tl.uint32)
    x = x ^ (x >> 15)
    x = x * tl.full(x.shape, 0x846CA68B, tl.uint32)
    return x ^ (x >> 16)


@triton.jit
def _logistic_noise(seed_hash, idx, like):
    """Logistic noise at the int64 flat indices ``idx`` in ``like``'s dtype: log(bits + 1/2) - log(~bits + 1/2)."""
    sh = seed_hash.to(tl.uint32, bitcast=True)
    bits = _hash32(idx.to(tl.uint32) ^ _hash32((idx >> 32).to(tl.uint32) ^ sh))
    return tl.log(bits.to(like.dtype) + 0.5) - tl.log((~bits).to(like.dtype) + 0.5)


@triton.jit
def _act(z, ACT: tl.constexpr):
    if ACT == 1:
        z = 1 / (1 + tl.exp(-z))
    elif ACT == 2:
        z = tl.where(z > 0, 1, 0).to(z.dtype)
    return z


@triton.jit
def _act_grad(z, ACT: tl.constexpr):
    """d act / d z (the sigmoid's for both sigmoid activations)."""
    s = 1 / (1 + tl.exp(-z))
    return s * (1 - s)


@triton.jit
def _act_forward_kernel(
    xt,
    a,
    b,
    coef,
    yt,
    st,
    B,
    n_out,
    n_sblocks,
    seed_hash,
    noise_scale,
    BJ: tl.constexpr,
    BS: tl.constexpr,
    ACT: tl.constexpr,
    NOISE: tl.constexpr,
):
    """``yt = act(z)``, ``z = u + noise_scale L(seed, s n_out + j)``, and ``st = sigmoid(z)`` for sigmoid_st (ACT
    2), on the tiles of ``_forward_kernel``."""
    pid = tl.program_id(0)
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
    z = c0 + c1 * xa + (c2 + c3 * xa) * xb
    if NOISE:
        z += noise_scale * _logistic_noise(seed_hash, s[None, :].to(tl.int64) * n_out + j[:, None], z)
    off = j[:, None].to(tl.int64) * B + s[None, :]
    if ACT == 2:
        tl.store(st + off, (1 / (1 + tl.exp(-z))).to(st.dtype.element_ty), mask=m)
    tl.store(yt + off, _act(z, ACT).to(yt.dtype.element_ty), mask=m)


@triton.jit
def _sigmoid_grad_kernel(grad_yt, sig, grad_u, n, BLOCK: tl.constexpr):
    """``grad_u = grad_yt sig (1 - sig)`` elementwise (in float32 for the half types)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    sg = tl.load(sig + i, mask=m, other=0)
    if sg.dtype != tl.float64:
        sg = sg.to(tl.float32)
    g = tl.load(grad_yt + i, mask=m, other=0).to(sg.dtype)
    tl.store(grad_u + i, (g * sg * (1 - sg)).to(grad_u.dtype.element_ty), mask=m)


def _seed_hash(seed: int) -> int:
    """hash32(seed) as the int32 of the same bits (a 32-bit kernel argument for every seed)."""
    h = int(hash32(torch.tensor(seed & 0xFFFFFFFF, dtype=torch.int64)))
    return h - (1 << 32) if h >= 1 << 31 else h


def act_forward(xt, a, b, coef, act, seed, noise_scale, yt, st) -> None:
    """``yt = act(u + noise_scale L)`` and, for sigmoid_st, ``st = sigmoid(u + noise_scale L)``
    (``relaxops::logic_act_fwd``)."""
    n_out, B = yt.shape
    if n_out == 0 or B == 0:
        return
    interpret = interpreted(xt.device)
    BS = _sample_block(B, interpret)
    # on a GPU [BJ, BS] tiles of 1024 outputs, 8 per thread: the gathered inputs, z, the noise's hash and the int64
    # output offsets then stay in registers (docs/gpu.md: register spills)
    BJ = max(1, min(triton.next_power_of_2(n_out), (4096 if interpret else 1024) // BS))
    n_sblocks = triton.cdiv(B, BS)
    _act_forward_kernel[(triton.cdiv(n_out, BJ) * n_sblocks,)](
        xt, a, b, coef, yt, st if act == 2 else yt, B, n_out, n_sblocks, _seed_hash(seed), float(noise_scale),
        BJ=BJ, BS=BS, ACT=act, NOISE=seed >= 0,
    )  # fmt: skip


def act_grad(grad_yt, sig, grad_u) -> None:
    """``grad_u = grad_yt sig (1 - sig)`` from the saved sigmoid, the gradient :func:`backward` then takes."""
    n = grad_u.numel()
    if n == 0:
        return
    BLOCK = 1024
    _sigmoid_grad_kernel[(triton.cdiv(n, BLOCK),)](grad_yt, sig, grad_u, n, BLOCK=BLOCK)


# --- tree convolutions (LogicConv2d; math, node order and layouts in csrc/logic/conv.h) ------------------------
#
# * forward: one program per (b, k, block of BP output positions): the L leaves of the block's positions are
#   gathered into a [BP, L] tile (zero padding by the load mask), then the tree is reduced level by level: the
#   tile [BP, 2m] is split into its A (even) and B (odd) columns, 3 FMAs give the m nodes of the next level.
# * backward: the same programs; from the root down, the values of the current level's children are recomputed
#   from the leaf tile (levels below are cheaper than storing them), the node gradients are summed over the
#   block's positions into one row of per-block partial sums (fixed order), and the children's gradients are
#   interleaved into the tile of the level below; the leaf gradients go to a workspace [B, C_out, L, Ho Wo].
#   The coefficient gradient is the sum of the partial rows in order (one program per block of columns), the
#   input gradient a gather over each channel's CSR list (one program per (b, c, block of pixels)): no atomics.
# Depth at most TRITON_MAX_CONV_DEPTH (the tile holds all L leaves of a position).


@triton.jit
def _conv_leaf_tile(x, leaves_k, b, pos, mp, C_in, H, W, Wo, sh, sw, ph, pw, L: tl.constexpr):
    """Leaf values [BP, L] of tree k at positions ``pos`` (0 outside the input or for masked positions)."""
    lidx = tl.arange(0, L)
    c = tl.load(leaves_k + 3 * lidx)
    dy = tl.load(leaves_k + 3 * lidx + 1)
    dx = tl.load(leaves_k + 3 * lidx + 2)
    oy, ox = pos // Wo, pos % Wo
    iy = (oy * sh - ph)[:, None] + dy[None, :]
    ix = (ox * sw - pw)[:, None] + dx[None, :]
    m = mp[:, None] & (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    off = ((b * C_in + c[None, :]) * H + iy) * W + ix
    return tl.load(x + off, mask=m, other=0)


@triton.jit
def _conv_level_z(v, coef_k, base, seed_hash, noise_scale, L: tl.constexpr, t: tl.constexpr, NOISE: tl.constexpr):
    """``(z, a, b)`` of level ``t`` from the (activated) values ``v`` of level t - 1: the pre-activations [BP, m]
    (noise index ``base + node``, ``base`` [BP] = flat position times L - 1) and the children A and B."""
    BP: tl.constexpr = v.shape[0]
    m: tl.constexpr = L >> t
    n = (L - (L >> (t - 1))) + tl.arange(0, m)
    a, bb = tl.split(tl.reshape(v, (BP, m, 2)))
    c0 = tl.load(coef_k + 4 * n)[None, :]
    c1 = tl.load(coef_k + 4 * n + 1)[None, :]
    c2 = tl.load(coef_k + 4 * n + 2)[None, :]
    c3 = tl.load(coef_k + 4 * n + 3)[None, :]
    z = c0 + c1 * a + (c2 + c3 * a) * bb
    if NOISE:
        z += noise_scale * _logistic_noise(seed_hash, base[:, None] + n[None, :], z)
    return z, a, bb


@triton.jit
def _conv_tree_up(
    v, coef_k, base, seed_hash, noise_scale, L: tl.constexpr, LEVELS: tl.constexpr, ACT: tl.constexpr,
    NOISE: tl.constexpr,
):  # fmt: skip
    """Node values of level ``LEVELS`` [BP, L >> LEVELS] from the leaf values ``v`` [BP, L], every node's output
    ``act(z)`` (ACT 0, no noise: the plain bilinear tree)."""
    for t in tl.static_range(1, LEVELS + 1):
        z, a, bb = _conv_level_z(v, coef_k, base, seed_hash, noise_scale, L, t, NOISE)
        v = _act(z, ACT)
    return v


@triton.jit
def _conv_forward_kernel(
    x,
    leaves,
    coef,
    y,
    C_in,
    H,
    W,
    C_out,
    Wo,
    P,
    sh,
    sw,
    ph,
    pw,
    n_pblocks,
    seed_hash,
    noise_scale,
    L: tl.constexpr,
    DEPTH: tl.constexpr,
    BP: tl.constexpr,
    ACT: tl.constexpr,
    NOISE: tl.constexpr,
):
    pid = tl.program_id(0)
    bk = (pid // n_pblocks).to(tl.int64)
    b, k = bk // C_out, bk % C_out
    pos = (pid % n_pblocks) * BP + tl.arange(0, BP)
    mp = pos < P
    coef_k = coef + k * (4 * (L - 1))
    base = (bk * P + pos) * (L - 1)
    v = _conv_leaf_tile(x, leaves + k * (3 * L), b, pos, mp, C_in, H, W, Wo, sh, sw, ph, pw, L)
    v = _conv_tree_up(v.to(coef.dtype.element_ty), coef_k, base, seed_hash, noise_scale, L, DEPTH, ACT, NOISE)
    tl.store(y + bk * P + pos, tl.reshape(v, (BP,)).to(y.dtype.element_ty), mask=mp)


@triton.jit
def _conv_level_down(
    g, v0, coef_k, row, mp, base, seed_hash, noise_scale, L: tl.constexpr, t: tl.constexpr, ACT: tl.constexpr,
    NOISE: tl.constexpr, NEED_W: tl.constexpr,
):  # fmt: skip
    """From ``g`` [BP, L >> t], the gradient of the level-``t`` outputs: multiplied by ``act'(z)`` (z recomputed
    from the leaves; ACT 0: by 1), the coefficient gradients summed over the positions into ``row`` (NEED_W), and
    the gradient of level t - 1 [BP, L >> (t - 1)] (children A, B interleaved), which is returned."""
    BP: tl.constexpr = g.shape[0]
    m: tl.constexpr = L >> t
    n = (L - (L >> (t - 1))) + tl.arange(0, m)
    v = _conv_tree_up(v0, coef_k, base, seed_hash, noise_scale, L, t - 1, ACT, NOISE)
    z, a, bb = _conv_level_z(v, coef_k, base, seed_hash, noise_scale, L, t, NOISE)
    if ACT != 0:
        g = g * _act_grad(z, ACT)
    if NEED_W:
        gm = tl.where(mp[:, None], g, 0)
        ga_ = gm * a
        tl.store(row + 4 * n, tl.sum(gm, 0))
        tl.store(row + 4 * n + 1, tl.sum(tl.where(mp[:, None], ga_, 0), 0))
        tl.store(row + 4 * n + 2, tl.sum(tl.where(mp[:, None], gm * bb, 0), 0))
        tl.store(row + 4 * n + 3, tl.sum(tl.where(mp[:, None], ga_ * bb, 0), 0))
    c1 = tl.load(coef_k + 4 * n + 1)[None, :]
    c2 = tl.load(coef_k + 4 * n + 2)[None, :]
    c3 = tl.load(coef_k + 4 * n + 3)[None, :]
    return tl.reshape(tl.join(g * (c1 + c3 * bb), g * (c2 + c3 * a)), (BP, 2 * m))


@triton.jit
def _conv_backward_tree_kernel(
    x,
    leaves,
    coef,
    grad_y,
    partial,
    leaf_grad,
    C_in,
    H,
    W,
    C_out,
    Wo,
    P,
    sh,
    sw,
    ph,
    pw,
    n_pblocks,
    seed_hash,
    noise_scale,
    L: tl.constexpr,
    DEPTH: tl.constexpr,
    BP: tl.constexpr,
    NEED_X: tl.constexpr,
    NEED_W: tl.constexpr,
    ACT: tl.constexpr,
    NOISE: tl.constexpr,
):
    pid = tl.program_id(0)
    pb = pid % n_pblocks
    bk = (pid // n_pblocks).to(tl.int64)
    b, k = bk // C_out, bk % C_out
    pos = pb * BP + tl.arange(0, BP)
    mp = pos < P
    acc_ty = coef.dtype.element_ty
    coef_k = coef + k * (4 * (L - 1))
    base = (bk * P + pos) * (L - 1)
    v0 = _conv_leaf_tile(x, leaves + k * (3 * L), b, pos, mp, C_in, H, W, Wo, sh, sw, ph, pw, L).to(acc_ty)
    g = tl.load(grad_y + bk * P + pos, mask=mp, other=0).to(acc_ty)[:, None]
    row = partial + ((b * n_pblocks + pb) * C_out + k) * (4 * (L - 1))
    for s in tl.static_range(DEPTH):
        g = _conv_level_down(g, v0, coef_k, row, mp, base, seed_hash, noise_scale, L, DEPTH - s, ACT, NOISE, NEED_W)
    if NEED_X:
        lidx = tl.arange(0, L)
        dst = leaf_grad + (bk * L + lidx[None, :]) * P + pos[:, None]
        tl.store(dst, g, mask=mp[:, None])


@triton.jit
def _conv_coef_reduce_kernel(partial, grad_coef, R, N, BR: tl.constexpr, BC: tl.constexpr):
    j = tl.program_id(0) * BC + tl.arange(0, BC)
    mj = j < N
    acc = tl.zeros((BR, BC), dtype=grad_coef.dtype.element_ty)
    for start in range(0, R, BR):
        r = start + tl.arange(0, BR)
        m = (r < R)[:, None] & mj[None, :]
        acc += tl.load(partial + r[:, None].to(tl.int64) * N + j[None, :], mask=m, other=0)
    tl.store(grad_coef + j, tl.sum(acc, 0), mask=mj)


@triton.jit
def _conv_input_grad_kernel(
    leaves,
    csr_start,
    csr_entry,
    leaf_grad,
    grad_x,
    C_in,
    H,
    W,
    C_out,
    Ho,
    Wo,
    sh,
    sw,
    ph,
    pw,
    n_qblocks,
    L: tl.constexpr,
    BQ: tl.constexpr,
):
    pid = tl.program_id(0)
    bc = (pid // n_qblocks).to(tl.int64)
    b, c = bc // C_in, bc % C_in
    q = (pid % n_qblocks) * BQ + tl.arange(0, BQ)
    mq = q < H * W
    iy, ix = q // W, q % W
    P = Ho * Wo
    lg_b = leaf_grad + b * (C_out * L) * P
    acc = tl.zeros((BQ,), dtype=leaf_grad.dtype.element_ty)
    for i in range(tl.load(csr_start + c), tl.load(csr_start + c + 1)):
        e = tl.load(csr_entry + i)
        ny = iy + ph - tl.load(leaves + 3 * e + 1)
        nx = ix + pw - tl.load(leaves + 3 * e + 2)
        ok = mq & (ny >= 0) & (nx >= 0) & (ny % sh == 0) & (nx % sw == 0)
        oy, ox = ny // sh, nx // sw
        ok = ok & (oy < Ho) & (ox < Wo)
        acc += tl.load(lg_b + e * P + oy * Wo + ox, mask=ok, other=0)
    tl.store(grad_x + bc * (H * W) + q, acc.to(grad_x.dtype.element_ty), mask=mq)


def _conv_sizes(x, leaves, geometry):
    B, C_in, H, W = x.shape
    C_out, L = leaves.shape[0], leaves.shape[1]
    kh, kw, sh, sw, ph, pw = geometry
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    return B, C_in, H, W, C_out, L, Ho, Wo


def _conv_position_block(P: int, L: int, interpret: bool) -> int:
    """BP: on a GPU leaf tiles [BP, L] of 1024 leaves (8 per thread; one position for deeper trees), so that the
    tile, the recomputed levels and the noise stay in registers (docs/gpu.md: register spills)."""
    return max(1, min(triton.next_power_of_2(P), (16384 if interpret else 1024) // L))


def conv_act_forward(x, leaves, coef, geometry, act, seed, noise_scale, y) -> None:
    """:func:`conv_forward` with every node's output ``act(z)`` (``relaxops::logic_conv_act_fwd``)."""
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_sizes(x, leaves, geometry)
    P = Ho * Wo
    if B * C_out == 0:
        return
    _, _, sh, sw, ph, pw = geometry
    BP = _conv_position_block(P, L, interpreted(x.device))
    n_pblocks = triton.cdiv(P, BP)
    _conv_forward_kernel[(B * C_out * n_pblocks,)](
        x, leaves, coef, y, C_in, H, W, C_out, Wo, P, sh, sw, ph, pw, n_pblocks, _seed_hash(seed),
        float(noise_scale), L=L, DEPTH=L.bit_length() - 1, BP=BP, ACT=act, NOISE=seed >= 0,
    )  # fmt: skip


def conv_act_backward(x, leaves, coef, geometry, act, seed, noise_scale, grad_y, csr_start, csr_entry, grad_x,
                      grad_coef) -> None:  # fmt: skip
    """:func:`conv_backward` with every node's output ``act(z)``."""
    _conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef, (act, seed, noise_scale))


def conv_forward(x, leaves, coef, geometry, y) -> None:
    """``y [B, C_out, Ho, Wo]`` of the trees (``coef [C_out, L - 1, 4]``, ``leaves [C_out, L, 3]``)."""
    conv_act_forward(x, leaves, coef, geometry, 0, -1, 0.0, y)


def conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef) -> None:
    """``grad_x [B, C_in, H, W]`` and ``grad_coef [C_out, L - 1, 4]`` (either may be None) from ``grad_y``."""
    _conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef, (0, -1, 0.0))


def _conv_backward(x, leaves, coef, geometry, grad_y, csr_start, csr_entry, grad_x, grad_coef, act) -> None:
    """The backward's launches; ``act = (act, seed, noise_scale)`` of the nodes (``(0, -1, 0.0)``: plain)."""
    B, C_in, H, W, C_out, L, Ho, Wo = _conv_sizes(x, leaves, geometry)
    P = Ho * Wo
    _, _, sh, sw, ph, pw = geometry
    interpret = interpreted(x.device)
    BP = _conv_position_block(P, L, interpret)
    n_pblocks = triton.cdiv(P, BP)
    need_x, need_w = grad_x is not None, grad_coef is not None
    acc = coef.dtype
    leaf_grad = torch.empty(B * C_out * L * P if need_x else 1, dtype=acc, device=x.device)
    R, N = B * n_pblocks, C_out * (L - 1) * 4
    partial = torch.empty(R * N if need_w and R * N > 0 else 1, dtype=acc, device=x.device)
    if B * C_out > 0:
        _conv_backward_tree_kernel[(B * C_out * n_pblocks,)](
            x, leaves, coef, grad_y, partial, leaf_grad, C_in, H, W, C_out, Wo, P, sh, sw, ph, pw, n_pblocks,
            _seed_hash(act[1]), float(act[2]), L=L, DEPTH=L.bit_length() - 1, BP=BP, NEED_X=need_x, NEED_W=need_w,
            ACT=act[0], NOISE=act[1] >= 0,
        )  # fmt: skip
    if need_w:
        if R == 0 or N == 0:
            grad_coef.zero_()
        else:
            BC = min(triton.next_power_of_2(N), 256)
            BR = max(1, min(triton.next_power_of_2(R), (4096 if interpret else 2048) // BC))
            _conv_coef_reduce_kernel[(triton.cdiv(N, BC),)](partial, grad_coef, R, N, BR=BR, BC=BC)
    if need_x and B > 0:
        HW = H * W
        BQ = min(4096 if interpret else 256, triton.next_power_of_2(HW))
        n_qblocks = triton.cdiv(HW, BQ)
        _conv_input_grad_kernel[(B * C_in * n_qblocks,)](
            leaves,
            csr_start,
            csr_entry,
            leaf_grad,
            grad_x,
            C_in,
            H,
            W,
            C_out,
            Ho,
            Wo,
            sh,
            sw,
            ph,
            pw,
            n_qblocks,
            L=L,
            BQ=BQ,
        )


# --- lookup-table layers (LogicLUTLayer; math and layouts in csrc/logic/lut.h) --------------------------------
#
# * forward: one program per (neuron, BS samples): the table broadcast to a [BS, 2^K] tile is halved K times (the
#   column pairs (2t, 2t + 1) differ in the last remaining input: one lerp each), from the last input to the first.
# * backward: one program per neuron, looping over the batch in chunks of BS: act'(z) = s (1 - s) from the sigmoid
#   s the forward saved, the K input derivatives (the tile halved down to input i, the difference of
#   its column pairs, then halved over the inputs before i) written per slot to a workspace [K n_out, B], and the
#   basis tile (doubling) accumulated into [BS, 2^K] sums reduced once at the end (a fixed order: deterministic);
#   then the input gradient is a gather over each input's CSR list (entries K j + i) of the workspace rows, one
#   program per (input, BS samples).


@triton.jit
def _lut_x(xt, idx, j, n_out, B, s, ms, i: tl.constexpr, acc_ty: tl.constexpr):
    """Input ``i`` of neuron ``j`` at samples ``s`` [BS]."""
    c = tl.load(idx + i * n_out + j).to(tl.int64)
    return tl.load(xt + c * B + s, mask=ms, other=0).to(acc_ty)


@triton.jit
def _lut_level(v, x, i: tl.constexpr):
    """One halving: ``v`` [BS, 2^(i+1)] whose column pairs differ in input i -> [BS, 2^i]."""
    BS: tl.constexpr = v.shape[0]
    a, b = tl.split(tl.reshape(v, (BS, 1 << i, 2)))
    return a + x[:, None] * (b - a)


@triton.jit
def _lut_halve_to(v, xt, idx, j, n_out, B, s, ms, K: tl.constexpr, STOP: tl.constexpr):
    """Halve ``v`` [BS, 2^K] over the inputs K-1 down to STOP: [BS, 2^STOP]."""
    for ll in tl.static_range(K - STOP):
        v = _lut_level(v, _lut_x(xt, idx, j, n_out, B, s, ms, K - 1 - ll, v.dtype), K - 1 - ll)
    return v


@triton.jit
def _lut_z(q, xt, idx, j, n_out, B, s, ms, seed_hash, noise_scale, K: tl.constexpr, NOISE: tl.constexpr):
    """z = u (+ noise_scale L) at samples ``s`` [BS]; ``q`` [2^K] the neuron's table."""
    BS: tl.constexpr = s.shape[0]
    v = _lut_halve_to(tl.broadcast_to(q[None, :], (BS, 1 << K)), xt, idx, j, n_out, B, s, ms, K, 0)
    z = tl.reshape(v, (BS,))
    if NOISE:
        z += noise_scale * _logistic_noise(seed_hash, s.to(tl.int64) * n_out + j, z)
    return z


@triton.jit
def _lut_partial(q, xt, idx, j, n_out, B, s, ms, K: tl.constexpr, i: tl.constexpr):
    """du/dx_i at samples ``s`` [BS]."""
    BS: tl.constexpr = s.shape[0]
    v = _lut_halve_to(tl.broadcast_to(q[None, :], (BS, 1 << K)), xt, idx, j, n_out, B, s, ms, K, i + 1)
    a, b = tl.split(tl.reshape(v, (BS, 1 << i, 2)))
    d = _lut_halve_to(b - a, xt, idx, j, n_out, B, s, ms, i, 0)
    return tl.reshape(d, (BS,))


@triton.jit
def _lut_basis(xt, idx, j, n_out, B, s, ms, K: tl.constexpr, acc_ty: tl.constexpr):
    """The basis tile [BS, 2^K] by doubling (first input = most significant bit)."""
    BS: tl.constexpr = s.shape[0]
    w = tl.full((BS, 1), 1.0, acc_ty)
    for i in tl.static_range(K):
        x = _lut_x(xt, idx, j, n_out, B, s, ms, i, acc_ty)[:, None]
        w = tl.reshape(tl.join(w * (1 - x), w * x), (BS, 2 << i))
    return w


@triton.jit
def _lut_forward_kernel(
    xt, idx, table, yt, st, B, n_out, n_sblocks, seed_hash, noise_scale,
    K: tl.constexpr, ACT: tl.constexpr, NOISE: tl.constexpr, BS: tl.constexpr,
):  # fmt: skip
    """``yt = act(z)``, and ``st = sigmoid(z)`` for sigmoid_st (ACT 2), saved for the backward."""
    pid = tl.program_id(0)
    j = pid // n_sblocks
    s = (pid % n_sblocks) * BS + tl.arange(0, BS)
    ms = s < B
    q = tl.load(table + j.to(tl.int64) * (1 << K) + tl.arange(0, 1 << K))
    z = _lut_z(q, xt, idx, j, n_out, B, s, ms, seed_hash, noise_scale, K, NOISE)
    off = j.to(tl.int64) * B + s
    if ACT == 1:
        z = tl.sigmoid(z)
    elif ACT == 2:
        tl.store(st + off, tl.sigmoid(z).to(st.dtype.element_ty), mask=ms)
        z = tl.where(z > 0, 1.0, 0.0).to(z.dtype)
    tl.store(yt + off, z.to(yt.dtype.element_ty), mask=ms)


@triton.jit
def _lut_backward_kernel(
    xt, idx, table, grad_yt, sig, slot_grad, grad_table, B, n_out,
    K: tl.constexpr, ACT: tl.constexpr, NEED_X: tl.constexpr, NEED_T: tl.constexpr, BS: tl.constexpr,
):  # fmt: skip
    j = tl.program_id(0)
    M: tl.constexpr = 1 << K
    q = tl.load(table + j.to(tl.int64) * M + tl.arange(0, M))
    acc_ty: tl.constexpr = q.dtype
    acc = tl.zeros((BS, M), dtype=acc_ty)
    for start in range(0, B, BS):
        s = start + tl.arange(0, BS)
        ms = s < B
        gz = tl.load(grad_yt + j.to(tl.int64) * B + s, mask=ms, other=0).to(acc_ty)
        if ACT != 0:  # sigmoid' from the sigmoid the forward saved
            sg = tl.load(sig + j.to(tl.int64) * B + s, mask=ms, other=0).to(acc_ty)
            gz = gz * sg * (1 - sg)
        if NEED_X:
            for i in tl.static_range(K):
                d = _lut_partial(q, xt, idx, j, n_out, B, s, ms, K, i)
                tl.store(slot_grad + (j.to(tl.int64) * K + i) * B + s, gz * d, mask=ms)
        if NEED_T:
            acc += gz[:, None] * _lut_basis(xt, idx, j, n_out, B, s, ms, K, acc_ty)
    if NEED_T:
        tl.store(grad_table + j.to(tl.int64) * M + tl.arange(0, M), tl.sum(acc, 0))


@triton.jit
def _lut_gather_kernel(slot_grad, csr_start, csr_entry, grad_xt, B, n_sblocks, BS: tl.constexpr):
    pid = tl.program_id(0)
    c = pid // n_sblocks
    s = (pid % n_sblocks) * BS + tl.arange(0, BS)
    ms = s < B
    acc = tl.zeros((BS,), dtype=slot_grad.dtype.element_ty)
    for e in range(tl.load(csr_start + c), tl.load(csr_start + c + 1)):
        row = tl.load(csr_entry + e)
        acc += tl.load(slot_grad + row * B + s, mask=ms, other=0)
    tl.store(grad_xt + c.to(tl.int64) * B + s, acc.to(grad_xt.dtype.element_ty), mask=ms)


def _lut_block(B: int, interpret: bool) -> int:
    return min(1024 if interpret else 128, triton.next_power_of_2(max(B, 1)))


def lut_forward(xt, idx, table, act, seed, noise_scale, yt, st) -> None:
    """``yt [n_out, B]`` of the lookup-table neurons and, for sigmoid_st, ``st`` (csrc/logic/lut.h)."""
    n_out, B = yt.shape
    if n_out == 0 or B == 0:
        return
    BS = _lut_block(B, interpreted(xt.device))
    n_sblocks = triton.cdiv(B, BS)
    _lut_forward_kernel[(n_out * n_sblocks,)](
        xt, idx, table, yt, st if act == 2 else yt, B, n_out, n_sblocks, _seed_hash(seed), float(noise_scale),
        K=idx.shape[0], ACT=act, NOISE=seed >= 0, BS=BS,
    )  # fmt: skip


def lut_backward(xt, idx, table, act, grad_yt, sig, csr_start, csr_entry, grad_xt, grad_table) -> None:
    """``grad_xt [n_in, B]`` and ``grad_table [n_out, 2^k]`` (either may be None) from ``grad_yt [n_out, B]`` and
    the saved sigmoid ``sig`` (``relaxops::logic_lut_bwd``)."""
    n_in, B = xt.shape
    k, n_out = idx.shape
    if B == 0 or n_out == 0:
        for t in (grad_xt, grad_table):
            if t is not None:
                t.zero_()
        return
    interpret = interpreted(xt.device)
    BS = _lut_block(B, interpret)
    BT = BS if interpret else min(BS, max(16, 2048 >> k))  # GPU: the [BT, 2^k] tiles fit the registers
    slot_grad = xt.new_empty(k * n_out, B) if grad_xt is not None else xt.new_empty(1)
    _lut_backward_kernel[(n_out,)](
        xt, idx, table, grad_yt, sig if act != 0 else grad_yt, slot_grad,
        grad_table if grad_table is not None else table, B, n_out, K=k, ACT=act, NEED_X=grad_xt is not None,
        NEED_T=grad_table is not None, BS=BT,
    )  # fmt: skip
    if grad_xt is not None:
        n_sblocks = triton.cdiv(B, BS)
        _lut_gather_kernel[(n_in * n_sblocks,)](slot_grad, csr_start, csr_entry, grad_xt, B, n_sblocks, BS=BS)
