"""Property-based fuzzing of the rendering family: random scenes, shapes (empty batch, no faces, one
pixel, odd sizes), dtypes, options at their extremes, non-contiguous inputs, NaN/inf/huge values and ties.

Well-conditioned scenes: the cpu kernel against the float64 reference, outputs and gradients. Everywhere: no
crash, alpha in [0, 1], finite images and gradients for finite input, faces with non-finite vertices skipped,
NaN textures never reaching alpha. ``HYPOTHESIS_PROFILE=long`` runs many more examples.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relaxops import _ext
from relaxops.render import (
    Lighting,
    Look,
    LookAt,
    Mesh,
    Renderer,
    face_normals,
    get_points_from_angles,
    iou_loss,
    look,
    look_at,
    merge,
    orthogonal,
    perspective,
    rasterize,
    vertex_normals,
)
from relaxops.render import relaxations as R
from relaxops.render.losses import FlattenLoss, LaplacianLoss
from relaxops.render.shapes import cube, icosphere, plane, torus, uv_sphere
from strategies import extreme
from testing import outputs_and_grads

needs_cpu = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")


def fuzz(examples: int):
    """``examples`` in the ci profile (the suite stays around a minute); the profile's own count otherwise."""
    n = examples if settings().max_examples <= 30 else settings().max_examples
    return settings(
        max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )


T_PARAMS = {
    "hamacher": [0.0, 0.5, 30.0],
    "frank": [1e-3, 2.0, 1e3],
    "yager": [0.2, 1.0, 8.0],
    "aczel_alsina": [0.2, 2.0, 8.0],
    "dombi": [0.2, 2.0, 8.0],
    "schweizer_sklar": [-8.0, -2.0, -0.2],
}
SIZES = st.one_of(st.integers(1, 9), st.tuples(st.integers(1, 9), st.integers(1, 9)))


@st.composite
def options(draw, extreme_values=False):
    """Keyword arguments of rasterize: every distribution and T-conorm, parameters at their extremes."""
    dist = draw(st.sampled_from(R.DISTRIBUTIONS))
    alpha = draw(st.sampled_from(R.T_CONORMS))
    scales = [1e-12, 1e-6, 1e-2, 0.3, 1e3] if extreme_values else [0.02, 0.05, 0.2]
    gammas = [1e-12, 1e-8, 1e-3, 1.0, 1e6] if extreme_values else [1e-3, 0.05, 1.0]
    kw = dict(
        image_size=draw(SIZES),
        dist_func=dist,
        dist_scale=draw(st.sampled_from(scales)),
        dist_squared=draw(st.booleans()),
        dist_eps=draw(st.sampled_from([1.0, 30.0, 1e4])),
        aggr_alpha_func=alpha,
        aggr_rgb_func=draw(st.sampled_from(R.RGB_FUNCS)),
        aggr_rgb_eps=draw(st.sampled_from([-0.5, 1e-3, 0.5] + ([1e30] if extreme_values else []))),
        aggr_rgb_gamma=draw(st.sampled_from(gammas)),
        double_side=draw(st.booleans()),
        background_color=draw(st.sampled_from([(0, 0, 0), (0.2, 0.3, 0.4), (-1e3, 0, 1e3)])),
        texture_type=draw(st.sampled_from(R.TEXTURE_TYPES)),
    )
    near_far = [(1.0, 100.0), (2.0, 4.0)] + ([(1e-3, 1e3), (1e-30, 1e30)] if extreme_values else [])
    kw["near"], kw["far"] = draw(st.sampled_from(near_far))
    if dist in R.SHIFTED_DISTRIBUTIONS:
        kw["dist_shift"] = draw(st.sampled_from([0.0, 0.3, -2.0]))
    if dist in ("gamma", "gamma_rev"):
        kw["dist_shape"] = draw(st.sampled_from([0.5, 1.0, 3.0]))
    if alpha in T_PARAMS:
        kw["aggr_alpha_t_conorm_p"] = draw(st.sampled_from(T_PARAMS[alpha]))
    return kw


@st.composite
def scenes(draw, max_batch=3, max_faces=7):
    """``(face_vertices [B, F, 3, 3], seed)``: triangles of a third of the image, depths in [1.5, 4.5]."""
    B, F = draw(st.integers(0, max_batch)), draw(st.integers(0, max_faces))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    fv = torch.rand(B, F, 3, 3, generator=g, dtype=torch.float64) * 1.6 - 0.8
    fv[..., 2] = torch.rand(B, F, 3, generator=g, dtype=torch.float64) * 3 + 1.5
    return fv, g


