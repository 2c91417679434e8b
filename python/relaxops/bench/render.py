"""Rasterizer cases: ``relaxops.render.rasterize`` per backend, against the dense reference, the original
``gendr`` CUDA kernel and pytorch3d's soft rasterizer (when installed).

Scenes: icospheres of 5,120 and 81,920 faces (radius 0.5) and a procedural scene of about 200k faces, seen from
distance 2.732 at 30 degrees elevation with a 15 degree half field of view (the setting of the GenDR
experiments), batch items from different azimuths. Every provider renders the same screen-space
``face_vertices [B, F, 3, 3]`` (requires grad) with white surface textures (requires grad); the loss is
``(image * g).sum()`` with ``image [B, 4, H, W]``. Settings (tau in NDC, dist_eps 100): uniform tau 1e-2 /
probabilistic, logistic tau 2e-3 / probabilistic, cauchy tau 1e-4 / yager 2.

``pytorch3d``: SoftRas as pytorch3d implements it, ``rasterize_meshes`` (naive on CPU, coarse-to-fine on GPU with
bins that can hold every face) and ``softmax_rgb_blend``, on the same faces (unshared vertices, x negated:
pytorch3d's NDC has +x to the left). Its blur radius (squared NDC) is the square of our setting's reach: the
distance at which our coverage probability falls below the renderer's threshold 1e-6, or our culling distance
``sqrt(dist_eps * tau)`` if nearer (uniform 0.01, logistic 0.028, cauchy 0.1 NDC); its sigma puts its coverage
at the same 1e-6 there (SoftRas' ``blur_radius = log(1 / p - 1) * sigma``); RGB is a softmax over depth with our
``gamma`` 1e-3, near 1, far 100. How it differs from ours: its coverage is always ``sigmoid(-d^2 / sigma)`` of the
squared distance (ours: the setting's distribution of the distance) and its alpha always the probabilistic union
(ours: the setting's T-conorm); it keeps only the 50 nearest faces per pixel (``faces_per_pixel``) within the blur
radius where ours aggregates every face within reach; its background weight is 1e-10 (ours 1e-3). So it does the
same kind of work, not the same numbers (silhouettes agree away from the edges).

Buffers (op ``buffers``): ``relaxops.render.render_buffers`` of the same faces with the mesh's world-space vertex
normals as three attributes (requires grad), perspective-correct barycentrics; outputs depth, barycentrics,
normals and alpha, each with its own cotangent. ``hard``: the closest face's values (hard coverage and alpha;
alpha has no gradient, so no cotangent); ``soft``: the logistic setting above (tau 2e-3, probabilistic alpha),
every channel a softmax over depth (gamma 1e-3). ``pytorch3d``: hard is ``rasterize_meshes`` with blur radius 0,
one face per pixel and ``perspective_correct=True`` (its zbuf, bary_coords, pix_to_face, and
``interpolate_face_attributes`` of the normals); soft is its blurred rasterization (the blur and sigma of the
logistic setting as above, 50 faces per pixel, clipped barycentrics) with ``softmax_rgb_blend``'s weights applied
to all 7 channels (its function blends 3) and its alpha ``1 - prod(1 - p)``; the background is ours (0, depth
``far``). Hard buffers agree away from the edges (tests/test_bench_cases.py); soft ones differ as the images do.
"""

from __future__ import annotations

import functools
import math

import torch

