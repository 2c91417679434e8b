"""Pure-PyTorch reference of the logic family: the test oracle and the fallback without compiled kernels.

Written for clarity and exact in float64 (docs/math/logic.md §1, §2 and §4). Never changed to match a kernel.
"""

from __future__ import annotations

import torch

from .gates import GATE_NAMES, coef_matrix, truth_matrix
from .parametrize import logistic_noise

# --- relaxed layers --------------------------------------------------------------------------------------


def coefficients(probs: torch.Tensor) -> torch.Tensor:
    """``[n_out, 16]`` gate probabilities -> ``[n_out, 4]`` coefficients ``p^T M`` (docs/math/logic.md §1.4)."""
    return probs @ coef_matrix(probs.dtype, probs.device)


def logic_layer(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """``y[..., j] = c0 + c1 xa + c2 xb + c3 xa xb`` with ``xa = x[..., a[j]]``, ``xb = x[..., b[j]]``;
    ``x [..., n_in]``, ``coef [n_out, 4]`` -> ``[..., n_out]`` in x's dtype, computed in the wider of x's and
    coef's dtypes (float16/bfloat16 data accumulate in float32, as in the kernels). Autograd gives the exact
    gradient for self-connected neurons (``a[j] == b[j]``).

    Evaluated as ``c0 + c1 xa + (c2 + c3 xa) xb``, the kernels' grouping, so that for infinite inputs the
    outputs and gradients are the same NaN or +-inf as theirs (the grouping ``c2 xb + c3 xa xb`` gives NaN where
    the kernels' gives the limit +-inf, and the other way round)."""
    dtype = torch.promote_types(x.dtype, coef.dtype)
    xa, xb, c = x[..., a].to(dtype), x[..., b].to(dtype), coef.to(dtype)
    return (c[:, 0] + c[:, 1] * xa + (c[:, 2] + c[:, 3] * xa) * xb).to(x.dtype)


def activation(u: torch.Tensor, act: str, seed: int = -1, noise_scale: float = 0.0) -> torch.Tensor:
    """``act(u + noise_scale L)`` (docs/math/logic.md §10) on outputs ``u`` whose row-major flat index is the noise
    index (``L = parametrize.logistic_noise(seed, index)``; ``seed < 0``: no noise). ``act``: ``"none"``,
    ``"sigmoid"`` or ``"sigmoid_st"`` (forward ``1[z > 0]``, gradient ``sigmoid'(z)``, straight through)."""
    z = u
    if seed >= 0:
        index = torch.arange(u.numel(), device=u.device).reshape(u.shape)
        z = u + noise_scale * logistic_noise(seed, index, torch.float64).to(u.dtype)
    if act == "none":
        return z
    s = torch.sigmoid(z)
    if act == "sigmoid":
        return s
    return ((z > 0).to(s.dtype) - s).detach() + s


def logic_layer_act(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, coef: torch.Tensor, act: str, seed: int, noise_scale: float
) -> torch.Tensor:
    """``act(u + noise_scale L)`` of :func:`logic_layer`'s ``u`` for ``x [B, n_in]``, noise index ``b n_out + j``."""
    dtype = torch.promote_types(x.dtype, coef.dtype)
    return activation(logic_layer(x.to(dtype), a, b, coef.to(dtype)), act, seed, noise_scale).to(x.dtype)


def gate_values(xa: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
    """The 16 relaxed gates evaluated literally (docs/math/logic.md §1.1): ``[..., 16]``."""
    one = torch.ones_like(xa)
    ab = xa * xb
    return torch.stack([
        0 * xa, ab, xa - ab, xa, xb - ab, xb, xa + xb - 2 * ab, xa + xb - ab,
        one - (xa + xb - ab), one - (xa + xb - 2 * ab), one - xb, one - xb + ab, one - xa, one - xa + ab,
        one - ab, one,
    ], dim=-1)  # fmt: skip


def logic_layer_16(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """The 16-term expectation ``sum_i p_i f_i(xa, xb)`` (docs/math/logic.md §1.3), the definition the 4-coefficient
    form is tested against."""
    return (gate_values(x[..., a], x[..., b]) * probs.to(x.dtype)).sum(-1)


def group_sum(x: torch.Tensor, k: int, tau: float, beta=0.0) -> torch.Tensor:
    """``x [..., n]`` -> ``[..., k]``: sums of ``k`` contiguous blocks of ``n / k`` outputs, divided by ``tau``,
    plus the offset ``beta`` (a number or a tensor ``[k]``; docs/math/logic.md §12)."""
    return x.reshape(*x.shape[:-1], k, x.shape[-1] // k).sum(-1) / tau + beta


# --- learnable connections (docs/math/logic.md §12) ------------------------------------------------------


def learnable_connections(
    x: torch.Tensor,
    weights: torch.Tensor,
    candidates: torch.Tensor | None,
    tau: float,
    noise: torch.Tensor | None,
    mode: str,
) -> torch.Tensor:
    """Training-mode gathered slots ``[..., k n]`` (slot ``(s, j)`` at ``s n + j``) of ``x [..., in_dim]``, logits
    ``weights [C, k, n]``, ``candidates [C, k, n]`` input indices (None: candidate ``c`` is input ``c``).

    ``xc[..., c, s, j]`` is candidate ``c`` of slot ``(s, j)``, ``z = weights + noise``, ``p = softmax(z / tau)`` over
    ``c``. ``"soft"``: ``sum_c p xc``, differentiated exactly by autograd. ``"straight_through"``: the value of
    ``xc`` at ``argmax_c z``, written as a surrogate whose autograd gradient is the estimator: the value plus the
    zero-valued terms ``S - S.detach()`` with ``S = sum_c p.detach() xc`` (input gradient ``p_c G``) and ``T -
    T.detach()`` with ``T = sum_c weights (2 xc.detach() - 1)`` (logit gradient ``(2 x_c - 1) G``)."""
    C, k, n = weights.shape
    if candidates is None:
        candidates = torch.arange(C, device=x.device)[:, None, None].expand(C, k, n)
    xc = x[..., candidates]  # [..., C, k, n]
    z = weights if noise is None else weights + noise
    p = torch.softmax(z / tau, 0)
    if mode == "soft":
        y = (p * xc).sum(-3)
    else:
        hard = xc.detach().gather(-3, z.argmax(0).expand(*xc.shape[:-3], 1, k, n)).squeeze(-3)
        s = (p.detach() * xc).sum(-3)
        t = (weights * (2 * xc.detach() - 1)).sum(-3)
        y = hard + (s - s.detach()) + (t - t.detach())
    return y.reshape(*x.shape[:-1], k * n)


# --- bit-packed inference (docs/math/logic.md §4) ---------------------------------------------------------------------

_WORD = 64


def pack(x: torch.Tensor) -> torch.Tensor:
    """Boolean ``[B, D]`` -> int64 words ``[D, ceil(B / 64)]``: bit ``s % 64`` of word ``s // 64`` of row ``d``
    is ``x[s, d]``; padding bits 0."""
    B, D = x.shape
    W = -(-B // _WORD)
    bits = torch.zeros(W * _WORD, D, dtype=torch.int64)
    bits[:B] = x.to(torch.int64).cpu()
    shifts = torch.arange(_WORD, dtype=torch.int64)
    words = (bits.reshape(W, _WORD, D) << shifts[None, :, None]).sum(1)  # int64 wrap-around = two's complement
    return words.t().contiguous().to(x.device)


def unpack(words: torch.Tensor, B: int) -> torch.Tensor:
    """int64 words ``[D, W]`` -> Boolean ``[B, D]`` (padding bits dropped)."""
    shifts = torch.arange(_WORD, dtype=torch.int64, device=words.device)
    bits = (words[:, :, None] >> shifts) & 1  # [D, W, 64]
    return bits.reshape(words.shape[0], -1)[:, :B].t().to(torch.bool)


def gate_word(op: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Gate ``op`` on integer words, bitwise (docs/math/logic.md §1.1)."""
    name = GATE_NAMES[op]
    return {
        "zero": lambda: torch.zeros_like(a), "and": lambda: a & b, "not_implies": lambda: a & ~b,
        "a": lambda: a.clone(), "not_implied_by": lambda: ~a & b, "b": lambda: b.clone(), "xor": lambda: a ^ b,
        "or": lambda: a | b, "not_or": lambda: ~(a | b), "not_xor": lambda: ~(a ^ b), "not_b": lambda: ~b,
        "implied_by": lambda: a | ~b, "not_a": lambda: ~a, "implies": lambda: ~a | b,
        "not_and": lambda: ~(a & b), "one": lambda: ~torch.zeros_like(a),
    }[name]()  # fmt: skip


def packed_layer(words: torch.Tensor, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
    """One discretized layer on words ``[n_in, W]`` -> ``[n_out, W]``, from the truth tables:
    ``out = T00 ~A~B | T01 ~A B | T10 A~B | T11 A B`` with each ``T`` an all-zeros or all-ones mask."""
    A, B = words[a], words[b]
    t = truth_matrix(torch.int64, words.device)[op]  # [n_out, 4] in {0, 1}
    m = [-t[:, i : i + 1] for i in range(4)]  # 0 -> 0, 1 -> all ones
    return (m[0] & ~A & ~B) | (m[1] & ~A & B) | (m[2] & A & ~B) | (m[3] & A & B)


def group_count(words: torch.Tensor, B: int, k: int) -> torch.Tensor:
    """Packed GroupSum: per-sample counts of ones in ``k`` contiguous groups, int32 ``[B, k]`` (not divided by
    tau; padding samples excluded)."""
    bits = unpack(words, B).to(torch.int32)  # [B, D]
    return bits.reshape(B, k, words.shape[0] // k).sum(-1, dtype=torch.int32)


# --- tree convolutions (LogicConv2d) ---------------------------------------------------------------------


def conv_leaf_values(x: torch.Tensor, leaves: torch.Tensor, kernel_size, stride, padding) -> torch.Tensor:
    """The leaf values ``[B, C_out, L, Ho, Wo]`` of the trees: leaf ``(c, dy, dx)`` at output ``(oy, ox)`` reads
    ``x[b, c, oy sh - ph + dy, ox sw - pw + dx]``, zero outside ``x`` (zero padding)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    B, C, H, W = x.shape
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    xp = torch.nn.functional.pad(x, (pw, pw, ph, ph))
    c, dy, dx = leaves[..., 0], leaves[..., 1], leaves[..., 2]  # [C_out, L]
    rows = dy[..., None] + sh * torch.arange(Ho, device=x.device)  # [C_out, L, Ho]
    cols = dx[..., None] + sw * torch.arange(Wo, device=x.device)  # [C_out, L, Wo]
    return xp[:, c[..., None, None], rows[..., :, None], cols[..., None, :]]


def logic_conv2d(
    x: torch.Tensor, leaves: torch.Tensor, coef: torch.Tensor, kernel_size, stride, padding
) -> torch.Tensor:
    """Tree convolution: ``x [B, C_in, H, W]``, ``leaves [C_out, L, 3]``, node coefficients ``coef [C_out, L - 1,
    4]`` -> ``[B, C_out, Ho, Wo]``. The tree is evaluated level by level: the first ``L / 2`` nodes combine
    leaves ``(2i, 2i + 1)`` (A, B), the next ``L / 4`` nodes the pairs of those, ..., the last node is the root;
    each node ``c0 + c1 a + (c2 + c3 a) b`` (docs/math/logic.md §1.4). Computed in the wider of x's and coef's
    dtypes."""
    return logic_conv2d_act(x, leaves, coef, kernel_size, stride, padding, "none", -1, 0.0)


def logic_conv2d_act(
    x: torch.Tensor, leaves: torch.Tensor, coef: torch.Tensor, kernel_size, stride, padding, act: str, seed: int,
    noise_scale: float,
) -> torch.Tensor:  # fmt: skip
    """:func:`logic_conv2d` with every node's output ``act(u + noise_scale L)`` (:func:`activation`), the noise
    index of node ``n`` at ``(b, k, oy, ox)`` being ``((((b C_out + k) Ho + oy) Wo + ox) (L - 1) + n)``."""
    dtype = torch.promote_types(x.dtype, coef.dtype)
    v = conv_leaf_values(x.to(dtype), leaves, kernel_size, stride, padding)
    B, C_out, L, Ho, Wo = v.shape
    c = coef.to(dtype)
    index = None
    if seed >= 0:  # [B, C_out, L - 1, Ho, Wo] of flat indices
        flat = torch.arange(B * C_out * Ho * Wo * (L - 1), device=x.device).reshape(B, C_out, Ho, Wo, L - 1)
        index = flat.permute(0, 1, 4, 2, 3)
    node = 0
    while v.shape[2] > 1:
        m = v.shape[2] // 2
        cl = c[:, node : node + m, :, None, None]  # [C_out, m, 4, 1, 1]
        a, b = v[:, :, 0::2], v[:, :, 1::2]
        v = cl[:, :, 0] + cl[:, :, 1] * a + (cl[:, :, 2] + cl[:, :, 3] * a) * b
        if act != "none" or seed >= 0:
            z = v
            if index is not None:
                z = v + noise_scale * logistic_noise(seed, index[:, :, node : node + m], torch.float64).to(v.dtype)
            v = activation(z, act)
        node += m
    return v[:, :, 0].to(x.dtype)


# --- lookup-table layers (LogicLUTLayer, docs/math/logic.md §11) -----------------------------------------


def lut_basis(xs: torch.Tensor) -> torch.Tensor:
    """The multilinear basis ``[..., 2^k]`` of inputs ``xs [..., k]``: entry ``t`` is ``prod_i (x_i if bit i of t
    else 1 - x_i)``, bit i = ``(t >> (k - 1 - i)) & 1`` (the first input is the most significant bit)."""
    k = xs.shape[-1]
    t = torch.arange(1 << k, device=xs.device)
    w = torch.ones(*xs.shape[:-1], 1 << k, dtype=xs.dtype, device=xs.device)
    for i in range(k):
        bit = ((t >> (k - 1 - i)) & 1).bool()
        xi = xs[..., i : i + 1]
        w = w * torch.where(bit, xi, 1 - xi)
    return w


def logic_lut(
    x: torch.Tensor,
    indices: torch.Tensor,
    table: torch.Tensor,
    act: str = "none",
    seed: int = -1,
    noise_scale: float = 0.0,
) -> torch.Tensor:
    """k-input lookup-table neurons: ``x [B, n_in]``, ``indices [k, n_out]``, ``table [n_out, 2^k]`` ->
    ``y [B, n_out] = act(u + noise_scale L)`` with ``u[s, j] = sum_t table[j, t] basis_t(x[s, indices[:, j]])``
    and ``L`` the logistic noise of ``parametrize.logistic_noise`` at the flat index ``s n_out + j`` (when ``seed
    >= 0``). ``act``: ``"none"``, ``"sigmoid"``, ``"sigmoid_st"`` (forward ``1[z > 0]``, gradient of the
    sigmoid). Computed in the wider of x's and table's dtypes, differentiable by autograd."""
    from .parametrize import logistic_noise

    dtype = torch.promote_types(x.dtype, table.dtype)
    xs = x.to(dtype)[:, indices.t()]  # [B, n_out, k]
    z = (lut_basis(xs) * table.to(dtype)).sum(-1)
    if seed >= 0:
        B, n_out = z.shape
        flat = torch.arange(B, device=x.device)[:, None] * n_out + torch.arange(n_out, device=x.device)
        z = z + noise_scale * logistic_noise(seed, flat, torch.float64).to(dtype)
    if act == "sigmoid":
        z = torch.sigmoid(z)
    elif act == "sigmoid_st":
        s = torch.sigmoid(z)
        z = (z > 0).to(dtype) + (s - s.detach())  # exactly 0 or 1 forward, the sigmoid's gradient
    return z.to(x.dtype)
