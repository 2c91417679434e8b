"""``diffsort.networks``: the dense sorting networks ``bitonic_network``, ``odd_even_network`` and
``get_sorting_network`` (see the package docstring for the format)."""

from __future__ import annotations

import numbers

import numpy as np
import torch

from ...sortnet import networks as _networks
from .functional import DiffsortCompatError, _remember

__all__ = ["bitonic_network", "odd_even_network", "get_sorting_network"]

# diffsort network type -> relaxops network kind with the same comparators
_KINDS = {"bitonic": "bitonic_original", "odd_even": "odd_even"}


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
    return dense_network(_networks.odd_even_layers(n), n)


def dense_network(layers, n: int) -> list:
    """Dense matrices of comparator layers ``[[(min wire, max wire), ...], ...]`` on ``n`` wires: each layer's
    slots are its comparators in order followed by pass-through slots for the wires it leaves alone."""
    return [_dense_layer(n, list(layer) + [(w, w) for w in _untouched(n, layer)]) for layer in layers]


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
            f"Sorting network `{type}` unknown; diffsort's network types are 'bitonic' and 'odd_even'"
        )
    return network_tensors(dense, _KINDS[type], int(n), device)


def network_tensors(dense, key: str, n: int, device) -> list:
    """Dense numpy layers as float32 tensors on ``device``, remembered as relaxops' network ``key`` on ``n`` wires
    (so that :func:`sort` runs them without converting them back)."""
    net = [[torch.from_numpy(m).float().to(device) for m in layer] for layer in dense]
    _remember(net, key, n)
    return net
