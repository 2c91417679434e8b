"""torchlogix 0.2.2's layer API (``torchlogix.layers``) backed by relaxops' layers and kernels.

Switch with one import::

    # from torchlogix.layers import LogicDense, LogicConv2d, GroupSum, OrPooling2d
    from relaxops.compat.torchlogix import LogicDense, LogicConv2d, GroupSum, OrPooling2d

Same constructor signatures and argument names as torchlogix 0.2.2 (``lut_rank``, ``parametrization`` ``"raw"`` /
``"light"`` / ``"warp"``, ``parametrization_kwargs`` with ``forward_sampling``, ``temperature``, ``weight_init``,
``residual_probability``; ``connections="fixed"`` or ``"learnable"`` with ``connections_kwargs`` ``init_method``,
``num_candidates``, ``temperature``, ``gumbel``; ``device``,
``grad_factor``), the same initial parameters (``weight_init="residual"``, the default, is deterministic for
``"raw"`` and ``"warp"``; dense layers also draw their random numbers in torchlogix's order, so a seed gives the
same dense network) and the same ``state_dict`` (names and layouts), so a torchlogix model's state loads into the
compat model and back. The layers are relaxops' modules (``LogicDense`` is a :class:`relaxops.LogicLayer`,
``LogicConv2d`` a :class:`relaxops.LogicConv2d`), so the models train with our kernels and pack
(:class:`relaxops.PackedLogicNet`) and export (C, Verilog) like ours. docs/math/logic.md §13 has the mapping.

Parameter layouts (torchlogix's, in ``state_dict`` and as attributes):

* ``LogicDense``: ``weight [out_dim, 16]`` (raw) or ``[out_dim, 2^lut_rank]`` (light, warp): our ``weights``
  (``lut_rank`` 4 and 6: a :class:`LogicDenseLUT`, our ``LogicLUTLayer``, with the same names);
  ``connections.indices`` int64 ``[lut_rank, out_dim]``: row ``i`` is input ``i`` of every neuron (our ``idx_a``,
  ``idx_b``). Read ``layer.connections.indices``; replace it by assignment (``layer.connections.indices = t``).
  Learnable connections: ``connections.weights [C, lut_rank, out_dim]`` (our ``wiring.weights``, torchlogix's
  straight-through estimator: relaxops.logic.wiring) and ``connections.indices [C, lut_rank, out_dim]``, the
  candidates (``arange(in_dim)`` broadcast when every input is one; our ``wiring.candidates`` otherwise).
* ``LogicConv2d``: ``tree_weights.{level}`` ``[lut_rank^(depth - 1 - level), num_kernels, P]`` (level 0 above the
  leaves; our ``weights[k, offset(level) + i]``); ``connections._indices_L0`` int64 ``[2, num_kernels, positions,
  2^(depth - 1), 3]``, the absolute ``(h, w, c)`` in the padded input of each leaf pair at every output position
  (our leaf ``2 s + r`` at position 0 is its pair ``s``, role ``r``); ``connections._indices_L{level}`` the fixed
  pairing of the levels above. We store only the relative leaves, so a loaded ``_indices_L0`` must be one leaf
  set slid over the positions (torchlogix always builds it so); anything else raises ``ValueError``.

Conventions that differ (the math is the same):

* ``GroupSum(k, tau, beta)`` computes ``(sum + beta) / tau`` as torchlogix; its attribute ``beta`` is our offset
  ``beta / tau`` (our form ``sum / tau + beta``).
* Parametrization names: torchlogix's ``"raw"`` is our ``"softmax"``, ``"warp"`` our ``"walsh"``.
* Eval mode of ``"warp"`` on non-Boolean inputs: torchlogix thresholds the relaxed polynomial; ours interpolates
  the discrete truth table (the same on Boolean inputs).
* Failed ``assert`` checks become ``ValueError``; ``export_mode`` and ``set_export_mode`` are left out (export
  with ``relaxops.logic.compile`` / ``netlist`` instead of torch.fx tracing); so are torchlogix's regularizers,
  ``rescale_weights``, its 3-D and transposed convolutions, its binarization layers (``relaxops.logic.Thermometer``
  and ``LearnableThermometer`` do that job).
* The conv layer's random connections are drawn by our ``conv_leaves`` (the same distribution as torchlogix's
  fixed conv connections, another random stream).
"""

