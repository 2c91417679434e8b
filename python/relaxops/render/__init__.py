"""GenDR, the generalized differentiable mesh rasterizer (docs/math/render.md).

A mesh in world space (:class:`Mesh`) is lit (:class:`Lighting`), moved into camera space and projected
(:class:`LookAt`, :class:`Look`, :class:`Projection`), then rasterized (:func:`rasterize`, :class:`Renderer`;
meshes of different face counts in one batch: :func:`pack`):
each pixel's alpha is a T-conorm (or SoftRas' mean, ``average``) over the faces' coverage probabilities
``F(d / tau)`` for one of 18 distributions ``F`` (:mod:`relaxops.render.relaxations`), its colour a hard depth test
or a softmax over depth. :func:`render_buffers` renders depth, barycentrics, interpolated attributes and UV-mapped
textures the same way. Gradients flow to the vertices and the textures. Losses for silhouette fitting and evaluation
are in :mod:`relaxops.render.losses`, procedural meshes in :mod:`relaxops.render.shapes`.
"""

from .buffers import Buffers, mip_pyramid, render_buffers
from .camera import Look, LookAt, Projection, Transform, get_points_from_angles, look, look_at, orthogonal, perspective
from .functional import Renderer, pack, rasterize
from .io import load_obj, save_obj
from .lighting import (
    AmbientLighting,
    DirectionalLighting,
    Lighting,
    SpecularLighting,
    ambient_lighting,
    directional_lighting,
    specular_lighting,
)
from .losses import FlattenLoss, LaplacianLoss, iou_3d, iou_loss, voxelize
from .mesh import Mesh, face_normals, face_vertices, vertex_normals
from .relaxations import DISTRIBUTIONS, T_CONORMS, T_NORMS
from .shapes import cube, icosphere, merge, plane, scene, torus, uv_sphere

__all__ = [
    "rasterize",
    "pack",
    "Renderer",
    "render_buffers",
    "Buffers",
    "mip_pyramid",
    "Mesh",
    "face_vertices",
    "face_normals",
    "vertex_normals",
    "LookAt",
    "Look",
    "Projection",
    "Transform",
    "look_at",
    "look",
    "perspective",
    "orthogonal",
    "get_points_from_angles",
    "Lighting",
    "AmbientLighting",
    "DirectionalLighting",
    "SpecularLighting",
    "ambient_lighting",
    "directional_lighting",
    "specular_lighting",
    "load_obj",
    "save_obj",
    "iou_loss",
    "LaplacianLoss",
    "FlattenLoss",
    "voxelize",
    "iou_3d",
    "icosphere",
    "cube",
    "uv_sphere",
    "torus",
    "plane",
    "scene",
    "merge",
    "DISTRIBUTIONS",
    "T_CONORMS",
    "T_NORMS",
]
