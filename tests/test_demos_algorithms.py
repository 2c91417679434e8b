"""`python -m relaxops demo algorithms`: the generated data of the four tasks is what it claims, the metrics are
right on known cases, and every task trains through relaxops.algorithms (tiny step counts)."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

pytest.importorskip("sklearn")

from relaxops import algorithms  # noqa: E402
from relaxops.demos.algorithms import data, levenshtein, shortest_path, silhouette, sorting  # noqa: E402

# --- four-digit numbers ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pools():
    return data.load_digit_pools(0)


def test_digit_pools_split_by_image(pools):
    train, test = pools
    assert len(train.images) + len(test.images) == 1797
    flat = lambda p: {tuple(x.flatten().tolist()) for x in p.images}  # noqa: E731
    assert not flat(train) & flat(test) - {tuple([0.0] * 64)}


def test_distinct_numbers():
    numbers = data.distinct_numbers(500, 7, 4, torch.Generator().manual_seed(0))
    assert numbers.shape == (500, 7) and numbers.min() >= 0 and numbers.max() < 10_000
    assert (numbers.sort(-1).values.diff(dim=-1) > 0).all()


def test_four_digit_numbers_decode(pools):
    """Every 8x8 block of a number's image is an image of the pool whose label is that digit, most significant
    first, leading zeros drawn."""
    pool = pools[1]
    gen = torch.Generator().manual_seed(1)
    numbers = torch.cat([torch.tensor([[7, 42, 9999]]), data.distinct_numbers(4, 3, 4, gen)])
    images = data.number_images(pool, numbers, 4, gen)
    assert images.shape == (5, 3, 1, 8, 32)
    blocks = images[:, :, 0].unflatten(-1, (4, 8)).permute(0, 1, 3, 2, 4)  # [5, 3, 4 digits, 8, 8]
    match = (blocks.flatten(-2)[..., None, :] == pool.images.flatten(1)).all(-1)  # [5, 3, 4, pool]
    assert match.any(-1).all()
    decoded = pool.labels[match.float().argmax(-1)]  # the label of a matching pool image
    assert torch.equal((decoded * torch.tensor([1000, 100, 10, 1])).sum(-1), numbers)


# --- Warcraft-like maps and Dijkstra --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def maps():
    return data.warcraft_maps(40, torch.Generator().manual_seed(0))


def scipy_shortest_cost(cost: torch.Tensor) -> float:
    """The optimal node-weight path cost from corner to corner, by scipy on the explicit 8-neighbour graph (edge
    u -> v weighs cost[v]; the start cell's own cost added)."""
    from scipy.sparse import lil_matrix
    from scipy.sparse.csgraph import dijkstra

    H, W = cost.shape
    graph = lil_matrix((H * W, H * W))
    for y, x, dy, dx in itertools.product(range(H), range(W), (-1, 0, 1), (-1, 0, 1)):
        if (dy, dx) != (0, 0) and 0 <= y + dy < H and 0 <= x + dx < W:
            graph[y * W + x, (y + dy) * W + x + dx] = float(cost[y + dy, x + dx])
    return float(dijkstra(graph.tocsr(), indices=0)[H * W - 1]) + float(cost[0, 0])


def assert_corner_path(path: torch.Tensor) -> None:
    """``path [H, W]`` bool is a simple 8-connected path from the top-left to the bottom-right cell without chords:
    the ends have one path neighbour, every other path cell two, and walking from the start visits every cell."""
    H, W = path.shape
    assert path[0, 0] and path[H - 1, W - 1]
    cells = {tuple(c) for c in torch.nonzero(path).tolist()}
    if H == W == 1:
        return

    def neighbours(c):
        return [(c[0] + dy, c[1] + dx) for dy, dx in data.NEIGHBOURS if (c[0] + dy, c[1] + dx) in cells]

    for c in cells:
        assert len(neighbours(c)) == (1 if c in {(0, 0), (H - 1, W - 1)} else 2), c
    seen, c = {(0, 0)}, (0, 0)
    while c != (H - 1, W - 1):
        c = next(n for n in neighbours(c) if n not in seen)
        seen.add(c)
    assert seen == cells


def test_maps_are_what_they_claim(maps):
    n, size, tile = 40, 12, 8
    assert maps.images.shape == (n, 3, size * tile, size * tile) and maps.images.dtype == torch.float32
    assert 0 <= maps.images.min() and maps.images.max() <= 1
    base = torch.tensor([t.cost for t in data.TERRAINS])[maps.terrain]
    ratio = maps.costs / base  # 1 + COST_VARIATION * u
    assert (ratio >= 1 - 1e-6).all() and (ratio < 1 + data.COST_VARIATION + 1e-6).all()
    assert len(maps.terrain.unique()) == len(data.TERRAINS)
    # each cell's mean colour: its terrain's colour, darker the costlier it is within its terrain
    cells = maps.images.unflatten(2, (size, tile)).unflatten(4, (size, tile)).mean((3, 5)).permute(0, 2, 3, 1)
    colours = torch.tensor([t.colour for t in data.TERRAINS])
    nearest = (
        (
            (
                cells[..., None, :] / cells.norm(dim=-1, keepdim=True)[..., None]
                - colours / colours.norm(dim=-1, keepdim=True)
            )
            ** 2
        )
        .sum(-1)
        .argmin(-1)
    )
    assert (nearest == maps.terrain).float().mean() > 0.95
    for t in range(len(data.TERRAINS)):
        mask = maps.terrain == t
        brightness, r = cells[mask].sum(-1), ratio[mask]
        assert torch.corrcoef(torch.stack([brightness, r]))[0, 1] < -0.5


@pytest.mark.parametrize("size, tile", [(1, 2), (5, 3), (13, 8)])
def test_maps_of_other_sizes(size, tile):
    maps = data.warcraft_maps(3, torch.Generator().manual_seed(size), size, tile)
    assert maps.images.shape == (3, 3, size * tile, size * tile)
    assert maps.terrain.shape == maps.costs.shape == maps.paths.shape == (3, size, size)
    for path in maps.paths:
        assert_corner_path(path > 0)


def test_dijkstra_paths_are_optimal_corner_paths(maps):
    for cost, path in zip(maps.costs, maps.paths):
        found, total = data.dijkstra(cost)
        assert torch.equal(found, path > 0)
        assert_corner_path(found)
        assert total == pytest.approx(float(cost[found].sum()), rel=1e-6)
        assert total == pytest.approx(scipy_shortest_cost(cost), rel=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (3, 2), (7, 5)])
