"""``difflogic.compiled_model``: ``CompiledLogicNet`` (see the package docstring), ``ALL_OPERATIONS`` (the gate
names in id order) and ``BITS_TO_DTYPE`` (the C word type of ``get_gate_code`` / ``get_layer_code``).

Left out: ``BITS_TO_ZERO_LITERAL``, ``BITS_TO_ONE_LITERAL``, ``BITS_TO_C_DTYPE`` and ``BITS_TO_NP_DTYPE``, constants
of difflogic's code generator for signed words (relaxops' generator uses unsigned words; ``BITS_TO_NP_DTYPE`` is in
``functional``, for ``PackBitsTensor``).
"""

from __future__ import annotations

import operator

from ...logic import compile as _compile
from ...logic.gates import GATE_NAMES, NUM_GATES

__all__ = ["CompiledLogicNet", "ALL_OPERATIONS", "BITS_TO_DTYPE"]

ALL_OPERATIONS = list(GATE_NAMES)
BITS_TO_DTYPE = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


class CompiledLogicNet(_compile.CompiledLogicNet):
    """difflogic's ``CompiledLogicNet(model, device, num_bits, cpu_compiler, verbose)``: relaxops' class with
    difflogic's exact signature (relaxops' own takes ``input_shape`` too, for convolutional networks)."""

    def __init__(self, model, device="cpu", num_bits=64, cpu_compiler="gcc", verbose=False):
        super().__init__(model, device, num_bits, cpu_compiler, verbose)

    def get_gate_code(self, var1: str, var2: str, gate_op: int) -> str:
        """C expression of gate ``gate_op`` (0..15, ``ALL_OPERATIONS``) on the words ``var1`` (A) and ``var2`` (B),
        of type ``BITS_TO_DTYPE[num_bits]``."""
        try:
            op = None if isinstance(gate_op, bool) else operator.index(gate_op)
        except TypeError:
            op = None
        if op is None or not 0 <= op < NUM_GATES:
            raise ValueError(f"gate_op must be a gate id in [0, {NUM_GATES}), got {gate_op!r}")
        word = BITS_TO_DTYPE[self.num_bits]
        expr = _compile.GATE_EXPR[op].replace("ONES", f"~({word}) 0").format(a=var1, b=var2)
        return f"({word}) ({expr})"

    def get_layer_code(self, layer_a, layer_b, layer_op, layer_id: int, prefix_sums) -> list[str]:
        """C statements of layer ``layer_id`` (gates ``a``, ``b``, ``op``): layer 0 reads ``inp[i]``, layer ``l``
        reads ``v<prefix_sums[l - 1] + i>``; gate ``j`` becomes ``const W v<prefix_sums[l] + j> = ...;``, or
        ``out[j] = ...;`` in the last layer (``layer_id == len(prefix_sums) - 1``)."""
        word = BITS_TO_DTYPE[self.num_bits]
        last = layer_id == len(prefix_sums) - 1

        def operand(i) -> str:
            return f"inp[{int(i)}]" if layer_id == 0 else f"v{prefix_sums[layer_id - 1] + int(i)}"

        code = []
        for var_id, (a, b, op) in enumerate(zip(layer_a, layer_b, layer_op)):
            expr = self.get_gate_code(operand(a), operand(b), op)
            target = f"out[{var_id}]" if last else f"const {word} v{prefix_sums[layer_id] + var_id}"
            code.append(f"\t{target} = {expr};")
        return code
