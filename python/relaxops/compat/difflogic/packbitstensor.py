"""``difflogic.packbitstensor``: ``PackBitsTensor`` (see the package docstring)."""

from __future__ import annotations

import torch

from ...logic.packed import group_count, pack_bits

__all__ = ["PackBitsTensor"]

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
