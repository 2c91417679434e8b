"""``difflogic.difflogic``: ``LogicLayer`` and ``GroupSum`` (see the package docstring).

Left out: ``LogicLayerCudaFunction``, the autograd function around difflogic's CUDA extension; relaxops' logic
layer op carries the autograd on every device.
"""

from __future__ import annotations

import torch

from ...logic import modules as _modules
from ...logic.connections import make_connections
from .packbitstensor import PackBitsTensor

__all__ = ["LogicLayer", "GroupSum"]


class LogicLayer(_modules.LogicLayer):
    """difflogic's ``LogicLayer(in_dim, out_dim, device='cuda', grad_factor=1., implementation=None,
    connections='random')``: see :class:`relaxops.LogicLayer`."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        device: str = "cuda",
        grad_factor: float = 1.0,
        implementation: str | None = None,
        connections: str = "random",
    ):
        if implementation is None:
            implementation = "cuda" if device == "cuda" else "python"
        if implementation not in ("cuda", "python"):
            raise ValueError(f"implementation must be 'cuda' or 'python', got {implementation!r}")
        super().__init__(in_dim, out_dim, connections=connections, grad_factor=grad_factor, device=device)
        self.device = device
        self.implementation = implementation

    @property
    def given_x_indices_of_y_start(self) -> torch.Tensor:
        return self.inverse_index()[0]

    @property
    def given_x_indices_of_y(self) -> torch.Tensor:
        """The neurons reading each input, in difflogic's layout (neuron ids; ``csr_entry // 2``)."""
        return self.inverse_index()[1] // 2

    def forward(self, x):
        if isinstance(x, PackBitsTensor):
            if self.training:
                raise RuntimeError("PackBitsTensor is not supported for the differentiable training mode")
            x._packed = super().forward(x._packed)
            return x
        return super().forward(x)

    def get_connections(self, connections: str, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
        """New connections ``(a, b)`` (int64 ``[out_dim]`` on ``device``) for this layer's sizes: ``'random'`` or
        ``'unique'``, drawn from the default CPU generator as difflogic draws them (does not change the layer)."""
        a, b = make_connections(connections, self.in_dim, self.out_dim)
        return a.to(device), b.to(device)


class GroupSum(_modules.GroupSum):
    """difflogic's ``GroupSum(k, tau=1., device='cuda')``; on a :class:`PackBitsTensor` it returns its int32
    counts ``[B, k]``."""

    def __init__(self, k: int, tau: float = 1.0, device: str = "cuda"):
        super().__init__(k, tau)
        self.device = device

    def forward(self, x):
        if isinstance(x, PackBitsTensor):
            return x.group_sum(self.k)
        return super().forward(x)
