"""Shortest-path supervision on Warcraft-like 12x12 maps through the relaxed shortest path
(docs/math/algorithms.md §4.2).

Each map is a 12x12 grid of terrains (road, grass, forest, hills, water) with known node weights, drawn as a
96x96 RGB image (8x8 pixels per cell: terrain colour and texture, a per-cell shade that shows the per-cell cost
variation, pixel noise; ``data.warcraft_maps``); the label is the shortest path from the top-left to the
bottom-right cell (Dijkstra, 8-neighbourhood, node weights). A CNN maps the image to a 12x12 map of positive costs.
Three versions of it:

* untrained: the random initialisation;
* relaxed shortest path: trained on the paths only, through ``relaxops.algorithms.shortest_path`` (relaxed
  Bellman-Ford and path traceback), squared error between the relaxed path and the true path (the paper's loss);
* direct cost supervision (baseline): trained on the hidden costs themselves, more information than the paths,
  with the squared error of the log costs (relative errors, which decide paths; in a 300-step trial it found 38%
  exact paths against 29% for the squared error of the costs).

Metrics on held-out maps, for the path Dijkstra finds on the predicted costs: exact-path accuracy (the same cells
as the true path) and the cost ratio (its cost under the true costs over the optimal cost; 1 is optimal).

Scaled down from the paper's set-up (10 000 Warcraft maps, the first five layers of a ResNet-18, 50 epochs at
batch 70 on a GPU) to a few minutes on a CPU: 2000 generated training maps with five flat terrains (simpler than
the Warcraft tiles, so a small CNN can learn them), a CNN of 3 conv layers with batch norm and a 1x1 read-out
after pooling to 12x12, STEPS Adam steps at batch BATCH, learning rate decayed 10x at 60% and 80% of training as
in the paper; beta 10 as the example script (the paper: 25).

What to expect with the defaults (seed 0; about 100 s): untrained 7.3% exact paths (cost ratio 1.59), direct
cost supervision 47.3% (1.0020), relaxed shortest path 61.7% (1.0025) (the fused kernel; 58.3% with the
plain-PyTorch version of the same relaxation); seed 1 (plain-PyTorch version): 6.7%, 45.7% and 49.0%. The paper's
relaxed Bellman-Ford reaches 88.4-95.8% on the real maps with the full set-up.
"""

from __future__ import annotations

import torch
from torch import nn
from tqdm import tqdm

from relaxops import algorithms

from .data import Maps, dijkstra, train_each, warcraft_maps

SIZE = 12  # cells per side
TILE = 8  # pixels per cell side
TRAIN_MAPS, TEST_MAPS = 2000, 300
STEPS = 600  # default Adam steps per trained model
BATCH = 32
LR = 3e-3
BETA = 10.0  # inverse temperature of the relaxed shortest path (the example script's; the paper: 25)
# Relaxed Bellman-Ford rounds: more than the cells of the longest true paths (2000 maps: mean 15, longest 22 for seed
# 0, 23 for seed 1), so that the distances along them converge.
N_ITER = 28
# Traceback steps: step k marks the cells k - 1 moves back from the end, so 22 steps mark paths of up to 22 cells;
# steps beyond a path's length move mass back and forth around the start (docs/math/algorithms.md §3).
N_TRACE = 22


class CostNet(nn.Module):
    """Image ``[B, 3, 96, 96]`` -> positive cell costs ``[B, 12, 12]``."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 4, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),  # 48 x 48
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 24 x 24
            nn.Conv2d(32, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveMaxPool2d(SIZE),  # 12 x 12
            nn.Conv2d(32, 1, 1),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(self.features(images)[:, 0]) + 0.01


def relaxed_path(costs: torch.Tensor) -> torch.Tensor:
    return algorithms.shortest_path(costs, beta=BETA, n_iter=N_ITER, n_trace=N_TRACE)


def loss_fn(method: str, model: nn.Module, images, costs, paths) -> torch.Tensor:
    pred = model(images)
    if method == "relaxed":
        return ((relaxed_path(pred) - paths) ** 2).mean()
    return ((pred.log() - costs.log()) ** 2).mean()


def train(method: str, data: Maps, steps: int, seed: int) -> nn.Module:
    """``method``: "relaxed" (paths through the relaxed shortest path) or "direct" (MSE on the log costs)."""
    torch.manual_seed(seed)
    model = CostNet()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [int(0.6 * steps), int(0.8 * steps)], 0.1)  # as the paper
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in tqdm(range(steps), desc=f"training {method}", unit="step", leave=False, mininterval=1.0):
        idx = torch.randint(len(data.images), (BATCH,), generator=gen)
        loss = loss_fn(method, model, data.images[idx], data.costs[idx], data.paths[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model


def path_metrics(pred_costs: torch.Tensor, true_costs: torch.Tensor, true_paths: torch.Tensor) -> tuple[float, float]:
    """(exact-path accuracy, mean cost ratio) of the shortest paths under ``pred_costs [B, H, W]``, against the true
    paths ``[B, H, W]`` (0/1) and the true costs."""
    exact, ratio = 0, 0.0
    for pred, cost, path in zip(pred_costs, true_costs, true_paths):
        found, _ = dijkstra(pred)
        exact += bool(torch.equal(found, path > 0))
        ratio += float(cost[found].sum() / cost[path > 0].sum())
    return exact / len(pred_costs), ratio / len(pred_costs)


@torch.no_grad()
def evaluate(model: nn.Module, data: Maps) -> tuple[float, float]:
    model.eval()
    return path_metrics(model(data.images), data.costs, data.paths)


def main(steps=None, seed: int = 0) -> dict:
    steps = STEPS if steps is None else steps
    gen = torch.Generator().manual_seed(seed)
    train_maps, test_maps = warcraft_maps(TRAIN_MAPS, gen, SIZE, TILE), warcraft_maps(TEST_MAPS, gen, SIZE, TILE)
    print(
        f"shortest path: {SIZE}x{SIZE} Warcraft-like maps ({SIZE * TILE}x{SIZE * TILE} RGB), {TRAIN_MAPS} "
        f"training / {TEST_MAPS} test maps; relaxed shortest path beta {BETA:g}, {N_ITER} Bellman-Ford rounds, "
        f"{N_TRACE} traceback steps; {steps} steps x {BATCH} maps per model"
    )
    torch.manual_seed(seed)
    rows = {"untrained": evaluate(CostNet(), test_maps)}
    train_each(
        rows,
        ("direct", "relaxed"),
        lambda method: train(method, train_maps, steps, seed),
        lambda model: evaluate(model, test_maps),
    )
    names = {
        "untrained": "untrained CNN",
        "direct": "direct: MSE on the true log costs",
        "relaxed": "relaxed shortest path (paths only)",
    }
    print(f"test maps: the path Dijkstra finds on the predicted costs, against the true one ({TEST_MAPS} maps)")
    for key, (exact, ratio) in rows.items():
        print(f"  {names[key]:<38} exact path {100 * exact:5.1f}%   cost ratio {ratio:.4f}")
    return rows
