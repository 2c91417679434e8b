"""``difftopk.losses``: ``TopKCrossEntropyLoss`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...sortnet.losses import check_p_k, topk_cross_entropy
from ..diffsort.functional import used_art_lambda
from .difftopk import DiffTopkNet
from .networks import DifftopkCompatError

__all__ = ["TopKCrossEntropyLoss"]

# TopKCrossEntropyLoss.diffsort_method -> relaxops method
_METHODS = {
    "bitonic": "bitonic_original",
    "bitonic__non_sparse": "bitonic_original",
    "splitter_selection": "splitter_selection",
    "odd_even": "odd_even",
    "neuralsort": "neuralsort",
    "softsort": "softsort",
}


class TopKCrossEntropyLoss(torch.nn.Module):
    """difftopk's ``TopKCrossEntropyLoss``: ``forward(outputs [B, n], labels [B]) -> scalar`` (batch mean).

    Args:
        diffsort_method: ``'bitonic'``, ``'bitonic__non_sparse'``, ``'splitter_selection'``, ``'odd_even'``,
            ``'neuralsort'`` or ``'softsort'``.
        inverse_temperature: steepness of the networks; ``1 / tau`` of NeuralSort/SoftSort.
        p_k: ``[P_K(1), ..., P_K(K)]``, summing to 1.
        n: number of classes.
        m: top-m preselection (``K < m < n``), or ``None``.
        distribution: relaxation of the networks (required for them, see the module notes).
        art_lambda, device, top1_mode: as in difftopk (``top1_mode`` in ``'sm'``, ``'smce'``, ``'sort'``).
    """

    def __init__(
        self,
        diffsort_method: str,
        inverse_temperature: float,
        p_k,
        n: int,
        m: int = None,
        distribution: str = None,
        art_lambda: float = 0.25,
        device: str = "cpu",
        top1_mode: str = "sm",
    ):
        super().__init__()
        if diffsort_method not in _METHODS:
            raise DifftopkCompatError(
                f"diffsort_method `{diffsort_method}` unknown; difftopk's methods are {list(_METHODS)}"
            )
        if _METHODS[diffsort_method] not in ("neuralsort", "softsort") and distribution is None:
            raise DifftopkCompatError(
                f"diffsort_method {diffsort_method!r} needs a distribution (difftopk's "
                "default None fails at the first forward); e.g. distribution='cauchy'"
            )
        self.diffsort_method = diffsort_method
        self.inverse_temperature = inverse_temperature
        self.p_k = p_k
        self.k = check_p_k(p_k).numel()
        self.device = device
        if top1_mode not in ("sm", "smce", "sort"):
            raise ValueError(f"top1_mode must be one of ['sm', 'smce', 'sort'], got {top1_mode!r}")
        self.top1_mode = top1_mode
        self.n, self.m = n, m
        if m is not None and not self.k < m < n:
            raise ValueError(f"m must satisfy k < m < n with k = len(p_k): {self.k} < {m} < {n} does not hold")
        self.distribution, self.art_lambda = distribution, art_lambda
        if _METHODS[diffsort_method] not in ("neuralsort", "softsort"):
            self.top_k_net = DiffTopkNet(
                diffsort_method.replace("__non_sparse", ""),
                m or n,
                self.k,
                sparse=diffsort_method in ("bitonic", "splitter_selection"),
                device=device,
                steepness=inverse_temperature,
                art_lambda=art_lambda,
                distribution=distribution,
            )

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if not isinstance(outputs, torch.Tensor) or outputs.dim() != 2 or outputs.shape[1] != self.n:
            shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
            raise ValueError(f"outputs must be [batch, n] = [batch, {self.n}], got {shape}")
        distribution = self.distribution or "cauchy"
        return topk_cross_entropy(
            outputs,
            labels,
            self.p_k,
            _METHODS[self.diffsort_method],
            distribution,
            self.inverse_temperature,
            used_art_lambda(distribution, self.art_lambda),
            self.m,
            self.top1_mode,
        )
