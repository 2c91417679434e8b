"""Fixed connections of a logic layer (spec/logic.md section 2.2) and the inverse index used by the backward.

Both schemes reproduce difflogic's algorithms call for call (same candidate order, same calls to the default
CPU generator), so a seeded run builds the same network as the original.
"""

from __future__ import annotations

import torch

CONNECTIONS = ("random", "unique")


def check_sizes(in_dim: int, out_dim: int) -> None:
    for name, v in (("in_dim", in_dim), ("out_dim", out_dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if 2 * out_dim < in_dim:
        raise ValueError(
            f"out_dim * 2 must be >= in_dim so that every input can be used, got in_dim={in_dim}, out_dim={out_dim}"
        )


def check_given_connections(pair, in_dim: int, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validates user-given connections ``(a, b)``: int64 CPU copies."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(t, torch.Tensor) for t in pair):
        raise ValueError("connections must be 'random', 'unique' or a pair (a, b) of integer tensors")
    a, b = (t.detach().to("cpu") for t in pair)
    for name, t in (("a", a), ("b", b)):
        if t.dtype.is_floating_point or t.dtype == torch.bool or t.shape != (out_dim,):
            raise ValueError(f"connections {name} must be an integer tensor of shape [{out_dim}], got {t.dtype} "
                             f"{tuple(t.shape)}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= in_dim):
            raise ValueError(f"connections {name} must be in [0, in_dim={in_dim})")
    return a.to(torch.int64), b.to(torch.int64)


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
