"""Geometry buffers of the GenDR rasterizer: alpha, depth, barycentrics, interpolated attributes and UV-mapped
textures with mipmaps (docs/math/render.md §4.4 and §4.5).

Every channel is aggregated like the rasterizer's RGB (a softmax over depth, or the closest face for ``'hard'``),
alpha like its alpha, so the buffers of a soft renderer are soft too; they tend to the hard buffers as the
distribution's scale and the softmax temperature go to 0. Gradients reach the vertices (x and y also through the
barycentrics), the attributes, the UVs and the texture.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as nnf

from .. import _backend, _checks
from . import ops
from .relaxations import RGB_FUNCS, RasterSettings, _choice, real

WRAPS = ("repeat", "clamp")


class Buffers(NamedTuple):
    """What :func:`render_buffers` returns, each ``[B, *, H, W]`` with row 0 at the top."""

    alpha: torch.Tensor  # [B, 1, H, W]
    depth: torch.Tensor  # [B, 1, H, W]: the perspective-correct camera depth z_p (far where no face)
    barycentrics: torch.Tensor  # [B, 3, H, W]
    attributes: torch.Tensor | None  # [B, C, H, W], None without attributes
    texture: torch.Tensor | None  # [B, Ct, H, W], None without a texture
    face_index: torch.Tensor | None  # [B, 1, H, W] int64 for 'hard': the packed index of the face, -1 none


def mip_pyramid(texture: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The mip pyramid of ``texture [B, Ht, Wt, C]`` (row 0 at the top), built with autograd.

    Level ``l + 1`` has ``max(1, h_l >> 1) x max(1, w_l >> 1)`` texels, down to ``1 x 1``; each is the area
    average of the level above (``torch.nn.functional.adaptive_avg_pool2d``: output texel ``i`` of ``n``
    averages the input texels ``floor(i m / n) .. ceil((i + 1) m / n) - 1`` of ``m``, per axis). For an even
    size that is the 2 x 2 average; an odd size averages windows of 3 (or 2 x 3, 3 x 2, 3 x 3) texels that share
    their border texel.

    Returns:
        ``(flat [B, Tt, C], sizes)``: the levels' texels concatenated, each row-major, ``Tt = sum h_l w_l``, and
        the list of ``(h_l, w_l)``, as :func:`render_buffers` passes them to the op.
    """
    _checks.floating_tensor(texture, "texture", 4)
    if texture.dim() != 4 or texture.shape[1] < 1 or texture.shape[2] < 1 or texture.shape[3] < 1:
        raise ValueError(f"texture must have shape [B, Ht, Wt, C] with Ht, Wt, C >= 1, got {tuple(texture.shape)}")
    B, h, w, C = texture.shape
    level = texture.permute(0, 3, 1, 2)
    levels, sizes = [texture.reshape(B, h * w, C)], [(h, w)]
    while (h, w) != (1, 1):
        h, w = max(1, h >> 1), max(1, w >> 1)
        level = nnf.adaptive_avg_pool2d(level, (h, w))
        levels.append(level.permute(0, 2, 3, 1).reshape(B, h * w, C))
        sizes.append((h, w))
    return torch.cat(levels, 1), sizes


def _per_face(t, name: str, packed: bool, lead: tuple[int, ...], last: int | None) -> torch.Tensor:
    """A per face-corner tensor ``[*lead, 3, last]`` (``last`` None: any), checked and named."""
    _checks.floating_tensor(t, name)
    want = "[N, 3, *]" if packed else "[B, F, 3, *]"
    if t.dim() != len(lead) + 2 or tuple(t.shape[: len(lead)]) != lead or t.shape[-2] != 3:
        raise ValueError(f"{name} must have shape {want} matching face_vertices {list(lead)}, got {tuple(t.shape)}")
    if last is not None and t.shape[-1] != last:
        raise ValueError(f"{name} must have {last} values per corner, got shape {tuple(t.shape)}")
    return t


def _mesh_offsets(mesh_offsets, N: int, device) -> torch.Tensor:
    if not isinstance(mesh_offsets, torch.Tensor):
        raise TypeError(f"mesh_offsets must be a torch.Tensor, got {type(mesh_offsets).__name__}")
    if mesh_offsets.dtype.is_floating_point or mesh_offsets.dtype.is_complex or mesh_offsets.dtype == torch.bool:
        raise TypeError(f"mesh_offsets must have an integer dtype, got {mesh_offsets.dtype}")
    if mesh_offsets.dim() != 1 or mesh_offsets.shape[0] < 1:
        raise ValueError(f"mesh_offsets must have shape [B + 1], got {tuple(mesh_offsets.shape)}")
    offsets = mesh_offsets.to(device=device, dtype=torch.int64).contiguous()
    if not torch.compiler.is_compiling() and not _checks.on_host(offsets):
        _checks.assert_on_device(
            (offsets[0] == 0) & (offsets[-1] == N) & (offsets.diff() >= 0).all(),
            f"mesh_offsets must start at 0, not decrease and end at N = {N}",
        )
    elif not torch.compiler.is_compiling() and (
        int(offsets[0]) != 0 or int(offsets[-1]) != N or bool((offsets.diff() < 0).any())
    ):
        raise ValueError(f"mesh_offsets must start at 0, not decrease and end at N = {N}, got {offsets.tolist()}")
    if not _checks.values_unknown(offsets):
        _checks.mark_checked(("mesh_offsets", N), offsets)
    return offsets