from relaxops._backend import unavailable_reason
from relaxops.render import (
    LookAt,
    Mesh,
    face_vertices,
    get_points_from_angles,
    icosphere,
    rasterize,
    render_buffers,
    scene,
    vertex_normals,
)
from relaxops.render.reference import PROBABILITY_THRESHOLD
from relaxops.render.relaxations import occlusion

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "render"
SETTINGS = {
    "uniform/probabilistic": dict(dist_func="uniform", dist_scale=1e-2, aggr_alpha_func="probabilistic"),
    "logistic/probabilistic": dict(dist_func="logistic", dist_scale=2e-3, aggr_alpha_func="probabilistic"),
    "cauchy/yager": dict(dist_func="cauchy", dist_scale=1e-4, aggr_alpha_func="yager", aggr_alpha_t_conorm_p=2.0),
}
MESHES = {
    "ico5120": lambda: _scaled(icosphere(4)),
    "ico81920": lambda: _scaled(icosphere(6)),
    "scene200k": lambda: _scaled(scene(200_000, seed=0), 0.6),
}
# B * H * W * F up to which the dense reference runs. On CPU one fwd+bwd call (ico5120, B = 1) takes ~0.6 us per
# pixel-face on one thread of this 2-core machine with others working on it (load average ~4.7: 16^2 1.1 s, 32^2
# 3.2 s, 48^2 6.0 s; 128^2 ~40 s), and 1.8-2.0 s at 32^2 in the harness (2 threads, load ~1.8): the limit admits
# ico5120 at 32^2 (5.2e6), not 64^2.
DENSE_LIMIT = {"cpu": 6e6, "cuda": 2e10}
DIST_EPS = 100.0
PYTORCH3D_FACES_PER_PIXEL = 50
# The buffers' settings: the hard depth test, and the logistic setting of SETTINGS with every channel a softmax.
BUFFER_SETTINGS = {
    "hard": dict(dist_func="hard", dist_scale=0.0, dist_eps=1.0, aggr_alpha_func="hard", aggr_func="hard"),
    "soft": dict(dist_func="logistic", dist_scale=2e-3, dist_eps=DIST_EPS, aggr_alpha_func="probabilistic"),
}
SOFT_SETTING = "logistic/probabilistic"  # the rasterize setting that the soft buffers share (pytorch3d's blur)
FAR = 100.0  # our default far plane: the depth background of both providers


def _scaled(mesh, scale=0.5):
    v, f = mesh
    return v * scale, f


def _case(device, mesh, size, batch, setting, mode, default=False, goal=None, op="rasterize"):
    params = dict(mesh=mesh, size=size, batch=batch, setting=setting, dtype="float32")
    channels = 4 if op == "rasterize" else 8  # buffers: depth, 3 barycentrics, 3 normals, alpha
    add_case(
        Case(
            FAMILY,
            op,
            f"{mesh} {size}^2 B={batch} {setting}",
            params,
            mode,
            device,
            default,
            out_bytes=batch * channels * size * size * 4,
            goal=goal,
            items=batch,
            sweep="size",
        )
    )


@functools.cache
def _screen_faces(mesh: str, batch: int):
    """Screen-space ``face_vertices [B, F, 3, 3]`` of the mesh from ``batch`` azimuths (CPU, float32)."""
    v, f = MESHES[mesh]()
    azimuths = torch.arange(batch, dtype=torch.float32) * (360.0 / max(batch, 1))
    eyes = get_points_from_angles(torch.full((batch,), 2.732), torch.full((batch,), 30.0), azimuths)
    m = LookAt(viewing_angle=15, eye=eyes)(Mesh(v[None].expand(batch, -1, -1), f[None].expand(batch, -1, -1)))
    return m.face_vertices.detach().float().contiguous()


@functools.cache
def _face_normals(mesh: str):
    """World-space vertex normals of the mesh gathered per face corner, ``[F, 3, 3]`` (CPU, float32)."""
    v, f = MESHES[mesh]()
    return face_vertices(vertex_normals(v[None], f[None]), f[None])[0].float()


def _buffer_inputs(case):
    """``face_vertices [B, F, 3, 3]``, ``normals [B, F, 3, 3]`` (both require grad) and the cotangents of (depth,
    barycentrics, normals, alpha): none for the hard alpha, which has no gradient."""
    p = case.params
    fv = _screen_faces(p["mesh"], p["batch"]).to(case.device).requires_grad_()
    normals = _face_normals(p["mesh"]).to(case.device).expand(p["batch"], -1, -1, -1).contiguous().requires_grad_()
    if case.mode == "fwd":
        return fv, normals, (None,) * 4
    gen = torch.Generator(case.device).manual_seed(0)
    g = torch.randn(p["batch"], 8, p["size"], p["size"], generator=gen, device=case.device)
    cotangents = (g[:, :1], g[:, 1:4], g[:, 4:7], None if p["setting"] == "hard" else g[:, 7:])
    return fv, normals, cotangents


