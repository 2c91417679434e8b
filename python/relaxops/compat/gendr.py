"""Drop-in replacement for the ``gendr`` package (0.1.0, GenDR, the generalized differentiable renderer), running
relaxops' rasterizer.

Switch with one import::

    # import gendr
    import relaxops.compat.gendr as gendr
    # or: from relaxops.compat.gendr import GenDR, Mesh, LookAt, Look, Projection, Lighting, LaplacianLoss, ...

Same names, signatures (parameter names, order and defaults) and attributes as gendr 0.1.0: ``GenDR``, ``Mesh``,
``Transform``, ``Projection``, ``LookAt``, ``Look``, ``AmbientLighting``, ``DirectionalLighting``, ``Lighting``,
``LaplacianLoss``, ``FlattenLoss`` and the module ``functional`` (``render``, ``look_at``, ``look``,
``get_points_from_angles``, ``ambient_lighting``, ``directional_lighting``, ``face_vertices``, ``vertex_normals``,
``load_obj``, ``save_obj``, ``save_voxel``, ``voxelization``), which ``from relaxops.compat.gendr.functional import
render`` imports too. The classes subclass those of :mod:`relaxops.render` (``GenDR`` is a
:class:`relaxops.render.Renderer`, ``Mesh`` a :class:`relaxops.render.Mesh`, ...), so compat and native objects mix;
transforms and lighting return compat ``Mesh`` objects. Rendering follows gendr's kernel as specified in
docs/math/render.md, including its kept quirks (alpha ignores ``near``/``far`` and facing, ``Projection`` does not flip
y, the module's ``double_side=False`` against the function's ``True``), except for the fixes listed below.

Deliberate differences from gendr 0.1.0:

* Everything runs on CPU (C++ kernel) as well as on the GPU, on the device of the inputs; numpy inputs (``Mesh``,
  ``Projection``) become CPU tensors instead of being moved to CUDA. float64 inputs are rendered in float64
  (gendr computes only float32 correctly).
* Invalid options raise a ``ValueError`` naming the argument, when ``GenDR`` is built or an option is set, or when
  ``functional.render`` is called: ``dist_scale`` must be > 0 (>= 0 for ``'hard'``), gamma distributions need
  ``dist_shape > 0``, T-conorm parameters must lie in their family's range, unknown names are rejected. gendr
  asserted, raised a ``KeyError`` or returned NaN images. ``GenDR(dist_scale=None)``, as gendr's experiments write
  it, is accepted until the first render, which raises unless ``dist_scale`` has been set by then.
  ``aggr_rgb_func`` and ``texture_type`` also accept their integer ids.
* ``None`` for ``dist_shape``, ``dist_shift`` and ``aggr_alpha_t_conorm_p`` means 0 (gendr's binding raised a
  ``TypeError``).
* Degenerate faces (``|det| < 1e-10``: collinear or coincident vertices) contribute nothing (gendr rendered
  ``F(0) = 0.5`` over their bounding box); the surface texel index is clamped to the face's texels and the outside
  distance falls back to the nearest edge when rounding leaves no region (gendr read out of bounds there).
* ``Look`` uses ``up = (0, 1, 0)`` and ``functional.look``'s ``up=None`` means ``(0, 1, 0)`` (gendr crashed on
  the missing ``up``); a ``direction`` parallel to ``up``, such as ``functional.look``'s default
  ``direction=(0, 1, 0)``, raises a ``ValueError``. ``LookAt.eyes`` and ``Look.eyes`` return the eyes (gendr
  raised an ``AttributeError``).
* ``FlattenLoss`` uses all three edges of every face and skips boundary and non-manifold edges (gendr took only
  the ``(v0, v1)`` and ``(v1, v2)`` pairs, missing some interior edges, and crashed on open meshes).
  ``LaplacianLoss`` is sparse: ``laplacian`` (dense ``[V, V]``) is built when read; vertices in no face contribute
  0 (gendr: NaN). Their buffers differ from gendr's (``FlattenLoss.v0s`` ... ``v3s`` are read-only views); loading
  a gendr ``state_dict`` skips gendr's buffers, which are rebuilt from the faces anyway.
* ``functional.ambient_lighting`` and ``directional_lighting`` return a new tensor instead of adding into
  ``light`` in place.
* ``load_obj`` reads the materials' ``Kd`` colours but not image textures (``map_Kd``, with a warning);
  ``save_obj`` stores surface textures as one ``Kd`` material per face colour (the mean of its texels) instead of
  a PNG texture atlas, so ``texture_res`` is unused.
* ``save_voxel`` writes the surface of the occupied voxels as cubes spanning ``[0, 1]^3`` (gendr meant to write
  one point per voxel and crashed). ``voxelization`` and ``Mesh.voxelize`` return int32 0/1 grids as gendr's;
  ``voxelization`` maps its input back to world space in float64, so a coordinate exactly on a voxel boundary may
  round to the other side.
* ``Mesh``: a batch of 1 in vertices, faces or textures is broadcast (a view, clone it before writing into it) to
  the batch of the others (gendr required equal batches); default textures take the dtype of the vertices; the
  attributes (``batch_size``, ``device``, ...) are read-only.
* ``functional.get_points_from_angles`` returns a tuple of floats for numbers (as gendr) and a ``[..., 3]``
  tensor for tensors (0-d ones included).
* Defaults that gendr writes as lists (``background_color=[0, 0, 0]``, ``camera_direction``, ``color_ambient``,
  ...) are tuples with the same values.
"""

