"""First-run demos on data that ships with installed packages (scikit-learn's digits; nothing is downloaded)."""

from __future__ import annotations

from typing import NamedTuple


class Demo(NamedTuple):
    shows: str  # what the demo trains and what it prints
    duration: str  # measured once with the default steps on a 2-core CPU
    writes: str  # the files it leaves behind, and where


# The facts that `python -m relaxops demo --help` lists. Durations: one run each with the default steps on a
# 2-core AMD EPYC (KVM), load average 1.1-1.9 (this run included), `time python -m relaxops demo NAME`: wall time
# 46 s (sort), 15 s (topk), 24 s (logic), 31 s (render). At a load average of 2-7 (other builds running) the same
# runs took 164 s, 288 s, 164 s and 38 s.
# algorithms (one thread, load average 2.5-4, fused kernels, commit 35731ff): 50 s (default), 39 s (sort), 102 s
# (shortest_path), 39 s (silhouette), 80 s (levenshtein).
# newton (one thread, load average 1.8-2.1): 53 s.
# depth (2 threads, the cpu buffers kernels of commit feb2795): 15 s at load average 2.3, 33 s at 4.7-5.4.
DEMOS = {
    "sort": Demo(
        "A small CNN learns to order sets of 5 two-digit numbers (images made of scikit-learn digits) from "
        "ordering supervision only: its scores go through a relaxed odd-even sorting network "
        "(relaxops.sort, Cauchy relaxation) and the relaxed permutation matrix is trained against the true one. "
        "Prints the exact-match and element-wise test accuracy against chance and the untrained model.",
        "about 45 s (600 steps)",
        "no files",
    ),
    "topk": Demo(
        "A 100-class task (two-digit numbers, 40% wrong training labels): the same MLP trained with softmax "
        "cross-entropy and with relaxops.TopKCrossEntropyLoss (a splitter selection network; --method picks "
        "another ranking). Prints the top-1/top-5 test accuracy of both and the top-5 along training.",
        "about 15 s (3000 steps per loss)",
        "no files",
    ),
    "logic": Demo(
        "A logic gate network (4 layers of 4000 gates) learns scikit-learn's digits, is discretized, and runs "
        "as bit-packed inference (relaxops.PackedLogicNet) and as an exported C library (compiled with gcc), "
        "with identical predictions. Prints the train-mode and eval-mode accuracies (the discretization gap) and "
        "the throughput of each, one thread against all threads measured the same way. --parametrization and "
        "--sampling choose the gates' parametrization and training mode.",
        "about 25 s (2000 steps; ~6 s of it in gcc)",
        "no files (the C library is built in a temporary directory, removed at the end)",
    ),
    "render": Demo(
        "GenDR inverse rendering: a sphere mesh is fitted to 8 silhouettes of an object (soft IoU through the "
        "differentiable rasterizer), then a camera pose is recovered from one image. Prints the hard IoU and "
        "the angle error as it goes.",
        "about 30 s (100 + 100 steps)",
        "4 PNG files in the current directory: relaxops-render-shape-before.png, relaxops-render-shape-after.png, "
        "relaxops-render-pose-before.png, relaxops-render-pose-after.png (top row the targets, bottom row the "
        "fit, labelled)",
    ),
    "depth": Demo(
        "Inverse rendering from the renderer's buffers (relaxops.render.render_buffers): a camera pose is recovered "
        "from one depth and normal map of an object, then a sphere mesh is fitted to the depth and normal maps of 4 "
        "views (soft buffers: every channel a softmax over depth; gradients through coverage and barycentrics). "
        "Prints the depth and normal errors, the silhouette IoU and the angle error or voxel IoU as it goes.",
        "about 15 s (60 + 60 steps)",
        "4 PNG files in the current directory: relaxops-depth-pose-before.png, relaxops-depth-pose-after.png, "
        "relaxops-depth-shape-before.png, relaxops-depth-shape-after.png (the target's depth and normal shading "
        "above the fit's, labelled)",
    ),
    "rank": Demo(
        "Learning to rank with a differentiable Spearman loss on scikit-learn's diabetes data: the same MLP "
        "trained once per rank operator (sorting networks with each relaxation, NeuralSort, SoftSort, fast soft "
        "ranks, optimal-transport ranks) at a matched temperature, and with MSE regression for comparison. "
        "Prints each one's test Spearman correlation and training time.",
        "about 10-20 s (300 steps per operator)",
        "no files",
    ),
    "algorithms": Demo(
        "The four tasks of learning with algorithmic supervision (relaxops.algorithms), each a small network "
        "trained only through a relaxed algorithm's output on generated data, its test metric printed against the "
        "untrained network and a directly supervised baseline. --task picks one: sort (four-digit numbers of "
        "scikit-learn digits ordered through relaxed bubble sort), shortest_path (Warcraft-like 12x12 maps, cell "
        "costs learned from shortest paths through the relaxed shortest path), silhouette (a mesh predicted from "
        "one silhouette, learned through the GenDR rasterizer), levenshtein (digit images classified without "
        "labels, learned from edit distances through the relaxed edit distance). Without --task: a short "
        "levenshtein run.",
        "about 50 s without --task (150 steps per model); about 40 s with --task sort (1000 steps) or "
        "silhouette (500), 80 s with levenshtein (400), 100 s with shortest_path (600)",
        "no files",
    ),
    "perturbed": Demo(
        "Randomly perturbed structured predictors (relaxops.training): a small network learns to sort sequences "
        "of generated numbers through a perturbed bipartite matching trained with direct loss minimisation "
        "(the official code's set-up of 'Learning Randomly Perturbed Structured Predictors'), three ways: "
        "learned noise scale sigma, fixed sigma = 1, no noise (sigma = 0). Prints the percentage of test "
        "sequences sorted perfectly and the proportion of misplaced elements of each, over several repetitions.",
        "about 1 min (300 steps per method, 40 repetitions at once)",
        "no files",
    ),
    "newton": Demo(
        "Newton losses (relaxops.training.NewtonLoss) against the plain loss, thesis table 7.1 in kind: an MLP "
        "classifies scikit-learn's digits with softmax cross-entropy (plain, element-wise Hessian, Hessian and "
        "empirical Fisher Newton losses; SGD and Adam), and an MLP ranks sets of two-digit numbers through a relaxed "
        "sorting network (plain, Fisher and Hessian Newton losses). Prints the test accuracies of each.",
        "about 55 s (600 classification steps x 24 runs, 600 ranking steps x 9 runs)",
        "no files",
    ),
    "convlogic": Demo(
        "A convolutional logic gate network (a small LogicTreeNet: thermometer bits, two blocks of tree "
        "convolutions of depth 3 with OR pooling, a dense logic head) learns scikit-learn's digits, is discretized "
        "and runs as bit-packed inference (relaxops.PackedLogicNet) with identical predictions. Prints the untrained, "
        "train-mode and eval-mode accuracies, the gates before and after simplification, the dense logic network of "
        "the same gate budget, and the images per second of the float and packed forwards. --compare torchlogix "
        "also trains the same architecture in torchlogix 0.2.2's layers and prints both accuracies and train times.",
        "about 2 min (2000 steps, then 2000 steps of the dense baseline); --compare torchlogix adds about 4.5 min",
        "no files",
    ),
}


def run_demo(name: str, steps=None, **options) -> None:
    """Runs a demo; ``options``: seed (topk, logic, render, depth, rank, algorithms, perturbed, newton, convlogic),
    method (topk), task (algorithms), compare (convlogic), parametrization and sampling (logic)."""
    if name not in DEMOS:
        raise ValueError(f"unknown demo {name!r}; available: {', '.join(DEMOS)}")
    if name == "sort":
        from .sort import main
    elif name == "topk":
        from .topk import main
    elif name == "logic":
        from .logic import main
    elif name == "convlogic":
        from .convlogic import main
    elif name == "rank":
        from .rank import main
    elif name == "algorithms":
        from .algorithms import main
    elif name == "perturbed":
        from .perturbed import main
    elif name == "newton":
        from .newton import main
    elif name == "depth":
        from .depth import main
    else:
        from .render import main
    main(steps=steps, **options)
