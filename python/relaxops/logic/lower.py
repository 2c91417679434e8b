"""Lowering of convolutional logic gate networks (Petersen et al. 2024) and of networks with lookup-table layers to
a netlist (``netlist.build_graph``).

A network ``Sequential(LogicConv2d | OrPooling2d | Flatten | LogicLayer | LogicLUTLayer ..., GroupSum)`` in eval
mode, on Boolean inputs ``[C, H, W]`` (or flat ``[D]`` for networks without spatial layers), becomes two-input
gates over the input bits, so that the exact simplification, the packed CPU engine and the C / Verilog exporters of
the dense path apply unchanged.

Bit order: a map ``[C, H, W]`` is a vector of ``C H W`` wires in channel-major (row-major) order, feature
``c H W + y W + x``: the order of ``torch.flatten(x, 1)``, of ``torch.nn.Flatten()`` and of ``GroupSum(k,
start_dim=1)``. The network's input bits are in that order (a ``[B, C, H, W]`` batch flattened), and so are the
wires between layers.

* ``LogicConv2d`` (eval: argmax gates): output ``(k, oy, ox)`` is tree ``k`` evaluated on its leaves
  ``(c, dy, dx)`` = input wire ``(c, oy sh - ph + dy, ox sw - pw + dx)``, or the constant-0 wire where that lies in
  the zero padding (the simplification folds it into the gate reading it). The tree levels become one step each:
  ``C_out Ho Wo L / 2`` gates above the leaves, then half as many, ..., the roots.
* ``OrPooling2d``: each window's cells inside the map (padding cells take no part) are OR-ed by a balanced tree of
  ``m - 1`` two-input ``or`` gates for ``m`` cells (a single cell is a wire, no gate); one step per level.
* ``Flatten`` (of a map: ``start_dim=1``, ``end_dim=-1`` only): the wires as they are.
* ``LogicLayer`` (on a flat vector): one step of its gates.
* ``LogicLUTLayer`` (on a flat vector): each neuron's truth table by Shannon expansion (``lut_gates``): about two
  steps per input of the neurons.
* ``GroupSum`` (last): the outputs are the wires; on a map it needs ``start_dim=1`` (channel-major groups).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .bits import PackedBits
from .modules import GroupSum, LogicConv2d, OrPooling2d, layer_gate_ids
from .netlist import GATES, GATHER, build_graph, check_network, evaluate

# gate ids (docs/math/logic.md §1.1)
AND, NOT_IMPLIED_BY, XOR, OR, NOT_A, IMPLIES, ONE = 1, 4, 6, 7, 12, 13, 15


@dataclass
class Graph:
    """A lowered network: ``num_inputs`` bits (``input_shape`` ``(C, H, W)`` flattened channel-major), the wire
    edits ``ops`` of ``netlist.build_graph``, ``num_outputs`` output wires in ``num_classes`` groups, and a short
    description (layer kinds and gate count) for exported sources."""

    input_shape: tuple[int, int, int]
    num_inputs: int
    ops: list
    num_outputs: int
    num_classes: int
    num_model_gates: int
    description: str


def is_conv_network(model) -> bool:
    """Whether ``model`` holds a spatial layer (``LogicConv2d`` or ``OrPooling2d``): such networks are lowered
    here, the others (chains of logic layers) keep the layered path."""
    try:
        modules = list(model)
    except TypeError:
        return False
    return any(isinstance(m, (LogicConv2d, OrPooling2d)) for m in modules)


def is_lut_layer(m) -> bool:
    """Whether ``m`` is a k-input lookup-table layer (``LogicLUTLayer``, recognized by its interface: lut.py
    imports this module for its packed path, so this module does not import it)."""
    return all(hasattr(m, attr) for attr in ("truth_tables", "resolved_indices", "in_dim", "out_dim"))


def needs_graph(model) -> bool:
    """Whether ``model`` is lowered here (a convolutional network or one with ``LogicLUTLayer``s); the others
    (chains of two-input logic layers) keep the layered path."""
    try:
        modules = list(model)
    except TypeError:
        return False
    return is_conv_network(model) or any(is_lut_layer(m) for m in modules)


def check_input_shape(input_shape) -> tuple[int, int, int]:
    if input_shape is None:
        raise ValueError("a convolutional network needs input_shape=(C, H, W), the shape of one input image")
    try:
        shape = tuple(int(v) for v in input_shape)
        ok = len(shape) == 3 and all(v >= 1 and v == s for v, s in zip(shape, input_shape))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"input_shape must be (C, H, W), three integers >= 1, got {input_shape!r}")
    return shape


class _Builder:
    def __init__(self, num_inputs: int):
        self.ops, self.width, self.num_gates = [], num_inputs, 0

    def gates(self, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
        """Appends gates; returns the wire indices of their outputs."""
        self.ops.append((GATES, a.to(torch.int64), b.to(torch.int64), op.to(torch.int64)))
        first, self.width = self.width, self.width + a.numel()
        self.num_gates += a.numel()
        return torch.arange(first, self.width)

    def gather(self, idx: torch.Tensor) -> None:
        self.ops.append((GATHER, idx.to(torch.int64)))
        self.width = idx.numel()


# Literal kinds of lut_gates: a wire, the constant 0, the constant 1.
_WIRE, _ZERO, _ONE = 0, 1, 2


def lut_gates(builder: _Builder, tables: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Two-input gates computing k-input truth tables ``tables`` bool ``[n, 2^k]`` (entry t: first input = most
    significant bit) of the wires ``indices [k, n]``, by Shannon expansion from the last input to the first:
    level i turns each pair of sub-tables (input i = 0, input i = 1) into one, with

    * equal halves: the sub-table without input i (constants stay constants: constant sub-tables are folded);
    * complementary halves: ``x_i xor f0`` (``x_i`` itself for ``f0 = 0``, ``not x_i`` for ``f0 = 1``);
    * otherwise the multiplexer ``(x_i and f1) or (not x_i and f0)``, one gate when a half is constant (``x_i and
      f1``, ``not x_i or f1``, ``not x_i and f0``, ``x_i or f0``), else three (two steps).

    Returns the output wire of each neuron (-1: the constant-0 wire); a constant-1 neuron is a ``one`` gate."""
    n, m = tables.shape
    k = indices.shape[0]
    T = tables.to(torch.bool).cpu()
    kind = torch.where(T, _ONE, _ZERO)  # [n, 2^k] literals of the one-entry sub-tables
    wire = torch.zeros(n, m, dtype=torch.int64)
    for i in range(k - 1, -1, -1):
        half = T.reshape(n, 1 << i, 2, m >> (i + 1))
        eq = (half[:, :, 0] == half[:, :, 1]).all(-1)
        comp = (half[:, :, 0] != half[:, :, 1]).all(-1)
        k0, k1, w0, w1 = kind[:, 0::2], kind[:, 1::2], wire[:, 0::2], wire[:, 1::2]
        x = indices[i].to(torch.int64).cpu()[:, None].expand(n, 1 << i)
        kind, wire = k0.clone(), w0.clone()  # equal halves: f0
        mux = ~eq & ~comp
        full = mux & (k0 == _WIRE) & (k1 == _WIRE)
        # one gate per node (op, second input) or none (comp with f0 = 0: the wire x itself)
        cases = (
            (comp & (k0 == _WIRE), XOR, w0),
            (comp & (k0 == _ONE), NOT_A, x),
            (mux & (k0 == _ZERO), AND, w1),
            (mux & (k0 == _ONE), IMPLIES, w1),
            (mux & (k1 == _ZERO), NOT_IMPLIED_BY, w0),
            (mux & (k1 == _ONE), OR, w0),
            (full, AND, w1),
        )
        sel = [c for c, _, _ in cases]
        a = torch.cat([x[c] for c in sel])
        b = torch.cat([v[c] for c, _, v in cases])
        op = torch.cat([torch.full((int(c.sum()),), o, dtype=torch.int64) for c, o, _ in cases])
        a = torch.cat([a, x[full]])
        b = torch.cat([b, w0[full]])
        op = torch.cat([op, torch.full((int(full.sum()),), NOT_IMPLIED_BY, dtype=torch.int64)])
        if a.numel():
            out = builder.gates(a, b, op)
            pos = 0
            for c in sel:
                cnt = int(c.sum())
                wire[c], kind[c] = out[pos : pos + cnt], _WIRE
                pos += cnt
            if bool(full.any()):
                nf = int(full.sum())
                wire[full] = builder.gates(out[pos - nf : pos], out[pos : pos + nf], torch.full((nf,), OR))
        pass_x = comp & (k0 == _ZERO)
        wire[pass_x], kind[pass_x] = x[pass_x], _WIRE
    kind, wire = kind[:, 0], wire[:, 0]
    ones = kind == _ONE
    if bool(ones.any()):
        nz = int(ones.sum())
        wire[ones] = builder.gates(torch.zeros(nz), torch.zeros(nz), torch.full((nz,), ONE))
    return torch.where(kind == _ZERO, -1, wire)


