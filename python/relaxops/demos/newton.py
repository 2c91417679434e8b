"""Newton losses against the plain loss (thesis table 7.1 in kind, docs/math/training.md §4.2/§4.3), scaled down.

(a) Classification: scikit-learn's digits (8x8 images, 10 classes), split 1000 train / 437 validation / 360 test.
    An MLP 64 -> 100 -> 100 -> 10 (ReLU) is trained with softmax cross-entropy, once plainly and once per Newton
    loss variant (closed-form SMCE gradient and Hessian, ``NewtonLoss(grad_hess_fn="smce")``): element-wise
    Hessian, batch Hessian, empirical Fisher; with SGD (lr 0.1) and Adam (lr 1e-3), batch 32, the same
    initialisations and batches for every method. Test accuracy after one epoch (31 steps) and at the end,
    averaged over 3 seeds. The thesis: 5-layer MLPs and LeNets on MNIST, 1 and 200 epochs, 20 seeds.
(b) Ranking: sets of n = 5 two-digit numbers (images made of two digits, the ``sort`` demo's data: training sets
    from 80% of the digit images, 2000 test sets from the other 20%). An MLP 128 -> 128 -> 64 -> 1 scores each
    image; the scores go through a relaxed odd-even sorting network (``relaxops.sort``, logistic relaxation,
    steepness 10) and the relaxed permutation matrix is compared with the true one by binary cross-entropy
    (per set). Adam, lr 1e-3, 100 sets per step. Plain loss against the Newton loss on the 5 scores of a set: the
    empirical Fisher variant (first derivatives only) and the batch-Hessian variant, its Hessian by central
    differences of the C++ kernel's gradient in float64 (``hessian_method="finite_difference"``: relaxops'
    sorting-network ops have no double backward: they raise). Metrics: exact match (EM: whole set ordered right) and
    element-wise (EW) test accuracy, mean and standard deviation over 3 seeds (the same 2000 test sets).
    The thesis: four-digit MNIST numbers, a CNN, 100 000 steps, 10 seeds.

Scaled down from the thesis: data (digits instead of MNIST), models, steps (600 / 600 instead of 200 epochs /
100 000 steps), seeds (3 / 3 instead of 20 / 10). ``steps`` sets both parts' step counts.

Tikhonov damping lam (not reported in the thesis, docs/math/training.md §8): chosen once on a validation split, never on
the test data, from the grid {1e-3, 1e-2, 1e-1, 1} (absolute), by mean validation accuracy over 3 seeds (classification,
600 steps) or the validation EM of one seed (ranking, 400 steps; 1000 validation sets from the training images):
* classification, SGD: e.w. Hessian 1, Hessian 1, Fisher 0.1; Adam: e.w. Hessian 1, Hessian 0.1, Fisher 0.1.
  With SGD at lr 0.1 every Hessian variant with lam <= 1e-2 diverged (validation accuracy ~10%): the softmax
  Hessian is nearly singular for confident samples, so the damped Newton step there is up to 1/lam times the
  gradient. The Fisher variant at lam 0.1 was the best SGD method (97.6% against 94.1% plain), as in the thesis.
* ranking: Fisher 1 (validation EM 60.8% against 60.7% plain; 58.5-58.7% for smaller lam, 59.3% at 3, 60.8% at
  10: with a large lam the Fisher step is the gradient over lam, which Adam's scaling undoes). Hessian: for every
  lam <= 1e-1 (and relative lam up to 1) the batch Hessian of this non-convex loss was indefinite, which
  ``NewtonLoss`` refuses; lam 1 gave 58.0%, so the grid was extended to 3: 61.8%. It runs with ``eig_floor=0.1``
  so that a rarer indefinite batch is clamped instead of stopping the demo. The element-wise Hessian was
  indefinite at lam 1 as well and is left out of this part. Steepness 25 and relative lam for Fisher gave no gain.
  Differences of about 1.5% EM are within one standard error of 1000-2000 sets.

Measured: ``python -m relaxops demo newton`` (seed 0, default steps, one thread), 53 s wall time on a 2-core AMD
EPYC (KVM) at a load average of 1.8-2.1 (``uptime`` before and after; other engineers' jobs running):

    Newton losses against the plain loss (thesis table 7.1 in kind), seed 0
    (a) digits classification, MLP, 600 steps of 32, test accuracy on 360 images (mean of 3 seeds):
        after 1 epoch / at the end
      sgd   regular                 24.9% /  95.0%
      sgd   NL e.w. H  (lam 1)      24.8% /  94.6%
      sgd   NL H       (lam 1)      24.8% /  94.7%
      sgd   NL F       (lam 0.1)    53.2% /  97.5%
      adam  regular                 53.7% /  95.0%
      adam  NL e.w. H  (lam 1)      54.1% /  94.9%
      adam  NL H       (lam 0.1)    54.2% /  95.3%
      adam  NL F       (lam 0.1)    49.0% /  95.2%
    (b) ranking sets of 5 two-digit numbers through a relaxed sorting network (odd_even, logistic,
        steepness 10), Adam, 600 steps of 100 sets; test EM and EW on 2000 sets, mean +- sd of 3 seeds
      regular                EM  59.1% +- 1.8   EW  81.0% +- 0.9   (6.4 s)
      NL F       (lam 1)     EM  59.2% +- 1.5   EW  81.2% +- 0.8   (7.1 s)
      NL H       (lam 3)     EM  59.6% +- 0.8   EW  81.2% +- 0.3   (22.2 s)
    took 49 s

Reading, as in the thesis: the Hessian Newton losses are about as good as the plain loss (the softmax
cross-entropy is well behaved); the empirical Fisher helps with SGD (97.5% against 95.0% at the end, 53% against
25% after one epoch) and not with Adam. For ranking, this small logistic sorting network (n = 5, steepness 10)
trains well plainly; the Newton losses are within a standard deviation of it (the thesis' large gains for the
logistic network came after 100 000 steps on four-digit numbers; not reproduced at this scale).
"""

