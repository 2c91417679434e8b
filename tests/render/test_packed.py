"""Mixed meshes in a batch (docs/math/render.md "Mixed meshes in a batch"): packed faces with per-mesh offsets
equal one call per mesh, values and gradients, on every backend; the padded layout is the packed one with uniform
offsets; bad offsets are refused naming ``mesh_offsets``."""

from __future__ import annotations

import pytest
import torch
from relaxops import _ext
from relaxops.render import ops as render_ops
from relaxops.render import pack, rasterize
from relaxops.render import relaxations as R
from relaxops.render.functional import Renderer
from relaxops.render.relaxations import RasterSettings
from testing import opcheck_calls

from .test_rasterize import T_PARAMS, assert_backends_agree

needs_cpu = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C not built")
BACKENDS = ["reference", pytest.param("cpu", marks=needs_cpu)]
# face counts per mesh: odd counts, an empty mesh, one mesh, very different sizes
COUNTS = [[3, 0, 7, 1], [5], [1, 23, 2], [0, 0]]


def meshes(counts, T=4, seed=0, dtype=torch.float64):
    """Per-mesh ``face_vertices [F_i, 3, 3]`` and ``textures [F_i, T, 3]``: triangles of about a third of the image,
    depths in [1.5, 4.5] (as test_rasterize.random_scene)."""
    g = torch.Generator().manual_seed(seed)
    fvs, texs = [], []
    for n in counts:
        fv = torch.rand(n, 3, 3, generator=g, dtype=dtype) * 1.6 - 0.8
        fv[..., 2] = torch.rand(n, 3, generator=g, dtype=dtype) * 3 + 1.5
        fvs.append(fv)
        texs.append(torch.rand(n, T, 3, generator=g, dtype=dtype))
    return fvs, texs


def image_and_grads(fv, tex, G, **kw):
    """The image and the gradients (fv, tex) of <image, G>."""
    fv, tex = fv.detach().requires_grad_(), tex.detach().requires_grad_()
    img = rasterize(fv, tex, **kw)
    gfv, gtex = torch.autograd.grad((img * G).sum(), (fv, tex), materialize_grads=True)
    return img.detach(), gfv, gtex


