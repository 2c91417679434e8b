"""Triangle meshes for GenDR (docs/math/render.md §1.1): per-face gathers, normals and the Mesh container.

A batch of meshes is ``vertices [B, V, 3]`` (float), ``faces [B, F, 3]`` (integer, 0-based) and textures: either
``'surface'`` ``[B, F, R*R, 3]`` (``R*R`` RGB texels per face) or ``'vertex'`` ``[B, V, 3]`` (one RGB colour per
vertex). Normals follow the right-hand rule: ``(v1 - v0) x (v2 - v0)`` points out of a face's front side.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F

from .. import _checks
from . import io as _io
from . import losses as _losses

TEXTURE_TYPES = ("surface", "vertex")
NORMAL_EPS = 1e-6


def _to_tensor(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """``value`` (number, sequence, ndarray or tensor) as a tensor with the dtype and device of ``like``."""
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=like.dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return torch.stack([_to_tensor(v, name, like) for v in value])
    try:
        return _checks.to_device(np.asarray(value, dtype=np.float64), like.dtype, like.device)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{name} must be a number, a sequence of numbers, an ndarray or a tensor, got {value!r}"
        ) from err


def _vectors(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """``value`` given as ``[3]`` or ``[N, 3]`` returned as ``[N, 3]`` (``N = 1`` for a single vector)."""
    t = _to_tensor(value, name, like)
    if t.dim() not in (1, 2) or t.shape[-1] != 3:
        raise ValueError(f"{name} must have shape [3] or [B, 3], got {tuple(t.shape)}")
    return t.reshape(-1, 3)


def _batch_size(sizes: dict[str, int]) -> int:
    """The common batch size of tensors whose batch sizes are ``sizes`` (each equal to it or 1)."""
    batch = max(sizes.values())
    for name, size in sizes.items():
        if size not in (1, batch):
            detail = ", ".join(f"{n}: {s}" for n, s in sizes.items())
            raise ValueError(f"batch sizes must agree or be 1, got {name} with {size} ({detail})")
    return batch


def _check_vertices(vertices, name: str = "vertices") -> None:
    _checks.floating_tensor(vertices, name)
    if vertices.dim() != 3:
        raise ValueError(f"{name} must have shape [B, V, C], got {tuple(vertices.shape)}")


def _check_faces(faces, num_vertices: int, name: str = "faces") -> None:
    """Integer ``[B, F, 3]`` with indices in ``[0, num_vertices)``."""
    if not isinstance(faces, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(faces).__name__}")
    if faces.dtype.is_floating_point or faces.dtype.is_complex or faces.dtype == torch.bool:
        raise TypeError(f"{name} must have an integer dtype, got {faces.dtype}")
    if faces.dim() != 3 or faces.shape[-1] != 3:
        raise ValueError(f"{name} must have shape [B, F, 3], got {tuple(faces.shape)}")
    if faces.numel() and not torch.compiler.is_compiling() and not _checks.on_host(faces):
        ok = (faces >= 0) & (faces < num_vertices)
        _checks.assert_on_device(ok, f"{name} must hold vertex indices in [0, {num_vertices})")
    elif faces.numel() and not torch.compiler.is_compiling():
        lo, hi = int(faces.min()), int(faces.max())
        if lo < 0 or hi >= num_vertices:
            raise ValueError(f"{name} must hold vertex indices in [0, {num_vertices}), got values in [{lo}, {hi}]")


def face_vertices(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Gather per-vertex values into per-face corners.

    Args:
        vertices: ``[B, V, C]`` floating tensor (positions, colours, ...).
        faces: ``[B, F, 3]`` integer vertex indices in ``[0, V)``. A batch of 1 on either side is broadcast.

    Returns:
        ``[B, F, 3, C]``: ``out[b, f, k] = vertices[b, faces[b, f, k]]``. Differentiable w.r.t. ``vertices``.
    """
    _check_vertices(vertices)
    _check_faces(faces, vertices.shape[1])
    batch = _batch_size({"vertices": vertices.shape[0], "faces": faces.shape[0]})
    num_faces, channels = faces.shape[1], vertices.shape[2]
    index = faces.long().reshape(faces.shape[0], num_faces * 3, 1).expand(batch, -1, channels)
    out = vertices.expand(batch, -1, -1).gather(1, index)
    return out.reshape(batch, num_faces, 3, channels)