def textures_for(fv, kw, g, dtype=torch.float64):
    B, F = fv.shape[:2]
    T = 3 if kw["texture_type"] == "vertex" else [1, 4, 9][int(torch.randint(0, 3, (), generator=g))]
    return torch.rand(B, F, T, 3, generator=g, dtype=torch.float64).to(dtype)


def in_layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """The same values in another memory layout (rasterize takes any strides)."""
    if kind == "transposed":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if kind == "sliced":
        big = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1])
        big[..., ::2] = t
        return big[..., ::2]
    return t


def run(fv, tex, backend, dtype=None, **kw):
    """Image and the gradients (fv, tex) of <image, G> for a fixed random G."""
    return outputs_and_grads(rasterize, fv.to(dtype or fv.dtype), tex.to(dtype or tex.dtype), backend=backend, **kw)


def check_invariants(img, g_fv, g_tex, finite=True):
    alpha = img[:, 3]
    assert ((alpha >= 0) & (alpha <= 1)).all(), "alpha outside [0, 1]"
    if finite:
        for name, x in (("image", img), ("grad face_vertices", g_fv), ("grad textures", g_tex)):
            assert x.isfinite().all(), f"non-finite {name} for finite input"


@needs_cpu
@fuzz(80)
@given(scene=scenes(), kw=options(), layout=st.sampled_from(["contiguous", "transposed", "sliced"]))
def test_cpu_matches_the_float64_reference(scene, kw, layout):
    fv, g = scene
    tex = textures_for(fv, kw, g)
    want = run(fv, tex, "reference", **kw)
    got = run(in_layout(fv, layout), in_layout(tex, layout), "cpu", **kw)
    check_invariants(*want)
    for name, x, w in zip(("image", "grad face_vertices", "grad textures"), got, want):
        # float64 kernels follow the reference operation by operation; sums over faces and pixels are reordered
        torch.testing.assert_close(
            x,
            w,
            rtol=1e-8,
            atol=1e-8 * (1 + w.abs().max().item() if w.numel() else 1),
            msg=lambda m, name=name: f"{name}: {m}",
        )


@needs_cpu
@fuzz(40)
@given(scene=scenes(max_batch=2, max_faces=5), kw=options())
def test_float32_and_half_inputs_stay_close_to_float64(scene, kw):
    """float32 kernels (and half inputs, computed in float32) against float64: finite, and the image within the
    float32 bound of docs/math/render.md §5.5 except at the discontinuities of the coverage tests (few pixels)."""
    fv, g = scene
    tex = textures_for(fv, kw, g)
    want = run(fv, tex, "cpu", **kw)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        got = run(fv, tex, "cpu", dtype=dtype, **kw)
        check_invariants(*got)
        assert got[0].dtype == dtype and got[1].dtype == dtype
    got = run(fv, tex, "cpu", dtype=torch.float32, **kw)
    far = (got[0].double() - want[0]).abs() > 1e-3
    assert far.sum() <= 0.1 * far.numel(), f"{int(far.sum())} of {far.numel()} values differ by more than 1e-3"


