"""The C++ buffers kernels (csrc/render/buffers.h, buffers_cpu.cpp) against the float64 reference
(``reference.buffers_forward`` / ``buffers_backward``): the buffers, aggr and every gradient (vertices, attributes,
uvs, texture) on packed meshes of different face counts (an empty one among them), odd image sizes and every option;
float32 against the float64 reference; thread counts and face chunks."""

import itertools
import math

import pytest
import torch
from relaxops import _ext
from relaxops.render import mip_pyramid, ops, render_buffers
from relaxops.render.relaxations import RasterSettings
from testing import assert_no_device_sync

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")

H, W = 13, 17
LEVELS = ((8, 6), (4, 3), (2, 1), (1, 1))  # minified on these faces: levels of detail between 1 and 3


def _scene(counts, C, Ct, levels, seed, dtype=torch.float64):
    """Random overlapping faces (z in [1.5, 4.5], both orientations) of meshes with `counts` faces, packed; corner
    attributes, uvs in [-0.5, 1.5] (outside the texture: wrap) and random texture levels."""
    g = torch.Generator().manual_seed(seed)
    N, B = sum(counts), len(counts)
    centre = torch.rand(N, 1, 2, generator=g, dtype=dtype) * 1.6 - 0.8
    xy = centre + (torch.rand(N, 3, 2, generator=g, dtype=dtype) - 0.5) * 0.9
    z = 1.5 + 3 * torch.rand(N, 3, 1, generator=g, dtype=dtype)
    fv = torch.cat([xy, z], -1).reshape(N, 9)
    offsets = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int64)
    attributes = torch.randn(N, 3, C, generator=g, dtype=dtype)
    uvs = torch.rand(N, 3, 2, generator=g, dtype=dtype) * 2 - 0.5
    texels = sum(h * w for h, w in levels) if Ct else 0
    texture = torch.rand(B, texels, Ct, generator=g, dtype=dtype)
    grad = torch.randn(B, C + Ct + 5, H, W, generator=g, dtype=dtype)
    return fv, attributes, uvs, texture, offsets, grad


def _buf_ints(pc, wrap, levels, Ct):
    levels = levels if Ct else ()
    return [pc, wrap, len(levels), *[n for hw in levels for n in hw]]


def _run(backend, fv, attributes, uvs, texture, offsets, grad, s, buf_ints, background):
    """Forward and backward through the ops; the backward at the backend's own forward."""
    ints, floats = s.to_lists()
    buffers, aggr = ops.render_buffers_fwd(
        fv, attributes, uvs, texture, offsets, ints, floats, buf_ints, background, backend
    )
    grads = ops.render_buffers_bwd(
        grad, fv, attributes, uvs, texture, offsets, buffers, aggr, ints, floats, buf_ints, background, backend
    )
    return buffers, aggr, grads


def _close(a, b, tol, what):
    """max |a - b| <= tol max(1, max |a|) (NaN where both are NaN)."""
    if a.numel() == 0:
        return
    assert torch.equal(a.isnan(), b.isnan()), what
    a, b = a.nan_to_num(0), b.nan_to_num(0)
    err, scale = (a - b).abs().max().item(), max(1.0, a.abs().max().item())
    assert err <= tol * scale, f"{what}: {err:.3g} > {tol:g} * {scale:.3g}"


