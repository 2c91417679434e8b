"""A convolutional logic gate network (a small LogicTreeNet) classifies scikit-learn's digits, then runs packed.

Data: the 1797 8x8 digit images of scikit-learn, split 80/20 (the split of the dense ``logic`` demo), each pixel
(0..16) binarized by ``relaxops.logic.Thermometer`` at 3 thresholds (> 2, > 6, > 10): Boolean images [3, 8, 8].
Model (Petersen et al. 2024's LogicTreeNet, scaled down): two blocks of ``LogicConv2d`` (3x3 receptive field,
padding 1, trees of depth 3: 8 leaves, 7 gates per output channel and position) followed by ``OrPooling2d(2)``,
32 then 96 channels ([3, 8, 8] -> [32, 4, 4] -> [96, 2, 2]); then Flatten, two ``LogicLayer``s of 2000 gates and
``GroupSum(10, tau)``. Every gate starts with the residual initialisation (the pass-through gate ``a`` at logit
5, torchlogix 0.2.2's default). Training: Adam, batch 100, softmax cross-entropy, in train mode (relaxed gates);
the hyperparameters were chosen on a validation split of the training images. Then the network is discretized
and evaluated as the float eval-mode forward and as ``relaxops.PackedLogicNet(model, input_shape=(3, 8, 8))``
(the trees and OR windows lowered to two-input gates, simplified, 64 images a machine word), which must agree bit
for bit.

Baseline: the dense logic network of the same gate budget (Flatten, 4 ``LogicLayer``s of a quarter of the conv
network's gates each, trained the same way): it costs the same packed inference (gates per image) and differs only
in the convolutional structure (tree kernels shared over positions, OR pooling), which is what the demo is about; a
float CNN would instead compare a different kind of model (multiply-adds, no packed inference).

``--compare torchlogix``: the same architecture built from torchlogix 0.2.2's layers (``LogicConv2d``,
``OrPooling2d``, ``LogicDense``, ``GroupSum``; its raw parametrization and residual initialisation, the same
logit 5), trained on the same bits with the same optimiser, learning rate, steps, batches (the same sequence) and
seed, evaluated the same way (discretized eval mode); both accuracies and training times are printed.

What to expect with the defaults (seed 0, 2-core AMD EPYC shared with other work, load average 3-4.7,
OMP_NUM_THREADS=1: `python -m relaxops demo convlogic --compare torchlogix`, 6 min 15 s wall in all): trained in
61 s (2000 steps); test accuracy untrained 7.5%, train mode 96.7%, eval mode 96.4%, packed identical; 31776 gates
per image, 5096 after the exact simplification; the dense network of the same budget (4 x 7940 gates) 95.8%
(35 s); packed inference ~50-80 ns per image on one thread, the float eval-mode forward ~80 us (two threads were
slower than one at that load). torchlogix: 97.5% in eval mode, trained in 267 s (4.4x our time). The 1.1-point gap
is the random draw of the connections, not the implementation: our network trained with torchlogix's connections
(same seed, batches and hyperparameters) reaches 97.5% too.
"""

from __future__ import annotations

import math
import os
import time

import torch
from torch import nn

import relaxops
from relaxops import _ext
from relaxops.logic import OrPooling2d, Thermometer

from ._extras import require_extras
from .logic import FLOAT_BATCH, RUNS, THRESHOLDS, THROUGHPUT_BATCH, accuracy, per_image_ns, print_throughput, split

CONV = (32, 96)  # output channels of the two LogicConv2d blocks
KERNEL, DEPTH = 3, 3
DENSE = (2000, 2000)
TAU = 5.0
STEPS, BATCH, LR = 2000, 100, 0.05  # tau, lr: the best of 7 pairs on a validation split
RESIDUAL_P = math.exp(5) / (math.exp(5) + 15)  # softmax probability of gate a at logit 5 (and 0 for the others)
INPUT_SHAPE = (len(THRESHOLDS), 8, 8)
COMPARE = ("torchlogix",)