def render_buffers(
    face_vertices: torch.Tensor,
    attributes: torch.Tensor | None = None,
    *,
    face_uvs: torch.Tensor | None = None,
    texture: torch.Tensor | None = None,
    mesh_offsets: torch.Tensor | None = None,
    image_size=256,
    dist_func="uniform",
    dist_scale=1e-2,
    dist_squared=False,
    dist_shape=None,
    dist_shift=None,
    dist_eps=1e4,
    aggr_alpha_func="probabilistic",
    aggr_alpha_t_conorm_p=None,
    aggr_func="softmax",
    aggr_rgb_eps=1e-3,
    aggr_rgb_gamma=1e-3,
    near=1,
    far=100,
    double_side=True,
    perspective_correct=False,
    mipmap=True,
    texture_wrap="repeat",
    background=None,
    backend="auto",
) -> Buffers:
    """Render depth, barycentrics, per-corner attributes and a UV-mapped texture with GenDR's aggregation
    (docs/math/render.md §4.4 and §4.5).

    Args:
        face_vertices: ``[B, F, 3, 3]`` (or ``[B, F, 9]``) screen-space faces as for :func:`rasterize`; with
            ``mesh_offsets``, ``[N, 3, 3]`` (or ``[N, 9]``) packed faces of B meshes. Differentiable.
        attributes: ``[B, F, 3, C]`` (packed ``[N, 3, C]``) values at the face corners, interpolated with the
            barycentrics (e.g. :meth:`Mesh.face_attributes` of vertex normals); None: no attribute channels.
        face_uvs: ``[B, F, 3, 2]`` (packed ``[N, 3, 2]``) texture coordinates ``(u, v)`` of the face corners, v up
            (``v = 1`` is the texture's top row); required with ``texture``, ignored without.
        texture: ``[B, Ht, Wt, Ct]`` image (row 0 at the top), or ``[Ht, Wt, Ct]`` shared by all images; sampled
            trilinearly from its mip pyramid (:func:`mip_pyramid`). Differentiable.
        mesh_offsets: integer ``[B + 1]``: mesh b owns the packed faces ``[offsets[b], offsets[b + 1])`` and is
            drawn into image b. None: the padded layout.
        image_size: ``S`` (square) or ``(H, W)``. The coverage and alpha options (``dist_func``, ``dist_scale``,
            ``dist_squared``, ``dist_shape``, ``dist_shift``, ``dist_eps``, ``aggr_alpha_func``,
            ``aggr_alpha_t_conorm_p``), the softmax's ``aggr_rgb_eps`` and ``aggr_rgb_gamma``, ``near``, ``far`` and
            ``double_side`` are those of :func:`rasterize`.
        aggr_func: ``'softmax'`` (every channel aggregated with the RGB softmax weights over depth) or ``'hard'``
            (the closest face's values; also returns ``face_index``).
        perspective_correct: barycentrics ``b_k = (wbar_k / z_k) z_p`` (the camera-space ones) instead of the
            screen-space clipped barycentrics ``wbar``; they interpolate the attributes and the UVs.
        mipmap: sample the mip pyramid at the face's level of detail; False: the full-size texture only.
        texture_wrap: ``'repeat'`` or ``'clamp'`` (to the edge texels) outside ``[0, 1]``.
        background: the value where no face contributes of each non-alpha channel, ``C + Ct + 4`` numbers in the
            order attributes, texture, depth, barycentrics; None: 0, except the depth ``far``.
        backend: ``auto``, ``reference``, ``cpu`` or ``cuda`` (``auto`` picks cuda once it is verified on a GPU).

    Returns:
        :class:`Buffers` in the dtype of ``face_vertices`` (half types computed in float32).

    Raises:
        TypeError: an argument of the wrong type, naming it.
        ValueError: a wrong shape or value, naming the argument.
        MemoryError: the buffers would not fit in the device's memory.
    """
    rgb = RGB_FUNCS[_choice(aggr_func, RGB_FUNCS, "aggr_func")]
    s = RasterSettings.from_options(
        image_size, (0, 0, 0), dist_func, dist_scale, dist_squared, dist_shape, dist_shift, dist_eps,
        aggr_alpha_func, aggr_alpha_t_conorm_p, rgb, aggr_rgb_eps, aggr_rgb_gamma, near, far, double_side,
    )  # fmt: skip
    if texture_wrap not in WRAPS:
        raise ValueError(f"texture_wrap must be one of {list(WRAPS)}, got {texture_wrap!r}")
    for name, flag in (("perspective_correct", perspective_correct), ("mipmap", mipmap)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    _checks.floating_tensor(face_vertices, "face_vertices", 2)
    packed = mesh_offsets is not None
    fv = face_vertices
    lead_dims = 1 if packed else 2
    if fv.dim() == lead_dims + 2 and fv.shape[lead_dims:] == (3, 3):
        fv = fv.reshape(*fv.shape[:lead_dims], 9)
    if fv.dim() != lead_dims + 1 or fv.shape[-1] != 9:
        want = "[N, 3, 3] or [N, 9] (packed, with mesh_offsets)" if packed else "[B, F, 3, 3] or [B, F, 9]"
        raise ValueError(f"face_vertices must have shape {want}, got {tuple(face_vertices.shape)}")
    lead = tuple(fv.shape[:-1])
    device = fv.device
    if packed:
        offsets = _mesh_offsets(mesh_offsets, lead[0], device)
        B = offsets.shape[0] - 1
    else:
        B, F = lead
        offsets = torch.arange(B + 1, device=device, dtype=torch.int64) * F
        if not _checks.values_unknown(offsets):  # valid by construction: the op need not read them on the host
            _checks.mark_checked(("mesh_offsets", B * F), offsets)
    tensors = {"face_vertices": fv}
    if attributes is not None:
        tensors["attributes"] = _per_face(attributes, "attributes", packed, lead, None)
    if texture is not None:
        if face_uvs is None:
            raise ValueError("face_uvs: a texture needs the texture coordinates of the face corners")
        tensors["face_uvs"] = _per_face(face_uvs, "face_uvs", packed, lead, 2)
        _checks.floating_tensor(texture, "texture", 3)
        if texture.dim() == 3:
            texture = texture.unsqueeze(0).expand(B, -1, -1, -1)
        if texture.dim() != 4 or texture.shape[0] != B or min(texture.shape[1:]) < 1:
            raise ValueError(f"texture must have shape [B={B}, Ht, Wt, Ct] or [Ht, Wt, Ct], got {tuple(texture.shape)}")
        tensors["texture"] = texture
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, face_vertices on {device}")
    dtype = fv.dtype
    for t in tensors.values():
        dtype = torch.promote_types(dtype, t.dtype)
    dtype = _checks.compute_dtype(dtype)
    backend = _backend.resolve("render_buffers", backend, device)
    if backend in ("cpu", "cuda") and dtype not in ops.KERNEL_DTYPES:
        raise TypeError(f"face_vertices: backend {backend!r} supports float32 and float64, got {dtype}")
    N = fv.shape[0] * (1 if packed else fv.shape[1])
    fv_flat = fv.reshape(N, 9).to(dtype).contiguous()
    C = attributes.shape[-1] if attributes is not None else 0
    attr = tensors["attributes"].reshape(N, 3, C).to(dtype) if C else fv_flat.new_zeros(N, 3, 0)
    if texture is not None:
        flat, sizes = mip_pyramid(tensors["texture"].to(dtype))
        if not mipmap:
            flat, sizes = flat[:, : sizes[0][0] * sizes[0][1]], sizes[:1]
        uv = tensors["face_uvs"].reshape(N, 3, 2).to(dtype)
    else:
        flat, sizes = fv_flat.new_zeros(B, 0, 0), []
        uv = fv_flat.new_zeros(N, 3, 2)
    Ct = flat.shape[2]
    if background is None:
        bg = [0.0] * (C + Ct) + [s.far, 0.0, 0.0, 0.0]
    else:
        if isinstance(background, (str, bytes)) or not isinstance(background, (tuple, list, torch.Tensor)):
            raise TypeError(f"background must be a sequence of C + Ct + 4 = {C + Ct + 4} numbers, got {background!r}")
        bg = [real(v.item() if isinstance(v, torch.Tensor) else v, "background") for v in background]
        if len(bg) != C + Ct + 4 or not all(abs(v) < float("inf") for v in bg):
            raise ValueError(f"background must hold C + Ct + 4 = {C + Ct + 4} finite numbers, got {background!r}")
    ints, floats = s.to_lists()
    buf_ints = [int(perspective_correct), WRAPS.index(texture_wrap), len(sizes), *(n for hw in sizes for n in hw)]
    out, aggr = ops.render_buffers_fwd(
        fv_flat, attr.contiguous(), uv.contiguous(), flat.contiguous(), offsets, ints, floats, buf_ints, bg, backend
    )
    out = out.to(face_vertices.dtype)
    return Buffers(
        alpha=out[:, -1:],
        depth=out[:, C + Ct : C + Ct + 1],
        barycentrics=out[:, C + Ct + 1 : C + Ct + 4],
        attributes=out[:, :C] if attributes is not None else None,
        texture=out[:, C : C + Ct] if texture is not None else None,
        face_index=aggr[:, 1:].long() if s.rgb == 0 else None,
    )
