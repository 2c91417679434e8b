"""The four algorithmic-supervision tasks of "Learning with Algorithmic Supervision via Continuous Relaxations"
(docs/math/algorithms.md §4), scaled down to minutes on a CPU, on generated data: each trains a small network
through a relaxed algorithm from supervision of the algorithm's output only, and prints its test metric against
the untrained network and a directly supervised baseline.

* ``sort``: sets of four-digit numbers (scikit-learn digit images) ordered through relaxed bubble sort;
* ``shortest_path``: Warcraft-like 12x12 maps, a CNN predicts cell costs, trained through the relaxed shortest path;
* ``silhouette``: a mesh predicted from one silhouette, trained through relaxops' rasterizer (GenDR);
* ``levenshtein``: strings of digit images, trained from their edit distances through the relaxed edit distance.

Each module's docstring gives the set-up, the baselines, what was scaled down and the results to expect (seed 0,
with relaxops.algorithms' fused kernels; some seed-1 figures were measured with plain-PyTorch versions of the same
relaxations, before the kernels landed). ``main(task=None)`` runs a short version of the Levenshtein task
(QUICK_STEPS steps).

The tasks run on one PyTorch thread (restored afterwards): their operations are small (8x8 digit images, 12x12
grids, batches of 16-32), so intra-op threads mostly wait on each other, and on a 2-core machine shared with other
work two threads made training steps 6-12 times slower than one (measured at a load average of 3).
"""

from __future__ import annotations

import torch

from .._extras import require_extras

TASKS = ("sort", "shortest_path", "silhouette", "levenshtein")
QUICK_TASK, QUICK_STEPS = "levenshtein", 150


def main(steps=None, seed: int = 0, task=None) -> dict:
    """Runs one task (``task`` in TASKS; None: QUICK_TASK with QUICK_STEPS steps unless ``steps`` is given) and
    returns its metrics, ``{row: (metric, ...)}``."""
    require_extras("algorithms")
    if task is None:
        task, steps = QUICK_TASK, QUICK_STEPS if steps is None else steps
    if task == "sort":
        from .sorting import main as run
    elif task == "shortest_path":
        from .shortest_path import main as run
    elif task == "silhouette":
        from .silhouette import main as run
    elif task == "levenshtein":
        from .levenshtein import main as run
    else:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(steps=steps, seed=seed)
    finally:
        torch.set_num_threads(threads)
