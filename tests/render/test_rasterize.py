"""The rasterizer: every backend against the float64 reference, the properties and anchors of
docs/math/render.md §7, edge cases and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from relaxops import _ext
from relaxops.render import ops
from relaxops.render import relaxations as R
from relaxops.render.functional import Renderer, rasterize
from testing import assert_no_device_sync, outputs_and_grads

needs_cpu = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
# compiled kernels and their device; the CUDA kernel runs where a GPU is lent (marker `gpu`)
KERNELS = [
    pytest.param("cpu", "cpu", marks=needs_cpu, id="cpu"),
    pytest.param("cuda", "cuda", marks=pytest.mark.gpu, id="cuda"),
]
SMOOTH = [d for d in R.DISTRIBUTIONS if d != "hard"]
T_PARAMS = [
    ("probabilistic", None),
    ("max", None),
    ("einstein", None),
    ("hamacher", 0.5),
    ("frank", 2.0),
    ("yager", 2.0),
    ("aczel_alsina", 2.0),
    ("dombi", 2.0),
    ("schweizer_sklar", -2.0),
    ("hard", None),
    ("average", None),
]
TRI_A = [[-0.5, -0.4, 2], [0, 0.5, 2], [0.6, -0.3, 2]]  # docs/math/render.md §7.1 / §7.6 scene A
TRI_GP = [[-0.5123, -0.4071, 2], [0.0117, 0.5043, 2], [0.6089, -0.3021, 2]]  # the same, in general position


def faces(*tris, dtype=torch.float64):
    """``[1, F, 3, 3]`` from F triangles given as three (x, y, z) vertices each."""
    return torch.tensor([list(tris)], dtype=dtype)


def random_scene(B=2, F=7, T=4, seed=0, dtype=torch.float64):
    """Triangles of about a third of the image, straddling 4-pixel tiles, depths in [1.5, 4.5]."""
    g = torch.Generator().manual_seed(seed)
    fv = torch.rand(B, F, 3, 3, generator=g, dtype=dtype) * 1.6 - 0.8
    fv[..., 2] = torch.rand(B, F, 3, generator=g, dtype=dtype) * 3 + 1.5
    return fv, torch.rand(B, F, T, 3, generator=g, dtype=dtype)


def raster_call(fv, tex, backend, **kw):
    """A case's call, (function, args, kwargs): what the reference checks run and the op checks
    (tests/render/test_robustness.py) check the ops of."""
    return rasterize, (fv, tex), dict(backend=backend, **kw)


def raster_grads(fv, tex, backend, device="cpu", **kw):
    """Image and the gradients (fv, tex) of <image, G> for a fixed random G (on the CPU)."""
    fn, args, kwargs = raster_call(fv.to(device), tex.to(device), backend, **kw)
    return [t.cpu() for t in outputs_and_grads(fn, *args, seed=1, **kwargs)]


def assert_backends_agree(fv, tex, backend="cpu", device="cpu", dtype=torch.float64, **kw):
    """A kernel against the float64 reference: float64 to 1e-9; float32 within the docs/math/render.md §5.5 bounds
    (forward 2e-6, here 1e-5 for sums of several faces; gradients 1e-4 relative) or at most twice as far from float64 as
    the reference run in float32 (at the discontinuities of the forward: coverage tests, texel and depth
    choices)."""
    want = raster_grads(fv.double(), tex.double(), "reference", **kw)
    got = raster_grads(fv.to(dtype), tex.to(dtype), backend, device=device, **kw)
    low = raster_grads(fv.to(dtype), tex.to(dtype), "reference", **kw) if dtype != torch.float64 else want
    names = ("image", "grad face_vertices", "grad textures")
    for name, g, w, lo in zip(names, got, want, low):
        if dtype == torch.float64:
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}")
        else:
            scale = w.abs().max().item() + 1
            atol = 1e-5 if name == "image" else 1e-4 * scale
            err, ref_err = (g.double() - w).abs().max().item(), (lo.double() - w).abs().max().item()
            assert err <= atol or err <= 2 * ref_err + atol, f"{name}: error {err:.3g}, reference's {ref_err:.3g}"


@pytest.mark.parametrize("backend,device", KERNELS)
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dist", R.DISTRIBUTIONS)
def test_kernel_matches_reference_for_every_distribution(backend, device, dist, squared):
    fv, tex = random_scene(seed=R.DISTRIBUTIONS.index(dist))
    for rgb in ("softmax", "hard"):
        assert_backends_agree(
            fv,
            tex,
            backend,
            device,
            image_size=(13, 17),
            dist_func=dist,
            dist_scale=0.003 if squared else 0.05,
            dist_squared=squared,
            dist_shape=0.5,
            dist_shift=0.3,
            aggr_rgb_func=rgb,
            aggr_rgb_gamma=0.03,
            background_color=(0.2, 0.3, 0.4),
            dist_eps=50,
            near=2,
            far=4,
        )


@pytest.mark.parametrize("backend,device", KERNELS)
@pytest.mark.parametrize("alpha,p", T_PARAMS)
def test_kernel_matches_reference_for_every_t_conorm(backend, device, alpha, p):
    fv, tex = random_scene(F=9, seed=3)
    for dist, squared in (("logistic", False), ("cauchy", True), ("uniform", False)):
        assert_backends_agree(
            fv,
            tex,
            backend,
            device,
            image_size=(15, 11),
            dist_func=dist,
            dist_scale=0.003 if squared else 0.05,
            dist_squared=squared,
            aggr_alpha_func=alpha,
            aggr_alpha_t_conorm_p=p,
            aggr_rgb_gamma=0.05,
            double_side=False,
        )


@pytest.mark.parametrize("backend,device", KERNELS)
@pytest.mark.parametrize("p", [5e-324, 1e-30, 1e-17, 1 - 1e-9, 1 + 1e-9, 1e20, 1e30])
def test_kernel_frank_is_finite_and_matches_reference_over_its_parameter_range(backend, device, p):
    """Frank's T-conorm and its gradient (docs/math/render.md §3.3) at the ends of p's range and next to 1, in
    float64 and float32: its textbook form gave inf and NaN for p below about 1e-16 (1 - p rounds to 1), in float32
    also above about 1e19 (p^2 overflows) and next to 1 (p rounds to 1), and p below 1e-45 is 0 in float32."""
    fv, tex = random_scene(F=9, seed=3)
    kw = dict(
        image_size=(15, 11),
        dist_func="logistic",
        dist_scale=0.05,
        aggr_alpha_func="frank",
        aggr_alpha_t_conorm_p=p,
        aggr_rgb_gamma=0.05,
    )
    for dtype in (torch.float64, torch.float32):
        got = raster_grads(fv.to(dtype), tex.to(dtype), backend, device=device, **kw)
        assert all(torch.isfinite(g).all() for g in got), dtype
        assert_backends_agree(fv, tex, backend, device, dtype=dtype, **kw)


@pytest.mark.parametrize("backend,device", KERNELS)
@pytest.mark.parametrize("texture_type", ["surface", "vertex"])
@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_kernel_matches_reference_float32_and_vertex_textures(backend, device, texture_type, rgb):
    fv, tex = random_scene(F=6, T=9 if texture_type == "surface" else 3, seed=5)
    for dtype in (torch.float64, torch.float32):
        assert_backends_agree(
            fv,
            tex,
            backend,
            device,
            dtype=dtype,
            image_size=(19, 21),
            dist_func="gaussian",
            dist_scale=0.04,
            texture_type=texture_type,
            aggr_rgb_func=rgb,
            aggr_rgb_gamma=0.1,
            dist_eps=30,
        )


@needs_cpu
@pytest.mark.parametrize("coverage", ["soft", "hard"])
def test_results_do_not_depend_on_tile_size_threads_or_passes(coverage, monkeypatch):
    """The image is bitwise independent of the tiling, the thread count and the number of passes; so are the
    gradients for one tile size (each face sums its per-tile partial sums in tile order), while another tile
    size regroups those sums (float64 rounding only). Soft: logistic coverage and softmax RGB; hard: the closed
    inside test, hard alpha and hard RGB; tiles of 4 and 8 are ops.cpu_tile_size's two choices."""
    assert ops.TILE_SIZE is None  # the rule of ops.cpu_tile_size
    fv, tex = random_scene(B=3, F=11, seed=7)
    kw = dict(image_size=(37, 29), dist_func="logistic", dist_scale=0.02, aggr_rgb_gamma=0.05, dist_eps=100)
    if coverage == "hard":
        kw.update(dist_func="hard", dist_scale=0.0, dist_eps=1.0, aggr_alpha_func="hard", aggr_rgb_func="hard")
    default = ops.cpu_tile_size(R.RasterSettings.from_options(**kw))
    sizes = {
        size: ops.cpu_tile_size(R.RasterSettings.from_options(image_size=size)) for size in (512, (700, 748), 1024)
    }
    assert sizes == {512: 4, (700, 748): 4, 1024: 8}  # 4 below 2^19 pixels (docs/math/render.md §9)
    base = raster_grads(fv, tex, "cpu", **kw)
    assert base[0][:, 3].max() > 0.5 and base[2].abs().max() > 0  # the scene is drawn and has gradients
    runs = ((4, 1, 1 << 24), (8, 1, 1 << 24), (8, 2, 3), (4, 2, 1), (1, 1, 1 << 24), (5, 2, 1 << 24), (64, 2, 7))
    for tile, threads, entries in runs:
        monkeypatch.setattr(ops, "TILE_SIZE", tile)
        monkeypatch.setattr(ops, "NUM_THREADS", threads)
        monkeypatch.setattr(ops, "FORWARD_ENTRIES", entries)  # 1 and 3: one pass per face or two
        monkeypatch.setattr(ops, "BACKWARD_BYTES", entries)
        img, gfv, gtex = raster_grads(fv, tex, "cpu", **kw)
        assert torch.equal(img, base[0]), (tile, threads, entries)
        for g, w in ((gfv, base[1]), (gtex, base[2])):
            if tile == default:
                assert torch.equal(g, w), (tile, threads, entries)
            else:
                torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@needs_cpu
