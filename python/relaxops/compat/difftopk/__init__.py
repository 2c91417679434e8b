"""Drop-in replacement for the ``difftopk`` package (0.2.x), running relaxops' kernels.

Switch with one import::

    # from difftopk import DiffTopkNet, TopKCrossEntropyLoss, NeuralSort, SoftSort
    from relaxops.compat.difftopk import DiffTopkNet, TopKCrossEntropyLoss, NeuralSort, SoftSort

difftopk's submodules are here too, each with its public names (the docstring of each lists what it leaves out):
``relaxops.compat.difftopk.difftopk`` (``DiffTopkNet``), ``.functional`` (``topk``, ``execute_topk``, ...),
``.networks`` (``get_sorting_network``), ``.losses`` (``TopKCrossEntropyLoss``), ``.neuralsort``, ``.softsort`` and
``.smooth_topk`` (``SmoothTopKLoss``, ``SmoothHardTopKLoss``).

Same signatures, attributes and results as difftopk 0.2.0: ``DiffTopkNet(...)(x)`` returns ``(None, X_top)``
with ``X_top [B, n, k]`` (column ``k - 1`` = rank 1), ``TopKCrossEntropyLoss`` the same scalar loss for every
``diffsort_method`` (``'bitonic'``, ``'bitonic__non_sparse'``, ``'splitter_selection'``, ``'odd_even'``,
``'neuralsort'``, ``'softsort'``) and every ``top1_mode``; ``NeuralSort``/``SoftSort`` the same matrices;
``SmoothTopKLoss``/``SmoothHardTopKLoss`` the same losses. ``'bitonic'`` keeps the original (diffsort) wiring,
relaxops' ``"bitonic_original"``, comparator for comparator (also for ``sparse=True``, whose network is
the same). The top-k product is always evaluated sparsely (bi-directionally, O(L n k)); torch-sparse is not
needed.

Deliberate differences from difftopk 0.2.0:

* ``sparse=True`` works without torch-sparse, and every network works with either ``sparse`` value
  (difftopk only has ``sparse=True`` for bitonic and splitter selection and ``sparse=False`` for bitonic and
  odd-even; the results do not depend on it).
* ``TopKCrossEntropyLoss`` with a network method and ``distribution=None`` (its default) raises a
  :class:`DifftopkCompatError` at construction; difftopk fails with ``NotImplementedError`` at the first
  forward. Unknown ``diffsort_method`` values also raise at construction.
* Failed ``assert`` checks become ``ValueError`` (shapes, ``k < m < n``, ``P_K`` not summing to 1,
  ``top1_mode``) or ``TypeError``; labels out of range raise a ``ValueError``.
* ``p_k`` with one entry and ``top1_mode='smce'`` gives the softmax cross-entropy (difftopk fails: it takes the
  log of the float 0).
* float64 inputs stay float64 (difftopk mixes in a float32 identity matrix and fails); float16/bfloat16 are
  computed in float32. Nothing is printed (difftopk prints the layer count of every splitter selection network
  and a note when torch-sparse is missing).
* ``NeuralSort(hard=True)`` reproduces difftopk's choice (one-hot per element, see the class), which differs
  from ``relaxops.neuralsort(hard=True)`` (one-hot per position, as Grover et al.).
* ``SmoothTopKLoss``/``SmoothHardTopKLoss`` with ``k = 1``: difftopk's gradient treats the constant
  ``e_0 = 1`` as if it depended on the scores (off by ``-sigmoid(.)/B`` on the other classes); ours is exact.
  Its float64 gradients at large scores are also less accurate (a coarse ``log(1 - exp(u))``).
* ``get_sorting_network`` builds the dense networks (``'bitonic'``, ``'odd_even'``) only; the sparse types'
  torch-sparse matrices are not built (``DiffTopkNet(..., sparse=True)`` does not need them).
  ``DiffTopkNet.sorting_network`` holds the dense layers ``(split_a, split_b, combine_min, combine_max)`` of its
  network for every type and ``sparse`` value (difftopk: torch-sparse matrices and index arrays for
  ``sparse=True``); it is built on first access, and ``forward`` runs what it holds once it was read or replaced.
* ``art_lambda`` is read only by ``distribution='logistic_phi'`` (which needs a number in [0, 1]); as in
  difftopk, the other distributions ignore it, so ``art_lambda=None`` works with them.
"""

from .difftopk import DiffTopkNet
from .functional import topk
from .losses import TopKCrossEntropyLoss
from .networks import DifftopkCompatError, get_sorting_network
from .neuralsort import NeuralSort
from .smooth_topk import SmoothHardTopKLoss, SmoothTopKLoss
from .softsort import SoftSort

__all__ = [
    "DiffTopkNet",
    "topk",
    "get_sorting_network",
    "TopKCrossEntropyLoss",
    "NeuralSort",
    "SoftSort",
    "SmoothTopKLoss",
    "SmoothHardTopKLoss",
    "DifftopkCompatError",
]