from __future__ import annotations

import numbers
import sys
import types

import numpy as np
import torch
import torch.nn as nn

from .. import _checks
from ..render import camera as _camera
from ..render import functional as _functional
from ..render import io as _io
from ..render import lighting as _lighting
from ..render import losses as _losses
from ..render import mesh as _mesh
from ..render.relaxations import RasterSettings

__all__ = [
    "functional",
    "Mesh",
    "Transform",
    "Projection",
    "LookAt",
    "Look",
    "AmbientLighting",
    "DirectionalLighting",
    "Lighting",
    "GenDR",
    "LaplacianLoss",
    "FlattenLoss",
]

_PARALLEL_SINE = 1e-6  # |sin| of the angle between direction and up below which look() has no camera frame


# ---------------------------------------------------------------------------------------------------------------------
# Mesh and transforms


class Mesh(_mesh.Mesh):
    """gendr's ``Mesh(vertices, faces, textures=None, texture_res=1, texture_type='surface')``: see
    :class:`relaxops.render.Mesh`. ``voxelize`` returns an int32 0/1 grid as gendr's."""

    def voxelize(self, voxel_size: int = 32) -> torch.Tensor:
        """Solid voxelisation ``[B, S, S, S]`` int32 (0/1), ``S = voxel_size``
        (:func:`relaxops.render.losses.voxelize`)."""
        return super().voxelize(voxel_size).int()


def _compat_mesh(mesh: _mesh.Mesh) -> Mesh:
    """``mesh`` as a compat :class:`Mesh`, sharing its tensors (no copy, no second validation)."""
    if isinstance(mesh, Mesh):
        return mesh
    out = Mesh.__new__(Mesh)
    out.__dict__.update(vars(mesh))
    return out


class Transform(_camera.Transform):
    """gendr's base class of the camera transforms: ``forward(mesh)`` returns a compat :class:`Mesh` with the
    vertices ``self.transform(mesh.vertices)`` and the same faces and textures."""

    def __init__(self):
        super().__init__()

    def forward(self, mesh: _mesh.Mesh) -> Mesh:
        return _compat_mesh(super().forward(mesh))


class Projection(Transform, _camera.Projection):
    """gendr's ``Projection(P, dist_coeffs=None, orig_size=512)``: see :class:`relaxops.render.Projection`
    (the rendered image is upside down relative to the pixel rows of ``P``, as in gendr)."""

    def __init__(self, P, dist_coeffs=None, orig_size=512):
        _camera.Projection.__init__(self, P, dist_coeffs, orig_size)