def test_repeated_runs_are_bitwise_identical_and_ties_go_to_the_lowest_index():
    tri = [[-0.6, -0.5, 2.0], [0.0, 0.6, 2.0], [0.6, -0.5, 2.0]]
    fv = faces(tri, tri, tri)  # three identical faces at the same depth
    tex = torch.tensor([[[[1.0, 0, 0]], [[0, 1.0, 0]], [[0, 0, 1.0]]]], dtype=torch.float64)
    kw = dict(image_size=9, dist_func="logistic", dist_scale=0.05, aggr_rgb_func="hard", aggr_alpha_func="max")
    img, gfv, gtex = raster_grads(fv, tex, "cpu", **kw)
    inside = img[0, 3] > 0.99
    assert torch.equal(img[0, 0][inside], torch.ones_like(img[0, 0][inside]))  # face 0's colour wins
    assert gtex[0, 1:].abs().sum() == 0 and gtex[0, 0].abs().sum() > 0
    torch.testing.assert_close(gfv[0, 0], gfv[0, 1], rtol=0, atol=0)  # max: every tied face gets the gradient
    for g, w in zip(raster_grads(fv, tex, "cpu", **kw), (img, gfv, gtex)):
        assert torch.equal(g, w)


def backends():
    return ["reference"] + (["cpu"] if _ext.has_cpu() else [])


