"""Wavefront .obj / .mtl reading and writing for GenDR meshes (docs/math/render.md §1.1).

Supported on reading: ``v`` lines (with optional RGB colours in columns 4-6), ``f`` lines with 1-based or negative
(relative) indices in any of the forms ``f 1 2 3``, ``f 1/2 ...``, ``f 1/2/3 ...``, ``f 1//3 ...`` (only the vertex
index is used), polygons fan-triangulated as ``(v0, v_i, v_{i+1})``, and ``mtllib`` / ``usemtl`` with the materials'
``Kd`` colours. Image texture maps (``map_Kd``) are not supported: such faces get their material's ``Kd`` colour
(white without one) and a warning names the ignored files. Everything else (``vt``, ``vn``, groups, ...) is skipped.
"""

from __future__ import annotations

import numbers
import os
import warnings

import numpy as np
import torch

TEXTURE_TYPES = ("surface", "vertex")


def _parse_obj(path: str):
    """Vertices ``[V, 3]`` float64, per-vertex colours (``None`` where missing), triangles ``[F, 3]`` int64
    (0-based), the material name of every triangle and the .mtl files named by ``mtllib``."""
    positions, colours, triangles, face_materials, mtllibs = [], [], [], [], []
    material = ""
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            tokens = line.split()
            if not tokens:
                continue
            try:
                key = tokens[0]
                if key == "v":
                    if len(tokens) < 4:
                        raise ValueError("a 'v' line needs 3 coordinates")
                    positions.append([float(t) for t in tokens[1:4]])
                    colours.append([float(t) for t in tokens[4:7]] if len(tokens) >= 7 else None)
                elif key == "f":
                    if len(tokens) < 4:
                        raise ValueError("a face needs at least 3 vertices")
                    polygon = []
                    for token in tokens[1:]:
                        index = int(token.split("/")[0])
                        if index == 0:
                            raise ValueError("vertex index 0 (indices are 1-based)")
                        # negative indices count back from the last vertex defined so far
                        polygon.append(index - 1 if index > 0 else len(positions) + index)
                    triangles.extend((polygon[0], polygon[i], polygon[i + 1]) for i in range(1, len(polygon) - 1))
                    face_materials.extend([material] * (len(polygon) - 2))
                elif key == "usemtl":
                    material = tokens[1] if len(tokens) > 1 else ""
                elif key == "mtllib":
                    mtllibs.extend(tokens[1:])
            except ValueError as err:
                raise ValueError(f"filename_obj {path!r}, line {lineno}: {err}") from err
    vertices = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
    faces = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    if faces.size and (faces.min() < 0 or faces.max() >= len(vertices)):
        raise ValueError(f"filename_obj {path!r}: face indices reach outside the {len(vertices)} vertices")
    return vertices, colours, faces, face_materials, mtllibs


def _parse_mtl(path: str):
    """``{material: Kd colour}`` and ``{material: map_Kd file}`` of a .mtl file."""
    colours, maps = {}, {}
    material = ""
    with open(path) as f:
        for line in f:
            tokens = line.split()
            if not tokens:
                continue
            if tokens[0] == "newmtl":
                material = tokens[1] if len(tokens) > 1 else ""
            elif tokens[0] == "Kd" and len(tokens) >= 4:
                colours[material] = [float(t) for t in tokens[1:4]]
            elif tokens[0] == "map_Kd" and len(tokens) > 1:
                maps[material] = tokens[-1]
    return colours, maps


def _surface_textures(path: str, face_materials: list, mtllibs: list, texture_res: int) -> torch.Tensor:
    if not mtllibs:
        raise ValueError(f"filename_obj {path!r} names no material library (mtllib), so it has no surface textures")
    colours, maps = {}, {}
    for name in mtllibs:
        c, m = _parse_mtl(os.path.join(os.path.dirname(path), name))
        colours.update(c)
        maps.update(m)
    names = sorted(set(face_materials))
    ignored = sorted({maps[n] for n in names if n in maps})
    if ignored:
        warnings.warn(
            f"load_obj: image texture maps are not supported, using the materials' Kd colours instead of {ignored}",
            stacklevel=3,
        )
    table = torch.tensor([colours.get(n, [1.0, 1.0, 1.0]) for n in names], dtype=torch.float32).reshape(-1, 3)
    lookup = {n: i for i, n in enumerate(names)}
    ids = torch.tensor([lookup[n] for n in face_materials], dtype=torch.long)
    return table[ids][:, None, :].repeat(1, texture_res * texture_res, 1)