def test_dijkstra_other_grids(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    for _ in range(5):
        cost = torch.rand(shape, generator=gen) * 10 + 0.1
        found, total = data.dijkstra(cost)
        assert_corner_path(found)
        assert total == pytest.approx(scipy_shortest_cost(cost), rel=1e-6)


def test_dijkstra_goes_around_a_wall():
    cost = torch.ones(5, 5)
    cost[:4, 2] = 100.0  # a wall with a gap in the bottom row
    found, total = data.dijkstra(cost)
    assert found[4, 2] and not found[:4, 2].any()
    assert total == 7.0  # 5 cells from (0, 0) to the gap (4, 2), 2 more to (4, 4)


def test_path_metrics_known_cases(maps):
    exact, ratio = shortest_path.path_metrics(maps.costs, maps.costs, maps.paths)
    assert (exact, ratio) == (1.0, pytest.approx(1.0))
    detour = maps.costs + 50 * maps.paths  # the true path made expensive: another path is found
    exact, ratio = shortest_path.path_metrics(detour, maps.costs, maps.paths)
    assert exact == 0.0 and ratio > 1.0
    one = maps.costs[:1]
    assert shortest_path.path_metrics(detour[:1], one, maps.paths[:1])[1] == pytest.approx(
        float(one[0][data.dijkstra(detour[0])[0]].sum()) / float(one[0][maps.paths[0] > 0].sum())
    )


# --- strings with edits ---------------------------------------------------------------------------------------------


def levenshtein_oracle(a, b) -> int:
    @functools.cache
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


@pytest.mark.parametrize(
    "a, b, distance",
    [
        ("kitten", "sitting", 3),
        ("", "abc", 3),
        ("abc", "", 3),
        ("ab", "ba", 2),
        ("abba", "aba", 1),
        ("flaw", "lawn", 2),
        ("same", "same", 0),
    ],
)
def test_levenshtein_known(a, b, distance):
    assert data.levenshtein(a, b) == distance


def test_edited_strings_labels_are_true_distances():
    gen = torch.Generator().manual_seed(0)
    diffs = []
    for _ in range(60):
        a, b, distance = data.edited_strings(8, 16, 4, gen)
        assert a.shape == (8, 16) and b.shape[0] == 8 and distance.shape == (8,)
        diff = b.shape[1] - 16
        assert -2 <= diff <= 2
        diffs.append(diff)
        assert a.min() >= 0 and a.max() < 4 and b.min() >= 0 and b.max() < 4
        for x, y, d in zip(a.tolist(), b.tolist(), distance.tolist()):
            assert d == levenshtein_oracle(tuple(x), tuple(y))
            assert abs(diff) <= d <= 8
    # i - d of independent uniform i, d in {2, 3, 4}: P(0) = 3/9, P(+-2) = 1/9 each
    counts = torch.bincount(torch.tensor(diffs) + 2, minlength=5)
    assert counts[2] > counts[0] and counts[2] > counts[4] and counts.sum() == 60 and (counts > 0).all()


@pytest.mark.parametrize("letters, mean", [(2, 4.25), (4, 5.0)])
def test_edited_strings_have_the_papers_mean_distance(letters, mean):
    """Strings of 32 letters with 2-4 insertions and 2-4 deletions: the paper's mean distances (docs/math/algorithms.md
    §4.4)."""
    gen = torch.Generator().manual_seed(letters)
    distance = torch.cat([data.edited_strings(16, 32, letters, gen)[2] for _ in range(100)])
    assert distance.mean().item() == pytest.approx(mean, abs=0.15)  # standard error about 0.03


def test_l1_distance_pads_with_zeros():
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])
    q = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
    assert levenshtein.l1_distance(p, q).tolist() == [2.0 + 1.0]
    assert levenshtein.l1_distance(q, p).tolist() == [3.0]