@pytest.mark.parametrize("backend", backends())
def test_hard_limit_is_the_conventional_silhouette(backend):
    """Anchor of docs/math/render.md §7.1: the hard renderer covers exactly 31 pixel centres of scene A at S = 16."""
    img = rasterize(
        faces(TRI_A),
        image_size=16,
        dist_func="hard",
        dist_scale=1e-4,
        dist_eps=1,
        aggr_alpha_func="hard",
        aggr_rgb_func="hard",
        backend=backend,
    )
    mask = torch.zeros(16, 16, dtype=torch.bool)
    for row, (c0, c1) in {5: (7, 8), 6: (7, 9), 7: (6, 10), 8: (5, 10), 9: (5, 11), 10: (4, 11)}.items():
        mask[row, c0 : c1 + 1] = True
    assert torch.equal(img[0, 3] > 0.5, mask) and torch.equal(img[0, 3], mask.double())
    assert torch.equal(img[0, :3].amax(0) > 0, mask)  # white where covered, black background elsewhere


@pytest.mark.parametrize("backend", backends())
def test_small_tau_converges_to_the_hard_silhouette(backend):
    """docs/math/render.md §7.1: every distribution's alpha > 0.5 equals the hard mask when every |u| >= 1e3."""
    fv = faces([[-0.52, -0.43, 2], [0.03, 0.51, 2], [0.61, -0.33, 2]])
    hard = rasterize(fv, image_size=16, dist_func="hard", dist_scale=0.0, backend=backend)[0, 3]
    for dist in SMOOTH:
        for squared, tau in ((False, 1e-6), (True, 1e-9)):
            a = rasterize(
                fv, image_size=16, dist_func=dist, dist_scale=tau, dist_squared=squared, dist_shape=0.5, backend=backend
            )[0, 3]
            assert torch.equal(a > 0.5, hard > 0.5), (dist, squared)
            if dist not in ("cauchy", "reciprocal", "levy", "levy_rev"):
                assert (a - hard).abs().max() <= 1e-6, (dist, squared)


# Anchor of docs/math/render.md §7.2: pixel (8, 5) lies on edge P0 P1 of scene A; alpha there at tau = 0.05
EDGE_VALUES = {
    "uniform": 0.5,
    "gaussian": 0.5,
    "logistic": 0.5,
    "cauchy": 0.5,
    "gumbel_max": 0.3678793,
    "gumbel_min": 0.6321205,
    "exponential": 0.0,
    "exponential_rev": 0.9999997,
}


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dist", list(EDGE_VALUES))
def test_edge_pixel_values(backend, dist):
    a = rasterize(faces(TRI_A), image_size=16, dist_func=dist, dist_scale=0.05, backend=backend)[0, 3, 8, 5]
    assert abs(a.item() - EDGE_VALUES[dist]) < 1e-6


