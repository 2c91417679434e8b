"""``diffsort.functional``: ``sort`` (and its alias ``execute_sort``) on dense networks, the relaxations ``s_best``
(``'optimal'``) and ``NormalCDF`` (``'gaussian'``), and ``SORTING_NETWORK_TYPE``; see the package docstring."""

from __future__ import annotations

import collections
import hashlib
import math
import numbers
import weakref

import numpy as np
import torch

from ...sortnet import networks as _networks
from ...sortnet.functional import _sort_rows
from ...sortnet.relaxations import RELAXATIONS, relax

__all__ = ["sort", "execute_sort", "s_best", "NormalCDF", "SORTING_NETWORK_TYPE"]

SORTING_NETWORK_TYPE = list  # diffsort: List[torch.tensor]


class DiffsortCompatError(NotImplementedError, ValueError):
    """Unknown network type or distribution: diffsort raises ``NotImplementedError`` here; this is also a
    ``ValueError``, so both ``except`` styles work."""


# --- dense network -> comparator tables (cached) -----------------------------------------------------------

_CACHE_SIZE = 128
_cache: collections.OrderedDict = collections.OrderedDict()


def _matrices(network):
    if not isinstance(network, (list, tuple)):
        raise TypeError(
            "sorting_network must be a list of layers (split_a, split_b, combine_min, "
            f"combine_max), got {type(network).__name__}"
        )
    flat = []
    for l, layer in enumerate(network):
        if not isinstance(layer, (list, tuple)) or len(layer) != 4:
            got = type(layer).__name__ + (f" of length {len(layer)}" if hasattr(layer, "__len__") else "")
            raise ValueError(
                f"sorting_network layer {l} must be (split_a, split_b, combine_min, combine_max), got {got}"
            )
        for m in layer:
            if not isinstance(m, (torch.Tensor, np.ndarray)) or m.ndim != 2:
                got = type(m).__name__ + (f" of shape {tuple(m.shape)}" if hasattr(m, "shape") else "")
                raise TypeError(
                    f"sorting_network layer {l}: the matrices must be 2-D torch tensors or numpy arrays, got {got}"
                )
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
        raise ValueError(
            f"sorting_network layer {l}, slot {t}: {what} must select exactly one wire (a "
            "single 1, zeros elsewhere); this is not a comparator layer"
        )
    return rows.argmax(axis=1)


def _layer_comparators(l: int, layer, n: int) -> list:
    """Comparators ``(min wire, max wire)`` of one dense layer (pass-through slots dropped), validated."""
    sa, sb, cmin, cmax = (_as_numpy(m) for m in layer)
    c = sa.shape[0]
    for name, m, shape in (
        ("split_a", sa, (c, n)),
        ("split_b", sb, (c, n)),
        ("combine_min", cmin, (n, c)),
        ("combine_max", cmax, (n, c)),
    ):
        if m.shape != shape:
            raise ValueError(
                f"sorting_network layer {l}: {name} has shape {m.shape}, expected {shape} "
                f"(split_a has {c} slots and the network {n} wires)"
            )
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
        raise ValueError(
            f"sorting_network layer {l}, slot {int(slots[comp][k])}: it reads wires "
            f"{int(a[comp][k])} and {int(b[comp][k])} but writes wires {int(i[k])} (min) and "
            f"{int(j[k])} (max); a comparator must write the min and the max back to the two "
            "wires it reads"
        )
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
            raise ValueError(
                f"sorting_network layer {l}, slot {int(rows[k])}: a slot reading wire "
                f"{int(w[k])} twice is a pass-through and must return it to wire {int(w[k])} "
                "only, with combine_min + combine_max weights summing to 1 (diffsort uses 0.5 "
                "and 0.5)"
            )
    written = np.concatenate([i, j, w])
    counts = np.bincount(written, minlength=n)
    if (counts != 1).any():
        wire = int(np.flatnonzero(counts != 1)[0])
        raise ValueError(
            f"sorting_network layer {l}: wire {wire} is written by {int(counts[wire])} slots; "
            "in a comparator layer every wire is written exactly once"
        )
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
        raise ValueError(
            f"The sorting network is on device {dev} while the vectors are on device "
            f"{vectors.device}, but they both need to be on the same device."
        )
    found = _lookup(flat)
    if found is None:
        n = int(m.shape[1])
        key = _convert(network, n)
        _remember(network, key, n)
    else:
        key, n = found
    if n != vectors.shape[1]:
        raise ValueError(
            f"the sorting network has {n} wires but the vectors have shape "
            f"{tuple(vectors.shape)}; vectors must be [batch, {n}]"
        )
    return key


# --- running ------------------------------------------------------------------------------------------


def _number(v):
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.requires_grad:
        return float(v.item())
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    return v  # rejected with a clear message by the checks


def _check_call(vectors, distribution, steepness, art_lambda):
    """``(steepness, art_lambda)`` as numbers for the kernels, after diffsort's checks of a call."""
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"vectors must be a torch.Tensor, got {type(vectors).__name__}")
    if vectors.dim() != 2:
        raise ValueError(
            f"vectors must be a 2-D tensor [batch, n] (sorted along dimension 1), got shape {tuple(vectors.shape)}"
        )
    if not isinstance(distribution, str) or distribution not in RELAXATIONS:
        raise DiffsortCompatError(
            f"softmax method `{distribution}` unknown; distribution must be one of {list(RELAXATIONS)}"
        )
    return _number(steepness), _number(used_art_lambda(distribution, art_lambda))


def used_art_lambda(distribution, art_lambda):
    """``art_lambda`` where ``distribution`` reads it (``'logistic_phi'``), else a valid placeholder: diffsort (and
    difftopk) ignore it for the other distributions, where ``art_lambda=None`` is common."""
    return art_lambda if distribution == "logistic_phi" else 0.25


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


def execute_sort(
    sorting_network: SORTING_NETWORK_TYPE,
    vectors: torch.Tensor,
    steepness: float = 10.0,
    art_lambda: float = 0.25,
    distribution: str = "cauchy",
) -> tuple[torch.Tensor, torch.Tensor]:
    """diffsort's ``execute_sort``, the body of :func:`sort` (diffsort's ``sort`` adds only the device check, which
    :func:`sort` makes here for both)."""
    return sort(sorting_network, vectors, steepness, art_lambda, distribution)


def s_best(x: torch.Tensor) -> torch.Tensor:
    """The ``'optimal'`` relaxation of ``x = steepness * (b - a)``: ``x + 1/2`` for ``|x| <= 1/4``, else
    ``1 - 1 / (16 |x|)`` (x > 0) or ``1 / (16 |x|)`` (x < 0), with diffsort's 1e-10 added to ``|x|``."""
    return relax(x, "optimal", 1.0)


class NormalCDF(torch.autograd.Function):
    """diffsort's ``'gaussian'`` relaxation: ``NormalCDF.apply(x, sigma) = Phi(x / sigma)``, with the gradient
    ``phi(x / sigma) / sigma`` (``sigma`` a number > 0, not differentiated; diffsort's backward rounds it to float32,
    this one does not)."""

    @staticmethod
    def forward(ctx, x, sigma):
        ctx.save_for_backward(x)
        ctx.sigma = float(sigma)
        return 0.5 * torch.special.erfc(-x / (ctx.sigma * math.sqrt(2.0)))

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        z = x / ctx.sigma
        return grad_y * torch.exp(-0.5 * z * z) / (ctx.sigma * math.sqrt(2 * math.pi)), None