def test_hungarian_scores():
    true = torch.tensor([0, 0, 0, 1, 1, 2])
    assert levenshtein.hungarian_scores(true, true, 3) == (1.0, 1.0)
    assert levenshtein.hungarian_scores((true + 1) % 3, true, 3) == (1.0, 1.0)  # renamed classes
    # best one-to-one map: predicted 2 -> 0 (2 hits), 0 -> 1 (2 hits), 1 -> 2 (none): 4 of 6 right;
    # F1 per letter: 0: P 1, R 2/3 -> 0.8; 1: P 2/3, R 1 -> 0.8; 2: 0
    top1, f1 = levenshtein.hungarian_scores(torch.tensor([2, 2, 1, 0, 0, 0]), true, 3)
    assert top1 == pytest.approx(4 / 6) and f1 == pytest.approx(1.6 / 3)


# --- shapes and silhouettes -----------------------------------------------------------------------------------------


def test_random_shapes_fit_the_voxel_grid():
    template, faces = data.template_sphere()
    assert template.shape == (162, 3) and faces.shape == (320, 3)
    v = data.random_shapes(200, template, torch.Generator().manual_seed(0))
    assert v.shape == (200, 162, 3) and v.abs().max() < 0.42
    assert not torch.allclose(v[0], v[1])


def test_silhouette_metrics_known_cases():
    a = torch.zeros(1, 4, 4)
    a[0, :2] = 1
    b = torch.zeros(1, 4, 4)
    b[0, :, :2] = 1
    assert silhouette.silhouette_iou(a, a) == 1.0
    assert silhouette.silhouette_iou(a, b) == pytest.approx(4 / 12)
    template, faces = data.template_sphere()
    shapes = data.random_shapes(3, template, torch.Generator().manual_seed(0))
    iou3d, iou2d = silhouette.shape_metrics(shapes, shapes, faces)
    assert (iou3d, iou2d) == (1.0, 1.0)
    iou3d, iou2d = silhouette.shape_metrics(shapes * 0.5, shapes, faces)
    assert 0.05 < iou3d < 0.2 and 0.15 < iou2d < 0.35  # half the size: 1/8 of the volume, 1/4 of the area


