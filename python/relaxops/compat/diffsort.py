"""Drop-in replacement for the ``diffsort`` package (0.2.x), running relaxops' sorting-network kernels.

Switch with one import::

    # from diffsort import DiffSortNet, sort, bitonic_network, odd_even_network, get_sorting_network
    from relaxops.compat.diffsort import (DiffSortNet, sort, bitonic_network, odd_even_network,
                                          get_sorting_network)

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
* ``steepness`` must be a finite number > 0 and ``art_lambda`` a number in [0, 1] (diffsort does not check).
* The network matrices are constants: no gradient flows into them. ``sort`` also accepts numpy layer
  matrices (diffsort needs tensors).
* ``DiffSortNet.sorting_network`` is built on first access (it is large: O(L n^2) floats); ``forward`` does
  not need it unless the attribute was read or replaced.
"""

from __future__ import annotations

import collections
import hashlib
import numbers
import weakref

import numpy as np
import torch

from ..sortnet import networks as _networks
from ..sortnet.functional import _sort_rows
from ..sortnet.relaxations import RELAXATIONS

__all__ = [
    "DiffSortNet",
    "sort",
    "bitonic_network",
    "odd_even_network",
    "get_sorting_network",
    "DiffsortCompatError",
    "SORTING_NETWORK_TYPE",
]

SORTING_NETWORK_TYPE = list  # diffsort: List[torch.tensor]

# diffsort network type -> relaxops network kind with the same comparators
_KINDS = {"bitonic": "bitonic_original", "odd_even": "odd_even"}


class DiffsortCompatError(NotImplementedError, ValueError):
    """Unknown network type or distribution: diffsort raises ``NotImplementedError`` here; this is also a
    ``ValueError``, so both ``except`` styles work."""


# --- dense networks ---------------------------------------------------------------------------------------


