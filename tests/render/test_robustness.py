"""Robustness of the rasterizer: the registered ops check their arguments, small ``aggr_rgb_gamma`` stays finite,
everything compiles, non-finite input has one documented behaviour in every backend, clear argument errors."""

from __future__ import annotations

import math

import pytest
import torch
from relaxops import _ext
from relaxops.render import LookAt, Mesh, icosphere
from relaxops.render.functional import Renderer, rasterize
from testing import TOLERANCES, assert_as_accurate_as_reference, opcheck_calls, run_isolated

from .test_rasterize import raster_call

needs_cpu = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
BACKENDS = ["reference", pytest.param("cpu", marks=needs_cpu)]
TRI = [[-0.5123, -0.4071, 2], [0.0117, 0.5043, 2], [0.6089, -0.3021, 2]]


def scene(B=2, F=5, T=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    fv = torch.rand(B, F, 3, 3, generator=g, dtype=dtype) * 1.6 - 0.8
    fv[..., 2] = torch.rand(B, F, 3, generator=g, dtype=dtype) * 3 + 1.5
    return fv, torch.rand(B, F, T, 3, generator=g, dtype=dtype)


def render(fv, tex, backend, **kw):
    """Image and the gradients of <image, G> for a fixed random G (backend: a name, or a function (fv, tex))."""
    a, t = fv.detach().clone().requires_grad_(), tex.detach().clone().requires_grad_()
    img = backend(a, t) if callable(backend) else rasterize(a, t, backend=backend, **kw)
    G = torch.randn(img.shape, generator=torch.Generator().manual_seed(1), dtype=img.dtype)
    (img * G).sum().backward()
    return img.detach(), a.grad, t.grad


# --- 1. the registered ops never trust their arguments --------------------------------------------------------

SETUP = """
import torch
from relaxops.render import ops
from relaxops.render.relaxations import RasterSettings
ints, floats = RasterSettings.from_options(8, dist_func="logistic", dist_scale=0.1).to_lists()
fv, tex, mo = torch.rand(3, 9), torch.rand(3, 4, 3), torch.tensor([0, 3])
img, aggr = torch.rand(1, 4, 8, 8), torch.rand(1, 2, 8, 8)
fwd, bwd = torch.ops.relaxops.render_fwd, torch.ops.relaxops.render_bwd
"""

# (call, exception, what the message names); each used to read out of bounds, crash or return garbage
BAD_CALLS = [
    ("fwd(torch.rand(3, 5), tex, mo, ints, floats, 'cpu')", "ValueError", "face_vertices"),
    ("fwd(torch.rand(1, 3, 9), tex, mo, ints, floats, 'cpu')", "ValueError", "face_vertices"),
    ("fwd(fv, torch.rand(1, 4, 3), mo, ints, floats, 'cpu')", "ValueError", "textures"),
    ("fwd(fv, torch.rand(3, 4), mo, ints, floats, 'cpu')", "ValueError", "textures"),
    ("fwd(fv, torch.rand(3, 5, 3), mo, ints, floats, 'cpu')", "ValueError", "textures"),
    ("fwd(fv, tex, mo, ints[:5] + [1] + ints[6:], floats, 'cpu')", "ValueError", "textures"),
    ("fwd(fv, tex.double(), mo, ints, floats, 'cpu')", "TypeError", "textures"),
    ("fwd(fv.half(), tex.half(), mo, ints, floats, 'cpu')", "TypeError", "face_vertices"),
    ("fwd(fv.long(), tex, mo, ints, floats, 'reference')", "TypeError", "face_vertices"),
    ("fwd(torch.rand(9, 3).t(), tex, mo, ints, floats, 'cpu')", "ValueError", "contiguous"),
    ("fwd(fv, tex, mo.int(), ints, floats, 'cpu')", "TypeError", "mesh_offsets"),
    ("fwd(fv, tex, torch.tensor([[0, 3]]), ints, floats, 'cpu')", "ValueError", "mesh_offsets"),
    ("fwd(fv, tex, torch.tensor([], dtype=torch.long), ints, floats, 'cpu')", "ValueError", "mesh_offsets"),
    ("fwd(fv, tex, torch.tensor([0, 2]), ints, floats, 'cpu')", "ValueError", "mesh_offsets"),
    ("fwd(fv, tex, torch.tensor([1, 3]), ints, floats, 'reference')", "ValueError", "mesh_offsets"),
    ("fwd(fv, tex, torch.tensor([0, 4, 3]), ints, floats, 'cpu')", "ValueError", "mesh_offsets"),
    ("fwd(fv, tex, mo, [0, 8] + ints[2:], floats, 'cpu')", "ValueError", "image_size"),
    ("fwd(fv, tex, mo, [-5, 8] + ints[2:], floats, 'cpu')", "ValueError", "image_size"),
    ("fwd(fv, tex, mo, [1 << 40, 1 << 40] + ints[2:], floats, 'cpu')", "MemoryError", "image_size"),
    ("fwd(fv, tex, mo, ints[:2] + [99] + ints[3:], floats, 'cpu')", "ValueError", "dist_func"),
    ("fwd(fv, tex, mo, ints[:2] + [99] + ints[3:], floats, 'reference')", "ValueError", "dist_func"),
    ("fwd(fv, tex, mo, ints[:3] + [-1] + ints[4:], floats, 'cpu')", "ValueError", "aggr_alpha_func"),
    ("fwd(fv, tex, mo, ints[:3], floats, 'cpu')", "ValueError", "8 ints"),
    ("fwd(fv, tex, mo, ints, floats[:4], 'cpu')", "ValueError", "12 floats"),
    ("fwd(fv, tex, mo, ints, [-1.0] + floats[1:], 'cpu')", "ValueError", "dist_scale"),
    ("fwd(fv, tex, mo, ints, floats[:6] + [0.0] + floats[7:], 'cpu')", "ValueError", "aggr_rgb_gamma"),
    ("fwd(fv, tex, mo, ints, floats[:7] + [5.0, 1.0] + floats[9:], 'cpu')", "ValueError", "near"),
    ("fwd(fv, tex, mo, ints, floats, 'triton')", "ValueError", "backend"),
    ("bwd(torch.rand(1, 4, 2, 2), fv, tex, mo, img, aggr, ints, floats, 'cpu')", "ValueError", "grad_image"),
    ("bwd(img, fv, tex, mo, torch.rand(1, 4, 8, 2), aggr, ints, floats, 'cpu')", "ValueError", "image"),
    ("bwd(img, fv, tex, mo, img, torch.rand(1, 1, 8, 8), ints, floats, 'cpu')", "ValueError", "aggr"),
    ("bwd(img, fv, tex, mo, img, aggr.double(), ints, floats, 'cpu')", "TypeError", "aggr"),
    ("bwd(img, fv, torch.rand(2, 2, 3), mo, img, aggr, ints, floats, 'cpu')", "ValueError", "textures"),
    ("bwd(img, fv, tex, torch.tensor([0, 1, 3]), img, aggr, ints, floats, 'cpu')", "ValueError", "image"),
    ("bwd(img, fv, tex, torch.tensor([0, 3, 2]), img, aggr, ints, floats, 'cpu')", "ValueError", "mesh_offsets"),
]


@needs_cpu
def test_registered_ops_check_their_arguments():
    """Every bad call raises the right error naming the argument; all in one fresh interpreter, so that a crash
    fails the test without killing the test run."""
    code = (
        SETUP
        + "for call in %r:\n" % [c[0] for c in BAD_CALLS]
        + """
    try:
        eval(call)
        print('returned')
    except Exception as e:
        print(type(e).__name__, str(e).replace(chr(10), ' '))
"""
    )
    lines = run_isolated(code).stdout.splitlines()
    assert len(lines) == len(BAD_CALLS)
    for (call, exc, match), line in zip(BAD_CALLS, lines):
        assert line.split(" ")[0] == exc and match in line, f"{call}: expected {exc}({match!r}), got {line}"


@needs_cpu
def test_kernel_checks_its_invariants():
    """The C++ entry points refuse sizes that would overflow their indices and bad parameters, whatever the Python
    side passes (null buffers: reaching a kernel would crash the fresh interpreter)."""
    code = """
import math
import torch
from relaxops import _ext
from relaxops.render.relaxations import RasterSettings
ints, floats = RasterSettings.from_options(8).to_lists()
offsets = torch.tensor([0, 1])
cases = [([1, 1, 1 << 31, 8, 1, *ints[2:]], floats, 0.1), ([1 << 30, 1, 1 << 20, 1 << 20, 1, *ints[2:]], floats, 0.1),
         ([1, 1, 8, 8, 1, *ints[2:]], floats[:6] + [math.nan] + floats[7:], 0.1),
         ([1, 1, 8, 8, 1, *ints[2:]], floats, math.nan), ([1, 2, 8, 8, 1, *ints[2:]], floats, 0.1)]
for sizes, fl, reach in cases:
    try:
        _ext._C.render_forward(0, sizes, fl, reach, 8, 1 << 20, 1, 0, 0, offsets.data_ptr(), 0, 0)
        print("returned")
    except ValueError as e:
        print(e)
"""
    matches = ("below 2^31", "too large", "float parameters", "reach", "mesh_offsets")
    lines = run_isolated(code).stdout.splitlines()
    for line, match in zip(lines, matches, strict=True):
        assert match in line, line


def test_memory_refusal_names_the_size_and_the_option():
    fv = torch.tensor([[TRI]])
    with pytest.raises(MemoryError, match=r"GiB.*image_size"):
        rasterize(fv, image_size=10**6)
    with pytest.raises(MemoryError, match=r"GiB.*image_size"):
        rasterize(fv.expand(10**5, 1, 3, 3), image_size=2048, backend="reference")


# --- 4. small aggr_rgb_gamma ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gamma", [1e-5, 1e-8, 1e-12])
def test_small_gamma_is_finite_and_matches_the_float64_reference(backend, gamma):
    """Used to be all NaN (cpu, float32) or an overflow error (reference): exp(eps / gamma) was not stabilised."""
    fv, tex = scene(seed=3)
    kw = dict(
        image_size=(9, 7), dist_func="logistic", dist_scale=0.05, aggr_rgb_gamma=gamma, background_color=(0.2, 0.3, 0.4)
    )
    want = render(fv, tex, "reference", **kw)
    for dtype in (torch.float64, torch.float32):
        got = render(fv.to(dtype), tex.to(dtype), backend, **kw)
        for g in got:
            assert g.isfinite().all()
        # the depth softmax amplifies the rounding of z (~1e-16) by 1 / gamma: comparable for gamma >> 1e-16 only
        if dtype == torch.float64 and gamma >= 1e-8:
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)
    # the limit gamma -> 0: the colour of the nearest face with D > 1e-6 (here all faces are inside [near, far])
    img = want[0]
    assert ((img[:, :3] - tex.new_tensor([0.2, 0.3, 0.4])[:, None, None]).abs() > 1e-3).any()


