"""Bit-packed inference of discretized logic gate networks (docs/math/logic.md §4): :class:`PackedLogicNet` runs
a trained network on :class:`~relaxops.logic.bits.PackedBits` (64 samples a word, see :mod:`relaxops.logic.bits`).
Convolutional networks are lowered to a netlist first (:mod:`relaxops.logic.lower`; 64 images a word, their
``C H W`` bits channel-major).
"""

from __future__ import annotations

import torch

from . import lower, netlist, reference
from .bits import (
    PackedBits,
    _check_layer_input,
    _kernels,
    _make_plan,
    _make_program,
    _num_threads,
    _resolve,
    _run_layers,
    group_count,
    pack_bits,
    packed_layer,
    unpack_bits,
)
from .modules import discretize

__all__ = ["PackedBits", "PackedLogicNet", "group_count", "pack_bits", "packed_layer", "unpack_bits"]


class PackedLogicNet:
    """A trained logic gate network compiled for bit-packed inference.

    Args:
        model: ``Sequential(Flatten?, LogicLayer, ..., GroupSum)`` (relaxops or compat.difflogic modules) in eval
            mode (``model.eval()``: the packed network equals the eval-mode forward, not the relaxed training one;
            a model in training mode raises ValueError); its gates are the layers' ``gate_ids()`` (the argmax of the
            logits for softmax, the discretized tables of the other parametrizations) at construction time (a
            snapshot: later training does not change the packed network).
        device: where the network runs (default: the model's device).
        backend: ``auto``, ``cpu``, ``cuda`` or ``reference``.
        num_threads: CPU threads (0: ``torch.get_num_threads()``).
        simd: CPU SIMD level, -1 best available, 0 portable, 1 AVX2, 2 AVX-512.
        simplify: (CPU) run the simplified netlist (constants folded, pass-through and dead gates removed; exact,
            see ``relaxops.logic.netlist``); ``False`` runs every gate.

        input_shape: ``(C, H, W)`` of one input image; required for convolutional networks (see below).

    ``net(x)`` takes a Boolean ``[B, num_inputs]`` tensor (or :class:`PackedBits`; with leading ``Flatten``
    modules, any shape they flatten to that, e.g. ``[B, 28, 28]``) and returns the int32 class counts ``[B, k]``,
    equal to ``round(model(x.float()) * tau)`` in eval mode, bit for bit.

    Convolutional networks (``LogicConv2d``, ``OrPooling2d``, ``Flatten``, logic layers, ``GroupSum`` with
    ``start_dim=1`` or after a ``Flatten``; Petersen et al. 2024) are lowered to gates over the input bits
    (``relaxops.logic.lower``): every tree and OR window becomes two-input gates, zero padding the constant-0 wire,
    and the same simplification and engines apply. ``x`` is then ``[B, C, H, W]`` (or ``[B, C H W]``) Boolean, or
    float with values in {0, 1}, or :class:`PackedBits` of the ``C H W`` features in channel-major order (feature
    ``c H W + y W + x``, as ``torch.flatten(x, 1)``). On the CPU backend the netlist runs on the packed C++ engine;
    ``reference`` and ``cuda`` run it with the PyTorch netlist interpreter (``netlist.evaluate``).
    """

    def __init__(
        self,
        model,
        device=None,
        backend: str = "auto",
        num_threads: int = 0,
        simd: int = -1,
        simplify: bool = True,
        input_shape=None,
    ):
        self.graph = None
        if input_shape is not None or lower.needs_graph(model):
            self._init_graph(model, device, backend, num_threads, simd, simplify, input_shape)
            return
        self.num_inputs, self.layers, self.num_classes = discretize(model)
        modules = list(model)
        if getattr(model, "training", False) or any(getattr(m, "training", False) for m in modules):
            raise ValueError(
                "model is in training mode: call model.eval() first (the packed network equals the "
                "eval-mode forward, with discretized gates)"
            )
        self._flatten = []  # (start_dim, end_dim) of the leading Flatten modules, applied to tensor inputs
        for m in modules:
            if not isinstance(m, torch.nn.Flatten):
                break
            self._flatten.append((m.start_dim, m.end_dim))
        self._set_runtime(model, device, backend, num_threads, simd)
        if self.backend == "cpu":
            self._plan = _make_program(self.num_inputs, self.layers, bool(simplify))
        elif self.backend == "cuda":
            self._plan = _make_plan(self.num_inputs, self.layers, self.device)

    def _set_runtime(self, model, device, backend, num_threads, simd) -> None:
        """Device (the model's by default; CPU for a model without parameters), backend, threads and SIMD level."""
        if device is None:
            params = list(model.parameters())
            device = params[0].device if params else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda": the current device, as tensors say
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.backend = _resolve(backend, self.device)
        self.num_threads = _num_threads(num_threads)
        if simd not in (-1, 0, 1, 2):
            raise ValueError(f"simd must be -1 (best), 0 (portable), 1 (AVX2) or 2 (AVX-512), got {simd!r}")
        self.simd = simd

    def _init_graph(self, model, device, backend, num_threads, simd, simplify, input_shape) -> None:
        self.graph = lower.lower_model(model, input_shape)
        self.input_shape, self.num_inputs, self.num_classes = (
            self.graph.input_shape,
            self.graph.num_inputs,
            self.graph.num_classes,
        )
        self.layers = None
        self._flatten = []
        self._set_runtime(model, device, backend, num_threads, simd)
        self._netlist = netlist.build_graph(self.num_inputs, self.graph.ops, bool(simplify))
        if self.backend == "cpu":
            self._plan = netlist.allocate(self._netlist)

    def _graph_input(self, x):
        """``x`` of a convolutional network as ``(PackedBits, None)`` or ``(None, bool [B, num_inputs])``."""
        if isinstance(x, PackedBits):
            _check_layer_input(x, self.num_inputs, self.device)
            return x, None
        C, H, W = self.input_shape
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a [B, {C}, {H}, {W}] tensor or PackedBits, got {type(x).__name__}")
        if tuple(x.shape[1:]) not in ((C, H, W), (self.num_inputs,)):
            raise ValueError(f"x must have shape [B, {C}, {H}, {W}] or [B, {self.num_inputs}], got {list(x.shape)}")
        if x.dtype != torch.bool:
            if not x.dtype.is_floating_point and x.dtype not in (
                torch.uint8,
                torch.int8,
                torch.int16,
                torch.int32,
                torch.int64,
            ):
                raise TypeError(f"x must be a bool tensor or hold the values 0 and 1, got {x.dtype}")
            if x.numel() and not bool(((x == 0) | (x == 1)).all()):
                raise ValueError("x must be Boolean: a bool tensor or one whose values are 0 and 1")
            x = x != 0
        return None, x.reshape(x.shape[0], self.num_inputs).to(self.device).contiguous()

    @property
    def num_gates(self) -> int:
        """Gates evaluated per word: those of the simplified netlist on the CPU, every gate elsewhere."""
        if self.graph is not None:
            return self._netlist.num_gates
        if self.backend == "cpu":
            return self._plan.num_gates
        return sum(op.numel() for _, _, op in self.layers)

    @property
    def widths(self) -> list[int]:
        if self.graph is not None:
            return [self.num_inputs, self.graph.num_outputs]
        return [self.num_inputs] + [op.numel() for _, _, op in self.layers]

    def layers_forward(self, x: PackedBits) -> PackedBits:
        """The last layer's packed outputs."""
        _check_layer_input(x, self.num_inputs, self.device)
        if self.graph is not None:
            if self.backend == "cpu":
                return _run_layers(self._plan, x, "cpu", self.num_threads, self.simd)
            return PackedBits(netlist.evaluate(self._netlist, x.words), x.batch_size)
        if self.backend == "reference":
            for a, b, op in self.layers:
                x = PackedBits(
                    reference.packed_layer(x.words, a.to(x.device), b.to(x.device), op.to(x.device)), x.batch_size
                )
            return x
        return _run_layers(self._plan, x, self.backend, self.num_threads, self.simd)

    def __call__(self, x) -> torch.Tensor:
        if self.graph is not None:
            packed, raw = self._graph_input(x)
        elif isinstance(x, PackedBits):
            _check_layer_input(x, self.num_inputs, self.device)
            packed, raw = x, None
        else:
            if not isinstance(x, torch.Tensor) or x.dtype != torch.bool:
                raise TypeError(
                    f"x must be a torch.bool tensor [B, {self.num_inputs}] or PackedBits, got "
                    f"{getattr(x, 'dtype', type(x).__name__)}"
                )
            shape = tuple(x.shape)
            if x.dim() >= 2:
                for start, end in self._flatten:
                    x = x.flatten(start, end)
            if x.dim() != 2 or x.shape[1] != self.num_inputs:
                flat = " (after the model's Flatten)" if self._flatten else ""
                raise ValueError(f"x must have shape [B, {self.num_inputs}]{flat}, got {list(shape)}")
            packed, raw = None, x.to(self.device).contiguous()
        if self.backend == "cpu":
            B = packed.batch_size if raw is None else raw.shape[0]
            counts = torch.empty(B, self.num_classes, dtype=torch.int32)
            if B == 0:
                return counts
            words = None if raw is not None else packed.words.contiguous()
            kernels = _kernels("logic_packed_forward", "cpu", self.device)
            kernels.forward(self._plan, words, raw, counts, self.simd, self.num_threads)
            return counts
        if packed is None:
            packed = pack_bits(raw, self.backend)
        return group_count(self.layers_forward(packed), self.num_classes, self.backend)
