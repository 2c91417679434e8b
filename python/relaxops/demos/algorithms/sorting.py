"""Sorting supervision of four-digit numbers through relaxed bubble sort (docs/math/algorithms.md §4.1).

Each example is a set of N = 5 distinct four-digit numbers (0000..9999), each shown as four 8x8 scikit-learn
digit images side by side (an 8x32 image, leading zeros drawn). A CNN maps every image to a scalar score. Three
versions of it:

* untrained: the random initialisation;
* relaxed bubble sort: trained on the order only. The scores of a set, arranged in the true ascending order of
  the numbers, go through ``relaxops.algorithms.bubble_sort``; the loss is the expected number of swaps (the
  relaxed Kendall-tau distance to sorted; the reference script's default loss);
* direct regression (baseline): trained on the numbers themselves, mean squared error between the score and the
  number scaled to [-1, 1] (more information than the order).

Metrics on sets of held-out digit images: exact match (the argsort of the scores equals that of the numbers for
the whole set) and element-wise accuracy (fraction of positions of the argsort that agree).

Scaled down from the paper's set-up (28x112 MNIST images, 1.5e5 or more Adam steps at batch 100 on a GPU) to
under a minute on a CPU: 8x8 digits (1437 training and 360 test images, split by image), the paper's CNN shape with
half the channels, STEPS steps at batch BATCH sets, a larger learning rate (1e-3 against 10^-3.5; 3e-3 was worse
in a 1000-step trial: 26% against 42% exact match). Beta 8 as the paper (trials at 1000 steps: beta 2 44%, 32 39%).

What to expect with the defaults (seed 0; about 40 s): untrained 0.2% exact match (17% element-wise; chance 0.8% and
20%), direct regression 58.4% (80.8%), relaxed bubble sort 39.8% (69.6%) (the fused kernel; 41.9% with the
plain-PyTorch version of the same relaxation, equal up to float32 rounding: within the spread between seeds); 3000
steps give about the same; seed 1 (plain-PyTorch version): 0.9%, 50.2% and 36.4%. The paper reports 84.2% (93.0%)
for n = 5 on four-digit MNIST numbers with the full set-up.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from tqdm import tqdm

from relaxops import algorithms

from .data import DigitPool, distinct_numbers, load_digit_pools, number_images, train_each

N = 5  # numbers per set
DIGITS = 4
STEPS = 1000  # default Adam steps per trained model
BATCH = 32  # sets per step
LR = 1e-3
BETA = 8.0  # inverse temperature of the relaxed bubble sort (the paper's, tuned for n = 5)
TEST_SETS = 1000


def make_model() -> nn.Module:
    """Image ``[1, 8, 32]`` -> scalar score: the paper's CNN (two 5x5 conv + max-pool, FC 64, FC 1), half width."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 16 x 4 x 16
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 32 x 2 x 8
        nn.Flatten(),
        nn.Linear(32 * 2 * 8, 64),
        nn.ReLU(),
        nn.Linear(64, 1),
    )


def scores(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """``[sets, n, 1, 8, 32]`` -> ``[sets, n]``."""
    return model(images.flatten(0, 1)).view(images.shape[:2])


def swap_loss(s: torch.Tensor, numbers: torch.Tensor) -> torch.Tensor:
    """Expected number of swaps relaxed bubble sort makes on the scores arranged in the true ascending order."""
    in_true_order = s.gather(1, numbers.argsort(-1))
    _, swaps, _ = algorithms.bubble_sort(in_true_order, beta=BETA)
    return swaps.mean()


def regression_loss(s: torch.Tensor, numbers: torch.Tensor) -> torch.Tensor:
    target = numbers.float() / (10**DIGITS - 1) * 2 - 1
    return ((s - target) ** 2).mean()


def ranking_accuracy(s: torch.Tensor, numbers: torch.Tensor) -> tuple[float, float]:
    """(exact match, element-wise accuracy) of ``argsort(s)`` against ``argsort(numbers)``, rows ``[sets, n]``."""
    correct = s.argsort(-1) == numbers.argsort(-1)
    return correct.all(-1).float().mean().item(), correct.float().mean().item()


def train(method: str, pool: DigitPool, steps: int, seed: int) -> nn.Module:
    """``method``: "relaxed" (swap loss of relaxed bubble sort) or "direct" (regression on the numbers)."""
    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(seed + 1)
    loss_fn = swap_loss if method == "relaxed" else regression_loss
    for _ in tqdm(range(steps), desc=f"training {method}", unit="step", leave=False, mininterval=1.0):
        numbers = distinct_numbers(BATCH, N, DIGITS, gen)
        loss = loss_fn(scores(model, number_images(pool, numbers, DIGITS, gen)), numbers)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, numbers: torch.Tensor) -> tuple[float, float]:
    return ranking_accuracy(scores(model, images), numbers)


def main(steps=None, seed: int = 0) -> dict:
    steps = STEPS if steps is None else steps
    train_pool, test_pool = load_digit_pools(seed)
    gen = torch.Generator().manual_seed(seed)
    test_numbers = distinct_numbers(TEST_SETS, N, DIGITS, gen)
    test_images = number_images(test_pool, test_numbers, DIGITS, gen)
    print(
        f"sorting: sets of {N} four-digit numbers (8x32 images of scikit-learn digits), relaxed bubble sort "
        f"beta {BETA:g}; {steps} steps x {BATCH} sets per model"
    )
    torch.manual_seed(seed)
    rows = {"untrained": evaluate(make_model(), test_images, test_numbers)}
    train_each(
        rows,
        ("direct", "relaxed"),
        lambda method: train(method, train_pool, steps, seed),
        lambda model: evaluate(model, test_images, test_numbers),
    )
    names = {
        "chance": "chance",
        "untrained": "untrained CNN",
        "direct": "direct: regression on the numbers",
        "relaxed": "relaxed bubble sort (order only)",
    }
    rows = {"chance": (1 / math.factorial(N), 1 / N), **rows}
    print(f"test sets ({TEST_SETS}, held-out digit images): exact match (EM), element-wise (EW)")
    for key, (em, ew) in rows.items():
        print(f"  {names[key]:<38} EM {100 * em:5.1f}%   EW {100 * ew:5.1f}%")
    return rows
