"""k-input lookup-table layers (docs/math/logic.md §11): :class:`LogicLUTLayer` and :func:`logic_lut`."""

from __future__ import annotations

import numbers

import torch

from .. import _backend, _checks
from . import ops, parametrize, reference
from .bits import PackedBits
from .connections import CONNECTIONS, check_lut_indices, check_lut_sizes, lut_connections, lut_inverse_index
from .modules import _GradFactor
from .wiring import LearnableConnections

_KERNEL_DTYPES = (torch.float32, torch.float64)


def logic_lut(
    x: torch.Tensor,
    indices: torch.Tensor,
    table: torch.Tensor,
    act: str = "none",
    seed: int = -1,
    noise_scale: float = 0.0,
    csr: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """One layer of k-input lookup-table neurons: ``y[..., j] = act(u_j + noise_scale L)``, ``u_j`` the
    multilinear interpolation of ``table[j]`` at the inputs ``x[..., indices[:, j]]`` (docs/math/logic.md §11).

    Args:
        x: ``[..., n_in]`` float tensor of input probabilities (values in ``[0, 1]``).
        indices: int64 ``[k, n_out]``, ``k`` in 2..6: input ``i`` of neuron ``j`` is ``x[..., indices[i, j]]``.
        table: ``[n_out, 2^k]`` tables (entry ``t``: the input pattern with the first input as its most
            significant bit), e.g. from ``parametrize.lut_table``; differentiable.
        act: ``"none"``, ``"sigmoid"`` or ``"sigmoid_st"`` (forward ``1[z > 0]``, backward the sigmoid's slope).
        seed, noise_scale: with ``seed >= 0``, the logistic noise ``parametrize.logistic_noise(seed, s n_out + j)``
            times ``noise_scale`` is added before the activation (``s``: the sample's row in ``x`` flattened to
            ``[B, n_in]``).
        csr: ``connections.lut_inverse_index(indices, n_in)`` (built here when None).
        backend: ``auto``, ``reference``, ``cpu``, ``cuda`` or ``triton`` (kernels: float32/float64 data; ``auto``
            takes the reference for other dtypes and, until verified on a GPU, on CUDA tensors).

    Returns:
        ``[..., n_out]`` in x's dtype, computed in float32 (float64 for float64 data).
    """
    _checks.floating_tensor(x, "x")
    if not isinstance(indices, torch.Tensor) or indices.dim() != 2 or indices.dtype != torch.int64:
        raise ValueError(f"indices must be an int64 tensor [k, n_out], got {getattr(indices, 'shape', indices)!r}")
    k, n_out = indices.shape
    parametrize.check_k(k, "light")
    n_in = x.shape[-1]
    check_lut_indices(indices, "indices", n_in, n_out, k)
    if not isinstance(table, torch.Tensor) or tuple(table.shape) != (n_out, 1 << k):
        raise ValueError(
            f"table must have shape [n_out, 2^k] = [{n_out}, {1 << k}], got {tuple(getattr(table, 'shape', ()))}"
        )
    if act not in ops.LUT_ACTS:
        raise ValueError(f"act must be one of {list(ops.LUT_ACTS)}, got {act!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < -1:
        raise ValueError(f"seed must be an integer >= -1 (-1: no noise), got {seed!r}")
    requested = backend
    backend = _backend.resolve("logic_lut", backend, x.device)
    if backend != "reference" and x.dtype not in _KERNEL_DTYPES:
        if requested != "auto":
            raise TypeError(f"x: backend {backend!r} supports {list(_KERNEL_DTYPES)} for logic_lut, got {x.dtype}")
        backend = "reference"
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    batch = x.shape[:-1]
    x2 = x.reshape(-1, n_in)
    if backend == "reference":
        y = reference.logic_lut(x2, indices, table.to(acc), act, seed, float(noise_scale))
    else:
        if csr is None:
            csr = lut_inverse_index(indices, n_in)
        xt = ops.feature_major(x2)  # free for the output of a previous layer
        yt, _ = ops.logic_lut_fwd(  # the second output is saved for the backward
            xt, indices, table.to(acc).contiguous(), csr[0], csr[1], ops.LUT_ACTS[act], seed, float(noise_scale),
            backend,
        )  # fmt: skip
        y = yt.t()
    return y if len(batch) == 1 else y.reshape(*batch, n_out)


class LogicLUTLayer(torch.nn.Module):
    """A layer of ``out_dim`` k-input lookup-table neurons (k = 2..6) with fixed connections and learned tables.

    Neuron ``j`` reads the inputs ``indices[:, j]`` and outputs, in training mode, the multilinear interpolation
    of its relaxed table (``parametrize.lut_table``) at them, through the parametrization's activation; in eval
    mode its discrete truth table (``truth_tables()``), exactly Boolean for Boolean inputs. In eval mode the layer
    also accepts :class:`PackedBits` (evaluated as the two-input gates of its lowering, ``lower.lut_gates``).

    Args:
        in_dim, out_dim: inputs and neurons (``k * out_dim >= in_dim`` so that every input can be used).
        k: inputs per neuron, 2..6 (tables of ``2^k`` entries).
        connections: ``"random"`` (balanced: every input used floor or ceil of ``k out_dim / in_dim`` times; a
            neuron may read an input twice), ``"unique"`` (the k inputs of a neuron distinct), an integer tensor
            ``[k, out_dim]`` of input indices, or ``"learnable"``: the submodule ``wiring``
            (:class:`~relaxops.logic.wiring.LearnableConnections`) learns each neuron's k inputs among candidates
            (docs/math/logic.md §12), configured by ``num_candidates``, ``connection_temperature``,
            ``connection_gumbel`` and ``connection_mode`` (its ``num_candidates``, ``temperature``, ``gumbel`` and
            ``mode``); ``indices`` is then None and ``resolved_indices()`` the learned wiring.
        parametrization: ``"light"`` (one logit per table entry) or ``"walsh"`` (Walsh coefficients); see
            ``relaxops.logic.parametrize``. The 16-gate ``"softmax"`` is two-input only: ``LogicLayer``.
        sampling: ``"soft"``, ``"hard"``, ``"gumbel_soft"`` or ``"gumbel_hard"`` (training mode only).
        temperature: ``tau`` of the parametrization (> 0).
        init, residual_probability: initial weights (``parametrize.init_weights``): ``"residual"`` starts every
            neuron near the pass-through of its first input, ``"random"`` at random.
        grad_factor: the gradient passed to the previous layer is multiplied by this (forward unchanged).
        device, dtype: of ``weights`` ``[out_dim, 2^k]``.
        backend: kernel backend (``auto``, ``reference``, ``cpu``, ``cuda``, ``triton``).

    Buffers: ``indices`` int64 ``[k, out_dim]`` (in ``state_dict``). Learned connections are ``wiring``: a module
    mapping ``x [..., in_dim]`` to the gathered slot inputs ``[..., k out_dim]`` (slot-major: column ``i out_dim +
    j`` is input ``i`` of neuron ``j``) with a method ``resolved_indices()`` giving the discrete ``[k, out_dim]``
    wiring; training runs the layer on its output, eval mode, packing and export on the resolved indices.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        k: int = 4,
        connections="random",
        parametrization: str = "light",
        sampling: str = "soft",
        temperature: float = 1.0,
        init: str = "residual",
        residual_probability: float = 0.9,
        grad_factor: float = 1.0,
        device=None,
        dtype=None,
        backend: str = "auto",
        num_candidates: int | None = None,
        connection_temperature: float = 1.0,
        connection_gumbel: bool = False,
        connection_mode: str = "straight_through",
    ):
        super().__init__()
        if parametrization == "softmax":
            raise ValueError(
                "parametrization='softmax' (the 16 two-input gates) is LogicLayer's; LogicLUTLayer takes 'light' "
                "or 'walsh'"
            )
        self.temperature = parametrize.check_options(parametrization, sampling, temperature)
        self.k = parametrize.check_k(k, parametrization)
        check_lut_sizes(in_dim, out_dim, self.k)
        if isinstance(grad_factor, bool) or not isinstance(grad_factor, numbers.Real):
            raise TypeError(f"grad_factor must be a number, got {type(grad_factor).__name__}")
        if isinstance(connections, str):
            if connections not in CONNECTIONS + ("learnable",):
                raise ValueError(
                    f"connections must be one of {list(CONNECTIONS) + ['learnable']} or a [k, out_dim] tensor, "
                    f"got {connections!r}"
                )
        else:
            connections = check_lut_indices(connections, "connections", in_dim, out_dim, self.k).cpu()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.parametrization, self.sampling = parametrization, sampling
        self.grad_factor = float(grad_factor)
        self.backend = backend
        self.init = init
        w = parametrize.init_weights(
            out_dim, self.k, parametrization, init, residual_probability, self.temperature, device, dtype
        )
        self.weights = torch.nn.Parameter(w)
        self.connections = connections if isinstance(connections, str) else "given"
        wiring = (num_candidates, connection_temperature, connection_gumbel, connection_mode)
        self._csr_of = None
        if connections == "learnable":
            self.wiring = LearnableConnections(
                self.in_dim, self.out_dim, self.k, *wiring, device=self.weights.device, dtype=dtype
            )
            self.register_buffer("indices", None)
            return
        if wiring != (None, 1.0, False, "straight_through"):
            raise ValueError("num_candidates and connection_* options need connections='learnable'")
        idx = lut_connections(connections, in_dim, out_dim, self.k) if isinstance(connections, str) else connections
        self.register_buffer("indices", idx.to(self.weights.device))
        self.wiring = None
        self.inverse_index()

    def inverse_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``connections.lut_inverse_index`` of the current indices (rebuilt when they change: assigned, loaded,
        moved or edited in place, seen by their version counter at the next eager call)."""
        idx = self.indices
        built = self._csr_of
        if built is not None and (torch.compiler.is_compiling() or (built[0] is idx and built[1] == idx._version)):
            return self.csr_start, self.csr_entry  # a compiled graph uses the index built by the last eager call
        check_lut_indices(idx, "LogicLUTLayer: indices", self.in_dim, self.out_dim, self.k)
        if idx.dtype != torch.int64 or not idx.is_contiguous():
            raise ValueError("LogicLUTLayer: indices must be a contiguous int64 tensor [k, out_dim]")
        start, entry = lut_inverse_index(idx, self.in_dim)
        self.register_buffer("csr_start", start, persistent=False)
        self.register_buffer("csr_entry", entry, persistent=False)
        self._csr_of = (idx, idx._version)
        return start, entry

    def slot_indices(self, device) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The indices ``[k, out_dim]`` and inverse index by which the gates read ``wiring``'s gathered slots
        ``[..., k out_dim]`` (neuron j's input i is slot ``i out_dim + j``), built once per device."""
        cached = getattr(self, "_slots", None)
        if cached is None or cached[0].device != torch.device(device):
            slots = torch.arange(self.k * self.out_dim, device=device).reshape(self.k, self.out_dim)
            self._slots = (slots, lut_inverse_index(slots, self.k * self.out_dim))
        return self._slots

    def resolved_indices(self) -> torch.Tensor:
        """The discrete connections ``[k, out_dim]`` of eval mode, packing and export."""
        return self.wiring.resolved_indices() if self.wiring is not None else self.indices

    @property
    def num_neurons(self) -> int:
        return self.out_dim

    def truth_tables(self) -> torch.Tensor:
        """The discretized neurons: bool ``[out_dim, 2^k]`` (``parametrize.truth_tables``)."""
        return parametrize.truth_tables(self.weights, self.parametrization, self.k)

    def table(self, dtype=None) -> tuple[torch.Tensor, str]:
        """``(q [out_dim, 2^k], act)`` the kernels evaluate in the current mode (``parametrize.lut_table``)."""
        return parametrize.lut_table(
            self.weights, self.parametrization, self.k, self.training, self.sampling, self.temperature, dtype=dtype
        )

    def forward(self, x):
        if isinstance(x, PackedBits):
            if self.training:
                raise RuntimeError("LogicLUTLayer: PackedBits input needs eval mode (call model.eval())")
            from .lower import lut_packed

            return lut_packed(self, x)
        _checks.floating_tensor(x, "x")
        if x.shape[-1] != self.in_dim:
            raise ValueError(f"x must have {self.in_dim} features in its last dimension, got shape {tuple(x.shape)}")
        if self.grad_factor != 1.0:
            x = _GradFactor.apply(x, self.grad_factor)
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        q, act = self.table(acc)
        seed, scale = -1, 0.0
        if self.training and self.parametrization == "walsh" and self.sampling.startswith("gumbel"):
            seed, scale = parametrize.new_seed(), 1.0 / self.temperature
        if self.wiring is not None and self.training:
            slots = self.wiring(x)  # [..., k out_dim], slot-major
            idx, csr = self.slot_indices(x.device)
            return logic_lut(slots, idx, q, act, seed, scale, csr, self.backend)
        if self.wiring is not None:
            return logic_lut(x, self.resolved_indices(), q, act, seed, scale, None, self.backend)
        return logic_lut(x, self.indices, q, act, seed, scale, self.inverse_index(), self.backend)

    def extra_repr(self) -> str:
        return (
            f"{self.in_dim}, {self.out_dim}, k={self.k}, parametrization={self.parametrization!r}, "
            f"sampling={self.sampling!r}, {'train' if self.training else 'eval'}"
        )