def _check_n(n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    return int(n)


def _dense_layer(n: int, slots) -> tuple:
    """Dense matrices of one layer from its slots ``(min wire, max wire)`` in order (``i == j``: pass)."""
    c = len(slots)
    i = np.fromiter((s[0] for s in slots), dtype=np.int64, count=c)
    j = np.fromiter((s[1] for s in slots), dtype=np.int64, count=c)
    t = np.arange(c)
    split_a, split_b = np.zeros((c, n)), np.zeros((c, n))
    combine_min, combine_max = np.zeros((n, c)), np.zeros((n, c))
    split_a[t, np.minimum(i, j)] = 1.0  # diffsort reads the lower physical wire as `a`
    split_b[t, np.maximum(i, j)] = 1.0
    weight = np.where(i == j, 0.5, 1.0)  # a pass-through slot returns half of its wire through each output
    combine_min[i, t] = weight
    combine_max[j, t] = weight
    return split_a, split_b, combine_min, combine_max


def _untouched(n: int, layer) -> list:
    touched = np.zeros(n, dtype=bool)
    for i, j in layer:
        touched[i] = touched[j] = True
    return np.flatnonzero(~touched).tolist()


def bitonic_network(n: int) -> list:
    """diffsort's bitonic network on ``n`` wires as dense numpy float64 matrices (see the module docstring).

    The comparators are relaxops' ``"bitonic_original"`` wiring; the slots are in diffsort's order: the
    network is built on ``N = 2**ceil(log2 n)`` padded wires whose lowest ``N - n`` are discarded, slots
    follow the padded pairs ``(lo, lo + m)`` in increasing ``lo``, and a real wire paired with a discarded
    one gets a pass-through slot at its pair's position. ``n = 1`` gives an empty list, as in diffsort. This
    wiring does not sort every input for some ``n`` (see the module docstring).
    """
    n = _check_n(n)
    if n == 1:
        return []
    M = (n - 1).bit_length()
    o = (1 << M) - n
    layers = iter(_networks.bitonic_original_layers(n))
    out = []
    for b in range(M):
        for t in range(b + 1):
            m = 1 << (b - t)
            layer = next(layers)
            # slot key: the lower padded wire of the slot's padded pair; a pass-through wire w sits at padded
            # index w + o and its (discarded, lower) partner is (w + o) XOR m
            keyed = [(min(i, j) + o, i, j) for i, j in layer]
            keyed += [((w + o) ^ m, w, w) for w in _untouched(n, layer)]
            keyed.sort()
            out.append(_dense_layer(n, [(i, j) for _, i, j in keyed]))
    return out


def odd_even_network(n: int) -> list:
    """diffsort's odd-even transposition network on ``n`` wires as dense numpy float64 matrices.

    ``n`` layers; layer ``l`` compares ``(p, p + 1)`` for ``p = l % 2, l % 2 + 2, ...``; its slots are the
    comparators in increasing ``p`` followed by pass-through slots for the unpaired wires (0 and/or n - 1).
    """
    n = _check_n(n)
    out = []
    for layer in _networks.odd_even_layers(n):
        out.append(_dense_layer(n, list(layer) + [(w, w) for w in _untouched(n, layer)]))
    return out


def get_sorting_network(type: str, n: int, device) -> list:
    """diffsort's ``get_sorting_network``: ``'bitonic'`` or ``'odd_even'`` as float32 tensors on ``device``.

    Raises :class:`DiffsortCompatError` (a ``NotImplementedError``) for other types. The returned network is
    remembered (weakly), so :func:`sort` does not need to convert it.
    """
    if type == "bitonic":
        dense = bitonic_network(n)
    elif type == "odd_even":
        dense = odd_even_network(n)
    else:
        raise DiffsortCompatError(
            f"Sorting network `{type}` unknown; diffsort's network types are 'bitonic' and 'odd_even'")
    net = [[torch.from_numpy(m).float().to(device) for m in layer] for layer in dense]
    _remember(net, _KINDS[type], int(n))
    return net


# --- dense network -> comparator tables (cached) -----------------------------------------------------------

_CACHE_SIZE = 128
_cache: collections.OrderedDict = collections.OrderedDict()


def _matrices(network):
    if not isinstance(network, (list, tuple)):
        raise TypeError("sorting_network must be a list of layers (split_a, split_b, combine_min, "
                        f"combine_max), got {type(network).__name__}")
    flat = []
    for l, layer in enumerate(network):
        if not isinstance(layer, (list, tuple)) or len(layer) != 4:
            got = type(layer).__name__ + (f" of length {len(layer)}" if hasattr(layer, "__len__") else "")
            raise ValueError(f"sorting_network layer {l} must be (split_a, split_b, combine_min, "
                             f"combine_max), got {got}")
        for m in layer:
            if not isinstance(m, (torch.Tensor, np.ndarray)) or m.ndim != 2:
                got = type(m).__name__ + (f" of shape {tuple(m.shape)}" if hasattr(m, "shape") else "")
                raise TypeError(f"sorting_network layer {l}: the matrices must be 2-D torch tensors or numpy "
                                f"arrays, got {got}")
            flat.append(m)
    return flat


def _fingerprint(flat) -> tuple:
    """Identity and version of every matrix: cheap, and changes when a tensor is modified in place."""
    parts = []
    for m in flat:
        if isinstance(m, torch.Tensor):
            parts.append((id(m), m.data_ptr(), m._version, tuple(m.shape), tuple(m.stride()), m.dtype))
        else:  # numpy has no version counter: hash the contents
            h = hashlib.blake2b(np.ascontiguousarray(m).view(np.uint8).data, digest_size=16).digest()
            parts.append((id(m), m.shape, m.dtype.str, h))
    return tuple(parts)


def _remember(network, key: str, n: int) -> None:
    flat = _matrices(network)
    _cache[_fingerprint(flat)] = (tuple(weakref.ref(m) for m in flat), key, n)
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)