def lut_packed(layer, x: PackedBits) -> PackedBits:
    """An eval-mode ``LogicLUTLayer`` on packed bits: its lowered gates (``lut_gates``), run by the PyTorch netlist
    interpreter (``netlist.evaluate``) on x's device."""
    if x.num_features != layer.in_dim:
        raise ValueError(f"x must have {layer.in_dim} features, got {x.num_features}")
    builder = _Builder(layer.in_dim)
    builder.gather(lut_gates(builder, layer.truth_tables(), layer.resolved_indices().detach()))
    net = build_graph(layer.in_dim, builder.ops)
    return PackedBits(evaluate(net, x.words), x.batch_size)


def _or_trees(builder: _Builder, cells: torch.Tensor) -> torch.Tensor:
    """``cells`` ``[N, m]`` wire indices (-1: no cell; each row has at least one): the wire of each row's OR, by a
    balanced tree of two-input ``or`` gates (``m_row - 1`` gates for ``m_row`` cells), one step per level."""
    cur = cells
    while cur.shape[1] > 1:
        if cur.shape[1] % 2:
            cur = torch.cat([cur, torch.full_like(cur[:, :1], -1)], 1)
        left, right = cur[:, 0::2], cur[:, 1::2]
        both = (left >= 0) & (right >= 0)
        out = torch.where(left >= 0, left, right)
        if bool(both.any()):
            out[both] = builder.gates(left[both], right[both], torch.full((int(both.sum()),), OR))
        cur = out
    return cur[:, 0]