CASES = {
    "softmax": dict(),
    "hard": dict(aggr_rgb_func="hard"),
    "affine_clamp": dict(pc=0, wrap=1),
    "hard_dist": dict(dist_func="hard", aggr_rgb_func="hard", wrap=1),
    "average_gaussian": dict(aggr_alpha_func="average", dist_func="gaussian", aggr_rgb_gamma=0.05),
    "near_far_single_side": dict(near=2.0, far=4.0, double_side=False),
    "hard_near_far": dict(aggr_rgb_func="hard", near=2.0, far=4.0, double_side=False, pc=0),
    "squared_logistic_einstein": dict(
        dist_func="logistic", dist_squared=True, dist_scale=1e-3, aggr_alpha_func="einstein"
    ),
    "yager_cubic": dict(dist_func="cubic_hermite", aggr_alpha_func="yager", aggr_alpha_t_conorm_p=2.0),
    # Frank at the ends of its parameter range, where its textbook form overflowed (docs/math/render.md §3.3)
    "frank_tiny_p": dict(aggr_alpha_func="frank", aggr_alpha_t_conorm_p=1e-300),
    "frank_huge_p": dict(aggr_alpha_func="frank", aggr_alpha_t_conorm_p=1e30),
    "no_texture": dict(Ct=0),
    "no_attributes": dict(C=0),
    "no_mipmap": dict(levels=((32, 24),), pc=0),  # one level, minified 4-8 times
    "two_levels": dict(levels=((3, 5), (1, 2)), aggr_rgb_func="hard"),
    "empty_batch": dict(counts=(0, 0)),
    "one_mesh": dict(counts=(12,), aggr_rgb_gamma=0.1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_reference_float64(name):
    opt = dict(CASES[name])
    counts, C, Ct = opt.pop("counts", (5, 0, 9)), opt.pop("C", 3), opt.pop("Ct", 2)
    levels, pc, wrap = opt.pop("levels", LEVELS), opt.pop("pc", 1), opt.pop("wrap", 0)
    args = _scene(counts, C, Ct, levels, seed=len(name))
    s = RasterSettings.from_options(image_size=(H, W), **opt)
    background = [0.1 * i - 0.2 for i in range(C + Ct + 4)]
    bi = _buf_ints(pc, wrap, levels, Ct)
    ref = _run("reference", *args, s, bi, background)
    cpu = _run("cpu", *args, s, bi, background)
    _close(ref[0], cpu[0], 1e-9, "buffers")
    _close(ref[1], cpu[1], 1e-9, "aggr")
    for what, a, b in zip(("face_vertices", "attributes", "face_uvs", "texture"), ref[2], cpu[2]):
        _close(a, b, 1e-9, f"grad {what}")
    if sum(counts):  # the scene reaches the pixels: the test can fail
        assert (ref[0][:, -1] > 0).any() and any(g.abs().max() > 0 for g in ref[2] if g.numel())
    if "frank" in name:
        assert torch.isfinite(ref[0]).all() and all(torch.isfinite(g).all() for g in ref[2])


def test_non_finite_uv_gives_nan_texture_values():
    fv, attributes, uvs, texture, offsets, grad = _scene((4,), 1, 2, LEVELS, seed=3)
    s = RasterSettings.from_options(image_size=(H, W), aggr_rgb_func="hard")
    bi, background = _buf_ints(1, 0, LEVELS, 2), [0.0] * 7
    winners = _run("reference", fv, attributes, uvs, texture, offsets, grad, s, bi, background)[1][:, 1]
    uvs[int(winners.max()), 2, 0] = math.inf
    ref = _run("reference", fv, attributes, uvs, texture, offsets, grad, s, bi, background)
    cpu = _run("cpu", fv, attributes, uvs, texture, offsets, grad, s, bi, background)
    assert ref[0][:, 1:3].isnan().any() and not ref[0][:, 3:].isnan().any()
    _close(ref[0], cpu[0], 1e-9, "buffers")


# float32 against the float64 reference. The softmax weights exp((zt - m) / gamma) carry the float32 rounding of the
# normalised depth zt (~6e-8) divided by gamma: at gamma = 1e-2 relative errors ~1e-5 in the weights, so the
# channels (values up to ~5) agree to ~3e-5; hard buffers are float32 roundings of the same value (~1e-6). Gradients
# add up ~10^2 (pixel, face) terms of both signs and the vertex gradients scale with 1 / gamma: 2e-4 of the largest.
@pytest.mark.parametrize("opt", [dict(aggr_rgb_gamma=1e-2), dict(aggr_rgb_func="hard"), dict(pc=0, wrap=1)])
def test_kernel_float32(opt):
    opt = dict(opt)
    pc, wrap = opt.pop("pc", 1), opt.pop("wrap", 0)
    args = _scene((6, 0, 8), 3, 2, LEVELS, seed=11)
    s = RasterSettings.from_options(image_size=(H, W), aggr_rgb_gamma=opt.pop("aggr_rgb_gamma", 1e-2), **opt)
    bi, background = _buf_ints(pc, wrap, LEVELS, 2), [0.5] * 9
    ref = _run("reference", *args, s, bi, background)
    f32 = [t.float() if t.is_floating_point() else t for t in args]
    cpu = _run("cpu", *f32, s, bi, background)
    _close(ref[0], cpu[0].double(), 1e-5, "buffers")
    for what, a, b in zip(("face_vertices", "attributes", "face_uvs", "texture"), ref[2], cpu[2]):
        err = (a - b.double()).abs().max().item()
        assert err <= 2e-4 * a.abs().max().item(), f"grad {what}: {err:.3g}"


@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_threads_and_chunks(rgb, monkeypatch):
    """1 and 2 threads give identical results (every gradient deterministic); face chunks of a few (face, tile)
    entries give the reference's results (the texture gradient's summation order differs: rounding only)."""
    levels = ((16, 12), (8, 6), (4, 3), (2, 1), (1, 1))
    args = _scene((30, 0, 45, 7), 3, 2, levels, seed=5)
    s = RasterSettings.from_options(image_size=(H, W), aggr_rgb_func=rgb, dist_scale=0.05)
    bi, background = _buf_ints(1, 0, levels, 2), [0.0] * 9
    runs = []
    for threads, entries, slots in ((1, 1 << 24, 1 << 27), (2, 1 << 24, 1 << 27), (2, 20, 2000)):
        monkeypatch.setattr(ops, "NUM_THREADS", threads)
        monkeypatch.setattr(ops, "FORWARD_ENTRIES", entries)
        monkeypatch.setattr(ops, "BACKWARD_BYTES", slots)
        runs.append(_run("cpu", *args, s, bi, background))
    one, two, chunked = runs
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    assert all(torch.equal(a, b) for a, b in zip(one[2], two[2]))
    assert torch.equal(one[0], chunked[0])  # the forward carries each pixel's state from chunk to chunk
    ref = _run("reference", *args, s, bi, background)
    for a, b in zip(ref[2], chunked[2]):
        _close(a, b, 1e-9, "chunked gradient")


@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_tile_size_changes_only_the_rounding(rgb, monkeypatch):
    """Tiles of 4 and 8 pixels (the two of ops.cpu_tile_size's rule) and 5: the same buffers and aggr bitwise (every
    pixel folds its faces in ascending index whatever the tiling), the gradients to float64 rounding (each face sums
    its per-tile partial sums, regrouped by another tiling). Soft: logistic coverage and softmax; hard: the closed
    inside test and the closest face."""
    args = _scene((9, 0, 12), 3, 2, LEVELS, seed=17)
    opt = dict(aggr_rgb_func=rgb, dist_scale=0.05)
    if rgb == "hard":
        opt.update(dist_func="hard", dist_scale=0.0, dist_eps=1.0, aggr_alpha_func="hard")
    s = RasterSettings.from_options(image_size=(H, W), **opt)
    bi, background = _buf_ints(1, 0, LEVELS, 2), [0.1] * 9
    runs = {}
    for tile in (4, 8, 5):
        monkeypatch.setattr(ops, "TILE_SIZE", tile)
        runs[tile] = _run("cpu", *args, s, bi, background)
    four = runs[4]
    assert (four[0][:, -1] > 0.5).any() and four[2][0].abs().max() > 0  # drawn, with vertex gradients
    for tile in (8, 5):
        assert torch.equal(runs[tile][0], four[0]) and torch.equal(runs[tile][1], four[1]), tile
        for what, a, b in zip(("face_vertices", "attributes", "face_uvs", "texture"), four[2], runs[tile][2]):
            _close(a, b, 1e-12, f"grad {what}, tile {tile}")


def test_render_buffers_cpu_matches_reference():
    """The public API, padded input, autograd through the op, the mip pyramid built by mip_pyramid."""
    g = torch.Generator().manual_seed(7)
    fv, attributes, uvs, _, _, _ = _scene((10, 10), 4, 0, (), seed=7)
    fv, attributes, uvs = fv.reshape(2, 10, 3, 3), attributes.reshape(2, 10, 3, 4), uvs.reshape(2, 10, 3, 2)
    image = torch.rand(2, 20, 12, 3, generator=g, dtype=torch.float64)
    out = {}
    for backend in ("reference", "cpu"):
        leaves = [t.clone().requires_grad_() for t in (fv, attributes, uvs, image)]
        res = render_buffers(
            leaves[0],
            leaves[1],
            face_uvs=leaves[2],
            texture=leaves[3],
            image_size=(H, W),
            aggr_func="softmax",
            aggr_rgb_gamma=1e-2,
            perspective_correct=True,
            backend=backend,
        )
        loss = sum(
            (t * torch.linspace(-1, 1, t.numel(), dtype=t.dtype).reshape(t.shape)).sum()
            for t in res
            if t is not None and t.is_floating_point()
        )
        out[backend] = (res, torch.autograd.grad(loss, leaves))
    for a, b in zip(out["reference"][0], out["cpu"][0]):
        if a is not None:
            _close(a, b, 1e-9, "buffer")
    for a, b in zip(out["reference"][1], out["cpu"][1]):
        _close(a, b, 1e-9, "gradient")
    assert mip_pyramid(image)[1][0] == (20, 12)


def test_binding_checks_levels_and_wrap():
    """The C++ entry points check the buffer parameters themselves (ValueError naming them)."""
    fv, attributes, uvs, texture, offsets, _ = _scene((3,), 2, 2, LEVELS, seed=1)
    s = RasterSettings.from_options(image_size=(H, W))
    ints, floats = s.to_lists()
    ip = [1, 3, H, W, 1, *ints[2:5], 0, *ints[6:]]
    buffers, aggr = fv.new_empty(1, 9, H, W), fv.new_empty(1, 2, H, W)
    Tt = texture.shape[1]

    def call(bi, sizes=(2, 2, Tt), background=(0.0,) * 8):
        _ext._C.render_buffers_forward(
            _ext.dtype_code(fv),
            ip,
            floats,
            bi,
            sizes,
            list(background),
            s.reach,
            8,
            1 << 20,
            1,
            *map(_ext.ptr, (fv, attributes, uvs, texture, offsets, buffers, aggr)),
        )

    call(_buf_ints(1, 0, LEVELS, 2))
    with pytest.raises(ValueError, match="levels must sum"):
        call(_buf_ints(1, 0, LEVELS[:-1], 2))
    with pytest.raises(ValueError, match="wrap"):
        call(_buf_ints(1, 2, LEVELS, 2))
    with pytest.raises(ValueError, match="perspective_correct"):
        call(_buf_ints(3, 0, LEVELS, 2))
    with pytest.raises(ValueError, match="L <= 32"):
        call([1, 0, 4, 8, 6])
    with pytest.raises(ValueError, match="background"):
        call(_buf_ints(1, 0, LEVELS, 2), background=(0.0,) * 7)
    with pytest.raises(ValueError, match="at least one level"):
        call([1, 0, 0], sizes=(2, 2, 0))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name", ["softmax", "hard", "affine_clamp", "average_gaussian", "frank_tiny_p", "no_texture", "empty_batch"]
)
def test_cuda_kernel_matches_reference(name):
    """The CUDA kernels against the reference in float64."""
    opt = dict(CASES[name])
    counts, C, Ct = opt.pop("counts", (5, 0, 9)), opt.pop("C", 3), opt.pop("Ct", 2)
    levels, pc, wrap = opt.pop("levels", LEVELS), opt.pop("pc", 1), opt.pop("wrap", 0)
    args = _scene(counts, C, Ct, levels, seed=len(name))
    s = RasterSettings.from_options(image_size=(H, W), **opt)
    background = [0.1 * i - 0.2 for i in range(C + Ct + 4)]
    bi = _buf_ints(pc, wrap, levels, Ct)
    ref = _run("reference", *args, s, bi, background)
    gpu = _run("cuda", *(t.cuda() for t in args), s, bi, background)
    _close(ref[0], gpu[0].cpu(), 1e-9, "buffers")
    _close(ref[1], gpu[1].cpu(), 1e-9, "aggr")
    for what, a, b in zip(("face_vertices", "attributes", "face_uvs", "texture"), ref[2], gpu[2]):
        _close(a, b.cpu(), 1e-9, f"grad {what}")


def _cuda_scene(rgb):
    """Large overlapping faces on the GPU (float32) with a mipmapped texture of few texels (levels 8 x 6 to 1 x 1 over
    61 x 47 pixels: every texel is tapped by many fragments): the ops' arguments after grad_buffers, buffers, aggr."""
    g = torch.Generator().manual_seed(5)
    counts, C, Ct, levels = (40, 0, 25), 2, 3, ((8, 6), (4, 3), (2, 2), (1, 1))
    N, B = sum(counts), len(counts)
    centre = torch.rand(N, 1, 2, generator=g) * 1.2 - 0.6
    xy = centre + (torch.rand(N, 3, 2, generator=g) - 0.5) * 1.4
    fv = torch.cat([xy, 1.5 + 3 * torch.rand(N, 3, 1, generator=g)], -1).reshape(N, 9)
    offsets = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int64)
    texels = sum(h * w for h, w in levels)
    args = [fv, torch.randn(N, 3, C, generator=g), torch.rand(N, 3, 2, generator=g) * 2 - 0.5]
    args += [torch.rand(B, texels, Ct, generator=g), offsets]
    s = RasterSettings.from_options(image_size=(61, 47), aggr_rgb_func=rgb, aggr_rgb_gamma=0.3, dist_scale=0.02)
    ints, floats = s.to_lists()
    return (*(t.cuda() for t in args), ints, floats, _buf_ints(1, 0, levels, Ct), [0.1] * (C + Ct + 4), "cuda")