def test_sorting_metrics_known_cases():
    numbers = torch.tensor([[30, 10, 20], [1, 2, 3]])
    assert sorting.ranking_accuracy(numbers.float(), numbers) == (1.0, 1.0)
    s = torch.tensor([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0]])  # second row: last two swapped
    assert sorting.ranking_accuracy(s, numbers) == (0.5, pytest.approx(4 / 6))


# --- the tasks, through relaxops.algorithms -------------------------------------------------------------------------


def test_losses_through_the_relaxed_algorithms_have_gradients():
    """Each relaxed loss is finite and differentiable, and lower for the right answer than for a wrong one."""
    numbers = torch.tensor([[5, 1, 9, 3]])
    right = numbers.float().requires_grad_()
    loss = sorting.swap_loss(right, numbers)
    loss.backward()
    assert torch.isfinite(right.grad).all() and right.grad.abs().sum() > 0
    assert sorting.swap_loss(-numbers.float(), numbers) > loss + 1

    maps = data.warcraft_maps(4, torch.Generator().manual_seed(3))
    costs = maps.costs.clone().requires_grad_()
    path = shortest_path.relaxed_path(costs)
    assert path.shape == maps.paths.shape
    loss = ((path - maps.paths) ** 2).mean()
    loss.backward()
    assert torch.isfinite(costs.grad).all() and costs.grad.abs().sum() > 0
    assert ((shortest_path.relaxed_path(maps.costs + 50 * maps.paths) - maps.paths) ** 2).mean() > loss + 0.02

    a, b, distance = data.edited_strings(6, 10, 3, torch.Generator().manual_seed(0))
    p = torch.nn.functional.one_hot(a, 3).float().requires_grad_()
    q = torch.nn.functional.one_hot(b, 3).float()
    relaxed = algorithms.edit_distance(p, q, beta=levenshtein.BETA)
    assert torch.allclose(relaxed, distance, atol=0.1)  # one-hot letters: close to the true distance
    relaxed.sum().backward()
    assert torch.isfinite(p.grad).all()


@pytest.mark.parametrize(
    "task, module, rows",
    [
        ("sort", sorting, {"chance", "untrained", "direct", "relaxed"}),
        ("shortest_path", shortest_path, {"untrained", "direct", "relaxed"}),
        ("silhouette", silhouette, {"untrained", "direct", "relaxed"}),
        ("levenshtein", levenshtein, {"untrained", "l1", "relaxed", "supervised"}),
    ],
)
def test_task_runs(monkeypatch, capsys, task, module, rows):
    """Each task end to end on small data, 2 steps: it prints its table and returns its rows."""
    from relaxops.demos.algorithms import main

    for name, small in (
        ("TRAIN_MAPS", 40),
        ("TEST_MAPS", 20),
        ("TRAIN_SHAPES", 40),
        ("TEST_SHAPES", 10),
        ("TEST_SETS", 50),
        ("TEST_IMAGES", 100),
        ("BATCH", 4),
    ):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, small)
    threads = torch.get_num_threads()
    results = main(steps=2, task=task)
    assert torch.get_num_threads() == threads  # one thread while the task runs, then restored
    assert set(results) == rows
    assert all(0 <= values[0] <= 1 for values in results.values())  # accuracies and IoUs come first
    out = capsys.readouterr().out
    assert out.startswith({"sort": "sorting:", "shortest_path": "shortest path:"}.get(task, f"{task}:"))
    assert "  untrained" in out and "relaxed" in out


def test_unknown_task():
    from relaxops.demos.algorithms import main

    with pytest.raises(ValueError, match="task must be one of sort, shortest_path, silhouette, levenshtein"):
        main(task="knapsack")