def load_obj(
    filename_obj,
    normalization: bool = False,
    texture_res: int = 1,
    load_texture: bool = False,
    texture_type: str = "surface",
):
    """Read a triangle mesh from a Wavefront .obj file (CPU tensors).

    Args:
        filename_obj: path of the .obj file.
        normalization: centre the mesh and make its longest axis span ``[-1, 1]`` (docs/math/render.md §1.1: subtract
            the per-axis minimum, divide by the largest coordinate, times 2, subtract half the per-axis maximum).
        texture_res: ``R`` of surface textures.
        load_texture: also return textures.
        texture_type: ``'surface'``: ``[F, R*R, 3]``, every texel of a face set to the ``Kd`` colour of its
            ``usemtl`` material from the .mtl files named by ``mtllib`` (white for faces without one; image maps
            are ignored with a warning). ``'vertex'``: ``[V, 3]`` colours from columns 4-6 of the ``v`` lines.

    Returns:
        ``(vertices [V, 3] float32, faces [F, 3] int32)``, or ``(vertices, faces, textures float32)`` with
        ``load_texture=True``.

    Raises:
        ValueError: malformed lines, indices out of range, no ``mtllib`` for surface textures, or a ``v`` line
            without colours for vertex textures.
    """
    if texture_type not in TEXTURE_TYPES:
        raise ValueError(f"texture_type must be one of {TEXTURE_TYPES}, got {texture_type!r}")
    if isinstance(texture_res, bool) or not isinstance(texture_res, numbers.Integral) or texture_res < 1:
        raise ValueError(f"texture_res must be an integer >= 1, got {texture_res!r}")
    path = os.fspath(filename_obj)
    vertices_np, colours, faces_np, face_materials, mtllibs = _parse_obj(path)
    vertices = torch.from_numpy(vertices_np).float()
    faces = torch.from_numpy(faces_np).int()

    textures = None
    if load_texture and texture_type == "surface":
        textures = _surface_textures(path, face_materials, mtllibs, int(texture_res))
    elif load_texture:
        missing = [i + 1 for i, c in enumerate(colours) if c is None]
        if missing:
            raise ValueError(
                f"filename_obj {path!r}: vertex textures need r g b in columns 4-6 of every 'v' line, "
                f"{len(missing)} vertices lack them (first: vertex {missing[0]})"
            )
        textures = torch.tensor(colours, dtype=torch.float32).reshape(-1, 3)

    if normalization and len(vertices):
        vertices = vertices - vertices.min(0).values
        vertices = vertices / vertices.abs().max()
        vertices = vertices * 2
        vertices = vertices - vertices.max(0).values / 2

    return (vertices, faces, textures) if load_texture else (vertices, faces)


def _numpy(value, name: str, dim: int) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a torch.Tensor or an ndarray, got {type(value).__name__}")
    if value.ndim != dim or value.shape[-1] != 3:
        raise ValueError(f"{name} must have {dim} dimensions with 3 in the last, got shape {value.shape}")
    return value


def save_obj(filename_obj, vertices, faces, textures=None, texture_res: int = 16, texture_type: str = "surface"):
    """Write a triangle mesh as a Wavefront .obj file (and a .mtl for surface textures).

    Args:
        filename_obj: path of the .obj file; surface materials go to the same path with the suffix ``.mtl``.
        vertices: ``[V, 3]`` tensor or ndarray, written with 9 significant digits (float32 round-trips exactly).
        faces: ``[F, 3]`` 0-based vertex indices, written 1-based.
        textures: ``None``, ``[V, 3]`` vertex colours (written as columns 4-6 of the ``v`` lines) or
            ``[F, R*R, 3]`` surface textures. Surface textures are stored as uniform colours: each face gets a
            material whose ``Kd`` is the mean of its texels (one material per distinct colour), so texel detail
            inside a face is lost; :func:`load_obj` reads them back.
        texture_res: accepted for compatibility with the original ``gendr`` signature (which wrote a texture
            image of this resolution); unused, since the materials hold one colour per face.
        texture_type: ``'surface'`` or ``'vertex'``.
    """
    if texture_type not in TEXTURE_TYPES:
        raise ValueError(f"texture_type must be one of {TEXTURE_TYPES}, got {texture_type!r}")
    path = os.fspath(filename_obj)
    vertices = _numpy(vertices, "vertices", 2).astype(np.float64)
    faces = _numpy(faces, "faces", 2)
    if not np.issubdtype(faces.dtype, np.integer):
        raise TypeError(f"faces must have an integer dtype, got {faces.dtype}")
    if faces.size and (faces.min() < 0 or faces.max() >= len(vertices)):
        raise ValueError(f"faces must hold vertex indices in [0, {len(vertices)})")
    faces = faces.astype(np.int64) + 1

    colours = materials = None
    if textures is not None and texture_type == "vertex":
        colours = _numpy(textures, "textures", 2).astype(np.float64)
        if len(colours) != len(vertices):
            raise ValueError(f"vertex textures must have shape [V={len(vertices)}, 3], got {colours.shape}")
    elif textures is not None:
        tex = _numpy(textures, "textures", 3).astype(np.float64)
        if len(tex) != len(faces):
            raise ValueError(f"surface textures must have shape [F={len(faces)}, R*R, 3], got {tex.shape}")
        palette, material_ids = np.unique(tex.mean(axis=1), axis=0, return_inverse=True)
        material_ids = material_ids.reshape(-1)
        mtl_path = os.path.splitext(path)[0] + ".mtl"
        with open(mtl_path, "w") as f:
            for i, kd in enumerate(palette):
                f.write(f"newmtl material_{i}\nKd {kd[0]:.9g} {kd[1]:.9g} {kd[2]:.9g}\n\n")
        materials = (os.path.basename(mtl_path), material_ids)

    with open(path, "w") as f:
        f.write(f"# {os.path.basename(path)}: {len(vertices)} vertices, {len(faces)} faces (relaxops)\n")
        if materials is not None:
            f.write(f"mtllib {materials[0]}\n")
        if colours is not None:
            np.savetxt(f, np.concatenate([vertices, colours], axis=1), fmt="v" + " %.9g" * 6)
        else:
            np.savetxt(f, vertices, fmt="v %.9g %.9g %.9g")
        if materials is None:
            np.savetxt(f, faces, fmt="f %d %d %d")
            return
        # one 'usemtl' per run of faces sharing a material, keeping the face order
        ids = materials[1]
        starts = np.flatnonzero(np.diff(ids, prepend=-1))
        for start, stop in zip(starts, np.append(starts[1:], len(ids))):
            f.write(f"usemtl material_{ids[start]}\n")
            np.savetxt(f, faces[start:stop], fmt="f %d %d %d")
