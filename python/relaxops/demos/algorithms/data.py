"""Generated data of the four algorithmic-supervision tasks (docs/math/algorithms.md §4), with the exact algorithms
that label it: scikit-learn's 8x8 digit images for numbers and character strings, Warcraft-like terrain maps drawn
here with Dijkstra's shortest paths, deformed spheres for silhouettes. Nothing is downloaded."""

from __future__ import annotations

import heapq
import math
import time
from typing import NamedTuple

import torch
import torch.nn.functional as nnf

# --- digit images ---------------------------------------------------------------------------------------------------


class DigitPool:
    """Digit images grouped by class, to draw images of given classes from."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images = images  # [m, 8, 8] in [0, 1]
        self.labels = labels  # [m] int64
        self.by_class = [torch.nonzero(labels == c).flatten() for c in range(10)]

    def draw(self, classes: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One random image of each requested class: ``classes [*shape]`` -> ``[*shape, 8, 8]``."""
        pick = torch.empty_like(classes)
        for c in range(10):
            mask = classes == c
            if mask.any():
                pool = self.by_class[c]
                pick[mask] = pool[torch.randint(len(pool), (int(mask.sum()),), generator=gen)]
        return self.images[pick]


def load_digit_pools(seed: int = 0) -> tuple[DigitPool, DigitPool]:
    """scikit-learn's digits (1797 images of 8x8 pixels, scaled to [0, 1]) split 80/20 by image into a train and a
    test pool: no image is in both."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(images))
    return DigitPool(images[perm[:cut]], labels[perm[:cut]]), DigitPool(images[perm[cut:]], labels[perm[cut:]])


# --- four-digit numbers (sorting, docs/math/algorithms.md §4.1) -------------------------------------------------------


def distinct_numbers(sets: int, n: int, digits: int, gen: torch.Generator) -> torch.Tensor:
    """``[sets, n]`` int64: n distinct numbers in ``[0, 10**digits)`` per set, uniformly."""
    high = 10**digits
    out = torch.randint(high, (sets, n), generator=gen)
    while True:  # redraw the sets with a repeated number (rare for n << 10**digits)
        s = out.sort(-1).values
        bad = (s[:, 1:] == s[:, :-1]).any(-1)
        if not bad.any():
            return out
        out[bad] = torch.randint(high, (int(bad.sum()), n), generator=gen)


def number_images(pool: DigitPool, numbers: torch.Tensor, digits: int, gen: torch.Generator) -> torch.Tensor:
    """Images of ``numbers [*shape]`` written with ``digits`` digits (leading zeros kept), most significant digit on
    the left: ``[*shape, 1, 8, 8 * digits]``, each digit a random image of its class from ``pool``."""
    places = 10 ** torch.arange(digits - 1, -1, -1)  # [digits]
    classes = numbers[..., None] // places % 10  # [*shape, digits]
    tiles = pool.draw(classes, gen)  # [*shape, digits, 8, 8]
    return torch.cat(tiles.unbind(-3), dim=-1).unsqueeze(-3)


# --- Warcraft-like maps (shortest path, docs/math/algorithms.md §4.2) -------------------------------------------------


class Terrain(NamedTuple):
    name: str
    cost: float  # node weight of a cell of this terrain (before its per-cell variation)
    colour: tuple[float, float, float]  # RGB in [0, 1]


# Node weights of the five terrains (the kinds of tile of the Warcraft maps of docs/math/algorithms.md §4.2, with costs
# of that scale).
TERRAINS = (
    Terrain("road", 0.8, (0.78, 0.68, 0.46)),
    Terrain("grass", 1.2, (0.36, 0.62, 0.26)),
    Terrain("forest", 5.3, (0.10, 0.36, 0.14)),
    Terrain("hills", 7.7, (0.52, 0.40, 0.27)),
    Terrain("water", 9.2, (0.16, 0.32, 0.72)),
)
COST_VARIATION = 0.15  # a cell's cost is its terrain's times (1 + COST_VARIATION * u), u ~ U[0, 1), drawn per cell
SHADE = 0.35  # ... and its colour is darkened by the factor (1 - SHADE * u): the variation is visible
PIXEL_NOISE = 0.04  # std of the Gaussian noise added to every pixel


class Maps(NamedTuple):
    images: torch.Tensor  # [count, 3, size * tile, size * tile] float32 RGB
    terrain: torch.Tensor  # [count, size, size] int64 index into TERRAINS
    costs: torch.Tensor  # [count, size, size] float32 node weights (positive)
    paths: torch.Tensor  # [count, size, size] float32 0/1: the shortest path from the top-left to the bottom-right


def _textures(tile: int) -> torch.Tensor:
    """``[len(TERRAINS), tile, tile]`` brightness patterns in about [0.8, 1.15]: road streaks, grass speckle,
    forest tree crowns, diagonal hill ridges, water waves."""
    y, x = torch.meshgrid(
        torch.arange(tile, dtype=torch.float32), torch.arange(tile, dtype=torch.float32), indexing="ij"
    )
    speckle = torch.rand(tile, tile, generator=torch.Generator().manual_seed(1234))
    w = 2 * math.pi / tile
    return torch.stack(
        [
            1 + 0.08 * torch.cos(2 * w * y),  # road: horizontal streaks
            0.9 + 0.2 * speckle,  # grass
            0.8 + 0.35 * torch.cos(2 * w * x).clamp_min(0) * torch.cos(2 * w * y).clamp_min(0),  # forest: crowns
            1 + 0.15 * torch.sin(w * (x + y)),  # hills: diagonal ridges
            1 + 0.12 * torch.sin(2 * w * y + 0.8 * torch.sin(w * x)),  # water: waves
        ]
    )


def warcraft_maps(count: int, gen: torch.Generator, size: int = 12, tile: int = 8) -> Maps:
    """``count`` random terrain maps of ``size x size`` cells with known costs, rendered into RGB images of
    ``tile x tile`` pixels per cell (per-terrain colour and texture, per-cell shade, pixel noise), and the
    shortest path of each (Dijkstra on the node weights, 8-neighbourhood, top-left to bottom-right cell).

    The layout comes from two smooth random fields (elevation: water low, hills high; vegetation: forest high,
    road low, grass between), so terrains form regions as on real maps. Every cell's cost varies continuously
    within its terrain (``COST_VARIATION``), so shortest paths are unique with probability one.
    """

    def smooth_field():
        coarse = torch.randn(count, 1, 4, 4, generator=gen)
        fine = nnf.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)[:, 0]
        return fine + 0.35 * torch.randn(count, size, size, generator=gen)

    elevation, vegetation = smooth_field(), smooth_field()
    terrain = torch.full((count, size, size), 1, dtype=torch.int64)  # grass
    terrain[vegetation < -0.8] = 0  # road
    terrain[vegetation > 0.6] = 2  # forest
    terrain[elevation > 0.9] = 3  # hills
    terrain[elevation < -1.0] = 4  # water
    u = torch.rand(count, size, size, generator=gen)
    base = torch.tensor([t.cost for t in TERRAINS])
    costs = base[terrain] * (1 + COST_VARIATION * u)

    colours = torch.tensor([t.colour for t in TERRAINS])  # [T, 3]
    textures = _textures(tile)  # [T, tile, tile]
    # cell (i, j) covers pixels [i*tile, (i+1)*tile) x [j*tile, (j+1)*tile); textures shifted per cell
    shift = torch.randint(tile, (count, size, size, 2), generator=gen)
    r = torch.arange(tile)
    rows = (r[None, None, None, :] + shift[..., :1]) % tile  # [count, size, size, tile]
    cols = (r[None, None, None, :] + shift[..., 1:]) % tile
    pattern = textures[terrain[..., None, None], rows[..., :, None], cols[..., None, :]]  # [count, size, size, t, t]
    shade = (1 - SHADE * u)[..., None, None] * pattern
    cells = colours[terrain].permute(0, 3, 1, 2)[..., None, None] * shade[:, None]  # [count, 3, size, size, t, t]
    images = cells.permute(0, 1, 2, 4, 3, 5).reshape(count, 3, size * tile, size * tile)
    images = (images + PIXEL_NOISE * torch.randn(images.shape, generator=gen)).clamp(0, 1)
    paths = torch.stack([dijkstra(c)[0] for c in costs]).float()
    return Maps(images, terrain, costs.float(), paths)


NEIGHBOURS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def dijkstra(cost: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Shortest path on a grid with node weights: ``cost [H, W]`` (non-negative) -> (``path [H, W]`` bool, its
    cost). Moves to the 8 neighbours; a path's cost is the sum of the weights of its cells, both ends included;
    from the top-left cell (0, 0) to the bottom-right cell (H-1, W-1). Ties go to the predecessor found first."""
    c = cost.tolist()
    H, W = len(c), len(c[0])
    dist = [[math.inf] * W for _ in range(H)]
    prev = [[None] * W for _ in range(H)]
    dist[0][0] = c[0][0]
    heap = [(c[0][0], 0, 0)]
    while heap:
        d, y, x = heapq.heappop(heap)
        if d > dist[y][x]:
            continue
        if (y, x) == (H - 1, W - 1):
            break
        for dy, dx in NEIGHBOURS:
            v, u = y + dy, x + dx
            if 0 <= v < H and 0 <= u < W and d + c[v][u] < dist[v][u]:
                dist[v][u] = d + c[v][u]
                prev[v][u] = (y, x)
                heapq.heappush(heap, (dist[v][u], v, u))
    path = torch.zeros(H, W, dtype=torch.bool)
    node = (H - 1, W - 1)
    while node is not None:
        path[node] = True
        node = prev[node[0]][node[1]]
    return path, dist[H - 1][W - 1]