# ON_EDGE: pixel (8, 5) of scene A lies on edge P0 P1, where the original's float32 distance is ~1e-8 instead of
# 0 (docs/math/render.md §2.5); gamma_rev with k = 0.5 has F'(0) = inf, so its anchors there (sum alpha: 6e-4) are not
# comparable. Scene A of docs/math/render.md §7.6 (float32 anchors of the original's semantics): sum alpha,
# alpha(7, 8), alpha(4, 8)
SCENE_A = {
    False: {
        "uniform": (30.345699, 1.0, 0.375),
        "cubic_hermite": (30.374809, 1.0, 0.316406),
        "wigner_semicircle": (30.366037, 1.0, 0.342519),
        "gaussian": (30.602334, 0.999989, 0.401294),
        "laplace": (31.340498, 0.992868, 0.389401),
        "logistic": (32.149138, 0.985936, 0.437824),
        "gudermannian": (31.607617, 0.990920, 0.421239),
        "cauchy": (39.238617, 0.926442, 0.422021),
        "reciprocal": (42.214699, 0.904762, 0.4),
        "gumbel_max": (25.723261, 0.985837, 0.276920),
        "gumbel_min": (36.858062, 1.0, 0.541044),
        "exponential": (21.567911, 0.985736, 0.0),
        "exponential_rev": (41.113092, 1.0, 0.778801),
        "gamma": (25.630387, 0.996449, 0.0),
        "gamma_rev": (35.691864, 1.0, 0.4795),
        "levy": (11.957935, 0.627626, 0.0),
        "levy_rev": (104.124832, 1.0, 0.9545),
    },
    True: {
        "uniform": (30.324663, 1.0, 0.46875),
        "cubic_hermite": (30.374181, 1.0, 0.453186),
        "wigner_semicircle": (30.354862, 1.0, 0.460237),
        "gaussian": (30.273723, 1.0, 0.475082),
        "laplace": (30.443089, 1.0, 0.469707),
        "logistic": (30.550994, 1.0, 0.48438),
        "gudermannian": (30.461285, 1.0, 0.480119),
        "cauchy": (32.300772, 0.982395, 0.480132),
        "reciprocal": (33.129789, 0.97377, 0.470588),
        "gumbel_max": (26.653168, 1.0, 0.344902),
        "gumbel_min": (34.202997, 1.0, 0.609143),
        "exponential": (21.74266, 1.0, 0.0),
        "exponential_rev": (39.143521, 1.0, 0.939413),
        "gamma": (24.761593, 1.0, 0.0),
        "gamma_rev": (35.981263, 1.0, 0.723674),
        "levy": (14.270013, 0.81398, 0.0),
        "levy_rev": (68.907039, 1.0, 0.999937),
    },
}
# squared mode, d sum(alpha) / d (x0, y0, x1, y1, x2, y2) (no on-edge quirk in squared mode: 2 t D = 0 there)
SCENE_A_SQUARED_GRAD = {
    "uniform": (-26.00783, -23.45478, -9.54239, 37.28740, 26.26438, -12.78316),
    "logistic": (-25.42692, -33.55925, -2.57053, 35.62212, 28.14978, -8.73297),
    "cauchy": (-23.36070, -27.29836, -2.72555, 35.25682, 27.84235, -11.13179),
    "gumbel_min": (-26.37604, -33.72475, -5.70902, 37.43009, 27.64972, -12.76208),
    "levy_rev": (-31.55713, -31.74468, -4.35861, 42.37159, 35.77316, -7.95865),
}


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("squared", [False, True])
def test_scene_a_anchors(backend, squared):
    fv = faces(TRI_A)
    for dist, (total, a78, a48) in SCENE_A[squared].items():
        a = fv.clone().requires_grad_()
        img = rasterize(
            a,
            image_size=16,
            dist_func=dist,
            dist_scale=0.0025 if squared else 0.05,
            dist_squared=squared,
            dist_shape=0.5,
            backend=backend,
        )
        img[0, 3].sum().backward()
        got = (img[0, 3].sum().item(), img[0, 3, 7, 8].item(), img[0, 3, 4, 8].item())
        if dist == "gamma_rev":  # k = 0.5 is steep at the on-edge pixel (8, 5), see ON_EDGE
            continue
        assert got == pytest.approx((total, a78, a48), abs=2e-5), dist
        if squared and dist in SCENE_A_SQUARED_GRAD:
            g = a.grad[0, 0, :, :2].reshape(-1).tolist()
            assert g == pytest.approx(SCENE_A_SQUARED_GRAD[dist], rel=1e-4, abs=1e-4), dist


def test_general_position_gradient_anchors():
    """docs/math/render.md §7.5: analytic d sum(alpha) / d (x, y) of the general-position triangle (S = 16)."""
    want = {
        ("logistic", False, None): (-26.828, -19.438, -1.521, 35.922, 28.974, -18.511),
        ("logistic", True, None): (-28.122, -33.815, -3.459, 35.404, 28.531, -12.801),
        ("gaussian", False, "yager"): (-27.307, -18.769, -1.481, 36.161, 28.328, -20.530),
        ("uniform", False, None): (-26.513, -13.742, -5.739, 36.930, 26.311, -22.284),
    }
    for backend in backends():
        for (dist, squared, alpha), grads in want.items():
            a = faces(TRI_GP).requires_grad_()
            img = rasterize(
                a,
                image_size=16,
                dist_func=dist,
                dist_scale=0.0025 if squared else 0.05,
                dist_squared=squared,
                aggr_alpha_func=alpha or "probabilistic",
                aggr_alpha_t_conorm_p=2.0,
                backend=backend,
            )
            img[0, 3].sum().backward()
            assert a.grad[0, 0, :, :2].reshape(-1).tolist() == pytest.approx(grads, abs=2e-3), (backend, dist)


# Scene B of docs/math/render.md §7.6: two faces, logistic tau = 0.05: sum alpha, alpha(9, 8), d sum(alpha) / d x0
# of face 0
SCENE_B = {
    ("max", None): (42.613102, 0.961358, -24.90417),
    ("probabilistic", None): (44.694072, 0.99547, -24.63643),
    ("einstein", None): (45.259808, 0.99755, -24.49832),
    ("hamacher", 0): (43.701067, 0.970068, -24.80591),
    ("hamacher", 0.5): (44.307844, 0.992131, -24.71417),
    ("hamacher", 2): (45.259811, 0.99755, -24.49832),
    ("frank", 0.5): (44.461626, 0.994036, -24.68544),
    ("frank", 2): (44.926836, 0.996689, -24.58352),
    ("yager", 0.5): (53.800798, 1.0, -23.8064),
    ("yager", 2): (44.234486, 1.0, -24.69875),
    ("aczel_alsina", 0.5): (50.188964, 0.999977, -23.21904),
    ("aczel_alsina", 2): (43.139815, 0.97968, -24.89811),
    ("dombi", 0.5): (47.414619, 0.983548, -23.8857),
    ("dombi", 2): (42.849566, 0.962954, -24.8976),
    ("schweizer_sklar", -0.5): (44.063966, 0.979637, -24.75344),
    ("schweizer_sklar", -2): (43.329509, 0.963276, -24.84046),
    ("hard", None): (38.0, 1.0, -23.57417),
}


