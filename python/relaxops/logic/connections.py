"""Fixed connections of a logic layer (docs/math/logic.md §2.2) and the inverse index used by the backward.

Both schemes reproduce difflogic's algorithms call for call (same candidate order, same calls to the default
CPU generator), so a seeded run builds the same network as the original.
"""

from __future__ import annotations

import torch

from .. import _checks

CONNECTIONS = ("random", "unique")


def check_sizes(in_dim: int, out_dim: int) -> None:
    for name, v in (("in_dim", in_dim), ("out_dim", out_dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if 2 * out_dim < in_dim:
        raise ValueError(
            f"out_dim * 2 must be >= in_dim so that every input can be used, got in_dim={in_dim}, out_dim={out_dim}"
        )


def check_connection(t, name: str, in_dim: int, out_dim: int) -> None:
    """``t`` is an integer tensor ``[out_dim]`` with values in ``[0, in_dim)`` (ValueError naming ``name``)."""
    if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(
            f"{name} must be an integer tensor of shape [{out_dim}], got {getattr(t, 'dtype', type(t).__name__)}"
        )
    if t.shape != (out_dim,):
        raise ValueError(f"{name} must be an integer tensor of shape [{out_dim}], got shape {tuple(t.shape)}")
    if t.numel() and not torch.compiler.is_compiling():  # data-dependent: checked when the graph's ops run
        if _checks.already_checked(("index", in_dim), t):  # unchanged since it passed (no host sync per call)
            return
        lo, hi = (int(v) for v in torch.aminmax(t.detach()))
        if lo < 0 or hi >= in_dim:
            raise ValueError(f"{name} must hold input indices in [0, in_dim={in_dim}), found values in [{lo}, {hi}]")
        _checks.mark_checked(("index", in_dim), t)


def check_given_connections(
    pair, in_dim: int, out_dim: int, what: str = "connections", names=("connections a", "connections b")
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validates user-given connections ``(a, b)`` (``what`` names the pair, ``names`` its two tensors):
    int64 CPU copies."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise ValueError(f"{what} must be a pair (a, b) of integer tensors [{out_dim}], got {type(pair).__name__}")
    for name, t in zip(names, pair):
        check_connection(t, name, in_dim, out_dim)
    a, b = (t.detach().to("cpu", torch.int64) for t in pair)
    return a, b


def random_connections(in_dim: int, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """difflogic's ``'random'``: a balanced random multiset of inputs (each used floor or ceil(2 out / in)
    times), randomly relabelled; self-connections ``a[j] == b[j]`` and repeated pairs can occur."""
    check_sizes(in_dim, out_dim)
    c = torch.randperm(2 * out_dim) % in_dim
    c = torch.randperm(in_dim)[c].reshape(2, out_dim)
    return c[0].clone(), c[1].clone()


def unique_connections(in_dim: int, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """difflogic's ``'unique'``: distinct pairs ``a < b``, neighbours first ((0,1), (2,3), ..., then (1,2), ...,
    then offsets 2, 3, ...), the first ``out_dim`` of them shuffled over the neurons. Raises where difflogic's
    candidate loop runs out (including its early stop, e.g. ``in_dim = out_dim = 3``)."""
    check_sizes(in_dim, out_dim)
    a = list(range(0, in_dim - 1, 2))
    b = [i + 1 for i in a]
    if len(a) < out_dim:
        odd = list(range(1, in_dim - 1, 2))
        a += odd
        b += [i + 1 for i in odd]
    offset = 2
    while out_dim > len(a) > offset:
        a += list(range(in_dim - offset))
        b += list(range(offset, in_dim))
        offset += 1
    if len(a) < out_dim:
        raise ValueError(
            f"connections='unique' cannot give out_dim={out_dim} distinct pairs of in_dim={in_dim} inputs "
            f"(difflogic's candidate list stops at {len(a)})"
        )
    perm = torch.randperm(out_dim)
    a_t = torch.tensor(a[:out_dim], dtype=torch.int64)[perm]
    b_t = torch.tensor(b[:out_dim], dtype=torch.int64)[perm]
    return a_t, b_t


def make_connections(kind: str, in_dim: int, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    if kind == "random":
        return random_connections(in_dim, out_dim)
    if kind == "unique":
        return unique_connections(in_dim, out_dim)
    raise ValueError(f"connections must be one of {list(CONNECTIONS)}, got {kind!r}")


def inverse_index(a: torch.Tensor, b: torch.Tensor, in_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR list of the neurons reading each input: ``(start [in_dim + 1], entry [2 n_out])`` int64, entries
    ``2 j + role`` (role 0: read as A, 1: as B) ascending within each input (csrc/logic/logic.h)."""
    n_out = a.numel()
    key = torch.cat([a, b]).to(torch.int64)
    j = torch.arange(n_out, dtype=torch.int64, device=a.device)
    entry = torch.cat([2 * j, 2 * j + 1])
    order = torch.argsort(key * (2 * n_out) + entry)
    start = torch.zeros(in_dim + 1, dtype=torch.int64, device=a.device)
    start[1:] = torch.cumsum(torch.bincount(key, minlength=in_dim), 0)
    return start, entry[order].contiguous()


def check_inverse_index(op: str, a: torch.Tensor, b: torch.Tensor, start: torch.Tensor, entry: torch.Tensor) -> None:
    """Raises ValueError unless ``(start, entry)`` is exactly ``inverse_index(a, b, start.numel() - 1)``: ``start``
    runs from 0 to ``2 n_out`` without decreasing, and input ``c``'s entries are the ``2 j + role`` whose input is
    ``c``, ascending (so the entries are a permutation). Shapes, dtypes and ``a``, ``b`` ranges are checked before."""
    if _checks.values_unknown(start) or _checks.already_checked(("inverse",), a, b, start, entry):
        return
    n2, n_in = entry.numel(), start.numel() - 1
    counts = start.diff()
    if not bool((start[0] == 0) & (start[-1] == n2) & (counts >= 0).all()):
        raise ValueError(f"relaxops::{op}: csr_start must rise from 0 to {n2} = 2 n_out without decreasing")
    if n2 == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(entry))
    if lo < 0 or hi >= n2:
        raise ValueError(f"relaxops::{op}: csr_entry must hold entries in [0, {n2}), found values in [{lo}, {hi}]")
    owner = torch.stack([a, b], 1).reshape(-1)[entry]  # the input of entry 2 j + role
    rows = torch.repeat_interleave(torch.arange(n_in, device=start.device), counts, output_size=n2)
    ascending = (entry[1:] > entry[:-1]) | (rows[1:] != rows[:-1])
    if not bool((owner == rows).all() & ascending.all()):
        raise ValueError(
            f"relaxops::{op}: (csr_start, csr_entry) is not the inverse index of (a, b) "
            "(connections.inverse_index; stale after an in-place edit of the connections?)"
        )
    _checks.mark_checked(("inverse",), a, b, start, entry)


# --- tree convolutions (LogicConv2d) ---------------------------------------------------------------------

CONV_CONNECTIONS = ("random", "two_channels")


def conv_leaves(
    in_channels: int,
    out_channels: int,
    leaves: int,
    kernel_size: tuple[int, int],
    scheme: str = "random",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The leaf connections of ``out_channels`` logic trees with ``leaves`` leaves each: int64 ``[out_channels,
    leaves, 3]`` holding ``(channel, dy, dx)`` with ``dy < kernel_size[0]``, ``dx < kernel_size[1]``. Drawn on the
    CPU from ``generator`` (torch's default CPU generator when None), so a seed reproduces them.

    * ``"random"``: every leaf independently and uniformly over the ``in_channels x kh x kw`` receptive field,
      with replacement (the scheme of torchlogix 0.2.2's fixed conv connections);
    * ``"two_channels"``: each tree first draws two distinct input channels (the same one twice when
      ``in_channels == 1``); leaf ``l`` reads the first of them for even ``l`` and the second for odd ``l``, so
      every gate above the leaves combines the two channels, at a uniformly drawn position of the window (the
      paper's sparse per-tree channel choice: a tree sees a few channels, not all of them).
    """
    if scheme not in CONV_CONNECTIONS:
        raise ValueError(f"connections must be one of {list(CONV_CONNECTIONS)}, got {scheme!r}")
    kh, kw = kernel_size
    if scheme == "random":
        idx = torch.randint(0, in_channels * kh * kw, (out_channels, leaves), generator=generator)
        c, pos = idx // (kh * kw), idx % (kh * kw)
    else:
        if in_channels == 1:
            pair = torch.zeros(out_channels, 2, dtype=torch.int64)
        else:
            pair = torch.rand(out_channels, in_channels, generator=generator).argsort(1)[:, :2]
        c = pair[:, torch.arange(leaves) % 2]
        pos = torch.randint(0, kh * kw, (out_channels, leaves), generator=generator)
    return torch.stack([c, pos // kw, pos % kw], dim=-1).contiguous()


def check_conv_leaves(
    t, name: str, in_channels: int, out_channels: int, leaves: int, kernel_size: tuple[int, int]
) -> None:
    """``t`` is an integer tensor ``[out_channels, leaves, 3]`` of ``(channel, dy, dx)`` in range (ValueError
    naming ``name``)."""
    shape = (out_channels, leaves, 3)
    if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(
            f"{name} must be an integer tensor of shape {list(shape)}, got {getattr(t, 'dtype', type(t).__name__)}"
        )
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be an integer tensor of shape {list(shape)}, got shape {list(t.shape)}")
    if t.numel() and not torch.compiler.is_compiling():
        for i, (what, high) in enumerate((("channel", in_channels), ("dy", kernel_size[0]), ("dx", kernel_size[1]))):
            lo, hi = (int(v) for v in torch.aminmax(t[..., i].detach()))
            if lo < 0 or hi >= high:
                raise ValueError(f"{name}: {what} must lie in [0, {high}), found values in [{lo}, {hi}]")


def conv_inverse_index(leaves: torch.Tensor, in_channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR inverse index of the leaves' channels: ``(start [in_channels + 1], entry [out_channels * L])``, entries
    ``e = k L + l`` of the leaves reading channel ``c`` at ``entry[start[c]:start[c + 1]]``, ascending."""
    ch = leaves[..., 0].reshape(-1)
    entry = torch.argsort(ch, stable=True)
    counts = torch.bincount(ch, minlength=in_channels)
    start = torch.zeros(in_channels + 1, dtype=torch.int64, device=leaves.device)
    start[1:] = torch.cumsum(counts, 0)
    return start, entry.to(torch.int64)


def check_conv_inverse_index(op: str, leaves: torch.Tensor, start: torch.Tensor, entry: torch.Tensor) -> None:
    """Raises ValueError unless ``(start, entry)`` is exactly ``conv_inverse_index(leaves, start.numel() - 1)``
    (the GPU backends' check; the C++ CPU kernel checks the index itself). Shapes, dtypes and the leaves' ranges
    are checked before."""
    if _checks.values_unknown(start):
        return
    n, n_in = entry.numel(), start.numel() - 1
    counts = start.diff()
    if not bool((start[0] == 0) & (start[-1] == n) & (counts >= 0).all()):
        raise ValueError(f"relaxops::{op}: csr_start must rise from 0 to {n} = C_out L without decreasing")
    if n == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(entry))
    if lo < 0 or hi >= n:
        raise ValueError(f"relaxops::{op}: csr_entry must hold entries in [0, {n}), found values in [{lo}, {hi}]")
    owner = leaves[..., 0].reshape(-1)[entry]  # the channel of entry k L + l
    rows = torch.repeat_interleave(torch.arange(n_in, device=start.device), counts, output_size=n)
    ascending = (entry[1:] > entry[:-1]) | (rows[1:] != rows[:-1])
    if not bool((owner == rows).all() & ascending.all()):
        raise ValueError(
            f"relaxops::{op}: (csr_start, csr_entry) is not the inverse index of the leaves "
            "(connections.conv_inverse_index; stale after an in-place edit of the leaves?)"
        )


# --- lookup-table layers (LogicLUTLayer) -----------------------------------------------------------------


def check_lut_sizes(in_dim: int, out_dim: int, k: int) -> None:
    for name, v in (("in_dim", in_dim), ("out_dim", out_dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if k * out_dim < in_dim:
        raise ValueError(
            f"out_dim * k must be >= in_dim so that every input can be used, got in_dim={in_dim}, out_dim={out_dim}, "
            f"k={k}"
        )


def lut_connections(kind: str, in_dim: int, out_dim: int, k: int) -> torch.Tensor:
    """int64 ``[k, out_dim]`` inputs of ``out_dim`` k-input neurons, drawn from torch's default CPU generator.

    * ``"random"``: a balanced random multiset (every input used floor or ceil of ``k out_dim / in_dim`` times),
      randomly relabelled; a neuron may read one input twice (as LogicLayer's ``"random"``).
    * ``"unique"``: neuron j reads the inputs at positions ``j k .. j k + k - 1`` (mod ``in_dim``) of a random
      permutation, the neurons then shuffled: the k inputs of a neuron are distinct (needs ``in_dim >= k``) and
      the inputs are used as evenly as in ``"random"``.
    """
    check_lut_sizes(in_dim, out_dim, k)
    if kind == "random":
        c = torch.randperm(k * out_dim) % in_dim
        c = torch.randperm(in_dim)[c].reshape(out_dim, k)
        return c.t().contiguous()
    if kind == "unique":
        if in_dim < k:
            raise ValueError(f"connections='unique' needs in_dim >= k distinct inputs, got in_dim={in_dim}, k={k}")
        perm = torch.randperm(in_dim)
        c = perm[torch.arange(k * out_dim) % in_dim].reshape(out_dim, k)
        return c[torch.randperm(out_dim)].t().contiguous()
    raise ValueError(f"connections must be one of {list(CONNECTIONS)} or a [k, out_dim] tensor, got {kind!r}")


def check_lut_indices(t, name: str, in_dim: int, out_dim: int, k: int) -> torch.Tensor:
    """``t`` is an integer tensor ``[k, out_dim]`` with values in ``[0, in_dim)`` (ValueError naming ``name``);
    returns an int64 copy."""
    if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(
            f"{name} must be an integer tensor of shape [{k}, {out_dim}], got {getattr(t, 'dtype', type(t).__name__)}"
        )
    if tuple(t.shape) != (k, out_dim):
        raise ValueError(f"{name} must be an integer tensor of shape [k, out_dim] = [{k}, {out_dim}], got shape "
                         f"{list(t.shape)}")  # fmt: skip
    if t.numel() and not torch.compiler.is_compiling():
        lo, hi = (int(v) for v in torch.aminmax(t.detach()))
        if lo < 0 or hi >= in_dim:
            raise ValueError(f"{name} must hold input indices in [0, in_dim={in_dim}), found values in [{lo}, {hi}]")
    return t.detach().to(torch.int64).contiguous()


def lut_inverse_index(indices: torch.Tensor, in_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR list of the (neuron, slot) pairs reading each input: ``(start [in_dim + 1], entry [k n_out])`` int64,
    entries ``k j + i`` (neuron j reads the input in slot i) ascending within each input (csrc/logic/lut.h)."""
    k, n_out = indices.shape
    key = indices.t().reshape(-1).to(torch.int64)  # key of entry k j + i
    entry = torch.argsort(key, stable=True)
    start = torch.zeros(in_dim + 1, dtype=torch.int64, device=indices.device)
    start[1:] = torch.cumsum(torch.bincount(key, minlength=in_dim), 0)
    return start, entry.to(torch.int64).contiguous()


def check_lut_inverse_index(op: str, indices: torch.Tensor, start: torch.Tensor, entry: torch.Tensor) -> None:
    """Raises ValueError unless ``(start, entry)`` is exactly ``lut_inverse_index(indices, start.numel() - 1)``
    (the GPU backends' check; the C++ CPU kernel checks the index itself). Shapes, dtypes and index ranges are
    checked before."""
    if _checks.values_unknown(start) or _checks.already_checked(("lut_inverse",), indices, start, entry):
        return
    n, n_in = entry.numel(), start.numel() - 1
    counts = start.diff()
    if not bool((start[0] == 0) & (start[-1] == n) & (counts >= 0).all()):
        raise ValueError(f"relaxops::{op}: csr_start must rise from 0 to {n} = k n_out without decreasing")
    if n == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(entry))
    if lo < 0 or hi >= n:
        raise ValueError(f"relaxops::{op}: csr_entry must hold entries in [0, {n}), found values in [{lo}, {hi}]")
    owner = indices.t().reshape(-1)[entry]
    rows = torch.repeat_interleave(torch.arange(n_in, device=start.device), counts, output_size=n)
    ascending = (entry[1:] > entry[:-1]) | (rows[1:] != rows[:-1])
    if not bool((owner == rows).all() & ascending.all()):
        raise ValueError(
            f"relaxops::{op}: (csr_start, csr_entry) is not the inverse index of the indices "
            "(connections.lut_inverse_index; stale after an in-place edit of the indices?)"
        )
    _checks.mark_checked(("lut_inverse",), indices, start, entry)
