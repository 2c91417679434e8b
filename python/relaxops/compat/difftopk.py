"""Drop-in replacement for the ``difftopk`` package (0.2.x), running relaxops' kernels.

Switch with one import::

    # from difftopk import DiffTopkNet, TopKCrossEntropyLoss, NeuralSort, SoftSort
    from relaxops.compat.difftopk import DiffTopkNet, TopKCrossEntropyLoss, NeuralSort, SoftSort

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
"""

from __future__ import annotations

import torch

from ..baselines import smooth_topk as _smooth_topk
from ..baselines.functional import neuralsort, softsort
from ..sortnet import modules as _modules
from ..sortnet.functional import topk as _topk
from ..sortnet.losses import check_p_k, topk_cross_entropy
from . import diffsort as _diffsort

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

# difftopk network type -> relaxops network kind with the same comparators
_KINDS = {"bitonic": "bitonic_original", "splitter_selection": "splitter_selection", "odd_even": "odd_even"}
# TopKCrossEntropyLoss.diffsort_method -> relaxops method
_METHODS = {"bitonic": "bitonic_original", "bitonic__non_sparse": "bitonic_original",
            "splitter_selection": "splitter_selection", "odd_even": "odd_even", "neuralsort": "neuralsort",
            "softsort": "softsort"}


class DifftopkCompatError(NotImplementedError, ValueError):
    """Unknown network type, method or distribution: difftopk raises ``NotImplementedError`` there; this is
    also a ``ValueError``."""


class DiffTopkNet(_modules.DiffTopkNet):
    """difftopk's ``DiffTopkNet``: ``forward(vectors [B, size]) -> (None, X_top [B, size, k])``.

    Args:
        sorting_network_type: ``'bitonic'`` (difftopk's wiring), ``'splitter_selection'`` or ``'odd_even'``.
        size, k, sparse, device, steepness, art_lambda, interpolation_type, distribution: as in difftopk
            (see :class:`relaxops.DiffTopkNet`).
    """

    def __init__(self, sorting_network_type: str, size: int, k: int, sparse: bool = False, device: str = "cpu",
                 steepness: float = 10.0, art_lambda: float = 0.25, interpolation_type: str = None,
                 distribution: str = "cauchy"):
        if sorting_network_type not in _KINDS:
            raise DifftopkCompatError(f"Sorting network `{sorting_network_type}` unknown; difftopk's network "
                                      f"types are {list(_KINDS)}")
        super().__init__(sorting_network_type, size, k, sparse, device, steepness, art_lambda, interpolation_type,
                         distribution)

    def _network(self) -> str:
        return _KINDS[self.sorting_network_type]

    def forward(self, vectors):
        if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2:
            shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
            raise ValueError(f"vectors must be a 2-D tensor [batch, {self.size}], got {shape}")
        return super().forward(vectors)


def get_sorting_network(type: str, n: int, device, k: int = None) -> list:
    """difftopk's ``get_sorting_network`` for the dense types ``'bitonic'`` and ``'odd_even'`` (float32 layer
    matrices on ``device``, as diffsort's); ``k`` is unused there."""
    if type in ("bitonic", "odd_even"):
        return _diffsort.get_sorting_network(type, n, device)
    raise DifftopkCompatError(f"Sorting network `{type}`: only the dense types 'bitonic' and 'odd_even' are "
                              "built as matrices; use DiffTopkNet(..., sparse=True) for the sparse networks")


def topk(sorting_network, vectors, k, steepness=10.0, art_lambda=0.25, distribution="cauchy", sparse=False):
    """difftopk's ``topk`` on a dense network (from :func:`get_sorting_network` or diffsort): returns
    ``(None, X_top [B, n, k])``. ``sparse`` is accepted and does not change the result."""
    steepness, art_lambda = _diffsort._check_call(vectors, distribution, steepness, art_lambda)
    key = _diffsort._network_key(sorting_network, vectors)
    return None, _topk(vectors, k, key, distribution, steepness, art_lambda)


