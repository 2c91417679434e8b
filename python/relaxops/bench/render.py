"""Rasterizer cases: ``relaxops.render.rasterize`` per backend, against the dense reference and the original
``gendr`` CUDA kernel (when installed).

Scenes: icospheres of 5,120 and 81,920 faces (radius 0.5) and a procedural scene of about 200k faces, seen from
distance 2.732 at 30 degrees elevation with a 15 degree half field of view (the setting of the GenDR
experiments), batch items from different azimuths. Every provider renders the same screen-space
``face_vertices [B, F, 3, 3]`` (requires grad) with white surface textures; the loss is ``(image * g).sum()``.
Settings (tau in NDC, dist_eps 100): uniform tau 1e-2 / probabilistic, logistic tau 2e-3 / probabilistic,
cauchy tau 1e-4 / yager 2.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from relaxops._backend import unavailable_reason
from relaxops.render import LookAt, Mesh, get_points_from_angles, icosphere, rasterize, scene

from .registry import Case, Provider, add_case, add_provider

FAMILY = "render"
SETTINGS = {
    "uniform/probabilistic": dict(dist_func="uniform", dist_scale=1e-2, aggr_alpha_func="probabilistic"),
    "logistic/probabilistic": dict(dist_func="logistic", dist_scale=2e-3, aggr_alpha_func="probabilistic"),
    "cauchy/yager": dict(dist_func="cauchy", dist_scale=1e-4, aggr_alpha_func="yager", aggr_alpha_t_conorm_p=2.0),
}
MESHES = {"ico5120": lambda: _scaled(icosphere(4)), "ico81920": lambda: _scaled(icosphere(6)),
          "scene200k": lambda: _scaled(scene(200_000, seed=0), 0.6)}
DENSE_LIMIT = {"cpu": 2e8, "cuda": 2e10}  # B * H * W * F up to which the dense reference runs


def _scaled(mesh, scale=0.5):
    v, f = mesh
    return v * scale, f


def _case(device, mesh, size, batch, setting, mode, default=False, goal=None):
    params = dict(mesh=mesh, size=size, batch=batch, setting=setting, dtype="float32")
    add_case(Case(FAMILY, "rasterize", f"{mesh} {size}^2 B={batch} {setting}", params, mode, device, default,
                  out_bytes=batch * 4 * size * size * 4, goal=goal, items=batch))


@functools.cache
def _screen_faces(mesh: str, batch: int):
    """Screen-space ``face_vertices [B, F, 3, 3]`` of the mesh from ``batch`` azimuths (CPU, float32)."""
    v, f = MESHES[mesh]()
    azimuths = torch.arange(batch, dtype=torch.float32) * (360.0 / max(batch, 1))
    eyes = get_points_from_angles(torch.full((batch,), 2.732), torch.full((batch,), 30.0), azimuths)
    m = LookAt(viewing_angle=15, eye=eyes)(Mesh(v[None].expand(batch, -1, -1), f[None].expand(batch, -1, -1)))
    return m.face_vertices.detach().float().contiguous()


def _inputs(case):
    p = case.params
    fv = _screen_faces(p["mesh"], p["batch"]).to(case.device).requires_grad_()
    tex = torch.ones(fv.shape[0], fv.shape[1], 1, 3, device=case.device, requires_grad=True)
    gen = torch.Generator(case.device).manual_seed(0)
    g = None if case.mode == "fwd" else torch.randn(p["batch"], 4, p["size"], p["size"], generator=gen,
                                                     device=case.device)
    return fv, tex, (g,)


def _ours(backend):
    def make(case):
        p = case.params
        fv, tex, cotangents = _inputs(case)

        def forward():
            return (rasterize(fv, tex, image_size=p["size"], dist_eps=100, backend=backend, **SETTINGS[p["setting"]]),)
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
        return (gendr.functional.render(fv, tex, image_size=p["size"], dist_func=s["dist_func"],
                                        dist_scale=s["dist_scale"], dist_shape=0.0, dist_shift=0.0, dist_eps=100,
                                        aggr_alpha_func=s["aggr_alpha_func"],
                                        aggr_alpha_t_conorm_p=s.get("aggr_alpha_t_conorm_p", 0.0)),)
    return forward, [fv, tex], cotangents


def _gendr_skip(case):
    if torch.device(case.device).type != "cuda":
        return "gendr is CUDA-only"
    return None if importlib.util.find_spec("gendr") is not None else "gendr is not installed"


for _backend in ("reference", "cpu", "cuda"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("gendr", _gendr_make, reference=True, skip=_gendr_skip))

# CPU: the target (cpu >= 10x the dense reference at 128^2, 5,120 faces, forward+backward) for every
# setting, then how the cost grows with pixels, batch and faces.
for _setting in SETTINGS:
    _case("cpu", "ico5120", 128, 1, _setting, "fwd+bwd", default=True, goal=("reference", 10.0))
    for _size in (64, 256, 1024):
        for _batch in (1, 8):
            for _mode in ("fwd", "fwd+bwd"):
                _case("cpu", "ico5120", _size, _batch, _setting, _mode)
    for _mesh in ("ico81920", "scene200k"):
        for _size in (64, 256, 1024):
            for _mode in ("fwd", "fwd+bwd"):
                _case("cpu", _mesh, _size, 1, _setting, _mode)

# GPU: the full grid; the target is 10x the original kernel at 256^2, 81,920 faces, batch 8.
for _setting in SETTINGS:
    for _mesh in MESHES:
        for _size in (64, 256, 1024):
            for _batch in (1, 8):
                for _mode in ("fwd", "fwd+bwd"):
                    _target = _mesh == "ico81920" and _size == 256 and _batch == 8
                    _case("cuda", _mesh, _size, _batch, _setting, _mode, default=_target,
                          goal=("gendr", 10.0) if _target else None)
