"""Sorting supervision on two-digit numbers (a small version of the four-digit MNIST task).

Each training example is a set of n = 5 images of two-digit numbers (two 8x8 scikit-learn digits side
by side, value 0..99, distinct within a set). A small CNN maps every image to one scalar score; it never
sees the numbers themselves, only how the set is ordered: the scores go through a relaxed sorting
network, and the relaxed permutation matrix X is pulled towards the true permutation with a binary
cross-entropy loss. After training, sorting the scores orders unseen numbers (made from digit images
that were held out) correctly.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

import relaxops
from relaxops import _backend

from ._extras import require_extras

N = 5  # numbers per set
BATCH = 100  # sets per training step
STEPS = 600  # default number of training steps
LR = 3e-3
NETWORK, RELAXATION, STEEPNESS = "odd_even", "cauchy", 20.0


class DigitSets:
    """Sets of N two-digit number images drawn from a fixed pool of 8x8 digit images."""

    def __init__(self, images, labels):
        self.images = images  # [m, 8, 8], scaled to [0, 1]
        self.by_digit = [torch.nonzero(labels == d).flatten() for d in range(10)]

    def sample(self, sets: int, gen: torch.Generator):
        """Returns (images [sets, N, 1, 8, 16], values [sets, N])."""
        values = torch.rand(sets, 100, generator=gen).argsort(-1)[:, :N]  # N distinct numbers per set
        halves = []
        for digits in (values // 10, values % 10):  # tens, then ones
            pick = torch.empty_like(digits)
            for d in range(10):
                mask = digits == d
                pool = self.by_digit[d]
                pick[mask] = pool[torch.randint(len(pool), (int(mask.sum()),), generator=gen)]
            halves.append(self.images[pick])
        return torch.cat(halves, dim=-1).unsqueeze(2), values


def load_splits(gen: torch.Generator):
    """scikit-learn's digits (1797 images), split 80/20 by image: no image appears in both splits."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target)
    perm = torch.randperm(len(images), generator=gen)
    cut = int(0.8 * len(images))
    train, test = perm[:cut], perm[cut:]
    return DigitSets(images[train], labels[train]), DigitSets(images[test], labels[test])


def make_model() -> nn.Module:
    """Image [1, 8, 16] -> scalar score (higher score = larger number, once trained)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 32 x 4 x 8
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 64 x 2 x 4
        nn.Flatten(),
        nn.Linear(64 * 2 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 1),
    )


def scores(model, images):
    """[sets, N, 1, 8, 16] -> [sets, N]."""
    return model(images.flatten(0, 1)).view(images.shape[:2])


def ranking_loss(s, values):
    """BCE between the relaxed permutation matrix X[b, c, r] (weight of input c at ascending position r)
    and the true one Q[b, c, r] = 1 iff input c is the r-th smallest number."""
    _, X = relaxops.sort(s, NETWORK, RELAXATION, steepness=STEEPNESS, return_matrix=True)
    Q = nn.functional.one_hot(values.argsort(-1), N).transpose(-2, -1).to(X.dtype)
    return nn.functional.binary_cross_entropy(X, Q)


@torch.no_grad()
def evaluate(model, images, values):
    """(EM, EW): fraction of sets sorted entirely correctly, fraction of positions sorted correctly."""
    correct = scores(model, images).argsort(-1) == values.argsort(-1)
    return correct.all(-1).float().mean().item(), correct.float().mean().item()


def main(steps=None) -> None:
    require_extras("sort")
    from tqdm import tqdm

    steps = STEPS if steps is None else steps
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train, test = load_splits(gen)
    test_images, test_values = test.sample(2000, gen)  # fixed test sets from held-out images only
    model = make_model()
    before = evaluate(model, test_images, test_values)

    backend = _backend.resolve("sortnet", "auto", torch.device("cpu"))
    print(
        f"relaxops sort demo: order sets of {N} two-digit numbers (scikit-learn digits) from ordering "
        f"supervision only\n  {NETWORK} network, {RELAXATION} relaxation, steepness {STEEPNESS:g}, "
        f"backend {backend!r}, {steps} steps x {BATCH} sets"
    )
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="training")
    for step in bar:
        images, values = train.sample(BATCH, gen)
        loss = ranking_loss(scores(model, images), values)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
    bar.close()
    elapsed = time.perf_counter() - start
    after = evaluate(model, test_images, test_values)

    rows = [
        ("chance", 1 / math.factorial(N), 1 / N),
        ("untrained model (random init)", *before),
        ("trained model", *after),
    ]
    print(f"test accuracy on {len(test_values)} sets of held-out images: exact match (EM), element-wise (EW)")
    for name, em, ew in rows:
        print(f"  {name:<32} EM {100 * em:6.2f}%   EW {100 * ew:5.1f}%")
    print(f"training took {elapsed:.1f} s on the {backend!r} backend")