def load_images(gen: torch.Generator):
    """``((x_train, y_train), (x_test, y_test))``: thermometer bits [N, 3, 8, 8] (float 0/1) and labels; the
    80/20 split of the dense logic demo (the same permutation for the same generator state)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)  # [N, 1, 8, 8] in 0..16
    x = Thermometer(thresholds=[float(t) for t in THRESHOLDS])(pixels)  # [N, 3, 8, 8]: pixel > t
    return split(x, torch.tensor(digits.target), gen)


def _sizes():
    """The spatial side after each conv block (padding 1 keeps it; each OR pooling halves it), and the flat width."""
    side = INPUT_SHAPE[1]
    sides = []
    for _ in CONV:
        side //= 2
        sides.append(side)
    return sides, CONV[-1] * sides[-1] ** 2


def make_model(seed: int) -> nn.Sequential:
    """Our LogicTreeNet: (LogicConv2d, OrPooling2d) x 2, Flatten, LogicLayer x 2, GroupSum, residual init."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    layers, c_in = [], INPUT_SHAPE[0]
    for c_out in CONV:
        layers += [
            relaxops.LogicConv2d(
                c_in,
                c_out,
                KERNEL,
                DEPTH,
                padding=KERNEL // 2,
                init="residual",
                residual_probability=RESIDUAL_P,
                generator=gen,
            ),
            OrPooling2d(2),
        ]
        c_in = c_out
    dims = [_sizes()[1], *DENSE]
    layers += [nn.Flatten()] + [
        relaxops.LogicLayer(i, o, init="residual", residual_probability=RESIDUAL_P) for i, o in zip(dims[:-1], dims[1:])
    ]
    return nn.Sequential(*layers, relaxops.GroupSum(10, tau=TAU))


def make_torchlogix_model(seed: int) -> nn.Sequential:
    """The same architecture in torchlogix 0.2.2's layers (its defaults: raw parametrization, residual init at
    logit 5, fixed random connections)."""
    from relaxops.bench.logic import _torchlogix_layers

    tl = _torchlogix_layers()
    torch.manual_seed(seed)
    layers, c_in, side = [], INPUT_SHAPE[0], INPUT_SHAPE[1]
    for c_out, pooled in zip(CONV, _sizes()[0]):
        layers += [
            tl.LogicConv2d(
                in_dim=side,
                channels=c_in,
                num_kernels=c_out,
                tree_depth=DEPTH,
                receptive_field_size=KERNEL,
                padding=KERNEL // 2,
            ),
            tl.OrPooling2d(2, 2),
        ]
        c_in, side = c_out, pooled
    dims = [_sizes()[1], *DENSE]
    layers += [nn.Flatten()] + [tl.LogicDense(i, o) for i, o in zip(dims[:-1], dims[1:])]
    return nn.Sequential(*layers, tl.GroupSum(10, tau=TAU))


def num_model_gates() -> int:
    """Gates of one image's forward before simplification: every tree gate at every output position, the two-input
    OR gates of the pooling windows (3 per 2x2 window), the dense gates."""
    sides, _ = _sizes()
    gates = 0
    for c_out, pooled in zip(CONV, sides):
        gates += c_out * (2**DEPTH - 1) * (2 * pooled) ** 2 + c_out * pooled**2 * 3
    return gates + sum(DENSE)


def make_dense_model(seed: int, gates: int) -> nn.Sequential:
    """The baseline: 4 dense logic layers of ``gates / 4`` gates (rounded to a multiple of 10), same init."""
    torch.manual_seed(seed)
    width = gates // 40 * 10
    dims = [math.prod(INPUT_SHAPE)] + [width] * 4
    layers = [
        relaxops.LogicLayer(i, o, init="residual", residual_probability=RESIDUAL_P) for i, o in zip(dims[:-1], dims[1:])
    ]
    return nn.Sequential(nn.Flatten(), *layers, relaxops.GroupSum(10, tau=TAU))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, seed: int, desc: str) -> float:
    """Adam on the cross-entropy of ``model(x[idx])`` for ``steps`` batches drawn from a generator seeded with
    ``seed`` (so every model sees the same batches); returns the wall time in seconds."""
    from tqdm import tqdm

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    model.train()
    t0 = time.perf_counter()
    for _ in tqdm(range(steps), desc=desc, unit="step", leave=False, mininterval=1.0):
        idx = torch.randint(0, len(x), (BATCH,), generator=gen)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """``(train-mode accuracy, eval-mode accuracy, eval-mode scores)``; leaves the model in eval mode."""
    model.train()
    relaxed = accuracy(model(x), y)
    model.eval()
    scores = model(x)
    return relaxed, accuracy(scores, y), scores