class LookAt(Transform, _camera.LookAt):
    """gendr's ``LookAt(perspective=True, viewing_angle=30, viewing_scale=1.0, eye=None)``: see
    :class:`relaxops.render.LookAt`."""

    def __init__(self, perspective=True, viewing_angle=30, viewing_scale=1.0, eye=None):
        _camera.LookAt.__init__(self, perspective, viewing_angle, viewing_scale, eye)


class Look(Transform, _camera.Look):
    """gendr's ``Look(camera_direction=[0, 0, 1], perspective=True, viewing_angle=30, viewing_scale=1.0,
    eye=None)``: see :class:`relaxops.render.Look`; the up direction is the attribute ``up``, ``(0, 1, 0)``."""

    def __init__(self, camera_direction=(0, 0, 1), perspective=True, viewing_angle=30, viewing_scale=1.0, eye=None):
        _camera.Look.__init__(self, camera_direction, perspective, viewing_angle, viewing_scale, eye)


# ---------------------------------------------------------------------------------------------------------------------
# Lighting


def _alias(name: str) -> property:
    """A property reading and writing the attribute ``name`` (relaxops' attribute names on gendr's storage, so that
    ``module.light_intensity = nn.Parameter(...)`` registers a parameter that ``forward`` reads)."""
    return property(lambda self: getattr(self, name), lambda self, value: setattr(self, name, value))


class AmbientLighting(_lighting.AmbientLighting):
    """gendr's ``AmbientLighting(light_intensity=0.5, light_color=(1, 1, 1))``: ``forward(light)`` returns
    ``light + light_intensity * light_color`` (:func:`relaxops.render.ambient_lighting`)."""

    intensity = _alias("light_intensity")
    color = _alias("light_color")

    def __init__(self, light_intensity=0.5, light_color=(1, 1, 1)):
        super().__init__(light_intensity, light_color)


class DirectionalLighting(_lighting.DirectionalLighting):
    """gendr's ``DirectionalLighting(light_intensity=0.5, light_color=(1, 1, 1), light_direction=(0, 1, 0))``:
    ``forward(light, normals)`` (:func:`relaxops.render.directional_lighting`)."""

    intensity = _alias("light_intensity")
    color = _alias("light_color")
    direction = _alias("light_direction")

    def __init__(self, light_intensity=0.5, light_color=(1, 1, 1), light_direction=(0, 1, 0)):
        super().__init__(light_intensity, light_color, light_direction)


class Lighting(_lighting.Lighting):
    """gendr's ``Lighting(intensity_ambient=0.5, color_ambient=[1, 1, 1], intensity_directionals=0.5,
    color_directionals=[1, 1, 1], directions=[0, 1, 0])``: see :class:`relaxops.render.Lighting`. ``ambient`` is an
    :class:`AmbientLighting`, ``directionals`` a ``ModuleList`` of :class:`DirectionalLighting`; ``forward(mesh)``
    returns a compat :class:`Mesh`."""

    def __init__(
        self,
        intensity_ambient=0.5,
        color_ambient=(1, 1, 1),
        intensity_directionals=0.5,
        color_directionals=(1, 1, 1),
        directions=(0, 1, 0),
    ):
        super().__init__(intensity_ambient, color_ambient, intensity_directionals, color_directionals, directions)
        self.ambient = AmbientLighting(intensity_ambient, color_ambient)
        self.directionals = nn.ModuleList([DirectionalLighting(intensity_directionals, color_directionals, directions)])

    def forward(self, mesh: _mesh.Mesh) -> Mesh:
        return _compat_mesh(super().forward(mesh))


# ---------------------------------------------------------------------------------------------------------------------
# Renderer


def _check_options(options: dict) -> None:
    """Validate renderer options; ``dist_scale=None`` (to be set before rendering) passes."""
    if options["dist_scale"] is None:
        options = options | {"dist_scale": 1.0}
    RasterSettings.from_options(**options)


