"""Autograd op of the rasterizer, registered with ``torch.library``.

``relaxops::render_fwd(face_vertices, textures, mesh_offsets, ints, floats, backend) -> (image, aggr)`` on
contiguous packed ``face_vertices [N, 9]``, ``textures [N, T, 3]`` of B meshes, mesh b owning the faces
``mesh_offsets[b] .. mesh_offsets[b + 1] - 1`` (``mesh_offsets`` int64 ``[B + 1]``: 0 first, non-decreasing, N last;
layouts in ``reference.py`` and ``csrc/render/render.h``, docs/math/render.md "Mixed meshes in a batch");
``ints``/``floats`` are ``RasterSettings.to_lists()``. ``aggr [B, 2, H, W]`` is saved for the backward and is not
differentiable. ``relaxops::render_bwd`` returns ``(grad_face_vertices, grad_textures)``. ``backend`` is a
concrete backend (``reference``, ``cpu``, ``cuda``). Saved for backward: the inputs, the image and ``aggr``.
The ops are public: before any kernel runs they check the settings, dtypes, device, shapes, contiguity, the
offsets and the memory needed (ValueError/TypeError/MemoryError naming the op and the argument); the C++ side
checks its sizes. The values of ``mesh_offsets`` are read on the host: once per tensor while it is unchanged (on a
GPU one synchronisation the first time; offsets made by ``functional.rasterize`` and ``pack`` are valid by
construction and never read).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _backend, _checks, _ext
from . import reference
from .relaxations import RasterSettings

# CPU kernel knobs: tile edge in pixels (None: cpu_tile_size's rule), thread count (0: torch.get_num_threads()) and
# the (face, tile) pairs of one pass (the forward's face lists take 4 bytes a pair; the backward's gradient slots
# 9 + 3 T values a pair).
TILE_SIZE = None
NUM_THREADS = 0
FORWARD_ENTRIES = 1 << 24
BACKWARD_BYTES = 1 << 27


CUDA_TILE_SIZE = 16  # one thread per pixel, a 256-thread block per tile
BACKENDS = ("reference", "cpu", "cuda")
KERNEL_DTYPES = (torch.float32, torch.float64)
FLOAT32_FACES = 1 << 24  # hard RGB stores the winning face index in a float32 buffer
FACE_ELEMENTS = 32  # a preprocessed face (render.h Face<T>) and its tile count, in dtype elements, about
REFERENCE_TEMPORARIES = 64  # live [B, H W, K] temporaries of reference._fragments and the backward, about


def cpu_tile_size(s: RasterSettings) -> int:
    """The CPU kernels' tile edge in pixels, the same rule for ``rasterize`` and ``render_buffers``: ``TILE_SIZE`` if
    set, else 4 for images below 2^19 pixels (about 724^2) and 8 from there on.

    A tile tests each of its pixels against each face binned into it: small tiles waste fewer tests on pixels
    outside a face's box, large ones bin fewer (face, tile) pairs, so the best edge grows with the faces' size in
    pixels. Measured on the 5120-face icosphere (fwd+bwd, float32, one thread; table in docs/math/render.md §9):
    with 4 both ops took 0.46-0.98 of their time with 8 for hard and soft (logistic) coverage from 32^2 to 512^2,
    1.01-1.10 at 1024^2; 16 was slower than 8 everywhere up to 256^2. The rule reads the image size only, not the
    face count: a packed batch and its meshes drawn one by one must get the same tiles (docs/math/render.md §5.6:
    bitwise the same gradients). The CUDA kernels keep ``CUDA_TILE_SIZE`` (one thread a pixel: 4 would give
    16-thread blocks)."""
    if TILE_SIZE is not None:
        return TILE_SIZE
    return 4 if s.height * s.width < 1 << 19 else 8


def _sizes(face_vertices: Tensor, textures: Tensor, mesh_offsets: Tensor, ints: list[int]) -> list[int]:
    return [mesh_offsets.shape[0] - 1, face_vertices.shape[0], ints[0], ints[1], textures.shape[1], *ints[2:]]


def _hint(v):
    """A symbolic size or scalar (torch.compile with dynamic shapes) as the value it was traced with, unguarded:
    the fake kernels check the settings at that value; the op checks the real ones when it runs."""
    if isinstance(v, (torch.SymInt, torch.SymFloat)) and v.node.hint is not None:
        return v.node.hint
    return v


def _settings(op: str, ints, floats) -> RasterSettings:
    try:
        return RasterSettings.from_lists([_hint(v) for v in ints], [_hint(v) for v in floats])
    except (TypeError, ValueError) as e:
        raise type(e)(f"relaxops::{op}: ints/floats: {e}") from None


def check_mesh_offsets(op: str, mesh_offsets, N: int, device) -> None:
    """``mesh_offsets`` is an int64 ``[B + 1]`` tensor on ``device`` (B >= 0) going from 0 to ``N``, non-decreasing.
    Its values are checked once while the tensor is unchanged (``_checks.already_checked``), on the host for a CPU
    tensor, on the device otherwise (``_checks.on_host``); not at all while tracing or on fake tensors."""
    _checks.kernel_tensor(op, "mesh_offsets", mesh_offsets, dtypes=(torch.int64,), device=device, shape=(None,))
    if mesh_offsets.shape[0] < 1:
        raise ValueError(f"relaxops::{op}: mesh_offsets must have B + 1 >= 1 entries, got shape [0]")
    if _checks.values_unknown(mesh_offsets) or _checks.already_checked(("mesh_offsets", N), mesh_offsets):
        return
    if not _checks.on_host(mesh_offsets):
        o = mesh_offsets
        _checks.assert_on_device(
            (o[0] == 0) & (o[-1] == N) & (o[1:] >= o[:-1]).all(),
            f"relaxops::{op}: mesh_offsets must go from 0 to the number of faces {N} and be non-decreasing",
        )
        _checks.mark_checked(("mesh_offsets", N), mesh_offsets)
        return
    o = mesh_offsets.cpu()
    if int(o[0]) != 0 or int(o[-1]) != N:
        raise ValueError(
            f"relaxops::{op}: mesh_offsets must go from 0 to the number of faces {N}, got {int(o[0])} .. {int(o[-1])}"
        )
    if bool((o[1:] < o[:-1]).any()):
        raise ValueError(f"relaxops::{op}: mesh_offsets must be non-decreasing")
    _checks.mark_checked(("mesh_offsets", N), mesh_offsets)


def _check_faces(op: str, face_vertices, mesh_offsets, ints, floats, backend) -> RasterSettings:
    """The checks of both ops on what they share: backend, settings, the faces and their offsets."""
    if backend not in BACKENDS:
        raise ValueError(f"relaxops::{op}: backend must be one of {list(BACKENDS)}, got {backend!r}")
    s = _settings(op, ints, floats)
    _checks.kernel_tensor(op, "face_vertices", face_vertices, dtypes=KERNEL_DTYPES, shape=(None, 9))
    if backend != "reference":
        _backend.require(f"relaxops::{op}", backend, face_vertices.device)
    N = face_vertices.shape[0]
    check_mesh_offsets(op, mesh_offsets, N, face_vertices.device)
    if s.rgb == 0 and face_vertices.dtype == torch.float32 and N >= FLOAT32_FACES:
        raise ValueError(
            f"relaxops::{op}: face_vertices: hard RGB in float32 supports fewer than {FLOAT32_FACES} faces in a "
            f"batch, got {N}"
        )
    return s


def _check_inputs(op: str, face_vertices, textures, mesh_offsets, ints, floats, backend) -> RasterSettings:
    """The checks every backend relies on: settings, dtypes, device, shapes, contiguity and the offsets."""
    s = _check_faces(op, face_vertices, mesh_offsets, ints, floats, backend)
    N = face_vertices.shape[0]
    _checks.kernel_tensor(
        op, "textures", textures, dtypes=(face_vertices.dtype,), device=face_vertices.device, shape=(N, None, 3)
    )
    T = textures.shape[1]
    if s.texture == 1 and T != 3:
        raise ValueError(
            f"relaxops::{op}: textures must have shape [N, 3, 3] for vertex textures, got {list(textures.shape)}"
        )
    if s.texture == 0 and (T < 1 or math.isqrt(T) ** 2 != T):
        raise ValueError(
            f"relaxops::{op}: textures must have shape [N, R*R, 3] for surface textures, got {list(textures.shape)}"
        )
    return s


def _memory_fits(
    op: str, face_vertices: Tensor, textures: Tensor, B: int, s: RasterSettings, backend: str, backward: bool
) -> None:
    """Refuse a pass whose buffers cannot fit: the image and aggr (forward) or the gradients (backward), the CPU
    kernel's per-face and per-tile lists and face chunk buffers, the reference's per-pixel temporaries."""
    N, T = face_vertices.shape[0], textures.shape[1]
    pixels, size = B * s.height * s.width, face_vertices.element_size()
    elements = 6 * pixels + (face_vertices.numel() + textures.numel() if backward else 0)
    if backend == "reference":
        # at most all pixels of the batch against one block of faces (a mesh alone: fewer pixels)
        elements += REFERENCE_TEMPORARIES * max(pixels, min(pixels * N, reference.BLOCK))
        extra = 0
    else:
        tile = CUDA_TILE_SIZE if backend == "cuda" else cpu_tile_size(s)
        tiles = B * -(-s.height // tile) * -(-s.width // tile)
        elements += FACE_ELEMENTS * N
        # a face chunk's (face, tile) entries (at least one face's), with their gradient slots in the backward
        slot = (9 + 3 * T) * size
        chunk = max(BACKWARD_BYTES // slot, tiles) * (12 + slot) if backward else 4 * max(FORWARD_ENTRIES, tiles)
        extra = 8 * tiles + chunk
    _checks.memory_fits(
        elements * size + extra,
        face_vertices.device,
        f"rendering {B} x {s.height} x {s.width} pixels ({face_vertices.dtype}) in relaxops::{op}",
        "render fewer pixels (image_size) or a smaller batch",
    )


class _CpuKernels:
    """Launchers of the C++ rasterizer in ``relaxops._C`` (host pointers, tiles of ``cpu_tile_size`` pixels)."""

    @staticmethod
    def forward(face_vertices, textures, mesh_offsets, ints, floats, s, image, aggr):
        _ext._C.render_forward(
            _ext.dtype_code(face_vertices),
            _sizes(face_vertices, textures, mesh_offsets, ints),
            floats,
            s.reach,
            cpu_tile_size(s),
            FORWARD_ENTRIES,
            NUM_THREADS,
            _ext.ptr(face_vertices),
            _ext.ptr(textures),
            _ext.ptr(mesh_offsets),
            _ext.ptr(image),
            _ext.ptr(aggr),
        )

    @staticmethod
    def backward(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, s, grad_fv, grad_tex):
        slot = (9 + 3 * textures.shape[1]) * face_vertices.element_size()
        _ext._C.render_backward(
            _ext.dtype_code(face_vertices),
            _sizes(face_vertices, textures, mesh_offsets, ints),
            floats,
            s.reach,
            cpu_tile_size(s),
            max(1, BACKWARD_BYTES // slot),
            NUM_THREADS,
            _ext.ptr(face_vertices),
            _ext.ptr(textures),
            _ext.ptr(mesh_offsets),
            _ext.ptr(image),
            _ext.ptr(aggr),
            _ext.ptr(grad_image),
            _ext.ptr(grad_fv),
            _ext.ptr(grad_tex),
        )


class _CudaKernels:
    """Launchers of the CUDA rasterizer in ``relaxops._cuda`` (device pointers, current stream, tiles of
    ``CUDA_TILE_SIZE`` pixels)."""

    @staticmethod
    def forward(face_vertices, textures, mesh_offsets, ints, floats, s, image, aggr):
        _ext._cuda.render_forward(
            _ext.dtype_code(face_vertices),
            _sizes(face_vertices, textures, mesh_offsets, ints),
            floats,
            s.reach,
            CUDA_TILE_SIZE,
            _ext.ptr(face_vertices),
            _ext.ptr(textures),
            _ext.ptr(mesh_offsets),
            _ext.ptr(image),
            _ext.ptr(aggr),
            _ext.stream(face_vertices.device),
        )

    @staticmethod
    def backward(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, s, grad_fv, grad_tex):
        _ext._cuda.render_backward(
            _ext.dtype_code(face_vertices),
            _sizes(face_vertices, textures, mesh_offsets, ints),
            floats,
            s.reach,
            CUDA_TILE_SIZE,
            _ext.ptr(face_vertices),
            _ext.ptr(textures),
            _ext.ptr(mesh_offsets),
            _ext.ptr(image),
            _ext.ptr(aggr),
            _ext.ptr(grad_image),
            _ext.ptr(grad_fv),
            _ext.ptr(grad_tex),
            _ext.stream(face_vertices.device),
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels)


def _buffer_sizes(face_vertices: Tensor, attributes: Tensor, texture: Tensor, mesh_offsets: Tensor, ints: list[int]):
    """The render kernels' ints (B, N, H, W, T = 1, the settings with surface textures: the texture type is not
    read) and the buffer sizes (C, Ct, Tt)."""
    B, N = mesh_offsets.shape[0] - 1, face_vertices.shape[0]
    dist, alpha, rgb, _texture, squared, double_side = ints[2:]
    ip = [B, N, ints[0], ints[1], 1, dist, alpha, rgb, 0, squared, double_side]
    return ip, (attributes.shape[2], texture.shape[2], texture.shape[1])


def _buffer_entry_bytes(attributes: Tensor, texture: Tensor, tile: int) -> int:
    """Bytes a (face, tile) pair may take in the CPU backward: its gradient slot (9 vertex, 3 C attribute and 6 uv
    values) and, with a texture, the 8 texel taps (24 bytes each) of each pixel of its tile (edge ``tile``)."""
    taps = 8 * 24 * tile * tile if texture.shape[2] > 0 else 0
    return (9 + 3 * attributes.shape[2] + 6) * attributes.element_size() + taps


class _CpuBuffers:
    """Launchers of the C++ buffers kernels in ``relaxops._C`` (host pointers, tiles of ``cpu_tile_size`` pixels)."""

    @staticmethod
    def forward(
        face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background, s, buffers, aggr
    ):
        ip, sizes = _buffer_sizes(face_vertices, attributes, texture, mesh_offsets, ints)
        _ext._C.render_buffers_forward(
            _ext.dtype_code(face_vertices),
            ip,
            floats,
            buf_ints,
            sizes,
            background,
            s.reach,
            cpu_tile_size(s),
            FORWARD_ENTRIES,
            NUM_THREADS,
            _ext.ptr(face_vertices),
            _ext.ptr(attributes),
            _ext.ptr(face_uvs),
            _ext.ptr(texture),
            _ext.ptr(mesh_offsets),
            _ext.ptr(buffers),
            _ext.ptr(aggr),
        )

    @staticmethod
    def backward(
        grad_buffers,
        face_vertices,
        attributes,
        face_uvs,
        texture,
        mesh_offsets,
        buffers,
        aggr,
        ints,
        floats,
        buf_ints,
        background,
        s,
        grad_fv,
        grad_attr,
        grad_uv,
        grad_tex,
    ):
        ip, sizes = _buffer_sizes(face_vertices, attributes, texture, mesh_offsets, ints)
        tile = cpu_tile_size(s)
        _ext._C.render_buffers_backward(
            _ext.dtype_code(face_vertices),
            ip,
            floats,
            buf_ints,
            sizes,
            background,
            s.reach,
            tile,
            max(1, BACKWARD_BYTES // _buffer_entry_bytes(attributes, texture, tile)),
            NUM_THREADS,
            _ext.ptr(face_vertices),
            _ext.ptr(attributes),
            _ext.ptr(face_uvs),
            _ext.ptr(texture),
            _ext.ptr(mesh_offsets),
            _ext.ptr(buffers),
            _ext.ptr(aggr),
            _ext.ptr(grad_buffers),
            _ext.ptr(grad_fv),
            _ext.ptr(grad_attr),
            _ext.ptr(grad_uv),
            _ext.ptr(grad_tex),
        )


class _CudaBuffers:
    """Launchers of the CUDA buffers kernels in ``relaxops._cuda`` (device pointers, current stream, tiles of
    ``CUDA_TILE_SIZE`` pixels)."""

    @staticmethod
    def forward(
        face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background, s, buffers, aggr
    ):
        ip, sizes = _buffer_sizes(face_vertices, attributes, texture, mesh_offsets, ints)
        _ext._cuda.render_buffers_forward(
            _ext.dtype_code(face_vertices),
            ip,
            floats,
            buf_ints,
            sizes,
            background,
            s.reach,
            CUDA_TILE_SIZE,
            _ext.ptr(face_vertices),
            _ext.ptr(attributes),
            _ext.ptr(face_uvs),
            _ext.ptr(texture),
            _ext.ptr(mesh_offsets),
            _ext.ptr(buffers),
            _ext.ptr(aggr),
            _ext.stream(face_vertices.device),
        )

    @staticmethod
    def backward(
        grad_buffers,
        face_vertices,
        attributes,
        face_uvs,
        texture,
        mesh_offsets,
        buffers,
        aggr,
        ints,
        floats,
        buf_ints,
        background,
        s,
        grad_fv,
        grad_attr,
        grad_uv,
        grad_tex,
    ):
        ip, sizes = _buffer_sizes(face_vertices, attributes, texture, mesh_offsets, ints)
        _ext._cuda.render_buffers_backward(
            _ext.dtype_code(face_vertices),
            ip,
            floats,
            buf_ints,
            sizes,
            background,
            s.reach,
            CUDA_TILE_SIZE,
            _ext.ptr(face_vertices),
            _ext.ptr(attributes),
            _ext.ptr(face_uvs),
            _ext.ptr(texture),
            _ext.ptr(mesh_offsets),
            _ext.ptr(buffers),
            _ext.ptr(aggr),
            _ext.ptr(grad_buffers),
            _ext.ptr(grad_fv),
            _ext.ptr(grad_attr),
            _ext.ptr(grad_uv),
            _ext.ptr(grad_tex),
            _ext.stream(face_vertices.device),
        )


_buffer_kernels = _backend.family_launcher(_CpuBuffers, _CudaBuffers)


@torch.library.custom_op("relaxops::render_fwd", mutates_args=())
def render_fwd(
    face_vertices: Tensor, textures: Tensor, mesh_offsets: Tensor, ints: list[int], floats: list[float], backend: str
) -> tuple[Tensor, Tensor]:
    s = _check_inputs("render_fwd", face_vertices, textures, mesh_offsets, ints, floats, backend)
    B = mesh_offsets.shape[0] - 1
    _memory_fits("render_fwd", face_vertices, textures, B, s, backend, backward=False)
    if backend == "reference":
        return reference.forward(face_vertices, textures, mesh_offsets, s)
    kernels = _kernels("render_fwd", backend, face_vertices.device)
    image = face_vertices.new_empty(B, 4, s.height, s.width)
    aggr = face_vertices.new_empty(B, 2, s.height, s.width)
    kernels.forward(face_vertices, textures, mesh_offsets, ints, floats, s, image, aggr)
    return image, aggr


@render_fwd.register_fake
def _(face_vertices, textures, mesh_offsets, ints, floats, backend):
    _check_inputs("render_fwd", face_vertices, textures, mesh_offsets, ints, floats, backend)
    B = mesh_offsets.shape[0] - 1  # ints[0], ints[1] = H, W: maybe symbolic
    return face_vertices.new_empty(B, 4, ints[0], ints[1]), face_vertices.new_empty(B, 2, ints[0], ints[1])


def _check_bwd_inputs(
    grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, backend
) -> RasterSettings:
    op = "render_bwd"
    s = _check_inputs(op, face_vertices, textures, mesh_offsets, ints, floats, backend)
    B, dtype, device = mesh_offsets.shape[0] - 1, face_vertices.dtype, face_vertices.device
    for name, t, channels in (("grad_image", grad_image, 4), ("image", image, 4), ("aggr", aggr, 2)):
        _checks.kernel_tensor(op, name, t, dtypes=(dtype,), device=device, shape=(B, channels, ints[0], ints[1]))
    return s


@torch.library.custom_op("relaxops::render_bwd", mutates_args=())
def render_bwd(
    grad_image: Tensor,
    face_vertices: Tensor,
    textures: Tensor,
    mesh_offsets: Tensor,
    image: Tensor,
    aggr: Tensor,
    ints: list[int],
    floats: list[float],
    backend: str,
) -> tuple[Tensor, Tensor]:
    s = _check_bwd_inputs(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, backend)
    B = mesh_offsets.shape[0] - 1
    _memory_fits("render_bwd", face_vertices, textures, B, s, backend, backward=True)
    if backend == "reference":
        return reference.backward(grad_image, face_vertices, textures, mesh_offsets, image, aggr, s)
    kernels = _kernels("render_bwd", backend, face_vertices.device)
    grad_fv, grad_tex = torch.empty_like(face_vertices), torch.empty_like(textures)
    kernels.backward(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, s, grad_fv, grad_tex)
    return grad_fv, grad_tex


@render_bwd.register_fake
def _(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, backend):
    _check_bwd_inputs(grad_image, face_vertices, textures, mesh_offsets, image, aggr, ints, floats, backend)
    return torch.empty_like(face_vertices), torch.empty_like(textures)


def _setup(ctx, inputs, output):
    face_vertices, textures, mesh_offsets, ints, floats, backend = inputs
    ctx.save_for_backward(face_vertices, textures, mesh_offsets, output[0], output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.ints, ctx.floats, ctx.backend = ints, floats, backend


def _backward(ctx, grad_image, _grad_aggr):
    face_vertices, textures, mesh_offsets, image, aggr = ctx.saved_tensors
    if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
        return None, None, None, None, None, None
    grad_fv, grad_tex = render_bwd(
        grad_image.contiguous(), face_vertices, textures, mesh_offsets, image, aggr, ctx.ints, ctx.floats, ctx.backend
    )
    return (
        (grad_fv if ctx.needs_input_grad[0] else None),
        (grad_tex if ctx.needs_input_grad[1] else None),
        None,
        None,
        None,
        None,
    )


render_fwd.register_autograd(_backward, setup_context=_setup)


# --- Buffers: depth, barycentrics, attributes and UV textures (docs/math/render.md §4.4, §4.5) ---
# ``relaxops::render_buffers_fwd(face_vertices [N, 9], attributes [N, 3, C], face_uvs [N, 3, 2], texture [B, Tt, Ct],
# mesh_offsets [B + 1], ints, floats, buf_ints, background, backend) -> (buffers [B, C + Ct + 5, H, W], aggr [B, 2,
# H, W])`` and ``relaxops::render_buffers_bwd`` -> the gradients of the four float inputs (layouts in
# ``reference.py``). ``buf_ints = [perspective_correct, wrap, L, h_0, w_0, ...]``; ``background``: one value per
# non-alpha channel. Saved for backward: the inputs, the buffers and ``aggr``.


def _check_buffers_inputs(
    op: str, face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background, backend
) -> tuple[RasterSettings, reference.BufferSettings]:
    """The checks every backend relies on: settings, dtypes, device, shapes, contiguity, offsets, pyramid levels."""
    s = _check_faces(op, face_vertices, mesh_offsets, ints, floats, backend)
    N, dtype, device = face_vertices.shape[0], face_vertices.dtype, face_vertices.device
    B = mesh_offsets.shape[0] - 1
    like = dict(dtypes=(dtype,), device=device)
    _checks.kernel_tensor(op, "attributes", attributes, shape=(N, 3, None), **like)
    _checks.kernel_tensor(op, "face_uvs", face_uvs, shape=(N, 3, 2), **like)
    _checks.kernel_tensor(op, "texture", texture, shape=(B, None, None), **like)
    try:
        buf = reference.BufferSettings.from_ints([_hint(v) for v in buf_ints], texture.shape[1], texture.shape[2])
    except (TypeError, ValueError) as e:
        raise type(e)(f"relaxops::{op}: buf_ints: {e}") from None
    channels = attributes.shape[2] + texture.shape[2] + 4
    if len(background) != channels or not all(math.isfinite(_hint(v)) for v in background):
        raise ValueError(
            f"relaxops::{op}: background must hold C + Ct + 4 = {channels} finite values, got {list(background)}"
        )
    return s, buf


def _buffers_memory_fits(op: str, face_vertices, attributes, texture, s, backend: str, backward: bool) -> None:
    """Refuse a pass whose buffers cannot fit: the buffers and aggr (forward) or the gradients too (backward), the
    kernels' per-face and per-tile lists, the reference's per-pixel temporaries (values and texel gathers)."""
    N, C, Ct = face_vertices.shape[0], attributes.shape[2], texture.shape[2]
    B = texture.shape[0]
    pixels, size = B * s.height * s.width, face_vertices.element_size()
    elements = (C + Ct + 7) * pixels * (2 if backward else 1)
    if backward:
        elements += 2 * (face_vertices.numel() + attributes.numel() + texture.numel() + 6 * N)
    if backend == "reference":
        # a face block holds about BLOCK / factor pairs (reference._buffer_blocks), each with the temporaries of
        # _fragments, its values (C + Ct + 4, a few times) and texel gathers (2 levels x 4 texels x Ct)
        factor = 1 + (C + 2 * Ct + 4) // 4 + Ct
        per_pair = REFERENCE_TEMPORARIES + 4 * (C + Ct + 4) + 16 * Ct
        elements += per_pair * max(pixels, min(pixels * max(N, 1), reference.BLOCK // factor))
        extra = 0
    else:
        tile = CUDA_TILE_SIZE if backend == "cuda" else cpu_tile_size(s)
        tiles = B * -(-s.height // tile) * -(-s.width // tile)
        elements += (FACE_ELEMENTS + 9 * C + 6) * N
        slot = (9 + 3 * C + 6) * size
        chunk = max(BACKWARD_BYTES // slot, tiles) * (12 + slot) if backward else 4 * max(FORWARD_ENTRIES, tiles)
        extra = 8 * tiles + chunk
    _checks.memory_fits(
        elements * size + extra,
        face_vertices.device,
        f"rendering {C + Ct + 5} buffers of {B} x {s.height} x {s.width} pixels ({face_vertices.dtype}) in "
        f"relaxops::{op}",
        "render fewer pixels (image_size), a smaller batch or fewer attribute channels",
    )


@torch.library.custom_op("relaxops::render_buffers_fwd", mutates_args=())
def render_buffers_fwd(
    face_vertices: Tensor,
    attributes: Tensor,
    face_uvs: Tensor,
    texture: Tensor,
    mesh_offsets: Tensor,
    ints: list[int],
    floats: list[float],
    buf_ints: list[int],
    background: list[float],
    backend: str,
) -> tuple[Tensor, Tensor]:
    op = "render_buffers_fwd"
    args = (face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background)
    s, buf = _check_buffers_inputs(op, *args, backend)
    _buffers_memory_fits(op, face_vertices, attributes, texture, s, backend, backward=False)
    if backend == "reference":
        return reference.buffers_forward(face_vertices, attributes, face_uvs, texture, mesh_offsets, s, buf, background)
    kernels = _buffer_kernels(op, backend, face_vertices.device)
    B, K = mesh_offsets.shape[0] - 1, len(background) + 1
    buffers = face_vertices.new_empty(B, K, s.height, s.width)
    aggr = face_vertices.new_empty(B, 2, s.height, s.width)
    kernels.forward(*args, s, buffers, aggr)
    return buffers, aggr


@render_buffers_fwd.register_fake
def _(face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background, backend):
    args = (face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background)
    _check_buffers_inputs("render_buffers_fwd", *args, backend)
    B, K = mesh_offsets.shape[0] - 1, len(background) + 1
    return face_vertices.new_empty(B, K, ints[0], ints[1]), face_vertices.new_empty(B, 2, ints[0], ints[1])


def _check_buffers_bwd_inputs(grad_buffers, buffers, aggr, *args, backend):
    op = "render_buffers_bwd"
    s, buf = _check_buffers_inputs(op, *args, backend)
    face_vertices, mesh_offsets, background, ints = args[0], args[4], args[8], args[5]
    B, K = mesh_offsets.shape[0] - 1, len(background) + 1
    like = dict(dtypes=(face_vertices.dtype,), device=face_vertices.device)
    for name, t, channels in (("grad_buffers", grad_buffers, K), ("buffers", buffers, K), ("aggr", aggr, 2)):
        _checks.kernel_tensor(op, name, t, shape=(B, channels, ints[0], ints[1]), **like)
    return s, buf


@torch.library.custom_op("relaxops::render_buffers_bwd", mutates_args=())
def render_buffers_bwd(
    grad_buffers: Tensor,
    face_vertices: Tensor,
    attributes: Tensor,
    face_uvs: Tensor,
    texture: Tensor,
    mesh_offsets: Tensor,
    buffers: Tensor,
    aggr: Tensor,
    ints: list[int],
    floats: list[float],
    buf_ints: list[int],
    background: list[float],
    backend: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    op = "render_buffers_bwd"
    args = (face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background)
    s, buf = _check_buffers_bwd_inputs(grad_buffers, buffers, aggr, *args, backend=backend)
    _buffers_memory_fits(op, face_vertices, attributes, texture, s, backend, backward=True)
    if backend == "reference":
        return reference.buffers_backward(
            grad_buffers, face_vertices, attributes, face_uvs, texture, mesh_offsets, buffers, aggr, s, buf, background
        )
    kernels = _buffer_kernels(op, backend, face_vertices.device)
    grads = tuple(torch.empty_like(t) for t in (face_vertices, attributes, face_uvs, texture))
    kernels.backward(
        grad_buffers, face_vertices, attributes, face_uvs, texture, mesh_offsets, buffers, aggr, ints, floats,
        buf_ints, background, s, *grads,
    )  # fmt: skip
    return grads


@render_buffers_bwd.register_fake
def _(
    grad_buffers,
    face_vertices,
    attributes,
    face_uvs,
    texture,
    mesh_offsets,
    buffers,
    aggr,
    ints,
    floats,
    buf_ints,
    background,
    backend,
):
    args = (face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background)
    _check_buffers_bwd_inputs(grad_buffers, buffers, aggr, *args, backend=backend)
    return tuple(torch.empty_like(t) for t in (face_vertices, attributes, face_uvs, texture))


def _buffers_setup(ctx, inputs, output):
    face_vertices, attributes, face_uvs, texture, mesh_offsets, ints, floats, buf_ints, background, backend = inputs
    ctx.save_for_backward(face_vertices, attributes, face_uvs, texture, mesh_offsets, output[0], output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.ints, ctx.floats, ctx.buf_ints, ctx.background, ctx.backend = ints, floats, buf_ints, background, backend


def _buffers_backward(ctx, grad_buffers, _grad_aggr):
    face_vertices, attributes, face_uvs, texture, mesh_offsets, buffers, aggr = ctx.saved_tensors
    needs = ctx.needs_input_grad[:4]
    if not any(needs):
        return (None,) * 10
    grads = render_buffers_bwd(
        grad_buffers.contiguous(),
        face_vertices,
        attributes,
        face_uvs,
        texture,
        mesh_offsets,
        buffers,
        aggr,
        ctx.ints,
        ctx.floats,
        ctx.buf_ints,
        ctx.background,
        ctx.backend,
    )
    return *(g if need else None for g, need in zip(grads, needs)), *(None,) * 6


render_buffers_fwd.register_autograd(_buffers_backward, setup_context=_buffers_setup)