# --- character strings with edits (Levenshtein distance, docs/math/algorithms.md §4.4) --------------------------------


def levenshtein(a, b) -> int:
    """The edit distance (insertions, deletions, substitutions, each 1) of two sequences."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        diag, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (ca != cb))
    return row[-1]


EDITS = (2, 3, 4)  # the number of insertions and, independently, of deletions: uniform over these


def edited_strings(batch: int, length: int, letters: int, gen: torch.Generator):
    """Pairs of random strings over ``letters`` letters: ``a`` uniform of ``length``, ``b`` made from ``a`` by
    ``i`` insertions of random letters at random places and ``d`` deletions of random letters, ``i`` and ``d``
    independent and uniform over EDITS, in random order (docs/math/algorithms.md §4.4).

    All pairs of a batch share ``i - d`` (so that the ``b`` of a batch have one length): ``i - d`` is drawn from
    its distribution once per batch, then ``(i, d)`` per pair uniformly among the pairs with that difference,
    which leaves each pair's ``(i, d)`` uniform over ``EDITS x EDITS``.

    Returns: ``a [batch, length]``, ``b [batch, length + i - d]`` (int64 letters), ``distance [batch]`` float32,
    the true Levenshtein distance of each pair (at most ``i + d``: edits can cancel).
    """

    def draw(n: int) -> int:  # uniform in 0..n-1
        return int(torch.randint(n, (), generator=gen))

    pairs = [(i, d) for i in EDITS for d in EDITS]
    ins, dels = pairs[draw(len(pairs))]
    same = [(i, d) for i, d in pairs if i - d == ins - dels]
    a = torch.randint(letters, (batch, length), generator=gen)
    bs, dist = [], []
    for row in a.tolist():
        ins, dels = same[draw(len(same))]
        ops = ["insert"] * ins + ["delete"] * dels
        b = list(row)
        for k in torch.randperm(len(ops), generator=gen).tolist():
            if ops[k] == "insert":
                position = draw(len(b) + 1)
                b.insert(position, draw(letters))
            else:
                del b[draw(len(b))]
        bs.append(b)
        dist.append(levenshtein(row, b))
    return a, torch.tensor(bs, dtype=torch.int64), torch.tensor(dist, dtype=torch.float32)


# --- deformed spheres (silhouettes, docs/math/algorithms.md §4.3) -----------------------------------------------------


def template_sphere(level: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The template mesh: an icosphere of radius 0.3 (level 2: 162 vertices, 320 faces)."""
    from relaxops.render import icosphere

    v, f = icosphere(level)
    return v * 0.3, f