@needs_cpu
def test_small_gamma_single_face_closed_form():
    """One face: I = (bg e^(2 eps / gamma) + D C e^(z / gamma)) / (e^(2 eps / gamma) + D e^(z / gamma))
    (docs/math/render.md §4.1), evaluated with a float64 logsumexp."""
    eps, gamma = 1e-3, 1e-5
    fv = torch.tensor([[TRI]], dtype=torch.float64)
    tex = torch.tensor([[[[0.9, 0.1, 0.5]]]], dtype=torch.float64)
    kw = dict(image_size=5, dist_func="logistic", dist_scale=0.05, aggr_rgb_eps=eps, aggr_rgb_gamma=gamma)
    img = rasterize(fv, tex, backend="cpu", **kw)
    D = rasterize(fv, tex, backend="cpu", **(kw | dict(aggr_rgb_gamma=1.0)))[0, 3]  # alpha of one face is D
    zt = torch.tensor((100 - 2) / 99, dtype=torch.float64)
    logits = torch.stack([torch.full_like(D, 2 * eps / gamma), D.clamp_min(1e-300).log() + zt / gamma])
    w = torch.softmax(logits, 0)
    want = w[0, None] * 0 + w[1, None] * tex[0, 0, 0][:, None, None]
    want = torch.where(D > 1e-6, want, torch.zeros(3, 1, 1, dtype=torch.float64))
    torch.testing.assert_close(img[0, :3], want, rtol=1e-9, atol=1e-12)