def _lookup(flat):
    fp = _fingerprint(flat)
    entry = _cache.get(fp)
    if entry is not None and len(entry[0]) == len(flat) and all(r() is m for r, m in zip(entry[0], flat)):
        _cache.move_to_end(fp)
        return entry[1], entry[2]
    return None


def _as_numpy(m) -> np.ndarray:
    if isinstance(m, torch.Tensor):
        return m.detach().to("cpu", torch.float64).numpy()
    return np.asarray(m, dtype=np.float64)


def _one_hot_rows(rows: np.ndarray, what: str, l: int, slots: np.ndarray):
    """Index of the single 1 in each row; raises unless every row is 0 except one exact 1."""
    ok = ((rows == 0) | (rows == 1)).all(axis=1) & ((rows == 1).sum(axis=1) == 1)
    if not ok.all():
        t = int(slots[np.flatnonzero(~ok)[0]])
        raise ValueError(f"sorting_network layer {l}, slot {t}: {what} must select exactly one wire (a "
                         "single 1, zeros elsewhere); this is not a comparator layer")
    return rows.argmax(axis=1)


def _layer_comparators(l: int, layer, n: int) -> list:
    """Comparators ``(min wire, max wire)`` of one dense layer (pass-through slots dropped), validated."""
    sa, sb, cmin, cmax = (_as_numpy(m) for m in layer)
    c = sa.shape[0]
    for name, m, shape in (("split_a", sa, (c, n)), ("split_b", sb, (c, n)), ("combine_min", cmin, (n, c)),
                           ("combine_max", cmax, (n, c))):
        if m.shape != shape:
            raise ValueError(f"sorting_network layer {l}: {name} has shape {m.shape}, expected {shape} "
                             f"(split_a has {c} slots and the network {n} wires)")
    slots = np.arange(c)
    a = _one_hot_rows(sa, "split_a", l, slots)
    b = _one_hot_rows(sb, "split_b", l, slots)
    cm, cx = cmin.T, cmax.T  # [c, n]: the destinations of each slot
    dummy = a == b
    comp = ~dummy
    i = _one_hot_rows(cm[comp], "combine_min of a comparator slot", l, slots[comp])
    j = _one_hot_rows(cx[comp], "combine_max of a comparator slot", l, slots[comp])
    same_pair = ((i == a[comp]) & (j == b[comp])) | ((i == b[comp]) & (j == a[comp]))
    if not same_pair.all():
        k = np.flatnonzero(~same_pair)[0]
        raise ValueError(f"sorting_network layer {l}, slot {int(slots[comp][k])}: it reads wires "
                         f"{int(a[comp][k])} and {int(b[comp][k])} but writes wires {int(i[k])} (min) and "
                         f"{int(j[k])} (max); a comparator must write the min and the max back to the two "
                         "wires it reads")
    w = a[dummy]
    if w.size:
        rows = np.flatnonzero(dummy)
        own = cm[rows, w] + cx[rows, w]
        rest_m, rest_x = cm[rows].copy(), cx[rows].copy()
        rest_m[np.arange(w.size), w] = 0
        rest_x[np.arange(w.size), w] = 0
        bad = (np.abs(own - 1) > 1e-6) | (rest_m != 0).any(axis=1) | (rest_x != 0).any(axis=1)
        if bad.any():
            k = np.flatnonzero(bad)[0]
            raise ValueError(f"sorting_network layer {l}, slot {int(rows[k])}: a slot reading wire "
                             f"{int(w[k])} twice is a pass-through and must return it to wire {int(w[k])} "
                             "only, with combine_min + combine_max weights summing to 1 (diffsort uses 0.5 "
                             "and 0.5)")
    written = np.concatenate([i, j, w])
    counts = np.bincount(written, minlength=n)
    if (counts != 1).any():
        wire = int(np.flatnonzero(counts != 1)[0])
        raise ValueError(f"sorting_network layer {l}: wire {wire} is written by {int(counts[wire])} slots; "
                         "in a comparator layer every wire is written exactly once")
    return [(int(p), int(q)) for p, q in zip(i, j)]