def random_shapes(count: int, template: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Tapered ellipsoids as deformations of the unit-direction template: ``[count, V, 3]`` vertex positions (same
    faces as the template). Half-axes x, z in [0.15, 0.3], y in [0.2, 0.42]; x and z are scaled by ``1 + t y / 0.42``
    with taper ``t`` in [-0.6, 0.6]; everything stays within ``|v| < 0.42`` (inside the 32^3 voxel grid)."""
    unit = template / template.norm(dim=-1, keepdim=True)
    lo, hi = torch.tensor([0.15, 0.2, 0.15]), torch.tensor([0.3, 0.42, 0.3])
    axes = lo + (hi - lo) * torch.rand(count, 1, 3, generator=gen)
    taper = (torch.rand(count, 1, 1, generator=gen) * 2 - 1) * 0.6
    v = unit * axes
    scale = 1 + taper * v[..., 1:2] / 0.42
    return torch.cat([v[..., :1] * scale, v[..., 1:2], v[..., 2:] * scale], -1)


def train_each(rows: dict, methods, train, evaluate) -> dict:
    """Trains one model per method (``train(method) -> model``), stores ``rows[method] = evaluate(model)`` and prints
    each training time."""
    for method in methods:
        t0 = time.perf_counter()
        model = train(method)
        rows[method] = evaluate(model)
        print(f"  trained {method} in {time.perf_counter() - t0:.1f} s")
    return rows