# --- 5. torch.compile and opcheck -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_rasterize_compiles_fullgraph(backend, dynamic):
    """Used to fail: the finiteness check of face_vertices was data-dependent."""
    torch._dynamo.reset()
    kw = dict(image_size=7, dist_func="logistic", dist_scale=0.05, backend=backend)
    f = torch.compile(lambda x, t: rasterize(x, t, **kw), fullgraph=True, dynamic=dynamic)
    for B, F in ((1, 3), (2, 5), (3, 4)):  # the sizes change between calls
        fv, tex = scene(B, F, seed=F)
        got, want = render(fv, tex, f), render(fv, tex, lambda x, t: rasterize(x, t, **kw))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dynamic", [False, True])
def test_renderer_of_a_mesh_compiles_forward_and_backward(dynamic):
    torch._dynamo.reset()
    v, faces = icosphere(1)
    renderer, camera = Renderer(image_size=8, dist_func="logistic", dist_scale=0.05), LookAt(viewing_angle=15)

    def fn(vertices):
        return renderer(camera(Mesh(vertices, faces)))

    cf = torch.compile(fn, fullgraph=True, dynamic=dynamic)
    for scale in (0.5, 0.6):
        a, b = (v * scale).requires_grad_(), (v * scale).requires_grad_()
        got, want = cf(a), fn(b)
        got.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(a.grad, b.grad)