class NeuralSort(torch.nn.Module):
    """difftopk's ``NeuralSort(tau, hard)``: ``forward(scores [B, n]) -> X [B, n, n]`` with ``X[b, c, r]`` the
    weight of element ``c`` at ascending position ``r`` (see :func:`relaxops.neuralsort`).

    ``hard=True`` is difftopk's straight-through variant: each ELEMENT's row becomes the one-hot of its most
    likely position (not necessarily a permutation; ``relaxops.neuralsort(hard=True)`` takes each position's
    most likely element instead, as Grover et al.)."""

    def __init__(self, tau=1.0, hard=False):
        super().__init__()
        self.hard, self.tau = hard, tau

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        X = neuralsort(scores, self.tau)
        if not self.hard:
            return X
        one_hot = torch.zeros_like(X).scatter_(-1, X.argmax(-1, keepdim=True), 1.0)
        return (one_hot - X).detach() + X


class SoftSort(torch.nn.Module):
    """difftopk's ``SoftSort(tau, hard, pow)``: ``forward(scores [B, n]) -> P [B, n, n]`` with rows = descending
    ranks, ``P[b, r, c] = softmax_c(-|s_[r] - s_c|^pow / tau)`` (the transpose of :func:`relaxops.softsort`
    of ``-scores``)."""

    def __init__(self, tau=1.0, hard=False, pow=1.0):
        super().__init__()
        self.hard, self.tau, self.pow = hard, tau, pow

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return softsort(-scores, self.tau, hard=self.hard, pow=self.pow).transpose(-2, -1)


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

    def __init__(self, diffsort_method: str, inverse_temperature: float, p_k, n: int, m: int = None,
                 distribution: str = None, art_lambda: float = 0.25, device: str = "cpu", top1_mode: str = "sm"):
        super().__init__()
        if diffsort_method not in _METHODS:
            raise DifftopkCompatError(f"diffsort_method `{diffsort_method}` unknown; difftopk's methods are "
                                      f"{list(_METHODS)}")
        if _METHODS[diffsort_method] not in ("neuralsort", "softsort") and distribution is None:
            raise DifftopkCompatError(f"diffsort_method {diffsort_method!r} needs a distribution (difftopk's "
                                      "default None fails at the first forward); e.g. distribution='cauchy'")
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
            self.top_k_net = DiffTopkNet(diffsort_method.replace("__non_sparse", ""), m or n, self.k,
                                         sparse=diffsort_method in ("bitonic", "splitter_selection"), device=device,
                                         steepness=inverse_temperature, art_lambda=art_lambda,
                                         distribution=distribution)

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if not isinstance(outputs, torch.Tensor) or outputs.dim() != 2 or outputs.shape[1] != self.n:
            shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
            raise ValueError(f"outputs must be [batch, n] = [batch, {self.n}], got {shape}")
        return topk_cross_entropy(outputs, labels, self.p_k, _METHODS[self.diffsort_method],
                                  self.distribution or "cauchy", self.inverse_temperature, self.art_lambda, self.m,
                                  self.top1_mode)


class SmoothTopKLoss(_smooth_topk.SmoothTopKLoss):
    """difftopk's ``SmoothTopKLoss(num_classes, k, tau, device)``: the smooth top-k SVM loss of every sample,
    summed and divided by the batch size (see :func:`relaxops.baselines.smooth_topk_svm_loss`)."""

    def __init__(self, num_classes, k, tau=1, device="cpu"):
        super().__init__(num_classes, k, tau)
        self.device = device


class SmoothHardTopKLoss(_smooth_topk.SmoothHardTopKLoss):
    """difftopk's ``SmoothHardTopKLoss(num_classes, k, tau, device)``: the hard top-k SVM loss where the k-th
    and (k+1)-th scores are far apart (``>= k tau ln 1000``), the smooth one elsewhere."""

    def __init__(self, num_classes, k, tau=1, device="cpu"):
        super().__init__(num_classes, k, tau)
        self.device = device
