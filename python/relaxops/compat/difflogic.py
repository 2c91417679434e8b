"""Drop-in replacement for the ``difflogic`` package (0.1.x), running relaxops' kernels.

Switch with one import::

    # from difflogic import LogicLayer, GroupSum, PackBitsTensor, CompiledLogicNet
    from relaxops.compat.difflogic import LogicLayer, GroupSum, PackBitsTensor, CompiledLogicNet

Same signatures, attributes (``weights``, ``indices``, ``in_dim``, ``out_dim``, ``grad_factor``,
``implementation``, ``connections``, ``num_neurons``, ``num_weights``, ``given_x_indices_of_y_start`` /
``given_x_indices_of_y``; ``PackBitsTensor.t``, ``pad_len``, ``bit_count``), random calls (a seed gives the same
network) and results as difflogic 0.1.0. Both ``implementation`` values run relaxops' kernels (the C++ kernel on
CPU tensors, the GPU kernels on CUDA tensors); they differ only in the attribute.

Deliberate differences from difflogic 0.1.0:

* Everything works on CPU: training (C++ kernels instead of the 16-gate Python formulation), ``PackBitsTensor``
  and packed evaluation with ``device='cpu'``.
* The input gradient of a self-connected neuron (``a[j] == b[j]``) is the exact ``dy/da + dy/db``; difflogic's
  CUDA kernel computes ``2 dy/da`` (its Python path is exact). Nothing is printed on forward.
* ``CompiledLogicNet`` pads the batch with exactly ``pad_len`` rows (difflogic breaks for batches smaller than
  ``num_bits / 2``), compiles one-layer networks, requires the class count to divide the last layer, uses
  unsigned words and no ``-march=native`` (the library runs on any x86-64 / ARM CPU of its kind).
* Failed ``assert`` checks become ``ValueError`` (sizes, connections, ``k`` not dividing) or ``TypeError``;
  ``PackBitsTensor`` in training mode raises ``RuntimeError``.
* Packed evaluation keeps difflogic's in-place update of the ``PackBitsTensor`` (``x.t`` holds the last layer's
  bits afterwards) and returns the same object.
"""

from __future__ import annotations

import torch

from ..logic import compile as _compile
from ..logic import modules as _modules
from ..logic.packed import group_count, pack_bits

__all__ = ["LogicLayer", "GroupSum", "PackBitsTensor", "CompiledLogicNet"]

_WORD_DTYPES = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


class PackBitsTensor:
    """A Boolean batch ``t [B, D]`` packed along the batch, ``bit_count`` samples a word.

    ``t`` (attribute) is the ``[D, ceil(B / bit_count)]`` tensor of signed words (int8/16/32/64): bit ``s %
    bit_count`` of word ``s // bit_count`` is sample ``s``; ``pad_len = (bit_count - B % bit_count) % bit_count``.
    The bytes are the same for every word size, so relaxops stores 64-bit words and ``t`` is a view of them.
    """

    def __init__(self, t: torch.Tensor, bit_count: int = 32, device: str = "cuda"):
        if bit_count not in _WORD_DTYPES:
            raise ValueError(f"bit_count must be 8, 16, 32 or 64, got {bit_count!r}")
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"t must be a 2-D tensor [B, D], got {getattr(t, 'shape', type(t).__name__)}")
        self.bit_count = bit_count
        self.device = device
        self._packed = pack_bits(t.to(device).bool())
        B = t.shape[0]
        self.pad_len = (bit_count - B % bit_count) % bit_count

    @property
    def t(self) -> torch.Tensor:
        words = self._packed.words
        n = -(-self._packed.batch_size // self.bit_count)
        return words.view(_WORD_DTYPES[self.bit_count])[:, :n]

    def group_sum(self, k: int) -> torch.Tensor:
        """int32 ``[B, k]`` counts of ones in ``k`` contiguous groups of the features (not divided by tau)."""
        return group_count(self._packed, k)

    def flatten(self, *args, **kwargs) -> PackBitsTensor:
        return self

    def __repr__(self) -> str:
        bits = self._packed.unpack().t().int()
        return "\n".join("".join(str(v) for v in row.tolist()) for row in bits)


class LogicLayer(_modules.LogicLayer):
    """difflogic's ``LogicLayer(in_dim, out_dim, device='cuda', grad_factor=1., implementation=None,
    connections='random')``: see :class:`relaxops.LogicLayer`."""

    def __init__(self, in_dim: int, out_dim: int, device: str = "cuda", grad_factor: float = 1.0,
                 implementation: str | None = None, connections: str = "random"):
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


class CompiledLogicNet(_compile.CompiledLogicNet):
    """difflogic's ``CompiledLogicNet(model, device, num_bits, cpu_compiler, verbose)``: relaxops' class with
    difflogic's exact signature (relaxops' own takes ``input_shape`` too, for convolutional networks)."""

    def __init__(self, model, device="cpu", num_bits=64, cpu_compiler="gcc", verbose=False):
        super().__init__(model, device, num_bits, cpu_compiler, verbose)