from __future__ import annotations

import time

import torch
from torch import nn

import relaxops
from relaxops.training import NewtonLoss

from ._extras import require_extras

CLS_STEPS, RANK_STEPS = 600, 600
CLS_BATCH, RANK_BATCH = 32, 100
CLS_SEEDS = RANK_SEEDS = 3
CLS_METHODS = ("regular", "elementwise_hessian", "hessian", "fisher")
CLS_OPTIMIZERS = {"sgd": 0.1, "adam": 1e-3}  # learning rates
CLS_LAM = {
    ("sgd", "elementwise_hessian"): 1.0,
    ("sgd", "hessian"): 1.0,
    ("sgd", "fisher"): 0.1,
    ("adam", "elementwise_hessian"): 1.0,
    ("adam", "hessian"): 0.1,
    ("adam", "fisher"): 0.1,
}
RANK_METHODS = ("regular", "fisher", "hessian")
RANK_LAM = {"fisher": 1.0, "hessian": 3.0}
RANK_EIG_FLOOR = {"fisher": None, "hessian": 0.1}
N = 5  # numbers per set
NETWORK, RELAXATION, STEEPNESS = "odd_even", "logistic", 10.0
LABELS = {"regular": "regular", "elementwise_hessian": "NL e.w. H", "hessian": "NL H", "fisher": "NL F"}


# ---------------------------------------------------------------------------------------------- classification


