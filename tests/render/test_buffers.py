"""Buffers (depth, barycentrics, attributes, UV textures) of the reference backend: the hard limit against a
brute-force z-buffer, the soft limit, the RGB path, texture sampling against ``grid_sample``, gradients against
finite differences and bad input (docs/math/render.md §4.4 and §4.5)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf
from relaxops.render import Renderer, icosphere, mip_pyramid, ops, rasterize, render_buffers
from relaxops.render.relaxations import RasterSettings

REF = dict(backend="reference")


def general_faces(n: int, seed: int, bands: bool = False) -> torch.Tensor:
    """``[n, 3, 3]`` random faces in general position (x, y in [-0.9, 0.9], z in [2, 5]); ``bands``: face f lies in
    the depth band [2 + f, 2.5 + f], so no two faces intersect."""
    g = torch.Generator().manual_seed(seed)
    fv = torch.rand(n, 3, 3, generator=g, dtype=torch.float64)
    fv[..., :2] = fv[..., :2] * 1.8 - 0.9
    if bands:
        fv[..., 2] = 2 + torch.arange(n, dtype=torch.float64)[:, None] + 0.5 * fv[..., 2]
    else:
        fv[..., 2] = 2 + 3 * fv[..., 2]
    return fv


def centres(H: int, W: int):
    """Pixel centres (docs/math/render.md §1.4), ``[H, W]`` each."""
    r, c = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64), indexing="ij")
    return (2 * c + 1 - W) / W, (H - 1 - 2 * r) / H


def zbuffer(fv, attr, H, W, near, far, perspective_correct):
    """Brute force: per pixel, the closest face (lowest index on ties) whose closed triangle holds the centre and
    whose depth is in [near, far]: (covered, depth, barycentrics [3, H, W], face, attributes [C, H, W])."""
    x, y = centres(H, W)
    best = torch.full((H, W), math.inf, dtype=torch.float64)
    face = torch.full((H, W), -1, dtype=torch.long)
    bary = torch.zeros(3, H, W, dtype=torch.float64)
    covered = torch.zeros(H, W, dtype=torch.bool)

    def cross(ax, ay, bx, by, cx, cy):
        return (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)

    for f in range(fv.shape[0]):
        (x0, y0, z0), (x1, y1, z1), (x2, y2, z2) = fv[f].tolist()
        area = cross(x0, y0, x1, y1, x2, y2)
        w = torch.stack([cross(x, y, x1, y1, x2, y2), cross(x0, y0, x, y, x2, y2), cross(x0, y0, x1, y1, x, y)]) / area
        inside = ((w >= 0) & (w <= 1)).all(0)
        covered |= inside
        zp = 1 / (w[0] / z0 + w[1] / z1 + w[2] / z2)
        take = inside & (zp >= near) & (zp <= far) & (zp < best)
        b = w / torch.tensor([z0, z1, z2], dtype=torch.float64)[:, None, None] * zp if perspective_correct else w
        best = torch.where(take, zp, best)
        face = torch.where(take, f, face)
        bary = torch.where(take, b, bary)
    hit = face >= 0
    corners = attr[face.clamp_min(0)] if len(attr) else attr.new_zeros(H, W, 3, attr.shape[-1])
    a = torch.einsum("khw,hwkc->chw", bary, corners) * hit
    return covered, torch.where(hit, best, far), bary, face, a


HARD = dict(dist_func="hard", dist_scale=0.0, aggr_func="hard")


@pytest.mark.parametrize("perspective_correct", [False, True])
def test_hard_limit_matches_a_brute_force_zbuffer(perspective_correct):
    fv = general_faces(6, 1)
    attr = torch.randn(6, 3, 2, dtype=torch.float64)
    H, W, near, far = 13, 11, 1.0, 4.0  # far = 4 culls the far parts of some faces
    out = render_buffers(
        fv[None], attr[None], image_size=(H, W), near=near, far=far, perspective_correct=perspective_correct,
        **HARD, **REF,
    )  # fmt: skip
    covered, depth, bary, face, a = zbuffer(fv, attr, H, W, near, far, perspective_correct)
    assert face.ge(0).sum() > 25 and (face.max() > 3)  # the scene is not trivial
    torch.testing.assert_close(out.alpha[0, 0], covered.double(), rtol=0, atol=0)
    torch.testing.assert_close(out.face_index[0, 0], face, rtol=0, atol=0)
    torch.testing.assert_close(out.depth[0, 0], depth, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.barycentrics[0], bary, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.attributes[0], a, rtol=0, atol=1e-12)
    assert out.texture is None


def test_hard_limit_packed_meshes():
    counts = [2, 0, 4, 1]
    meshes = [general_faces(n, 10 + i) for i, n in enumerate(counts)]
    attrs = [torch.randn(n, 3, 1, dtype=torch.float64) for n in counts]
    offsets = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()])
    fv, attr = torch.cat(meshes), torch.cat(attrs)
    out = render_buffers(fv, attr, mesh_offsets=offsets, image_size=(9, 10), **HARD, **REF)
    assert out.depth.shape == (4, 1, 9, 10)
    for b, (m, at) in enumerate(zip(meshes, attrs)):
        covered, depth, bary, face, a = zbuffer(m, at, 9, 10, 1.0, 100.0, False)
        torch.testing.assert_close(out.alpha[b, 0], covered.double(), rtol=0, atol=0)
        torch.testing.assert_close(out.face_index[b, 0], torch.where(face >= 0, face + offsets[b], -1), rtol=0, atol=0)
        torch.testing.assert_close(out.depth[b, 0], depth, rtol=0, atol=1e-12)
        torch.testing.assert_close(out.barycentrics[b], bary, rtol=0, atol=1e-12)
        torch.testing.assert_close(out.attributes[b], a, rtol=0, atol=1e-12)
    assert (out.depth[1] == 100).all() and (out.alpha[1] == 0).all() and (out.face_index[1] == -1).all()


@pytest.mark.parametrize("aggr_func", ["softmax", "hard"])
def test_packed_equals_one_mesh_at_a_time(aggr_func):
    fv = general_faces(6, 3)
    attr = torch.randn(6, 3, 2, dtype=torch.float64)
    uv = torch.rand(6, 3, 2, dtype=torch.float64)
    tex = torch.rand(3, 4, 5, 2, dtype=torch.float64)
    offsets = torch.tensor([0, 3, 4, 6])
    opts = dict(image_size=8, dist_scale=0.05, aggr_rgb_gamma=0.1, aggr_func=aggr_func, aggr_alpha_func="average")
    out = render_buffers(fv, attr, face_uvs=uv, texture=tex, mesh_offsets=offsets, **opts, **REF)
    for b in range(3):
        n0, n1 = offsets[b], offsets[b + 1]
        one = render_buffers(
            fv[None, n0:n1], attr[None, n0:n1], face_uvs=uv[None, n0:n1], texture=tex[b], **opts, **REF
        )
        for got, want in zip(out[:5], one[:5]):
            torch.testing.assert_close(got[b : b + 1], want, rtol=0, atol=1e-14)
        if aggr_func == "hard":
            torch.testing.assert_close(
                out.face_index[b], torch.where(one.face_index[0] >= 0, one.face_index[0] + n0, -1)
            )


def test_padded_equals_packed():
    fv = general_faces(6, 4).reshape(2, 3, 3, 3)
    attr = torch.randn(2, 3, 3, 2, dtype=torch.float64)
    a = render_buffers(fv, attr, image_size=7, **REF)
    b = render_buffers(
        fv.reshape(6, 9), attr.reshape(6, 3, 2), mesh_offsets=torch.tensor([0, 3, 6]), image_size=7, **REF
    )
    for x, y in zip(a[:4], b[:4]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def _edge_distance(fv, H, W):
    """Per pixel, the distance from its centre to the nearest edge of any face."""
    x, y = centres(H, W)
    d = torch.full((H, W), math.inf, dtype=torch.float64)
    for f in range(fv.shape[0]):
        for a, b in ((0, 1), (1, 2), (2, 0)):
            ax, ay, bx, by = fv[f, a, 0], fv[f, a, 1], fv[f, b, 0], fv[f, b, 1]
            t = (((x - ax) * (bx - ax) + (y - ay) * (by - ay)) / ((bx - ax) ** 2 + (by - ay) ** 2)).clamp(0, 1)
            d = torch.minimum(d, torch.hypot(ax + t * (bx - ax) - x, ay + t * (by - ay) - y))
    return d


@pytest.mark.parametrize("perspective_correct", [False, True])
def test_soft_buffers_tend_to_the_hard_ones(perspective_correct):
    # faces in disjoint depth bands (no intersections); uniform coverage is exactly 1 inside and 0 beyond tau
    # of a face, so away from edges only the softmax over depth separates soft from hard: its weights of the
    # farther faces are exp(-dz / gamma) with dz >= 0.5 / 99 here, negligible for gamma = 1e-4
    fv = general_faces(5, 5, bands=True)
    attr = torch.randn(5, 3, 2, dtype=torch.float64)
    uv = torch.rand(5, 3, 2, dtype=torch.float64)
    tex = torch.rand(6, 5, 3, dtype=torch.float64)
    H, W, tau = 15, 16, 1e-3
    common = dict(face_uvs=uv[None], texture=tex, image_size=(H, W), perspective_correct=perspective_correct, **REF)
    hard = render_buffers(fv[None], attr[None], **HARD, **common)
    soft = render_buffers(fv[None], attr[None], dist_scale=tau, aggr_rgb_gamma=1e-4, **common)
    away = _edge_distance(fv, H, W) > 2 * tau
    assert away.sum() > 0.8 * H * W
    for name in ("alpha", "depth", "barycentrics", "attributes", "texture"):
        h, s = getattr(hard, name)[0][:, away], getattr(soft, name)[0][:, away]
        torch.testing.assert_close(s, h, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("aggr", ["softmax", "hard"])
def test_attributes_weigh_as_the_rgb_path(aggr):
    # vertex colours as attributes (screen-space barycentrics) give rasterize's RGB and alpha, and the same
    # gradients of the depths and colours (the RGB path holds wbar fixed, which does not depend on z)
    v, f = icosphere(1)
    g = torch.Generator().manual_seed(0)
    fv = (v[f] * 0.7).double() + 1e-3 * torch.rand(f.shape[0], 3, 3, generator=g, dtype=torch.float64)
    fv[..., 2] += 3
    fv = fv[None].requires_grad_()
    colours = torch.rand(1, f.shape[0], 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    opts = dict(image_size=(12, 13), dist_func="logistic", dist_scale=0.02, aggr_rgb_gamma=0.05, double_side=False)
    image = rasterize(fv, colours, texture_type="vertex", aggr_rgb_func=aggr, background_color=(0.2, 0.3, 0.4), **opts)
    out = render_buffers(fv, colours, aggr_func=aggr, background=[0.2, 0.3, 0.4, 100, 0, 0, 0], **opts, **REF)
    torch.testing.assert_close(out.attributes, image[:, :3], rtol=0, atol=1e-13)
    torch.testing.assert_close(out.alpha, image[:, 3:], rtol=0, atol=1e-13)
    w = torch.randn(1, 3, 12, 13, generator=g, dtype=torch.float64)
    g_img = torch.autograd.grad((image[:, :3] * w).sum(), [fv, colours], retain_graph=True)
    g_buf = torch.autograd.grad((out.attributes * w).sum(), [fv, colours], retain_graph=True)
    torch.testing.assert_close(g_buf[0][..., 2], g_img[0][..., 2], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g_buf[1], g_img[1], rtol=1e-10, atol=1e-12)
    # alpha: identical gradients (x and y through D only, by the same formula)
    g_img = torch.autograd.grad((image[:, 3:] * w[:, :1]).sum(), fv)[0]
    g_buf = torch.autograd.grad((out.alpha * w[:, :1]).sum(), fv)[0]
    torch.testing.assert_close(g_buf, g_img, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("aggr", ["softmax", "hard"])
def test_perspective_correct_barycentrics_sum_to_one_and_give_the_depth(aggr):
    fv = general_faces(4, 6, bands=True)
    out = render_buffers(fv[None], image_size=(9, 8), perspective_correct=True, aggr_func=aggr, dist_scale=0.02, **REF)
    hit = out.face_index[0, 0] >= 0 if aggr == "hard" else out.alpha[0, 0] > 0
    b = out.barycentrics[0][:, hit]
    if aggr == "hard":
        torch.testing.assert_close(b.sum(0), torch.ones_like(b[0]), rtol=0, atol=1e-14)
        assert (b >= 0).all()
        # sum_k b_k z_k = z_p: the perspective-correct barycentrics interpolate camera-space depth linearly
        face = out.face_index[0, 0][hit]
        z = fv[face][..., 2].T
        torch.testing.assert_close((b * z).sum(0), out.depth[0, 0][hit], rtol=1e-14, atol=0)
    else:  # each face's barycentrics sum to 1, the background's (0) weighs in: sum = 1 - background weight
        assert (b.sum(0) <= 1 + 1e-12).all() and (b.sum(0) > 0).all()


def test_screen_space_barycentrics_interpolate_inverse_depth():
    fv = general_faces(3, 7, bands=True)
    out = render_buffers(fv[None], image_size=(9, 8), **HARD, **REF)
    hit = out.face_index[0, 0] >= 0
    b, face = out.barycentrics[0][:, hit], out.face_index[0, 0][hit]
    z = fv[face][..., 2].T
    torch.testing.assert_close(b.sum(0), torch.ones_like(b[0]), rtol=0, atol=1e-14)
    torch.testing.assert_close(1 / (b / z).sum(0), out.depth[0, 0][hit], rtol=1e-14, atol=0)


# --- UV textures -----------------------------------------------------------------------------------------------

QUAD = torch.tensor([[[-1, -1, 2], [-1, 1, 2], [1, 1, 2]], [[-1, -1, 2], [1, 1, 2], [1, -1, 2]]], dtype=torch.float64)


def quad_uvs(affine):
    """UVs of the screen-filling quad ``QUAD`` (grown by 10% so that no pixel centre is on its boundary) for
    ``(u, v) = affine @ (x, y, 1)``: the sampled (u, v) of every pixel is that affine map of its centre."""
    fv = QUAD.clone()
    fv[..., :2] *= 1.1
    xy1 = torch.cat([fv[..., :2], torch.ones_like(fv[..., :1])], -1)
    return fv, xy1 @ torch.as_tensor(affine, dtype=torch.float64).T


def grid(affine, H, W):
    x, y = centres(H, W)
    a = torch.as_tensor(affine, dtype=torch.float64)
    u = a[0, 0] * x + a[0, 1] * y + a[0, 2]
    v = a[1, 0] * x + a[1, 1] * y + a[1, 2]
    return u, v


def sample_grid(tex, u, v, padding="border"):
    """``grid_sample`` (bilinear, align_corners=False) of ``tex [Ht, Wt, C]`` at (u, v), v up: ``[C, H, W]``."""
    g = torch.stack([2 * u - 1, 1 - 2 * v], -1)[None]
    return nnf.grid_sample(tex.permute(2, 0, 1)[None], g, mode="bilinear", padding_mode=padding, align_corners=False)[0]


@pytest.mark.parametrize("wrap", ["clamp", "repeat"])
@pytest.mark.parametrize("perspective_correct", [False, True])
def test_texture_level_0_equals_grid_sample(wrap, perspective_correct):
    tex = torch.rand(7, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    affine = [[0.8, 0.3, 0.45], [-0.2, 0.9, 0.55]]  # u, v reach about [-0.6, 1.5]: outside [0, 1] on every side
    fv, uv = quad_uvs(affine)
    H, W = 11, 12
    out = render_buffers(
        fv[None], face_uvs=uv[None], texture=tex, image_size=(H, W), mipmap=False, texture_wrap=wrap,
        perspective_correct=perspective_correct, **HARD, **REF,
    )  # fmt: skip
    u, v = grid(affine, H, W)  # both faces at z = 2: perspective-correct barycentrics equal the screen ones
    assert u.min() < -0.3 and u.max() > 1.3 and v.min() < -0.3 and v.max() > 1.3
    if wrap == "clamp":
        want = sample_grid(tex, u, v)
    else:  # repeat: the texture tiled 3 x 3, sampled at the fractional part, in the middle tile
        want = sample_grid(tex.repeat(3, 3, 1), (u - u.floor() + 1) / 3, (v - v.floor() + 1) / 3)
    torch.testing.assert_close(out.texture[0], want, rtol=0, atol=1e-12)


def test_mip_pyramid_levels():
    tex = torch.rand(2, 7, 4, 3, dtype=torch.float64)
    flat, sizes = mip_pyramid(tex)
    assert sizes == [(7, 4), (3, 2), (1, 1)]
    assert flat.shape == (2, 28 + 6 + 1, 3)
    torch.testing.assert_close(flat[:, :28], tex.reshape(2, 28, 3))
    lvl1 = flat[:, 28:34].reshape(2, 3, 2, 3)
    # 7 -> 3 rows: windows [0, 3), [2, 5), [4, 7); 4 -> 2 columns: [0, 2), [2, 4)
    rows = [(0, 3), (2, 5), (4, 7)]
    for i, (r0, r1) in enumerate(rows):
        for j in range(2):
            torch.testing.assert_close(lvl1[:, i, j], tex[:, r0:r1, 2 * j : 2 * j + 2].mean((1, 2)))
    torch.testing.assert_close(flat[:, 34], lvl1.mean((1, 2)))
    even = torch.rand(1, 8, 8, 1, dtype=torch.float64)
    flat, sizes = mip_pyramid(even)
    assert sizes == [(8, 8), (4, 4), (2, 2), (1, 1)]
    torch.testing.assert_close(flat[0, 64:80].reshape(4, 4), even[0, :, :, 0].reshape(4, 2, 4, 2).mean((1, 3)))


LOD_CASES = [  # (image size, affine (u, v) of (x, y, 1), expected level) for a 32 x 32 texture
    (16, [[0.5, 0, 0.13], [0, 0.5, 0.21]], 1.0),  # du/dx = 0.5, a pixel is 2/16: 0.0625 u = 2 texels
    (16, [[1.0, 0, 0.13], [0, 1.0, 0.21]], 2.0),
    (16, [[0.75, 0, 0.13], [0, 0.75, 0.21]], math.log2(3.0)),
    ((16, 8), [[0.5, 0, 0.13], [0, 0.25, 0.21]], 2.0),  # a column step: 4 texels of u; a row step: 1 texel of v
    # a column step (2/16 in x): (1.0, -0.8) texels; a row step (2/8 in y): (0.8, 4.0) texels, the longer
    ((8, 16), [[0.25, 0.1, 0.13], [-0.2, 0.5, 0.21]], math.log2(math.hypot(0.8, 4.0))),
]


@pytest.mark.parametrize("size, affine, level", LOD_CASES)
def test_trilinear_level_of_detail(size, affine, level):
    # the quad maps the texture affinely: rho = the longer of the (u, v) steps, in texels, of a column and a row step
    tex = torch.rand(32, 32, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    fv, uv = quad_uvs(affine)
    out = render_buffers(fv[None], face_uvs=uv[None], texture=tex, image_size=size, **HARD, **REF)
    H, W = (size, size) if isinstance(size, int) else size
    flat, sizes = mip_pyramid(tex[None])
    offsets = [0, *torch.tensor([h * w for h, w in sizes]).cumsum(0).tolist()]
    levels = [flat[0, offsets[i] : offsets[i + 1]].reshape(*sizes[i], 2) for i in range(len(sizes))]
    u, v = grid(affine, H, W)

    def at(level):
        lv = levels[level]
        return sample_grid(lv.repeat(3, 3, 1), (u - u.floor() + 1) / 3, (v - v.floor() + 1) / 3)

    l0, f = int(math.floor(level)), level - math.floor(level)
    want = (1 - f) * at(l0) + f * at(l0 + 1) if f else at(l0)
    torch.testing.assert_close(out.texture[0], want, rtol=0, atol=1e-12)
    off = render_buffers(fv[None], face_uvs=uv[None], texture=tex, image_size=size, mipmap=False, **HARD, **REF)
    torch.testing.assert_close(off.texture[0], at(0), rtol=0, atol=1e-12)


def test_non_finite_uvs_give_nan_texture_only_there():
    fv, uv = quad_uvs([[0.5, 0, 0.5], [0, 0.5, 0.5]])
    uv[0, 1, 0] = math.nan  # the first face
    out = render_buffers(fv[None], face_uvs=uv[None], texture=torch.rand(4, 4, 1), image_size=8, **HARD, **REF)
    nan = out.texture[0, 0].isnan()
    assert torch.equal(nan, out.face_index[0, 0] == 0) and nan.any() and not nan.all()
    assert out.depth.isfinite().all()


# --- gradients ---------------------------------------------------------------------------------------------------


def _fd_check(fn, inputs, h=1e-6, rtol=1e-5, atol=1e-7):
    """Central finite differences of ``fn`` (a scalar) in every element of every input against autograd."""
    xs = [x.clone().requires_grad_() for x in inputs]
    grads = torch.autograd.grad(fn(*xs), xs)
    for i, (x, g) in enumerate(zip(inputs, grads)):
        fd = torch.zeros_like(x)
        for j in range(x.numel()):
            for sign in (1, -1):
                xp = [y.clone() for y in inputs]
                xp[i].view(-1)[j] += sign * h
                fd.view(-1)[j] += sign * fn(*xp).item() / (2 * h)
        torch.testing.assert_close(g, fd, rtol=rtol, atol=atol, msg=f"input {i}")


GRAD_CASES = [
    dict(aggr_func="softmax", texture_wrap="repeat"),
    dict(aggr_func="softmax", perspective_correct=True, texture_wrap="clamp", dist_squared=True, dist_scale=2e-3),
    dict(aggr_func="hard", perspective_correct=True, aggr_alpha_func="einstein"),
    dict(aggr_func="softmax", double_side=False, aggr_alpha_func="average"),
]


@pytest.mark.parametrize("case", GRAD_CASES)
def test_gradients_match_finite_differences(case):
    # float64, vertices in general position, uvs beyond [0, 1], every output channel weighted; without mipmaps
    # (the level of detail, held fixed, is the one quantity whose variation finite differences would see), the
    # gradient is the exact derivative, the coverage's included: for a smooth F, docs/math/render.md §2.5's
    # envelope formula is exact away from the 1e-6 guard
    fv = general_faces(3, 8)
    g = torch.Generator().manual_seed(2)
    attr = torch.randn(3, 3, 2, generator=g, dtype=torch.float64)
    uv = torch.rand(3, 3, 2, generator=g, dtype=torch.float64) * 1.6 - 0.3
    tex = torch.rand(3, 4, 2, generator=g, dtype=torch.float64)
    opts = dict(image_size=(7, 8), dist_func="logistic", dist_scale=0.05, aggr_rgb_gamma=0.05, mipmap=False) | case
    w = torch.randn(1, 2 + 2 + 5, 7, 8, generator=g, dtype=torch.float64)

    def loss(fv, attr, uv, tex):
        out = render_buffers(fv[None], attr[None], face_uvs=uv[None], texture=tex, **opts, **REF)
        return (torch.cat([out.attributes, out.texture, out.depth, out.barycentrics, out.alpha], 1) * w).sum()

    assert render_buffers(fv[None], face_uvs=uv[None], texture=tex, **opts, **REF).alpha.gt(0).sum() > 10
    _fd_check(loss, [fv, attr, uv, tex])


def test_texture_gradient_with_a_fractional_level_of_detail():
    # the level of detail depends on the uvs and the vertices but is held fixed; the texture enters linearly
    fv, uv = quad_uvs([[0.75, 0.1, 0.4], [-0.1, 0.75, 0.35]])
    tex = torch.rand(32, 32, 1, dtype=torch.float64)
    w = torch.randn(1, 1, 8, 8, dtype=torch.float64)

    def loss(tex):
        return (render_buffers(fv[None], face_uvs=uv[None], texture=tex, image_size=8, **HARD, **REF).texture * w).sum()

    t = tex.clone().requires_grad_()
    g = torch.autograd.grad(loss(t), t)[0]
    e = torch.zeros_like(tex)
    idx = g.abs().flatten().topk(5).indices.tolist() + [0, 511, 1023]
    for j in idx:
        e.view(-1)[j] = 1
        torch.testing.assert_close(g.view(-1)[j], loss(tex + e) - loss(tex), rtol=1e-9, atol=1e-12)
        e.view(-1)[j] = 0


@pytest.mark.parametrize("aggr_func", ["softmax", "hard"])
def test_translations_keep_the_level_of_detail(aggr_func):
    # translating every uv (or every vertex in x, y) leaves the faces' uv derivatives, hence the levels of detail,
    # unchanged: along those directions finite differences see only what the backward differentiates, mipmaps on
    fv = general_faces(3, 15)
    g = torch.Generator().manual_seed(4)
    uv = torch.randn(3, 3, 2, generator=g, dtype=torch.float64) * 3
    tex = torch.rand(2, 16, 16, 2, generator=g, dtype=torch.float64)
    w = torch.randn(2, 7, 8, 9, generator=g, dtype=torch.float64)
    offsets = torch.tensor([0, 1, 3])
    opts = dict(image_size=(8, 9), dist_func="logistic", dist_scale=0.05, aggr_rgb_gamma=0.05, aggr_func=aggr_func)

    def loss(fv, uv):
        out = render_buffers(fv, face_uvs=uv, texture=tex, mesh_offsets=offsets, **opts, **REF)
        return (torch.cat([out.texture, out.depth, out.barycentrics, out.alpha], 1) * w).sum()

    x, u = fv.clone().requires_grad_(), uv.clone().requires_grad_()
    gx, gu = torch.autograd.grad(loss(x, u), [x, u])
    h = 1e-5  # the loss is ~300: truncation (~3e-8 here, measured down to h = 1e-4) beats rounding (~5e-8 at 1e-6)
    for d in range(2):
        e = torch.zeros_like(uv)
        e[..., d] = h
        fd = (loss(fv, uv + e) - loss(fv, uv - e)) / (2 * h)
        torch.testing.assert_close(gu[..., d].sum(), fd, rtol=1e-6, atol=1e-7)
        e = torch.zeros_like(fv)
        e[..., d] = h
        fd = (loss(fv + e, uv) - loss(fv - e, uv)) / (2 * h)
        torch.testing.assert_close(gx[..., d].sum(), fd, rtol=1e-6, atol=1e-7)


def test_coverage_gradient_is_the_guarded_formula_on_an_edge():
    # a pixel centre exactly on an edge: r = 0 and the max(r, 1e-6) guard gives (about) no gradient of D, while
    # the true derivative of the coverage is largest there (docs/math/render.md §2.5; finite differences differ)
    fv = torch.tensor([[[-0.5, 0.0, 2.0], [0.5, 0.0, 2.0], [0.0, 0.8, 2.0]]], dtype=torch.float64)  # y = 0: an edge
    fv[0, 2, 0] = 0.0123
    w = torch.zeros(1, 1, 3, 5, dtype=torch.float64)
    w[0, 0, 1, 2] = 1.0  # pixel (1, 2) of a 3 x 5 image: centre (0, 0), on the edge y = 0
    x = fv.clone().requires_grad_()
    out = render_buffers(x[None], image_size=(3, 5), dist_func="logistic", dist_scale=0.05, **REF)
    g = torch.autograd.grad((out.alpha * w).sum(), x)[0]
    assert g[0, :2, 1].abs().max() < 1e-3
    h = 1e-6
    up, down = fv.clone(), fv.clone()
    up[0, :2, 1] += h
    down[0, :2, 1] -= h
    fd = [
        (render_buffers(f[None], image_size=(3, 5), dist_func="logistic", dist_scale=0.05, **REF).alpha * w).sum()
        for f in (up, down)
    ]
    assert abs((fd[0] - fd[1]).item() / (2 * h)) > 1.0


def test_no_gradient_outside_near_far():
    # a face beyond far still counts for alpha but, as in the RGB path, gets no gradient there at all
    fv = general_faces(2, 14)
    fv[1, :, 2] += 200
    fv = fv[None].requires_grad_()
    out = render_buffers(fv, image_size=8, dist_scale=0.05, **REF)
    assert out.alpha.sum() > render_buffers(fv[:, :1], image_size=8, dist_scale=0.05, **REF).alpha.sum()
    g = torch.autograd.grad(sum(t.sum() for t in out[:3]), fv)[0]
    assert (g[0, 1] == 0).all() and g[0, 0].abs().sum() > 0


def test_hard_coverage_gives_exact_zero_geometry_gradients_for_alpha():
    fv = general_faces(3, 9)[None].requires_grad_()
    out = render_buffers(fv, image_size=8, dist_func="hard", dist_scale=0.0, **REF)
    g = torch.autograd.grad(out.alpha.sum(), fv)[0]
    assert torch.equal(g, torch.zeros_like(g))


def test_skipped_faces_get_zero_gradients_and_no_nan():
    fv = general_faces(3, 10)
    fv[1, 0, 0] = math.inf  # non-finite: skipped
    fv[2, 1] = fv[2, 0]  # degenerate: skipped
    fv = fv[None].requires_grad_()
    attr = torch.randn(1, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    out = render_buffers(fv, attr, image_size=8, dist_scale=0.05, **REF)
    loss = sum(t.sum() for t in (out.alpha, out.depth, out.barycentrics, out.attributes))
    gf, ga = torch.autograd.grad(loss, [fv, attr])
    assert gf.isfinite().all() and ga.isfinite().all()
    assert (gf[0, 1:] == 0).all() and (ga[0, 1:] == 0).all() and gf[0, 0].abs().sum() > 0


def test_empty_scene_and_defaults():
    out = render_buffers(torch.zeros(2, 0, 9, dtype=torch.float64), image_size=(3, 4), far=50, **REF)
    assert (out.depth == 50).all() and (out.alpha == 0).all() and (out.barycentrics == 0).all()
    assert out.attributes is None and out.texture is None and out.face_index is None
    fv = general_faces(2, 11)[None].float()
    out = render_buffers(fv, torch.rand(1, 2, 3, 4), image_size=5, aggr_func="hard", **REF)
    assert out.attributes.shape == (1, 4, 5, 5) and out.face_index.dtype == torch.int64
    half = render_buffers(fv.half(), image_size=5, **REF)
    assert half.depth.dtype == torch.float16


def test_rasterize_uv_texture():
    fv, uv = quad_uvs([[0.5, 0, 0.5], [0, 0.5, 0.5]])
    tex = torch.rand(1, 6, 6, 3, dtype=torch.float64)
    image = rasterize(fv[None], tex, image_size=9, texture_type="uv", face_uvs=uv[None], background_color=(1, 0, 0),
                      **REF)  # fmt: skip
    out = render_buffers(fv[None], face_uvs=uv[None], texture=tex, image_size=9, **REF)
    assert image.shape == (1, 4, 9, 9)
    torch.testing.assert_close(image, torch.cat([out.texture, out.alpha], 1))
    empty = rasterize(torch.zeros(1, 0, 9), tex, image_size=3, texture_type="uv", face_uvs=torch.zeros(1, 0, 3, 2),
                      background_color=(1, 0.5, 0), **REF)  # fmt: skip
    assert (empty[0, :3] == torch.tensor([1, 0.5, 0])[:, None, None]).all()
    with pytest.raises(ValueError, match="face_uvs"):
        rasterize(fv[None], tex, texture_type="uv")
    with pytest.raises(ValueError, match="textures"):
        rasterize(fv[None], None, texture_type="uv", face_uvs=uv[None])


def test_renderer_uv_texture():
    fv, uv = quad_uvs([[0.5, 0, 0.5], [0, 0.5, 0.5]])
    tex = torch.rand(1, 6, 6, 3, dtype=torch.float64)
    renderer = Renderer(image_size=9, texture_type="uv", double_side=True, anti_aliasing=True, **REF)
    image = renderer.forward_tensors(fv[None], tex, face_uvs=uv[None])
    expected = rasterize(fv[None], tex, image_size=18, texture_type="uv", face_uvs=uv[None], **REF)
    torch.testing.assert_close(image, nnf.avg_pool2d(expected, 2))
    with pytest.raises(ValueError, match="texture_type"):
        Renderer(texture_type="texels")
    with pytest.raises(ValueError, match="face_uvs"):
        renderer.forward_tensors(fv[None], tex)


# --- bad input ---------------------------------------------------------------------------------------------------


def test_errors_name_the_argument():
    fv = general_faces(2, 12)[None]
    uv = torch.rand(1, 2, 3, 2, dtype=torch.float64)
    tex = torch.rand(4, 4, 3, dtype=torch.float64)
    cases = [
        (dict(face_vertices=fv[..., :2]), ValueError, "face_vertices"),
        (dict(attributes=torch.rand(1, 3, 3, 2)), ValueError, "attributes"),
        (dict(attributes=torch.rand(1, 2, 2, 2)), ValueError, "attributes"),
        (dict(texture=tex), ValueError, "face_uvs"),
        (dict(texture=tex, face_uvs=uv[..., :1]), ValueError, "face_uvs"),
        (dict(texture=torch.rand(2, 4, 4, 3), face_uvs=uv), ValueError, "texture"),
        (dict(texture=tex, face_uvs=uv, texture_wrap="mirror"), ValueError, "texture_wrap"),
        (dict(aggr_func="max"), ValueError, "aggr_func"),
        (dict(perspective_correct=1), TypeError, "perspective_correct"),
        (dict(background=[0, 0, 0]), ValueError, "background"),
        (dict(background="far"), TypeError, "background"),
        (dict(mesh_offsets=torch.tensor([0, 2])), ValueError, "face_vertices"),
        (dict(face_vertices=fv[0], mesh_offsets=torch.tensor([0, 1])), ValueError, "mesh_offsets"),
        (dict(face_vertices=fv[0], mesh_offsets=torch.tensor([0, 2, 1, 2])), ValueError, "mesh_offsets"),
        (dict(face_vertices=fv[0], mesh_offsets=torch.tensor([0.0, 2.0])), TypeError, "mesh_offsets"),
        (dict(dist_scale=-1.0), ValueError, "dist_scale"),
        (dict(backend="gpu"), ValueError, "backend"),
    ]
    for kwargs, error, name in cases:
        args = dict(face_vertices=fv, image_size=4, backend="reference") | kwargs
        with pytest.raises(error, match=name):
            render_buffers(args.pop("face_vertices"), **args)


def _op_args(B=2, N=3, C=2, levels=((4, 4), (2, 2), (1, 1)), dtype=torch.float64):
    g = torch.Generator().manual_seed(3)
    fv = general_faces(N, 13).reshape(N, 9).to(dtype)
    Tt = sum(h * w for h, w in levels)
    ints, floats = RasterSettings.from_options(image_size=(5, 6), dist_scale=0.05).to_lists()
    return [
        fv,
        torch.rand(N, 3, C, generator=g, dtype=torch.float64).to(dtype),
        torch.rand(N, 3, 2, generator=g, dtype=torch.float64).to(dtype),
        torch.rand(B, Tt, 3, generator=g, dtype=torch.float64).to(dtype),
        torch.tensor([0, 1, N]),
        ints,
        floats,
        [1, 0, len(levels), *(n for hw in levels for n in hw)],
        [0.0] * (C + 3) + [100.0, 0.0, 0.0, 0.0],
        "reference",
    ]


def test_op_errors_name_the_op_and_argument():
    base = _op_args()
    bad = [
        (7, [1, 0, 2, 4, 4, 2, 2], "buf_ints"),  # the levels hold 20 texels, the texture 21
        (7, [2, 0, 3, 4, 4, 2, 2, 1, 1], "buf_ints"),
        (7, [1, 3, 3, 4, 4, 2, 2, 1, 1], "buf_ints"),
        (8, [0.0] * 5, "background"),
        (4, torch.tensor([0, 2, 1]), "mesh_offsets"),
        (4, torch.tensor([0, 3], dtype=torch.int32), "mesh_offsets"),
        (1, torch.rand(3, 3, 2, dtype=torch.float32), "attributes"),
        (2, torch.rand(3, 2, 2, dtype=torch.float64), "face_uvs"),
        (3, torch.rand(3, 21, 3, dtype=torch.float64), "texture"),
        (9, "gpu", "backend"),
    ]
    for i, value, name in bad:
        args = list(base)
        args[i] = value
        with pytest.raises((ValueError, TypeError), match=f"render_buffers_fwd: {name}"):
            ops.render_buffers_fwd(*args)


@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_opcheck(rgb):
    args = _op_args()
    args[5], args[6] = RasterSettings.from_options(image_size=(5, 6), dist_scale=0.05, aggr_rgb_func=rgb).to_lists()
    for i in range(4):
        args[i] = args[i].requires_grad_()
    torch.library.opcheck(ops.render_buffers_fwd, args)
    out, aggr = ops.render_buffers_fwd(*args)
    bwd = [torch.rand_like(out), *args[:5], out.detach(), aggr, *args[5:]]
    torch.library.opcheck(ops.render_buffers_bwd, [t.detach() if isinstance(t, torch.Tensor) else t for t in bwd])
    no_tex = _op_args(C=0, levels=())
    no_tex[3] = torch.zeros(2, 0, 0, dtype=torch.float64)
    no_tex[8] = [100.0, 0.0, 0.0, 0.0]
    torch.library.opcheck(ops.render_buffers_fwd, no_tex)


def test_compile_fullgraph():
    fv = general_faces(3, 16)
    uv = torch.rand(3, 3, 2, dtype=torch.float64)
    tex = torch.rand(6, 5, 3, dtype=torch.float64)

    def f(fv, tex):
        out = render_buffers(fv, face_uvs=uv, texture=tex, mesh_offsets=torch.tensor([0, 1, 3]), image_size=6, **REF)
        return out.texture.sum() + out.depth.sum() + out.alpha.sum()

    x, t = fv.clone().requires_grad_(), tex.clone().requires_grad_()
    got = torch.compile(f, fullgraph=True)(x, t)
    gx, gt = torch.autograd.grad(got, [x, t])
    x2, t2 = fv.clone().requires_grad_(), tex.clone().requires_grad_()
    want = f(x2, t2)
    wx, wt = torch.autograd.grad(want, [x2, t2])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gx, wx)
    torch.testing.assert_close(gt, wt)