from __future__ import annotations

import math

import torch

from ..logic import modules as _modules
from ..logic.lut import LogicLUTLayer
from ..logic.parametrize import hadamard, table_ids, truth_tables

__all__ = ["LogicDense", "LogicDenseLUT", "LogicConv2d", "GroupSum", "OrPooling2d", "PARAMETRIZATIONS"]

# torchlogix's parametrization names -> ours
PARAMETRIZATIONS = {"raw": "softmax", "light": "light", "warp": "walsh"}
_KWARGS = ("forward_sampling", "temperature", "weight_init", "residual_probability")


def _options(parametrization, lut_rank, parametrization_kwargs) -> dict:
    """torchlogix's parametrization arguments, checked, with its defaults."""
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"parametrization must be one of {list(PARAMETRIZATIONS)}, got {parametrization!r}")
    if isinstance(lut_rank, bool) or not isinstance(lut_rank, int):
        raise ValueError(f"lut_rank must be an integer, got {lut_rank!r}")
    ranks = {"raw": (2,), "light": (2, 4, 6), "warp": (2, 4, 6)}[parametrization]
    if lut_rank not in ranks:
        raise ValueError(f"parametrization={parametrization!r} supports lut_rank in {list(ranks)}, got {lut_rank}")
    kw = dict(parametrization_kwargs or {})
    unknown = sorted(set(kw) - set(_KWARGS) - {"materialize_basis"})
    if unknown:
        raise ValueError(f"parametrization_kwargs: unknown arguments {unknown} (known: {list(_KWARGS)})")
    opts = dict(forward_sampling="soft", temperature=1.0, weight_init="residual", residual_probability=0.951)
    opts.update({k: v for k, v in kw.items() if k in _KWARGS})
    if opts["weight_init"] not in ("residual", "random"):
        raise ValueError(
            f"parametrization_kwargs: weight_init must be 'residual' or 'random', got {opts['weight_init']!r}"
        )
    p = opts["residual_probability"]
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
        raise ValueError(f"parametrization_kwargs: residual_probability must be in (0, 1), got {p!r}")
    if parametrization == "raw" and opts["weight_init"] == "residual" and not p > 7 / 15:
        raise ValueError(f"parametrization_kwargs: raw residual_probability must be > 7/15 (its logit), got {p!r}")
    return opts


