"""Comparator networks as compact integer layer tables.

A network is a list of layers; a layer is a list of comparators ``(i, j)`` on pairwise disjoint wires.
After comparator ``(i, j)`` wire ``i`` holds the (relaxed) minimum and wire ``j`` the maximum, so the
direction is the order of the pair (``i > j`` is a descending comparator). Networks sort ascending:
wire 0 ends with the smallest value.

Kernel tables (built once per ``(kind, n, k)``, uploaded once per device):

* ``layer_ptr int32[L+1]``: comparators of layer ``l`` are ``cmin/cmax[layer_ptr[l]:layer_ptr[l+1]]``;
* ``cmin, cmax int32[C]``: the wire receiving the min / the max.

The wire-parallel form the Triton kernels use, ``Network.wire_tables()`` (``[L, n]``, built on request):

* ``partner int32[L, n]``: the other wire of the comparator touching ``w`` in layer ``l``, or ``w``;
* ``comp_of int32[L, n]``: index (into ``cmin``) of that comparator, or ``-1`` for pass-through.

Size: a network may have at most ``MAX_COMPARATORS`` comparators, refused from its count (closed forms for the
sorting networks, the group sizes of the splitter selection network) before anything is built.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

SORTING_NETWORKS = ("bitonic", "odd_even", "bitonic_original")
SELECTION_NETWORKS = ("splitter_selection",)
NETWORKS = SORTING_NETWORKS + SELECTION_NETWORKS

# The most comparators a network may have: ``get_network`` refuses a larger one from its comparator count (closed
# forms; for splitter_selection a pass over its group sizes, at most a few seconds) before building anything. This
# accepts bitonic and bitonic_original for n <= 197560, odd_even for n <= 5793, splitter_selection for every k at
# n <= 5000, k <= 3485 at n = 10^4, k <= 1302 at n = 10^5, k <= 511 at n = 10^6 and none beyond n = 1651923.
# Building a network of this size (Python tuples; its kernel tables are 8 bytes per comparator) takes 2-4.5 GB and,
# on one core of a loaded 2-core machine, 7 s (odd_even) to 13 s (bitonic), up to 75 s for splitter_selection
# (many small cascades), once per process: get_network caches it.
MAX_COMPARATORS = 1 << 24

# n <= 129 at which the original (diffsort) padded bitonic wiring is not a sorting network; found by
# hard-swap simulation (tests/sortnet/test_networks.py re-derives this list).
ORIGINAL_BITONIC_BROKEN = frozenset(
    [22, 38, 42, 43, 44, 45, 46, 54, 70, 74, 75, 76, 77, 78] + list(range(82, 95)) + [102, 106, 107, 108, 109, 110, 118]
)


def odd_even_layers(n: int) -> list[list[tuple[int, int]]]:
    """Odd-even transposition: ``n`` layers, layer ``l`` compares ``(p, p+1)`` for ``p = l % 2, l % 2 + 2, ...``."""
    return [[(p, p + 1) for p in range(l % 2, n - 1, 2)] for l in range(n)]


def bitonic_layers(n: int) -> list[list[tuple[int, int]]]:
    """Bitonic network for any ``n``, all comparators ascending (the corrected wiring).

    Built on ``N = 2**ceil(log2 n)`` wires padded with virtual ``+inf`` at the end: each merge block starts
    with a mirror layer ``(q, size-1-q)`` inside runs of length ``size`` followed by half-cleaners. A
    comparator whose max wire is virtual is a no-op (the ``+inf`` stays there) and is dropped, so this is a
    sorting network for every ``n``, with the layer count ``M(M+1)/2`` of the original.
    """
    M = (n - 1).bit_length()
    N = 1 << M
    layers = []
    for b in range(M):
        size = 2 << b
        layers.append([(base + q, base + size - 1 - q) for base in range(0, N, size) for q in range(size // 2)])
        m = size // 4
        while m >= 1:
            layers.append([(base + q, base + q + m) for base in range(0, N, 2 * m) for q in range(m)])
            m //= 2
    return [[(i, j) for i, j in layer if j < n] for layer in layers]


def bitonic_original_layers(n: int) -> list[list[tuple[int, int]]]:
    """The padded bitonic wiring of the ``diffsort`` package, comparator for comparator.

    Padded wires ``0 .. N-n-1`` (the lowest) are discarded; a comparator touching one is treated as a
    pass-through. With descending comparators that is not sound, so for some ``n`` (22, 38, ...; see
    ``ORIGINAL_BITONIC_BROKEN``) this does not sort every input. ``n = 1`` gives one empty layer here
    (the original has zero layers and crashes).
    """
    if n == 1:
        return [[]]
    M = (n - 1).bit_length()
    N = 1 << M
    o = N - n
    layers = []
    for b in range(M):
        for t in range(b + 1):
            m = 1 << (b - t)
            layer = []
            for base in range(0, N, 2 * m):
                for q in range(m):
                    lo, hi = base + q, base + q + m
                    if lo < o:
                        continue  # hi >= o gets a pass-through slot, or both discarded
                    descending = (lo >> (b + 1)) & 1
                    layer.append((hi - o, lo - o) if descending else (lo - o, hi - o))
            layers.append(layer)
    return layers


def _splitter_cascade(lanes: list[int]) -> list[list[tuple[int, int]]]:
    """Layers of a splitter cascade on the increasing lanes ``S`` (native orientation: the larger value goes to
    the lower lane), given as their mirrored wires ``lanes = n - 1 - S``: layer ``t`` pairs positions ``p`` and
    ``p + h`` inside blocks of ``2h``, ``h = 2**(T-1-t)``, as the ascending comparator ``(lanes[p + h], lanes[p])``.
    Afterwards position ``p`` is dominated by every position obtained by clearing set bits of ``p``, so its rank
    grows by at least ``2**popcount(p) - 1``."""
    q = len(lanes)
    if q < 2:
        return []
    T = (q - 1).bit_length()
    layers = []
    for t in range(T):
        h = 1 << (T - 1 - t)
        layers.append([(lanes[p + h], lanes[p]) for o in range(0, q, 2 * h) for p in range(o, min(o + h, q - h))])
    return layers


def _splitter_bounds(q: int) -> list[int]:
    """The rank bound a splitter cascade on ``q`` lanes adds to its position ``p``: ``2**popcount(p) - 1``."""
    return [(1 << bin(p).count("1")) - 1 for p in range(q)]


def splitter_selection_layers(n: int, k: int) -> list[list[tuple[int, int]]]:
    """Splitter selection network (top-k selection) of difftopk, comparator for comparator.

    Built in the native orientation (larger value to the lower lane): in rounds, for each rank bound ``r = k-1 ..
    lowest`` (``lowest`` = the round's number), the lanes known to have exactly ``r`` larger elements (in lane
    order) get a splitter cascade, scheduled greedily into the earliest layers where all its lanes are free; lanes
    whose bound reaches ``k`` are eliminated; the rounds end when no bound in ``[lowest, k)`` has two lanes. The
    comparators are emitted on mirrored lanes (``w -> n-1-w``) so every comparator is ascending and the top-k end on
    the last wires: wire ``n-1`` holds the largest value, ..., wire ``n-k`` the k-th largest; wires ``0 .. n-k-1``
    hold the rest in no particular order.

    The lanes are kept grouped by their bound (a group only gains lanes from groups of lower bounds, which a round
    visits after it): a round costs its cascades and a pass over the bounds, not a pass over the n lanes per bound.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in [1, n] = [1, {n}], got {k!r}")
    bound = _splitter_bounds(n)
    groups: dict[int, list[int]] = {0: list(range(n))}  # rank bound r < k -> its lanes
    ready = [0] * n
    layers: list[list[tuple[int, int]]] = []
    lowest = 0
    while True:
        todo = sorted((r for r, lanes in groups.items() if r >= lowest and len(lanes) >= 2), reverse=True)
        if not todo:
            break
        for r in todo:
            group = sorted(groups.pop(r))
            cascade = _splitter_cascade([n - 1 - w for w in group])
            start = max(ready[w] for w in group)
            while len(layers) < start + len(cascade):
                layers.append([])
            for t, layer in enumerate(cascade):
                layers[start + t].extend(layer)
            for p, w in enumerate(group):
                ready[w] = start + len(cascade)
                if r + bound[p] < k:
                    groups.setdefault(r + bound[p], []).append(w)
        lowest += 1
    return layers


