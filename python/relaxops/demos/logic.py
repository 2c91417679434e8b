"""A logic gate network classifies scikit-learn's digits, then runs as logic: bit-packed and as exported C.

Data: the 1797 8x8 digit images of scikit-learn, split 80/20, each pixel (0..16) binarized at 3 thresholds
(> 2, > 6, > 10): 192 Boolean features. Model (difflogic's "straight" architecture): Flatten, 4 LogicLayers of
4000 gates ('unique' connections: neighbouring features first), GroupSum(10 classes, tau = 20). Training: Adam,
learning rate 0.01, batch 100, softmax cross-entropy, in train mode (relaxed gates). Then the network is
discretized (each neuron keeps its most likely gate) and evaluated three ways that must agree bit for bit:
the float eval-mode forward, ``relaxops.PackedLogicNet`` (64 images a machine word, bitwise gates, popcount
group sums) and the standalone C library exported by ``relaxops.logic.compile.CompiledLogicNet``. The
difference of the train-mode and eval-mode test accuracies is printed as the discretization gap. ``--parametrization``
(softmax, light, walsh) and ``--sampling`` (soft, hard, gumbel_soft, gumbel_hard) choose the gates' form and training
mode (docs/math/logic.md §10); the defaults are the 16-gate softmax, soft.

What to expect with the defaults (seed 0, 2-core AMD EPYC, about 25 s: ~11 s training, ~6 s in the C compiler):
test accuracy 96.7% in train mode and 96.7% after discretization; the packed and C predictions are identical to
the eval-mode ones; of the 16000 gates, 7166 are left after the exact netlist simplification; the packed network
takes ~60-90 ns per image on one core (1.26x faster on two, measured at a load average of 1.2), the exported C
library ~650 ns, the float eval-mode forward ~35-45 us. One thread and all threads are timed alike (interleaved
runs, median); when all threads are not faster, the demo says why (e.g. other processes held the cores).
"""

from __future__ import annotations

import os
import statistics
import textwrap
import time

import torch
from torch import nn

import relaxops
from relaxops import _ext
from relaxops.logic.compile import CompiledLogicNet

from ._extras import require_extras

THRESHOLDS = (2, 6, 10)  # pixel > t, pixel in 0..16
WIDTH, LAYERS, TAU = 4000, 4, 20.0
STEPS, BATCH, LR = 2000, 100, 0.01
THROUGHPUT_BATCH = 1 << 16
FLOAT_BATCH = 1 << 12  # the float forward takes ~40 us an image: a smaller batch
RUNS, RUN_S = 7, 0.1  # timed runs per row (the median is printed), seconds a run


def split(x: torch.Tensor, y: torch.Tensor, gen: torch.Generator):
    """The 80/20 split of the digits demos: ``((x_train, y_train), (x_test, y_test))`` by a random permutation."""
    perm = torch.randperm(len(x), generator=gen)
    cut = int(0.8 * len(x))
    return (x[perm[:cut]], y[perm[:cut]]), (x[perm[cut:]], y[perm[cut:]])


def load_data(gen: torch.Generator):
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = torch.tensor(digits.data, dtype=torch.float32)  # [N, 64] in 0..16
    x = torch.cat([pixels > t for t in THRESHOLDS], dim=1)  # [N, 192] Boolean
    return split(x, torch.tensor(digits.target), gen)


def make_model(num_inputs: int, parametrization: str = "softmax", sampling: str = "soft") -> nn.Sequential:
    """The demo's network; ``parametrization`` / ``sampling``: the gates' (docs/math/logic.md §10)."""
    kw = (
        {}
        if (parametrization, sampling) == ("softmax", "soft")
        else dict(parametrization=parametrization, sampling=sampling)
    )
    dims = [num_inputs] + [WIDTH] * LAYERS
    layers = [relaxops.LogicLayer(i, o, connections="unique", **kw) for i, o in zip(dims[:-1], dims[1:])]
    return nn.Sequential(nn.Flatten(), *layers, relaxops.GroupSum(10, tau=TAU))


def accuracy(scores: torch.Tensor, y: torch.Tensor) -> float:
    return (scores.argmax(-1) == y).float().mean().item()


def per_image_ns(fns: dict, batch: int) -> dict:
    """``{name: (ns per image, cores busy)}``: each callable is warmed up, then timed in RUNS runs of the same
    number of calls (enough for RUN_S of the slowest), the callables taking turns so that background load hits
    them alike; the median run is reported. Cores busy: the process' CPU time over the wall time of its runs."""
    slowest = 0.0
    for fn in fns.values():
        fn()
        t0 = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t0)
    calls = max(1, round(RUN_S / slowest))
    walls, cpus = {name: [] for name in fns}, dict.fromkeys(fns, 0.0)
    for _ in range(RUNS):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                fn()
            walls[name].append(time.perf_counter() - w0)
            cpus[name] += time.process_time() - c0
    return {name: (statistics.median(w) / calls / batch * 1e9, cpus[name] / sum(w)) for name, w in walls.items()}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_note(threads: int, speedup: float, cores_busy: float, cores: int) -> str:
    """The multi-thread speed-up, and why when ``threads`` threads were not faster than one (under 1.1x)."""
    line = f"{threads} threads: {speedup:.2f}x one thread"
    if speedup >= 1.1:
        return line
    line += f" (they kept {cores_busy:.1f} cores busy on a machine with {cores} cores): not faster, because "
    if cores_busy < min(threads, cores) - 0.5:
        return line + (
            f"other processes held the cores (load average {os.getloadavg()[0]:.1f}), so the threads "
            "waited for each other; run the demo again on an idle machine"
        )
    if threads > cores:
        return line + "there are more threads than cores (OMP_NUM_THREADS or torch.set_num_threads)"
    return line + "what the threads share (memory bandwidth, caches) limits them here"


