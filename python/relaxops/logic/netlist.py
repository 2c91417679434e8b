"""A discretized logic gate network as a netlist, simplified, and laid out for the CPU packed-inference engine.

Simplification (exact: every output bit is unchanged) is what a logic synthesis tool does first:

* constant folding: a gate with a constant input (``zero``/``one`` gates and everything they feed) is a function
  of its other input only;
* pass-through removal: ``A``, ``B``, ``not A``, ``not B`` gates (and folded gates that became one of them) are
  aliases of an earlier node, and a negated alias is absorbed into the truth table of the gate that reads it;
* a gate reading one node twice is a function of that node only;
* dead-gate elimination: gates no output depends on are dropped.

What is left are two-input gates that depend on both inputs; an output is a node, a negated node or a constant.
A randomly initialized MNIST "small" network (6 x 8000 gates) keeps about a third of its gates.

Layout (``Program``, the ``PackedProgram`` of ``csrc/logic/packed.h``): the nodes live in an arena of word rows
("slots"); input feature d is slot d; a step (one layer's remaining gates) writes slots freed by earlier steps
(a node's slot is freed after the last step reading it), so the arena stays near the widest live set and in cache.
Pair fusion: a gate whose first or second input is a gate read by nothing else (fanout 1: tree convolutions, OR
pools, a quarter of a random layer's gates) and evaluated plainly absorbs it: its entry computes
``outer(inner(a, b), c)`` in registers, so the inner gate's node is never stored (one store and one load fewer
per pair, the engine's cost per gate) and its inputs are read at the outer gate's step. Steps are greedy in order:
a fused entry is not absorbed again. A step's entries are sorted by run (16 plain ops, then the 100 pairs of
``FUSABLE_OPS``), then by first input slot; destinations are allocated in that order, lowest free slot first.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .. import _ext

# Output kinds: the node's value, its negation, constant 0, constant 1 (bit 0 is the negation / the constant).
NODE, NOT_NODE, ZERO, ONE = 0, 1, 2, 3

# The gates that depend on both inputs, in the order of the engine's fused runs (kFusableOps of packed.h), and the
# runs of a step: 16 plain ops, then fused pair (inner FUSABLE_OPS[u], outer FUSABLE_OPS[v]) at 16 + 10 u + v.
FUSABLE_OPS = (1, 2, 4, 6, 7, 8, 9, 11, 13, 14)
RUNS = 16 + len(FUSABLE_OPS) ** 2


@dataclass
class Netlist:
    """Nodes ``0 .. num_inputs - 1`` are the inputs; ``steps[s] = (ids, a, b, op)`` are the gates of layer ``s``
    (node ids, input node ids, gate ids 0..15); the outputs are ``(out_node, out_kind)`` (kinds above; the node of
    a constant is 0)."""

    num_inputs: int
    num_nodes: int
    steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    out_node: torch.Tensor
    out_kind: torch.Tensor

    @property
    def num_gates(self) -> int:
        return sum(int(s[0].numel()) for s in self.steps)


def check_network(num_inputs, layers, num_classes) -> tuple[int, list[tuple[torch.Tensor, ...]], int]:
    """A discretized network ``(num_inputs, [(a, b, op), ...], num_classes)`` validated (ValueError naming the
    part): ``num_inputs``, ``num_classes`` integers >= 1, at least one layer, each of three integer vectors (tensors,
    arrays or lists) of one length >= 1 with ``a``, ``b`` in ``[0, width of the previous layer)`` and gate ids
    ``op`` in ``0..15``, and ``num_classes`` dividing the last layer. Returns it with int64 CPU tensors."""
    for name, v in (("num_inputs", num_inputs), ("num_classes", num_classes)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not isinstance(layers, (list, tuple)) or not layers:
        raise ValueError(f"layers must be a non-empty list of (a, b, op), got {layers!r:.80}")
    checked, n_in = [], int(num_inputs)
    for i, layer in enumerate(layers):
        if not isinstance(layer, (list, tuple)) or len(layer) != 3:
            raise ValueError(f"layers[{i}] must be a triple (a, b, op), got {type(layer).__name__}")
        parts = []
        for name, t, high in (("a", layer[0], n_in), ("b", layer[1], n_in), ("op", layer[2], 16)):
            try:
                t = torch.as_tensor(t).detach()
            except (TypeError, ValueError, RuntimeError) as e:
                raise ValueError(f"layers[{i}] {name} must be an integer vector: {e}") from None
            if (
                t.dtype.is_floating_point
                or t.dtype.is_complex
                or t.dtype == torch.bool
                or t.dim() != 1
                or t.numel() == 0
                or (parts and t.shape != parts[0].shape)
            ):
                raise ValueError(
                    f"layers[{i}] {name} must be an integer vector of the layer's length >= 1, got "
                    f"{t.dtype} {list(t.shape)}"
                )
            lo, hi = (int(v) for v in torch.aminmax(t))
            if lo < 0 or hi >= high:
                raise ValueError(f"layers[{i}] {name} must hold values in [0, {high}), found values in [{lo}, {hi}]")
            parts.append(t.to("cpu", torch.int64))
        checked.append(tuple(parts))
        n_in = parts[0].numel()
    if n_in % num_classes:
        raise ValueError(f"num_classes={num_classes} must divide the last layer's {n_in} outputs")
    return int(num_inputs), checked, int(num_classes)


def _fold(op, ka, kb, same):
    """Gate ``op`` on literals of kinds ``ka``, ``kb`` as a truth table over the underlying nodes (x, y), and
    whether it depends on x and on y (``same``: both literals are the same node, so only x == y happens)."""
    ma, va, mb, vb = ka < 2, ka & 1, kb < 2, kb & 1  # literal value: (node & m) ^ v

    def t(x, y):
        return (op >> (3 - 2 * ((x & ma) ^ va) - ((y & mb) ^ vb))) & 1

    t00, t01, t10, t11 = t(0, 0), t(0, 1), t(1, 0), t(1, 1)
    dx = torch.where(same, t00 != t11, (t00 != t10) | (t01 != t11))
    dy = ~same & ((t00 != t01) | (t10 != t11))
    return 8 * t00 + 4 * t01 + 2 * t10 + t11, t00, dx, dy


def build(num_inputs: int, layers, simplify: bool = True) -> Netlist:
    """The netlist of ``layers`` (``[(a, b, op), ...]`` int64 CPU tensors, as ``discretize`` returns them);
    ``simplify=False`` keeps every gate as it is (the unsimplified engine, for comparisons)."""
    node, kind = torch.arange(num_inputs), torch.zeros(num_inputs, dtype=torch.int64)
    steps, next_id = [], num_inputs
    for a, b, op in layers:
        na, ka, nb, kb = node[a], kind[a], node[b], kind[b]
        if simplify:
            table, t00, dx, dy = _fold(op, ka, kb, (ka < 2) & (kb < 2) & (na == nb))
        else:
            table, t00, dx, dy = op, op, torch.ones_like(op, dtype=torch.bool), torch.ones_like(op, dtype=torch.bool)
        real = dx & dy
        ids = next_id + torch.arange(int(real.sum()))
        next_id += ids.numel()
        steps.append((ids, na[real], nb[real], table[real]))
        node = torch.where(dx, na, torch.where(dy, nb, torch.zeros_like(na)))  # aliases of x or y, constants
        kind = torch.where(dx | dy, t00, ZERO + t00)  # an alias is negated iff its value at 0 is 1
        node[real], kind[real] = ids, NODE
    if simplify:
        _drop_dead(steps, next_id, node, kind)
    return Netlist(num_inputs, next_id, steps, node, kind)


def _drop_dead(steps, num_nodes: int, node: torch.Tensor, kind: torch.Tensor) -> None:
    """Dead-gate elimination, from the outputs back (in place)."""
    used = torch.zeros(num_nodes, dtype=torch.bool)
    used[node[kind < 2]] = True
    for s in range(len(steps) - 1, -1, -1):
        keep = used[steps[s][0]]
        steps[s] = tuple(t[keep] for t in steps[s])
        used[steps[s][1]] = True
        used[steps[s][2]] = True


# Operations of a wire graph (build_graph): the network as a sequence of edits of a vector of wires.
GATHER, GATES = "gather", "gates"


def build_graph(num_inputs: int, ops, simplify: bool = True) -> Netlist:
    """The netlist of a network given as edits of a vector of wires, which starts as the ``num_inputs`` inputs:

    * ``(GATHER, idx)``: the wires become ``wires[idx]`` (int64 ``idx``; ``-1`` is the constant-0 wire, e.g. the
      zero padding of a convolution);
    * ``(GATES, a, b, op)``: gates ``op[j](wires[a[j]], wires[b[j]])`` are APPENDED to the wires (the earlier wires
      stay addressable, so a later gate may read any earlier node).

    Each ``GATES`` edit is one step of the netlist. The final wires are the outputs. With ``simplify`` the
    constant-0 wire is folded into the gates reading it (with everything else ``build`` folds); without, it is
    one real gate (the ``zero`` gate of input 0, in a step of its own before the others) and every gate is kept.
    ``lower.lower_model`` builds these edits for convolutional networks; ``build`` is the layered special case.
    """
    node, kind = torch.arange(num_inputs), torch.zeros(num_inputs, dtype=torch.int64)
    steps, next_id, zero_node = [], num_inputs, None
    if not simplify and any(o[0] == GATHER and bool((o[1] < 0).any()) for o in ops):
        zero_node = next_id
        steps.append(
            (
                torch.tensor([zero_node]),
                torch.zeros(1, dtype=torch.int64),
                torch.zeros(1, dtype=torch.int64),
                torch.zeros(1, dtype=torch.int64),
            )
        )
        next_id += 1
    for o in ops:
        if o[0] == GATHER:
            idx = o[1]
            const = idx < 0
            safe = idx.clamp(min=0)
            node, kind = node[safe], kind[safe]
            if simplify:
                node, kind = torch.where(const, 0, node), torch.where(const, ZERO, kind)
            elif bool(const.any()):
                node, kind = torch.where(const, zero_node, node), torch.where(const, NODE, kind)
            continue
        if o[0] != GATES:
            raise ValueError(f"unknown wire graph operation {o[0]!r}")
        a, b, op = o[1], o[2], o[3]
        na, ka, nb, kb = node[a], kind[a], node[b], kind[b]
        if simplify:
            table, t00, dx, dy = _fold(op, ka, kb, (ka < 2) & (kb < 2) & (na == nb))
        else:
            table, t00 = op, op
            dx = dy = torch.ones_like(op, dtype=torch.bool)
        real = dx & dy
        ids = next_id + torch.arange(int(real.sum()))
        next_id += ids.numel()
        steps.append((ids, na[real], nb[real], table[real]))
        gnode = torch.where(dx, na, torch.where(dy, nb, torch.zeros_like(na)))
        gkind = torch.where(dx | dy, t00, ZERO + t00)
        gnode[real], gkind[real] = ids, NODE
        node, kind = torch.cat([node, gnode]), torch.cat([kind, gkind])
    if simplify:
        _drop_dead(steps, next_id, node, kind)
    return Netlist(num_inputs, next_id, steps, node, kind)


def evaluate(net: Netlist, words: torch.Tensor) -> torch.Tensor:
    """The outputs ``[num_outputs, W]`` of ``net`` on packed input words ``[num_inputs, W]`` (int64, any device):
    the plain PyTorch interpreter of the netlist (reference backend, and the GPU path of networks that are not a
    chain of layers), one vectorized operation per step and gate id."""
    from .reference import gate_word

    values = torch.empty(net.num_nodes, words.shape[1], dtype=torch.int64, device=words.device)
    values[: net.num_inputs] = words
    for ids, a, b, op in net.steps:
        dev = words.device
        ids, a, b, op = ids.to(dev), a.to(dev), b.to(dev), op.to(dev)
        for o in torch.unique(op).tolist():
            m = op == o
            values[ids[m]] = gate_word(o, values[a[m]], values[b[m]])
    kind = net.out_kind.to(words.device)[:, None]
    out = values[net.out_node.to(words.device)]
    out = torch.where(kind == NOT_NODE, ~out, out)
    out = torch.where(kind == ZERO, torch.zeros_like(out), out)
    return torch.where(kind == ONE, torch.full_like(out, -1), out)


@dataclass
class Program:
    """``Netlist`` in arena slots (``PackedProgram``): ``op_start`` int64 ``[RUNS S + 1]``: the entries of step s in
    run r are ``[op_start[RUNS s + r], op_start[RUNS s + r + 1])`` (runs: see ``RUNS``); ``src_a``, ``src_b``,
    ``src_c`` (fused entries' third input; 0 in plain ones), ``dst``, ``out_slot`` int32 and ``op`` (plain: the
    gate id; fused: 16 inner + outer), ``out_kind`` uint8, all on the CPU. ``num_gates``: the gates evaluated (a
    fused entry is two)."""

    num_inputs: int
    num_slots: int
    op_start: torch.Tensor
    src_a: torch.Tensor
    src_b: torch.Tensor
    src_c: torch.Tensor
    dst: torch.Tensor
    op: torch.Tensor
    out_slot: torch.Tensor
    out_kind: torch.Tensor
    num_gates: int

    @property
    def num_outputs(self) -> int:
        return self.out_slot.numel()

    def args(self) -> tuple[int, ...]:
        return (
            self.num_inputs,
            self.num_slots,
            (self.op_start.numel() - 1) // RUNS,
            _ext.ptr(self.op_start),
            _ext.ptr(self.src_a),
            _ext.ptr(self.src_b),
            _ext.ptr(self.src_c),
            _ext.ptr(self.dst),
            _ext.ptr(self.op),
            self.num_outputs,
            _ext.ptr(self.out_slot),
            _ext.ptr(self.out_kind),
        )


def _fuse(net: Netlist) -> list[tuple[torch.Tensor, ...]]:
    """The entries of each step after pair fusion (see the module docstring): ``(ids, a, b, c, run, op)`` with
    ``c`` the third input of fused entries (-1 in plain ones)."""
    rank = torch.full((16,), -1, dtype=torch.int64)
    rank[list(FUSABLE_OPS)] = torch.arange(len(FUSABLE_OPS))
    t = torch.arange(16)  # the truth table with the inputs swapped: T'(x, y) = T(y, x)
    swapped = (t & 9) | ((t & 4) >> 1) | ((t & 2) << 1)
    N = net.num_nodes
    fan = torch.zeros(N, dtype=torch.int64)
    for _, a, b, _ in net.steps:
        fan += torch.bincount(torch.cat([a, b]), minlength=N)
    fan += torch.bincount(net.out_node[net.out_kind < 2], minlength=N)
    plain = torch.zeros(N, dtype=torch.bool)  # gates evaluated plainly so far: may be absorbed
    node_a, node_b, node_op = (torch.zeros(N, dtype=torch.int64) for _ in range(3))
    absorbed = torch.zeros(N, dtype=torch.bool)
    fused = []
    for ids, a, b, op in net.steps:
        ok = rank[op] >= 0
        ca = ok & plain[a] & (fan[a] == 1) & (rank[node_op[a]] >= 0)
        cb = ok & ~ca & plain[b] & (fan[b] == 1) & (rank[node_op[b]] >= 0)
        take = ca | cb
        child, other = torch.where(ca, a, b)[take], torch.where(ca, b, a)[take]
        outer = torch.where(ca, op, swapped[op])[take]
        absorbed[child] = True
        node_a[ids], node_b[ids], node_op[ids] = a, b, op
        plain[ids] = ~take
        fused.append((take, child, other, outer))
    entries = []
    for (ids, a, b, op), (take, child, other, outer) in zip(net.steps, fused):
        keep = ~take & ~absorbed[ids]
        inner = node_op[child]
        c = torch.cat([torch.full((int(keep.sum()),), -1, dtype=torch.int64), other])
        run = torch.cat([op[keep], 16 + len(FUSABLE_OPS) * rank[inner] + rank[outer]])
        entries.append(
            (
                torch.cat([ids[keep], ids[take]]),
                torch.cat([a[keep], node_a[child]]),
                torch.cat([b[keep], node_b[child]]),
                c,
                run,
                torch.cat([op[keep], 16 * inner + outer]),
            )
        )
    return entries


def allocate(net: Netlist) -> Program:
    """Slots for the nodes of ``net``, with pair fusion (see the module docstring)."""
    D0 = net.num_inputs
    entries = _fuse(net)
    S = len(entries)
    born = torch.full((net.num_nodes,), -1, dtype=torch.int64)
    last = torch.full((net.num_nodes,), -1, dtype=torch.int64)  # last step reading the node
    for s, (ids, a, b, c, _, _) in enumerate(entries):
        born[ids] = s
        last[a], last[b], last[c[c >= 0]] = s, s, s
    last[net.out_node[net.out_kind < 2]] = S  # outputs are never freed
    free_after = torch.maximum(born, last)
    slot = torch.full((net.num_nodes,), -1, dtype=torch.int64)
    slot[:D0] = torch.arange(D0)
    free, num_slots = slot[:D0][free_after[:D0] < 0], D0
    starts, parts = [torch.zeros(1, dtype=torch.int64)], ([], [], [], [], [])
    for s, (ids, a, b, c, run, op) in enumerate(entries):
        order = torch.argsort(run * (num_slots + 1) + slot[a], stable=True)
        ids, a, b, c, run, op = ids[order], a[order], b[order], c[order], run[order], op[order]
        n = ids.numel()
        extra = max(n - free.numel(), 0)
        dst = torch.cat([free[:n], torch.arange(num_slots, num_slots + extra)])
        free, num_slots = free[n:], num_slots + extra
        slot[ids] = dst
        for lst, t in zip(parts, (slot[a], slot[b], torch.where(c >= 0, slot[c.clamp(min=0)], 0), dst, op)):
            lst.append(t)
        starts.append(starts[-1][-1] + torch.searchsorted(run, torch.arange(1, RUNS + 1)))
        dying = slot[(free_after == s).nonzero().flatten()]
        free = torch.sort(torch.cat([free, dying])).values
    src_a, src_b, src_c, dst, op = (torch.cat(p) if p else torch.zeros(0, dtype=torch.int64) for p in parts)
    out_slot = torch.where(net.out_kind < 2, slot[net.out_node], torch.zeros_like(net.out_node))
    i32 = {"dtype": torch.int32}
    return Program(
        D0,
        num_slots,
        torch.cat(starts).contiguous(),
        src_a.to(**i32),
        src_b.to(**i32),
        src_c.to(**i32),
        dst.to(**i32),
        op.to(torch.uint8),
        out_slot.to(**i32),
        net.out_kind.to(torch.uint8),
        net.num_gates,
    )