def initial_weight(num_neurons: int, parametrization: str, lut_rank: int, opts: dict, device=None) -> torch.Tensor:
    """torchlogix 0.2.2's initial parameters ``[num_neurons, 16 or 2^lut_rank]`` (its random calls, in its order).

    ``"residual"``: raw puts the logit ``tau (log(15 p - 7) - log(1 - p))`` on gate 3 (``A``) and 0 elsewhere (its
    ``p`` is the chance that the neuron's Boolean output equals A); light draws ``N(0, 1)`` shifted by -3 on the
    table entries whose first input is 0 and +3 on the others; warp is deterministic, the Walsh coefficients of the
    pass-through of the first input scaled by ``tau log(p / (1 - p))``. ``"random"``: raw and warp ``N(0, 1)``,
    light ``U(0, 1)``."""
    m = 1 << lut_rank
    tau, p = opts["temperature"], opts["residual_probability"]
    if opts["weight_init"] == "random":
        if parametrization == "raw":
            return torch.randn(num_neurons, 1 << m, device=device)
        return (
            torch.rand(num_neurons, m, device=device)
            if parametrization == "light"
            else torch.randn(num_neurons, m, device=device)
        )
    if parametrization == "raw":
        w = torch.zeros(num_neurons, 16, device=device)
        w[:, 3] = (math.log(15 * p - 8 + 1) - math.log(1 - p)) * tau
        return w
    first = (torch.arange(m, device=device) >= m // 2).to(torch.float32)
    if parametrization == "light":
        w = torch.randn(num_neurons, m, device=device)
        return w + (6 * first - 3)
    identity = hadamard(lut_rank, device=device) @ (1 - 2 * first) / m  # exact: the pass-through's coefficients
    return (tau * (math.log(p) - math.log(1 - p)) * identity).expand(num_neurons, m).clone()


def _fixed_dense_connections(in_dim, out_dim, lut_rank, init_method, device) -> torch.Tensor:
    """torchlogix's fixed dense connections ``[lut_rank, out_dim]`` (``"random"``: a random permutation of the
    ``lut_rank * out_dim`` slots modulo ``in_dim``, so every input is read when ``lut_rank * out_dim >= in_dim``)."""
    if in_dim < lut_rank:
        raise ValueError(f"in_dim ({in_dim}) must be >= lut_rank ({lut_rank})")
    if out_dim * lut_rank < in_dim:
        raise ValueError(f"out_dim * lut_rank ({out_dim} * {lut_rank}) must be >= in_dim ({in_dim})")
    if init_method != "random":
        raise ValueError(f"connections_kwargs: init_method must be 'random', got {init_method!r}")
    c = torch.randperm(lut_rank * out_dim, device=device) % in_dim
    return c.reshape(lut_rank, out_dim).to(torch.int64)


def _ours_kwargs(parametrization, opts) -> dict:
    """Our layers' parametrization keywords from torchlogix's."""
    return dict(
        parametrization=PARAMETRIZATIONS[parametrization],
        sampling=opts["forward_sampling"],
        temperature=float(opts["temperature"]),
    )


def _dense_setup(in_dim, out_dim, device, lut_rank, parametrization, parametrization_kwargs, connections, ckw):
    """torchlogix's checks and random calls of a dense layer: ``(options, initial weight, connections)``, the
    connections an int64 ``[k, out_dim]`` (fixed) or a dict of the learnable ones' options and state."""
    opts = _options(parametrization, lut_rank, parametrization_kwargs)
    if connections not in ("fixed", "learnable"):
        raise ValueError(f"connections must be 'fixed' or 'learnable', got {connections!r}")
    known = {"init_method"} | ({"temperature", "num_candidates", "gumbel"} if connections == "learnable" else set())
    ckw = dict(ckw or {})
    if sorted(set(ckw) - known):
        raise ValueError(f"connections_kwargs: unknown arguments {sorted(set(ckw) - known)} (known: {sorted(known)})")
    method = ckw.get("init_method", "random")
    weight = initial_weight(out_dim, parametrization, lut_rank, opts, device)
    if connections == "fixed":
        return opts, weight, _fixed_dense_connections(in_dim, out_dim, lut_rank, method, device)
    c = ckw.get("num_candidates", -1)
    if isinstance(c, bool) or not isinstance(c, int) or not (c == -1 or 1 <= c and c * lut_rank <= in_dim):
        raise ValueError(f"connections_kwargs: num_candidates must be -1 or in [1, in_dim / lut_rank], got {c!r}")
    if out_dim * lut_rank < in_dim:
        raise ValueError(f"out_dim * lut_rank ({out_dim} * {lut_rank}) must be >= in_dim ({in_dim})")
    if method != "random":
        raise ValueError(f"connections_kwargs: init_method must be 'random', got {method!r}")
    candidates = None
    if c != -1:  # torchlogix's candidate table: a random permutation of the slots modulo in_dim
        candidates = (torch.randperm(lut_rank * out_dim * c, device=device) % in_dim).reshape(c, lut_rank, out_dim)
    logits = torch.rand(in_dim if c == -1 else c, lut_rank, out_dim, dtype=torch.float32)
    learnable = dict(
        num_candidates=None if c == -1 else c,
        connection_temperature=float(ckw.get("temperature", 0.001)),
        connection_gumbel=bool(ckw.get("gumbel", False)),
        connection_mode="straight_through",
        candidates=candidates,
        logits=logits,
    )
    return opts, weight, learnable


def _own_rng(device):
    """torchlogix's random calls are made first; our constructor's own must not advance the generators."""
    cuda = device is not None and torch.device(device).type == "cuda"
    return torch.random.fork_rng(devices=[device] if cuda else [])


class _DenseConnections:
    """``layer.connections`` of a :class:`LogicDense`: ``indices`` int64 ``[lut_rank, out_dim]`` (a copy; assign
    to replace); with learnable connections ``weights [C, lut_rank, out_dim]`` (our ``wiring.weights``) and
    ``indices [C, lut_rank, out_dim]``, the candidates (``resolve_connections()``: the wiring of eval mode)."""

    def __init__(self, layer):
        self._layer = layer

    @property
    def indices(self) -> torch.Tensor:
        wiring = self._layer.wiring
        if wiring is None:
            return torch.stack(self._layer.indices)
        return _candidates(wiring)

    @property
    def weights(self) -> torch.nn.Parameter:
        if self._layer.wiring is None:
            raise AttributeError("fixed connections have no weights")
        return self._layer.wiring.weights

    def resolve_connections(self) -> torch.Tensor:
        return torch.stack(self._layer.indices)

    @indices.setter
    def indices(self, value) -> None:
        if self._layer.wiring is not None:
            raise ValueError("connections.indices: learnable connections are set through state_dict")
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[0] != self._layer.lut_rank:
            raise ValueError(f"connections.indices must be a tensor [{self._layer.lut_rank}, out_dim], got {value!r}")
        self._layer.indices = tuple(value)

    def __repr__(self) -> str:
        return f"FixedDenseConnections(lut_rank={self._layer.lut_rank})"


def _learnable_options(indices) -> tuple[dict | None, dict]:
    """``(learnable, wiring keywords)`` of ``_dense_setup``'s connections: a dict for learnable ones (None
    otherwise), and the layer's ``num_candidates`` / ``connection_*`` keywords from it."""
    learnable = indices if isinstance(indices, dict) else None
    return learnable, {k: v for k, v in (learnable or {}).items() if k not in ("candidates", "logits")}


def _copy_parameters(layer, weight, learnable) -> None:
    """torchlogix's initial parameters into ours: the gate parameters and, for learnable connections, the
    connection logits and candidates."""
    with torch.no_grad():
        layer.weights.copy_(weight)
        if learnable:
            layer.wiring.weights.copy_(learnable["logits"])
            if learnable["candidates"] is not None:
                layer.wiring.candidates.copy_(learnable["candidates"])


class LogicDense(_modules.LogicLayer):
    """torchlogix's ``LogicDense(in_dim, out_dim, device='cpu', grad_factor=1.0, lut_rank=2,
    parametrization='raw', parametrization_kwargs=None, connections='fixed', connections_kwargs=None)`` as a
    :class:`relaxops.LogicLayer` (module docstring: parameter layout, conventions); with ``lut_rank`` 4 or 6 the
    constructor returns a :class:`LogicDenseLUT` (a :class:`relaxops.LogicLUTLayer`)."""

    def __new__(cls, *args, **kwargs):
        lut_rank = kwargs.get("lut_rank", args[4] if len(args) > 4 else 2)
        if cls is LogicDense and lut_rank != 2 and not isinstance(lut_rank, bool) and isinstance(lut_rank, int):
            return LogicDenseLUT(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        device: str = "cpu",
        grad_factor: float = 1.0,
        lut_rank: int = 2,
        parametrization: str = "raw",
        parametrization_kwargs: dict | None = None,
        connections: str = "fixed",
        connections_kwargs: dict | None = None,
    ):
        opts, weight, indices = _dense_setup(
            in_dim, out_dim, device, lut_rank, parametrization, parametrization_kwargs, connections, connections_kwargs
        )
        learnable, wiring = _learnable_options(indices)
        with _own_rng(device):
            super().__init__(
                in_dim,
                out_dim,
                connections="learnable" if learnable else tuple(indices),
                grad_factor=grad_factor,
                device=device,
                **wiring,
                **_ours_kwargs(parametrization, opts),
            )
        _copy_parameters(self, weight, learnable)
        self.device, self.lut_rank, self.parametrization_name = device, lut_rank, parametrization
        self.forward_sampling, self.temperature = opts["forward_sampling"], float(opts["temperature"])
        self.connections = _DenseConnections(self)
        self._register_state_dict_hook(_dense_to_torchlogix)

    @property
    def weight(self) -> torch.nn.Parameter:
        """torchlogix's name of the parameters (our ``weights``)."""
        return self.weights

    @property
    def num_neurons(self) -> int:
        return self.out_dim

    def get_luts(self) -> torch.Tensor:
        """Bool ``[out_dim, 2^lut_rank]`` truth tables of the discretized neurons (first input = most significant
        bit of the entry)."""
        return truth_tables(self.weights, PARAMETRIZATIONS[self.parametrization_name], self.lut_rank)

    def get_luts_and_ids(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(get_luts(), ids)``, the id reading the table as a binary number, entry 0 the most significant bit."""
        luts = self.get_luts()
        return luts, table_ids(luts)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        idx = state_dict.pop(prefix + "connections.indices", None)
        if self.wiring is not None:
            _wiring_from_torchlogix(self.wiring, state_dict, prefix, idx)
        elif idx is not None:
            if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.shape[0] != self.lut_rank:
                raise ValueError(f"{prefix}connections.indices must be [{self.lut_rank}, out_dim], got {idx!r}")
            state_dict[prefix + "idx_a"], state_dict[prefix + "idx_b"] = idx[0], idx[1]
        if prefix + "weight" in state_dict:
            state_dict[prefix + "weights"] = state_dict.pop(prefix + "weight")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, lut_rank={self.lut_rank}, parametrization={self.parametrization_name}"


def _candidates(wiring) -> torch.Tensor:
    """torchlogix's candidate table ``[C, k, out_dim]`` of learnable connections (every input: ``arange``)."""
    if wiring.num_candidates is not None:
        return wiring.candidates
    n = wiring.in_dim
    return torch.arange(n, device=wiring.weights.device).view(n, 1, 1).expand(n, wiring.k, wiring.out_dim)


def _wiring_from_torchlogix(wiring, state_dict, prefix, idx) -> None:
    """torchlogix's learnable connections in ``state_dict`` -> our ``wiring`` entries (in place)."""
    if prefix + "connections.weights" in state_dict:
        state_dict[prefix + "wiring.weights"] = state_dict.pop(prefix + "connections.weights")
    if idx is not None and wiring.num_candidates is not None:
        state_dict[prefix + "wiring.candidates"] = idx
    elif idx is not None and not torch.equal(idx.cpu(), _candidates(wiring).cpu()):
        raise ValueError(f"{prefix}connections.indices: with every input a candidate it must be arange(in_dim)")


def _wiring_to_torchlogix(wiring, state_dict, prefix) -> None:
    state_dict[prefix + "connections.weights"] = state_dict.pop(prefix + "wiring.weights")
    state_dict.pop(prefix + "wiring.candidates", None)
    state_dict[prefix + "connections.indices"] = _candidates(wiring).contiguous()


def _dense_to_torchlogix(module, state_dict, prefix, local_metadata):
    state_dict[prefix + "weight"] = state_dict.pop(prefix + "weights")
    if module.wiring is not None:
        _wiring_to_torchlogix(module.wiring, state_dict, prefix)
        return state_dict
    a, b = state_dict.pop(prefix + "idx_a"), state_dict.pop(prefix + "idx_b")
    state_dict[prefix + "connections.indices"] = torch.stack((a, b))
    return state_dict


class _LUTConnections:
    """``layer.connections`` of a :class:`LogicDenseLUT`: ``indices``, our buffer ``[lut_rank, out_dim]``; with
    learnable connections ``weights`` and ``indices`` (the candidates) as :class:`_DenseConnections`."""

    def __init__(self, layer):
        self._layer = layer

    @property
    def indices(self) -> torch.Tensor:
        wiring = self._layer.wiring
        return self._layer.indices if wiring is None else _candidates(wiring)

    @property
    def weights(self) -> torch.nn.Parameter:
        if self._layer.wiring is None:
            raise AttributeError("fixed connections have no weights")
        return self._layer.wiring.weights

    def resolve_connections(self) -> torch.Tensor:
        return self._layer.resolved_indices()

    def __repr__(self) -> str:
        return f"FixedDenseConnections(lut_rank={self._layer.k})"


class LogicDenseLUT(LogicLUTLayer):
    """``LogicDense`` with ``lut_rank`` 4 or 6 (light, warp) as a :class:`relaxops.LogicLUTLayer`:
    ``LogicDense(..., lut_rank=4)`` returns one. ``weight`` is our ``weights [out_dim, 2^k]`` and
    ``connections.indices`` our buffer ``indices [k, out_dim]`` (learnable connections: as ``LogicDense``)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        device: str = "cpu",
        grad_factor: float = 1.0,
        lut_rank: int = 4,
        parametrization: str = "light",
        parametrization_kwargs: dict | None = None,
        connections: str = "fixed",
        connections_kwargs: dict | None = None,
    ):
        opts, weight, indices = _dense_setup(
            in_dim, out_dim, device, lut_rank, parametrization, parametrization_kwargs, connections, connections_kwargs
        )
        learnable, wiring = _learnable_options(indices)
        with _own_rng(device):
            super().__init__(
                in_dim,
                out_dim,
                k=lut_rank,
                connections="learnable" if learnable else indices,
                grad_factor=grad_factor,
                device=device,
                **wiring,
                **_ours_kwargs(parametrization, opts),
            )
        _copy_parameters(self, weight, learnable)
        self.device, self.lut_rank, self.parametrization_name = device, lut_rank, parametrization
        self.forward_sampling = opts["forward_sampling"]
        self.connections = _LUTConnections(self)
        self._register_state_dict_hook(_lut_to_torchlogix)

    @property
    def weight(self) -> torch.nn.Parameter:
        return self.weights

    def get_luts(self) -> torch.Tensor:
        return self.truth_tables()

    def get_luts_and_ids(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(get_luts(), ids)``; ids only for lut_rank 4 (a 64-entry table does not fit an int64 id)."""
        luts = self.get_luts()
        return luts, table_ids(luts) if self.lut_rank <= 4 else None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        idx = state_dict.pop(prefix + "connections.indices", None)
        if self.wiring is not None:
            _wiring_from_torchlogix(self.wiring, state_dict, prefix, idx)
        elif idx is not None:
            state_dict[prefix + "indices"] = idx
        if prefix + "weight" in state_dict:
            state_dict[prefix + "weights"] = state_dict.pop(prefix + "weight")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _lut_to_torchlogix(module, state_dict, prefix, local_metadata):
    state_dict[prefix + "weight"] = state_dict.pop(prefix + "weights")
    if module.wiring is not None:
        state_dict.pop(prefix + "indices", None)
        _wiring_to_torchlogix(module.wiring, state_dict, prefix)
    else:
        state_dict[prefix + "connections.indices"] = state_dict.pop(prefix + "indices")
    return state_dict


class _ConvConnections:
    """``layer.connections`` of a :class:`LogicConv2d`: torchlogix's index buffers, computed from our leaves."""

    def __init__(self, layer):
        self._layer = layer

    @property
    def indices(self) -> list[torch.Tensor]:
        return self._layer._torchlogix_indices()

    def __repr__(self) -> str:
        return "FixedConvConnections()"


class LogicConv2d(_modules.LogicConv2d):
    """torchlogix's ``LogicConv2d(in_dim, channels=1, num_kernels=16, tree_depth=None, receptive_field_size=2,
    stride=1, padding=0, device='cpu', grad_factor=1.0, lut_rank=2, parametrization='raw',
    parametrization_kwargs=None, connections='fixed', connections_kwargs=None)`` as a
    :class:`relaxops.LogicConv2d` (module docstring: parameter layout, conventions). ``in_dim`` (the input's
    height and width) fixes the output positions, as in torchlogix."""

    def __init__(
        self,
        in_dim,
        channels: int = 1,
        num_kernels: int = 16,
        tree_depth: int | None = None,
        receptive_field_size=2,
        stride: int = 1,
        padding: int = 0,
        device: str = "cpu",
        grad_factor: float = 1.0,
        lut_rank: int = 2,
        parametrization: str = "raw",
        parametrization_kwargs: dict | None = None,
        connections: str = "fixed",
        connections_kwargs: dict | None = None,
    ):
        opts = _options(parametrization, lut_rank, parametrization_kwargs)
        if lut_rank != 2:
            raise ValueError(f"lut_rank={lut_rank}: LogicConv2d supports lut_rank=2 (two-input tree nodes)")
        if connections != "fixed":
            raise ValueError(f"connections must be 'fixed', got {connections!r}")
        ckw = dict(connections_kwargs or {})
        if ckw.get("init_method", "random") != "random" or sorted(set(ckw) - {"init_method"}):
            raise ValueError(f"connections_kwargs: only init_method='random' is supported, got {ckw!r}")
        if tree_depth is None:
            raise ValueError("tree_depth must be given (an integer >= 1)")
        kh, kw = (receptive_field_size,) * 2 if isinstance(receptive_field_size, int) else receptive_field_size
        if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= min(kh, kw):
            raise ValueError(f"stride must be an integer in [1, receptive_field_size], got {stride!r}")
        if isinstance(grad_factor, bool) or not isinstance(grad_factor, (int, float)):
            raise TypeError(f"grad_factor must be a number, got {type(grad_factor).__name__}")
        self.in_dim = (in_dim, in_dim) if isinstance(in_dim, int) else tuple(in_dim)
        ours = _ours_kwargs(parametrization, opts)
        super().__init__(channels, num_kernels, (kh, kw), tree_depth, stride, padding, device=device, **ours)
        L = 1 << tree_depth
        with torch.no_grad():
            w = initial_weight(num_kernels * (L - 1), parametrization, lut_rank, opts, device)
            self.weights.copy_(w.reshape(L - 1, num_kernels, -1).transpose(0, 1))
        self.device, self.lut_rank, self.parametrization_name = device, lut_rank, parametrization
        self.grad_factor, self.channels, self.num_kernels = float(grad_factor), channels, num_kernels
        self.receptive_field_size = (kh, kw)
        self.forward_sampling, self.temperature = opts["forward_sampling"], float(opts["temperature"])
        self.connections = _ConvConnections(self)
        self._register_state_dict_hook(_conv_to_torchlogix)

    @property
    def kernel_positions(self) -> list[int]:
        return [
            (n + 2 * p - k) // s + 1 for n, p, k, s in zip(self.in_dim, self.padding, self.kernel_size, self.stride)
        ]

    @property
    def tree_weights(self) -> list[torch.Tensor]:
        """Views ``[nodes of the level, num_kernels, P]`` of our ``weights``, level 0 above the leaves."""
        out, node = [], 0
        for level in range(self.tree_depth):
            n = 1 << (self.tree_depth - 1 - level)
            out.append(self.weights[:, node : node + n].transpose(0, 1))
            node += n
        return out

    def _positions(self):
        (sh, sw), dev = self.stride, self.leaves.device
        ho, wo = self.kernel_positions
        oy, ox = torch.meshgrid(torch.arange(ho, device=dev) * sh, torch.arange(wo, device=dev) * sw, indexing="ij")
        return oy.reshape(-1), ox.reshape(-1)

    def _torchlogix_indices(self) -> list[torch.Tensor]:
        K, L = self.out_channels, self.num_leaves
        leaves = self.leaves.reshape(K, L // 2, 2, 3).permute(2, 0, 1, 3)  # [2, K, L / 2, (c, dy, dx)]
        oy, ox = self._positions()
        idx0 = torch.stack(
            (
                leaves[:, :, None, :, 1] + oy[None, None, :, None],
                leaves[:, :, None, :, 2] + ox[None, None, :, None],
                leaves[:, :, None, :, 0].expand(-1, -1, oy.numel(), -1),
            ),
            -1,
        )
        out = [idx0.contiguous()]
        for level in range(1, self.tree_depth):
            size = 1 << (self.tree_depth - level)
            out.append(torch.arange(size, device=idx0.device).view(-1, 2).t().contiguous())
        return out

    def forward(self, x):
        if self.grad_factor != 1.0:
            x = _modules._GradFactor.apply(x, self.grad_factor)
        if x.dim() == 4 and tuple(x.shape[2:]) != self.in_dim:
            raise ValueError(f"x must have spatial size {self.in_dim} (in_dim), got {tuple(x.shape[2:])}")
        return super().forward(x)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        levels = [state_dict.pop(f"{prefix}tree_weights.{i}", None) for i in range(self.tree_depth)]
        if all(t is not None for t in levels):
            state_dict[prefix + "weights"] = torch.cat([t.transpose(0, 1) for t in levels], 1)
        idx = [state_dict.pop(f"{prefix}connections._indices_L{i}", None) for i in range(self.tree_depth)]
        if idx[0] is not None:
            state_dict[prefix + "leaves"] = self._leaves_of(idx, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _leaves_of(self, idx, prefix) -> torch.Tensor:
        """Our leaves from torchlogix's index buffers (checked to be one leaf set slid over the positions)."""
        i0 = idx[0]
        K, L, P = self.out_channels, self.num_leaves, math.prod(self.kernel_positions)
        if not isinstance(i0, torch.Tensor) or tuple(i0.shape) != (2, K, P, L // 2, 3):
            raise ValueError(f"{prefix}connections._indices_L0 must be [2, {K}, {P}, {L // 2}, 3], got {i0!r}")
        first = i0[:, :, 0].to(torch.int64)  # [2, K, L / 2, (h, w, c)] at position (0, 0)
        leaves = torch.stack((first[..., 2], first[..., 0], first[..., 1]), -1).permute(1, 2, 0, 3).reshape(K, L, 3)
        expected = None
        saved = self.leaves
        try:
            self.leaves = leaves.to(saved.device)
            expected = self._torchlogix_indices()
        finally:
            self.leaves = saved
        if not torch.equal(expected[0].cpu(), i0.to(torch.int64).cpu()):
            raise ValueError(f"{prefix}connections._indices_L0 is not one set of leaves slid over the positions")
        for level in range(1, self.tree_depth):
            if idx[level] is None or not torch.equal(idx[level].cpu(), expected[level].cpu()):
                raise ValueError(f"{prefix}connections._indices_L{level} is not torchlogix's fixed pairing")
        return leaves

    def extra_repr(self) -> str:
        return super().extra_repr() + f", parametrization={self.parametrization_name}"


def _conv_to_torchlogix(module, state_dict, prefix, local_metadata):
    w = state_dict.pop(prefix + "weights")
    del state_dict[prefix + "leaves"]
    for i, t in enumerate(module.tree_weights):
        state_dict[f"{prefix}tree_weights.{i}"] = t.detach().to(w.dtype).contiguous()
    for i, t in enumerate(module._torchlogix_indices()):
        state_dict[f"{prefix}connections._indices_L{i}"] = t
    return state_dict


class GroupSum(_modules.GroupSum):
    """torchlogix's ``GroupSum(k, tau=1.0, beta=0.0, device='cpu')``: ``(sum + beta) / tau`` over ``k`` contiguous
    groups of the last dimension, as our :class:`relaxops.GroupSum` with the offset ``beta / tau`` (so the
    attribute ``beta`` holds ``beta / tau``, our form ``sum / tau + beta``)."""

    def __init__(self, k: int, tau: float = 1.0, beta: float = 0.0, device: str = "cpu"):
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
            raise ValueError(f"beta must be a finite number, got {beta!r}")
        super().__init__(k, tau, beta=beta / tau if beta else 0.0, device=device)
        self.device = device


class OrPooling2d(_modules.OrPooling2d):
    """torchlogix's ``OrPooling2d(kernel_size, stride, padding=0)``: the maximum over each window (the Boolean OR
    on Boolean values; ``torch.bool`` input gives ``torch.bool``)."""

    def __init__(self, kernel_size, stride, padding=0):
        super().__init__(kernel_size, stride, padding)
