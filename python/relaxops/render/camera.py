"""Camera transforms for GenDR (docs/math/render.md §1.3): view transforms, projections and their modules.

World space is right-handed with y up. Camera space is x right, y up, z forward (the depth, positive in front of
the camera); after a projection x and y are normalised device coordinates (NDC, the image is ``[-1, 1]^2``, y up)
and z stays the camera-space depth, which is what the rasterizer reads. A face whose normal
``(v1 - v0) x (v2 - v0)`` points towards the camera is clockwise on screen.

Everything is differentiable w.r.t. the vertices, the eye positions, the angles and the projection parameters;
batched parameters (``[B, 3]`` eyes, ``[B]`` angles) broadcast against a batch-1 mesh.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .mesh import Mesh, _check_positions, _to_tensor, _vectors

AXIS_EPS = 1e-5  # normalisation eps of the camera axes


def _default_like(*values) -> torch.Tensor:
    """An empty tensor with the dtype and device of the first floating tensor among ``values`` (float32 on CPU)."""
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.new_empty(0)
    return torch.zeros(0)


def get_points_from_angles(distance, elevation, azimuth, degrees: bool = True) -> torch.Tensor:
    """Eye positions on a sphere around the origin.

    ``eye = (d cos(el) sin(az), d sin(el), -d cos(el) cos(az))``: azimuth 0 and elevation 0 put the camera on the
    -z axis; positive elevation moves it up (+y).

    Args:
        distance, elevation, azimuth: numbers or tensors (broadcast together, e.g. ``[B]``).
        degrees: the angles are in degrees (else radians).

    Returns:
        ``[..., 3]`` tensor: ``[3]`` for scalars, ``[B, 3]`` for ``[B]`` inputs. Float32 when no tensor is given,
        else the dtype and device of the first floating tensor. Differentiable w.r.t. all three.
    """
    like = _default_like(distance, elevation, azimuth)
    d = _to_tensor(distance, "distance", like)
    el = _to_tensor(elevation, "elevation", like)
    az = _to_tensor(azimuth, "azimuth", like)
    if degrees:
        el, az = torch.deg2rad(el), torch.deg2rad(az)
    d, el, az = torch.broadcast_tensors(d, el, az)
    horizontal = d * torch.cos(el)
    return torch.stack([horizontal * torch.sin(az), d * torch.sin(el), -horizontal * torch.cos(az)], dim=-1)


def _rotate(vertices: torch.Tensor, eye, z_axis: torch.Tensor, up, only_rotate: bool) -> torch.Tensor:
    """``(v - eye) Rm^T`` with the rows of ``Rm`` the camera axes built from ``z_axis`` and ``up``."""
    up = _vectors(up, "up", vertices)
    z_axis = F.normalize(z_axis, dim=-1, eps=AXIS_EPS)
    x_axis = F.normalize(torch.linalg.cross(up.expand_as(z_axis), z_axis, dim=-1), dim=-1, eps=AXIS_EPS)
    y_axis = F.normalize(torch.linalg.cross(z_axis, x_axis, dim=-1), dim=-1, eps=AXIS_EPS)
    rotation = torch.stack([x_axis, y_axis, z_axis], dim=1)  # [N, 3, 3], rows = axes
    if not only_rotate:
        vertices = vertices - eye[:, None, :]
    return torch.matmul(vertices, rotation.transpose(1, 2))


def _broadcast_rows(*rows: torch.Tensor) -> list[torch.Tensor]:
    """``[N_i, 3]`` tensors broadcast to a common ``N`` (each ``N_i`` equal to it or 1)."""
    n = max(r.shape[0] for r in rows)
    if any(r.shape[0] not in (1, n) for r in rows):
        raise ValueError(
            f"batched camera parameters must agree in batch size or have 1, got {[r.shape[0] for r in rows]}"
        )
    return [r.expand(n, 3) for r in rows]


def _check_batch(vertices: torch.Tensor, n: int, name: str) -> None:
    if n not in (1, vertices.shape[0]) and vertices.shape[0] != 1:
        raise ValueError(f"{name} has batch size {n}, vertices {vertices.shape[0]}; they must agree or one be 1")


def look_at(vertices: torch.Tensor, eye, at=(0, 0, 0), up=(0, 1, 0), only_rotate: bool = False) -> torch.Tensor:
    """World to camera space for a camera at ``eye`` looking at ``at``.

    ``z = normalize(at - eye)``, ``x = normalize(up x z)``, ``y = normalize(z x x)`` (eps 1e-5), ``Rm`` has rows
    ``(x, y, z)`` and ``v_cam = (v - eye) Rm^T``.

    Args:
        vertices: ``[B, V, 3]`` floating tensor.
        eye: ``[3]`` or ``[B, 3]`` (sequence, ndarray or tensor).
        at: point looked at, ``[3]`` or ``[B, 3]``.
        up: up direction, ``[3]`` or ``[B, 3]``; must not be parallel to ``at - eye``.
        only_rotate: apply the rotation only (no translation by ``-eye``).

    Returns:
        ``[B', V, 3]`` camera-space vertices, ``B'`` the broadcast batch of ``vertices`` and the parameters.
    """
    _check_positions(vertices)
    eye, at = _broadcast_rows(_vectors(eye, "eye", vertices), _vectors(at, "at", vertices))
    _check_batch(vertices, eye.shape[0], "eye")
    return _rotate(vertices, eye, at - eye, up, only_rotate)


def look(vertices: torch.Tensor, eye, direction=(0, 0, 1), up=(0, 1, 0)) -> torch.Tensor:
    """World to camera space for a camera at ``eye`` looking along ``direction``.

    Same as :func:`look_at` with ``z = normalize(direction)``. (The original ``gendr`` had ``up=None`` here and
    crashed without it; it defaults to +y.)

    Args:
        vertices: ``[B, V, 3]`` floating tensor.
        eye: ``[3]`` or ``[B, 3]``.
        direction: viewing direction, ``[3]`` or ``[B, 3]`` (need not be normalised).
        up: up direction, ``[3]`` or ``[B, 3]``.

    Returns:
        ``[B', V, 3]`` camera-space vertices.
    """
    _check_positions(vertices)
    eye, direction = _broadcast_rows(_vectors(eye, "eye", vertices), _vectors(direction, "direction", vertices))
    _check_batch(vertices, eye.shape[0], "eye")
    return _rotate(vertices, eye, direction, up, only_rotate=False)


def _per_batch(value, name: str, vertices: torch.Tensor) -> torch.Tensor:
    """A scalar or ``[B]`` parameter as a tensor broadcastable against ``[B, V]``."""
    t = _to_tensor(value, name, vertices)
    if t.dim() > 1:
        raise ValueError(f"{name} must be a number, a 0-d tensor or a [B] tensor, got shape {tuple(t.shape)}")
    if t.dim() == 1:
        _check_batch(vertices, t.shape[0], name)
        t = t[:, None]
    return t


def perspective(vertices: torch.Tensor, angle=30.0) -> torch.Tensor:
    """Perspective projection: ``x' = x / (z tan(angle))``, ``y' = y / (z tan(angle))``, ``z' = z``.

    No epsilon: a vertex with ``z = 0`` goes to infinity, one behind the camera is mirrored (docs/math/render.md §1.4).

    Args:
        vertices: ``[B, V, 3]`` camera-space vertices.
        angle: half field of view in degrees; a number, a 0-d tensor or a ``[B]`` tensor (differentiable).

    Returns:
        ``[B', V, 3]``: NDC x, y and the depth z.
    """
    _check_positions(vertices)
    width = torch.tan(torch.deg2rad(_per_batch(angle, "angle", vertices)))
    z = vertices[..., 2]
    return torch.stack([vertices[..., 0] / (z * width), vertices[..., 1] / (z * width), z.expand_as(z * width)], dim=-1)


def orthogonal(vertices: torch.Tensor, scale=1.0) -> torch.Tensor:
    """Orthographic projection: ``x' = s x``, ``y' = s y``, ``z' = z``.

    For the scale matching a perspective camera at depth ``z0`` with half field of view ``theta``, use
    ``s = 1 / (z0 tan(theta))``.

    Args:
        vertices: ``[B, V, 3]`` camera-space vertices.
        scale: ``s``; a number, a 0-d tensor or a ``[B]`` tensor.

    Returns:
        ``[B', V, 3]``.
    """
    _check_positions(vertices)
    s = _per_batch(scale, "scale", vertices)
    z = vertices[..., 2]
    return torch.stack([vertices[..., 0] * s, vertices[..., 1] * s, z.expand_as(z * s)], dim=-1)


class Transform(nn.Module):
    """Base class of the camera transforms: ``forward(mesh)`` returns a new :class:`Mesh` whose vertices are
    ``self.transform(mesh.vertices)``, with the same faces and textures. The new mesh checks its vertices, so a
    vertex projected from depth 0 (to infinity) raises a ``ValueError`` there."""

    def transform(self, vertices: torch.Tensor) -> torch.Tensor:
        """``[B, V, 3]`` world-space vertices to ``[B', V, 3]`` screen-space (NDC x, y and depth z)."""
        raise NotImplementedError(f"{type(self).__name__}: a Transform subclass defines transform()")

    def forward(self, mesh: Mesh) -> Mesh:
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a relaxops.render.mesh.Mesh, got {type(mesh).__name__}")
        return Mesh(self.transform(mesh.vertices), mesh.faces, mesh.textures, mesh.texture_res, mesh.texture_type)


def _default_eye(viewing_angle) -> torch.Tensor:
    """``(0, 0, -(1 / tan(angle) + 1))``: the unit cube fills the view (-2.732 for 30 degrees)."""
    angle = viewing_angle.detach() if isinstance(viewing_angle, torch.Tensor) else viewing_angle
    like = _default_like(angle)
    distance = 1.0 / torch.tan(torch.deg2rad(_to_tensor(angle, "viewing_angle", like))) + 1.0
    return torch.stack([torch.zeros_like(distance), torch.zeros_like(distance), -distance], dim=-1)


class _ViewProjection(Transform):
    """A view transform followed by a perspective or orthographic projection."""

    def __init__(self, perspective: bool, viewing_angle, viewing_scale, eye):
        super().__init__()
        self.perspective = perspective
        self.viewing_angle = viewing_angle
        self.viewing_scale = viewing_scale
        self._eye = _default_eye(viewing_angle) if eye is None else eye

    def set_eyes(self, eyes) -> None:
        """Set the eye position(s): ``[3]`` or ``[B, 3]`` (sequence, ndarray or tensor)."""
        self._eye = eyes

    @property
    def eyes(self):
        """The eye position(s) as set (``[3]`` or ``[B, 3]``)."""
        return self._eye

    def view(self, vertices: torch.Tensor) -> torch.Tensor:
        """World to camera space; defined by LookAt and Look."""
        raise NotImplementedError(f"{type(self).__name__}: a view transform defines view()")

    def transform(self, vertices: torch.Tensor) -> torch.Tensor:
        vertices = self.view(vertices)
        if self.perspective:
            return perspective(vertices, self.viewing_angle)
        return orthogonal(vertices, self.viewing_scale)


class LookAt(_ViewProjection):
    """Camera at ``eye`` looking at the origin with +y up (:func:`look_at`), then :func:`perspective` or
    :func:`orthogonal`.

    Args:
        perspective: perspective projection (else orthographic).
        viewing_angle: half field of view in degrees (number or tensor, e.g. ``[B]``, differentiable).
        viewing_scale: orthographic scale.
        eye: ``[3]`` or ``[B, 3]``; default ``(0, 0, -(1/tan(viewing_angle) + 1))`` (-2.732 for 30 degrees).
    """

    def __init__(self, perspective: bool = True, viewing_angle=30, viewing_scale=1.0, eye=None):
        super().__init__(perspective, viewing_angle, viewing_scale, eye)

    def set_eyes_from_angles(self, distances, elevations, azimuths) -> None:
        """Set the eyes from distance, elevation and azimuth in degrees (:func:`get_points_from_angles`)."""
        self._eye = get_points_from_angles(distances, elevations, azimuths, degrees=True)

    def view(self, vertices: torch.Tensor) -> torch.Tensor:
        return look_at(vertices, self._eye)


class Look(_ViewProjection):
    """Camera at ``eye`` looking along ``camera_direction`` (:func:`look`), then :func:`perspective` or
    :func:`orthogonal`.

    Args:
        camera_direction: viewing direction ``[3]`` or ``[B, 3]``.
        perspective: perspective projection (else orthographic).
        viewing_angle: half field of view in degrees.
        viewing_scale: orthographic scale.
        eye: ``[3]`` or ``[B, 3]``; default ``(0, 0, -(1/tan(viewing_angle) + 1))``.
        up: up direction (default +y; the original ``gendr`` module had none and crashed).
    """

    def __init__(
        self,
        camera_direction=(0, 0, 1),
        perspective: bool = True,
        viewing_angle=30,
        viewing_scale=1.0,
        eye=None,
        up=(0, 1, 0),
    ):
        super().__init__(perspective, viewing_angle, viewing_scale, eye)
        self.camera_direction = camera_direction
        self.up = up

    def view(self, vertices: torch.Tensor) -> torch.Tensor:
        return look(vertices, self._eye, self.camera_direction, self.up)


class Projection(Transform):
    """Intrinsic camera with a ``3 x 4`` projection matrix and OpenCV-style lens distortion (docs/math/render.md §1.3).

    ``[x y z] = [v 1] P^T``; ``x_ = x / (z + 1e-5)``, ``y_ = y / (z + 1e-5)``, ``r^2 = x_^2 + y_^2``; with
    ``(k1, k2, p1, p2, k3) = dist_coeffs``::

        x__ = x_ (1 + k1 r^2 + k2 r^4 + k3 r^6) + 2 p1 x_ y_ + p2 (r^2 + 2 x_^2)
        y__ = y_ (1 + k1 r^2 + k2 r^4 + k3 r^6) + p1 (r^2 + 2 y_^2) + 2 p2 x_ y_
        out = (2 (x__ - orig_size/2) / orig_size, 2 (y__ - orig_size/2) / orig_size, z)

    Pixel coordinates are mapped to ``[-1, 1]`` without flipping y, while the rasterizer's NDC y points up: an
    image rendered through ``Projection`` is upside down relative to the pixel rows of ``P`` (the original
    ``gendr`` behaviour, kept for parity; flip the rendered image along its rows to match ``P``).

    Args:
        P: ``[B, 3, 4]`` (or ``[3, 4]``) tensor or ndarray (ndarrays stay on the CPU).
        dist_coeffs: ``[B, 5]`` or ``[5]``; default zeros (no distortion).
        orig_size: image size in pixels that ``P`` maps to.
    """

    def __init__(self, P, dist_coeffs=None, orig_size=512):
        super().__init__()
        if isinstance(P, np.ndarray):
            P = torch.from_numpy(P)
        if not isinstance(P, torch.Tensor) or not P.is_floating_point():
            raise TypeError(f"P must be a floating tensor or ndarray, got {type(P).__name__}")
        if P.dim() == 2:
            P = P.unsqueeze(0)
        if P.dim() != 3 or P.shape[1:] != (3, 4):
            raise ValueError(f"P must have shape [B, 3, 4], got {tuple(P.shape)}")
        if dist_coeffs is None:
            dist_coeffs = P.new_zeros(P.shape[0], 5)
        dist_coeffs = _to_tensor(dist_coeffs, "dist_coeffs", P)
        if dist_coeffs.dim() not in (1, 2) or dist_coeffs.shape[-1] != 5:
            raise ValueError(f"dist_coeffs must have shape [B, 5] or [5], got {tuple(dist_coeffs.shape)}")
        if (
            isinstance(orig_size, bool)
            or not isinstance(orig_size, (int, float))
            or not math.isfinite(orig_size)
            or orig_size <= 0
        ):
            raise ValueError(f"orig_size must be a finite number > 0, got {orig_size!r}")
        self.P = P
        self.dist_coeffs = dist_coeffs.reshape(-1, 5)
        self.orig_size = float(orig_size)

    def transform(self, vertices: torch.Tensor) -> torch.Tensor:
        _check_positions(vertices)
        P = self.P.to(vertices)
        _check_batch(vertices, P.shape[0], "P")
        homogeneous = torch.cat([vertices, torch.ones_like(vertices[..., :1])], dim=-1)
        x, y, z = torch.matmul(homogeneous, P.transpose(1, 2)).unbind(-1)
        x_, y_ = x / (z + 1e-5), y / (z + 1e-5)
        k1, k2, p1, p2, k3 = (c[:, None] for c in self.dist_coeffs.to(vertices).unbind(-1))
        r2 = x_ * x_ + y_ * y_
        radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 * r2 * r2
        x__ = x_ * radial + 2 * p1 * x_ * y_ + p2 * (r2 + 2 * x_ * x_)
        y__ = y_ * radial + p1 * (r2 + 2 * y_ * y_) + 2 * p2 * x_ * y_
        half = self.orig_size / 2
        return torch.stack([(x__ - half) / half, (y__ - half) / half, z], dim=-1)
