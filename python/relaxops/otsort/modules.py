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
    """Soft sorted values and soft ranks of the input along ``dim`` from one optimal transport
    (docs/math/otsort.md §3.5).

    The constructor takes the keyword options of :func:`relaxops.ot_sort` (``epsilon``, ``descending``,
    ``num_targets``, ``b``, ``y``, ``epsilon0``, ``annealing``, ``tolerance``, ``max_iterations``, ``squashing``,
    ``backward``, ``dim``, ``hard``, ``backend``); ``forward(x, a=None, *, lengths=None, mask=None)`` returns
    :class:`OTSortResult` ``(values, ranks)`` (padded rows and ``hard`` as in :func:`relaxops.ot_sort` and
    :func:`relaxops.ot_rank`).
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
        dim: int = -1,
        hard: bool = False,
        backend: str = "auto",
    ):
        super().__init__()
        functional._loop_args(epsilon, epsilon0, annealing, tolerance, max_iterations, squashing, backward)
        functional._check_hard(hard)
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
            dim=dim,
            hard=hard,
            backend=backend,
        )

    def forward(self, x: torch.Tensor, a=None, *, lengths=None, mask=None) -> OTSortResult:
        o = self.options
        loop = {k: o[k] for k in ("epsilon", "epsilon0", "annealing", "tolerance", "max_iterations")}
        r, cols, rows, _ = functional._sort_and_rank(
            x,
            o["dim"],
            lengths,
            mask,
            o["num_targets"],
            a,
            o["b"],
            o["y"],
            o["descending"],
            loop,
            o["squashing"],
            o["backward"],
            False,
            o["hard"],
            o["backend"],
        )
        return OTSortResult(r.positions(cols).to(x.dtype), r.elements(rows).to(x.dtype))

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items() if not isinstance(v, torch.Tensor))