def test_compat_gendr_compiles():
    from relaxops.compat import gendr

    torch._dynamo.reset()
    module = gendr.GenDR(image_size=6, dist_func="logistic", dist_scale=0.05)
    for fn in (module.forward_tensors, lambda x, t: gendr.functional.render(x, t, image_size=6, dist_scale=0.05)):
        f = torch.compile(fn, fullgraph=True, dynamic=True)
        for F in (3, 4):
            fv, tex = scene(1, F, seed=F)
            for g, w in zip(render(fv, tex, f), render(fv, tex, fn)):
                torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rgb", ["softmax", "hard"])
def test_opcheck(backend, rgb):
    """opcheck of the ops that a reference check's call (tests/render/test_rasterize.py) makes, forward and
    backward, with either colour aggregation."""
    fv, tex = scene(1, 3, seed=19)
    kw = dict(image_size=(5, 4), dist_func="logistic", dist_scale=0.1, aggr_rgb_func=rgb)
    fn, args, kwargs = raster_call(fv, tex, backend, **kw)
    names = opcheck_calls(fn, *args, **kwargs)
    assert names == ["relaxops::render_fwd", "relaxops::render_bwd"], names


# --- 7. non-finite input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_face_is_skipped(backend, dtype, bad):
    """One bad face anywhere leaves the image and the other faces' gradients as without it (it used to raise, so
    rasterize could not compile)."""
    fv, tex = scene(1, 6, seed=5, dtype=dtype)
    broken = fv.clone()
    broken[0, 2, 1, 0] = bad  # face 2, vertex 1, x
    broken[0, 4, 0, 2] = bad  # face 4, vertex 0, depth
    keep = [0, 1, 3, 5]
    for rgb in ("softmax", "hard"):
        kw = dict(image_size=(8, 9), dist_func="logistic", dist_scale=0.05, aggr_rgb_func=rgb)
        img, g_fv, g_tex = render(broken, tex, backend, **kw)
        want = render(broken[:, keep], tex[:, keep], backend, **kw)
        for g in (img, g_fv, g_tex):
            assert g.isfinite().all()
        # bitwise for the kernel; the reference vectorises over a block of faces whose shape depends on F (its sums
        # and elementwise functions round differently): the dtype's tolerance
        tol = dict(rtol=0, atol=0) if backend == "cpu" else TOLERANCES[dtype]
        torch.testing.assert_close(img, want[0], **tol)
        torch.testing.assert_close(g_fv[:, keep], want[1], **tol)
        torch.testing.assert_close(g_tex[:, keep], want[2], **tol)
        assert g_fv[:, [2, 4]].abs().max() == 0 and g_tex[:, [2, 4]].abs().max() == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("huge", [1e18, 1e30, 1e300])
def test_huge_faces_give_finite_images_and_gradients(dtype, huge):
    """A face whose vertices are huge but finite (in the dtype) is drawn, or skipped where its area overflows; the
    output stays finite (1e30 used to give NaN in float32) and the cpu kernel agrees with the reference."""
    fv, tex = scene(1, 6, seed=5, dtype=torch.float64)
    fv[0, 2, 1, 0] = huge
    fv[0, 4, 0, 1] = -huge
    fv[0, 4, 2, 0] = huge
    fv = fv.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)
    kw = dict(image_size=(8, 9), dist_func="logistic", dist_scale=0.05)
    results = [render(fv, tex.to(dtype), b, **kw) for b in ("reference", "cpu") if b != "cpu" or _ext.has_cpu()]
    for result in results:
        for g in result:
            assert g.isfinite().all()
    if dtype == torch.float64 and len(results) == 2:
        for g, w in zip(*results):
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_texture_reaches_only_the_pixels_of_its_face(backend):
    fv = torch.tensor([[TRI, [[-0.9, 0.9, 3], [-0.7, 0.9, 3], [-0.9, 0.6, 3]]]], dtype=torch.float64)
    tex = torch.tensor([[[[0.5, 0.5, 0.5]], [[math.nan, math.inf, 0.2]]]], dtype=torch.float64)
    kw = dict(image_size=12, dist_func="logistic", dist_scale=0.01, dist_eps=50)
    img = rasterize(fv, tex, backend=backend, **kw)
    clean = rasterize(fv, tex.nan_to_num(0.0, 0.0, 0.0), backend=backend, **kw)
    alone = rasterize(fv[:, 1:], tex[:, 1:], backend=backend, **kw)
    touched = alone[0, 3] > 1e-6  # pixels where the second face is not culled
    assert touched.any() and (~touched).any()
    assert torch.equal(img[:, 3], clean[:, 3])  # alpha never reads textures
    assert img[0, 0][touched].isnan().all() and img[0, 2][touched].isfinite().all()
    torch.testing.assert_close(img[0, :3][:, ~touched], clean[0, :3][:, ~touched], rtol=0, atol=0)
    if backend != "reference":  # the kernel and the reference agree on where NaN goes, forward and backward
        got, want = render(fv, tex, backend, **kw), render(fv, tex, "reference", **kw)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, equal_nan=True)