def packed_and_per_mesh(counts, dtype=torch.float64, T=4, seed=0, **kw):
    """(packed call's image, grad fv, grad tex), (the same from one call per mesh, concatenated)."""
    fvs, texs = meshes(counts, T, seed, dtype)
    fv, offsets = pack(fvs)
    tex, tex_offsets = pack(texs)
    assert torch.equal(offsets, tex_offsets)
    H, W = kw["image_size"]
    G = torch.randn(len(counts), 4, H, W, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    packed = image_and_grads(fv, tex, G, mesh_offsets=offsets, **kw)
    alone = [image_and_grads(f[None], t[None], G[b : b + 1], **kw) for b, (f, t) in enumerate(zip(fvs, texs))]
    per_mesh = (
        torch.cat([a[0] for a in alone]),
        torch.cat([a[1][0] for a in alone]),
        torch.cat([a[2][0] for a in alone]),
    )
    return packed, per_mesh


def assert_packed_equals_per_mesh(counts, backend, dtype=torch.float64, **kw):
    """Packed and per-mesh calls compute each mesh alike (the same faces in the same order, the same F for
    `average`): bitwise equal, except the reference's uniform path (one [B, F] batch: its face blocks, hence the
    streaming softmax's rounding, depend on B; float64 rounding)."""
    packed, per_mesh = packed_and_per_mesh(counts, dtype, backend=backend, **kw)
    uniform = len(set(counts)) == 1 and len(counts) > 1
    for name, got, want in zip(("image", "grad face_vertices", "grad textures"), packed, per_mesh):
        assert got.shape == want.shape, name
        if backend == "reference" and uniform:
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")
        else:
            assert torch.equal(got, want), f"{name}: max difference {(got - want).abs().max().item()}"


SCENE = dict(image_size=(13, 11), dist_func="logistic", dist_scale=0.05, aggr_rgb_gamma=0.05, dist_eps=100)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("counts", COUNTS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_packed_equals_per_mesh_calls(backend, counts, dtype):
    for rgb in ("softmax", "hard"):
        for texture_type, T in (("surface", 4), ("vertex", 3)):
            assert_packed_equals_per_mesh(
                counts,
                backend,
                dtype,
                T=T,
                aggr_rgb_func=rgb,
                texture_type=texture_type,
                background_color=(0.2, 0.3, 0.4),
                **SCENE,
            )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("alpha,p", T_PARAMS)
def test_packed_equals_per_mesh_for_every_alpha(backend, alpha, p):
    """Every alpha fold, `average` dividing by each mesh's own face count."""
    for dtype in (torch.float64, torch.float32):
        assert_packed_equals_per_mesh(
            [4, 1, 0, 9], backend, dtype, aggr_alpha_func=alpha, aggr_alpha_t_conorm_p=p, double_side=False, **SCENE
        )


@needs_cpu
@pytest.mark.parametrize("counts", COUNTS[:3] + [[2, 2, 2]], ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_packed_kernel_matches_reference(counts, dtype):
    """The CPU kernel on packed meshes against the float64 reference (bounds of tests/render/test_rasterize.py)."""
    fvs, texs = meshes(counts, T=9, seed=4)
    fv, offsets = pack(fvs)
    tex, _ = pack(texs)
    for alpha, rgb in (("average", "softmax"), ("probabilistic", "hard"), ("yager", "softmax")):
        assert_backends_agree(
            fv,
            tex,
            "cpu",
            dtype=dtype,
            mesh_offsets=offsets,
            aggr_alpha_func=alpha,
            aggr_alpha_t_conorm_p=2.0 if alpha == "yager" else None,
            aggr_rgb_func=rgb,
            **SCENE,
        )


def test_average_divides_by_each_mesh_face_count():
    """One face covering the image (D = 1 at every pixel) alone, and beside 3 faces outside the image: `average`
    alpha is 1 / F_b of the face's own mesh."""
    big = torch.tensor([[[-9.0, -9.0, 2.0], [0.0, 9.0, 2.0], [9.0, -9.0, 2.0]]], dtype=torch.float64)
    away = big.repeat(3, 1, 1) + torch.tensor([40.0, 0.0, 0.0], dtype=torch.float64)
    fv, offsets = pack([big, torch.cat([big, away]), away])
    img = rasterize(fv, image_size=5, mesh_offsets=offsets, aggr_alpha_func="average", dist_func="hard", dist_scale=0)
    torch.testing.assert_close(img[:, 3].amax((1, 2)), torch.tensor([1.0, 0.25, 0.0], dtype=torch.float64))
    torch.testing.assert_close(img[:, 3].amin((1, 2)), torch.tensor([1.0, 0.25, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hard_rgb_face_index_is_the_packed_index(backend):
    """aggr's face channel (hard RGB) holds the packed index: the per-mesh index plus the mesh's first face."""
    counts = [3, 0, 5, 2]
    fvs, texs = meshes(counts, T=1, seed=2)
    fv, offsets = pack([f.reshape(-1, 9) for f in fvs])
    tex, _ = pack(texs)
    ints, floats = RasterSettings.from_options(
        (13, 11), dist_func="logistic", dist_scale=0.05, aggr_rgb_func="hard"
    ).to_lists()
    _, aggr = render_ops.render_fwd(fv, tex, offsets, ints, floats, backend)
    for b, (f, t) in enumerate(zip(fvs, texs)):
        _, alone = render_ops.render_fwd(
            f.reshape(-1, 9).contiguous(), t, torch.tensor([0, counts[b]]), ints, floats, backend
        )
        face = alone[0, 1]
        want = torch.where(face >= 0, face + offsets[b], face)
        assert torch.equal(aggr[b, 1], want)
        assert torch.equal(aggr[b, 0], alone[0, 0])
    covered = aggr[:, 1] >= 0
    mesh = torch.arange(len(counts))[:, None, None].expand_as(aggr[:, 1])
    index = aggr[:, 1].long()
    assert covered.any()
    assert ((index[covered] >= offsets[mesh[covered]]) & (index[covered] < offsets[mesh[covered] + 1])).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_layout_is_packed_with_uniform_offsets(backend):
    """[B, F, ...] input equals its packed reshape with offsets b F, bitwise (the same op call)."""
    B, F = 3, 5
    fvs, texs = meshes([F] * B, seed=6)
    fv, tex = torch.stack(fvs), torch.stack(texs)
    offsets = torch.arange(B + 1) * F
    for alpha in ("average", "einstein"):
        kw = dict(backend=backend, aggr_alpha_func=alpha, **SCENE)
        G = torch.randn(B, 4, 13, 11, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        padded = image_and_grads(fv, tex, G, **kw)
        packed = image_and_grads(fv.reshape(B * F, 3, 3), tex.reshape(B * F, 4, 3), G, mesh_offsets=offsets, **kw)
        for p, q in zip(padded, packed):
            assert torch.equal(p.reshape(q.shape), q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_renderer_passes_mesh_offsets(backend):
    fvs, texs = meshes([2, 6], seed=8)
    fv, offsets = pack(fvs)
    tex, _ = pack(texs)
    renderer = Renderer(image_size=9, dist_func="logistic", dist_scale=0.05, backend=backend, anti_aliasing=True)
    img = renderer.forward_tensors(fv, tex, mesh_offsets=offsets)
    want = torch.cat([renderer.forward_tensors(f[None], t[None]) for f, t in zip(fvs, texs)])
    assert torch.equal(img, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck_with_offsets(backend):
    """torch.library.opcheck of render_fwd / render_bwd called with packed meshes (an empty one included)."""
    fvs, texs = meshes([3, 0, 4], T=4, seed=9)
    fv, offsets = pack(fvs)
    tex, _ = pack(texs)
    for rgb in ("softmax", "hard"):
        names = opcheck_calls(
            rasterize,
            fv,
            tex,
            image_size=(7, 6),
            dist_func="logistic",
            dist_scale=0.05,
            aggr_rgb_func=rgb,
            aggr_alpha_func="average",
            backend=backend,
            mesh_offsets=offsets,
        )
        assert names == ["relaxops::render_fwd", "relaxops::render_bwd"], names


def test_bad_offsets_are_refused_naming_mesh_offsets():
    fv, tex = torch.rand(4, 3, 3), torch.rand(4, 1, 3)
    bad = [
        (torch.tensor([0, 2, 4], dtype=torch.int32), TypeError),
        (torch.tensor([0.0, 4.0]), TypeError),
        ([0, 4], TypeError),
        (torch.tensor([[0, 4]]), ValueError),
        (torch.tensor([], dtype=torch.int64), ValueError),
        (torch.tensor([1, 4]), ValueError),
        (torch.tensor([0, 3]), ValueError),
        (torch.tensor([0, 5]), ValueError),
        (torch.tensor([0, 3, 2, 4]), ValueError),
        (torch.tensor([0, -1, 4]), ValueError),
    ]
    backends = ["reference"] + (["cpu"] if _ext.has_cpu() else [])
    for offsets, exc in bad:
        for backend in backends:
            with pytest.raises(exc, match="mesh_offsets"):
                rasterize(fv, tex, image_size=4, mesh_offsets=offsets, backend=backend)
    with pytest.raises(ValueError, match=r"face_vertices must have shape \[N, 3, 3\] or \[N, 9\]"):
        rasterize(fv[None], tex, image_size=4, mesh_offsets=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"textures must have shape \[N, R\*R, 3\] = \[4, R\*R, 3\]"):
        rasterize(fv, tex[None], image_size=4, mesh_offsets=torch.tensor([0, 4]))


def test_a_changed_offsets_tensor_is_checked_again():
    """The values are read once while the tensor is unchanged; an in-place edit makes the next call read them."""
    fv = torch.rand(4, 3, 3)
    offsets = torch.tensor([0, 1, 4])
    rasterize(fv, image_size=4, mesh_offsets=offsets, backend="reference")
    offsets[1] = 7
    with pytest.raises(ValueError, match="mesh_offsets must be non-decreasing"):
        rasterize(fv, image_size=4, mesh_offsets=offsets, backend="reference")


def test_pack():
    a, b, c = torch.rand(2, 3, 3), torch.rand(0, 3, 3), torch.rand(5, 3, 3)
    packed, offsets = pack([a, b, c])
    assert torch.equal(packed, torch.cat([a, c])) and offsets.dtype == torch.int64
    assert offsets.tolist() == [0, 2, 2, 7]
    packed, offsets = pack((a,))
    assert torch.equal(packed, a) and offsets.tolist() == [0, 2]
    with pytest.raises(TypeError, match="tensors must be a list or tuple"):
        pack(a)
    with pytest.raises(ValueError, match="tensors must hold at least one tensor"):
        pack([])
    with pytest.raises(TypeError, match=r"tensors\[1\] must be a torch.Tensor"):
        pack([a, [1, 2]])
    with pytest.raises(ValueError, match=r"tensors\[1\] must have shape \[F_1, \.\.\.\]"):
        pack([a, torch.tensor(1.0)])
    with pytest.raises(ValueError, match=r"tensors\[1\] .* must match tensors\[0\]"):
        pack([a, torch.rand(2, 9)])
    with pytest.raises(ValueError, match=r"tensors\[2\] .* must match tensors\[0\]"):
        pack([a, b, c.double()])


def test_every_distribution_packed():
    """The culls and coverage of every distribution per mesh, on the reference (the CPU kernel: the tests above)."""
    for dist in R.DISTRIBUTIONS:
        assert_packed_equals_per_mesh(
            [2, 0, 3],
            "reference",
            image_size=(7, 5),
            dist_func=dist,
            dist_scale=0.05,
            dist_shape=0.5,
            dist_shift=0.3,
            dist_eps=50,
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_meshes(backend):
    """B = 0 (offsets [0]): an empty image batch and empty gradients."""
    fv = torch.rand(0, 3, 3, dtype=torch.float64, requires_grad=True)
    img = rasterize(fv, image_size=4, mesh_offsets=torch.tensor([0]), backend=backend, aggr_rgb_func="hard")
    assert img.shape == (0, 4, 4, 4)
    img.sum().backward()
    assert fv.grad.shape == (0, 3, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_rasterize_compiles_fullgraph(backend):
    """Under torch.compile the offsets' values are not read (fake tensors); the compiled call equals the eager one,
    and the eager op still checks them."""
    torch._dynamo.reset()
    kw = dict(image_size=7, dist_func="logistic", dist_scale=0.05, aggr_alpha_func="average", backend=backend)
    f = torch.compile(
        lambda x, t, o: rasterize(x, t, mesh_offsets=o, **kw), fullgraph=True, dynamic=True, backend="aot_eager"
    )
    for counts in ([3, 0, 5], [2, 7], [1, 1, 4, 2]):  # the sizes change between calls
        fvs, texs = meshes(counts, seed=len(counts))
        fv, offsets = pack(fvs)
        tex, _ = pack(texs)
        torch.testing.assert_close(f(fv, tex, offsets), rasterize(fv, tex, mesh_offsets=offsets, **kw), rtol=0, atol=0)
    with pytest.raises(Exception, match="mesh_offsets"):
        f(fv, tex, torch.tensor([0, 2, 1, 5, 8]))