def _require_scale(dist_scale) -> None:
    if dist_scale is None:
        raise ValueError("dist_scale is None: set a number (e.g. renderer.dist_scale = 1e-2) before rendering")


class GenDR(_functional.Renderer):
    """gendr's renderer module: :class:`relaxops.render.Renderer` with gendr's signature (``backend='auto'``, an
    attribute). ``forward(mesh)`` and ``forward_tensors(face_vertices, face_textures)`` return ``[B, 4, S, S]``
    RGBA. The options are attributes, validated when set; ``dist_scale`` may be None until the first render."""

    UV_TEXTURES = False  # gendr's texture types: 'surface' and 'vertex'

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
    ):
        super().__init__(
            image_size,
            background_color,
            anti_aliasing,
            dist_func,
            1.0 if dist_scale is None else dist_scale,
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
            backend="auto",
        )
        self.options["dist_scale"] = dist_scale

    def __setattr__(self, name, value):
        options = self.__dict__.get("options")
        if options is not None and name in options:
            _check_options(options | {name: value})
            options[name] = value
        else:
            super().__setattr__(name, value)

    def forward_tensors(self, face_vertices: torch.Tensor, face_textures: torch.Tensor | None) -> torch.Tensor:
        _require_scale(self.options["dist_scale"])
        return super().forward_tensors(face_vertices, face_textures)


# ---------------------------------------------------------------------------------------------------------------------
# Losses


def _skip_gendr_buffers(module: nn.Module, state_dict: dict, prefix: str, names: tuple[str, ...]) -> dict:
    """``state_dict`` without gendr's buffers ``names`` of ``module``; if it had them (a gendr checkpoint), with the
    module's own buffers instead, since both are derived from the faces given to the constructor."""
    keys = {prefix + n for n in names}
    if not keys & state_dict.keys():
        return state_dict
    out = {k: v for k, v in state_dict.items() if k not in keys}
    for name, buffer in module.named_buffers(recurse=False):
        out.setdefault(prefix + name, buffer)
    return out