def _conv(builder: _Builder, m, shape):
    C, H, W = shape
    if C != m.in_channels:
        raise ValueError(
            f"LogicConv2d expects {m.in_channels} input channels, the map before it has shape [{C}, {H}, {W}]"
        )
    (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
    if H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(
            f"LogicConv2d: kernel_size {(kh, kw)} is larger than the padded map {(H + 2 * ph, W + 2 * pw)}"
        )
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    leaves = m.leaves.detach().to("cpu", torch.int64)  # [C_out, L, 3]
    ops = m.gate_ids().to("cpu", torch.int64)  # [C_out, L - 1]
    K, L = leaves.shape[0], leaves.shape[1]
    c, dy, dx = (leaves[:, None, None, :, i] for i in range(3))  # [K, 1, 1, L]
    iy = torch.arange(Ho)[None, :, None, None] * sh - ph + dy  # [K, Ho, 1, L]
    ix = torch.arange(Wo)[None, None, :, None] * sw - pw + dx  # [K, 1, Wo, L]
    inside = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    cur = torch.where(inside, (c * H + iy) * W + ix, -1).reshape(K * Ho * Wo, L)  # [K Ho Wo, L] leaf wires
    builder.gather(cur.flatten())
    cur = torch.arange(K * Ho * Wo * L).reshape(K * Ho * Wo, L)
    node = 0
    while cur.shape[1] > 1:
        half = cur.shape[1] // 2
        op = ops[:, node : node + half][:, None, :].expand(K, Ho * Wo, half).reshape(-1)
        cur = builder.gates(cur[:, 0::2].reshape(-1), cur[:, 1::2].reshape(-1), op).reshape(-1, half)
        node += half
    builder.gather(cur[:, 0])
    return (K, Ho, Wo)


def _pool(builder: _Builder, m, shape):
    C, H, W = shape
    (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
    if H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(
            f"OrPooling2d: map [{C}, {H}, {W}] is smaller than kernel_size {(kh, kw)} (padding {(ph, pw)})"
        )
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    iy = (torch.arange(Ho) * sh - ph)[:, None, None, None] + torch.arange(kh)[None, None, :, None]  # [Ho,1,kh,1]
    ix = (torch.arange(Wo) * sw - pw)[None, :, None, None] + torch.arange(kw)[None, None, None, :]  # [1,Wo,1,kw]
    inside = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)  # [Ho, Wo, kh, kw]
    pos = torch.where(inside, iy * W + ix, -1).reshape(1, Ho * Wo, kh * kw)
    cells = torch.where(pos >= 0, torch.arange(C)[:, None, None] * (H * W) + pos, -1).reshape(C * Ho * Wo, kh * kw)
    builder.gather(_or_trees(builder, cells))
    return (C, Ho, Wo)


def lower_model(model, input_shape) -> Graph:
    """The wire graph of a convolutional network (see the module docstring); ValueError for models it cannot
    lower: training mode, unsupported modules, shapes that do not fit."""

    try:
        modules = list(model)
    except TypeError:
        raise ValueError(
            f"model must be a sequence of modules (torch.nn.Sequential), got {type(model).__name__}"
        ) from None
    flat = not is_conv_network(model)  # no spatial layer: the layers read the inputs as a flat vector
    if flat and input_shape is None:  # the first logic layer's features, as the shape (1, 1, D)
        first = next((m for m in modules if hasattr(m, "in_dim")), None)
        if first is None:
            raise ValueError("model holds no logic layer: pass input_shape=(C, H, W)")
        input_shape = (1, 1, int(first.in_dim))
    shape = check_input_shape(input_shape)
    if getattr(model, "training", False) or any(getattr(m, "training", False) for m in modules):
        raise ValueError(
            "model is in training mode: call model.eval() first (the packed network equals the "
            "eval-mode forward, with discretized gates)"
        )
    if not modules or not isinstance(modules[-1], GroupSum):
        raise ValueError("model must end with a GroupSum module")
    num_inputs = shape[0] * shape[1] * shape[2]
    builder, kinds = _Builder(num_inputs), []
    cur = (num_inputs,) if flat else shape  # (C, H, W) map or (D,) vector
    for i, m in enumerate(modules[:-1]):
        where = f"model[{i}] ({type(m).__name__})"
        if isinstance(m, torch.nn.Flatten):
            if len(cur) == 3 and (m.start_dim not in (1, -3) or m.end_dim not in (-1, 3)):
                raise ValueError(
                    f"{where}: only Flatten(start_dim=1, end_dim=-1) of a [C, H, W] map is supported, "
                    f"got start_dim={m.start_dim}, end_dim={m.end_dim}"
                )
            cur = (cur[0] * cur[1] * cur[2],) if len(cur) == 3 else cur
        elif isinstance(m, (LogicConv2d, OrPooling2d)):
            if len(cur) != 3:
                raise ValueError(f"{where} needs a [C, H, W] map, but its input was flattened to {cur[0]} features")
            cur = _conv(builder, m, cur) if isinstance(m, LogicConv2d) else _pool(builder, m, cur)
        elif is_lut_layer(m):
            if len(cur) == 3:
                raise ValueError(
                    f"{where} reads a flat vector: put a Flatten() between the [{cur[0]}, {cur[1]}, "
                    f"{cur[2]}] map and it"
                )
            if m.in_dim != cur[0]:
                raise ValueError(f"{where}: in_dim {m.in_dim} differs from the {cur[0]} features before it")
            idx = m.resolved_indices().detach().to("cpu", torch.int64)
            if idx.shape != (m.k, m.out_dim) or bool(((idx < 0) | (idx >= cur[0])).any()):
                raise ValueError(f"{where}: indices must be [{m.k}, {m.out_dim}] input indices in [0, {cur[0]})")
            builder.gather(lut_gates(builder, m.truth_tables(), idx))
            cur = (m.out_dim,)
        elif all(hasattr(m, attr) for attr in ("in_dim", "out_dim", "indices", "weights")):  # logic layers
            if len(cur) == 3:
                raise ValueError(
                    f"{where} reads a flat vector: put a Flatten() between the [{cur[0]}, {cur[1]}, "
                    f"{cur[2]}] map and it"
                )
            if int(m.in_dim) != cur[0]:
                raise ValueError(f"{where}: in_dim {m.in_dim} differs from the {cur[0]} features before it")
            a, b = (t.detach().to("cpu", torch.int64) for t in m.indices)
            op = layer_gate_ids(m).cpu()
            check_network(cur[0], [(a, b, op)], 1)  # ranges and lengths (duck-typed or edited layers)
            builder.gather(builder.gates(a, b, op))
            cur = (a.numel(),)
        else:
            raise ValueError(
                f"{where}: unsupported module; a packed convolutional network may hold LogicConv2d, "
                "OrPooling2d, Flatten, logic layers (LogicLayer, LogicLUTLayer) and a final GroupSum"
            )
        kinds.append(type(m).__name__)
    group = modules[-1]
    if len(cur) == 3 and group.start_dim not in (1, -3):
        raise ValueError(
            f"GroupSum(start_dim={group.start_dim}) on a [C, H, W] map groups only its last dimension: "
            "use GroupSum(k, start_dim=1) or a Flatten() before it"
        )
    n = cur[0] * cur[1] * cur[2] if len(cur) == 3 else cur[0]
    if n % group.k:
        raise ValueError(f"GroupSum k={group.k} must divide the {n} outputs before it")
    desc = " -> ".join(kinds + ["GroupSum"]) + f", {builder.num_gates} gates"
    return Graph(shape, num_inputs, builder.ops, n, int(group.k), builder.num_gates, desc)
