"""The GenDR rasterizer in plain PyTorch: the test oracle and the fallback backend (docs/math/render.md §2-§5).

Every pixel visits every face, as in the original kernel, vectorized over all pixels and a block of faces
(memory O(B H W K), K faces at a time). Forward and backward are written out explicitly because the backward
is not the autograd derivative of the forward everywhere: the original's gradient conventions are normative
(the ``max(r, 1e-6)`` guard, hard-alpha straight-through, RGB gradient approximations, no gradient where the
interpolated depth is outside ``[near, far]``; docs/math/render.md §5.2 and §8).

Layouts (shared with the kernels, ``csrc/render/render.h``):
* ``face_vertices [N, 9]``: the packed faces of B meshes, ``x0 y0 z0 x1 y1 z1 x2 y2 z2``, x and y in NDC (y up),
  z camera depth;
* ``mesh_offsets [B + 1]`` int64: mesh b owns the faces ``mesh_offsets[b] .. mesh_offsets[b + 1] - 1`` and is drawn
  into image b (docs/math/render.md, "Mixed meshes in a batch");
* ``textures [N, T, 3]``: surface textures (``T = R^2`` texels) or vertex colours (``T = 3``);
* ``image [B, 4, H, W]``: RGB and alpha, row 0 at the top;
* ``aggr [B, 2, H, W]``: what the RGB backward needs: ``(S, m)`` of the streaming softmax, or
  ``(depth, face)`` of the closest face (packed index, -1: none) for hard RGB.

Meshes of one face count F are computed as one ``[B, F]`` batch; otherwise each mesh on its own.

Deliberate deviations from the original (docs/math/render.md §8): degenerate faces (``|det| < 1e-10``) contribute
nothing; texel indices are clamped to the face's own texels; the outside distance falls back to the nearest of the
three clamped edges if rounding leaves no barycentric region.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from .relaxations import CLAMP, DISTRIBUTIONS, T_CONORMS, RasterSettings, fold_grad, fold_step, occlusion

PROBABILITY_THRESHOLD = 1e-6  # faces with D <= this are culled for alpha, RGB and the backward
DET_MIN = 1e-10  # |2 x signed area| below this: degenerate face
DEPTH_INIT = 1e7  # hard RGB: initial closest depth
BLOCK = 1 << 20  # elements of a [B, P, K] block


def pixel_centres(height: int, width: int, dtype=torch.float64, device=None) -> tuple[Tensor, Tensor]:
    """NDC centres ``x [H*W]``, ``y [H*W]`` of the pixels in row-major order (row 0 at the top, y up)."""
    col = torch.arange(width, dtype=dtype, device=device)
    row = torch.arange(height, dtype=dtype, device=device)
    x = (2 * col + 1 - width) / width
    y = (2 * (height - 1 - row) + 1 - height) / height
    return x.repeat(height), y.repeat_interleave(width)


def _edge(P, a: int, b: int, px, py):
    """Unclamped projection of the pixel on the line through ``P_a``, ``P_b``: ``t_a`` (``t_b = 1 - t_a``)."""
    ex, ey = P[a][0] - P[b][0], P[a][1] - P[b][1]
    return (ex * (px - P[b][0]) + ey * (py - P[b][1])) / (ex * ex + ey * ey)


_EDGES = ((0, 1), (1, 2), (2, 0))


def _fragments(fv: Tensor, px: Tensor, py: Tensor, s: RasterSettings) -> dict:
    """Per (batch, pixel, face) quantities for the faces ``fv [B, K, 9]`` and pixels ``px, py [P]``, each
    ``[B, P, K]`` (``t``, ``w``, ``wbar``: ``[B, P, K, 3]``; ``dx``, ``dy``: the distance vector ``Q - p``)."""
    x = [fv[:, None, :, 3 * k] for k in range(3)]
    y = [fv[:, None, :, 3 * k + 1] for k in range(3)]
    z = [fv[:, None, :, 3 * k + 2] for k in range(3)]
    px, py = px[None, :, None], py[None, :, None]
    P = [(x[k], y[k]) for k in range(3)]
    det_raw = x[2] * (y[0] - y[1]) + x[0] * (y[1] - y[2]) + x[1] * (y[2] - y[0])
    det = torch.where(det_raw > 0, det_raw.clamp_min(DET_MIN), det_raw.clamp_max(-DET_MIN))
    # w_k = inv[k] . (x_p, y_p, 1) with inv = adj / det (docs/math/render.md §2.1)
    w = []
    for k in range(3):
        i, j = (k + 1) % 3, (k + 2) % 3
        w.append(((y[i] - y[j]) * px + (x[j] - x[i]) * py + (x[i] * y[j] - x[j] * y[i])) / det)
    w = torch.stack(w, -1)
    margin = math.sqrt(s.eps * s.tau)
    xs, ys = torch.stack(x, -1), torch.stack(y, -1)
    in_box = (
        (px <= xs.amax(-1) + margin)
        & (px >= xs.amin(-1) - margin)
        & (py <= ys.amax(-1) + margin)
        & (py >= ys.amin(-1) - margin)
    )
    # a face with a non-finite vertex or an overflowing area is skipped like a degenerate one; pairs whose
    # barycentrics or distance overflow are culled (every quantity of a surviving pair is finite)
    valid = fv.isfinite().all(-1)[:, None, :] & det_raw.isfinite() & (det_raw.abs() >= DET_MIN)
    mask = in_box & valid & w.isfinite().all(-1)
    closed = ((w >= 0) & (w <= 1)).all(-1)
    shape = w.shape[:-1]
    zero = torch.zeros(shape, dtype=fv.dtype, device=fv.device)
    if DISTRIBUTIONS[s.dist] == "hard":
        D = torch.where(closed, 1.0, 0.0).to(fv.dtype)
        phi, sign, dx, dy, r = zero, zero, zero, zero, zero
        t = torch.zeros_like(w)
    else:
        strict = ((w > 0) & (w < 1)).all(-1)
        ta = torch.stack([_edge(P, a, b, px, py) for a, b in _EDGES], -1)  # [B, P, K, 3] per edge

        def point(e_ta, a, b):
            return e_ta * P[a][0] + (1 - e_ta) * P[b][0] - px, e_ta * P[a][1] + (1 - e_ta) * P[b][1] - py

        d2 = []
        for clamp in (False, True):
            for e, (a, b) in enumerate(_EDGES):
                qx, qy = point(ta[..., e].clamp(0, 1) if clamp else ta[..., e], a, b)
                d2.append(qx * qx + qy * qy)
        d2_line, d2_seg = torch.stack(d2[:3], -1), torch.stack(d2[3:], -1)
        # inside: nearest line (first edge wins ties); outside: the barycentric region's edge (docs/math/render.md §2.2)
        inside_edge = d2_line.argmin(-1)
        w0, w1, w2 = w.unbind(-1)
        pdot = [
            (px - P[k][0]) * (P[j][0] - P[k][0]) + (py - P[k][1]) * (P[j][1] - P[k][1])
            for k, j in ((0, 2), (1, 0), (2, 1))
        ]
        obtuse = [
            (
                (P[(k + 1) % 3][0] - P[k][0]) * (P[(k + 2) % 3][0] - P[k][0])
                + (P[(k + 1) % 3][1] - P[k][1]) * (P[(k + 2) % 3][1] - P[k][1])
            )
            < 0
            for k in range(3)
        ]
        first = [obtuse[0], obtuse[1] & ~obtuse[0], obtuse[2] & ~obtuse[0] & ~obtuse[1]]
        fallback = d2_seg.argmin(-1)
        out_edge = torch.where(w0 <= 0, 1, torch.where(w1 <= 0, 2, torch.where(w2 <= 0, 0, fallback)))
        out_edge = torch.where((w0 <= 0) & (w1 <= 0), torch.where(first[2] & (pdot[2] > 0), 1, 2), out_edge)
        out_edge = torch.where((w2 <= 0) & (w0 <= 0), torch.where(first[1] & (pdot[1] > 0), 0, 1), out_edge)
        out_edge = torch.where((w1 <= 0) & (w2 <= 0), torch.where(first[0] & (pdot[0] > 0), 2, 0), out_edge)
        edge = torch.where(strict, inside_edge, out_edge)
        e_ta = ta.gather(-1, edge[..., None])[..., 0]
        e_ta = torch.where(strict, e_ta, e_ta.clamp(0, 1))
        t = torch.zeros_like(w)
        for e, (a, b) in enumerate(_EDGES):
            on = edge == e
            t[..., a] = torch.where(on, e_ta, t[..., a])
            t[..., b] = torch.where(on, 1 - e_ta, t[..., b])
        dx = (t * xs).sum(-1) - px
        dy = (t * ys).sum(-1) - py
        rho = dx * dx + dy * dy
        sign = torch.where(strict, 1.0, -1.0).to(fv.dtype)
        mask = mask & rho.isfinite() & (strict | (rho < s.eps * s.tau))
        r = rho.sqrt()
        D, phi = occlusion(sign * (rho if s.squared else r), s.tau, DISTRIBUTIONS[s.dist], s.shape, s.shift)
    mask = mask & (D > PROBABILITY_THRESHOLD)
    wbar = w.clamp(0, 1)
    wbar = wbar / wbar.sum(-1, keepdim=True).clamp_min(1e-5)
    zs = torch.stack(z, -1)
    zp = 1 / (wbar / zs).sum(-1)
    front = (det_raw < 0).expand(shape)
    # culled pairs may hold inf/NaN (degenerate faces, far tails); zero what the backward multiplies
    m3 = mask[..., None]
    return dict(
        mask=mask,
        closed=closed,
        D=D,
        phi=phi,
        sign=sign,
        dx=torch.where(mask, dx, 0),
        dy=torch.where(mask, dy, 0),
        r=torch.where(mask, r, 1),
        t=torch.where(m3, t, 0),
        wbar=torch.where(m3, wbar, 0),
        zp=torch.where(mask, zp, 1),
        z=zs.expand(w.shape),
        front=front,
    )


def _texel(wbar: Tensor, T: int) -> Tensor:
    """Surface texel index sampled at the clipped barycentrics (docs/math/render.md §4.3, index clamped to the face)."""
    R = math.isqrt(T)
    ix = torch.clamp(torch.floor(wbar[..., 0] * R), max=R - 1)
    iy = torch.clamp(torch.floor(wbar[..., 1] * R), max=R - 1)
    lower = (wbar[..., 0] + wbar[..., 1]) * R - ix - iy <= 1
    return torch.where(lower, iy * R + ix, (R - 1 - iy) * R + (R - 1 - ix)).long()


def _colour(tex: Tensor, fr: dict, texture: int) -> tuple[Tensor, Tensor | None]:
    """``C [B, P, K, 3]`` of the faces ``tex [B, K, T, 3]``, and the surface texel index ``[B, P, K]``."""
    B, P, K = fr["D"].shape
    if texture == 1:  # vertex colours: barycentric mix
        return torch.einsum("bpkv,bkvc->bpkc", fr["wbar"], tex), None
    idx = _texel(fr["wbar"], tex.shape[2])
    C = tex[:, None].expand(B, P, K, *tex.shape[2:]).gather(3, idx[..., None, None].expand(B, P, K, 1, 3))
    return C[..., 0, :], idx


def _rgb_ok(fr: dict, s: RasterSettings) -> Tensor:
    """Faces that take part in the RGB aggregation: survived the culls, depth in range, facing (or double)."""
    ok = fr["mask"] & (fr["zp"] >= s.near) & (fr["zp"] <= s.far)
    return ok if s.double_side else ok & fr["front"]


def _blocks(F: int, B: int, P: int):
    K = max(1, BLOCK // max(1, B * P))
    return [(f0, min(F, f0 + K)) for f0 in range(0, F, K)]


def _meshes(mesh_offsets: Tensor) -> tuple[list[int], int | None]:
    """The offsets as a list, and the face count of every mesh if they all have the same one (else None)."""
    o = mesh_offsets.tolist()
    counts = {b - a for a, b in zip(o[:-1], o[1:])}
    return o, (counts.pop() if len(counts) == 1 else None)


def forward(face_vertices: Tensor, textures: Tensor, mesh_offsets: Tensor, s: RasterSettings) -> tuple[Tensor, Tensor]:
    """``(image [B, 4, H, W], aggr [B, 2, H, W])``, see the module docstring."""
    o, F = _meshes(mesh_offsets)
    B = len(o) - 1
    if F is not None or B == 0:
        F = F or 0
        base = torch.tensor(o[:-1], dtype=torch.int64, device=face_vertices.device)
        return _forward(face_vertices.reshape(B, F, 9), textures.reshape(B, F, *textures.shape[1:]), base, s)
    out = [
        _forward(face_vertices[None, a:b], textures[None, a:b], torch.tensor([a], device=face_vertices.device), s)
        for a, b in zip(o[:-1], o[1:])
    ]
    return torch.cat([im for im, _ in out]), torch.cat([ag for _, ag in out])


def backward(
    grad_image: Tensor,
    face_vertices: Tensor,
    textures: Tensor,
    mesh_offsets: Tensor,
    image: Tensor,
    aggr: Tensor,
    s: RasterSettings,
) -> tuple[Tensor, Tensor]:
    """``(grad_face_vertices [N, 9], grad_textures [N, T, 3])`` by the original's formulas (docs/math/render.md
    §5.2)."""
    o, F = _meshes(mesh_offsets)
    B = len(o) - 1
    if F is not None or B == 0:
        F = F or 0
        base = torch.tensor(o[:-1], dtype=torch.int64, device=face_vertices.device)
        gf, gt = _backward(
            grad_image,
            face_vertices.reshape(B, F, 9),
            textures.reshape(B, F, *textures.shape[1:]),
            base,
            image,
            aggr,
            s,
        )
        return gf.reshape(face_vertices.shape), gt.reshape(textures.shape)
    out = [
        _backward(
            grad_image[b : b + 1],
            face_vertices[None, o[b] : o[b + 1]],
            textures[None, o[b] : o[b + 1]],
            torch.tensor([o[b]], device=face_vertices.device),
            image[b : b + 1],
            aggr[b : b + 1],
            s,
        )
        for b in range(B)
    ]
    return torch.cat([gf[0] for gf, _ in out]), torch.cat([gt[0] for _, gt in out])


def _forward(face_vertices: Tensor, textures: Tensor, base: Tensor, s: RasterSettings) -> tuple[Tensor, Tensor]:
    """``forward`` of B meshes of F faces each: ``face_vertices [B, F, 9]``, ``textures [B, F, T, 3]``; ``base [B]``
    the packed index of each mesh's first face (hard RGB's face index)."""
    B, F = face_vertices.shape[:2]
    dtype, dev = face_vertices.dtype, face_vertices.device
    px, py = pixel_centres(s.height, s.width, dtype, dev)
    P = px.numel()
    A = torch.zeros(B, P, dtype=dtype, device=dev)
    bg = torch.tensor(s.background, dtype=dtype, device=dev)
    alpha_name = T_CONORMS[s.alpha]
    if s.rgb == 0:
        depth = torch.full((B, P), DEPTH_INIT, dtype=dtype, device=dev)
        face = torch.full((B, P), -1, dtype=torch.long, device=dev)
        rgb = bg.expand(B, P, 3).clone()
    else:
        # the background weighs as a face at normalised depth 2 eps (docs/math/render.md §4.2:
        # S = exp(eps / gamma) at m = eps), started max-stabilised at m = 2 eps, S = 1 (exp(eps / gamma) overflows for a
        # small gamma)
        m = torch.full((B, P), 2 * s.rgb_eps, dtype=dtype, device=dev)
        S = torch.ones((B, P), dtype=dtype, device=dev)
        acc = bg.expand(B, P, 3)
    for f0, f1 in _blocks(F, B, P):
        fr = _fragments(face_vertices[:, f0:f1], px, py, s)
        for k in range(f1 - f0):  # the alpha fold, ascending face index
            on = fr["mask"][..., k]
            A = torch.where(on, fold_step(A, fr["D"][..., k], alpha_name, s.p, F), A)
        ok = _rgb_ok(fr, s)
        C, _ = _colour(textures[:, f0:f1], fr, s.texture)
        if s.rgb == 0:  # closest face whose closed test holds; strict <, so the lowest index wins ties
            zc = torch.where(ok & fr["closed"], fr["zp"], math.inf)
            zmin, kmin = zc.min(-1)
            win = zmin < depth
            depth = torch.where(win, zmin, depth)
            face = torch.where(win, kmin + f0 + base[:, None], face)
            rgb = torch.where(win[..., None], C.gather(2, kmin[..., None, None].expand(B, P, 1, 3))[:, :, 0], rgb)
        else:  # streaming softmax over the normalised inverse depth (docs/math/render.md §4.2), block by block
            zt = (s.far - fr["zp"]) / (s.far - s.near)
            m_new = torch.maximum(m, torch.where(ok, zt, -math.inf).amax(-1))
            scale = torch.exp((m - m_new) / s.gamma)
            e = torch.where(ok, fr["D"] * torch.exp((zt - m_new[..., None]) / s.gamma), 0)
            S = S * scale + e.sum(-1)
            # only the faces taking part carry their colour (a non-finite texel reaches only their pixels)
            C = torch.where(ok[..., None], C, 0)
            acc = acc * scale[..., None] + torch.einsum("bpk,bpkc->bpc", e, C)
            m = m_new
    if s.rgb == 0:
        aggr = torch.stack([depth, face.to(dtype)], 1)
    else:
        rgb = acc / S[..., None]
        aggr = torch.stack([S, m], 1)
    image = torch.cat([rgb.transpose(1, 2), A[:, None]], 1)
    return image.reshape(B, 4, s.height, s.width), aggr.reshape(B, 2, s.height, s.width)


def _backward(
    grad_image: Tensor,
    face_vertices: Tensor,
    textures: Tensor,
    base: Tensor,
    image: Tensor,
    aggr: Tensor,
    s: RasterSettings,
) -> tuple[Tensor, Tensor]:
    """``backward`` of B meshes of F faces each (layouts and ``base`` as in ``_forward``): ``(grad_face_vertices
    [B, F, 9], grad_textures [B, F, T, 3])``."""
    B, F = face_vertices.shape[:2]
    dtype, dev = face_vertices.dtype, face_vertices.device
    px, py = pixel_centres(s.height, s.width, dtype, dev)
    P = px.numel()
    g = grad_image.reshape(B, 4, P).to(dtype)
    g_rgb, g_a = g[:, :3].transpose(1, 2), g[:, 3]
    img = image.reshape(B, 4, P)
    I, A = img[:, :3].transpose(1, 2), img[:, 3]
    ag = aggr.reshape(B, 2, P)
    grad_fv = torch.zeros_like(face_vertices)
    grad_tex = torch.zeros_like(textures)
    alpha_name = T_CONORMS[s.alpha]
    for f0, f1 in _blocks(F, B, P):
        fr = _fragments(face_vertices[:, f0:f1], px, py, s)
        K = f1 - f0
        gate = fr["mask"] & (fr["zp"] >= s.near) & (fr["zp"] <= s.far)
        D = torch.where(gate, fr["D"], 0.5)  # keeps the unused entries finite
        G = g_a[..., None] * fold_grad(A[..., None], D, alpha_name, s.p, F)
        C, texel = _colour(textures[:, f0:f1], fr, s.texture)
        if s.rgb == 0:  # hard RGB: the recorded winner's texture only
            local = ag[:, 1].long() - base[:, None]  # the winner's index within its mesh (-1 - base: none)
            wt = (local[..., None] == torch.arange(f0, f1, device=dev)) & gate
            tex_w = torch.where(wt[..., None], g_rgb[:, :, None, :], 0)  # dL/dC_f [B, P, K, 3]
        else:
            ok = gate if s.double_side else gate & fr["front"]
            zt = (s.far - fr["zp"]) / (s.far - s.near)
            wf = torch.where(ok, D * torch.exp((zt - ag[:, 1, :, None]) / s.gamma) / ag[:, 0, :, None], 0)
            tex_w = wf[..., None] * g_rgb[:, :, None, :]
            g_rgb_f = torch.where(ok, (tex_w * (C - I[:, :, None, :])).sum(-1), 0)  # G_f^rgb
            G = G + g_rgb_f / D
            gz = (g_rgb_f / s.gamma / (s.near - s.far) * fr["zp"] ** 2)[..., None] * fr["wbar"] / fr["z"] ** 2
            grad_fv[:, f0:f1, 2::3] += torch.where(ok[..., None], gz, 0).sum(1)
        # texture: one add per (pixel, face, channel) to the sampled texel (surface) or the three vertices
        if s.texture == 1:
            grad_tex[:, f0:f1] += torch.einsum("bpkv,bpkc->bkvc", fr["wbar"], tex_w)
        else:
            T = textures.shape[2]
            idx = (texel + torch.arange(K, device=dev) * T).reshape(B, P * K, 1).expand(B, P * K, 3)
            flat = textures.new_zeros(B, K * T, 3).scatter_add_(1, idx, tex_w.reshape(B, P * K, 3))
            grad_tex[:, f0:f1] += flat.reshape(B, K, T, 3)
        G = torch.where(gate, G * fr["phi"] * fr["sign"], 0)
        if s.squared:
            G = 2 * G
        else:
            G = G / fr["r"].clamp_min(CLAMP)
        gx, gy = (G[..., None] * fr["t"] * fr["dx"][..., None]), (G[..., None] * fr["t"] * fr["dy"][..., None])
        grad_fv[:, f0:f1, 0::3] += gx.sum(1)
        grad_fv[:, f0:f1, 1::3] += gy.sum(1)
    return grad_fv, grad_tex


# --- Buffers: depth, barycentrics, attributes and UV textures (docs/math/render.md §4.4, §4.5) ---
# Layouts (shared with csrc/render/buffers.h), N packed faces of B meshes:
# * ``attributes [N, 3, C]``, ``face_uvs [N, 3, 2]``: per face corner values and (u, v) texture coordinates;
# * ``texture [B, Tt, Ct]``: each image's mip pyramid, level l (``h_l x w_l`` texels, row-major, row 0 at the top)
#   at element offset ``sum_{j<l} h_j w_j``; ``Ct = 0``: no texture;
# * ``buffers [B, K, H, W]``, ``K = C + Ct + 5``: attributes, texture, depth, barycentrics (3), alpha;
# * ``aggr [B, 2, H, W]``: as for the RGB image, the face index of hard RGB being the packed index.
# The forward is written out; the backward differentiates a surrogate of each face block with autograd, in which
# everything docs/math/render.md §4.4 holds fixed (culls, winner, clip branches, texel indices, level of detail,
# the saved softmax normaliser) is detached and the coverage D enters with the gradient of §2.5.


class BufferSettings(NamedTuple):
    """The parsed ``buf_ints = [perspective_correct, wrap, L, h_0, w_0, ..., h_{L-1}, w_{L-1}]``."""

    perspective_correct: bool
    wrap: int  # 0: repeat, 1: clamp
    levels: tuple[tuple[int, int], ...]  # (h_l, w_l) of the pyramid's levels

    @classmethod
    def from_ints(cls, buf_ints, texels: int, channels: int) -> BufferSettings:
        """Validated against a ``[B, texels, channels]`` texture (ValueError naming the entry)."""
        if len(buf_ints) < 3:
            raise ValueError(f"expected at least 3 entries (perspective_correct, wrap, L), got {list(buf_ints)}")
        pc, wrap, L = (int(v) for v in buf_ints[:3])
        if pc not in (0, 1):
            raise ValueError(f"perspective_correct must be 0 or 1, got {pc}")
        if wrap not in (0, 1):
            raise ValueError(f"wrap must be 0 (repeat) or 1 (clamp), got {wrap}")
        if L < 0 or len(buf_ints) != 3 + 2 * L:
            raise ValueError(f"expected 3 + 2 L entries for L = {L} levels, got {len(buf_ints)}")
        levels = tuple((int(buf_ints[3 + 2 * i]), int(buf_ints[4 + 2 * i])) for i in range(L))
        if any(h < 1 or w < 1 for h, w in levels):
            raise ValueError(f"level sizes must be >= 1, got {levels}")
        if (channels == 0) != (L == 0):
            raise ValueError(f"a texture with {channels} channels needs {'no' if channels == 0 else '>= 1'} levels")
        if sum(h * w for h, w in levels) != texels:
            raise ValueError(f"the levels {levels} hold {sum(h * w for h, w in levels)} texels, the texture {texels}")
        return cls(bool(pc), wrap, levels)


_SAFE_FACE = (0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0)  # stands in for skipped faces (finite, unit area)


def _safe_faces(fv: Tensor) -> Tensor:
    """``fv [B, K, 9]`` with the faces that ``_fragments`` skips (non-finite, overflowing or degenerate) replaced by
    a harmless triangle, so that no inf/NaN reaches the autograd graph."""
    x, y = fv[..., 0::3], fv[..., 1::3]
    det = (
        x[..., 2] * (y[..., 0] - y[..., 1]) + x[..., 0] * (y[..., 1] - y[..., 2]) + x[..., 1] * (y[..., 2] - y[..., 0])
    )
    valid = fv.isfinite().all(-1) & det.isfinite() & (det.abs() >= DET_MIN)
    return torch.where(valid[..., None], fv, fv.new_tensor(_SAFE_FACE))


def _lod(fv: Tensor, uv: Tensor, s: RasterSettings, buf: BufferSettings) -> Tensor:
    """Per face level of detail ``lambda [B, K]`` from the affine screen derivatives of (u, v) (no gradient)."""
    x, y = fv[..., 0::3], fv[..., 1::3]
    det = (
        x[..., 2] * (y[..., 0] - y[..., 1]) + x[..., 0] * (y[..., 1] - y[..., 2]) + x[..., 1] * (y[..., 2] - y[..., 0])
    )
    i, j = [1, 2, 0], [2, 0, 1]
    dwdx = (y[..., i] - y[..., j]) / det[..., None]  # d w_k / d x = adj[3k] / det
    dwdy = (x[..., j] - x[..., i]) / det[..., None]  # d w_k / d y = adj[3k + 1] / det
    u, v = uv[..., 0], uv[..., 1]
    h0, w0 = buf.levels[0]
    du_col, dv_col = (u * dwdx).sum(-1) * (2 / s.width * w0), (v * dwdx).sum(-1) * (2 / s.width * h0)
    du_row, dv_row = -(u * dwdy).sum(-1) * (2 / s.height * w0), -(v * dwdy).sum(-1) * (2 / s.height * h0)
    rho = torch.maximum(torch.hypot(du_col, dv_col), torch.hypot(du_row, dv_row))
    lam = torch.log2(rho).clamp(0, len(buf.levels) - 1)
    return torch.where(rho.isfinite() & (rho > 0), lam, 0)


def _bilinear(tex: Tensor, u: Tensor, v: Tensor, level: Tensor, buf: BufferSettings) -> Tensor:
    """Bilinear samples ``[B, P, K, Ct]`` of ``tex [B, Tt, Ct]`` at ``u, v [B, P, K]`` on the per face pyramid
    level ``level [B, K]``; texel indices held fixed (their weights carry the gradient); NaN where (u, v) is not
    finite."""
    sizes = torch.tensor([[h, w, 0] for h, w in buf.levels], dtype=torch.int64, device=u.device)
    sizes[1:, 2] = (sizes[:-1, 0] * sizes[:-1, 1]).cumsum(0)
    hi, wi, off = (t[:, None] for t in sizes[level].unbind(-1))  # [B, 1, K] each; indices in int64
    h, w = hi.to(u.dtype), wi.to(u.dtype)
    x, y = u * w - 0.5, (1 - v) * h - 0.5
    finite = x.isfinite() & y.isfinite()
    x, y = torch.where(finite, x, 0), torch.where(finite, y, 0)
    x0, y0 = x.detach().floor(), y.detach().floor()
    fx, fy = x - x0, y - y0
    xs, ys = torch.stack([x0, x0 + 1, x0, x0 + 1], -1), torch.stack([y0, y0, y0 + 1, y0 + 1], -1)
    if buf.wrap == 0:  # repeat: index mod size, non-negative
        xs, ys = torch.remainder(xs, w[..., None]), torch.remainder(ys, h[..., None])
    else:  # clamp to the edge texels
        xs, ys = torch.minimum(xs.clamp_min(0), w[..., None] - 1), torch.minimum(ys.clamp_min(0), h[..., None] - 1)
    idx = off[..., None] + ys.long() * wi[..., None] + xs.long()  # [B, P, K, 4]
    weights = torch.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], -1)
    B, Ct = tex.shape[0], tex.shape[2]
    texels = tex.gather(1, idx.reshape(B, -1, 1).expand(-1, -1, Ct)).reshape(*idx.shape, Ct)
    value = (weights[..., None] * texels).sum(-2)
    return torch.where(finite[..., None], value, math.nan)


def _sample(tex: Tensor, uv: Tensor, lod: Tensor, buf: BufferSettings) -> Tensor:
    """Trilinear texture values ``[B, P, K, Ct]`` at ``uv [B, P, K, 2]`` with the faces' levels of detail."""
    L = len(buf.levels)
    l0 = lod.floor().long()
    l1 = (l0 + 1).clamp_max(L - 1)
    f = (lod - l0)[:, None, :, None]
    u, v = uv[..., 0], uv[..., 1]
    return (1 - f) * _bilinear(tex, u, v, l0, buf) + f * _bilinear(tex, u, v, l1, buf)