class LaplacianLoss(_losses.LaplacianLoss):
    """gendr's ``LaplacianLoss(vertex, faces, average=False)``: see :class:`relaxops.render.LaplacianLoss`.
    ``nv``, ``nf``: numbers of vertices and faces; ``laplacian``: the dense ``[V, V]`` operator, built when read."""

    def __init__(self, vertex, faces, average=False):
        super().__init__(vertex, faces, average)
        self.nv = self.num_vertices
        self.nf = int(faces.shape[0])

    @property
    def laplacian(self) -> torch.Tensor:
        V = self.num_vertices
        L = torch.zeros(V, V, device=self.rows.device)
        L[self.rows, self.cols] = -self.weights
        diagonal = torch.arange(V, device=self.rows.device)
        L[diagonal, diagonal] = self.connected.float()
        return L

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict = _skip_gendr_buffers(self, state_dict, prefix, ("laplacian",))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class FlattenLoss(_losses.FlattenLoss):
    """gendr's ``FlattenLoss(faces, average=False)``: see :class:`relaxops.render.FlattenLoss` (all three edges of
    every face). ``nf``: number of faces; ``v0s``, ``v1s`` (the interior edges, ``v0 < v1``), ``v2s``, ``v3s``
    (their opposite vertices) as gendr names them."""

    def __init__(self, faces, average=False):
        super().__init__(faces, average)
        self.nf = int(faces.shape[0])

    v0s = property(lambda self: self.edges[:, 0])
    v1s = property(lambda self: self.edges[:, 1])
    v2s = property(lambda self: self.opposite[:, 0])
    v3s = property(lambda self: self.opposite[:, 1])

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict = _skip_gendr_buffers(self, state_dict, prefix, ("v0s", "v1s", "v2s", "v3s"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# gendr.functional


def _get_points_from_angles(distance, elevation, azimuth, degrees=True):
    """Eye positions ``(d cos(el) sin(az), d sin(el), -d cos(el) cos(az))`` (:func:`relaxops.render.
    get_points_from_angles`). Numbers give a tuple of three floats, tensors a ``[..., 3]`` tensor."""
    if all(isinstance(v, numbers.Real) for v in (distance, elevation, azimuth)):
        d = torch.tensor(float(distance), dtype=torch.float64)
        return tuple(_camera.get_points_from_angles(d, elevation, azimuth, degrees).tolist())
    return _camera.get_points_from_angles(distance, elevation, azimuth, degrees)


def _ambient_lighting(light, light_intensity=0.5, light_color=(1, 1, 1)):
    """``light + light_intensity * light_color`` (``light [B, N, 3]``, not modified)."""
    return _lighting.ambient_lighting(light, light_intensity, light_color)


def _directional_lighting(light, normals, light_intensity=0.5, light_color=(1, 1, 1), light_direction=(0, 1, 0)):
    """``light + light_intensity * light_color * max(0, <normals, light_direction>)`` (``light`` not modified)."""
    return _lighting.directional_lighting(light, normals, light_intensity, light_color, light_direction)


def _load_obj(filename_obj, normalization=False, load_texture=False, texture_res=4, texture_type="surface"):
    """``(vertices [V, 3], faces [F, 3])`` or with ``load_texture`` ``(vertices, faces, textures)``, CPU tensors:
    :func:`relaxops.render.load_obj` with gendr's argument order and ``texture_res`` default."""
    return _io.load_obj(
        filename_obj,
        normalization=normalization,
        texture_res=texture_res,
        load_texture=load_texture,
        texture_type=texture_type,
    )


def _look(vertices, eye, direction=(0, 1, 0), up=None):
    """World to camera space looking along ``direction`` (:func:`relaxops.render.look`); ``up=None`` is +y.

    Raises:
        ValueError: ``direction`` is zero or parallel to ``up`` (no camera frame; true for the defaults).
    """
    up = (0, 1, 0) if up is None else up
    _mesh._check_positions(vertices)
    d = _mesh._vectors(direction, "direction", vertices).detach()
    u = _mesh._vectors(up, "up", vertices).detach()
    if d.shape[0] == u.shape[0] or 1 in (d.shape[0], u.shape[0]):
        sine = torch.linalg.cross(u, d, dim=-1).norm(dim=-1) / (u.norm(dim=-1) * d.norm(dim=-1))
        if not bool((sine >= _PARALLEL_SINE).all()):  # NaN (a zero vector) fails too
            raise ValueError(
                f"direction must be non-zero and not parallel to up, got direction={direction!r} and up={up!r}"
            )
    return _camera.look(vertices, eye, direction, up)


def _render(
    face_vertices,
    textures,
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
):
    """gendr's functional renderer: :func:`relaxops.render.rasterize` (``backend='auto'``).

    ``face_vertices [B, F, 3, 3]`` (or ``[B, F, 9]``) in screen space, ``textures [B, F, R*R, 3]`` (surface) or
    ``[B, F, 3, 3]`` (vertex; None: white). Returns ``[B, 4, S, S]`` RGBA, differentiable w.r.t. both.
    """
    _require_scale(dist_scale)
    return _functional.rasterize(
        face_vertices,
        textures,
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
        backend="auto",
    )


def _save_obj(filename, vertices, faces, textures=None, texture_res=16, texture_type="surface"):
    """Write ``vertices [V, 3]``, ``faces [F, 3]`` and optional textures as .obj (:func:`relaxops.render.save_obj`:
    surface textures become per-face ``Kd`` materials in a .mtl, ``texture_res`` is unused)."""
    _io.save_obj(filename, vertices, faces, textures=textures, texture_res=texture_res, texture_type=texture_type)


def _save_voxel(filename, voxel):
    """Write the occupied voxels (``voxel > 0``) of a ``[X, Y, Z]`` grid (tensor or ndarray) as a closed .obj
    surface: voxel ``(i, j, k)`` is the cube ``[i/X, (i+1)/X] x [j/Y, (j+1)/Y] x [k/Z, (k+1)/Z]``; only the squares
    between an occupied and an empty voxel are written (two outward-facing triangles each)."""
    grid = voxel.detach().cpu().numpy() if isinstance(voxel, torch.Tensor) else np.asarray(voxel)
    if grid.ndim != 3:
        raise ValueError(f"voxel must be a [X, Y, Z] grid, got shape {grid.shape}")
    occupied = np.pad(grid > 0, 1)
    size = np.array(grid.shape)
    triangles = []
    for axis in range(3):
        b, c = (axis + 1) % 3, (axis + 2) % 3  # e_b x e_c = e_axis
        square = np.zeros((4, 3), dtype=np.int64)  # counter-clockwise seen from +axis
        square[[1, 2], b] = 1
        square[[2, 3], c] = 1
        for side in (1, -1):
            exposed = occupied & ~np.roll(occupied, -side, axis=axis)
            cells = np.argwhere(exposed[1:-1, 1:-1, 1:-1])  # [N, 3] voxel indices
            corners = cells[:, None, :] + square[None]  # [N, 4, 3] lattice corners of the squares
            corners[:, :, axis] += side > 0
            order = [0, 1, 2, 0, 2, 3] if side > 0 else [0, 2, 1, 0, 3, 2]
            triangles.append(corners[:, order].reshape(-1, 3, 3))
    corners = np.concatenate(triangles).reshape(-1, 3)
    keys = (corners[:, 0] * (size[1] + 1) + corners[:, 1]) * (size[2] + 1) + corners[:, 2]
    unique, inverse = np.unique(keys, return_inverse=True)
    lattice = np.stack(
        [unique // ((size[1] + 1) * (size[2] + 1)), unique // (size[2] + 1) % (size[1] + 1), unique % (size[2] + 1)],
        axis=1,
    )
    _io.save_obj(filename, lattice / size, inverse.reshape(-1, 3))


def _voxelization(faces, size, normalize=False):
    """Solid voxelisation ``[B, size, size, size]`` int32 (0/1) of face vertices ``faces [B, F, 3, 3]`` given in
    voxel units (``normalize=True``) or in units of the whole grid (``normalize=False``: ``[0, 1]^3`` is the grid,
    the coordinates are multiplied by ``size``), as :func:`relaxops.render.losses.voxelize` computes it."""
    _checks.floating_tensor(faces, "faces")
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size!r}")
    size = int(size)
    voxel_units = faces.detach().double() * (1 if normalize else size)
    world = (voxel_units / size - 0.5) * ((size - 1) / size)  # the inverse of voxelize's world-to-voxel map
    return _losses.voxelize(world, size).int()


functional = types.ModuleType(f"{__name__}.functional", "gendr.functional's functions, backed by relaxops.render.")
_FUNCTIONAL = {
    "get_points_from_angles": _get_points_from_angles,
    "ambient_lighting": _ambient_lighting,
    "directional_lighting": _directional_lighting,
    "load_obj": _load_obj,
    "look": _look,
    "look_at": _camera.look_at,
    "render": _render,
    "save_obj": _save_obj,
    "save_voxel": _save_voxel,
    "face_vertices": _mesh.face_vertices,
    "vertex_normals": _mesh.vertex_normals,
    "voxelization": _voxelization,
}
for _name, _function in _FUNCTIONAL.items():
    if _function.__module__ == __name__:  # the wrappers above, named as in gendr.functional
        _function.__name__ = _function.__qualname__ = _name
        _function.__module__ = functional.__name__
    setattr(functional, _name, _function)
functional.__all__ = list(_FUNCTIONAL)
sys.modules[functional.__name__] = functional  # `import relaxops.compat.gendr.functional` and `from ... import`
del _name, _function