def load_digits_splits():
    """(x [1797, 64] in [0, 1], labels, (train, validation, test) index tensors), a fixed split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    return x, labels, (perm[:1000], perm[1000:1437], perm[1437:])


def train_classifier(data, method: str, optimizer: str, steps: int, seed: int, eval_idx) -> tuple[float, float]:
    """(accuracy after one epoch, accuracy at the end) on ``eval_idx`` of one MLP trained with ``method``."""
    x, labels, (train, _, _) = data
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10))
    lr = CLS_OPTIMIZERS[optimizer]
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
    newton = (
        None if method == "regular" else NewtonLoss(variant=method, lam=CLS_LAM[optimizer, method], grad_hess_fn="smce")
    )
    batches = torch.Generator().manual_seed(seed + 100)
    epoch = len(train) // CLS_BATCH

    def accuracy():
        with torch.no_grad():
            return (model(x[eval_idx]).argmax(-1) == labels[eval_idx]).float().mean().item()

    first = accuracy() if steps < epoch else None
    for step in range(steps):
        idx = train[torch.randint(len(train), (CLS_BATCH,), generator=batches)]
        out = model(x[idx])
        loss = nn.functional.cross_entropy(out, labels[idx]) if newton is None else newton(out, labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 == epoch:
            first = accuracy()
    return first, accuracy()


# ---------------------------------------------------------------------------------------------------- ranking


def ranking_loss_per_set(s: torch.Tensor, values: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """[sets] BCE between the relaxed permutation matrix of the scores ``s [sets, N]`` and the true one (mean over
    its N x N entries: one set is one sample of the Newton loss)."""
    _, X = relaxops.sort(s, NETWORK, RELAXATION, steepness=STEEPNESS, return_matrix=True, backend=backend)
    Q = nn.functional.one_hot(values.argsort(-1), N).transpose(-2, -1).to(X.dtype)
    return nn.functional.binary_cross_entropy(X, Q, reduction="none").mean((-2, -1))


def _scores(model, images):
    return model(images.flatten(0, 1)).view(images.shape[:2])


def train_ranker(method: str, steps: int, seed: int, test) -> tuple[float, float]:
    """(EM, EW) test accuracy of one MLP ranker trained with ``method``."""
    from .sort import load_splits

    train, _ = load_splits(torch.Generator().manual_seed(0))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    newton = None
    if method != "regular":
        # the Hessian by central differences of the kernels' gradient (relaxops' sorting-network ops have no correct
        # double backward), in float64: the scores are cast up before the Newton loss
        newton = NewtonLoss(
            ranking_loss_per_set,
            variant=method,
            lam=RANK_LAM[method],
            eig_floor=RANK_EIG_FLOOR[method],
            hessian_method="finite_difference",
        )
    batches = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        images, values = train.sample(RANK_BATCH, batches)
        s = _scores(model, images)
        loss = ranking_loss_per_set(s, values).mean() if newton is None else newton(s.double(), values)
        opt.zero_grad()
        loss.backward()
        opt.step()
    images, values = test
    with torch.no_grad():
        correct = _scores(model, images).argsort(-1) == values.argsort(-1)
    return correct.all(-1).float().mean().item(), correct.float().mean().item()


# ------------------------------------------------------------------------------------------------------- main


def main(steps=None, seed: int = 0) -> dict:
    """Runs both experiments and prints the table; returns ``{"classification": {(optimizer, method): (acc after
    one epoch or None, final acc)}, "ranking": {method: (EM, EW)}, "seconds": float}`` (test accuracies in [0, 1],
    means over 3 seeds: ``seed``, ``seed + 1``, ``seed + 2``)."""
    require_extras("newton")
    cls_steps = CLS_STEPS if steps is None else steps
    rank_steps = RANK_STEPS if steps is None else steps
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: threads only wait for each other on a busy machine
    start = time.perf_counter()
    try:
        print(f"Newton losses against the plain loss (thesis table 7.1 in kind), seed {seed}")
        data = load_digits_splits()
        test_idx = data[2][2]
        print(
            f"(a) digits classification, MLP, {cls_steps} steps of {CLS_BATCH}, test accuracy on {len(test_idx)} "
            f"images (mean of {CLS_SEEDS} seeds): after 1 epoch / at the end"
        )
        classification = {}
        for optimizer in CLS_OPTIMIZERS:
            for method in CLS_METHODS:
                runs = [
                    train_classifier(data, method, optimizer, cls_steps, seed + k, test_idx) for k in range(CLS_SEEDS)
                ]
                first = [r[0] for r in runs if r[0] is not None]
                acc = (sum(first) / len(first) if first else None, sum(r[1] for r in runs) / len(runs))
                classification[optimizer, method] = acc
                lam = "" if method == "regular" else f"(lam {CLS_LAM[optimizer, method]:g})"
                head = "-" if acc[0] is None else f"{100 * acc[0]:5.1f}%"
                print(f"  {optimizer:<5} {LABELS[method]:<10} {lam:<11} {head:>6} / {100 * acc[1]:5.1f}%", flush=True)

        from .sort import load_splits

        _, test_sets = load_splits(torch.Generator().manual_seed(0))
        test = test_sets.sample(2000, torch.Generator().manual_seed(seed + 7))
        print(
            f"(b) ranking sets of {N} two-digit numbers through a relaxed sorting network ({NETWORK}, {RELAXATION}, "
            f"steepness {STEEPNESS:g}), Adam, {rank_steps} steps of {RANK_BATCH} sets; test EM and EW on 2000 sets, "
            f"mean +- sd of {RANK_SEEDS} seeds"
        )
        ranking = {}
        for method in RANK_METHODS:
            t0 = time.perf_counter()
            runs = torch.tensor([train_ranker(method, rank_steps, seed + k, test) for k in range(RANK_SEEDS)])
            ranking[method] = tuple(runs.mean(0).tolist())
            lam = "" if method == "regular" else f"(lam {RANK_LAM[method]:g})"
            (em, ew), (em_sd, ew_sd) = runs.mean(0).tolist(), runs.std(0).tolist() if RANK_SEEDS > 1 else (0, 0)
            print(
                f"  {LABELS[method]:<10} {lam:<11} EM {100 * em:5.1f}% +- {100 * em_sd:3.1f}   "
                f"EW {100 * ew:5.1f}% +- {100 * ew_sd:3.1f}   ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    print(f"took {seconds:.0f} s")
    return {"classification": classification, "ranking": ranking, "seconds": seconds}