def _inputs(case):
    p = case.params
    fv = _screen_faces(p["mesh"], p["batch"]).to(case.device).requires_grad_()
    tex = torch.ones(fv.shape[0], fv.shape[1], 1, 3, device=case.device, requires_grad=True)
    gen = torch.Generator(case.device).manual_seed(0)
    g = (
        None
        if case.mode == "fwd"
        else torch.randn(p["batch"], 4, p["size"], p["size"], generator=gen, device=case.device)
    )
    return fv, tex, (g,)


def _ours(backend):
    def make(case):
        p = case.params
        if case.op == "buffers":
            fv, normals, cotangents = _buffer_inputs(case)

            def forward():
                b = render_buffers(
                    fv,
                    normals,
                    image_size=p["size"],
                    perspective_correct=True,
                    backend=backend,
                    **BUFFER_SETTINGS[p["setting"]],
                )
                return b.depth, b.barycentrics, b.attributes, b.alpha

            return forward, [fv, normals], cotangents
        fv, tex, cotangents = _inputs(case)

        def forward():
            return (
                rasterize(fv, tex, image_size=p["size"], dist_eps=DIST_EPS, backend=backend, **SETTINGS[p["setting"]]),
            )

        return forward, [fv, tex], cotangents

    def skip(case):
        device = torch.device(case.device)
        reason = unavailable_reason(backend, device)
        if reason or backend != "reference":
            return reason
        p = case.params
        cost = p["batch"] * p["size"] ** 2 * _screen_faces(p["mesh"], 1).shape[1]
        limit = DENSE_LIMIT[device.type]
        return f"B*H*W*F = {cost:.1e} > {limit:.0e}: too slow to time" if cost > limit else None

    return Provider(backend, make, reference=backend == "reference", skip=skip)


def _gendr_make(case):
    import gendr

    p = case.params
    fv, tex, cotangents = _inputs(case)
    s = SETTINGS[p["setting"]]

    def forward():
        return (
            gendr.functional.render(
                fv,
                tex,
                image_size=p["size"],
                dist_func=s["dist_func"],
                dist_scale=s["dist_scale"],
                dist_shape=0.0,
                dist_shift=0.0,
                dist_eps=DIST_EPS,
                aggr_alpha_func=s["aggr_alpha_func"],
                aggr_alpha_t_conorm_p=s.get("aggr_alpha_t_conorm_p", 0.0),
            ),
        )

    return forward, [fv, tex], cotangents


def _gendr_skip(case):
    if case.op == "buffers":
        return "gendr renders RGBA only (no depth, barycentric or attribute buffers)"
    if torch.device(case.device).type != "cuda":
        return "gendr is CUDA-only"
    return missing("gendr")


@functools.cache
def _reach(setting: str) -> float:
    """NDC distance beyond which a face adds nothing to our image in the setting: where its coverage probability
    falls below the renderer's threshold, or the culling distance ``sqrt(dist_eps * tau)`` if nearer."""
    s = SETTINGS[setting]
    d = torch.linspace(0, math.sqrt(DIST_EPS * s["dist_scale"]), 100_001, dtype=torch.float64)
    return d[occlusion(-d, s["dist_scale"], s["dist_func"])[0] > PROBABILITY_THRESHOLD].max().item()