def _odd_even_count(n: int) -> int:
    """Comparators of ``odd_even_layers(n)``: ``(n + 1) // 2`` even layers of ``n // 2``, ``n // 2`` odd layers of
    ``(n - 1) // 2``."""
    return (n + 1) // 2 * (n // 2) + n // 2 * ((n - 1) // 2)


def _bitonic_count(n: int) -> int:
    """Comparators of ``bitonic_layers(n)``, layer by layer: a layer of pairs ``(base + q, base + q + m)`` (half
    cleaner) or ``(base + q, base + size - 1 - q)`` (mirror, ``size = 2m``) in blocks of ``2m`` keeps ``m`` per
    block below ``n`` and ``max(0, r - m)`` of the block cut by ``n`` (``r = n mod 2m`` of its wires are real)."""
    M = (n - 1).bit_length()
    count = 0
    for b in range(M):
        for m in [1 << b] + [1 << t for t in range(b - 1, -1, -1)]:
            count += n // (2 * m) * m + max(0, n % (2 * m) - m)
    return count


def _bitonic_original_count(n: int) -> int:
    """Comparators of ``bitonic_original_layers(n)``: of the ``N / 2`` pairs ``(lo, lo + m)`` of a layer (``lo`` the
    wires whose bit ``m`` is 0), those with ``lo >= N - n`` (the ``o = N - n`` padded wires come first)."""
    M = (n - 1).bit_length()
    N, o = 1 << M, (1 << M) - n
    return sum(
        N // 2 - (o // (2 * m) * m + min(o % (2 * m), m)) for b in range(M) for m in (1 << t for t in range(b + 1))
    )


