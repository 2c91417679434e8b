"""Autograd op of the rasterizer, registered with ``torch.library``.

``relaxops::render_fwd(face_vertices, textures, ints, floats, backend) -> (image, aggr)`` on contiguous
``face_vertices [B, F, 9]``, ``textures [B, F, T, 3]`` (layouts in ``reference.py`` and ``csrc/render/render.h``);
``ints``/``floats`` are ``RasterSettings.to_lists()``. ``aggr [B, 2, H, W]`` is saved for the backward and is not
differentiable. ``relaxops::render_bwd`` returns ``(grad_face_vertices, grad_textures)``. ``backend`` is a
concrete backend (``reference``, ``cpu``, ``cuda``). Saved for backward: the inputs, the image and ``aggr``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _ext
from . import reference
from .relaxations import RasterSettings

# CPU kernel knobs: tile edge in pixels, thread count (0: OpenMP's default) and the (face, tile) pairs of one pass
# (the forward's face lists take 4 bytes a pair; the backward's gradient slots 9 + 3 T values a pair).
TILE_SIZE_DEFAULT = 8  # 4-8 were fastest on icospheres and a 200k-face scene, 64^2 to 1024^2 (bench/bench_render.py)
TILE_SIZE = TILE_SIZE_DEFAULT
NUM_THREADS = 0
FORWARD_ENTRIES = 1 << 24
BACKWARD_BYTES = 1 << 27


CUDA_TILE_SIZE = 16  # one thread per pixel, a 256-thread block per tile

def _sizes(face_vertices: Tensor, textures: Tensor, ints: list[int]) -> list[int]:
    B, F = face_vertices.shape[:2]
    return [B, F, ints[0], ints[1], textures.shape[2], *ints[2:]]


def _forward(face_vertices, textures, ints, floats, backend):
    s = RasterSettings.from_lists(ints, floats)
    if backend == "reference":
        return reference.forward(face_vertices, textures, s)
    B = face_vertices.shape[0]
    image = face_vertices.new_empty(B, 4, s.height, s.width)
    aggr = face_vertices.new_empty(B, 2, s.height, s.width)
    if backend == "cuda":
        _ext._cuda.render_forward(_ext.dtype_code(face_vertices), _sizes(face_vertices, textures, ints), floats,
                                  s.reach, CUDA_TILE_SIZE, _ext.ptr(face_vertices), _ext.ptr(textures),
                                  _ext.ptr(image), _ext.ptr(aggr), _ext.stream(face_vertices.device))
        return image, aggr
    _ext._C.render_forward(_ext.dtype_code(face_vertices), _sizes(face_vertices, textures, ints), floats, s.reach,
                           TILE_SIZE, FORWARD_ENTRIES, NUM_THREADS, _ext.ptr(face_vertices), _ext.ptr(textures),
                           _ext.ptr(image), _ext.ptr(aggr))
    return image, aggr


@torch.library.custom_op("relaxops::render_fwd", mutates_args=())
def render_fwd(face_vertices: Tensor, textures: Tensor, ints: list[int], floats: list[float],
               backend: str) -> tuple[Tensor, Tensor]:
    return _forward(face_vertices, textures, ints, floats, backend)


@render_fwd.register_fake
def _(face_vertices, textures, ints, floats, backend):
    B = face_vertices.shape[0]
    return face_vertices.new_empty(B, 4, ints[0], ints[1]), face_vertices.new_empty(B, 2, ints[0], ints[1])


@torch.library.custom_op("relaxops::render_bwd", mutates_args=())
def render_bwd(grad_image: Tensor, face_vertices: Tensor, textures: Tensor, image: Tensor, aggr: Tensor,
               ints: list[int], floats: list[float], backend: str) -> tuple[Tensor, Tensor]:
    s = RasterSettings.from_lists(ints, floats)
    if backend == "reference":
        return reference.backward(grad_image, face_vertices, textures, image, aggr, s)
    grad_fv, grad_tex = torch.empty_like(face_vertices), torch.empty_like(textures)
    if backend == "cuda":
        _ext._cuda.render_backward(_ext.dtype_code(face_vertices), _sizes(face_vertices, textures, ints), floats,
                                   s.reach, CUDA_TILE_SIZE, _ext.ptr(face_vertices), _ext.ptr(textures),
                                   _ext.ptr(image), _ext.ptr(aggr), _ext.ptr(grad_image), _ext.ptr(grad_fv),
                                   _ext.ptr(grad_tex), _ext.stream(face_vertices.device))
        return grad_fv, grad_tex
    slot = (9 + 3 * textures.shape[2]) * face_vertices.element_size()
    _ext._C.render_backward(_ext.dtype_code(face_vertices), _sizes(face_vertices, textures, ints), floats, s.reach,
                            TILE_SIZE, max(1, BACKWARD_BYTES // slot), NUM_THREADS, _ext.ptr(face_vertices),
                            _ext.ptr(textures), _ext.ptr(image), _ext.ptr(aggr), _ext.ptr(grad_image),
                            _ext.ptr(grad_fv), _ext.ptr(grad_tex))
    return grad_fv, grad_tex


@render_bwd.register_fake
def _(grad_image, face_vertices, textures, image, aggr, ints, floats, backend):
    return torch.empty_like(face_vertices), torch.empty_like(textures)


def _setup(ctx, inputs, output):
    face_vertices, textures, ints, floats, backend = inputs
    ctx.save_for_backward(face_vertices, textures, output[0], output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.ints, ctx.floats, ctx.backend = ints, floats, backend


def _backward(ctx, grad_image, _grad_aggr):
    face_vertices, textures, image, aggr = ctx.saved_tensors
    if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
        return None, None, None, None, None
    grad_fv, grad_tex = render_bwd(grad_image.contiguous(), face_vertices, textures, image, aggr, ctx.ints,
                                   ctx.floats, ctx.backend)
    return (grad_fv if ctx.needs_input_grad[0] else None), (grad_tex if ctx.needs_input_grad[1] else None), \
        None, None, None


render_fwd.register_autograd(_backward, setup_context=_setup)
