"""Procedural triangle meshes for tests, demos and benchmarks.

Every builder returns ``(vertices [V, 3] float32, faces [F, 3] int64)`` on the CPU, with consistent outward
orientation: the right-hand normal ``(v1 - v0) x (v2 - v0)`` points out of the solid. Seen through
:func:`relaxops.render.camera.look_at` and a projection (camera space y up, z forward), faces turned towards the
camera are then clockwise on screen, which is what the rasterizer treats as front-facing (docs/math/render.md §1.4).
"""

from __future__ import annotations

import math
import numbers

import torch

ICOSPHERE_MAX_LEVEL = 8  # 1.3 M faces


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _orient(vertices: torch.Tensor, faces: torch.Tensor, outward: torch.Tensor) -> torch.Tensor:
    """``faces`` with the winding of those whose normal points against ``outward`` (``[F, 3]``) reversed."""
    corners = vertices[faces]
    normals = torch.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0], dim=-1)
    flip = (normals * outward).sum(-1) < 0
    return torch.where(flip[:, None], faces[:, [0, 2, 1]], faces)


def _finish(vertices: torch.Tensor, faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return vertices.float().contiguous(), faces.long().contiguous()


def _icosahedron() -> tuple[torch.Tensor, torch.Tensor]:
    """The regular icosahedron on the unit sphere (float64): 12 vertices, 20 outward faces."""
    phi = (1 + math.sqrt(5)) / 2
    signs = torch.tensor([[a, b] for a in (-1.0, 1.0) for b in (-1.0, 1.0)], dtype=torch.float64)
    zero = torch.zeros(4, dtype=torch.float64)
    # the cyclic permutations of (0, +-1, +-phi)
    vertices = torch.cat(
        [
            torch.stack([zero, signs[:, 0], phi * signs[:, 1]], 1),
            torch.stack([signs[:, 0], phi * signs[:, 1], zero], 1),
            torch.stack([phi * signs[:, 1], zero, signs[:, 0]], 1),
        ]
    )
    # the faces are the triples of mutually adjacent vertices (edge length 2)
    triples = torch.combinations(torch.arange(12), 3)
    corners = vertices[triples]
    lengths = (corners - corners.roll(1, dims=1)).norm(dim=-1)
    faces = triples[((lengths - 2).abs() < 1e-9).all(1)]
    faces = _orient(vertices, faces, vertices[faces].mean(1))
    return vertices / vertices.norm(dim=1, keepdim=True), faces


def _subdivide(vertices: torch.Tensor, faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split every face into four at its edge midpoints (shared by the two faces of an edge), projected on the
    unit sphere; windings are kept."""
    edges = faces[:, [[0, 1], [1, 2], [2, 0]]].sort(dim=-1).values  # [F, 3, 2]
    keys = edges[..., 0] * len(vertices) + edges[..., 1]
    unique_keys, inverse = torch.unique(keys.reshape(-1), return_inverse=True)
    ends = torch.stack([unique_keys // len(vertices), unique_keys % len(vertices)], 1)
    midpoints = vertices[ends].sum(1)
    midpoints = midpoints / midpoints.norm(dim=1, keepdim=True)
    mid = (inverse + len(vertices)).reshape(-1, 3)  # midpoints of (v0 v1), (v1 v2), (v2 v0)
    a, b, c = faces.unbind(1)
    ab, bc, ca = mid.unbind(1)
    new_faces = torch.cat([torch.stack(f, 1) for f in ((a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca))])
    return torch.cat([vertices, midpoints]), new_faces


def icosphere(subdivisions: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit sphere from a subdivided icosahedron.

    Args:
        subdivisions: level ``n`` in ``[0, 8]``: ``20 * 4^n`` faces and ``10 * 4^n + 2`` vertices (5120 faces at
            4, 81920 at 6). Vertices are shared between faces (no duplicates).

    Returns:
        ``(vertices [V, 3] float32, faces [F, 3] int64)``.
    """
    level = _check_int(subdivisions, "subdivisions", 0)
    if level > ICOSPHERE_MAX_LEVEL:
        raise ValueError(f"subdivisions must be <= {ICOSPHERE_MAX_LEVEL}, got {level}")
    vertices, faces = _icosahedron()
    for _ in range(level):
        vertices, faces = _subdivide(vertices, faces)
    return _finish(vertices, faces)


def cube() -> tuple[torch.Tensor, torch.Tensor]:
    """The cube ``[-1, 1]^3``: 8 vertices, 12 faces (two per side).

    Returns:
        ``(vertices [8, 3] float32, faces [12, 3] int64)``.
    """
    bits = torch.tensor([[(i >> 2) & 1, (i >> 1) & 1, i & 1] for i in range(8)])
    vertices = bits.double() * 2 - 1
    faces = []
    for axis in range(3):
        u, w = [a for a in range(3) if a != axis]
        for side in (0, 1):
            # the side's corners in cyclic order around it, split into two triangles
            quad = [
                next(i for i in range(8) if bits[i, axis] == side and bits[i, u] == bu and bits[i, w] == bw)
                for bu, bw in ((0, 0), (1, 0), (1, 1), (0, 1))
            ]
            faces += [[quad[0], quad[1], quad[2]], [quad[0], quad[2], quad[3]]]
    faces = torch.tensor(faces)
    return _finish(vertices, _orient(vertices, faces, vertices[faces].mean(1)))


def _grid_faces(rows: int, cols: int, wrap_rows: bool, wrap_cols: bool) -> torch.Tensor:
    """Two triangles per cell of a ``rows x cols`` vertex grid (vertex ``(i, j)`` at index ``i * cols + j``),
    optionally wrapping around in either direction."""
    i = torch.arange(rows if wrap_rows else rows - 1)
    j = torch.arange(cols if wrap_cols else cols - 1)
    i, j = torch.meshgrid(i, j, indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    i1, j1 = (i + 1) % rows, (j + 1) % cols
    a, b, c, d = i * cols + j, i1 * cols + j, i * cols + j1, i1 * cols + j1
    return torch.cat([torch.stack([a, b, d], 1), torch.stack([a, d, c], 1)])


def uv_sphere(n_lat: int = 16, n_lon: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit sphere from latitude / longitude rings, poles on the y axis.

    Args:
        n_lat: latitude bands (>= 2): ``n_lat - 1`` rings between the poles.
        n_lon: vertices per ring (>= 3).

    Returns:
        ``(vertices [2 + (n_lat - 1) n_lon, 3] float32, faces [2 n_lon (n_lat - 1), 3] int64)``.
    """
    n_lat, n_lon = _check_int(n_lat, "n_lat", 2), _check_int(n_lon, "n_lon", 3)
    theta = torch.arange(1, n_lat, dtype=torch.float64) * math.pi / n_lat
    phi = torch.arange(n_lon, dtype=torch.float64) * 2 * math.pi / n_lon
    theta, phi = torch.meshgrid(theta, phi, indexing="ij")
    rings = torch.stack([theta.sin() * phi.cos(), theta.cos(), theta.sin() * phi.sin()], -1).reshape(-1, 3)
    poles = torch.tensor([[0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], dtype=torch.float64)
    vertices = torch.cat([poles[:1], rings, poles[1:]])
    j = torch.arange(n_lon)
    north, south = 0, len(vertices) - 1
    first, last = 1 + j, 1 + (n_lat - 2) * n_lon + j
    caps = torch.cat(
        [
            torch.stack([torch.full_like(j, north), first, first.roll(-1)], 1),
            torch.stack([torch.full_like(j, south), last, last.roll(-1)], 1),
        ]
    )
    bands = _grid_faces(n_lat - 1, n_lon, wrap_rows=False, wrap_cols=True) + 1
    faces = torch.cat([caps, bands])
    return _finish(vertices, _orient(vertices, faces, vertices[faces].mean(1)))


def torus(R: float = 1.0, r: float = 0.3, n_major: int = 32, n_minor: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Torus around the y axis: centre circle of radius ``R`` in the xz plane, tube radius ``r``.

    Args:
        R: major radius, ``R > r``.
        r: minor (tube) radius, ``> 0``.
        n_major: vertices around the centre circle (>= 3).
        n_minor: vertices around the tube (>= 3).

    Returns:
        ``(vertices [n_major n_minor, 3] float32, faces [2 n_major n_minor, 3] int64)``.
    """
    n_major, n_minor = _check_int(n_major, "n_major", 3), _check_int(n_minor, "n_minor", 3)
    if not (isinstance(r, numbers.Real) and math.isfinite(r) and r > 0):
        raise ValueError(f"r must be a finite number > 0, got {r!r}")
    if not (isinstance(R, numbers.Real) and math.isfinite(R) and R > r):
        raise ValueError(f"R must be a finite number > r = {r}, got {R!r}")
    u = torch.arange(n_major, dtype=torch.float64) * 2 * math.pi / n_major
    v = torch.arange(n_minor, dtype=torch.float64) * 2 * math.pi / n_minor
    u, v = torch.meshgrid(u, v, indexing="ij")
    ring = R + r * v.cos()
    vertices = torch.stack([ring * u.cos(), r * v.sin(), ring * u.sin()], -1).reshape(-1, 3)
    faces = _grid_faces(n_major, n_minor, wrap_rows=True, wrap_cols=True)
    # outward = away from the nearest point of the centre circle
    centroids = vertices[faces].mean(1)
    circle = torch.nn.functional.normalize(centroids * torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), dim=-1)
    return _finish(vertices, _orient(vertices, faces, centroids - R * circle))


def plane(nx: int = 1, ny: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The square ``[-1, 1]^2`` in the plane ``z = 0``, front side towards -z (facing the default camera).

    Args:
        nx, ny: cells along x and y (>= 1).

    Returns:
        ``(vertices [(nx + 1)(ny + 1), 3] float32, faces [2 nx ny, 3] int64)``.
    """
    nx, ny = _check_int(nx, "nx", 1), _check_int(ny, "ny", 1)
    x = torch.linspace(-1, 1, nx + 1, dtype=torch.float64)
    y = torch.linspace(-1, 1, ny + 1, dtype=torch.float64)
    x, y = torch.meshgrid(x, y, indexing="ij")
    vertices = torch.stack([x, y, torch.zeros_like(x)], -1).reshape(-1, 3)
    faces = _grid_faces(nx + 1, ny + 1, wrap_rows=False, wrap_cols=False)
    return _finish(vertices, _orient(vertices, faces, vertices.new_tensor([0.0, 0.0, -1.0])))


def merge(meshes) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate meshes into one.

    Args:
        meshes: non-empty sequence of ``(vertices [V_i, 3], faces [F_i, 3])``.

    Returns:
        ``(vertices [sum V_i, 3], faces [sum F_i, 3] int64)``, faces offset to the concatenated vertices.
    """
    meshes = list(meshes)
    if not meshes:
        raise ValueError("meshes must contain at least one (vertices, faces) pair")
    offsets, total = [], 0
    for i, (vertices, faces) in enumerate(meshes):
        if vertices.dim() != 2 or vertices.shape[1] != 3 or faces.dim() != 2 or faces.shape[1] != 3:
            raise ValueError(
                f"meshes[{i}] must be (vertices [V, 3], faces [F, 3]), got shapes "
                f"{tuple(vertices.shape)} and {tuple(faces.shape)}"
            )
        offsets.append(total)
        total += vertices.shape[0]
    vertices = torch.cat([v for v, _ in meshes])
    faces = torch.cat([f.long() + offset for (_, f), offset in zip(meshes, offsets)])
    return vertices, faces


def _random_rotation(gen: torch.Generator) -> torch.Tensor:
    """A random proper rotation (det +1), float64."""
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def scene(n_faces_target: int = 200_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A procedural scene of randomly rotated, scaled and placed icospheres, tori and cubes.

    Objects of random size (a few percent of the target each, smaller towards the end) are added until fewer than
    12 faces are missing, so the face count is within 12 below ``n_faces_target``. Objects are scaled by 0.08 to
    0.3 and centred in ``[-0.65, 0.65]^3``, so the scene lies in about ``[-1, 1]^3``; they may intersect. The
    transforms are rotations with a positive scale, so faces stay outward-oriented. Deterministic for a seed.

    Args:
        n_faces_target: approximate number of faces (>= 12).
        seed: seed of the private random generator.

    Returns:
        ``(vertices [V, 3] float32, faces [F, 3] int64)``.
    """
    target = _check_int(n_faces_target, "n_faces_target", 12)
    gen = torch.Generator().manual_seed(int(seed))
    parts, total = [], 0
    while target - total >= 12:
        remaining = target - total
        budget = min(remaining, max(12, int(target * (0.02 + 0.1 * torch.rand((), generator=gen).item()))))
        kind = int(torch.randint(3, (), generator=gen))
        if kind == 0 and budget >= 20:
            level = 0
            while level < 6 and 20 * 4 ** (level + 1) <= budget:
                level += 1
            vertices, faces = icosphere(level)
        elif kind == 1 and budget >= 36:
            n_minor = min(math.isqrt(budget // 4), 48)
            vertices, faces = torus(1.0, 0.3 + 0.2 * torch.rand((), generator=gen).item(), 2 * n_minor, n_minor)
        else:
            vertices, faces = cube()
        scale = 0.08 + 0.22 * torch.rand((), generator=gen, dtype=torch.float64)
        shift = (torch.rand(3, generator=gen, dtype=torch.float64) * 2 - 1) * 0.65
        vertices = vertices.double() @ (_random_rotation(gen).T * scale) + shift
        parts.append((vertices, faces))
        total += len(faces)
    vertices, faces = merge(parts)
    return _finish(vertices, faces)