def _convert(network, n: int):
    """Comparator network key for a non-empty dense network on ``n`` wires (validated)."""
    layers = [_layer_comparators(l, layer, n) for l, layer in enumerate(network)]
    for kind in ("bitonic_original", "odd_even"):
        ref = _networks.get_network(kind, n).layers
        if len(ref) == len(layers) and all(set(r) == set(c) for r, c in zip(ref, layers)):
            return kind
    return _networks.register_network(layers, n)


def _network_key(network, vectors: torch.Tensor) -> str:
    flat = _matrices(network)
    if not flat:  # no layers (diffsort's bitonic network for n = 1): the identity, for every n
        return _networks.register_network([[]], vectors.shape[1])
    m = flat[0]
    dev = m.device if isinstance(m, torch.Tensor) else torch.device("cpu")
    if dev != vectors.device:
        raise ValueError(f"The sorting network is on device {dev} while the vectors are on device "
                         f"{vectors.device}, but they both need to be on the same device.")
    found = _lookup(flat)
    if found is None:
        n = int(m.shape[1])
        key = _convert(network, n)
        _remember(network, key, n)
    else:
        key, n = found
    if n != vectors.shape[1]:
        raise ValueError(f"the sorting network has {n} wires but the vectors have shape "
                         f"{tuple(vectors.shape)}; vectors must be [batch, {n}]")
    return key


# --- running ------------------------------------------------------------------------------------------


def _number(v, name):
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.requires_grad:
        return float(v.item())
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    return v  # rejected with a clear message by the checks


def _check_call(vectors, distribution, steepness, art_lambda):
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"vectors must be a torch.Tensor, got {type(vectors).__name__}")
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be a 2-D tensor [batch, n] (sorted along dimension 1), got shape "
                         f"{tuple(vectors.shape)}")
    if not isinstance(distribution, str) or distribution not in RELAXATIONS:
        raise DiffsortCompatError(f"softmax method `{distribution}` unknown; distribution must be one of "
                                  f"{list(RELAXATIONS)}")
    return _number(steepness, "steepness"), _number(art_lambda, "art_lambda")


def _run(vectors, key, distribution, steepness, art_lambda):
    return _sort_rows(vectors, key, distribution, steepness, art_lambda, True, "auto", "use a smaller batch")