def main(steps=None, seed: int = 0, parametrization: str = "softmax", sampling: str = "soft") -> None:
    require_extras("logic")
    from tqdm import tqdm

    steps = STEPS if steps is None else steps
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_data(gen)
    model = make_model(x_train.shape[1], parametrization, sampling)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    print(
        f"digits: {len(x_train)} train / {len(x_test)} test images, {x_train.shape[1]} Boolean features; "
        f"model: {LAYERS} x {WIDTH} logic gates ({parametrization}, sampling {sampling}), GroupSum(10, tau={TAU:g})"
    )
    t0 = time.perf_counter()
    for _ in tqdm(range(steps), desc="training", unit="step", leave=False, mininterval=1.0):
        idx = torch.randint(0, len(x_train), (BATCH,), generator=gen)
        loss = loss_fn(model(x_train[idx].float()), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"trained {steps} steps in {time.perf_counter() - t0:.1f} s (last loss {loss.item():.3f})")

    with torch.no_grad():
        model.train()
        train_mode = accuracy(model(x_test.float()), y_test)
        model.eval()
        eval_scores = model(x_test.float())
    eval_mode = accuracy(eval_scores, y_test)
    print(
        f"test accuracy: train mode (relaxed gates) {train_mode:.2%}, eval mode (discrete gates) {eval_mode:.2%}; "
        f"discretization gap {100 * (train_mode - eval_mode):+.2f} points"
    )

    net = relaxops.PackedLogicNet(model)
    packed_counts = net(x_test)
    t0 = time.perf_counter()
    lib = CompiledLogicNet(model, num_bits=64)
    lib.compile(opt_level=1)
    compile_s = time.perf_counter() - t0
    c_counts = lib(x_test)
    expected = (eval_scores * TAU).round().to(torch.int32)
    same = torch.equal(packed_counts, expected) and torch.equal(c_counts, expected)
    print(
        f"packed inference accuracy {accuracy(packed_counts, y_test):.2%}, exported C library "
        f"{accuracy(c_counts, y_test):.2%} (compiled in {compile_s:.1f} s); class counts identical to eval "
        f"mode: {same}"
    )
    if not same:
        raise RuntimeError("packed / C inference differ from the eval-mode forward")

    big = x_test[torch.randint(0, len(x_test), (THROUGHPUT_BATCH,), generator=gen)]
    threads = _ext._C.num_threads()  # torch's: what num_threads=0 (the default) uses
    one = relaxops.PackedLogicNet(model, num_threads=1)
    fns = {"packed, 1 thread": lambda: one(big)}
    if threads > 1:
        fns[f"packed, {threads} threads"] = lambda: net(big)
    xn = big.numpy()
    fns["exported C, 1 thread"] = lambda: lib(xn)
    rows = per_image_ns(fns, len(big))
    with torch.no_grad():
        xf = big[:FLOAT_BATCH].float()
        name = f"float eval mode, {torch.get_num_threads()} threads"
        rows.update(per_image_ns({name: lambda: model(xf)}, FLOAT_BATCH))
    print(
        f"throughput ({LAYERS * WIDTH} gates per image, {one.num_gates} after simplification; batch {len(big)}, "
        f"float: {FLOAT_BATCH}; median of {RUNS} runs):"
    )
    print_throughput(rows, threads)


def print_throughput(rows: dict, threads: int) -> None:
    """Prints the rows of ``per_image_ns`` and the multi-thread note of the rows ``"packed, 1 thread"`` and
    ``"packed, {threads} threads"`` (``threads``: torch's thread count)."""
    for name, (ns, _) in rows.items():
        print(f"  {name:30s} {ns:8.1f} ns/image  {1e9 / ns:12,.0f} images/s")
    if threads == 1:
        print(
            f"  torch uses one thread here (this machine has {_cores()} cores; OMP_NUM_THREADS="
            f"{os.environ.get('OMP_NUM_THREADS')}), so there is no multi-thread figure"
        )
    else:
        speedup = rows["packed, 1 thread"][0] / rows[f"packed, {threads} threads"][0]
        note = threads_note(threads, speedup, rows[f"packed, {threads} threads"][1], _cores())
        print(textwrap.fill(note, 116, initial_indent="  ", subsequent_indent="    "))
