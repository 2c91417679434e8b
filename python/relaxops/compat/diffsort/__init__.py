"""Drop-in replacement for the ``diffsort`` package (0.2.x), running relaxops' sorting-network kernels.

Switch with one import::

    # from diffsort import DiffSortNet, sort, bitonic_network, odd_even_network, get_sorting_network
    from relaxops.compat.diffsort import (DiffSortNet, sort, bitonic_network, odd_even_network,
                                          get_sorting_network)

diffsort's submodules are here too: ``relaxops.compat.diffsort.functional`` (``sort``, ``execute_sort``,
``s_best``, ``NormalCDF``, ``SORTING_NETWORK_TYPE``), ``.networks`` (``bitonic_network``, ``odd_even_network``,
``get_sorting_network``) and ``.diffsort`` (``DiffSortNet``).

Same signatures, same attributes, same results: float64 agrees with diffsort to ~1e-12 and float32 to ~1e-5
(outputs and gradients), for every network, relaxation ("distribution") and steepness. Instead of multiplying
dense ``[c, n]`` layer matrices (O(L n^2) per row for the values, O(L n^3) for the permutation matrix), the
dense networks are converted once into comparator tables and run by relaxops' kernels.

The dense network format (``bitonic_network``, ``odd_even_network``, ``get_sorting_network``): a list of
layers, each ``(split_a [c, n], split_b [c, n], combine_min [n, c], combine_max [n, c])``. Slot ``t``
reads wires ``a = argmax split_a[t]`` and ``b = argmax split_b[t]``, computes ``alpha = f(x_b - x_a)`` and
writes the relaxed minimum to the wire marked in ``combine_min[:, t]`` and the maximum to the one in
``combine_max[:, t]``.
A slot with ``a == b`` whose two halves return to that wire (weights summing to 1, diffsort uses 0.5 and 0.5)
is a pass-through. :func:`sort` accepts any list in this format, built by these functions, by diffsort or by
hand, as long as every layer is a comparator layer (each wire written exactly once, by the slot that reads
it); anything else raises a ``ValueError`` naming the layer and slot.

Deliberate differences from diffsort 0.2.0:

* n = 1: ``sort`` and ``DiffSortNet`` return the identity (diffsort's bitonic network has no layers there
  and its ``sort`` crashes with an ``IndexError``).
* ``bitonic`` keeps diffsort's padded wiring comparator for comparator, which is not a sorting network for
  some n that are not powers of two (22, 38, 42-46, 54, 70, 74-78, 82-94, 102, 106-110, 118 up to 129):
  a ``RuntimeWarning`` is issued once per such n. ``relaxops.sort(x, network="bitonic")`` is a corrected
  wiring for every n.
* float16/bfloat16 inputs are computed in float32 and the outputs cast back (diffsort evaluates only the
  sigmoid in float32 and mixes in float16, so its half-precision results are less accurate).
* Failed ``assert`` checks of diffsort become ``ValueError`` (wrong input shape, device mismatch, conflicting
  ``distribution``/``interpolation_type``) or ``TypeError`` (non-tensor, non-float input) with a message.
  Unknown network types and distributions raise :class:`DiffsortCompatError`, a subclass of both
  ``NotImplementedError`` (what diffsort raises) and ``ValueError``.
* ``distribution='gaussian'`` gradients: diffsort's backward uses ``1/steepness`` rounded to float32 (it saves
  ``torch.tensor(sigma)``), so its float64 gradients are off by ~1e-8 relative unless ``1/steepness`` is exact
  in float32; ours use the exact value (forward values agree either way).
* ``steepness`` must be a finite number > 0, and ``art_lambda`` a number in [0, 1] where it is used
  (``distribution='logistic_phi'``; diffsort does not check). Other distributions ignore ``art_lambda``, as
  diffsort does: ``art_lambda=None`` works with them.
* The network matrices are constants: no gradient flows into them. ``sort`` also accepts numpy layer
  matrices (diffsort needs tensors).
* ``DiffSortNet.sorting_network`` is built on first access (it is large: O(L n^2) floats); ``forward`` does
  not need it unless the attribute was read or replaced.
"""

from .diffsort import DiffSortNet
from .functional import SORTING_NETWORK_TYPE, DiffsortCompatError, sort
from .networks import bitonic_network, get_sorting_network, odd_even_network

__all__ = [
    "DiffSortNet",
    "sort",
    "bitonic_network",
    "odd_even_network",
    "get_sorting_network",
    "DiffsortCompatError",
    "SORTING_NETWORK_TYPE",
]