def _values(fv, attr, uv, tex, px, py, ok, lod, s: RasterSettings, buf: BufferSettings) -> Tensor:
    """Per (pixel, face) values ``[B, P, K, C + Ct + 4]`` (attributes, texture, depth, barycentrics) of the faces
    ``fv [B, K, 9]`` (skipped faces replaced by ``_safe_faces``) at the pairs ``ok``, 0 elsewhere. Differentiable
    in ``fv``, ``attr``, ``uv``, ``tex`` with the clip branches of ``wbar`` held fixed."""
    x = [fv[:, None, :, 3 * k] for k in range(3)]
    y = [fv[:, None, :, 3 * k + 1] for k in range(3)]
    px, py = px[None, :, None], py[None, :, None]
    det = x[2] * (y[0] - y[1]) + x[0] * (y[1] - y[2]) + x[1] * (y[2] - y[0])
    w = []
    for k in range(3):  # the expression of _fragments, so that wbar and zp agree to the bit
        i, j = (k + 1) % 3, (k + 2) % 3
        w.append(((y[i] - y[j]) * px + (x[j] - x[i]) * py + (x[i] * y[j] - x[j] * y[i])) / det)
    ok3 = ok[..., None]
    w = torch.where(ok3, torch.stack(w, -1), 1 / 3)  # other pairs: safe values, no gradient
    wc = torch.where((w > 0) & (w < 1), w, w.detach().clamp(0, 1))  # a clipped w_k passes no derivative
    wbar = wc / wc.sum(-1, keepdim=True).clamp_min(1e-5)
    z = torch.where(ok3, fv[:, None, :, 2::3], 1)
    q = wbar / z
    zp = 1 / q.sum(-1)
    b = q * zp[..., None] if buf.perspective_correct else wbar
    out = []
    if attr.shape[-1]:
        out.append(torch.einsum("bpkv,bkvc->bpkc", b, attr))
    if tex.shape[-1]:
        out.append(_sample(tex, torch.einsum("bpkv,bkvc->bpkc", b, uv), lod, buf))
    out += [zp[..., None], b]
    return torch.where(ok3, torch.cat(out, -1), 0)


