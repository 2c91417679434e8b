"""Levenshtein-distance supervision on strings of digit images through the relaxed edit distance
(docs/math/algorithms.md §4.4).

EMNIST letters do not ship with any package, so the letters are scikit-learn digit classes (LETTERS, an alphabet
of 4). A string ``a`` of LENGTH random letters and a string ``b`` made from it by 2-4 random insertions and,
independently, 2-4 random deletions are drawn (``data.edited_strings``; at 32 letters this gives the paper's mean
distances, 4.24 over 2 letters and 4.97 over 4 against its 4.25 and 5), each letter as a random 8x8 image of its
class; the only label of the pair is the true Levenshtein distance of the two letter strings. A CNN maps every
image to a distribution over the 4 letters; it is never told which letter an image shows. Versions of it:

* untrained: the random initialisation;
* l1 baseline (docs/math/algorithms.md §4.4): the relaxed distance replaced by the l1 distance of the two sequences of
  distributions (the shorter one padded with zero vectors), trained with the squared error to the true distance;
* relaxed edit distance: ``relaxops.algorithms.edit_distance`` of the two sequences of distributions, squared
  error to the true distance (the paper's loss);
* supervised classifier (for reference): cross-entropy on the letters themselves, the information the other two
  never see.

Metrics on held-out digit images: since the letters are never named, each predicted class is matched to a letter
by the Hungarian algorithm on the confusion matrix (scipy.optimize.linear_sum_assignment); then top-1 accuracy
and the macro F1 score.

Scaled down from the paper's set-up (32 EMNIST letters per string, 28x28 images, the paper's CNN with 32 and 64
channels) to under a minute on a CPU: 8x8 digit images, LENGTH letters per string, the same CNN shape with 16 and
32 channels, STEPS Adam steps at BATCH pairs, learning rate 1e-3 (the paper: 1e-4), beta 9 (the paper's).

What to expect with the defaults (seed 0; about 50 s): untrained 25.6% top-1 (F1 0.10), l1 baseline 46.8% (0.31),
relaxed edit distance 97.3% (0.973), as many as the supervised classifier (97.3%): the distances alone identify the
letters (seed 1: the l1 baseline stays at 26.2%, relaxed 99.1%). After 150 steps (the short run without --task):
27.9%, 71.1% and 97.3%. The paper's relaxed LD reaches .44-.49 top-1 on 4-letter EMNIST alphabets and .57-.96 on
2-letter ones.
"""

from __future__ import annotations

import torch
from torch import nn
from tqdm import tqdm

from relaxops import algorithms

from .data import DigitPool, edited_strings, load_digit_pools, train_each

LETTERS = (2, 3, 5, 8)  # digit classes used as the alphabet (similar shapes: the task is not trivial)
LENGTH = 16  # letters of the first string of a pair
STEPS = 400  # default Adam steps per trained model
BATCH = 16  # string pairs per step
LR = 1e-3
BETA = 9.0  # inverse temperature of the relaxed minimum (the paper's)
TEST_IMAGES = 2000


def make_model() -> nn.Module:
    """Image ``[1, 8, 8]`` -> logits over the letters: the paper's CNN (5x5 conv, 5x5 conv, max-pool, FC 64, FC)
    with half the channels."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2),
        nn.ReLU(),
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 32 x 4 x 4
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, len(LETTERS)),
    )


def distributions(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """``[B, n, 8, 8]`` -> letter distributions ``[B, n, K]``."""
    return model(images.flatten(0, 1).unsqueeze(1)).softmax(-1).view(*images.shape[:2], len(LETTERS))


def l1_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The baseline's distance: ``sum_i |p_i - q_i|_1`` over positions, the shorter sequence padded with zeros."""
    n = max(p.shape[1], q.shape[1])
    pad = [nn.functional.pad(x, (0, 0, 0, n - x.shape[1])) for x in (p, q)]
    return (pad[0] - pad[1]).abs().sum((1, 2))


