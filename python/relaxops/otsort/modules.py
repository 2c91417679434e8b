"""``OTSort``: the optimal-transport sort as a module (the options of ``relaxops.ot_sort`` held as attributes)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import functional


class OTSortResult(NamedTuple):
    """``values [..., m]`` soft sorted values, ``ranks [..., n]`` soft zero-based ranks (one transport for both)."""

    values: torch.Tensor
    ranks: torch.Tensor


class OTSort(torch.nn.Module):
    """Soft sorted values and soft ranks of the last dimension of the input from one optimal transport
    (docs/math/otsort.md §3.5).

    The constructor takes the keyword options of :func:`relaxops.ot_sort` (``epsilon``, ``descending``,
    ``num_targets``, ``b``, ``y``, ``epsilon0``, ``annealing``, ``tolerance``, ``max_iterations``, ``squashing``,
    ``backward``, ``backend``); ``forward(x, a=None)`` returns :class:`OTSortResult` ``(values, ranks)``.
    """

    def __init__(
        self,
        epsilon: float = 1e-3,
        *,
        descending: bool = False,
        num_targets: int | None = None,
        b=None,
        y=None,
        epsilon0: float | None = 0.1,
        annealing: float = 0.95,
        tolerance: float = 1e-2,
        max_iterations: int = 2000,
        squashing="logistic",
        backward: str = "implicit",
        backend: str = "auto",
    ):
        super().__init__()
        functional._loop_args(epsilon, epsilon0, annealing, tolerance, max_iterations, squashing, backward)
        self.options = dict(
            epsilon=epsilon,
            descending=descending,
            num_targets=num_targets,
            b=b,
            y=y,
            epsilon0=epsilon0,
            annealing=annealing,
            tolerance=tolerance,
            max_iterations=max_iterations,
            squashing=squashing,
            backward=backward,
            backend=backend,
        )

    def forward(self, x: torch.Tensor, a=None) -> OTSortResult:
        o = self.options
        n = x.shape[-1] if isinstance(x, torch.Tensor) else 1
        m = functional._num_targets(o["num_targets"], n, o["b"], o["y"])
        cols, rows, _ = functional._transport(
            x,
            a=a,
            b=o["b"],
            y=o["y"],
            m=m,
            v_of=functional._ranks_targets(n),
            descending=o["descending"],
            epsilon=o["epsilon"],
            epsilon0=o["epsilon0"],
            annealing=o["annealing"],
            tolerance=o["tolerance"],
            max_iterations=o["max_iterations"],
            squashing=o["squashing"],
            backward=o["backward"],
            want_plan=False,
            backend=o["backend"],
        )
        return OTSortResult(cols.to(x.dtype), rows.to(x.dtype))

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items() if not isinstance(v, torch.Tensor))