def _mesh_runs(mesh_offsets: Tensor) -> list[tuple[int, int, int]]:
    """Images ``[b0, b1)`` rendered together with ``F`` faces each: all of them when every mesh has the same face
    count (the padded layout, a reshape), else one mesh at a time (as ``forward``)."""
    o, F = _meshes(mesh_offsets)
    if F is not None:
        return [(0, len(o) - 1, F)]
    return [(b, b + 1, o[b + 1] - o[b]) for b in range(len(o) - 1)]


def _buffer_blocks(F: int, B: int, P: int, channels: int, texture_channels: int):
    """Face blocks whose per (pixel, face) values and texel gathers stay near ``BLOCK`` elements."""
    return _blocks(F, B * (1 + (channels + texture_channels) // 4 + texture_channels), P)


def _buffers_images(fv, attr, uv, tex, first, s: RasterSettings, buf: BufferSettings, bg: Tensor):
    """``buffers [B, K, P]``, ``aggr [B, 2, P]`` of ``B`` images of ``F`` faces each (``fv [B, F, 9]``; ``first
    [B]``: the packed index of each image's face 0)."""
    B, F = fv.shape[:2]
    dtype, dev = fv.dtype, fv.device
    px, py = pixel_centres(s.height, s.width, dtype, dev)
    P, Cv, Ct = px.numel(), bg.numel(), tex.shape[2]
    A = torch.zeros(B, P, dtype=dtype, device=dev)
    alpha_name = T_CONORMS[s.alpha]
    if s.rgb == 0:
        depth = torch.full((B, P), DEPTH_INIT, dtype=dtype, device=dev)
        face = torch.full((B, P), -1, dtype=torch.long, device=dev)
        out = bg.expand(B, P, Cv).clone()
    else:  # the streaming softmax of forward(), started at the background's weight
        m = torch.full((B, P), 2 * s.rgb_eps, dtype=dtype, device=dev)
        S = torch.ones((B, P), dtype=dtype, device=dev)
        acc = bg.expand(B, P, Cv)
    for f0, f1 in _buffer_blocks(F, B, P, Cv, Ct):
        fr = _fragments(fv[:, f0:f1], px, py, s)
        for k in range(f1 - f0):
            on = fr["mask"][..., k]
            A = torch.where(on, fold_step(A, fr["D"][..., k], alpha_name, s.p, F), A)
        ok = _rgb_ok(fr, s)
        fvs = _safe_faces(fv[:, f0:f1])
        lod = _lod(fvs, uv[:, f0:f1], s, buf) if Ct else None
        V = _values(fvs, attr[:, f0:f1], uv[:, f0:f1], tex, px, py, ok, lod, s, buf)
        if s.rgb == 0:  # the hard-RGB winner: closest closed-test face, lowest index on ties
            zc = torch.where(ok & fr["closed"], fr["zp"], math.inf)
            zmin, kmin = zc.min(-1)
            win = zmin < depth
            depth = torch.where(win, zmin, depth)
            face = torch.where(win, first[:, None] + kmin + f0, face)
            out = torch.where(win[..., None], V.gather(2, kmin[..., None, None].expand(B, P, 1, Cv))[:, :, 0], out)
        else:
            zt = (s.far - fr["zp"]) / (s.far - s.near)
            m_new = torch.maximum(m, torch.where(ok, zt, -math.inf).amax(-1))
            scale = torch.exp((m - m_new) / s.gamma)
            e = torch.where(ok, fr["D"] * torch.exp((zt - m_new[..., None]) / s.gamma), 0)
            S = S * scale + e.sum(-1)
            acc = acc * scale[..., None] + torch.einsum("bpk,bpkc->bpc", e, V)
            m = m_new
    if s.rgb == 0:
        aggr = torch.stack([depth, face.to(dtype)], 1)
    else:
        out = acc / S[..., None]
        aggr = torch.stack([S, m], 1)
    return torch.cat([out.transpose(1, 2), A[:, None]], 1), aggr


def _gradients(fn, inputs: list[Tensor], *args) -> list[Tensor]:
    """The gradients of the scalar ``fn(*inputs, *args)`` with respect to ``inputs``. A custom op runs below the
    autograd dispatch keys, where nothing would be recorded: they are re-enabled for this computation."""
    guard = torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.AutogradFunctionality, False)
    with torch.enable_grad(), guard:
        leaves = [x.detach().requires_grad_() for x in inputs]
        grads = torch.autograd.grad(fn(*leaves, *args), leaves, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


def _surrogate(fv, attr, uv, tex, c: dict) -> Tensor:
    """A function of the block's faces whose gradient is the buffers' backward: the forward's values with what the
    backward holds fixed (``c``: culls, winner, D and its §2.5 derivative, the saved softmax) detached."""
    s = c["s"]
    dxk = (fv[..., 0::3] - fv[..., 0::3].detach())[:, None]
    dyk = (fv[..., 1::3] - fv[..., 1::3].detach())[:, None]
    Ds = c["D"] + (c["cx"] * dxk + c["cy"] * dyk).sum(-1)  # D's value, with the gradient of §2.5 in x and y
    loss = torch.where(c["gate"], c["g_a"][..., None] * c["dA"] * Ds, 0).sum()
    V = _values(fv, attr, uv, tex, c["px"], c["py"], c["ok"], c["lod"], s, c["buf"])
    g = c["g_val"][:, :, None, :]
    if s.rgb == 0:  # the winner's values only
        return loss + torch.where(c["win"][..., None], g * V, 0).sum()
    # dV = sum_t (de_t (V_t - I) + e_t dV_t) / S with S, m, I the saved forward's
    ok, aggr = c["ok"], c["aggr"]
    zt = (s.far - V[..., -4]) / (s.far - s.near)
    e = torch.where(ok, Ds * torch.exp(torch.where(ok, (zt - aggr[:, 1, :, None]) / s.gamma, 0)), 0)
    G = (g * (V - torch.where(ok[..., None], c["I"][:, :, None, :], 0))).sum(-1)
    return loss + (e * G / aggr[:, 0, :, None]).sum()


def _buffers_images_backward(grad, fv, attr, uv, tex, first, buffers, aggr, s, buf, bg):
    """The gradients ``(fv, attr, uv, tex)`` of ``sum(grad * buffers)`` for ``_buffers_images``' images."""
    B, F = fv.shape[:2]
    dtype, dev = fv.dtype, fv.device
    px, py = pixel_centres(s.height, s.width, dtype, dev)
    P, Cv, Ct = px.numel(), bg.numel(), tex.shape[2]
    g_val, g_a = grad[:, :-1].transpose(1, 2), grad[:, -1]
    I, A = buffers[:, :-1].transpose(1, 2), buffers[:, -1]
    alpha_name = T_CONORMS[s.alpha]
    grad_fv, grad_attr, grad_uv = torch.zeros_like(fv), torch.zeros_like(attr), torch.zeros_like(uv)
    grad_tex = torch.zeros_like(tex)
    for f0, f1 in _buffer_blocks(F, B, P, Cv, Ct):
        fr = _fragments(fv[:, f0:f1], px, py, s)
        gate = fr["mask"] & (fr["zp"] >= s.near) & (fr["zp"] <= s.far)  # no gradient at all outside [near, far]
        ok = gate if s.double_side else gate & fr["front"]
        fvs = _safe_faces(fv[:, f0:f1])
        lod = _lod(fvs, uv[:, f0:f1], s, buf) if Ct else None
        D = torch.where(gate, fr["D"], 0.5)
        # dD/dx_k, dD/dy_k of docs/math/render.md §2.5 (phi = 0 for hard)
        c = torch.where(gate, fr["phi"] * fr["sign"], 0)
        c = 2 * c if s.squared else c / fr["r"].clamp_min(CLAMP)
        cx, cy = (c * fr["dx"])[..., None] * fr["t"], (c * fr["dy"])[..., None] * fr["t"]
        win = None
        if s.rgb == 0:  # the recorded winner's pairs
            win = (aggr[:, 1].long()[..., None] == first[:, None, None] + torch.arange(f0, f1, device=dev)) & ok

        fixed = dict(D=D, cx=cx, cy=cy, gate=gate, ok=ok, win=win, lod=lod, px=px, py=py, s=s, buf=buf)
        fixed |= dict(dA=fold_grad(A[..., None], D, alpha_name, s.p, F), g_a=g_a, g_val=g_val, I=I, aggr=aggr)
        grads = _gradients(_surrogate, [fvs, attr[:, f0:f1], uv[:, f0:f1], tex], fixed)
        for out, g in zip((grad_fv[:, f0:f1], grad_attr[:, f0:f1], grad_uv[:, f0:f1], grad_tex), grads):
            out += g
    return grad_fv, grad_attr, grad_uv, grad_tex


def buffers_forward(face_vertices, attributes, face_uvs, texture, mesh_offsets, s, buf, background):
    """``(buffers [B, C + Ct + 5, H, W], aggr [B, 2, H, W])`` of packed meshes (layouts above)."""
    B = mesh_offsets.shape[0] - 1
    dtype, dev = face_vertices.dtype, face_vertices.device
    bg = torch.tensor(list(background), dtype=dtype, device=dev)
    K = bg.numel() + 1
    buffers = face_vertices.new_empty(B, K, s.height * s.width)
    aggr = face_vertices.new_empty(B, 2, s.height * s.width)
    offsets = mesh_offsets.tolist()
    for b0, b1, F in _mesh_runs(mesh_offsets):
        n0, n1 = offsets[b0], offsets[b1]
        first = torch.tensor(offsets[b0:b1], device=dev)
        buffers[b0:b1], aggr[b0:b1] = _buffers_images(
            face_vertices[n0:n1].reshape(b1 - b0, F, 9),
            attributes[n0:n1].reshape(b1 - b0, F, 3, attributes.shape[2]),
            face_uvs[n0:n1].reshape(b1 - b0, F, 3, 2),
            texture[b0:b1],
            first,
            s,
            buf,
            bg,
        )
    return buffers.reshape(B, K, s.height, s.width), aggr.reshape(B, 2, s.height, s.width)


def buffers_backward(
    grad_buffers, face_vertices, attributes, face_uvs, texture, mesh_offsets, buffers, aggr, s, buf, background
):
    """``(grad_face_vertices [N, 9], grad_attributes [N, 3, C], grad_face_uvs [N, 3, 2], grad_texture [B, Tt, Ct])``:
    the derivative of the forward holding fixed what docs/math/render.md §4.4 lists, D with the gradient of §2.5."""
    B = mesh_offsets.shape[0] - 1
    dtype, dev = face_vertices.dtype, face_vertices.device
    bg = torch.tensor(list(background), dtype=dtype, device=dev)
    K, P = bg.numel() + 1, s.height * s.width
    g, buf_saved, ag = grad_buffers.reshape(B, K, P).to(dtype), buffers.reshape(B, K, P), aggr.reshape(B, 2, P)
    grads = [torch.zeros_like(t) for t in (face_vertices, attributes, face_uvs, texture)]
    offsets = mesh_offsets.tolist()
    for b0, b1, F in _mesh_runs(mesh_offsets):
        n0, n1 = offsets[b0], offsets[b1]
        first = torch.tensor(offsets[b0:b1], device=dev)
        gfv, gattr, guv, gtex = _buffers_images_backward(
            g[b0:b1],
            face_vertices[n0:n1].reshape(b1 - b0, F, 9),
            attributes[n0:n1].reshape(b1 - b0, F, 3, attributes.shape[2]),
            face_uvs[n0:n1].reshape(b1 - b0, F, 3, 2),
            texture[b0:b1],
            first,
            buf_saved[b0:b1],
            ag[b0:b1],
            s,
            buf,
            bg,
        )
        grads[0][n0:n1] = gfv.reshape(-1, 9)
        grads[1][n0:n1] = gattr.reshape(n1 - n0, 3, attributes.shape[2])
        grads[2][n0:n1] = guv.reshape(-1, 3, 2)
        grads[3][b0:b1] = gtex
    return tuple(grads)
