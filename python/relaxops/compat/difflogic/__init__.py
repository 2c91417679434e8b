"""Drop-in replacement for the ``difflogic`` package (0.1.x), running relaxops' kernels.

Switch with one import::

    # from difflogic import LogicLayer, GroupSum, PackBitsTensor, CompiledLogicNet
    from relaxops.compat.difflogic import LogicLayer, GroupSum, PackBitsTensor, CompiledLogicNet

difflogic's submodules are here too: ``relaxops.compat.difflogic.difflogic`` (``LogicLayer``, ``GroupSum``),
``.functional`` (``bin_op``, ``bin_op_s``, ``get_unique_connections``, ``GradFactor``, ``BITS_TO_NP_DTYPE``),
``.packbitstensor`` (``PackBitsTensor``) and ``.compiled_model`` (``CompiledLogicNet``, ``ALL_OPERATIONS``,
``BITS_TO_DTYPE``); each module's docstring lists the names it leaves out and why.

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
  ``get_gate_code`` / ``get_layer_code`` write difflogic's statements (``inp[i]`` inputs, ``v<k>`` gates numbered
  across layers by ``prefix_sums``, ``out[j]`` for the last layer) with unsigned words (``BITS_TO_DTYPE``); a
  gate's expression may order its operands differently (``b & ~a`` for ``not_implied_by``), and a one-layer
  network reads ``inp`` (difflogic reads undefined gates). ``get_c_code`` does not call them: it writes the
  simplified netlist.
* Failed ``assert`` checks become ``ValueError`` (sizes, connections, ``k`` not dividing) or ``TypeError``;
  ``PackBitsTensor`` in training mode raises ``RuntimeError``.
* Packed evaluation keeps difflogic's in-place update of the ``PackBitsTensor`` (``x.t`` holds the last layer's
  bits afterwards) and returns the same object.
"""

from .compiled_model import CompiledLogicNet
from .difflogic import GroupSum, LogicLayer
from .packbitstensor import PackBitsTensor

__all__ = ["LogicLayer", "GroupSum", "PackBitsTensor", "CompiledLogicNet"]