def _pytorch3d_make(case):
    if case.op == "buffers":
        return _pytorch3d_buffers_make(case)
    from pytorch3d.renderer import BlendParams, rasterize_meshes, softmax_rgb_blend
    from pytorch3d.renderer.mesh.rasterizer import Fragments
    from pytorch3d.structures import Meshes

    p = case.params
    fv, tex, cotangents = _inputs(case)
    batch, num_faces = fv.shape[:2]
    blur = _reach(p["setting"]) ** 2
    blend = BlendParams(
        sigma=blur / math.log(1 / PROBABILITY_THRESHOLD - 1), gamma=1e-3, background_color=(0.0, 0.0, 0.0)
    )
    faces = torch.arange(3 * num_faces, device=fv.device).view(1, num_faces, 3).expand(batch, -1, -1)
    flip_x = torch.tensor([-1.0, 1.0, 1.0], device=fv.device)

    def forward():
        meshes = Meshes(verts=(fv * flip_x).reshape(batch, 3 * num_faces, 3), faces=faces)
        # on GPU (coarse-to-fine) every face may reach every bin: bins hold them all, so none is dropped
        pix_to_face, zbuf, bary, dists = rasterize_meshes(
            meshes,
            image_size=p["size"],
            blur_radius=blur,
            faces_per_pixel=PYTORCH3D_FACES_PER_PIXEL,
            max_faces_per_bin=num_faces,
        )
        colors = tex.reshape(batch * num_faces, 3)[pix_to_face.clamp(min=0)]  # [B, H, W, K, 3]
        fragments = Fragments(pix_to_face=pix_to_face, zbuf=zbuf, bary_coords=bary, dists=dists)
        image = softmax_rgb_blend(colors, fragments, blend, znear=1.0, zfar=100.0)
        return (image.permute(0, 3, 1, 2),)

    return forward, [fv, tex], cotangents


def _pytorch3d_buffers_make(case):
    from pytorch3d.ops import interpolate_face_attributes
    from pytorch3d.renderer import rasterize_meshes
    from pytorch3d.structures import Meshes

    p = case.params
    fv, normals, cotangents = _buffer_inputs(case)
    batch, num_faces = fv.shape[:2]
    hard = p["setting"] == "hard"
    blur = 0.0 if hard else _reach(SOFT_SETTING) ** 2
    sigma = blur / math.log(1 / PROBABILITY_THRESHOLD - 1)
    faces = torch.arange(3 * num_faces, device=fv.device).view(1, num_faces, 3).expand(batch, -1, -1)
    flip_x = torch.tensor([-1.0, 1.0, 1.0], device=fv.device)
    background = torch.tensor([FAR, 0, 0, 0, 0, 0, 0], device=fv.device)

    def forward():
        meshes = Meshes(verts=(fv * flip_x).reshape(batch, 3 * num_faces, 3), faces=faces)
        pix_to_face, zbuf, bary, dists = rasterize_meshes(
            meshes,
            image_size=p["size"],
            blur_radius=blur,
            faces_per_pixel=1 if hard else PYTORCH3D_FACES_PER_PIXEL,
            max_faces_per_bin=num_faces,
            perspective_correct=True,
            clip_barycentric_coords=not hard,
        )
        attrs = interpolate_face_attributes(pix_to_face, bary, normals.reshape(batch * num_faces, 3, 3))
        values = torch.cat([zbuf[..., None], bary, attrs], -1)  # [B, H, W, K, 7]
        covered = pix_to_face >= 0
        if hard:
            out = torch.where(covered[..., 0, None], values[..., 0, :], background)
            alpha = covered[..., 0].to(fv.dtype)
        else:  # softmax_rgb_blend's weights (eps 1e-10, gamma 1e-3, near 1, far 100) on the 7 channels
            prob = torch.sigmoid(-dists / sigma) * covered
            alpha = 1 - torch.prod(1 - prob, dim=-1)
            z_inv = (FAR - zbuf) / (FAR - 1.0) * covered
            z_inv_max = z_inv.max(-1, keepdim=True).values.clamp(min=1e-10)
            weights = prob * torch.exp((z_inv - z_inv_max) / 1e-3)
            delta = torch.exp((1e-10 - z_inv_max) / 1e-3).clamp(min=1e-10)
            out = ((weights[..., None] * values).sum(-2) + delta * background) / (weights.sum(-1, keepdim=True) + delta)
        out = out.permute(0, 3, 1, 2)
        return out[:, :1], out[:, 1:4], out[:, 4:7], alpha[:, None]

    return forward, [fv, normals], cotangents


