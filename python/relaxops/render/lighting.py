"""Lighting for GenDR (docs/math/render.md §1.2): shading baked into the textures, in world space.

``light = I_a c_a + sum_d I_d c_d max(0, <n, dir_d>)`` per face (surface textures, ``n`` the face normal) or per
vertex (vertex textures, ``n`` the area-weighted vertex normal), and ``textures_out = textures * light``. ``dir`` is
used as given (not normalised). Lighting changes RGB only; the silhouette (alpha) does not depend on it.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .mesh import Mesh, _to_tensor, _vectors


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


class Lighting(nn.Module):
    """One ambient and one directional light baked into a mesh's textures (docs/math/render.md §1.2).

    ``forward(mesh)`` returns a new :class:`Mesh` with the same geometry and ``textures * light``: per face from
    the face normals for surface textures (broadcast over the ``R*R`` texels), per vertex from the vertex normals
    for vertex textures. With the defaults every colour is scaled by a factor in ``[0.5, 1]``, lit from +y.
    More directional lights can be appended to ``self.directionals``.

    Args:
        intensity_ambient: ambient intensity ``I_a``.
        color_ambient: ambient RGB ``c_a``, ``[3]`` or ``[B, 3]``.
        intensity_directionals: directional intensity ``I_d``.
        color_directionals: directional RGB ``c_d``.
        directions: direction the light comes from, ``[3]`` or ``[B, 3]`` (not normalised).
    """

    def __init__(
        self,
        intensity_ambient=0.5,
        color_ambient=(1, 1, 1),
        intensity_directionals=0.5,
        color_directionals=(1, 1, 1),
        directions=(0, 1, 0),
    ):
        super().__init__()
        self.ambient = AmbientLighting(intensity_ambient, color_ambient)
        self.directionals = nn.ModuleList([DirectionalLighting(intensity_directionals, color_directionals, directions)])

    def forward(self, mesh: Mesh) -> Mesh:
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a relaxops.render.mesh.Mesh, got {type(mesh).__name__}")
        surface = mesh.texture_type == "surface"
        normals = mesh.surface_normals if surface else mesh.vertex_normals
        light = self.ambient(torch.zeros_like(normals, dtype=mesh.textures.dtype))
        for directional in self.directionals:
            light = directional(light, normals)
        textures = mesh.textures * (light[:, :, None, :] if surface else light)
        return Mesh(mesh.vertices, mesh.faces, textures, mesh.texture_res, mesh.texture_type)