@functools.lru_cache(maxsize=4096)
def _splitter_cascade_summary(q: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    """``(comparators, ((rank bound added, lanes), ...))`` of a splitter cascade on ``q`` lanes, in closed form:
    layer ``h`` keeps ``h`` pairs per block of ``2h`` and ``max(0, q mod 2h - h)`` of the last one; ``lanes`` of
    the positions ``p < q`` have ``popcount(p) = j`` (bound ``2**j - 1``), counted per set bit of ``q``."""
    T = (q - 1).bit_length() if q >= 2 else 0
    comparators = sum(q // (2 * h) * h + max(0, q % (2 * h) - h) for h in (1 << t for t in range(T)))
    lanes: dict[int, int] = {}
    ones = 0
    for b in range(q.bit_length() - 1, -1, -1):
        if q >> b & 1:  # p = q's bits above b, then 0, then any b bits
            for j in range(b + 1):
                lanes[ones + j] = lanes.get(ones + j, 0) + math.comb(b, j)
            ones += 1
    return comparators, tuple(((1 << j) - 1, c) for j, c in lanes.items())


@functools.lru_cache(maxsize=256)
def _splitter_selection_count(n: int, k: int, limit: int) -> int:
    """Comparators of ``splitter_selection_layers(n, k)``, or a partial count above ``limit``: the build's rounds on
    the sizes of its groups alone (which lanes a group holds changes its wires, not its size or where its lanes
    go). O(G) for G cascades, less than the comparators."""
    groups = {0: n}  # rank bound r < k -> its number of lanes
    count, lowest = 0, 0
    while True:
        todo = sorted((r for r, q in groups.items() if r >= lowest and q >= 2), reverse=True)
        if not todo:
            return count
        for r in todo:
            comparators, moves = _splitter_cascade_summary(groups.pop(r))
            count += comparators
            if count > limit:
                return count
            for b, lanes in moves:
                if r + b < k:
                    groups[r + b] = groups.get(r + b, 0) + lanes
        lowest += 1


def comparator_count(kind: str, n: int, k: int | None = None, limit: int | None = None) -> int:
    """The comparators of network ``kind`` on ``n`` wires (selection networks: for the top ``k``) without building
    it: in closed form for the sorting networks; for ``splitter_selection`` from the sizes of its groups, stopping
    at the first partial count above ``limit`` (default ``MAX_COMPARATORS``; then a number > ``limit``, not the
    count)."""
    if kind == "splitter_selection":
        return _splitter_selection_count(n, k, MAX_COMPARATORS if limit is None else limit)
    counts = {"bitonic": _bitonic_count, "odd_even": _odd_even_count, "bitonic_original": _bitonic_original_count}
    return counts[kind](n)


def check_network_size(kind: str, n: int, k: int | None = None) -> int:
    """The comparator count of network ``kind`` on ``n`` wires (top ``k``), or a ValueError naming ``n`` (and
    ``k``) if it has more than ``MAX_COMPARATORS``."""
    count = comparator_count(kind, n, k)
    if count <= MAX_COMPARATORS:
        return count
    what = f"the top k = {k} of n = {n}" if kind in SELECTION_NETWORKS else f"n = {n}"
    size = f"more than {MAX_COMPARATORS}" if kind in SELECTION_NETWORKS else f"{count}"
    hint = "use a smaller n" + (" or k" if kind in SELECTION_NETWORKS else "")
    if kind != "bitonic" and _bitonic_count(n) <= MAX_COMPARATORS:
        hint += f", or network='bitonic' ({_bitonic_count(n)} comparators)"
    raise ValueError(
        f"the {kind} network for {what} has {size} comparators, more than the {MAX_COMPARATORS} "
        f"relaxops builds (up to a minute and 4.5 GB at that size); {hint}"
    )


_BUILDERS = {"bitonic": bitonic_layers, "odd_even": odd_even_layers, "bitonic_original": bitonic_original_layers}


def check_network_name(network, allow_selection: bool = False) -> str:
    """A sorting network kind (or, with ``allow_selection``, a selection network kind), or a key returned by
    ``register_network``."""
    kinds = NETWORKS if allow_selection else SORTING_NETWORKS
    if not isinstance(network, str) or (network not in kinds and network not in _CUSTOM):
        raise ValueError(f"network must be one of {list(kinds)} or a registered network key, got {network!r}")
    return network


@dataclass(frozen=True)
class DeviceTables:
    layer_ptr: torch.Tensor
    cmin: torch.Tensor
    cmax: torch.Tensor


@dataclass(eq=False)
class Network:
    """An immutable comparator network with its kernel tables (see the module docstring)."""

    kind: str
    n: int
    layers: tuple
    layer_ptr: np.ndarray
    cmin: np.ndarray
    cmax: np.ndarray
    _device_tables: dict = field(default_factory=dict, repr=False)
    _reversed: Network | None = field(default=None, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_comparators(self) -> int:
        return int(self.layer_ptr[-1])

    @property
    def max_layer_size(self) -> int:
        return int(np.diff(self.layer_ptr).max(initial=0))

    def wire_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``partner[L, n]`` and ``comp_of[L, n]`` (wire-parallel form)."""
        L, n = self.num_layers, self.n
        partner = np.tile(np.arange(n, dtype=np.int32), (L, 1))
        comp_of = np.full((L, n), -1, dtype=np.int32)
        for l in range(L):
            lo, hi = self.layer_ptr[l], self.layer_ptr[l + 1]
            ids = np.arange(lo, hi, dtype=np.int32)
            i, j = self.cmin[lo:hi], self.cmax[lo:hi]
            partner[l, i], partner[l, j] = j, i
            comp_of[l, i], comp_of[l, j] = ids, ids
        return partner, comp_of

    def reversed(self) -> Network:
        """The comparators in reverse order (layers reversed, and the comparators inside each): comparator
        ``c`` of the reversed network is comparator ``C - 1 - c`` of this one, so its alphas are
        ``alpha.flip(-1)``. Its product ``P_1 ... P_L`` is ``P^T`` (every ``P_l`` is symmetric). Cached."""
        if self._reversed is None:
            layers = [layer[::-1] for layer in self.layers[::-1]]
            self._reversed = _make_network(reversed_key(self.kind), self.n, layers)
        return self._reversed

    def view_row(self, device) -> torch.Tensor:
        """``[1, 6]`` int64 on ``device``: ``n, num_layers, num_comparators`` and the addresses of ``tables(device)``
        (the kernels' ``NetView``; see ``RowNetworks.table``). Cached."""
        device = torch.device(device)
        key = ("view", str(device))
        v = self._device_tables.get(key)
        if v is None:
            t = self.tables(device)
            addr = [a.data_ptr() if a.numel() else 0 for a in (t.layer_ptr, t.cmin, t.cmax)]
            v = torch.tensor([[self.n, self.num_layers, self.num_comparators, *addr]], dtype=torch.int64).to(device)
            self._device_tables[key] = v
        return v

    def tables(self, device) -> DeviceTables:
        """The int32 kernel tables ``layer_ptr, cmin, cmax`` on ``device`` (cached)."""
        device = torch.device(device)
        key = str(device)
        t = self._device_tables.get(key)  # (and view_row's entries, keyed ("view", device))
        if t is None:
            t = DeviceTables(*(torch.from_numpy(a).to(device) for a in (self.layer_ptr, self.cmin, self.cmax)))
            self._device_tables[key] = t
        return t


def _make_network(kind: str, n: int, layers) -> Network:
    """``layers``: lists of ``(i, j)`` pairs of Python ints (the builders', ``register_network``'s)."""
    layers = tuple(tuple(layer) for layer in layers)
    sizes = [len(layer) for layer in layers]
    layer_ptr = np.zeros(len(layers) + 1, dtype=np.int32)
    np.cumsum(sizes, out=layer_ptr[1:])
    pairs = np.array([c for layer in layers for c in layer], dtype=np.int32).reshape(-1, 2)
    return Network(kind, n, layers, layer_ptr, pairs[:, 0].copy(), pairs[:, 1].copy())


@functools.lru_cache(maxsize=256)
def get_network(kind: str, n: int, k: int | None = None) -> Network:
    """The network ``kind`` on ``n`` wires (selection networks: for the top ``k``), built once and cached."""
    if kind in SELECTION_NETWORKS:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ValueError(f"k must be an integer in [1, n] = [1, {n}], got {k!r}")
        check_network_size(kind, n, k)
        return _make_network(f"{kind}:{k}", n, splitter_selection_layers(n, k))
    check_network_name(kind)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if k is not None:
        raise ValueError(f"k is not used by the sorting network {kind!r}; pass k=None")
    check_network_size(kind, n)
    return _make_network(kind, n, _BUILDERS[kind](n))


_CUSTOM: dict[str, Network] = {}


def register_network(layers, n: int) -> str:
    """Register an arbitrary comparator network; returns the key the ops accept as ``network``."""
    layers = tuple(tuple((int(i), int(j)) for i, j in layer) for layer in layers)
    for layer in layers:
        wires = [w for c in layer for w in c]
        if len(set(wires)) != len(wires) or any(not 0 <= w < n for w in wires) or any(i == j for i, j in layer):
            raise ValueError(f"invalid comparator layer {layer}: wires must be distinct and in [0, {n})")
    key = f"custom:{n}:{hashlib.sha1(repr(layers).encode()).hexdigest()[:16]}"
    if key not in _CUSTOM:
        _CUSTOM[key] = _make_network(key, n, layers)
    return key


def selection_key(kind: str, k: int) -> str:
    """The op key of network ``kind`` used for the top ``k`` (selection networks depend on k)."""
    return f"{kind}:{k}" if kind in SELECTION_NETWORKS else kind


def reversed_key(key: str) -> str:
    """The op key of the network ``key`` with its comparators in reverse order (see ``Network.reversed``)."""
    return "reversed:" + key


def resolve_network(key: str, n: int) -> Network:
    """The network an op names: a registered custom key, a network kind built for ``n`` wires, a selection
    network ``"<kind>:<k>"`` or ``"reversed:<key>"``."""
    if key.startswith("reversed:"):
        return resolve_network(key[len("reversed:") :], n).reversed()
    if key.startswith("custom:"):
        net = _CUSTOM[key]
        if net.n != n:
            raise ValueError(f"network {key} has {net.n} wires, the input has {n}")
        return net
    kind, _, k = key.partition(":")
    if kind in SELECTION_NETWORKS:
        return get_network(kind, n, int(k))
    return get_network(key, n)


def network_comparators(key: str, n: int) -> int:
    """The comparator count of the network an op names (as ``resolve_network``) without building it, or the
    ValueError of ``check_network_size``."""
    if key.startswith("reversed:"):
        return network_comparators(key[len("reversed:") :], n)
    if key.startswith("custom:"):
        return resolve_network(key, n).num_comparators
    kind, _, k = key.partition(":")
    return check_network_size(kind, n, int(k) if kind in SELECTION_NETWORKS else None)


_warned_broken: set[int] = set()


def warn_if_not_sorting(kind: str, n: int) -> None:
    """Warn once per ``n`` when the original bitonic wiring does not sort every input."""
    if kind == "bitonic_original" and _original_bitonic_broken(n) and n not in _warned_broken:
        _warned_broken.add(n)
        warnings.warn(
            f"the original (diffsort) bitonic wiring is not a sorting network for n = {n}: some inputs "
            "come out unsorted even in the hard limit; relaxops' network='bitonic' is a corrected wiring",
            RuntimeWarning,
            stacklevel=3,
        )


@functools.cache
def _original_bitonic_broken(n: int) -> bool:
    if n <= 129:
        return n in ORIGINAL_BITONIC_BROKEN
    return not sorts_all_zero_one_samples(get_network("bitonic_original", n))


def sorts_all_zero_one_samples(net: Network, samples: int = 4096, seed: int = 0) -> bool:
    """Hard-swap simulation on random 0-1 inputs: False proves the network does not sort (True is a sample)."""
    rng = np.random.default_rng(seed)
    n = net.n
    x = (rng.random((samples, n)) < rng.random((samples, 1))).astype(np.int8)
    for layer in net.layers:
        for i, j in layer:
            lo, hi = np.minimum(x[:, i], x[:, j]), np.maximum(x[:, i], x[:, j])
            x[:, i], x[:, j] = lo, hi
    return bool((np.diff(x, axis=1) >= 0).all())


def network_layers(kind: str, n: int, k: int | None = None) -> list[list[tuple[int, int]]]:
    """The layers of network ``kind`` on ``n`` wires as lists of ``(i, j)`` pairs (min goes to wire ``i``).

    Args:
        kind: ``"bitonic"`` (corrected wiring, sorts for every n), ``"odd_even"``, ``"bitonic_original"``
            (the diffsort wiring) or ``"splitter_selection"`` (top-k selection, needs ``k``).
        n: number of wires, ``>= 1``.
        k: the number of top elements a selection network (``"splitter_selection"``) selects, ``1 <= k <= n``;
            ``None`` for sorting networks.

    A network of more than ``MAX_COMPARATORS = 2**24`` comparators is refused with a ValueError naming ``n`` (and
    ``k``) before it is built (the sizes this accepts and their build times: the note at ``MAX_COMPARATORS``).
    """
    return [list(layer) for layer in get_network(kind, n, k).layers]


# --- rows of their own lengths (lengths / mask, a k per row) ------------------------------------------------------
#
# A row of length L runs the network for L (and, selection networks, its own k), which is not the network for n
# restricted to L wires (soft comparators are not idempotent; docs/math/sortnet.md, "Any dimension, padded rows").
# Two ways to name it per row, in one table that the kernels read:
# * bitonic and odd_even: the network for L IS a part of the network for n: its first ``prefix_layers(kind, L)``
#   layers, of which the comparators with both wires below L (tests/sortnet/test_padded.py checks this for every
#   L <= n < 70). Every row runs the one network for n, within its layer range and below its wire bound, so rows
#   of any lengths share it (the CPU rank tiles run such rows in lockstep).
# * the other networks (bitonic_original, splitter_selection): the network built for each distinct length (and k)
#   present; row b names its group.
# The row table ``spec [B, 6]`` int64: (group, wires L_b, layer_begin, layer_end, cols, out_first). The kernels run
# comparator c of the group's network on row b iff c lies in layers [layer_begin, layer_end) and both its wires
# are below L_b (otherwise it is not part of the row's network); the matrix kernels compute the row's ``cols``
# columns of Y (its Y-columns L_b - cols .. L_b - 1) into output columns out_first ..; wires L_b.. are pads.

PREFIX_NETWORKS = ("bitonic", "odd_even")


def prefix_layers(kind: str, L: int) -> int:
    """The layer count of the network ``kind`` for ``L`` wires as a prefix of the one for any ``n >= L``."""
    if L <= 1:
        return 0 if kind == "bitonic" or L == 0 else 1
    if kind == "bitonic":
        M = (L - 1).bit_length()
        return M * (M + 1) // 2
    return L


@functools.lru_cache(maxsize=64)
def _prefix_layer_table(kind: str, n: int, device: str) -> torch.Tensor:
    """``prefix_layers(kind, L)`` for ``L = 0 .. n`` (int64 ``[n + 1]``) on ``device``: copied there once, not on
    every call (a copy to a GPU synchronises)."""
    return torch.tensor([prefix_layers(kind, L) for L in range(n + 1)], dtype=torch.int64).to(device)


@dataclass(eq=False)
class RowNetworks:
    """The networks of rows of ``n`` entries and their own lengths (see above): ``nets`` (one per group), ``spec
    [B, 6]`` int64 on the rows' device and ``C``, the row stride of ``d`` and ``alpha`` (``row_stride``)."""

    n: int
    nets: tuple
    spec: torch.Tensor
    C: int
    _tables: dict = field(default_factory=dict, repr=False)
    _reversed: RowNetworks | None = field(default=None, repr=False)

    @property
    def max_layer_size(self) -> int:
        return max(net.max_layer_size for net in self.nets)

    def table(self, device) -> torch.Tensor:
        """``[G, 6]`` int64 on ``device``: per group (n, num_layers, num_comparators, layer_ptr, cmin, cmax), the
        last three the addresses of its kernel tables on ``device`` (kept alive by the networks' caches), in the
        layout of the kernels' ``NetView``. Cached: the kernels read it while this object lives."""
        key = str(torch.device(device))
        if key not in self._tables:
            self._tables[key] = torch.cat([net.view_row(device) for net in self.nets])
        return self._tables[key]

    def reversed(self) -> RowNetworks:
        """The same rows on the reversed networks (``Network.reversed``): layer range ``[Lg - end, Lg - begin)``.
        Cached."""
        if self._reversed is not None:
            return self._reversed
        nets = tuple(net.reversed() for net in self.nets)
        Lg = torch.tensor([net.num_layers for net in self.nets], dtype=torch.int64).to(self.spec.device)
        Lg = Lg[self.spec[:, 0]]
        spec = self.spec.clone()
        spec[:, 2], spec[:, 3] = Lg - self.spec[:, 3], Lg - self.spec[:, 2]
        self._reversed = RowNetworks(self.n, nets, spec, self.C)
        return self._reversed


def row_networks(key: str, n: int, lengths: torch.Tensor | None, ks: torch.Tensor | None, m: int) -> RowNetworks:
    """The networks of rows ``[B]`` of ``n`` entries for the network ``key`` (an op's key, ``reversed:`` allowed):
    ``lengths`` int64 ``[B]`` (``None``: every row full) and ``ks`` int64 ``[B]`` (a top-k per row, each in
    ``[0, L_b]``, ``>= 1`` where ``L_b >= 1``: the columns of the top-k matrix, right-aligned in its ``m`` columns;
    ``None``: the sort matrix's ``L_b`` columns, left-aligned). Distinct lengths (and k) are read on the host."""
    if key.startswith("reversed:"):
        return row_networks(key[len("reversed:") :], n, lengths, ks, m).reversed()
    kind, _, k_key = key.partition(":")
    if kind not in NETWORKS:
        raise ValueError(
            f"lengths, mask and a k per row take the networks {list(NETWORKS)}; the registered network {key!r} is "
            "built for one n only"
        )
    device = (lengths if lengths is not None else ks).device
    B = (lengths if lengths is not None else ks).shape[0]
    L = lengths if lengths is not None else torch.full((B,), n, dtype=torch.int64, device=device)
    cols = ks if ks is not None else L
    out_first = m - ks if ks is not None else torch.zeros_like(L)
    if kind in PREFIX_NETWORKS:
        nets = (get_network(kind, n),)
        group = torch.zeros_like(L)
        l1 = _prefix_layer_table(kind, n, str(device))[L]
    else:
        # one group per distinct (L, k) (selection) or L, rows of length 0 in any group (they run nothing); the
        # last few are kept (keyed by the values): a forward and its backward ask for the same rows
        Lh, kh = L.cpu(), ks.cpu() if ks is not None else None
        ck = (key, n, m, str(device), Lh.numpy().tobytes(), None if kh is None else kh.numpy().tobytes())
        if ck in _ROW_CACHE:
            _ROW_CACHE.move_to_end(ck)
            return _ROW_CACHE[ck]
        code = L * (n + 1) + (ks if kind in SELECTION_NETWORKS else 0)
        uniq, group = torch.unique(torch.where(L > 0, code, code.max()), return_inverse=True)
        pairs = [(int(c) // (n + 1), int(c) % (n + 1)) for c in uniq.cpu()]
        sel = kind in SELECTION_NETWORKS
        nets = tuple(
            get_network(kind, max(Lg, 1), max(kg, 1)) if sel else get_network(kind, max(Lg, 1)) for Lg, kg in pairs
        )
        l1 = torch.tensor([net.num_layers for net in nets], dtype=torch.int64).to(device)[group]
        l1 = torch.where(L > 0, l1, 0)
    spec = torch.stack([group, L, torch.zeros_like(L), l1, cols, out_first], 1).contiguous()
    rows = RowNetworks(n, nets, spec, max(row_stride(key, n), *(net.num_comparators for net in nets)))
    if kind not in PREFIX_NETWORKS:
        _ROW_CACHE[ck] = rows
        while len(_ROW_CACHE) > 8:
            _ROW_CACHE.popitem(last=False)
    return rows


_ROW_CACHE: collections.OrderedDict = collections.OrderedDict()


def row_stride(key: str, n: int) -> int:
    """The row stride ``C`` of ``d`` and ``alpha`` of rows of their own lengths: the comparator count of the network
    for ``n`` (and the key's k), which the network of each length (and k) does not exceed (the counts grow with n
    and k; ``row_networks`` takes the larger one should a group have more)."""
    return network_comparators(key, n)