for _backend in ("reference", "cpu", "cuda"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("gendr", _gendr_make, reference=True, skip=_gendr_skip))
add_provider(FAMILY, Provider("pytorch3d", _pytorch3d_make, reference=True, skip=lambda case: missing("pytorch3d")))

# CPU, default run: ico5120, B = 1, fwd+bwd at 32^2, 64^2 and 128^2 (the plotted sweep) for every setting. The
# issue's target (cpu >= 10x the dense reference) is checked at 32^2, the largest of these where the reference
# runs (see DENSE_LIMIT). --full adds 256^2 and 1024^2, batch 8, forward alone, and the larger meshes.
for _setting in SETTINGS:
    for _size in (32, 64, 128, 256, 1024):
        _grid = _size in (64, 256, 1024)  # batch 8 and the forward alone; 32^2 and 128^2 only for the sweep
        for _batch in (1, 8) if _grid else (1,):
            for _mode in ("fwd", "fwd+bwd") if _grid else ("fwd+bwd",):
                _head = _size <= 128 and _batch == 1 and _mode == "fwd+bwd"
                _case(
                    "cpu",
                    "ico5120",
                    _size,
                    _batch,
                    _setting,
                    _mode,
                    default=_head,
                    goal=("reference", 10.0) if _head and _size == 32 else None,
                )
    for _mesh in ("ico81920", "scene200k"):
        for _size in (64, 256, 1024):
            for _mode in ("fwd", "fwd+bwd"):
                _case("cpu", _mesh, _size, 1, _setting, _mode)

# Buffers on CPU, default run: ico5120, B = 1, fwd+bwd at 32^2 (where the dense reference runs), 64^2 and 128^2,
# hard and soft. --full adds 256^2 and 1024^2, batch 8, the forward alone, and the larger meshes.
for _setting in BUFFER_SETTINGS:
    for _size in (32, 64, 128, 256, 1024):
        _grid = _size in (64, 256, 1024)
        for _batch in (1, 8) if _grid else (1,):
            for _mode in ("fwd", "fwd+bwd") if _grid else ("fwd+bwd",):
                _head = _size <= 128 and _batch == 1 and _mode == "fwd+bwd"
                _case("cpu", "ico5120", _size, _batch, _setting, _mode, default=_head, op="buffers")
    for _mesh in ("ico81920", "scene200k"):
        for _size in (64, 256, 1024):
            for _mode in ("fwd", "fwd+bwd"):
                _case("cpu", _mesh, _size, 1, _setting, _mode, op="buffers")

# GPU: the full grid; the target is 10x the original kernel at 256^2, 81,920 faces, batch 8. Default run: that
# mesh and batch, fwd+bwd, at every size.
for _setting in SETTINGS:
    for _mesh in MESHES:
        for _size in (64, 256, 1024):
            for _batch in (1, 8):
                for _mode in ("fwd", "fwd+bwd"):
                    _head = _mesh == "ico81920" and _batch == 8 and _mode == "fwd+bwd"
                    _case(
                        "cuda",
                        _mesh,
                        _size,
                        _batch,
                        _setting,
                        _mode,
                        default=_head,
                        goal=("gendr", 10.0) if _head and _size == 256 else None,
                    )
# Buffers on GPU: the same grid; default run: 81,920 faces, batch 8, fwd+bwd at every size.
for _setting in BUFFER_SETTINGS:
    for _mesh in MESHES:
        for _size in (64, 256, 1024):
            for _batch in (1, 8):
                for _mode in ("fwd", "fwd+bwd"):
                    _head = _mesh == "ico81920" and _batch == 8 and _mode == "fwd+bwd"
                    _case("cuda", _mesh, _size, _batch, _setting, _mode, default=_head, op="buffers")