def _cuda_passes(scene, runs):
    """Forward and `runs` backward passes of the CUDA ops on `scene` (no host copy: the upstream gradient is made on
    the device)."""
    buffers, aggr = ops.render_buffers_fwd(*scene)
    gen = torch.Generator(device="cuda").manual_seed(2)
    grad = torch.randn(buffers.shape, generator=gen, device="cuda")
    return [ops.render_buffers_bwd(grad, *scene[:5], buffers, aggr, *scene[5:]) for _ in range(runs)]


@pytest.mark.gpu
@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_cuda_texture_gradient_is_bitwise_deterministic(rgb):
    """Five backward passes give bit-identical gradients: the texture's (its texels' taps were float atomics, whose
    order varies between runs) and every other."""
    grads = _cuda_passes(_cuda_scene(rgb), 5)
    assert grads[0][3].abs().max() > 0  # the texture gets gradients: the test can fail
    for g in grads[1:]:
        for a, b in zip(g, grads[0]):
            assert torch.equal(a, b)


@pytest.mark.gpu
def test_cuda_buffers_do_not_synchronise_the_device():
    """Forward and backward once warm: no synchronisation through torch (sync_debug_mode "error" sees torch's own
    syncs only: .item(), blocking copies in the launchers) and no device-wide one (a cudaFree or cudaDeviceSynchronize
    would wait for the kernel sleeping on another stream). The one stream synchronisation of a call, the read of the
    binning's totals (docs/gpu.md), waits for this stream only."""
    scene = _cuda_scene("softmax")
    _cuda_passes(scene, 1)  # warm: offsets checked, memory pools grown
    assert_no_device_sync(lambda: _cuda_passes(scene, 1))
    torch.cuda.synchronize()