@pytest.mark.parametrize("backend", backends())
def test_scene_b_aggregation_anchors(backend):
    """Scene B of docs/math/render.md §7.6. The y0 gradient is not compared: face 0 has a pixel centre on its edge,
    where the original's float32 distance is ~1e-8 rather than 0 (the guard of docs/math/render.md §2.5)."""
    for (alpha, p), (total, a98, gx0) in SCENE_B.items():
        a = faces(TRI_A, [[-0.2, -0.6, 3], [0.1, 0.2, 3], [0.7, -0.5, 3]]).requires_grad_()
        img = rasterize(
            a,
            image_size=16,
            dist_func="logistic",
            dist_scale=0.05,
            aggr_alpha_func=alpha,
            aggr_alpha_t_conorm_p=p,
            backend=backend,
        )
        img[0, 3].sum().backward()
        got = (img[0, 3].sum().item(), img[0, 3, 9, 8].item(), a.grad[0, 0, 0, 0].item())
        assert got == pytest.approx((total, a98, gx0), abs=1e-4), (alpha, p)


SCENE_C = faces(
    [[-0.5123, -0.4071, 2], [0.0117, 0.5043, 2.2], [0.6089, -0.3021, 2.4]],
    [[-0.2031, -0.6013, 3], [0.1042, 0.2087, 2.5], [0.7033, -0.5011, 3.1]],
)[0]


@pytest.mark.parametrize("backend", backends())
def test_scene_c_rgb_anchors(backend):
    """docs/math/render.md §7.6 scene C: softmax and hard RGB, texture and vertex gradients, upstream (1, 0.5, 0,
    0.3)."""
    tex = torch.tensor([[[[1, 0.5, 0.25]], [[0, 1, 0]]]], dtype=torch.float64)
    upstream = torch.tensor([1, 0.5, 0, 0.3], dtype=torch.float64)[None, :, None, None]
    for rgb in ("softmax", "hard"):
        fv, t = SCENE_C[None].clone().requires_grad_(), tex.clone().requires_grad_()
        img = rasterize(
            fv,
            t,
            image_size=16,
            dist_func="logistic",
            dist_scale=0.05,
            aggr_rgb_func=rgb,
            aggr_rgb_eps=1e-3,
            aggr_rgb_gamma=3e-2,
            background_color=(0.2, 0.3, 0.4),
            backend=backend,
        )
        (img * upstream).sum().backward()
        px = img[0, :, 9, 8].tolist()
        if rgb == "softmax":
            sums = img[0].sum((1, 2)).tolist()
            assert sums == pytest.approx([165.032269, 158.483866, 50.008067, 45.563792], abs=2e-4)
            assert px == pytest.approx([0.567386, 0.716307, 0.141847, 0.995878], abs=2e-6)
            assert t.grad[0, :, 0].reshape(-1).tolist() == pytest.approx(
                [160.032227, 80.016113, 0, 70.96772, 35.48386, 0], rel=1e-5
            )
            want = [
                [-10.119149, -40.872036, -1.077122],
                [19.469658, 27.525442, -0.912305],
                [60.428867, 0.205316, -1.789694],
                [29.121239, 5.263604, 0.960933],
                [-24.603865, -38.33802, 1.780676],
                [-33.898777, -28.758738, 1.04986],
            ]
            assert fv.grad[0].reshape(6, 3).tolist() == [pytest.approx(w, rel=1e-4, abs=1e-4) for w in want]
        else:
            assert img[0, 0].sum().item() == pytest.approx(74.2, abs=1e-4)
            assert px == pytest.approx([1, 0.5, 0.25, 0.995878], abs=2e-6)
            assert t.grad[0, :, 0].reshape(-1).tolist() == pytest.approx([31, 15.5, 0, 9, 4.5, 0], abs=1e-9)
            want = [
                [-8.381102, -1.638186],
                [-1.324911, 10.014319],
                [6.59234, 0.884402],
                [-3.188182, -6.362952],
                [1.194658, 2.384568],
                [5.193605, -4.349692],
            ]
            assert fv.grad[0, :, :, :2].reshape(6, 2).tolist() == [pytest.approx(w, rel=1e-4, abs=1e-4) for w in want]
            assert fv.grad[0, :, :, 2].abs().max() == 0


@pytest.mark.parametrize("backend", backends())
def test_scene_d_culling(backend):
    for eps, total in ((1e4, 39.238617), (2, 34.734652)):
        img = rasterize(faces(TRI_A), image_size=16, dist_func="cauchy", dist_scale=0.05, dist_eps=eps, backend=backend)
        assert img[0, 3].sum().item() == pytest.approx(total, abs=1e-4)


