"""Newton losses on sorting supervision (thesis Table 7.3; docs/experiments.md).

The sorting task of ``sorting`` (four-digit MNIST numbers, the CNN, EM and EW), trained with four sorting losses
(a Cauchy and a logistic odd-even sorting network, NeuralSort, SoftSort), each plainly and through
``relaxops.training.NewtonLoss``: the Hessian variant and the empirical Fisher variant, one set of n scores being
one sample of the Newton loss. The thesis reports neither the damping nor the inverse temperatures: the damping
here is the one ``python -m relaxops demo newton`` chose on a validation split (Hessian 3 with eigenvalues floored
at 0.1, Fisher 1), the steepness Table 3.8's (n = 10: its n = 9 value), tau = 1 for NeuralSort and SoftSort. The
thesis: Adam at 10^-3, batch 100, 1e5 steps, 10 seeds; ``small`` scale: n = 5, the small scale of ``sorting``.
"""

from __future__ import annotations

from . import sorting
from .runner import Record, format_table

TRAININGS = ["regular", "hessian", "fisher"]
METHODS = ["cauchy", "logistic", "neuralsort", "softsort"]

# Table 7.3: (EM, EW) in percent per (n, method, training)
PAPER = {
    5: {
        "cauchy": {"regular": (85.09, 93.31), "hessian": (85.11, 93.31), "fisher": (84.95, 93.25)},
        "logistic": {"regular": (53.56, 77.04), "hessian": (75.02, 88.53), "fisher": (63.11, 79.28)},
        "neuralsort": {"regular": (71.33, 87.10), "hessian": (83.31, 92.54), "fisher": (83.93, 92.80)},
        "softsort": {"regular": (70.70, 86.75), "hessian": (83.87, 92.72), "fisher": (84.03, 92.82)},
    },
    10: {
        "cauchy": {"regular": (55.29, 87.06), "hessian": (56.49, 87.44), "fisher": (56.12, 87.35)},
        "logistic": {"regular": (12.31, 58.81), "hessian": (42.14, 75.35), "fisher": (25.72, 52.18)},
        "neuralsort": {"regular": (24.26, 74.47), "hessian": (48.76, 84.83), "fisher": (39.23, 81.14)},
        "softsort": {"regular": (27.46, 76.02), "hessian": (55.07, 86.89), "fisher": (54.00, 86.56)},
    },
}

SCALES = {
    "smoke": dict(sorting.SCALES["smoke"], methods=["logistic", "softsort"], trainings=TRAININGS),
    "small": dict(sorting.SCALES["small"], ns=[5], methods=METHODS, trainings=TRAININGS, steps=600, seeds=2),
    "paper": dict(sorting.SCALES["paper"], ns=[5, 10], methods=METHODS, trainings=TRAININGS, steps=100_000, lr=1e-3,
                  seeds=10),
}  # fmt: skip
METRICS = sorting.METRICS


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    summary = sorting.run(cfg, data, seeds, record)
    for entry in summary:
        published = PAPER.get(entry["n"], {}).get(entry["method"], {}).get(entry["training"])
        entry["paper"] = None if published is None else {"EM": published[0], "EW": published[1]}
    return summary


def report(summary: list[dict]) -> str:
    return format_table(summary, ("n", "method", "training"), METRICS)