def sort(
    sorting_network: SORTING_NETWORK_TYPE,
    vectors: torch.Tensor,
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    distribution: str = "cauchy",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort the rows of ``vectors [B, n]`` with a relaxed sorting network; returns ``(sorted, X)``.

    Args:
        sorting_network: a dense network (list of ``(split_a, split_b, combine_min, combine_max)``), e.g. from
            :func:`get_sorting_network`, on the same device as ``vectors``. It is converted to comparator
            tables on first use and the conversion is cached (keyed by the identity and version of its
            matrices, so in-place changes are noticed).
        vectors: ``[B, n]`` float tensor (float16/bfloat16 are computed in float32, outputs cast back).
        steepness: inverse temperature (> 0).
        art_lambda: exponent of ``logistic_phi`` (in [0, 1]).
        distribution: ``'logistic'``, ``'logistic_phi'``, ``'gaussian'``, ``'reciprocal'``, ``'cauchy'`` or
            ``'optimal'``.

    Returns:
        ``sorted [B, n]`` (ascending) and ``X [B, n, n]`` with ``sorted = vectors @ X`` (``X[b, c, r]``:
        weight of input ``c`` at output position ``r``), in the dtype of ``vectors``; both differentiable.
    """
    steepness, art_lambda = _check_call(vectors, distribution, steepness, art_lambda)
    key = _network_key(sorting_network, vectors)
    return _run(vectors, key, distribution, steepness, art_lambda)


# --- module -------------------------------------------------------------------------------------------


class DiffSortNet(torch.nn.Module):
    """diffsort's ``DiffSortNet``: ``forward(vectors [B, size]) -> (sorted [B, size], X [B, size, size])``.

    Args:
        sorting_network_type: ``'bitonic'`` (diffsort's wiring, relaxops' ``"bitonic_original"``; warns for
            the sizes where it does not sort every input) or ``'odd_even'``.
        size: n, the number of elements per row (>= 1; n = 1 gives the identity).
        device: device of ``sorting_network`` and of the inputs.
        steepness, art_lambda, distribution: as in :func:`sort`; read at every forward.
        interpolation_type: deprecated alias of ``distribution`` (as in diffsort: it overrides
            ``distribution`` unless that was set to something other than ``'cauchy'``, which is an error).

    Attributes ``sorting_network_type``, ``size``, ``sorting_network``, ``steepness``, ``art_lambda`` and
    ``distribution`` are those of diffsort. ``sorting_network`` (the dense matrices) is built on first access;
    forward runs the comparator tables directly unless it was read or replaced.
    """

    def __init__(
        self,
        sorting_network_type: str,
        size: int,
        device: str = "cpu",
        steepness: float = 10.0,
        art_lambda: float = 0.25,
        interpolation_type: str = None,
        distribution: str = "cauchy",
    ):
        super().__init__()
        if sorting_network_type not in _KINDS:
            raise DiffsortCompatError(f"Sorting network `{sorting_network_type}` unknown; diffsort's network "
                                      "types are 'bitonic' and 'odd_even'")
        size = _check_n(size)
        self.sorting_network_type = sorting_network_type
        self.size = size
        self._kind = _KINDS[sorting_network_type]
        self._device = torch.empty(0, device=device).device  # resolves e.g. "cuda" to "cuda:0", like .to()
        self._dense = None
        if interpolation_type is not None:
            if not (distribution is None or distribution == "cauchy" or distribution == interpolation_type):
                raise ValueError(
                    f"Two different distributions have been set (distribution={distribution} and "
                    f"interpolation_type={interpolation_type}); however, they have the same interpretation "
                    "and interpolation_type is a deprecated argument")
            distribution = interpolation_type
        self.steepness = steepness
        self.art_lambda = art_lambda
        self.distribution = distribution
        _networks.warn_if_not_sorting(self._kind, size)

    @property
    def sorting_network(self):
        if self._dense is None:
            self._dense = get_sorting_network(self.sorting_network_type, self.size, self._device)
        return self._dense

    @sorting_network.setter
    def sorting_network(self, value):
        self._dense = value

    def forward(self, vectors):
        if not isinstance(vectors, torch.Tensor):
            raise TypeError(f"vectors must be a torch.Tensor, got {type(vectors).__name__}")
        if vectors.dim() != 2 or vectors.shape[1] != self.size:
            raise ValueError(f"DiffSortNet(size={self.size}) sorts 2-D inputs [batch, {self.size}], got "
                             f"shape {tuple(vectors.shape)}")
        if self._dense is not None:  # read or replaced by the user: run what it holds now
            return sort(self._dense, vectors, self.steepness, self.art_lambda, self.distribution)
        steepness, art_lambda = _check_call(vectors, self.distribution, self.steepness, self.art_lambda)
        if vectors.device != self._device:
            raise ValueError(f"The sorting network is on device {self._device} while the vectors are on "
                             f"device {vectors.device}, but they both need to be on the same device.")
        return _run(vectors, self._kind, self.distribution, steepness, art_lambda)

    def extra_repr(self) -> str:
        return (f"sorting_network_type={self.sorting_network_type!r}, size={self.size}, "
                f"steepness={self.steepness}, art_lambda={self.art_lambda}, "
                f"distribution={self.distribution!r}")
