"""Bit-packed inference of discretized logic gate networks (spec/logic.md section 4).

A Boolean batch ``[B, D]`` is packed FEATURE-MAJOR into int64 words ``[D, ceil(B / 64)]``: bit ``s % 64`` of word
``s // 64`` of row ``d`` is sample ``s`` of feature ``d`` (difflogic's ``PackBitsTensor`` layout with 64-bit
words). A discretized layer is then one bitwise operation per gate and word, 64 samples at a time, and GroupSum
counts ones per group (padding samples excluded). Backends: ``cpu`` (C++, multi-threaded, AVX2 / AVX-512 chosen
at run time), ``cuda``, ``reference`` (vectorized PyTorch).
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass

import torch

from .. import _backend, _ext
from . import netlist, reference

_BACKENDS = ("auto", "reference", "cpu", "cuda")


def _resolve(backend: str, device: torch.device) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {list(_BACKENDS)} for packed inference, got {backend!r}")
    if backend == "auto" and os.environ.get("RELAXOPS_BACKEND") == "triton":  # no Triton kernel for packed bits
        return "cpu" if device.type == "cpu" and _ext.has_cpu() else "reference"
    return _backend.resolve("logic_packed", backend, device)


class PackedBits:
    """A bit-packed Boolean batch: ``words`` int64 ``[D, W]`` (``W = ceil(batch_size / 64)``) and ``batch_size``.

    Padding bits (samples ``>= batch_size``) are 0 after packing and unspecified after a layer; nothing reads
    them. ``flatten()`` returns the object itself, so ``torch.nn.Flatten`` passes it through.
    """

    def __init__(self, words: torch.Tensor, batch_size: int):
        if words.dtype != torch.int64 or words.dim() != 2:
            raise ValueError(f"words must be an int64 [D, W] tensor, got {words.dtype} {tuple(words.shape)}")
        if words.shape[1] != -(-batch_size // 64):
            raise ValueError(f"words has {words.shape[1]} words per row, batch_size {batch_size} needs "
                             f"{-(-batch_size // 64)}")
        self.words = words
        self.batch_size = int(batch_size)

    @property
    def num_features(self) -> int:
        return self.words.shape[0]

    @property
    def device(self) -> torch.device:
        return self.words.device

    def flatten(self, *args, **kwargs) -> PackedBits:
        return self

    def unpack(self, backend: str = "auto") -> torch.Tensor:
        """The Boolean batch ``[batch_size, D]``."""
        return unpack_bits(self, backend)

    def __repr__(self) -> str:
        return f"PackedBits(batch_size={self.batch_size}, features={self.num_features}, device={self.device})"


def _num_threads(num_threads) -> int:
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral) or num_threads < 0:
        raise ValueError(f"num_threads must be an integer >= 0 (0: all), got {num_threads!r}")
    return int(num_threads)


def pack_bits(x: torch.Tensor, backend: str = "auto", num_threads: int = 0) -> PackedBits:
    """Packs a Boolean tensor ``x [B, D]`` (64 samples a word, see the module docstring)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bool:
        raise TypeError(f"x must be a torch.bool tensor [B, D], got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() != 2:
        raise ValueError(f"x must have shape [B, D], got {tuple(x.shape)}")
    B, D = x.shape
    if D < 1:
        raise ValueError(f"x must have at least one feature, got shape {tuple(x.shape)}")
    backend = _resolve(backend, x.device)
    if backend == "reference":
        return PackedBits(reference.pack(x), B)
    words = torch.empty(D, -(-B // 64), dtype=torch.int64, device=x.device)
    xc = x.contiguous()
    if backend == "cpu":
        _ext._C.logic_pack(_ext.ptr(xc), B, D, _ext.ptr(words), _num_threads(num_threads))
    else:
        _ext._cuda.logic_pack(_ext.ptr(xc), B, D, _ext.ptr(words), _ext.stream(x.device))
    return PackedBits(words, B)


def unpack_bits(p: PackedBits, backend: str = "auto") -> torch.Tensor:
    """The Boolean ``[B, D]`` batch of a :class:`PackedBits` (padding dropped)."""
    backend = _resolve(backend, p.device)
    if backend == "reference":
        return reference.unpack(p.words, p.batch_size)
    x = torch.empty(p.batch_size, p.num_features, dtype=torch.bool, device=p.device)
    words = p.words.contiguous()
    if backend == "cpu":
        _ext._C.logic_unpack(_ext.ptr(words), p.batch_size, p.num_features, _ext.ptr(x), 0)
    else:
        _ext._cuda.logic_unpack(_ext.ptr(words), p.batch_size, p.num_features, _ext.ptr(x), _ext.stream(p.device))
    return x


@dataclass
class _Plan:
    """The layers sorted by gate for the CUDA kernels (``csrc/logic/packed.h`` PackedPlan): host ``widths``,
    ``op_start``; ``src_a``, ``src_b``, ``dst`` (int32) and ``op`` (uint8) on the kernels' device. The CPU engine
    runs a :class:`netlist.Program` instead."""

    widths: torch.Tensor
    op_start: torch.Tensor
    src_a: torch.Tensor
    src_b: torch.Tensor
    dst: torch.Tensor
    op: torch.Tensor

    def args(self) -> tuple[int, ...]:
        return (len(self.widths) - 1, _ext.ptr(self.widths), _ext.ptr(self.op_start), _ext.ptr(self.src_a),
                _ext.ptr(self.src_b), _ext.ptr(self.dst), _ext.ptr(self.op))


def _make_plan(num_inputs: int, layers, device: torch.device) -> _Plan:
    """Per layer, the gates sorted by op (then by first input, for locality), as runs of one op. Every layer but
    the last writes its outputs in that sorted order (sequential stores) and the next layer's inputs are renumbered
    to match; the last writes back to the model's order."""
    widths, starts, parts = [num_inputs], [], ([], [], [], [])
    pos = None  # pos[j]: row of the previous layer's gate j in its (sorted) output
    for index, (a, b, op) in enumerate(layers):
        op, a, b = op.to("cpu", torch.int64), a.to("cpu", torch.int64), b.to("cpu", torch.int64)
        if pos is not None:
            a, b = pos[a], pos[b]
        order = torch.argsort(op * (widths[-1] + 1) + a, stable=True)
        sorted_op = op[order]
        starts.append(torch.searchsorted(sorted_op, torch.arange(17)))
        last = index == len(layers) - 1
        dst = order if last else torch.arange(op.numel())
        for lst, t in zip(parts, (a[order], b[order], dst, sorted_op)):
            lst.append(t)
        pos = torch.empty_like(order)
        pos[order] = torch.arange(order.numel())
        widths.append(op.numel())
    src_a, src_b, dst, op = (torch.cat(p) for p in parts)
    return _Plan(torch.tensor(widths, dtype=torch.int64), torch.cat(starts).to(torch.int64).contiguous(),
                 src_a.to(device, torch.int32), src_b.to(device, torch.int32), dst.to(device, torch.int32),
                 op.to(device, torch.uint8))


def _check_layer_input(p: PackedBits, n_in: int) -> None:
    if not isinstance(p, PackedBits):
        raise TypeError(f"x must be PackedBits, got {type(p).__name__}")
    if p.num_features != n_in:
        raise ValueError(f"x has {p.num_features} features, the network expects {n_in}")


def _make_program(num_inputs: int, layers, simplify: bool) -> netlist.Program:
    return netlist.allocate(netlist.build(num_inputs, layers, simplify))


def _run_layers(plan, p: PackedBits, backend: str, num_threads: int = 0, simd: int = -1) -> PackedBits:
    """``plan``: a :class:`netlist.Program` (cpu) or a :class:`_Plan` (cuda)."""
    words = p.words.contiguous()
    if backend == "cpu":
        out = torch.empty(plan.num_outputs, p.words.shape[1], dtype=torch.int64)
        _ext._C.logic_packed_layers(*plan.args(), p.batch_size, _ext.ptr(words), _ext.ptr(out), simd, num_threads)
    else:
        out = torch.empty(int(plan.widths[-1]), p.words.shape[1], dtype=torch.int64, device=p.device)
        L, wptr, sptr = len(plan.widths) - 1, _ext.ptr(plan.widths), _ext.ptr(plan.op_start)
        ws = torch.empty(_ext._cuda.logic_packed_layers_workspace(L, wptr, sptr, p.batch_size), dtype=torch.int64,
                         device=p.device)
        _ext._cuda.logic_packed_layers(*plan.args(), p.batch_size, _ext.ptr(words), _ext.ptr(out), _ext.ptr(ws),
                                       _ext.stream(p.device))
    return PackedBits(out, p.batch_size)


def packed_layer(p: PackedBits, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor, backend: str = "auto"):
    """One discretized layer (input rows ``a``, ``b``, gate ids ``op``, all ``[n_out]``) on packed bits."""
    if not isinstance(p, PackedBits):
        raise TypeError(f"x must be PackedBits, got {type(p).__name__}")
    backend = _resolve(backend, p.device)
    if backend == "reference":
        return PackedBits(reference.packed_layer(p.words, a, b, op), p.batch_size)
    n_in = p.num_features
    if a.numel() and (int(torch.minimum(a.min(), b.min())) < 0 or int(torch.maximum(a.max(), b.max())) >= n_in):
        raise ValueError(f"connection indices must be in [0, {n_in})")
    layer = [(a.to("cpu", torch.int64), b.to("cpu", torch.int64), op.to("cpu", torch.int64))]
    if layer[0][2].numel() and not (0 <= int(layer[0][2].min()) and int(layer[0][2].max()) <= 15):
        raise ValueError("gate ids must be in 0..15")
    plan = _make_program(n_in, layer, False) if backend == "cpu" else _make_plan(n_in, layer, p.device)
    return _run_layers(plan, p, backend)


def group_count(p: PackedBits, k: int, backend: str = "auto", num_threads: int = 0, simd: int = -1) -> torch.Tensor:
    """Packed GroupSum: int32 ``[B, k]`` counts of ones in ``k`` contiguous groups of the features."""
    if not isinstance(p, PackedBits):
        raise TypeError(f"x must be PackedBits, got {type(p).__name__}")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 or p.num_features % k:
        raise ValueError(f"k must be an integer >= 1 dividing the {p.num_features} features, got {k!r}")
    backend = _resolve(backend, p.device)
    if backend == "reference":
        return reference.group_count(p.words, p.batch_size, k)
    counts = torch.empty(p.batch_size, k, dtype=torch.int32, device=p.device)
    words = p.words.contiguous()
    if backend == "cpu":
        _ext._C.logic_group_count(_ext.ptr(words), p.batch_size, p.num_features, k, _ext.ptr(counts), simd,
                                  _num_threads(num_threads))
    else:
        _ext._cuda.logic_group_count(_ext.ptr(words), p.batch_size, p.num_features, k, _ext.ptr(counts),
                                     _ext.stream(p.device))
    return counts


class PackedLogicNet:
    """A trained logic gate network compiled for bit-packed inference.

    Args:
        model: ``Sequential(Flatten?, LogicLayer, ..., GroupSum)`` (relaxops or compat.difflogic modules); its
            gates are the argmax of the logits at construction time.
        device: where the network runs (default: the model's device).
        backend: ``auto``, ``cpu``, ``cuda`` or ``reference``.
        num_threads: CPU threads (0: OpenMP's default).
        simd: CPU SIMD level, -1 best available, 0 portable, 1 AVX2, 2 AVX-512.
        simplify: (CPU) run the simplified netlist (constants folded, pass-through and dead gates removed; exact,
            see ``relaxops.logic.netlist``); ``False`` runs every gate.

    ``net(x)`` takes a Boolean ``[B, num_inputs]`` tensor (or :class:`PackedBits`) and returns the int32 class
    counts ``[B, k]``, equal to ``round(model.eval()(x.float()) * tau)`` bit for bit.
    """

    def __init__(self, model, device=None, backend: str = "auto", num_threads: int = 0, simd: int = -1,
                 simplify: bool = True):
        from .modules import discretize

        self.num_inputs, self.layers, self.num_classes = discretize(model)
        if device is None:
            device = next(iter(model.parameters())).device
        self.device = torch.device(device)
        self.backend = _resolve(backend, self.device)
        self.num_threads = _num_threads(num_threads)
        if simd not in (-1, 0, 1, 2):
            raise ValueError(f"simd must be -1 (best), 0 (portable), 1 (AVX2) or 2 (AVX-512), got {simd!r}")
        self.simd = simd
        if self.backend == "cpu":
            self._plan = _make_program(self.num_inputs, self.layers, bool(simplify))
        elif self.backend == "cuda":
            self._plan = _make_plan(self.num_inputs, self.layers, self.device)

    @property
    def num_gates(self) -> int:
        """Gates evaluated per word: those of the simplified netlist on the CPU, every gate elsewhere."""
        if self.backend == "cpu":
            return int(self._plan.op_start[-1])
        return sum(op.numel() for _, _, op in self.layers)

    @property
    def widths(self) -> list[int]:
        return [self.num_inputs] + [op.numel() for _, _, op in self.layers]

    def layers_forward(self, x: PackedBits) -> PackedBits:
        """The last layer's packed outputs."""
        _check_layer_input(x, self.num_inputs)
        if self.backend == "reference":
            for a, b, op in self.layers:
                x = PackedBits(reference.packed_layer(x.words, a.to(x.device), b.to(x.device), op.to(x.device)),
                               x.batch_size)
            return x
        return _run_layers(self._plan, x, self.backend, self.num_threads, self.simd)

    def __call__(self, x) -> torch.Tensor:
        if isinstance(x, PackedBits):
            packed, raw = x, None
        else:
            if not isinstance(x, torch.Tensor) or x.dtype != torch.bool or x.dim() != 2:
                raise TypeError(f"x must be a torch.bool tensor [B, {self.num_inputs}] or PackedBits")
            if x.shape[1] != self.num_inputs:
                raise ValueError(f"x must have {self.num_inputs} features, got shape {tuple(x.shape)}")
            packed, raw = None, x.to(self.device).contiguous()
        if self.backend == "cpu":
            B = packed.batch_size if raw is None else raw.shape[0]
            if raw is None:
                _check_layer_input(packed, self.num_inputs)
            counts = torch.empty(B, self.num_classes, dtype=torch.int32)
            if B == 0:
                return counts
            _ext._C.logic_packed_forward(*self._plan.args(), B, _ext.ptr(None if raw is not None else packed.words),
                                         _ext.ptr(raw), self.num_classes, _ext.ptr(counts), self.simd,
                                         self.num_threads)
            return counts
        if packed is None:
            packed = pack_bits(raw, self.backend)
        return group_count(self.layers_forward(packed), self.num_classes, self.backend)
