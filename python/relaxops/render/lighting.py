"""Lighting for GenDR (docs/math/render.md §1.2): shading baked into the textures, in world space.

``light = I_a c_a + sum_d I_d c_d max(0, <n, dir_d>)`` per face (surface textures, ``n`` the face normal) or per
vertex (vertex textures, ``n`` the area-weighted vertex normal), and ``textures_out = textures * light``. ``dir`` is
used as given (not normalised). An optional Phong highlight ``spec = I_s c_s max(0, <r, v>)^shininess`` (``l`` the
normalised light direction, ``r = 2 <n, l> n - l``, ``v`` the unit vector to the eye, zero where ``<n, l> <= 0``)
is added after the albedo: ``textures_out = textures * light + spec``. Lighting changes RGB only; the silhouette
(alpha) does not depend on it.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import _checks
from .mesh import Mesh, _batch_size, _to_tensor, _vectors


def _check_light(light: torch.Tensor, name: str = "light") -> None:
    if not isinstance(light, torch.Tensor) or not light.is_floating_point():
        raise TypeError(f"{name} must be a floating torch.Tensor, got {type(light).__name__}")
    if light.dim() != 3 or light.shape[2] != 3:
        raise ValueError(f"{name} must have shape [B, N, 3], got {tuple(light.shape)}")


def _intensity(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """A number, 0-d or ``[B]`` intensity as a tensor broadcastable against ``[B, N, 3]``."""
    t = _to_tensor(value, name, like)
    if t.dim() > 1:
        raise ValueError(f"{name} must be a number, a 0-d tensor or a [B] tensor, got shape {tuple(t.shape)}")
    return t.reshape(-1, 1, 1)


def ambient_lighting(light: torch.Tensor, intensity=0.5, color=(1, 1, 1)) -> torch.Tensor:
    """Add an ambient light: ``light + intensity * color``.

    Args:
        light: ``[B, N, 3]`` accumulated RGB light per face or vertex.
        intensity: number, 0-d or ``[B]`` tensor.
        color: RGB ``[3]`` or ``[B, 3]``.

    Returns:
        ``[B, N, 3]`` (a new tensor; ``light`` is not modified).
    """
    _check_light(light)
    color = _vectors(color, "color", light)
    return light + _intensity(intensity, "intensity", light) * color[:, None, :]


def directional_lighting(
    light: torch.Tensor, normals: torch.Tensor, intensity=0.5, color=(1, 1, 1), direction=(0, 1, 0)
) -> torch.Tensor:
    """Add a directional light: ``light + intensity * color * max(0, <normals, direction>)``.

    Args:
        light: ``[B, N, 3]`` accumulated RGB light.
        normals: ``[B, N, 3]`` unit normals of the faces or vertices.
        intensity: number, 0-d or ``[B]`` tensor.
        color: RGB ``[3]`` or ``[B, 3]``.
        direction: ``[3]`` or ``[B, 3]``, the direction the light comes from, used as given (not normalised).

    Returns:
        ``[B, N, 3]`` (a new tensor).
    """
    _check_light(light)
    _check_light(normals, "normals")
    color = _vectors(color, "color", light)
    direction = _vectors(direction, "direction", light)
    cosine = torch.relu((normals * direction[:, None, :]).sum(-1, keepdim=True))
    return light + _intensity(intensity, "intensity", light) * color[:, None, :] * cosine


def specular_lighting(
    light: torch.Tensor,
    normals: torch.Tensor,
    positions: torch.Tensor,
    eye,
    intensity=0.5,
    color=(1, 1, 1),
    direction=(0, 1, 0),
    shininess=64,
) -> torch.Tensor:
    """Add a Phong highlight: ``light + intensity * color * max(0, <r, v>)^shininess`` where ``<n, l> > 0``, else
    ``light``.

    ``l = direction / |direction|`` (normalised here, unlike the diffuse term), ``r = 2 <n, l> n - l`` the mirrored
    light direction, ``v = (eye - position) / |eye - position|``. The highlight is white light reflected by the
    surface: :class:`Lighting` adds it after the albedo multiplication. Differentiable w.r.t. every tensor argument
    (the power only where ``<r, v> > 0``, so its gradient stays finite for ``shininess < 1``).

    Args:
        light: ``[B, N, 3]`` accumulated RGB highlight.
        normals: ``[B, N, 3]`` unit normals of the faces or vertices.
        positions: ``[B, N, 3]`` world positions of the faces (centroids) or vertices.
        eye: the viewer, ``[3]`` or ``[B, 3]`` in world space.
        intensity: number, 0-d or ``[B]`` tensor.
        color: RGB ``[3]`` or ``[B, 3]``.
        direction: ``[3]`` or ``[B, 3]``, the direction the light comes from.
        shininess: the Phong exponent, number, 0-d or ``[B]`` tensor, finite and > 0.

    Returns:
        ``[B, N, 3]`` (a new tensor).
    """
    _check_light(light)
    _check_light(normals, "normals")
    _check_light(positions, "positions")
    if positions.shape[1] != normals.shape[1]:
        raise ValueError(
            f"positions must have the {normals.shape[1]} rows of normals, got shape {tuple(positions.shape)}"
        )
    if eye is None:
        raise ValueError("eye (the viewer's world-space position, [3] or [B, 3]) is required for a specular light")
    eye = _vectors(eye, "eye", light)
    color = _vectors(color, "color", light)
    direction = _vectors(direction, "direction", light)
    exponent = _intensity(shininess, "shininess", light)
    if not _checks.on_host(exponent):
        _checks.assert_on_device(torch.isfinite(exponent) & (exponent > 0), "shininess must be finite and > 0")
    elif not bool((torch.isfinite(exponent) & (exponent > 0)).all()):
        raise ValueError(f"shininess must be finite and > 0, got {shininess!r}")
    sizes = {"light": light.shape[0], "normals": normals.shape[0], "positions": positions.shape[0]}
    _batch_size(sizes | {"eye": eye.shape[0], "color": color.shape[0], "direction": direction.shape[0]})
    to_light = F.normalize(direction, dim=-1)[:, None, :]
    cos_light = (normals * to_light).sum(-1, keepdim=True)
    r = 2 * cos_light * normals - to_light
    v = F.normalize(eye[:, None, :] - positions, dim=-1)
    cos_view = (r * v).sum(-1, keepdim=True)
    lit = (cos_light > 0) & (cos_view > 0)
    power = torch.where(lit, torch.where(lit, cos_view, torch.ones_like(cos_view)) ** exponent, 0)
    return light + _intensity(intensity, "intensity", light) * color[:, None, :] * power


class AmbientLighting(nn.Module):
    """:func:`ambient_lighting` as a module: ``forward(light) -> light + intensity * color``."""

    def __init__(self, intensity=0.5, color=(1, 1, 1)):
        super().__init__()
        self.intensity = intensity
        self.color = color

    def forward(self, light: torch.Tensor) -> torch.Tensor:
        return ambient_lighting(light, self.intensity, self.color)


class DirectionalLighting(nn.Module):
    """:func:`directional_lighting` as a module: ``forward(light, normals)``."""

    def __init__(self, intensity=0.5, color=(1, 1, 1), direction=(0, 1, 0)):
        super().__init__()
        self.intensity = intensity
        self.color = color
        self.direction = direction

    def forward(self, light: torch.Tensor, normals: torch.Tensor) -> torch.Tensor:
        return directional_lighting(light, normals, self.intensity, self.color, self.direction)


class SpecularLighting(nn.Module):
    """:func:`specular_lighting` as a module: ``forward(light, normals, positions, eye)``."""

    def __init__(self, intensity=0.5, color=(1, 1, 1), direction=(0, 1, 0), shininess=64):
        super().__init__()
        self.intensity = intensity
        self.color = color
        self.direction = direction
        self.shininess = shininess

    def forward(self, light: torch.Tensor, normals: torch.Tensor, positions: torch.Tensor, eye) -> torch.Tensor:
        return specular_lighting(
            light, normals, positions, eye, self.intensity, self.color, self.direction, self.shininess
        )


class Lighting(nn.Module):
    """One ambient and one directional light baked into a mesh's textures (docs/math/render.md §1.2), and an optional
    Phong highlight.

    ``forward(mesh, eye=None)`` returns a new :class:`Mesh` with the same geometry and ``textures * light + spec``:
    per face from the face normals (and centroids) for surface textures (broadcast over the ``R*R`` texels), per
    vertex from the vertex normals (and positions) for vertex textures. With the defaults every colour is scaled by a
    factor in ``[0.5, 1]``, lit from +y, and there is no highlight. More directional lights can be appended to
    ``self.directionals``; ``self.specular`` is one :class:`SpecularLighting` along ``directions``.

    The highlight depends on the viewer: pass the camera's eye, e.g. ``renderer(camera(lighting(mesh,
    eye=camera.eyes)))`` with a :class:`relaxops.render.LookAt` ``camera`` (a ``[B, 3]`` eye lights a batch-1 mesh
    once per eye). ``forward``'s ``eye`` overrides the one given here.

    Args:
        intensity_ambient: ambient intensity ``I_a``.
        color_ambient: ambient RGB ``c_a``, ``[3]`` or ``[B, 3]``.
        intensity_directionals: directional intensity ``I_d``.
        color_directionals: directional RGB ``c_d``.
        directions: direction the light comes from, ``[3]`` or ``[B, 3]`` (not normalised for the diffuse term).
        intensity_specular: highlight intensity ``I_s``; the number 0 (default) skips the highlight (and ``eye`` is
            not needed), anything else (a tensor too) needs ``eye``.
        color_specular: highlight RGB ``c_s``.
        shininess: the Phong exponent, > 0.
        eye: the viewer's world position, ``[3]`` or ``[B, 3]``, or ``None``.
    """

    def __init__(
        self,
        intensity_ambient=0.5,
        color_ambient=(1, 1, 1),
        intensity_directionals=0.5,
        color_directionals=(1, 1, 1),
        directions=(0, 1, 0),
        intensity_specular=0,
        color_specular=(1, 1, 1),
        shininess=64,
        eye=None,
    ):
        super().__init__()
        self.ambient = AmbientLighting(intensity_ambient, color_ambient)
        self.directionals = nn.ModuleList([DirectionalLighting(intensity_directionals, color_directionals, directions)])
        self.specular = SpecularLighting(intensity_specular, color_specular, directions, shininess)
        self.eye = eye

    def forward(self, mesh: Mesh, eye=None) -> Mesh:
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a relaxops.render.mesh.Mesh, got {type(mesh).__name__}")
        surface = mesh.texture_type == "surface"
        normals = mesh.surface_normals if surface else mesh.vertex_normals
        light = self.ambient(torch.zeros_like(normals, dtype=mesh.textures.dtype))
        for directional in self.directionals:
            light = directional(light, normals)
        textures = mesh.textures * (light[:, :, None, :] if surface else light)
        intensity = self.specular.intensity
        if isinstance(intensity, torch.Tensor) or not (isinstance(intensity, numbers.Real) and intensity == 0):
            eye = self.eye if eye is None else eye
            if eye is None:
                raise ValueError(
                    "eye (the viewer's world-space position, [3] or [B, 3]) is required when intensity_specular != 0"
                )
            positions = mesh.face_vertices.mean(2) if surface else mesh.vertices
            spec = self.specular(torch.zeros_like(light), normals, positions, eye)
            textures = textures + (spec[:, :, None, :] if surface else spec)
        return Mesh(mesh.vertices, mesh.faces, textures, mesh.texture_res, mesh.texture_type)
