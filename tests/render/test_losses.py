"""Silhouette IoU loss, Laplacian and flatten regularisers, voxelisation and 3D IoU (docs/math/render.md §6.1, §6.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from relaxops.render import losses, shapes
from relaxops.render.losses import FlattenLoss, LaplacianLoss, iou_3d, iou_loss, voxelize
from relaxops.render.mesh import face_vertices


def test_iou_loss_hand_made_cases():
    pred = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]])
    target = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    # I = 2, 0, 1 ; U = 2, 2, 0.5*4 + 2 - 1 = 3 (each + 1e-6)
    expected = torch.tensor([1 - 2 / (2 + 1e-6), 1.0, 1 - 1 / (3 + 1e-6)])
    torch.testing.assert_close(iou_loss(pred, target, "none"), expected)
    torch.testing.assert_close(iou_loss(pred, target), expected.mean())
    torch.testing.assert_close(iou_loss(pred, target, "sum"), expected.sum())
    images = torch.rand(2, 3, 4, 4)
    assert iou_loss(images, images, "none").shape == (2,)


def test_iou_loss_gradient_and_errors():
    pred = torch.rand(2, 5, 5, dtype=torch.float64, requires_grad=True)
    target = torch.rand(2, 5, 5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda p: iou_loss(p, target), (pred,))
    with pytest.raises(ValueError, match="target"):
        iou_loss(pred, target[:1])
    with pytest.raises(ValueError, match="reduction"):
        iou_loss(pred, target, "max")
    with pytest.raises(TypeError, match="pred"):
        iou_loss(pred.long(), target)


IOU_AGGRS = (
    [("min", None), ("probabilistic", None), ("einstein", None)]
    + [("hamacher", p) for p in (0, 0.5, 3)]
    + [("frank", p) for p in (0.5, 4)]
    + [("yager", p) for p in (0.5, 1, 2)]
    + [("aczel_alsina", p) for p in (0.5, 2)]
    + [("dombi", p) for p in (0.5, 2)]
    + [("schweizer_sklar", p) for p in (-0.5, -2)]
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_iou_loss_default_is_the_product_formula_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    pred, target = torch.rand(3, 7, 5, generator=g, dtype=dtype), torch.rand(3, 7, 5, generator=g, dtype=dtype)
    product = pred * target
    old = 1 - product.sum((1, 2)) / ((pred + target - product).sum((1, 2)) + 1e-6)
    for loss in (iou_loss(pred, target, "none"), iou_loss(pred, target, "none", "probabilistic", None)):
        assert torch.equal(loss, old)
    assert torch.equal(iou_loss(pred, target), old.mean())
    # the gradient too (optimisations through the renderer are chaotic: one ulp changes where they end)
    pred.requires_grad_()
    product = pred * target
    (expected,) = torch.autograd.grad(1 - product.sum((1, 2)) / ((pred + target - product).sum((1, 2)) + 1e-6), pred,
                                      torch.ones(3, dtype=dtype))  # fmt: skip
    (grad,) = torch.autograd.grad(iou_loss(pred, target, "sum"), pred)
    assert torch.equal(grad, expected)


@pytest.mark.parametrize("aggr,p", IOU_AGGRS)
def test_iou_loss_of_binary_masks_is_the_exact_iou(aggr, p):
    g = torch.Generator().manual_seed(1)
    pred = (torch.rand(4, 9, 11, generator=g) < 0.4).double()
    target = (torch.rand(4, 9, 11, generator=g) < 0.6).double()
    inter = (pred.bool() & target.bool()).sum((1, 2)).double()
    union = (pred.bool() | target.bool()).sum((1, 2)).double()
    torch.testing.assert_close(iou_loss(pred, target, "none", aggr, p), 1 - inter / (union + 1e-6), rtol=0, atol=1e-12)


def test_iou_loss_hand_values_of_other_t_norms():
    pred = torch.tensor([[0.5, 0.5, 1.0, 0.0]], dtype=torch.float64)
    target = torch.tensor([[0.5, 1.0, 0.25, 0.0]], dtype=torch.float64)
    # min / max: I = 0.5 + 0.5 + 0.25, U = 0.5 + 1 + 1; Lukasiewicz (yager 1): I = max(0, a + b - 1) summed = 0.75,
    # U = min(1, a + b) summed = 3; einstein: I = 0.25 / 1.25 + 0.5 + 0.25, U = 1 / 1.25 + 1 + 1
    for aggr, p, inter, union in (
        ("min", None, 1.25, 2.5),
        ("yager", 1, 0.75, 3.0),
        ("einstein", None, 0.95, 2.8),
        ("hamacher", 2, 0.95, 2.8),
    ):
        want = torch.tensor(1 - inter / (union + 1e-6), dtype=torch.float64)
        torch.testing.assert_close(iou_loss(pred, target, "sum", aggr, p), want, rtol=0, atol=1e-14)
    # a T-norm below the product gives a smaller intersection and a larger union: a larger loss
    losses = [iou_loss(pred, target, aggr=a, aggr_p=p).item() for a, p in (("min", None), ("probabilistic", None))]
    assert losses[0] < losses[1] < iou_loss(pred, target, aggr="yager", aggr_p=1).item()


def test_iou_loss_gradients_and_errors_of_the_t_norms():
    pred = (torch.rand(2, 4, 5, dtype=torch.float64) * 0.9 + 0.05).requires_grad_()
    target = torch.rand(2, 4, 5, dtype=torch.float64) * 0.9 + 0.05
    for aggr, p in (("einstein", None), ("hamacher", 0.5), ("frank", 3), ("aczel_alsina", 2), ("dombi", 0.7)):
        assert torch.autograd.gradcheck(lambda x, a=aggr, q=p: iou_loss(x, target, "none", a, q), (pred,))
    for bad in ("max", "hard", "average", 2, None):
        with pytest.raises(ValueError, match="aggr must be"):
            iou_loss(pred, target, aggr=bad)
    for aggr, p in (("yager", None), ("frank", 1), ("schweizer_sklar", 0.5), ("dombi", float("inf"))):
        with pytest.raises(ValueError, match="aggr_p must be"):
            iou_loss(pred, target, aggr=aggr, aggr_p=p)
    with pytest.raises(TypeError, match="aggr_p"):
        iou_loss(pred, target, aggr="yager", aggr_p="2")


def dense_laplacian(num_vertices: int, faces: torch.Tensor) -> torch.Tensor:
    L = torch.zeros(num_vertices, num_vertices, dtype=torch.float64)
    for a, b in ((0, 1), (1, 2), (2, 0)):
        L[faces[:, a], faces[:, b]] = -1
        L[faces[:, b], faces[:, a]] = -1
    L[range(num_vertices), range(num_vertices)] = -L.sum(1)
    return L / L.diagonal()[:, None]


def test_laplacian_matches_a_dense_reference():
    vertices, faces = shapes.icosphere(1)
    x = torch.randn(3, len(vertices), 3, dtype=torch.float64)
    loss = LaplacianLoss(vertices, faces)
    expected = (dense_laplacian(len(vertices), faces) @ x).pow(2).sum((1, 2))
    torch.testing.assert_close(loss(x), expected)
    torch.testing.assert_close(LaplacianLoss(vertices, faces, average=True)(x), expected.sum() / 3)
    # a constant mesh has no Laplacian
    assert loss(torch.ones(2, len(vertices), 3)).abs().max() < 1e-6
    x = x[:1, :].clone().requires_grad_()
    assert torch.autograd.gradcheck(loss, (x,))


def test_laplacian_scales_and_ignores_isolated_vertices():
    vertices, faces = shapes.icosphere(6)  # 40962 vertices: no dense V x V matrix
    loss = LaplacianLoss(vertices, faces)
    assert loss.rows.numel() == 2 * (len(vertices) + len(faces) - 2)
    assert torch.isfinite(loss(vertices[None])).all()
    small = LaplacianLoss(torch.zeros(5, 3), torch.tensor([[0, 1, 2]]))
    x = torch.randn(1, 5, 3)
    x[0, :3] = 1.0
    assert small(x).item() == 0.0  # vertices 3 and 4 are in no face
    with pytest.raises(ValueError, match="faces"):
        LaplacianLoss(torch.zeros(2, 3), torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="x"):
        small(torch.randn(1, 4, 3))


def flatten_reference(vertices: torch.Tensor, faces: torch.Tensor, eps=1e-6) -> torch.Tensor:
    """docs/math/render.md §6.1 literally, edge by edge, over the interior edges of all three face sides."""
    sharing = {}
    for face in faces.tolist():
        for k in range(3):
            edge = tuple(sorted((face[k], face[(k + 1) % 3])))
            sharing.setdefault(edge, []).append(face[(k + 2) % 3])
    total = torch.zeros(vertices.shape[0], dtype=vertices.dtype)
    for (i0, i1), opposite in sharing.items():
        if len(opposite) != 2:
            continue
        v0, v1 = vertices[:, i0], vertices[:, i1]
        a = v1 - v0
        hs = []
        for i in opposite:
            b = vertices[:, i] - v0
            ab = (a * b).sum(-1)
            cos = ab / ((a.pow(2).sum(-1) + eps).sqrt() * (b.pow(2).sum(-1) + eps).sqrt() + eps)
            sin = (1 - cos**2 + eps).sqrt()
            hs.append((b - a * (ab / (a.pow(2).sum(-1) + eps))[:, None], (b.pow(2).sum(-1) + eps).sqrt() * sin))
        cos_dihedral = (hs[0][0] * hs[1][0]).sum(-1) / (hs[0][1] * hs[1][1] + eps)
        total = total + (cos_dihedral + 1) ** 2
    return total


def test_flatten_loss_matches_the_spec_formula():
    vertices, faces = shapes.icosphere(1)
    x = vertices[None].double() + 0.05 * torch.randn(2, len(vertices), 3, dtype=torch.float64)
    loss = FlattenLoss(faces)
    assert loss.edges.shape == (120, 2)
    torch.testing.assert_close(loss(x), flatten_reference(x, faces))
    torch.testing.assert_close(FlattenLoss(faces, average=True)(x), flatten_reference(x, faces).mean())
    x = x[:1].clone().requires_grad_()
    assert torch.autograd.gradcheck(loss, (x,))


def test_flatten_loss_flat_folded_and_cube():
    vertices, faces = shapes.plane(4, 3)
    loss = FlattenLoss(faces)
    # a 4 x 3 grid: 24 faces, 72 face sides, 14 of them on the boundary, the others paired
    assert loss.edges.shape == ((72 - 14) // 2, 2)
    assert loss(vertices[None]).item() < 1e-6
    folded = vertices.clone()
    folded[:, 2] = folded[:, 0].abs()  # fold along x = 0
    assert loss(folded[None]).item() > 0.1

    vertices, faces = shapes.cube()
    loss = FlattenLoss(faces)
    assert loss.edges.shape == (18, 2)  # V + F - 2
    # 12 cube edges at 90 degrees give (0 + 1)^2 each, the 6 diagonals are flat
    torch.testing.assert_close(loss(vertices[None]), torch.tensor([12.0]), atol=1e-4, rtol=0)


def test_flatten_loss_on_a_single_triangle_is_empty():
    loss = FlattenLoss(np.array([[0, 1, 2]]))
    assert loss.edges.shape == (0, 2)
    assert loss(torch.randn(2, 3, 3)).tolist() == [0.0, 0.0]
    with pytest.raises(TypeError, match="faces"):
        FlattenLoss(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="faces"):
        FlattenLoss(torch.zeros(1, 4, dtype=torch.long))


def voxelize_reference(face_vertices: torch.Tensor, size: int) -> torch.Tensor:
    """The original CUDA kernels written out as loops (one mesh, small sizes)."""
    g = ((face_vertices.double() * size / (size - 1) + 0.5) * size).tolist()
    vox = np.zeros((size, size, size), dtype=bool)
    for depth in range(3):
        p_axis, q_axis = [a for a in range(3) if a != depth]
        for p in range(size):
            for q in range(size):
                for face in g:
                    (p0, q0, d0), (p1, q1, d1), (p2, q2, d2) = [(c[p_axis], c[q_axis], c[depth]) for c in face]
                    det = (p1 - p0) * (q2 - q0) - (p2 - p0) * (q1 - q0)
                    if det == 0:
                        continue
                    t1 = ((p - p0) * (q2 - q0) - (p2 - p0) * (q - q0)) / det
                    t2 = ((p1 - p0) * (q - q0) - (p - p0) * (q1 - q0)) / det
                    if t1 < 0 or t2 < 0 or t1 + t2 > 1:
                        continue
                    k = math.floor(t1 * (d1 - d0) + t2 * (d2 - d0) + d0)
                    for pi, qi in ((p, q), (p - 1, q), (p, q - 1), (p - 1, q - 1)):
                        if 0 <= pi < size and 0 <= qi < size and 0 <= k < size:
                            index = [0, 0, 0]
                            index[p_axis], index[q_axis], index[depth] = pi, qi, k
                            vox[tuple(index)] = True
    for face in g:
        for corner in face:
            cell = [math.floor(c) for c in corner]
            if all(0 <= c < size for c in cell):
                vox[tuple(cell)] = True
    visible = ~vox
    interior = np.zeros_like(vox)
    interior[1:-1, 1:-1, 1:-1] = True
    visible[interior] = False
    while True:
        grown = visible.copy()
        for axis in range(3):
            for shift in (1, -1):
                grown |= np.roll(visible, shift, axis) & interior & ~vox
        if (grown == visible).all():
            return torch.from_numpy(~visible)
        visible = grown


def test_voxelize_matches_the_original_kernels(monkeypatch):
    vertices, faces = shapes.icosphere(1)
    gen = torch.Generator().manual_seed(1)
    meshes = [
        face_vertices(vertices[None] * 0.4, faces[None]),
        face_vertices((shapes.cube()[0] * 0.3 + 0.05)[None], shapes.cube()[1][None]),
        torch.rand(1, 6, 3, 3, generator=gen, dtype=torch.float64) - 0.5,  # a triangle soup, partly outside
    ]
    for fv in meshes:
        expected = voxelize_reference(fv[0], 10)
        assert torch.equal(voxelize(fv, 10)[0], expected)
    second = meshes[0].double() * 0.7 + 0.1
    batched = voxelize(torch.cat([meshes[0].double(), second]), 10)
    assert torch.equal(batched[0], voxelize_reference(meshes[0][0], 10))
    assert torch.equal(batched[1], voxelize_reference(second[0], 10))
    # faces processed in many small chunks give the same grid
    monkeypatch.setattr(losses, "_VOXEL_POINTS_PER_CHUNK", 5)
    assert torch.equal(voxelize(torch.cat([meshes[0].double(), second]), 10), batched)


def test_voxelize_fills_solids():
    vertices, faces = shapes.cube()
    voxels = voxelize(face_vertices(vertices[None] * 0.4, faces[None]), 32)[0]
    occupied = voxels.nonzero()
    lo, hi = occupied.min(0).values, occupied.max(0).values
    # g = 16 +- 0.4 * 32 / 31 * 32 = 16 +- 13.2: cells 2..29 (the -1 neighbours of lattice points included)
    assert lo.tolist() == [2, 2, 2] and hi.tolist() == [29, 29, 29]
    assert int(voxels.sum()) == 28**3  # a solid block

    vertices, faces = shapes.icosphere(4)
    for size, radius in ((64, 0.45), (32, 0.4)):
        voxels = voxelize(face_vertices(vertices[None] * radius, faces[None]), size)[0]
        r = radius * size / (size - 1) * size
        count = int(voxels.sum())
        # the kernel marks the cells around every lattice point it hits, thickening the surface by <= 1 cell
        ball = 4 / 3 * math.pi * r**3
        assert abs(count / (4 / 3 * math.pi * (r + 0.5) ** 3) - 1) < 0.1
        if size == 64:
            assert abs(count / ball - 1) < 0.1
        centres = torch.stack(torch.meshgrid(*[torch.arange(size) + 0.5] * 3, indexing="ij"), -1) - size / 2
        dist = centres.norm(dim=-1)
        assert voxels[dist < r - 1].all() and not voxels[dist > r + 1.5].any()


def test_voxelize_open_surface_is_not_filled_and_errors():
    vertices, faces = shapes.plane(2, 2)
    voxels = voxelize(face_vertices(vertices[None] * 0.3, faces[None]), 16)
    assert 0 < int(voxels.sum()) < 16 * 16 * 3
    with pytest.raises(ValueError, match="face_vertices"):
        voxelize(torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="face_vertices"):
        voxelize(torch.full((1, 1, 3, 3), float("nan")))
    with pytest.raises(ValueError, match="voxel_size"):
        voxelize(torch.zeros(1, 1, 3, 3), 1)


def test_iou_3d():
    vertices, faces = shapes.icosphere(2)
    a = voxelize(face_vertices(vertices[None] * 0.4, faces[None]), 16)
    b = voxelize(face_vertices(vertices[None] * 0.3, faces[None]), 16)
    assert iou_3d(a, a).tolist() == [1.0]
    torch.testing.assert_close(iou_3d(a, b), b.sum((1, 2, 3)).float() / a.sum((1, 2, 3)).float())
    empty = torch.zeros(2, 4, 4, 4, dtype=torch.bool)
    full = torch.ones(2, 4, 4, 4)
    assert iou_3d(empty, full).tolist() == [0.0, 0.0] and iou_3d(empty, empty).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="voxels_b"):
        iou_3d(empty, full[:1])
