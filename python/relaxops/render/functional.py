"""The rasterizer as a function and as a module: argument checks, layout and backend choice."""

from __future__ import annotations

import torch
import torch.nn.functional as nnf

from .. import _backend, _checks
from . import ops
from .buffers import render_buffers
from .relaxations import RasterSettings


def rasterize(
    face_vertices: torch.Tensor,
    textures: torch.Tensor | None = None,
    image_size=256,
    background_color=(0, 0, 0),
    dist_func="uniform",
    dist_scale=1e-2,
    dist_squared=False,
    dist_shape=None,
    dist_shift=None,
    dist_eps=1e4,
    aggr_alpha_func="probabilistic",
    aggr_alpha_t_conorm_p=None,
    aggr_rgb_func="softmax",
    aggr_rgb_eps=1e-3,
    aggr_rgb_gamma=1e-3,
    near=1,
    far=100,
    double_side=True,
    texture_type="surface",
    backend="auto",
    mesh_offsets: torch.Tensor | None = None,
    face_uvs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Render faces in screen space with GenDR: every pixel's alpha is the T-conorm of the faces' coverage
    probabilities ``F(d / tau)``, its colour a hard depth test or a softmax over depth (docs/math/render.md).

    Args:
        face_vertices: ``[B, F, 3, 3]`` (or ``[B, F, 9]``) projected vertices ``(x, y, z)`` of every face: x, y in
            normalised device coordinates (``[-1, 1]``, y up), z the camera depth. Faces are clockwise on screen
            when they face the camera. With ``mesh_offsets``: the packed faces ``[N, 3, 3]`` (or ``[N, 9]``) of
            all meshes, mesh after mesh (see :func:`pack`). Differentiable.
        textures: ``[B, F, R*R, 3]`` surface texels (``texture_type='surface'``) or ``[B, F, 3, 3]`` per-vertex
            colours of each face (``'vertex'``); packed ``[N, R*R, 3]`` / ``[N, 3, 3]`` with ``mesh_offsets``;
            None: white; for ``'uv'``, an image ``[B, Ht, Wt, 3]`` (or ``[Ht, Wt, 3]``, row 0 at the top) mapped by
            ``face_uvs``. Differentiable.
        image_size: ``S`` (square) or ``(H, W)``.
        background_color: RGB where no face contributes.
        dist_func: the occlusion distribution: one of ``relaxations.DISTRIBUTIONS`` (or its integer id).
        dist_scale: its scale ``tau`` (> 0; >= 0 for ``hard``), in NDC, or squared NDC if ``dist_squared``.
        dist_squared: use the squared distance ``F(s d^2 / tau)``.
        dist_shape: gamma shape ``k`` (gamma families only, > 0). dist_shift: shift in units of tau (exponential,
            gamma and Levy families). ``None`` means 0.
        dist_eps: culling factor (>= 1): outside faces farther than ``sqrt(dist_eps * tau)`` are ignored.
        aggr_alpha_func: the T-conorm (``relaxations.T_CONORMS``); aggr_alpha_t_conorm_p its parameter.
            ``'average'`` (no T-conorm, no parameter) is the faces' mean coverage ``sum(D) / F`` over the ``F``
            faces (docs/math/render.md §3.4).
        aggr_rgb_func: ``'softmax'`` (over normalised inverse depth, temperature ``aggr_rgb_gamma``, background
            offset ``aggr_rgb_eps``) or ``'hard'`` (closest face).
        near, far: depth range of the RGB aggregation, ``0 < near < far`` (alpha ignores it, as the original).
        double_side: render back faces in RGB (alpha always uses every face).
        texture_type: ``'surface'``, ``'vertex'`` or ``'uv'`` (the image ``textures`` sampled trilinearly from its
            mip pyramid, wrapped with ``'repeat'``, at ``face_uvs`` interpolated with the clipped barycentrics:
            :func:`relaxops.render.render_buffers`, whose RGB background is ``background_color``; the vertices
            get gradients through the barycentrics too).
        backend: ``auto``, ``reference``, ``cpu`` or ``cuda`` (``auto`` picks cuda once it is verified on a GPU).
        mesh_offsets: None (``[B, F, ...]`` input: B meshes of F faces each), or int64 ``[B + 1]`` on the device of
            ``face_vertices`` for packed input: mesh b owns the faces ``mesh_offsets[b] .. mesh_offsets[b + 1] - 1``
            and is drawn into image b (0 first, non-decreasing, N last; docs/math/render.md "Mixed meshes in a
            batch"). ``'average'`` alpha divides by each mesh's own face count; the cost is that of the N faces
            (no padding). Its values are read on the host once per tensor (a GPU synchronisation the first time).

        face_uvs: ``[B, F, 3, 2]`` (packed ``[N, 3, 2]``) texture coordinates ``(u, v)`` of the face corners (v up),
            for ``'uv'`` only.

    Returns:
        ``[B, 4, H, W]`` RGBA in the dtype of ``face_vertices`` (float32/float64 computed as such, half types in
        float32), row 0 at the top.

    Non-finite and extreme input (every backend alike): a face with a NaN or infinite vertex coordinate (e.g. a
    vertex at depth 0 projected to infinity), or so large that its area overflows the dtype, is skipped like a
    degenerate face: it covers no pixel and gets zero gradients, the rest of the image is unchanged. A NaN or
    infinite texture value reaches the RGB (and the gradients) of the pixels where its face takes part in the
    colour aggregation, and nothing else (alpha never depends on textures). For finite input the image and the
    gradients are finite: the depth softmax is max-stabilised, so any ``aggr_rgb_gamma >= 1e-12`` works (as does
    ``dist_scale >= 1e-12``; float options are limited to ``|x| <= 1e30`` and ``0 < near < far``).

    Raises:
        TypeError: an argument of the wrong type (e.g. ``image_size=1.5``), naming it.
        ValueError: an argument out of range or an unknown option name, naming it.
        MemoryError: the image and work buffers would not fit in the device's memory (with the size).
    """
    if texture_type == "uv":
        return _rasterize_uv(
            face_vertices, textures, face_uvs, image_size, background_color, dist_func, dist_scale, dist_squared,
            dist_shape, dist_shift, dist_eps, aggr_alpha_func, aggr_alpha_t_conorm_p, aggr_rgb_func, aggr_rgb_eps,
            aggr_rgb_gamma, near, far, double_side, backend, mesh_offsets,
        )  # fmt: skip
    s = RasterSettings.from_options(
        image_size,
        background_color,
        dist_func,
        dist_scale,
        dist_squared,
        dist_shape,
        dist_shift,
        dist_eps,
        aggr_alpha_func,
        aggr_alpha_t_conorm_p,
        aggr_rgb_func,
        aggr_rgb_eps,
        aggr_rgb_gamma,
        near,
        far,
        double_side,
        texture_type,
    )
    packed = mesh_offsets is not None
    if packed and not isinstance(mesh_offsets, torch.Tensor):
        raise TypeError(f"mesh_offsets must be an int64 tensor [B + 1] or None, got {type(mesh_offsets).__name__}")
    lead = 1 if packed else 2  # the face dimensions: (N,) or (B, F)
    names = "N" if packed else "B, F"
    _checks.floating_tensor(face_vertices, "face_vertices", lead + 1)
    fv = face_vertices
    if fv.dim() == lead + 2 and fv.shape[lead:] == (3, 3):
        fv = fv.reshape(*fv.shape[:lead], 9)
    if fv.dim() != lead + 1 or fv.shape[lead] != 9:
        raise ValueError(
            f"face_vertices must have shape [{names}, 3, 3] or [{names}, 9], got {tuple(face_vertices.shape)}"
        )
    faces = tuple(fv.shape[:lead])
    if textures is None:
        textures = fv.new_ones(*faces, 1 if s.texture == 0 else 3, 3)
    _checks.floating_tensor(textures, "textures", lead + 2)
    if textures.device != fv.device:
        raise ValueError(f"textures is on {textures.device}, face_vertices on {fv.device}")
    T = textures.shape[lead] if textures.dim() == lead + 2 else -1
    if s.texture == 1 and tuple(textures.shape) != (*faces, 3, 3):
        sizes = ", ".join(str(n) for n in faces)
        raise ValueError(
            f"textures must have shape [{names}, 3, 3] = [{sizes}, 3, 3] for vertex textures, got "
            f"{tuple(textures.shape)}"
        )
    if s.texture == 0 and (
        textures.dim() != lead + 2
        or tuple(textures.shape[:lead]) != faces
        or textures.shape[-1] != 3
        or T < 1
        or round(T**0.5) ** 2 != T
    ):
        sizes = ", ".join(str(n) for n in faces)
        raise ValueError(
            f"textures must have shape [{names}, R*R, 3] = [{sizes}, R*R, 3] for surface textures, got "
            f"{tuple(textures.shape)}"
        )
    if not packed:  # B meshes of F faces: the packed layout with offsets b F (a view, no copy)
        B, F = faces
        fv, textures = fv.reshape(B * F, 9), textures.reshape(B * F, T, 3)
        mesh_offsets = _valid_offsets(torch.arange(B + 1, device=fv.device) * F, B * F)
    backend = _backend.resolve("render", backend, fv.device)
    out_dtype = fv.dtype
    dtype = _checks.compute_dtype(torch.promote_types(fv.dtype, textures.dtype))
    if backend in ("cpu", "cuda") and dtype not in ops.KERNEL_DTYPES:
        raise TypeError(f"face_vertices: backend {backend!r} supports float32 and float64, got {dtype}")
    ints, floats = s.to_lists()
    image, _ = ops.render_fwd(
        fv.to(dtype).contiguous(), textures.to(dtype).contiguous(), mesh_offsets, ints, floats, backend
    )
    return image.to(out_dtype)


def _rasterize_uv(
    face_vertices, textures, face_uvs, image_size, background_color, dist_func, dist_scale, dist_squared, dist_shape,
    dist_shift, dist_eps, aggr_alpha_func, aggr_alpha_t_conorm_p, aggr_rgb_func, aggr_rgb_eps, aggr_rgb_gamma, near,
    far, double_side, backend, mesh_offsets,
) -> torch.Tensor:  # fmt: skip
    """``texture_type='uv'``: the RGB of a UV-mapped image and the alpha, through the buffers op."""
    s = RasterSettings.from_options(
        image_size, background_color, dist_func, dist_scale, dist_squared, dist_shape, dist_shift, dist_eps,
        aggr_alpha_func, aggr_alpha_t_conorm_p, aggr_rgb_func, aggr_rgb_eps, aggr_rgb_gamma, near, far, double_side,
    )  # fmt: skip
    if textures is None:
        raise ValueError("textures: texture_type='uv' needs an image [B, Ht, Wt, 3]")
    if not isinstance(textures, torch.Tensor) or textures.dim() not in (3, 4) or textures.shape[-1] != 3:
        shape = tuple(textures.shape) if isinstance(textures, torch.Tensor) else type(textures).__name__
        raise ValueError(f"textures must be an image [B, Ht, Wt, 3] or [Ht, Wt, 3] for uv textures, got {shape}")
    if face_uvs is None:
        raise ValueError("face_uvs: texture_type='uv' needs the texture coordinates [B, F, 3, 2] of the face corners")
    out = render_buffers(
        face_vertices, face_uvs=face_uvs, texture=textures, image_size=image_size, dist_func=dist_func,
        dist_scale=dist_scale, dist_squared=dist_squared, dist_shape=dist_shape, dist_shift=dist_shift,
        dist_eps=dist_eps, aggr_alpha_func=aggr_alpha_func, aggr_alpha_t_conorm_p=aggr_alpha_t_conorm_p,
        aggr_func=aggr_rgb_func, aggr_rgb_eps=aggr_rgb_eps, aggr_rgb_gamma=aggr_rgb_gamma, near=near, far=far,
        double_side=double_side, background=[*s.background, s.far, 0, 0, 0], mesh_offsets=mesh_offsets,
        backend=backend,
    )  # fmt: skip
    return torch.cat([out.texture, out.alpha], 1)


def _valid_offsets(mesh_offsets: torch.Tensor, N: int) -> torch.Tensor:
    """Offsets valid by construction (0 first, non-decreasing, N last): marked as checked, so that the ops never read
    them on the host (see ``ops.check_mesh_offsets``)."""
    if not _checks.values_unknown(mesh_offsets):
        _checks.mark_checked(("mesh_offsets", N), mesh_offsets)
    return mesh_offsets


def pack(tensors) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack per-mesh tensors ``[F_i, ...]`` (one dtype, device and trailing shape) into ``(packed [N, ...],
    mesh_offsets [B + 1])`` for :func:`rasterize` (``N = sum F_i``, ``mesh_offsets`` int64 on their device, 0 then the
    running sums). Pack the face vertices and the textures of the same meshes alike."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"tensors must be a list or tuple of tensors [F_i, ...], got {type(tensors).__name__}")
    if len(tensors) == 0:
        raise ValueError("tensors must hold at least one tensor (the packed shape and dtype come from them)")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}] must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 1:
            raise ValueError(f"tensors[{i}] must have shape [F_{i}, ...], got a 0-d tensor")
        first = tensors[0]
        if t.shape[1:] != first.shape[1:] or t.dtype != first.dtype or t.device != first.device:
            raise ValueError(
                f"tensors[{i}] ({list(t.shape)}, {t.dtype}, {t.device}) must match tensors[0] in its trailing shape, "
                f"dtype and device ({list(first.shape)}, {first.dtype}, {first.device})"
            )
    counts = [t.shape[0] for t in tensors]
    ends = [0]
    for n in counts:
        ends.append(ends[-1] + n)
    offsets = _checks.to_device(ends, torch.int64, tensors[0].device)
    return torch.cat(tensors), _valid_offsets(offsets, ends[-1])


def _check_module_options(options: dict, uv: bool) -> None:
    """The options of :func:`rasterize`, checked as it checks them (``'uv'`` textures, where ``uv`` allows them, go
    through the buffers op, whose settings are the surface ones but for the texture)."""
    if options["texture_type"] == "uv":
        if not uv:
            raise ValueError("texture_type must be 'surface' or 'vertex' here, got 'uv'")
        options = options | {"texture_type": "surface"}
    RasterSettings.from_options(**options)


class Renderer(torch.nn.Module):
    """GenDR as a module (the original ``GenDR`` class): the options of :func:`rasterize`, plus ``anti_aliasing``
    (render at twice the size, then 2 x 2 average pooling). Note the original's module default
    ``double_side=False`` (the function's is True).

    ``forward(mesh)`` renders ``mesh.face_vertices`` with ``mesh.face_textures`` (a screen-space
    :class:`relaxops.render.Mesh`); ``forward_tensors(face_vertices, face_textures, mesh_offsets=None,
    face_uvs=None)`` takes the tensors (packed with ``mesh_offsets``; with ``texture_type='uv'`` the textures are an
    image and ``face_uvs`` its coordinates, as :func:`rasterize`).
    """

    UV_TEXTURES = True  # texture_type='uv' allowed

    def __init__(
        self,
        image_size=256,
        background_color=(0, 0, 0),
        anti_aliasing=False,
        dist_func="uniform",
        dist_scale=1e-2,
        dist_squared=False,
        dist_shape=None,
        dist_shift=None,
        dist_eps=1e4,
        aggr_alpha_func="probabilistic",
        aggr_alpha_t_conorm_p=None,
        aggr_rgb_func="softmax",
        aggr_rgb_eps=1e-3,
        aggr_rgb_gamma=1e-3,
        near=1,
        far=100,
        double_side=False,
        texture_type="surface",
        backend="auto",
    ):
        super().__init__()
        self.options = dict(
            image_size=image_size,
            background_color=background_color,
            dist_func=dist_func,
            dist_scale=dist_scale,
            dist_squared=dist_squared,
            dist_shape=dist_shape,
            dist_shift=dist_shift,
            dist_eps=dist_eps,
            aggr_alpha_func=aggr_alpha_func,
            aggr_alpha_t_conorm_p=aggr_alpha_t_conorm_p,
            aggr_rgb_func=aggr_rgb_func,
            aggr_rgb_eps=aggr_rgb_eps,
            aggr_rgb_gamma=aggr_rgb_gamma,
            near=near,
            far=far,
            double_side=double_side,
            texture_type=texture_type,
        )
        _check_module_options(self.options, self.UV_TEXTURES)  # fail early on bad options
        self.anti_aliasing = bool(anti_aliasing)
        self.backend = backend

    def __getattr__(self, name):
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        options = self.__dict__.get("options")
        if options is not None and name in options:
            _check_module_options(options | {name: value}, self.UV_TEXTURES)
            options[name] = value
        else:
            super().__setattr__(name, value)

    def forward(self, mesh) -> torch.Tensor:
        return self.forward_tensors(mesh.face_vertices, mesh.face_textures)

    def forward_tensors(
        self,
        face_vertices: torch.Tensor,
        face_textures: torch.Tensor | None,
        mesh_offsets: torch.Tensor | None = None,
        face_uvs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        options = dict(self.options)
        if self.anti_aliasing:
            size = options["image_size"]
            options["image_size"] = 2 * size if isinstance(size, int) else tuple(2 * v for v in size)
        image = rasterize(
            face_vertices, face_textures, backend=self.backend, mesh_offsets=mesh_offsets, face_uvs=face_uvs, **options
        )
        return nnf.avg_pool2d(image, kernel_size=2, stride=2) if self.anti_aliasing else image
