"""Bit-packed Boolean batches and the packed kernels of discretized logic layers (docs/math/logic.md §4).

A Boolean batch ``[B, D]`` is packed FEATURE-MAJOR into int64 words ``[D, ceil(B / 64)]``: bit ``s % 64`` of word
``s // 64`` of row ``d`` is sample ``s`` of feature ``d`` (difflogic's ``PackBitsTensor`` layout with 64-bit
words). A discretized layer is then one bitwise operation per gate and word, 64 samples at a time, and GroupSum
counts ones per group (padding samples excluded). Backends: ``cpu`` (C++, multi-threaded, AVX2 / AVX-512 chosen
at run time), ``cuda``, ``reference`` (vectorized PyTorch). Whole networks: :mod:`relaxops.logic.packed`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .. import _backend, _ext
from . import netlist, reference

_BACKENDS = ("auto", "reference", "cpu", "cuda")


def _resolve(backend: str, device: torch.device) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {list(_BACKENDS)} for packed inference, got {backend!r}")
    if _backend.requested(backend) == "triton":  # RELAXOPS_BACKEND=triton: no Triton kernel for packed bits
        return "cpu" if device.type == "cpu" and _ext.has_cpu() else "reference"
    return _backend.resolve("logic_packed", backend, device)


class _CpuKernels:
    """Launchers of the packed C++ kernels in ``relaxops._C`` (host pointers; the CPU engine runs a
    :class:`netlist.Program`)."""

    @staticmethod
    def pack(xc, words, num_threads):
        _ext._C.logic_pack(_ext.ptr(xc), xc.shape[0], xc.shape[1], _ext.ptr(words), num_threads)

    @staticmethod
    def unpack(words, x):
        _ext._C.logic_unpack(_ext.ptr(words), x.shape[0], x.shape[1], _ext.ptr(x), 0)

    @staticmethod
    def layers(plan, batch_size, words, num_threads, simd):
        out = torch.empty(plan.num_outputs, words.shape[1], dtype=torch.int64)
        _ext._C.logic_packed_layers(*plan.args(), batch_size, _ext.ptr(words), _ext.ptr(out), simd, num_threads)
        return out

    @staticmethod
    def group_count(words, k, counts, num_threads, simd):
        _ext._C.logic_group_count(
            _ext.ptr(words), counts.shape[0], words.shape[0], k, _ext.ptr(counts), simd, num_threads
        )

    @staticmethod
    def forward(program, words, raw, counts, simd, num_threads):
        """The whole network, packing and group counts included: ``words`` (packed) or ``raw`` (bool) input."""
        _ext._C.logic_packed_forward(
            *program.args(),
            counts.shape[0],
            _ext.ptr(words),
            _ext.ptr(raw),
            counts.shape[1],
            _ext.ptr(counts),
            simd,
            num_threads,
        )


class _CudaKernels:
    """Launchers of the packed CUDA kernels in ``relaxops._cuda`` (device pointers, current stream; the layers run
    a :class:`_Plan`; threads and SIMD level are CPU knobs)."""

    @staticmethod
    def pack(xc, words, num_threads):
        _ext._cuda.logic_pack(_ext.ptr(xc), xc.shape[0], xc.shape[1], _ext.ptr(words), _ext.stream(xc.device))

    @staticmethod
    def unpack(words, x):
        _ext._cuda.logic_unpack(_ext.ptr(words), x.shape[0], x.shape[1], _ext.ptr(x), _ext.stream(x.device))

    @staticmethod
    def layers(plan, batch_size, words, num_threads, simd):
        out = torch.empty(int(plan.widths[-1]), words.shape[1], dtype=torch.int64, device=words.device)
        L, wptr, sptr = len(plan.widths) - 1, _ext.ptr(plan.widths), _ext.ptr(plan.op_start)
        ws = torch.empty(
            _ext._cuda.logic_packed_layers_workspace(L, wptr, sptr, batch_size), dtype=torch.int64, device=words.device
        )
        _ext._cuda.logic_packed_layers(
            *plan.args(), batch_size, _ext.ptr(words), _ext.ptr(out), _ext.ptr(ws), _ext.stream(words.device)
        )
        return out

    @staticmethod
    def group_count(words, k, counts, num_threads, simd):
        _ext._cuda.logic_group_count(
            _ext.ptr(words), counts.shape[0], words.shape[0], k, _ext.ptr(counts), _ext.stream(words.device)
        )


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels)


class PackedBits:
    """A bit-packed Boolean batch: ``words`` int64 ``[D, W]`` (``W = ceil(batch_size / 64)``) and ``batch_size``.

    Padding bits (samples ``>= batch_size``) are 0 after packing and unspecified after a layer; nothing reads
    them. ``flatten()`` returns the object itself, so ``torch.nn.Flatten`` passes it through.
    """

    def __init__(self, words: torch.Tensor, batch_size: int):
        if not isinstance(words, torch.Tensor) or words.dtype != torch.int64 or words.dim() != 2:
            raise ValueError(
                f"words must be an int64 [D, W] tensor, got {getattr(words, 'dtype', type(words))} "
                f"{tuple(getattr(words, 'shape', ()))}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 0:
            raise ValueError(f"batch_size must be an integer >= 0, got {batch_size!r}")
        if words.shape[1] != -(-batch_size // 64):
            raise ValueError(
                f"words has {words.shape[1]} words per row, batch_size {batch_size} needs {-(-batch_size // 64)}"
            )
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
    num_threads = _num_threads(num_threads) if backend == "cpu" else num_threads
    kernels = _kernels("logic_pack", backend, x.device)
    words = torch.empty(D, -(-B // 64), dtype=torch.int64, device=x.device)
    kernels.pack(x.contiguous(), words, num_threads)
    return PackedBits(words, B)


def unpack_bits(p: PackedBits, backend: str = "auto") -> torch.Tensor:
    """The Boolean ``[B, D]`` batch of a :class:`PackedBits` (padding dropped)."""
    backend = _resolve(backend, p.device)
    if backend == "reference":
        return reference.unpack(p.words, p.batch_size)
    kernels = _kernels("logic_unpack", backend, p.device)
    x = torch.empty(p.batch_size, p.num_features, dtype=torch.bool, device=p.device)
    kernels.unpack(p.words.contiguous(), x)
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
        return (
            len(self.widths) - 1,
            _ext.ptr(self.widths),
            _ext.ptr(self.op_start),
            _ext.ptr(self.src_a),
            _ext.ptr(self.src_b),
            _ext.ptr(self.dst),
            _ext.ptr(self.op),
        )


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
    return _Plan(
        torch.tensor(widths, dtype=torch.int64),
        torch.cat(starts).to(torch.int64).contiguous(),
        src_a.to(device, torch.int32),
        src_b.to(device, torch.int32),
        dst.to(device, torch.int32),
        op.to(device, torch.uint8),
    )


def _check_layer_input(p: PackedBits, n_in: int, device: torch.device | None = None) -> None:
    if not isinstance(p, PackedBits):
        raise TypeError(f"x must be PackedBits, got {type(p).__name__}")
    if p.num_features != n_in:
        raise ValueError(f"x has {p.num_features} features, the network expects {n_in}")
    if device is not None and p.device != device:
        raise ValueError(f"x is on {p.device}, the network runs on {device}")


def _check_packed_layer(n_in: int, a, b, op) -> None:
    """``a``, ``b`` (inputs in ``[0, n_in)``) and ``op`` (gate ids 0..15): integer tensors of one length >= 1."""
    for name, t, high in (("a", a, n_in), ("b", b, n_in), ("op", op, 16)):
        if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer tensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 1 or t.shape != a.shape:
            raise ValueError(f"a, b and op must be vectors of one length, got {name} of shape {tuple(t.shape)}")
        if t.numel():
            lo, hi = (int(v) for v in torch.aminmax(t))
            if lo < 0 or hi >= high:
                raise ValueError(f"{name} must hold values in [0, {high}), found values in [{lo}, {hi}]")
    if a.numel() == 0:
        raise ValueError("a layer needs at least one gate, got empty a, b and op")


def _make_program(num_inputs: int, layers, simplify: bool) -> netlist.Program:
    return netlist.allocate(netlist.build(num_inputs, layers, simplify))


def _run_layers(plan, p: PackedBits, backend: str, num_threads: int = 0, simd: int = -1) -> PackedBits:
    """``plan``: a :class:`netlist.Program` (cpu) or a :class:`_Plan` (cuda)."""
    words = p.words.contiguous()
    if p.batch_size == 0:  # no words: nothing to run (the kernels take no null buffers)
        width = plan.num_outputs if backend == "cpu" else int(plan.widths[-1])
        return PackedBits(torch.empty(width, 0, dtype=torch.int64, device=p.device), 0)
    out = _kernels("logic_packed_layers", backend, p.device).layers(plan, p.batch_size, words, num_threads, simd)
    return PackedBits(out, p.batch_size)


def packed_layer(p: PackedBits, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor, backend: str = "auto"):
    """One discretized layer (input rows ``a``, ``b``, gate ids ``op``, all ``[n_out]``) on packed bits."""
    if not isinstance(p, PackedBits):
        raise TypeError(f"x must be PackedBits, got {type(p).__name__}")
    n_in = p.num_features
    _check_packed_layer(n_in, a, b, op)
    backend = _resolve(backend, p.device)
    if backend == "reference":
        dev = p.device
        return PackedBits(
            reference.packed_layer(p.words, a.to(dev, torch.int64), b.to(dev, torch.int64), op.to(dev, torch.int64)),
            p.batch_size,
        )
    layer = [(a.to("cpu", torch.int64), b.to("cpu", torch.int64), op.to("cpu", torch.int64))]
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
    num_threads = _num_threads(num_threads) if backend == "cpu" else num_threads
    kernels = _kernels("logic_group_count", backend, p.device)
    counts = torch.empty(p.batch_size, k, dtype=torch.int32, device=p.device)
    kernels.group_count(p.words.contiguous(), k, counts, num_threads, simd)
    return counts