def _check_positions(vertices: torch.Tensor) -> None:
    _check_vertices(vertices)
    if vertices.shape[2] != 3:
        raise ValueError(f"vertices must have shape [B, V, 3], got {tuple(vertices.shape)}")


def _face_cross(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """``(v1 - v0) x (v2 - v0)`` per face, ``[B, F, 3]``: twice the area times the unit normal."""
    fv = face_vertices(vertices, faces)
    return torch.linalg.cross(fv[:, :, 1] - fv[:, :, 0], fv[:, :, 2] - fv[:, :, 0], dim=-1)


def face_normals(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Unit face normals ``normalize((v1 - v0) x (v2 - v0))`` (eps 1e-6; degenerate faces give 0).

    Args:
        vertices: ``[B, V, 3]`` floating tensor.
        faces: ``[B, F, 3]`` integer vertex indices.

    Returns:
        ``[B, F, 3]`` normals, dtype of ``vertices``.
    """
    _check_positions(vertices)
    return F.normalize(_face_cross(vertices, faces), dim=-1, eps=NORMAL_EPS)


def vertex_normals(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Area-weighted unit vertex normals (docs/math/render.md §1.1).

    Every face adds to each of its three vertices the unnormalised cross product of the two edges leaving that
    vertex, ``(next - this) x (previous - this)``; for a triangle all three equal ``(v1 - v0) x (v2 - v0)``,
    twice the face area times its normal. The sums are normalised with eps 1e-6 (unused vertices give 0).

    Args:
        vertices: ``[B, V, 3]`` floating tensor.
        faces: ``[B, F, 3]`` integer vertex indices.

    Returns:
        ``[B, V, 3]`` normals, dtype of ``vertices``.
    """
    _check_positions(vertices)
    cross = _face_cross(vertices, faces)  # [B, F, 3]
    batch, num_vertices = cross.shape[0], vertices.shape[1]
    offsets = torch.arange(batch, device=faces.device).view(batch, 1, 1) * num_vertices
    index = (faces.long().expand(batch, -1, -1) + offsets).reshape(-1)
    values = cross.unsqueeze(2).expand(-1, -1, 3, -1).reshape(-1, 3)
    sums = cross.new_zeros(batch * num_vertices, 3).index_add(0, index, values)
    return F.normalize(sums, dim=-1, eps=NORMAL_EPS).view(batch, num_vertices, 3)


class Mesh:
    """A batch of triangle meshes with textures, in world space (docs/math/render.md §1.1).

    Args:
        vertices: ``[B, V, 3]`` or ``[V, 3]`` floating tensor, or an ndarray (converted to a float32 CPU tensor).
            Must be finite.
        faces: ``[B, F, 3]`` or ``[F, 3]`` integer tensor or ndarray of 0-based vertex indices.
        textures: ``None`` (all ones, i.e. white) or, for ``texture_type='surface'``, ``[B, F, R*R, 3]`` /
            ``[F, R*R, 3]``; for ``'vertex'``, ``[B, V, 3]`` / ``[V, 3]``. Tensor or ndarray.
        texture_res: ``R`` of the default surface textures. Given surface textures set it to
            ``floor(sqrt(R*R))``; vertex textures have ``R = 1``.
        texture_type: ``'surface'`` or ``'vertex'``.

    A batch of 1 in any of the three is broadcast (without copying) to the batch of the others, so a single mesh
    can be combined with ``[B, V, 3]`` vertices produced by a batched camera. Arrays given as ndarrays other than
    ``vertices`` are moved to the dtype (textures) and device of ``vertices``; default textures take the dtype and
    device of ``vertices``.
    """

    def __init__(self, vertices, faces, textures=None, texture_res: int = 1, texture_type: str = "surface"):
        if texture_type not in TEXTURE_TYPES:
            raise ValueError(f"texture_type must be one of {TEXTURE_TYPES}, got {texture_type!r}")
        if isinstance(texture_res, bool) or not isinstance(texture_res, numbers.Integral) or texture_res < 1:
            raise ValueError(f"texture_res must be an integer >= 1, got {texture_res!r}")
        if isinstance(vertices, np.ndarray):
            vertices = torch.from_numpy(np.ascontiguousarray(vertices, dtype=np.float32))
        _checks.floating_tensor(vertices, "vertices", min_dim=2)
        if isinstance(faces, np.ndarray):
            if not np.issubdtype(faces.dtype, np.integer):
                raise TypeError(f"faces must have an integer dtype, got {faces.dtype}")
            faces = torch.from_numpy(np.ascontiguousarray(faces)).to(vertices.device)
        if isinstance(faces, torch.Tensor) and faces.dim() == 2:
            faces = faces.unsqueeze(0)
        if vertices.dim() == 2:
            vertices = vertices.unsqueeze(0)
        _check_positions(vertices)
        if not torch.compiler.is_compiling() and not _checks.on_host(vertices):
            _checks.assert_on_device(torch.isfinite(vertices), "vertices must be finite (no NaN or inf)")
        elif not torch.compiler.is_compiling() and not bool(torch.isfinite(vertices).all()):
            raise ValueError("vertices must be finite (no NaN or inf)")
        _check_faces(faces, vertices.shape[1])
        if faces.device != vertices.device:
            raise ValueError(f"faces must be on the device of vertices ({vertices.device}), got {faces.device}")

        if textures is None:
            res = texture_res if texture_type == "surface" else 1
            shape = (faces.shape[1], res * res, 3) if texture_type == "surface" else (vertices.shape[1], 3)
            textures = vertices.new_ones((1, *shape))
        else:
            textures = self._check_textures(textures, texture_type, vertices, faces)
            res = math.isqrt(textures.shape[2]) if texture_type == "surface" else 1

        batch = _batch_size({"vertices": vertices.shape[0], "faces": faces.shape[0], "textures": textures.shape[0]})
        self._vertices, self._faces, self._textures = (
            t if t.shape[0] == batch else t.expand(batch, *t.shape[1:]) for t in (vertices, faces, textures)
        )
        self._texture_res = res
        self._texture_type = texture_type

    @staticmethod
    def _check_textures(textures, texture_type: str, vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
        if isinstance(textures, np.ndarray):
            textures = torch.as_tensor(textures, dtype=vertices.dtype, device=vertices.device)
        _checks.floating_tensor(textures, "textures")
        if texture_type == "surface":
            if textures.dim() == 3:
                textures = textures.unsqueeze(0)
            if (
                textures.dim() != 4
                or textures.shape[1] != faces.shape[1]
                or textures.shape[3] != 3
                or textures.shape[2] < 1
            ):
                raise ValueError(
                    f"surface textures must have shape [B, F={faces.shape[1]}, R*R, 3], got {tuple(textures.shape)}"
                )
        else:
            if textures.dim() == 2:
                textures = textures.unsqueeze(0)
            if textures.dim() != 3 or textures.shape[1:] != (vertices.shape[1], 3):
                raise ValueError(
                    f"vertex textures must have shape [B, V={vertices.shape[1]}, 3], got {tuple(textures.shape)}"
                )
        if textures.device != vertices.device:
            raise ValueError(f"textures must be on the device of vertices ({vertices.device}), got {textures.device}")
        return textures

    @classmethod
    def from_obj(
        cls,
        filename_obj,
        normalization: bool = False,
        load_texture: bool = False,
        texture_res: int = 1,
        texture_type: str = "surface",
    ) -> Mesh:
        """A single mesh (batch 1) read from a Wavefront .obj file with :func:`relaxops.render.io.load_obj`.

        Args:
            filename_obj: path of the .obj file.
            normalization: centre the mesh and scale its longest axis to ``[-1, 1]``.
            load_texture: read surface colours from the .mtl materials or vertex colours from the ``v`` lines;
                otherwise the textures are white.
            texture_res: ``R`` of the surface textures.
            texture_type: ``'surface'`` or ``'vertex'``.
        """
        loaded = _io.load_obj(
            filename_obj,
            normalization=normalization,
            texture_res=texture_res,
            load_texture=load_texture,
            texture_type=texture_type,
        )
        textures = loaded[2] if load_texture else None
        return cls(loaded[0], loaded[1], textures, texture_res, texture_type)

    def save_obj(self, filename_obj, save_texture: bool = False, texture_res_out: int = 16) -> None:
        """Write the mesh (batch size 1 only) with :func:`relaxops.render.io.save_obj`.

        Args:
            filename_obj: path of the .obj file (a .mtl next to it for surface textures).
            save_texture: also write the textures (vertex colours or per-face materials).
            texture_res_out: passed on as ``texture_res``.
        """
        if self.batch_size != 1:
            raise ValueError(f"save_obj needs a mesh of batch size 1, got {self.batch_size}")
        textures = self.textures[0] if save_texture else None
        _io.save_obj(
            filename_obj,
            self.vertices[0],
            self.faces[0],
            textures=textures,
            texture_res=texture_res_out,
            texture_type=self.texture_type,
        )

    def voxelize(self, voxel_size: int = 32) -> torch.Tensor:
        """Solid voxelisation ``[B, S, S, S]`` (bool), ``S = voxel_size`` (:func:`relaxops.render.losses.voxelize`)."""
        return _losses.voxelize(self.face_vertices, voxel_size)

    @property
    def vertices(self) -> torch.Tensor:
        """``[B, V, 3]``."""
        return self._vertices

    @property
    def faces(self) -> torch.Tensor:
        """``[B, F, 3]`` integer vertex indices."""
        return self._faces

    @property
    def textures(self) -> torch.Tensor:
        """``[B, F, R*R, 3]`` (surface) or ``[B, V, 3]`` (vertex)."""
        return self._textures

    @property
    def face_vertices(self) -> torch.Tensor:
        """``[B, F, 3, 3]``: the corners of every face, ``[b, f, k, xyz]``."""
        return face_vertices(self._vertices, self._faces)

    @property
    def face_textures(self) -> torch.Tensor:
        """Textures as the rasterizer reads them: ``[B, F, R*R, 3]`` (surface) or ``[B, F, 3, 3]`` (vertex colours
        gathered per face corner)."""
        if self._texture_type == "surface":
            return self._textures
        return face_vertices(self._textures, self._faces)

    def face_attributes(self, values: torch.Tensor) -> torch.Tensor:
        """Per-vertex ``values [B, V, C]`` (or ``[V, C]``; e.g. :attr:`vertex_normals`, colours) gathered to the
        face corners, ``[B, F, 3, C]``: the ``attributes`` of :func:`relaxops.render.render_buffers`.
        Differentiable w.r.t. ``values``."""
        _checks.floating_tensor(values, "values", min_dim=2)
        if values.dim() == 2:
            values = values.unsqueeze(0)
        if values.dim() != 3 or values.shape[1] != self.num_vertices:
            raise ValueError(f"values must have shape [B, V={self.num_vertices}, C], got {tuple(values.shape)}")
        if values.device != self.device:
            raise ValueError(f"values must be on the device of the mesh ({self.device}), got {values.device}")
        return face_vertices(values, self._faces)

    @property
    def surface_normals(self) -> torch.Tensor:
        """``[B, F, 3]`` unit face normals (:func:`face_normals`)."""
        return face_normals(self._vertices, self._faces)

    @property
    def vertex_normals(self) -> torch.Tensor:
        """``[B, V, 3]`` area-weighted unit vertex normals (:func:`vertex_normals`)."""
        return vertex_normals(self._vertices, self._faces)

    @property
    def batch_size(self) -> int:
        return self._vertices.shape[0]

    @property
    def num_vertices(self) -> int:
        return self._vertices.shape[1]

    @property
    def num_faces(self) -> int:
        return self._faces.shape[1]

    @property
    def device(self) -> torch.device:
        return self._vertices.device

    @property
    def texture_res(self) -> int:
        return self._texture_res

    @property
    def texture_type(self) -> str:
        return self._texture_type

    def __repr__(self) -> str:
        return (
            f"Mesh(batch_size={self.batch_size}, num_vertices={self.num_vertices}, num_faces={self.num_faces}, "
            f"texture_type={self._texture_type!r}, texture_res={self._texture_res}, "
            f"dtype={self._vertices.dtype}, device={self.device})"
        )