def main(steps=None, seed: int = 0, compare=None) -> None:
    require_extras("convlogic")
    if compare is not None and compare not in COMPARE:
        raise ValueError(f"compare must be one of {list(COMPARE)} or None, got {compare!r}")
    steps = STEPS if steps is None else steps
    (x_train, y_train), (x_test, y_test) = load_images(torch.Generator().manual_seed(seed))
    model = make_model(seed)
    gates = num_model_gates()
    print(
        f"digits: {len(x_train)} train / {len(x_test)} test images, thermometer bits {list(INPUT_SHAPE)}; model: "
        f"LogicConv2d(3x3, depth {DEPTH}) + OrPooling2d(2) with {CONV[0]} and {CONV[1]} channels, "
        f"{len(DENSE)} x {DENSE[0]} dense gates, GroupSum(10, tau={TAU:g}); {gates} gates per image"
    )
    _, untrained, _ = evaluate(model, x_test, y_test)
    train_s = train(model, x_train, y_train, steps, seed + 1, "training")
    relaxed, discrete, eval_scores = evaluate(model, x_test, y_test)
    print(f"trained {steps} steps in {train_s:.1f} s")
    print(
        f"test accuracy: untrained {untrained:.2%}; train mode (relaxed gates) {relaxed:.2%}, eval mode "
        f"(discrete gates) {discrete:.2%}"
    )

    net = relaxops.PackedLogicNet(model, input_shape=INPUT_SHAPE)
    packed_counts = net(x_test.bool())
    if not torch.equal(packed_counts, (eval_scores * TAU).round().to(torch.int32)):
        raise RuntimeError("packed inference differs from the eval-mode forward")
    print(f"packed inference accuracy {accuracy(packed_counts, y_test):.2%}; class counts identical to eval mode")
    print(f"gates: {gates} before simplification, {net.num_gates} after")

    dense = make_dense_model(seed, gates)
    dense_s = train(dense, x_train, y_train, steps, seed + 1, "dense baseline")
    _, dense_acc, _ = evaluate(dense, x_test, y_test)
    width = dense[1].out_dim
    print(
        f"baseline, dense logic network of the same gate budget (4 x {width} gates): eval-mode test accuracy "
        f"{dense_acc:.2%} (trained in {dense_s:.1f} s)"
    )

    gen = torch.Generator().manual_seed(seed + 2)
    big = x_test[torch.randint(0, len(x_test), (THROUGHPUT_BATCH,), generator=gen)].bool()
    threads = _ext._C.num_threads()  # torch's: what num_threads=0 (the default) uses
    one = relaxops.PackedLogicNet(model, input_shape=INPUT_SHAPE, num_threads=1)
    fns = {"packed, 1 thread": lambda: one(big)}
    if threads > 1:
        fns[f"packed, {threads} threads"] = lambda: net(big)
    rows = per_image_ns(fns, len(big))
    with torch.no_grad():
        xf = big[:FLOAT_BATCH].float()
        n = torch.get_num_threads()
        rows.update(per_image_ns({f"float eval mode, {n} thread{'s' * (n > 1)}": lambda: model(xf)}, FLOAT_BATCH))
    print(
        f"throughput ({gates} gates per image, {one.num_gates} after simplification; batch {len(big)}, float: "
        f"{FLOAT_BATCH}; median of {RUNS} runs):"
    )
    print_throughput(rows, threads)

    if compare == "torchlogix":
        compare_torchlogix(seed, steps, (x_train, y_train), (x_test, y_test), discrete, train_s)


def compare_torchlogix(seed, steps, train_data, test_data, ours: float, ours_s: float) -> None:
    from relaxops.bench.peers import missing

    reason = missing("torchlogix")
    if reason is not None:
        print(f"--compare torchlogix: skipped, {reason}")
        return
    theirs = make_torchlogix_model(seed)
    theirs_s = train(theirs, *train_data, steps, seed + 1, "torchlogix")
    relaxed, discrete, _ = evaluate(theirs, *test_data)
    print(
        f"torchlogix 0.2.2, the same architecture, data, optimiser, steps, batches and seed: test accuracy train "
        f"mode {relaxed:.2%}, eval mode {discrete:.2%}, trained in {theirs_s:.1f} s"
    )
    print(
        f"  relaxops eval mode {ours:.2%} in {ours_s:.1f} s: accuracy {100 * (ours - discrete):+.2f} points, "
        f"training {theirs_s / ours_s:.1f}x faster (load average {os.getloadavg()[0]:.1f})"
    )