def hungarian_scores(pred: torch.Tensor, true: torch.Tensor, classes: int) -> tuple[float, float]:
    """(top-1 accuracy, macro F1) of predicted classes ``[N]`` against true classes ``[N]`` (both in
    ``0..classes-1``) after mapping the predicted classes to the true ones by the one-to-one assignment with the
    most agreements (Hungarian algorithm on the confusion matrix)."""
    from scipy.optimize import linear_sum_assignment

    confusion = torch.zeros(classes, classes, dtype=torch.int64)
    confusion.index_put_((pred, true), torch.ones_like(pred), accumulate=True)  # [predicted, true]
    rows, cols = linear_sum_assignment(confusion.numpy(), maximize=True)
    mapped = confusion[torch.as_tensor(rows)][:, torch.as_tensor(cols)]  # [matched letter, true letter]
    tp = mapped.diagonal().double()
    top1 = tp.sum().item() / len(pred)
    precision = tp / mapped.sum(1).clamp_min(1)
    recall = tp / mapped.sum(0).clamp_min(1)
    f1 = torch.where(tp > 0, 2 * precision * recall / (precision + recall).clamp_min(1e-12), 0.0)
    return top1, f1.mean().item()


def train(method: str, pool: DigitPool, steps: int, seed: int) -> nn.Module:
    """``method``: "relaxed" (relaxed edit distance), "l1" (the l1 baseline) or "supervised" (letter labels)."""
    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(seed + 1)
    digit = torch.tensor(LETTERS)
    for _ in tqdm(range(steps), desc=f"training {method}", unit="step", leave=False, mininterval=1.0):
        a, b, distance = edited_strings(BATCH, LENGTH, len(LETTERS), gen)
        images_a, images_b = pool.draw(digit[a], gen), pool.draw(digit[b], gen)
        if method == "supervised":
            logits = model(torch.cat([images_a.flatten(0, 1), images_b.flatten(0, 1)]).unsqueeze(1))
            loss = nn.functional.cross_entropy(logits, torch.cat([a.flatten(), b.flatten()]))
        else:
            p, q = distributions(model, images_a), distributions(model, images_b)
            pred = algorithms.edit_distance(p, q, beta=BETA) if method == "relaxed" else l1_distance(p, q)
            loss = ((pred - distance) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, letters: torch.Tensor) -> tuple[float, float]:
    return hungarian_scores(model(images.unsqueeze(1)).argmax(-1), letters, len(LETTERS))


def main(steps=None, seed: int = 0) -> dict:
    steps = STEPS if steps is None else steps
    train_pool, test_pool = load_digit_pools(seed)
    gen = torch.Generator().manual_seed(seed)
    test_letters = torch.randint(len(LETTERS), (TEST_IMAGES,), generator=gen)
    test_images = test_pool.draw(torch.tensor(LETTERS)[test_letters], gen)
    print(
        f"levenshtein: strings of {LENGTH} letters (scikit-learn digits {', '.join(map(str, LETTERS))} as the "
        f"alphabet) and their copies with 2-4 insertions and 2-4 deletions, supervised by the distance only; "
        f"relaxed edit distance beta {BETA:g}; {steps} steps x {BATCH} pairs per model"
    )
    torch.manual_seed(seed)
    rows = {"untrained": evaluate(make_model(), test_images, test_letters)}
    train_each(
        rows,
        ("l1", "relaxed", "supervised"),
        lambda method: train(method, train_pool, steps, seed),
        lambda model: evaluate(model, test_images, test_letters),
    )
    names = {
        "untrained": "untrained CNN",
        "l1": "l1 baseline (distance only)",
        "relaxed": "relaxed edit distance (distance only)",
        "supervised": "supervised classifier (letters)",
    }
    print(f"test letters ({TEST_IMAGES} held-out images), classes matched to letters by the Hungarian algorithm")
    for key, (top1, f1) in rows.items():
        print(f"  {names[key]:<40} top-1 {100 * top1:5.1f}%   F1 {f1:.3f}")
    return rows