# --- 8. argument errors name the argument ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,exc,name",
    [
        (dict(image_size=1.5), TypeError, "image_size"),
        (dict(image_size=(4, 4, 4)), TypeError, "image_size"),
        (dict(image_size="8"), TypeError, "image_size"),
        (dict(image_size=(4, True)), TypeError, "image_size"),
        (dict(image_size=-3), ValueError, "image_size"),
        (dict(background_color=0.5), TypeError, "background_color"),
        (dict(background_color=(1, 2)), ValueError, "background_color"),
        (dict(background_color=("r", "g", "b")), TypeError, "background_color"),
        (dict(dist_scale="0.1"), TypeError, "dist_scale"),
        (dict(dist_scale=None), TypeError, "dist_scale"),
        (dict(dist_scale=1e-13), ValueError, "dist_scale"),
        (dict(near=0.0), ValueError, "near"),
        (dict(dist_squared="no"), TypeError, "dist_squared"),
        (dict(double_side=2), TypeError, "double_side"),
        (dict(dist_func="gamma", dist_shape="1"), TypeError, "dist_shape"),
        (dict(dist_func="exponential", dist_shift=[1.0]), TypeError, "dist_shift"),
        (dict(dist_eps=None), TypeError, "dist_eps"),
        (dict(aggr_alpha_func="yager", aggr_alpha_t_conorm_p="2"), TypeError, "aggr_alpha_t_conorm_p"),
        (dict(aggr_rgb_eps=math.inf), ValueError, "aggr_rgb_eps"),
        (dict(aggr_rgb_gamma=None), TypeError, "aggr_rgb_gamma"),
        (dict(aggr_rgb_gamma=0.0), ValueError, "aggr_rgb_gamma"),
        (dict(near=None), TypeError, "near"),
        (dict(far=math.nan), ValueError, "far"),
        (dict(aggr_rgb_func=["softmax"]), ValueError, "aggr_rgb_func"),
        (dict(texture_type=None), ValueError, "texture_type"),
    ],
)
def test_bad_arguments_name_the_argument(kw, exc, name):
    fv = torch.tensor([[TRI]])
    with pytest.raises(exc, match=name):
        rasterize(fv, **kw)
    with pytest.raises(exc, match=name):
        Renderer(**kw)
    r = Renderer()
    with pytest.raises(exc, match=name):
        setattr(r, *list(kw.items())[-1])


# --- found by the fuzz suite ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("alpha", ["yager", "aczel_alsina", "dombi"])
def test_large_t_conorm_parameter_keeps_float32_gradients_finite(backend, alpha):
    """dA/dD = g(D)^(p-1) g(A)^(1-p) was NaN in float32 for p = 8 (0 * inf: the factors under- and overflow at
    D ~ A ~ 1e-6); computed as one power of g(D) / g(A) it is finite, and as close to float64 as the reference run
    in float32 (whose forward fold itself loses D^8 to underflow)."""
    fv = torch.tensor(
        [[[[0.7521, 0.3325, 2.3647], [0.6732, 0.2320, 2.8586], [-0.5142, -0.2382, 2.0304]]]], dtype=torch.float64
    )
    tex = torch.full((1, 1, 1, 3), 0.5, dtype=torch.float64)
    kw = dict(
        image_size=2,
        dist_func="laplace",
        dist_scale=0.02,
        dist_eps=30.0,
        aggr_alpha_func=alpha,
        aggr_alpha_t_conorm_p=8.0,
        aggr_rgb_func="hard",
    )
    want = render(fv, tex, "reference", **kw)
    low = render(fv.float(), tex.float(), "reference", **kw)
    got = render(fv.float(), tex.float(), backend, **kw)
    for g, lo, w in zip(got, low, want):
        assert g.isfinite().all() and lo.isfinite().all()
        assert_as_accurate_as_reference(g, lo, w, torch.float32, scale=1 + w.abs().max().item(), msg=alpha)
