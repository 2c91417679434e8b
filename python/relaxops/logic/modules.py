"""LogicLayer and GroupSum modules (docs/math/logic.md §2 and §3)."""

from __future__ import annotations

import math
import numbers

import torch

from .. import _checks
from . import functional, parametrize
from .bits import PackedBits, group_count, packed_layer
from .connections import (
    CONNECTIONS,
    CONV_CONNECTIONS,
    check_connection,
    check_conv_leaves,
    check_given_connections,
    check_sizes,
    conv_inverse_index,
    conv_leaves,
    inverse_index,
    make_connections,
)
from .gates import GATE_INITS
from .netlist import check_network
from .wiring import LearnableConnections


class _GradFactor(torch.autograd.Function):
    """Identity whose backward multiplies the gradient by ``f`` (difflogic's ``grad_factor``)."""

    @staticmethod
    def forward(ctx, x, f):
        ctx.f = f
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.f, None


class LogicLayer(torch.nn.Module):
    """A layer of ``out_dim`` two-input logic gates with fixed connections and learned gate choice.

    Neuron ``j`` reads inputs ``a[j]`` (A) and ``b[j]`` (B) and computes the expectation of the 16 relaxed gates
    under ``softmax(weights[j])`` in training mode, the gate ``argmax(weights[j])`` in eval mode (exactly Boolean
    for Boolean inputs). In eval mode the layer also accepts :class:`PackedBits` (bit-packed Boolean batches)
    and evaluates the gates bitwise, 64 samples a word. ``parametrization``, ``sampling``, ``temperature`` and
    ``gates`` select other forms of the gate choice (docs/math/logic.md §10); the defaults are this one.

    Args:
        in_dim: inputs of the layer (>= 1).
        out_dim: neurons (>= 1, and ``2 * out_dim >= in_dim`` so that every input can be used).
        connections: ``'random'`` (difflogic's default: balanced random inputs, self-connections possible),
            ``'unique'`` (distinct neighbouring pairs first, difflogic's experiment default), or a pair ``(a, b)``
            of integer tensors ``[out_dim]`` with values in ``[0, in_dim)`` (given connections), or ``'learnable'``:
            the submodule ``wiring`` (:class:`~relaxops.logic.wiring.LearnableConnections`, k = 2) learns each
            neuron's two inputs among candidates (docs/math/logic.md §12); ``indices`` is then its resolved wiring,
            which eval mode, packing and export use like fixed connections.
        grad_factor: the gradient passed to the previous layer is multiplied by this (``> 1`` against vanishing
            gradients in deep networks; forward unchanged).
        device, dtype: of the ``weights`` parameter (``[out_dim, 16]``).
        backend: kernel backend of the float path (``auto``, ``reference``, ``cpu``, ``cuda``, ``triton``).
        init: initial gate logits (``gates.init_gate_logits``). ``"random"`` (default): ``N(0, 1)``, difflogic's
            initialisation and random stream. ``"residual"`` (Petersen et al. 2024, section "residual
            initializations"): every neuron starts as the pass-through gate ``a`` (its first input A) with softmax
            probability ``residual_probability`` and the other 15 gates sharing the rest equally, so a deep stack
            starts close to the identity on the first inputs and gradients do not vanish with depth. No random
            numbers are drawn for the weights, so the random connections that follow come from an earlier
            generator state than with ``"random"`` (a seed gives other connections).
        parametrization: ``"softmax"`` (default: 16 gate logits per neuron, ``weights [out_dim, 16]``),
            ``"light"`` (one logit per truth-table entry) or ``"walsh"`` (4 Walsh coefficients), both ``weights
            [out_dim, 4]`` (docs/math/logic.md §10, ``parametrize``).
        sampling: ``"soft"`` (the relaxation), ``"hard"`` (straight-through: the discrete gate forward, the soft
            gradient), ``"gumbel_soft"`` or ``"gumbel_hard"`` (the same with noise drawn per forward from torch's
            generator; walsh: per output, counter-based). Training mode only: eval mode is the discrete gate.
        temperature: ``tau > 0`` of the softmax / sigmoid (default 1).
        gates: softmax only: the gates training may choose (names of ``gates.GATE_NAMES`` or ids); the others get
            probability 0 and are never the discretized gate (buffer ``gate_mask``, bool ``[16]``).
        residual_probability: softmax probability of the pass-through gate under ``init="residual"``, in
            ``(1/16, 1)``; ignored by ``"random"``. Default 0.9 (``init_gate_logits``' default): logit
            ``log(15 p / (1 - p)) = 4.91`` for ``a``, 0 for the other gates. torchlogix 0.2.2 defaults to logit
            5.0 through ``residual_probability=0.951``, which there means the chance that a neuron's Boolean
            output equals A (the 7 other gates that agree with A on any one input add to the gate's own
            probability); here that logit is ``residual_probability = e^5 / (e^5 + 15) = 0.9082``.
        num_candidates, connection_temperature, connection_gumbel, connection_mode: of ``'learnable'`` connections
            (``LearnableConnections``' ``num_candidates``, ``temperature``, ``gumbel`` and ``mode``; None: every
            input is a candidate of every slot). Other connections raise if any differs from its default.

    Random calls follow difflogic (the weights' ``randn`` on ``device``, then the connections on the default CPU
    generator), so a seed gives the same network as ``difflogic.LogicLayer``. The connections are buffers
    (``indices`` = ``(idx_a, idx_b)``), so ``state_dict`` round-trips the whole layer. ``layer.indices = (a, b)``
    replaces them (validated); the inverse index the backward uses is rebuilt whenever they change: assigned,
    loaded, moved, or edited in place (seen by their version counters at the next call; edits that bypass the
    counter, through ``.data``, make the backward raise instead of using a stale index).

    Non-finite inputs are not masked: each output is the bilinear form ``c0 + c1 xa + c2 xb + c3 xa xb`` in IEEE
    arithmetic, so a NaN input gives NaN in every output that reads it, and an infinite one a non-finite output
    (NaN or +-inf; ``0 * inf`` is NaN) in every output that reads it, in every backend and mode; outputs reading
    only finite inputs stay finite. The gradients follow the same rule. NaN logits give NaN outputs in training;
    in eval mode the gate is ``argmax`` of the logits, NaN counting as the maximum (as ``torch.argmax``).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        connections: str = "random",
        grad_factor: float = 1.0,
        device=None,
        dtype=None,
        backend: str = "auto",
        init: str = "random",
        residual_probability: float = 0.9,
        parametrization: str = "softmax",
        sampling: str = "soft",
        temperature: float = 1.0,
        gates=None,
        num_candidates: int | None = None,
        connection_temperature: float = 1.0,
        connection_gumbel: bool = False,
        connection_mode: str = "straight_through",
    ):
        super().__init__()
        check_sizes(in_dim, out_dim)
        if init not in GATE_INITS:
            raise ValueError(f"init must be one of {list(GATE_INITS)}, got {init!r}")
        self.temperature, mask = functional._options(parametrization, sampling, temperature, gates, None)
        self.parametrization, self.sampling = parametrization, sampling
        if isinstance(connections, str):
            if connections not in CONNECTIONS + ("learnable",):
                raise ValueError(
                    f"connections must be one of {list(CONNECTIONS) + ['learnable']} or (a, b), got {connections!r}"
                )
        else:
            connections = check_given_connections(connections, in_dim, out_dim)
        if isinstance(grad_factor, bool) or not isinstance(grad_factor, numbers.Real):
            raise TypeError(f"grad_factor must be a number, got {type(grad_factor).__name__}")
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.connections = connections if isinstance(connections, str) else "given"
        self.grad_factor = float(grad_factor)
        self.backend = backend
        self.init = init
        # softmax "random" is torch.randn(out_dim, 16) on device: difflogic's stream, kept for seed compatibility.
        logits = parametrize.init_weights(
            out_dim, 2, parametrization, init, residual_probability, self.temperature, device=device, dtype=dtype
        )
        self.weights = torch.nn.Parameter(logits)
        wiring = (num_candidates, connection_temperature, connection_gumbel, connection_mode)
        if connections == "learnable":
            a, b = self._init_wiring(*wiring, dtype)
        else:
            if wiring != (None, 1.0, False, "straight_through"):
                raise ValueError("num_candidates and connection_* options need connections='learnable'")
            a, b = make_connections(connections, in_dim, out_dim) if isinstance(connections, str) else connections
            self.wiring = None
        dev = self.weights.device
        self.register_buffer("gate_mask", None if mask is None else mask.to(dev))
        self.register_buffer("idx_a", a.to(dev), persistent=self.wiring is None)
        self.register_buffer("idx_b", b.to(dev), persistent=self.wiring is None)
        self._build_inverse_index()

    def _init_wiring(self, num_candidates, temperature, gumbel, mode, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Learnable connections: the submodule ``wiring`` gathers each neuron's two inputs into the slots ``[A
        of every neuron, B of every neuron]``, which the gates read through the fixed ``(a, b) = (j, out_dim +
        j)``; returns those."""
        self.wiring = LearnableConnections(
            self.in_dim,
            self.out_dim,
            2,
            num_candidates,
            temperature,
            gumbel,
            mode,
            device=self.weights.device,
            dtype=dtype,
        )
        a = torch.arange(self.out_dim)
        return a, a + self.out_dim

    def _build_inverse_index(self) -> None:
        a, b = self.idx_a, self.idx_b
        start, entry = inverse_index(a, b, self._gate_inputs)
        self.register_buffer("csr_start", start, persistent=False)
        self.register_buffer("csr_entry", entry, persistent=False)
        self._csr_of = (a, b, a._version, b._version)  # what the index was built from

    def _check_connections(self, a, b, where: str) -> None:
        for name, t in (("idx_a", a), ("idx_b", b)):
            check_connection(t, f"{where}: {name}", self._gate_inputs, self.out_dim)
            if t.dtype != torch.int64:
                raise ValueError(f"{where}: {name} must be int64, got {t.dtype}")

    def _sync_connections(self) -> None:
        """Validates the connections and rebuilds the inverse index if they changed since it was built."""
        a, b = self.idx_a, self.idx_b
        built = getattr(self, "_csr_of", None)
        if built is not None and built[0] is a and built[1] is b and (built[2], built[3]) == (a._version, b._version):
            return
        self._check_connections(a, b, "LogicLayer")
        self._build_inverse_index()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checked before loading: an out-of-range index would otherwise size the inverse index (3e8 -> GBs).
        for name in ("idx_a", "idx_b"):
            t = state_dict.get(prefix + name)
            if isinstance(t, torch.Tensor) and t.shape == (self.out_dim,):  # other shapes: torch's size mismatch
                check_connection(t, f"LogicLayer.load_state_dict: {prefix}{name}", self.in_dim, self.out_dim)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._sync_connections()

    @property
    def _gate_inputs(self) -> int:
        """Length of the vector the gates read: the input, or with learnable connections the gathered slots."""
        return self.in_dim if self.wiring is None else 2 * self.out_dim

    @property
    def indices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(idx_a, idx_b)``: int64 ``[out_dim]`` input indices of the neurons. Assignable: ``layer.indices =
        (a, b)`` with integer tensors ``[out_dim]`` in ``[0, in_dim)`` (copied to the layer's device). With
        learnable connections: the resolved wiring ``wiring.resolved_indices()`` (eval mode's; not assignable)."""
        if self.wiring is not None:
            return tuple(self.wiring.resolved_indices().unbind(0))
        return self.idx_a, self.idx_b

    @indices.setter
    def indices(self, pair) -> None:
        if self.wiring is not None:
            raise ValueError("indices: a layer with learnable connections is wired by its logits (layer.wiring)")
        a, b = check_given_connections(pair, self.in_dim, self.out_dim, "indices", ("indices: idx_a", "indices: idx_b"))
        self.idx_a, self.idx_b = a.to(self.idx_a.device), b.to(self.idx_b.device)
        self._build_inverse_index()

    def inverse_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(csr_start, csr_entry)`` of the current connections (``connections.inverse_index``)."""
        self._sync_connections()
        return self.csr_start, self.csr_entry

    @property
    def num_neurons(self) -> int:
        return self.out_dim

    @property
    def num_weights(self) -> int:
        return self.out_dim

    def gate_ids(self) -> torch.Tensor:
        """The discretized gate of each neuron (int64 ``[out_dim]``): softmax ``argmax`` of its logits (within
        ``gates``), light ``w > 0`` and walsh ``H w < 0`` per table entry (``parametrize.truth_tables``)."""
        return _gate_ids(self.weights, self.parametrization, self.gate_mask)

    def forward(self, x):
        if not torch.compiler.is_compiling():  # a compiled graph's ops check their inputs when they run
            self._sync_connections()
        if isinstance(x, PackedBits):
            if self.training:
                raise RuntimeError("LogicLayer: PackedBits input needs eval mode (call model.eval())")
            backend = "auto" if self.backend == "triton" else self.backend
            return packed_layer(x, *self.indices, self.gate_ids(), backend)
        _checks.floating_tensor(x, "x")
        if x.shape[-1] != self.in_dim:
            raise ValueError(f"x must have {self.in_dim} features in its last dimension, got shape {tuple(x.shape)}")
        if self.grad_factor != 1.0:
            x = _GradFactor.apply(x, self.grad_factor)
        if self.wiring is not None:
            x = self.wiring(x)  # [..., 2 out_dim]: the A slots, then the B slots
        return functional.logic_layer(
            x,
            self.idx_a,
            self.idx_b,
            self.weights,
            self.training,
            (self.csr_start, self.csr_entry),
            self.backend,
            self.parametrization,
            self.sampling,
            self.temperature,
            self.gate_mask,
        )

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, {'train' if self.training else 'eval'}" + _options_repr(self)


def _gate_ids(weights: torch.Tensor, parametrization: str, mask: torch.Tensor | None) -> torch.Tensor:
    """Gate ids of the discretized two-input gates of ``weights [..., num_params]`` (shape ``[...]``)."""
    w = weights.detach()
    if parametrization == "softmax" and mask is None:
        return w.argmax(-1)
    tables = parametrize.truth_tables(w.reshape(-1, w.shape[-1]), parametrization, 2, mask)
    return parametrize.table_ids(tables).reshape(w.shape[:-1])


def layer_gate_ids(m) -> torch.Tensor:
    """The discretized gates of a duck-typed two-input logic layer: ``gate_ids()`` where it has one (every
    parametrization), else the ``argmax`` of its ``[out_dim, 16]`` logits (compat.difflogic layers)."""
    return m.gate_ids() if hasattr(m, "gate_ids") else m.weights.detach().argmax(-1)


def _options_repr(m) -> str:
    out = "" if m.parametrization == "softmax" else f", parametrization={m.parametrization!r}"
    out += "" if m.sampling == "soft" else f", sampling={m.sampling!r}"
    out += "" if m.temperature == 1.0 else f", temperature={m.temperature}"
    if m.gate_mask is not None:
        out += f", gates={m.gate_mask.nonzero().flatten().tolist()}"
    return out


class GroupSum(torch.nn.Module):
    """Sums ``k`` contiguous groups of the inputs, divides by ``tau`` and adds ``beta``: ``[..., n] -> [..., k]``,
    ``k | n``, output ``sum / tau + beta``.

    ``start_dim`` (default ``-1``: only the last dimension is grouped, difflogic's behaviour) flattens the
    dimensions ``start_dim ..`` first, in row-major order, as ``torch.flatten(x, start_dim)``. A convolutional
    network ends with ``GroupSum(k, tau, start_dim=1)``: ``[B, C, H, W] -> [B, k]`` with the features ordered
    channel-major (feature ``c H W + h W + w``), so with ``k | C`` class ``i`` owns the channels ``[i C / k,
    (i + 1) C / k)`` at every position (the order ``torch.nn.Flatten()`` followed by ``GroupSum(k)`` gives too).

    Regression head (docs/math/logic.md §12): ``beta`` is an offset, a number or a tensor ``[k]`` (one per output),
    so a network of ``n / k`` gates per output predicts values in ``[beta, beta + (n / k) / tau]``. The form is
    ``sum / tau + beta`` (the thesis'); torchlogix 0.2.2 computes ``(sum + beta) / tau`` instead, the same head
    with our ``beta`` equal to its ``beta / tau``. ``learn_beta=True`` makes ``beta`` a parameter ``[k]``
    (initialised from ``beta``); a tensor ``beta`` otherwise is a buffer; both are in ``state_dict``. A number
    ``beta`` with ``learn_beta=False`` is a plain attribute (no state, as before: old checkpoints load).

    On :class:`PackedBits` it returns the int32 counts ``[B, k]`` of ones per group (neither divided by ``tau`` nor
    offset), whose argmax equals that of the float eval-mode output; :meth:`from_counts` turns counts (of packed
    inference, ``PackedLogicNet``, ``CompiledLogicNet``) into the eval-mode output, bit for bit.
    """

    def __init__(self, k: int, tau: float = 1.0, beta=0.0, start_dim: int = -1, learn_beta: bool = False, device=None):
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        if isinstance(start_dim, bool) or not isinstance(start_dim, numbers.Integral):
            raise TypeError(f"start_dim must be an integer, got {type(start_dim).__name__}")
        if not isinstance(learn_beta, bool):
            raise TypeError(f"learn_beta must be a bool, got {type(learn_beta).__name__}")
        self.k = int(k)
        self.tau = _checks.positive_finite(tau, "tau")
        self.start_dim = int(start_dim)
        if isinstance(beta, torch.Tensor):
            if not beta.is_floating_point() or beta.shape not in ((), (self.k,)):
                raise ValueError(
                    f"beta must be a number or a float tensor [k] = [{self.k}], got {beta.dtype} {tuple(beta.shape)}"
                )
            beta = beta.detach().to(device).expand(self.k).clone()
        elif isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not math.isfinite(beta):
            raise ValueError(f"beta must be a finite number or a float tensor [k], got {beta!r}")
        elif learn_beta:
            beta = torch.full((self.k,), float(beta), device=device)
        else:
            beta = float(beta)
        if learn_beta:
            self.beta = torch.nn.Parameter(beta)
        elif isinstance(beta, torch.Tensor):
            self.register_buffer("beta", beta)
        else:
            self.beta = beta

    def from_counts(self, counts: torch.Tensor, dtype=None) -> torch.Tensor:
        """The head's output from integer group counts ``[..., k]``: ``counts / tau + beta`` in ``dtype`` (default:
        ``beta``'s dtype when it is a tensor, else torch's default dtype). Equals the float eval-mode output bit for
        bit when the network runs in that dtype (the counts are the exact group sums)."""
        if not isinstance(counts, torch.Tensor) or counts.shape[-1:] != (self.k,):
            raise ValueError(
                f"counts must be a tensor [..., k] = [..., {self.k}], got {getattr(counts, 'shape', counts)}"
            )
        if dtype is None:
            dtype = self.beta.dtype if isinstance(self.beta, torch.Tensor) else torch.get_default_dtype()
        beta = self.beta.detach().to(counts.device, dtype) if isinstance(self.beta, torch.Tensor) else self.beta
        return counts.to(dtype) / self.tau + beta

    def forward(self, x):
        if isinstance(x, PackedBits):
            return group_count(x, self.k)
        if self.start_dim != -1 and isinstance(x, torch.Tensor):
            if not -x.dim() <= self.start_dim < x.dim():
                raise ValueError(
                    f"GroupSum: start_dim={self.start_dim} is out of range for an input of shape {tuple(x.shape)}"
                )
            x = x.flatten(self.start_dim)
        beta = self.beta.to(x.dtype) if isinstance(self.beta, torch.Tensor) else self.beta
        return functional.group_sum(x, self.k, self.tau, beta)

    def extra_repr(self) -> str:
        beta = (
            ""
            if isinstance(self.beta, float) and self.beta == 0
            else ", beta=" + ("[k]" if isinstance(self.beta, torch.Tensor) else f"{self.beta}")
        )
        return f"k={self.k}, tau={self.tau}{beta}" + (f", start_dim={self.start_dim}" if self.start_dim != -1 else "")


def discretize(model) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], int]:
    """The discretized network of ``model``: ``(num_inputs, [(a, b, op), ...], num_classes)``, int64 CPU tensors
    ``a``, ``b`` (input rows) and ``op`` (the discretized gate ids, :func:`layer_gate_ids`) per layer.

    ``model`` is a sequence of optional ``Flatten`` modules, one or more logic layers and a final group sum.
    Duck-typed, so models of ``relaxops.LogicLayer`` and of ``relaxops.compat.difflogic`` both work: a logic layer
    has ``in_dim``, ``out_dim``, ``indices = (a, b)`` and ``weights`` (and ``gate_ids()`` or ``[out_dim, 16]``
    logits); the group sum has ``k``.
    """
    modules = list(model)
    if not modules or not hasattr(modules[-1], "k") or hasattr(modules[-1], "weights"):
        raise ValueError("model must end with a GroupSum module")
    num_classes = int(modules[-1].k)
    layers, num_inputs = [], None
    for m in modules[:-1]:
        if isinstance(m, torch.nn.Flatten):
            continue
        if not all(hasattr(m, attr) for attr in ("in_dim", "out_dim", "indices", "weights")):
            raise ValueError("model may hold only Flatten, logic layers and a final GroupSum, got " + type(m).__name__)
        if isinstance(m.indices, torch.Tensor):  # LogicLUTLayer: [k, out_dim] inputs of k-input tables
            raise ValueError(
                f"{type(m).__name__} holds k-input tables: PackedLogicNet, c_source and verilog_source lower such "
                "networks to two-input gates (relaxops.logic.lower); discretize lists two-input layers only"
            )
        if num_inputs is None:
            num_inputs = int(m.in_dim)
        elif m.in_dim != layers[-1][0].numel():
            raise ValueError(f"a layer's in_dim {m.in_dim} differs from the previous out_dim {layers[-1][0].numel()}")
        a, b = (t.detach().to("cpu", torch.int64) for t in m.indices)
        layers.append((a, b, layer_gate_ids(m).cpu()))
    if not layers:
        raise ValueError("model has no logic layer")
    if layers[-1][0].numel() % num_classes:
        raise ValueError(f"GroupSum k={num_classes} must divide the last layer's {layers[-1][0].numel()} outputs")
    return check_network(num_inputs, layers, num_classes)  # connections edited out of range, duck-typed layers


class OrPooling2d(torch.nn.Module):
    """Logical OR pooling over ``kernel_size`` windows of ``[B, C, H, W]`` maps (Petersen et al. 2024).

    Float inputs (probabilities): the output is the maximum over each window, in training and eval mode alike.
    The maximum is the relaxation of OR the paper trains with (the maximum T-conorm), and on Boolean values
    ``{0, 1}``, which an eval-mode logic network produces, it is exactly the Boolean OR, so no separate eval path
    is needed. ``torch.bool`` inputs give the Boolean OR of each window as ``torch.bool`` (any mode).

    Shapes: ``[B, C, H, W] -> [B, C, H_out, W_out]`` with ``H_out = (H + 2 padding - kernel) // stride + 1``
    (likewise W), as ``torch.nn.MaxPool2d``. Padding cells take no part in a window's maximum (as in
    ``max_pool2d``; each window holds at least one real cell since ``padding <= kernel_size // 2``); for inputs in
    ``[0, 1]`` that equals padding with False / 0, torchlogix's Boolean padding.

    Gradient: the (sub)gradient of the maximum. Each output passes its whole gradient to one input of its window,
    the first maximal one in row-major window order (top row first, left to right), so ties (e.g. two ones)
    never split the gradient; overlapping windows add up their contributions. This is the tie rule of
    ``torch.nn.functional.max_pool2d``, which computes it; ``torch.amax`` would instead share the gradient among
    ties. NaN in a window gives NaN out and the gradient goes to the NaN.

    Args:
        kernel_size: window ``int`` or ``(kh, kw)``, each >= 1.
        stride: ``int`` or pair, each >= 1; default ``kernel_size`` (non-overlapping windows).
        padding: ``int`` or pair, each >= 0 and at most half the kernel size.

    :class:`PackedBits` input is not accepted: a packed batch is a flat ``[D, words]`` array with no spatial
    layout. Bit-packed pooling is part of the packed convolutional network: ``PackedLogicNet(model,
    input_shape=(C, H, W))`` lowers each window to two-input OR gates (``relaxops.logic.lower``).
    """

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = functional._pair_arg(kernel_size, "kernel_size", 1)
        self.stride = self.kernel_size if stride is None else functional._pair_arg(stride, "stride", 1)
        self.padding = functional._pair_arg(padding, "padding", 0)
        if any(p > k // 2 for p, k in zip(self.padding, self.kernel_size)):
            raise ValueError(f"padding {self.padding} must be at most half of kernel_size {self.kernel_size}")

    def _output_size(self, x: torch.Tensor) -> tuple[int, int]:
        out = []
        for n, k, s, p in zip(x.shape[2:], self.kernel_size, self.stride, self.padding):
            if n < 1 or n + 2 * p < k:
                raise ValueError(
                    f"OrPooling2d: input {tuple(x.shape)} is smaller than kernel_size "
                    f"{self.kernel_size} (padding {self.padding})"
                )
            out.append((n + 2 * p - k) // s + 1)
        return out[0], out[1]

    def forward(self, x):
        if isinstance(x, PackedBits):
            raise TypeError(
                "OrPooling2d: PackedBits input is not supported (no spatial layout); pass a torch.bool "
                "or float [B, C, H, W] tensor, or run the whole network with PackedLogicNet(model, "
                "input_shape=(C, H, W))"
            )
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"x must have shape [B, C, H, W], got {tuple(x.shape)}")
        out_h, out_w = self._output_size(x)
        if x.dtype == torch.bool:
            (ph, pw), (kh, kw), (sh, sw) = self.padding, self.kernel_size, self.stride
            padded = torch.nn.functional.pad(x, (pw, pw, ph, ph), value=False)
            windows = padded.unfold(2, kh, sh).unfold(3, kw, sw)  # [B, C, out_h, out_w, kh, kw]
            return windows.reshape(*x.shape[:2], out_h, out_w, kh * kw).any(-1)
        _checks.floating_tensor(x, "x")
        if x.numel() == 0:
            return x.new_zeros(*x.shape[:2], out_h, out_w) + x.sum()  # B or C = 0 (max_pool2d rejects C = 0)
        return torch.nn.functional.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class LogicConv2d(torch.nn.Module):
    """Convolution with logic gate trees (Petersen et al., NeurIPS 2024, "Convolutional Differentiable Logic Gate
    Networks"): ``[B, in_channels, H, W] -> [B, out_channels, Ho, Wo]``, ``Ho = (H + 2 ph - kh) // sh + 1``.

    Output channel ``k`` is one complete binary tree of ``2**tree_depth - 1`` two-input logic gates whose
    ``L = 2**tree_depth`` leaves read fixed inputs of the receptive field; the tree (its leaves and gate logits)
    is shared over all output positions. In training each gate is the expectation of the 16 relaxed gates under
    ``softmax`` of its logits; in eval mode the gate ``argmax`` (exactly Boolean on Boolean input, which may be a
    ``torch.bool`` tensor: the output is then ``torch.bool`` too).

    Conventions (ours; where torchlogix 0.2.2 differs, said so):

    * Leaves: buffer ``leaves`` int64 ``[out_channels, L, 3]``, leaf ``l`` of tree ``k`` = ``(channel, dy, dx)``;
      at output ``(oy, ox)`` it reads ``x[b, channel, oy sh - ph + dy, ox sw - pw + dx]``, 0 outside ``x`` (zero
      padding, as torchlogix, which pads ``x`` and then indexes it). Drawn once at init (then fixed) with
      ``connections="random"`` (default): uniform over ``in_channels x kh x kw`` with replacement, as torchlogix's
      fixed conv connections; or ``"two_channels"``: each tree draws two distinct channels, even leaves read the
      first and odd leaves the second, at uniform window positions (a sparse per-tree channel choice as in the
      paper). Unlike torchlogix (one buffer of absolute indices per position and level), we store only the
      ``L`` relative offsets per tree and compute positions in the kernels: the buffer does not grow with ``H, W``.
    * Tree order: parameter ``weights [out_channels, L - 1, 16]``; the first ``L / 2`` nodes combine leaves
      ``(2i, 2i + 1)`` as inputs (A, B), the next ``L / 4`` nodes combine pairs of those, ..., node ``L - 2`` is
      the root: torchlogix's level order and pairing (its ``tree_weights[level][i, k]`` is our
      ``weights[k, offset(level) + i]``).
    * No stride limit: torchlogix requires ``stride <= kernel_size``; here any stride >= 1 works (positions a
      stride skips are not read).
    * Initialisation: ``init="random"`` (``N(0, 1)`` logits) or ``"residual"`` (every gate starts as the pass-through
      of its A input with probability ``residual_probability``; ``gates.init_gate_logits``). Random calls: the
      logits first (on ``device``), then the leaves on ``generator`` (the default CPU generator when None).

    Args:
        in_channels, out_channels: >= 1.
        kernel_size: window ``kh x kw`` (int or pair) the leaves pick from.
        tree_depth: ``d >= 1`` (``2**d`` leaves; at most 16).
        stride, padding: int or pair (zero padding).
        connections: ``"random"`` or ``"two_channels"`` (see above).
        init, residual_probability: the gate logits' initialisation.
        generator: ``torch.Generator`` (CPU) for the leaves.
        device, dtype: of ``weights``.
        backend: ``auto``, ``reference``, ``cpu``, ``cuda`` or ``triton`` (``logic_conv2d``).
        parametrization, sampling, temperature, gates: per tree node, as :class:`LogicLayer` (``weights
            [out_channels, L - 1, 4]`` for light and walsh; walsh's gumbel noise is drawn per node output).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        tree_depth: int,
        stride=1,
        padding=0,
        connections: str = "random",
        init: str = "random",
        residual_probability: float = 0.9,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
        backend: str = "auto",
        parametrization: str = "softmax",
        sampling: str = "soft",
        temperature: float = 1.0,
        gates=None,
    ):
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(tree_depth, bool) or not isinstance(tree_depth, numbers.Integral) or not 1 <= tree_depth <= 16:
            raise ValueError(f"tree_depth must be an integer in [1, 16], got {tree_depth!r}")
        if connections not in CONV_CONNECTIONS:
            raise ValueError(f"connections must be one of {list(CONV_CONNECTIONS)}, got {connections!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.in_channels, self.out_channels, self.tree_depth = int(in_channels), int(out_channels), int(tree_depth)
        self.kernel_size = functional._pair_arg(kernel_size, "kernel_size", 1)
        self.stride = functional._pair_arg(stride, "stride", 1)
        self.padding = functional._pair_arg(padding, "padding", 0)
        self.temperature, mask = functional._options(parametrization, sampling, temperature, gates, None)
        self.parametrization, self.sampling = parametrization, sampling
        self.connections, self.init, self.backend = connections, init, backend
        L = 2**self.tree_depth
        n = self.out_channels * (L - 1)
        logits = parametrize.init_weights(
            n, 2, parametrization, init, residual_probability, self.temperature, device=device, dtype=dtype
        )
        self.weights = torch.nn.Parameter(logits.reshape(self.out_channels, L - 1, logits.shape[-1]))
        leaves = conv_leaves(self.in_channels, self.out_channels, L, self.kernel_size, connections, generator)
        self.register_buffer("leaves", leaves.to(self.weights.device))
        self.register_buffer("gate_mask", None if mask is None else mask.to(self.weights.device))
        self._build_inverse_index()

    @property
    def num_leaves(self) -> int:
        return 2**self.tree_depth

    def _check_leaves(self, t, where: str) -> None:
        check_conv_leaves(t, where, self.in_channels, self.out_channels, self.num_leaves, self.kernel_size)
        if t.dtype != torch.int64:
            raise ValueError(f"{where} must be int64, got {t.dtype}")

    def _build_inverse_index(self) -> None:
        start, entry = conv_inverse_index(self.leaves, self.in_channels)
        self.register_buffer("csr_start", start, persistent=False)
        self.register_buffer("csr_entry", entry, persistent=False)
        self._csr_of = (self.leaves, self.leaves._version)

    def _sync_leaves(self) -> None:
        built = getattr(self, "_csr_of", None)
        if built is not None and built[0] is self.leaves and built[1] == self.leaves._version:
            return
        self._check_leaves(self.leaves, "LogicConv2d: leaves")
        self._build_inverse_index()

    def set_leaves(self, leaves: torch.Tensor) -> None:
        """Replaces the leaf connections (integer ``[out_channels, 2**tree_depth, 3]``, validated)."""
        self._check_leaves(
            leaves.to(torch.int64) if isinstance(leaves, torch.Tensor) else leaves, "LogicConv2d.set_leaves: leaves"
        )
        self.leaves = leaves.detach().to(self.leaves.device, torch.int64).contiguous()
        self._build_inverse_index()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        t = state_dict.get(prefix + "leaves")
        if isinstance(t, torch.Tensor):
            self._check_leaves(t, f"LogicConv2d.load_state_dict: {prefix}leaves")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._sync_leaves()

    def gate_ids(self) -> torch.Tensor:
        """The discretized gate of each node, int64 ``[out_channels, 2**tree_depth - 1]`` (as
        :meth:`LogicLayer.gate_ids`)."""
        return _gate_ids(self.weights, self.parametrization, self.gate_mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            self._sync_leaves()
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape [B, {self.in_channels}, H, W], got {tuple(x.shape)}")
        return functional.logic_conv2d(
            x,
            self.leaves,
            self.weights,
            self.kernel_size,
            self.stride,
            self.padding,
            self.training,
            (self.csr_start, self.csr_entry),
            self.backend,
            self.parametrization,
            self.sampling,
            self.temperature,
            self.gate_mask,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"tree_depth={self.tree_depth}, stride={self.stride}, padding={self.padding}, "
            f"{'train' if self.training else 'eval'}" + _options_repr(self)
        )