@needs_cpu
@pytest.mark.parametrize(
    "dist,m1", [("logistic", math.pi**2 / 12), ("gaussian", 0.25), ("uniform", 1 / 12), ("laplace", 0.5)]
)
def test_single_triangle_coverage_matches_its_integral(dist, m1):
    """docs/math/render.md §7.3: sum(alpha) (2/S)^2 = area + 2 tau^2 m1 (pi + sum_i cot(theta_i / 2)) + o(tau^2)."""
    P = torch.tensor(TRI_A, dtype=torch.float64)[:, :2]
    area = 0.47
    theta = []
    for k in range(3):
        u, v = P[(k + 1) % 3] - P[k], P[(k + 2) % 3] - P[k]
        theta.append(math.acos((u @ v / (u.norm() * v.norm())).item()))
    tau, S = 0.02, 1200
    want = area + 2 * tau**2 * m1 * (math.pi + sum(1 / math.tan(t / 2) for t in theta))
    img = rasterize(faces(TRI_A), image_size=S, dist_func=dist, dist_scale=tau, backend="cpu")
    got = img[0, 3].sum().item() * (2 / S) ** 2
    assert abs(got - want) < 2e-4 * area, (got, want)
    assert abs(got - area) > 5 * abs(got - want)  # the tau^2 term is resolved


# frank's gradient guard (q + copysign(1e-6, q), q = 2^(1 - D) - 1) departs from the derivative by ~1e-3
# relative once D > 1 - 1e-3: it is checked with cauchy, whose D stays below that here
GRADCHECK_T_CONORMS = [
    ("probabilistic", None),
    ("einstein", None),
    ("yager", 2.0),
    ("hamacher", 0.5),
    ("aczel_alsina", 2.0),
    ("dombi", 2.0),
    ("schweizer_sklar", -2.0),
]


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dist", SMOOTH)
def test_alpha_gradcheck(backend, dist, squared):
    """fp64 gradcheck of the alpha channel w.r.t. the vertices (general position, tiny image), every smooth
    distribution with a T-conorm of docs/math/render.md §7.5 (cycling through them). gamma_rev: tau and dist_eps keep z
    = s_h - u below the cap at 15, where F jumps (excluded by docs/math/render.md §5.5 (iii)), and the probabilistic
    T-conorm: its D comes within 1e-6 of 1 near the edges, where the clamps of the T-conorm gradients
    (docs/math/render.md §3.3, normative) depart from the exact derivative."""
    fv, _ = random_scene(B=1, F=3, seed=11)
    alpha, p = GRADCHECK_T_CONORMS[(2 * SMOOTH.index(dist) + squared) % len(GRADCHECK_T_CONORMS)]
    tau, eps = (0.01, 1e4) if squared else (0.1, 1e4)
    if dist == "gamma_rev":
        tau, eps = (0.03, 4) if squared else (0.3, 1e4)
        alpha, p = "probabilistic", None
    if dist == "cauchy":
        alpha, p = "frank", 2.0

    def alpha_of(v):
        return rasterize(
            v,
            image_size=(5, 6),
            dist_func=dist,
            dist_scale=tau,
            dist_squared=squared,
            dist_shape=2.0,
            dist_shift=0.3,
            dist_eps=eps,
            aggr_alpha_func=alpha,
            aggr_alpha_t_conorm_p=p,
            backend=backend,
        )[:, 3]

    assert torch.autograd.gradcheck(alpha_of, (fv.requires_grad_(),), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", backends())
def test_average_is_the_faces_mean_over_the_face_count(backend):
    """``average`` (docs/math/render.md §3.4) on scene B: alpha is the two faces' coverages (each alone: one face's
    alpha is its D) summed over the mesh's face count, a culled off-screen face counting 0 in the sum and 1 in the
    count; so are the gradients (1 / F per face). The forward is also independent of the cpu kernel's passes."""
    tri_b = [[-0.2, -0.6, 3], [0.1, 0.2, 3], [0.7, -0.5, 3]]
    off = [[v[0] + 5, v[1], v[2]] for v in TRI_GP]
    kw = dict(image_size=(16, 15), dist_func="logistic", dist_scale=0.05, dist_eps=100, backend=backend)
    single = []
    for tri in (TRI_A, tri_b):
        a = faces(tri).requires_grad_()
        img = rasterize(a, **kw)
        img[0, 3].sum().backward()
        single.append((img[0, 3], a.grad[0, 0]))
    for scene in ((TRI_A, tri_b), (TRI_A, tri_b, off)):
        F = len(scene)
        a = faces(*scene).requires_grad_()
        img = rasterize(a, aggr_alpha_func="average", **kw)
        img[0, 3].sum().backward()
        torch.testing.assert_close(img[0, 3], (single[0][0] + single[1][0]) / F, rtol=0, atol=1e-15)
        for f in range(2):
            torch.testing.assert_close(a.grad[0, f], single[f][1] / F, rtol=1e-12, atol=1e-12)
        if F == 3:
            assert a.grad[0, 2].abs().max() == 0
    assert 0.5 < img[0, 3].max() <= 2 / 3  # where both faces cover: D0 + D1 <= 2 of F = 3
    if backend == "cpu":
        fv, tex = random_scene(F=9, seed=3)
        kw = dict(image_size=(15, 11), dist_func="cauchy", dist_scale=0.05, aggr_alpha_func="average")
        base = rasterize(fv, tex, backend="cpu", **kw)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(ops, "FORWARD_ENTRIES", 1)  # one pass per face: the running mean is carried between passes
            assert torch.equal(rasterize(fv, tex, backend="cpu", **kw), base)


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dist,squared", [("logistic", False), ("gaussian", True), ("cauchy", False)])
def test_average_alpha_gradcheck(backend, dist, squared):
    """fp64 gradcheck of the ``average`` alpha w.r.t. the vertices (general position, odd-sized image)."""
    fv, _ = random_scene(B=2, F=3, seed=11)

    def alpha_of(v):
        return rasterize(
            v,
            image_size=(5, 7),
            dist_func=dist,
            dist_scale=0.01 if squared else 0.1,
            dist_squared=squared,
            aggr_alpha_func="average",
            backend=backend,
        )[:, 3]

    assert torch.autograd.gradcheck(alpha_of, (fv.requires_grad_(),), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", backends())
def test_softmax_depth_and_texture_gradients_match_finite_differences(backend):
    """docs/math/render.md §4.2: the z and texture gradients of the softmax RGB path are exact (x/y are an
    approximation)."""
    fv, tex = random_scene(B=1, F=3, seed=13)

    def rgb_of(z, t):
        v = torch.cat([fv[..., :2], z[..., None]], -1)
        return rasterize(
            v, t, image_size=(6, 5), dist_func="logistic", dist_scale=0.1, aggr_rgb_gamma=0.3, backend=backend
        )[:, :3]

    assert torch.autograd.gradcheck(
        rgb_of, (fv[..., 2].clone().requires_grad_(), tex.requires_grad_()), eps=1e-6, atol=1e-5, rtol=1e-4
    )


@pytest.mark.parametrize("backend", backends())
def test_edge_cases(backend):
    kw = dict(
        image_size=(7, 5), dist_func="logistic", dist_scale=0.05, background_color=(0.1, 0.2, 0.3), backend=backend
    )
    # empty mesh: background, zero alpha, zero gradients
    empty = torch.zeros(2, 0, 3, 3, dtype=torch.float64, requires_grad=True)
    img = rasterize(empty, **kw)
    assert torch.equal(img[:, 3], torch.zeros(2, 7, 5))
    torch.testing.assert_close(
        img[:, :3], torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)[:, None, None].expand(2, 3, 7, 5)
    )
    img.sum().backward()
    assert empty.grad.shape == empty.shape
    # degenerate faces (collinear, coincident) contribute nothing, even next to a real face
    real = faces(TRI_GP)
    degenerate = faces([[-0.5, -0.5, 2], [0, 0, 2], [0.5, 0.5, 2]])
    coincident = faces([[0.1, 0.1, 2], [0.1, 0.1, 2], [0.1, 0.1, 2]])
    both = torch.cat([degenerate, real, coincident], 1).requires_grad_()
    img = rasterize(both, **kw)
    torch.testing.assert_close(img, rasterize(real, **kw), rtol=0, atol=1e-15)
    img.sum().backward()
    assert both.grad[0, 0].abs().max() == 0 and both.grad[0, 2].abs().max() == 0
    # a face in front of the near plane: same alpha as at z = 2, no RGB
    near = real.clone()
    near[..., 2] = 0.5
    a_near, a_far = rasterize(near, **kw), rasterize(real, **kw)
    torch.testing.assert_close(a_near[:, 3], a_far[:, 3])
    torch.testing.assert_close(
        a_near[:, :3], torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)[:, None, None].expand(1, 3, 7, 5)[None, 0]
    )
    # back-facing: same alpha; RGB only when double-sided
    back = real[:, :, [0, 2, 1]]
    torch.testing.assert_close(rasterize(back, **kw)[:, 3], a_far[:, 3])
    single = rasterize(back, **(kw | dict(double_side=False)))
    assert torch.equal(single[:, :3], rasterize(back[:, :0], **kw)[:, :3])
    # faces off-screen, and S = 1
    off = real + torch.tensor([5.0, 0, 0], dtype=torch.float64)
    assert rasterize(off, **(kw | dict(dist_eps=10))).select(1, 3).abs().max() == 0
    one = rasterize(real, **(kw | dict(image_size=1)))
    assert one.shape == (1, 4, 1, 1) and one[0, 3, 0, 0] > 0.5