@needs_cpu
@fuzz(150)
@given(
    data=st.data(),
    kw=options(extreme_values=True),
    backend=st.sampled_from(["cpu", "reference"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_extreme_input_never_crashes_and_finite_input_gives_finite_output(data, kw, backend, dtype):
    B, F = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 5))
    fv = data.draw(extreme((B, F, 3, 3), dtype=torch.float64)).to(dtype)
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    tex = textures_for(fv, kw, g, dtype)
    img, g_fv, g_tex = run(fv, tex, backend, **kw)
    assert img.shape == (B, 4, *((kw["image_size"],) * 2 if isinstance(kw["image_size"], int) else kw["image_size"]))
    check_invariants(img, g_fv, g_tex, finite=bool(fv.isfinite().all()))
    # faces with a non-finite vertex are skipped: the image is that of the finite faces
    bad = ~fv.isfinite().flatten(2).all(-1)
    if bad.any() and B == 1:
        img2, g2, _ = run(fv[:, ~bad[0]], tex[:, ~bad[0]], backend, **kw)
        torch.testing.assert_close(img, img2, rtol=1e-4, atol=1e-5, equal_nan=True)
        assert (g_fv[bad] == 0).all()


@needs_cpu
@fuzz(40)
@given(scene=scenes(max_batch=2, max_faces=4), kw=options(), value=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_non_finite_textures_never_reach_alpha_and_backends_agree(scene, kw, value):
    fv, g = scene
    tex = textures_for(fv, kw, g)
    if tex.numel():
        tex.view(-1)[torch.randint(0, tex.numel(), (max(1, tex.numel() // 5),), generator=g)] = value
    got, want = run(fv, tex, "cpu", **kw), run(fv, tex, "reference", **kw)
    clean = run(fv, tex.nan_to_num(0.5, 0.5, 0.5), "cpu", **kw)
    assert torch.equal(got[0][:, 3], clean[0][:, 3])
    assert got[1].isfinite().all() or not got[0].isfinite().all()  # geometry gradients are NaN only via NaN pixels
    for x, w in zip(got, want):
        torch.testing.assert_close(x, w, rtol=1e-8, atol=1e-8, equal_nan=True)


MESHES = {
    "icosphere": lambda: icosphere(1),
    "cube": cube,
    "plane": lambda: plane(2, 3),
    "torus": lambda: torus(1.0, 0.3, 6, 4),
    "uv_sphere": lambda: uv_sphere(4, 6),
    "merged": lambda: merge([cube(), icosphere(0)]),
}


@needs_cpu
@fuzz(30)
@given(
    mesh=st.sampled_from(sorted(MESHES)),
    seed=st.integers(0, 2**31 - 1),
    camera=st.sampled_from(["look_at", "look", "orthogonal"]),
    anti_aliasing=st.booleans(),
    texture_type=st.sampled_from(["surface", "vertex"]),
    scale=st.sampled_from([1e-3, 0.5, 1e3]),
)
def test_mesh_pipeline_is_finite_and_matches_the_reference(mesh, seed, camera, anti_aliasing, texture_type, scale):
    """Mesh -> Lighting -> camera -> Renderer (and the losses on its output): finite values and gradients, cpu ==
    reference, for meshes from tiny to huge (the camera sits at distance 2.7 from the origin)."""
    v, f = MESHES[mesh]()
    g = torch.Generator().manual_seed(seed)
    v = (v.double() + 0.01 * torch.randn(v.shape, generator=g, dtype=torch.float64)) * scale
    tex = torch.rand(
        1, *((f.shape[0], 4, 3) if texture_type == "surface" else (v.shape[0], 3)), generator=g, dtype=torch.float64
    )
    eye = get_points_from_angles(2.7, float(torch.rand((), generator=g)) * 90, float(torch.rand((), generator=g)) * 360)
    transform = {
        "look_at": LookAt(viewing_angle=15, eye=eye),
        "look": Look(-eye, viewing_angle=15, eye=eye),
        "orthogonal": LookAt(perspective=False, eye=eye),
    }[camera]
    outs = []
    for backend in ("cpu", "reference"):
        vv, tt = v.clone().requires_grad_(), tex.clone().requires_grad_()
        m = transform(Lighting()(Mesh(vv, f, tt, texture_res=2, texture_type=texture_type)))
        img = Renderer(
            image_size=(7, 6),
            dist_func="logistic",
            dist_scale=0.02,
            anti_aliasing=anti_aliasing,
            texture_type=texture_type,
            backend=backend,
        )(m)
        loss = iou_loss(img[:, 3], torch.ones_like(img[:, 3])) + img[:, :3].square().mean()
        loss.backward()
        outs.append((img.detach(), vv.grad, tt.grad))
        for x in outs[-1]:
            assert x.isfinite().all()
    for x, w in zip(*outs):
        torch.testing.assert_close(x, w, rtol=1e-8, atol=1e-8 * (1 + w.abs().max().item()))


@fuzz(40)
@given(
    mesh=st.sampled_from(sorted(MESHES)),
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(["normal", "collapsed", "huge", "tiny"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_geometry_ops_and_regularisers_are_finite(mesh, seed, kind, dtype):
    """Normals, projections and the Laplacian / flatten losses of finite meshes, including collapsed faces
    (coincident vertices), huge and tiny ones: finite values and gradients."""
    v, f = MESHES[mesh]()
    g = torch.Generator().manual_seed(seed)
    v = v.double() + 0.01 * torch.randn(v.shape, generator=g, dtype=torch.float64)
    if kind == "collapsed":
        v[: v.shape[0] // 2] = v[0]
    v = (v * {"huge": 1e15, "tiny": 1e-15}.get(kind, 1.0)).to(dtype)[None].requires_grad_()
    cam = look_at(v, eye=(0.3, 0.4, -3.0)) + torch.tensor([0, 0, 5.0], dtype=dtype)
    outs = [
        face_normals(v, f[None]),
        vertex_normals(v, f[None]),
        look(v, eye=(0, 0, -3.0)),
        orthogonal(cam, 0.5),
        LaplacianLoss(v[0].detach(), f)(v),
        FlattenLoss(f)(v),
    ]
    if kind != "collapsed":
        outs.append(perspective(cam, 20.0))
    total = sum(o.double().sum() for o in outs)
    total.backward()
    for o in outs:
        assert o.isfinite().all()
    assert v.grad.isfinite().all()