def test_bad_input_names_the_argument():
    fv = faces(TRI_GP)
    with pytest.raises(ValueError, match="dist_scale"):
        rasterize(fv, dist_scale=0.0)
    with pytest.raises(ValueError, match="dist_scale"):
        rasterize(fv, dist_scale=-1.0, dist_func="hard")
    rasterize(fv, dist_scale=0.0, dist_func="hard", image_size=4)  # tau = 0 is fine for hard
    with pytest.raises(ValueError, match="aggr_alpha_t_conorm_p"):
        rasterize(fv, aggr_alpha_func="frank", aggr_alpha_t_conorm_p=1.0)
    with pytest.raises(ValueError, match="aggr_alpha_t_conorm_p"):
        rasterize(fv, aggr_alpha_func="schweizer_sklar", aggr_alpha_t_conorm_p=0.5)
    with pytest.raises(ValueError, match="dist_shape"):
        rasterize(fv, dist_func="gamma_rev")
    with pytest.raises(ValueError, match="image_size"):
        rasterize(fv, image_size=0)
    with pytest.raises(ValueError, match="image_size"):
        rasterize(fv, image_size=(4, 0))
    with pytest.raises(ValueError, match="dist_func"):
        rasterize(fv, dist_func="normal")
    with pytest.raises(ValueError, match="dist_eps"):
        rasterize(fv, dist_eps=0.5)
    with pytest.raises(ValueError, match="aggr_rgb_func"):
        rasterize(fv, aggr_rgb_func="average")
    with pytest.raises(ValueError, match="texture_type"):
        rasterize(fv, texture_type="uv")
    with pytest.raises(ValueError, match="face_vertices"):
        rasterize(fv[..., :2])
    with pytest.raises(ValueError, match="textures"):
        rasterize(fv, torch.ones(1, 1, 2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="textures"):
        rasterize(fv, torch.ones(1, 1, 4, 3, dtype=torch.float64), texture_type="vertex")
    with pytest.raises(ValueError, match="dist_scale"):
        Renderer(dist_scale=-1)


def test_renderer_module_options_and_anti_aliasing():
    fv, tex = random_scene(B=1, F=4, seed=17)
    r = Renderer(image_size=6, dist_func="logistic", dist_scale=0.05, anti_aliasing=True, backend="reference")
    assert r.double_side is False and r.dist_func == "logistic"
    img = r.forward_tensors(fv, tex)
    big = rasterize(
        fv, tex, image_size=12, dist_func="logistic", dist_scale=0.05, double_side=False, backend="reference"
    )
    torch.testing.assert_close(img, torch.nn.functional.avg_pool2d(big, 2))
    r.dist_scale = 0.1
    assert r.dist_scale == 0.1
    with pytest.raises(ValueError, match="dist_scale"):
        r.dist_scale = 0


@pytest.mark.gpu
def test_cuda_large_scene_empty_mesh_and_many_tiles():
    """An icosphere over many 16-pixel tiles (float32, against the cpu kernel) and an empty mesh."""
    from relaxops.render import LookAt, Mesh, icosphere

    v, f = icosphere(3)
    fv = LookAt(viewing_angle=15)(Mesh(v * 0.5, f)).face_vertices.double()
    tex = torch.rand(1, f.shape[0], 4, 3, dtype=torch.float64)
    for dist in ("logistic", "uniform", "cauchy"):
        assert_backends_agree(
            fv,
            tex,
            "cuda",
            "cuda",
            dtype=torch.float32,
            image_size=(70, 45),
            dist_func=dist,
            dist_scale=0.01,
            dist_eps=100,
            aggr_rgb_gamma=0.05,
        )
    img = rasterize(torch.zeros(2, 0, 3, 3, device="cuda"), image_size=5, backend="cuda")
    assert torch.equal(img[:, 3].cpu(), torch.zeros(2, 5, 5))


@needs_cpu
def test_kernel_ids_agree_with_python():
    dist, alpha = _ext._C.render_ids()
    assert dist == {name: i for i, name in enumerate(R.DISTRIBUTIONS)}
    assert alpha == R.T_CONORM_IDS


def _cuda_op_passes(fv, tex, offsets, s, runs):
    """Forward and `runs` backward passes of the CUDA ops on the same inputs (gradients of <image, G>)."""
    ints, floats = s.to_lists()
    image, aggr = ops.render_fwd(fv, tex, offsets, ints, floats, "cuda")
    g = torch.Generator(device=fv.device).manual_seed(2)
    grad = torch.randn(image.shape, generator=g, dtype=fv.dtype, device=fv.device)  # no host copy: no sync
    return image, [ops.render_bwd(grad, fv, tex, offsets, image, aggr, ints, floats, "cuda") for _ in range(runs)]


def _overlapping_scene(B=2, F=24, T=4, seed=4):
    """Large overlapping faces (about a quarter of the image each, several a pixel) with R x R surface texels:
    every texel of a face is hit by many pixels of each 16-pixel tile (packed, float32)."""
    fv, tex = random_scene(B=B, F=F, T=T, seed=seed, dtype=torch.float32)
    offsets = torch.arange(B + 1, dtype=torch.int64) * F
    return fv.reshape(B * F, 9).cuda(), tex.reshape(B * F, T, 3).cuda(), offsets.cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_cuda_surface_texture_gradient_is_bitwise_deterministic(rgb):
    """Surface textures of 4 texels: the gradient of a texel sums many pixels of a tile; five backward passes give
    bit-identical gradients (they were float atomics, whose order varies between runs), the geometry gradients too."""
    fv, tex, offsets = _overlapping_scene()
    s = R.RasterSettings.from_options(image_size=(61, 47), aggr_rgb_func=rgb, aggr_rgb_gamma=0.3, dist_scale=0.02)
    _, grads = _cuda_op_passes(fv, tex, offsets, s, runs=5)
    assert grads[0][1].abs().max() > 0  # the texels get gradients: the test can fail
    for g in grads[1:]:
        assert torch.equal(g[0], grads[0][0]) and torch.equal(g[1], grads[0][1])


@pytest.mark.gpu
def test_cuda_render_does_not_synchronise_the_device():
    """Forward and backward (surface texels) once warm: no synchronisation through torch (sync_debug_mode "error":
    it sees torch's own syncs only, such as .item() or a blocking copy in the launchers, not the kernels' CUDA calls),
    and no device-wide one (a cudaFree or cudaDeviceSynchronize would wait for a kernel sleeping on another stream).
    The one stream synchronisation of a call, the read of the pair count (docs/gpu.md), waits for this stream only."""
    fv, tex, offsets = _overlapping_scene()
    s = R.RasterSettings.from_options(image_size=(61, 47), aggr_rgb_gamma=0.3, dist_scale=0.02)
    _cuda_op_passes(fv, tex, offsets, s, runs=1)  # warm: offsets checked, memory pools grown
    assert_no_device_sync(lambda: _cuda_op_passes(fv, tex, offsets, s, runs=1))
    torch.cuda.synchronize()
