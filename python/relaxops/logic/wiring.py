"""Learnable connections (docs/math/logic.md §12): each input slot of each neuron chooses one input among candidates.

A layer of ``out_dim`` neurons with ``k`` inputs each has ``k * out_dim`` slots. Slot ``(s, j)`` (input ``s`` of
neuron ``j``) owns one logit per candidate, ``weights [C, k, out_dim]``; its candidates are all ``in_dim`` inputs
(``C = in_dim``, candidate ``c`` is input ``c``, no index table) or ``C = num_candidates`` inputs drawn at
construction (buffer ``candidates`` int64 ``[C, k, out_dim]``). The gathered output is slot-major: slot ``(s, j)`` is
feature ``s * out_dim + j`` of ``[..., k * out_dim]``.

Training modes (``p = softmax((w + g) / tau)`` over the candidates, ``g`` Gumbel noise when ``gumbel`` else 0):

* ``"straight_through"``: forward the candidate ``argmax(w + g)``; backward, with ``G`` the slot's gradient, the
  input gradient ``p_c G`` to each candidate ``c`` and the logit gradient ``(2 x_c - 1) G`` (torchlogix 0.2.2's
  estimator for learnable dense connections).
* ``"soft"``: forward the mixture ``sum_c p_c x_c``; its exact gradient.

Eval mode gathers :meth:`LearnableConnections.resolved_indices` (``argmax(w)``, no noise): a fixed wiring that
packs and exports like any other.
"""

from __future__ import annotations

import numbers

import torch

from .. import _checks

WIRING_MODES = ("straight_through", "soft")
WIRING_INITS = ("uniform", "normal")


def gumbel_noise(shape, device, dtype) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log(u))``, ``u ~ U[0, 1)`` from torch's generator (1e-20 guards both logs)."""
    u = torch.rand(shape, device=device, dtype=dtype)
    return -torch.log(-torch.log(u + 1e-20) + 1e-20)


def resolve(logits: torch.Tensor, candidates: torch.Tensor | None) -> torch.Tensor:
    """The input of each slot's ``argmax`` candidate (ties: the first): ``logits [C, k, n]`` -> int64 ``[k, n]``."""
    choice = logits.detach().argmax(0)
    return choice if candidates is None else candidates.gather(0, choice[None])[0]


def _columns(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[:, idx]`` of ``x [N, in_dim]``. A feature-major ``x`` (the transposed view of a contiguous ``[in_dim, N]``,
    as a logic layer returns) is gathered by rows and the result returned as such a view too, so that the next logic
    layer reads it without a transpose."""
    if x.t().is_contiguous() and not x.is_contiguous():
        return x.t()[idx].t()
    return x[:, idx]


class _StraightThrough(torch.autograd.Function):
    """``x [N, in_dim]`` -> ``[N, k * out_dim]``: the argmax candidate of each slot; backward: the estimator of the
    module docstring. ``candidates`` None means every input is a candidate (the backward is then two GEMMs)."""

    @staticmethod
    def forward(ctx, x, weights, candidates, noise, tau):
        z = weights.detach() if noise is None else weights.detach() + noise  # [C, k, n]
        ctx.save_for_backward(x, z, candidates)
        ctx.tau, ctx.weights_dtype = tau, weights.dtype
        return _columns(x, resolve(z, candidates).reshape(-1))

    @staticmethod
    def backward(ctx, grad):
        x, z, candidates = ctx.saved_tensors
        C = z.shape[0]
        if ctx.needs_input_grad[0]:  # the softmax only when the inputs need a gradient
            p = torch.softmax(z / ctx.tau, 0).reshape(C, -1).to(grad.dtype)  # [C, k n]
        grad_x = grad_w = None
        if candidates is None:  # candidate c is input c: dense products
            if ctx.needs_input_grad[0]:
                grad_x = grad @ p.t()  # [N, in]
            if ctx.needs_input_grad[1]:  # sum_n (2 x[n, c] - 1) G[n, slot] in one GEMM
                grad_w = torch.addmm(-grad.sum(0), x.t().to(grad.dtype), grad, alpha=2)
        else:  # feature-major (rows = features: contiguous gathers and scatter-adds), one candidate at a time:
            cand = candidates.reshape(C, -1)  # memory O(N k n), not O(N C k n)
            gt = grad.t().contiguous()  # [k n, N]; free for a logic layer's (feature-major) gradient
            if ctx.needs_input_grad[0]:
                grad_xt = gt.new_zeros(x.shape[1], x.shape[0])
                for c in range(C):
                    grad_xt.index_add_(0, cand[c], gt * p[c][:, None])
                grad_x = grad_xt.t()
            if ctx.needs_input_grad[1]:
                xt, total = x.t().contiguous().to(gt.dtype), gt.sum(1)
                grad_w = torch.stack([2 * torch.einsum("sb,sb->s", xt[cand[c]], gt) - total for c in range(C)])
        if grad_w is not None:
            grad_w = grad_w.reshape(z.shape).to(ctx.weights_dtype)
        return grad_x, grad_w, None, None, None


def learnable_connections(
    x: torch.Tensor,
    weights: torch.Tensor,
    candidates: torch.Tensor | None = None,
    temperature: float = 1.0,
    noise: torch.Tensor | None = None,
    mode: str = "straight_through",
    training: bool = True,
) -> torch.Tensor:
    """The gathered slots ``[..., k * out_dim]`` (slot-major) of ``x [..., in_dim]``.

    Args:
        x: float tensor ``[..., in_dim]``.
        weights: logits ``[C, k, out_dim]`` (``C = in_dim`` when ``candidates`` is None).
        candidates: int64 ``[C, k, out_dim]`` input indices, or None (candidate ``c`` is input ``c``).
        temperature: ``tau > 0`` of the softmax over the candidates.
        noise: added to the logits in training (Gumbel noise, ``[C, k, out_dim]``), or None.
        mode: ``"straight_through"`` or ``"soft"`` (module docstring).
        training: False gathers ``argmax(weights)`` (noise and mode ignored; no gradient to the logits).
    """
    _checks.floating_tensor(x, "x")
    if mode not in WIRING_MODES:
        raise ValueError(f"mode must be one of {list(WIRING_MODES)}, got {mode!r}")
    if not isinstance(weights, torch.Tensor) or weights.dim() != 3:
        raise ValueError(f"weights must be a tensor [C, k, out_dim], got {getattr(weights, 'shape', weights)!r}")
    if candidates is None:
        if weights.shape[0] != x.shape[-1]:
            raise ValueError(
                f"weights must have in_dim = {x.shape[-1]} candidates without a candidates table, got "
                f"{tuple(weights.shape)}"
            )
    elif candidates.shape != weights.shape or candidates.dtype != torch.int64:
        raise ValueError(
            f"candidates must be int64 of the shape of weights {tuple(weights.shape)}, got "
            f"{tuple(candidates.shape)} {candidates.dtype}"
        )
    if noise is not None and noise.shape != weights.shape:
        raise ValueError(f"noise must have the shape of weights {tuple(weights.shape)}, got {tuple(noise.shape)}")
    tau = _checks.positive_finite(temperature, "temperature")
    batch, n = x.shape[:-1], weights.shape[1] * weights.shape[2]
    x2 = x.reshape(-1, x.shape[-1])
    if not training:
        y = _columns(x2, resolve(weights, candidates).reshape(-1))
    elif mode == "straight_through":
        y = _StraightThrough.apply(x2, weights, candidates, noise, tau)
    else:
        z = weights if noise is None else weights + noise
        p = torch.softmax(z / tau, 0).to(x.dtype).reshape(z.shape[0], -1)  # [C, k n]
        if candidates is None:
            y = x2 @ p
        else:
            cand = candidates.reshape(z.shape[0], -1)
            y = sum(p[c] * x2[:, cand[c]] for c in range(z.shape[0]))
    return y.reshape(*batch, n)


class LearnableConnections(torch.nn.Module):
    """Learnable wiring of ``out_dim`` neurons with ``k`` inputs each (module docstring; docs/math/logic.md §12).

    ``forward(x [..., in_dim]) -> [..., k * out_dim]``, slot ``s`` of neuron ``j`` at ``s * out_dim + j``.

    Args:
        in_dim, out_dim: inputs and neurons (>= 1).
        k: inputs per neuron (>= 1).
        num_candidates: None (every input is a candidate of every slot; no index table, dense products) or
            ``C`` in ``[1, in_dim]``: each slot gets ``C`` inputs at construction, buffer ``candidates`` int64
            ``[C, k, out_dim]`` drawn as ``randperm(C k out_dim) % in_dim`` on torch's CPU generator, so every
            input is some slot's candidate when ``C k out_dim >= in_dim`` (a slot may repeat an input).
        temperature: ``tau > 0`` of ``softmax(w / tau)`` over the candidates.
        gumbel: add Gumbel noise to the logits in training, drawn each forward from torch's generator on the
            logits' device (reproducible under ``torch.manual_seed``).
        mode: ``"straight_through"`` (default) or ``"soft"``.
        init: the logits' initialisation, ``"uniform"`` (``U[0, 1)``, torchlogix's) or ``"normal"`` (``N(0, 1)``).
        device, dtype: of the logits ``weights [C, k, out_dim]``.

    ``resolved_indices()`` is the discrete wiring of eval mode. ``state_dict`` holds ``weights`` and, with
    candidates, ``candidates`` (validated on load). ``torch.compile`` traces the module (the straight-through mode
    through its ``torch.autograd.Function``; the soft mode is plain torch ops).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        k: int = 2,
        num_candidates: int | None = None,
        temperature: float = 1.0,
        gumbel: bool = False,
        mode: str = "straight_through",
        init: str = "uniform",
        device=None,
        dtype=None,
    ):
        super().__init__()
        for name, v in (("in_dim", in_dim), ("out_dim", out_dim), ("k", k)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if num_candidates is not None and (
            isinstance(num_candidates, bool)
            or not isinstance(num_candidates, numbers.Integral)
            or not 1 <= num_candidates <= in_dim
        ):
            raise ValueError(
                f"num_candidates must be None or an integer in [1, in_dim={in_dim}], got {num_candidates!r}"
            )
        if not isinstance(gumbel, bool):
            raise TypeError(f"gumbel must be a bool, got {type(gumbel).__name__}")
        if mode not in WIRING_MODES:
            raise ValueError(f"mode must be one of {list(WIRING_MODES)}, got {mode!r}")
        if init not in WIRING_INITS:
            raise ValueError(f"init must be one of {list(WIRING_INITS)}, got {init!r}")
        self.in_dim, self.out_dim, self.k = int(in_dim), int(out_dim), int(k)
        self.num_candidates = None if num_candidates is None else int(num_candidates)
        self.temperature = _checks.positive_finite(temperature, "temperature")
        self.gumbel, self.mode, self.init = gumbel, mode, init
        C = self.in_dim if num_candidates is None else self.num_candidates
        shape = (C, self.k, self.out_dim)
        draw = torch.rand if init == "uniform" else torch.randn
        self.weights = torch.nn.Parameter(draw(shape, device=device, dtype=dtype))
        if num_candidates is None:
            self.candidates = None
        else:
            cand = torch.randperm(C * self.k * self.out_dim) % self.in_dim
            self.register_buffer("candidates", cand.reshape(shape).to(self.weights.device))

    def _check_candidates(self, t, where: str) -> None:
        C = self.weights.shape[0]
        if not isinstance(t, torch.Tensor) or t.shape != (C, self.k, self.out_dim):
            raise ValueError(f"{where} must have shape [{C}, {self.k}, {self.out_dim}], got {getattr(t, 'shape', t)}")
        if t.dtype != torch.int64:
            raise ValueError(f"{where} must be int64, got {t.dtype}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.in_dim):
            raise ValueError(
                f"{where} must hold input indices in [0, {self.in_dim}), got [{int(t.min())}, {int(t.max())}]"
            )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        t = state_dict.get(prefix + "candidates")
        if self.candidates is not None and isinstance(t, torch.Tensor):
            self._check_candidates(t, f"LearnableConnections.load_state_dict: {prefix}candidates")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def resolved_indices(self) -> torch.Tensor:
        """The discrete wiring: int64 ``[k, out_dim]``, the input of each slot's ``argmax`` logit (ties: the first
        candidate), as used in eval mode, by packing and by export."""
        return resolve(self.weights, self.candidates)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.shape[-1:] != (self.in_dim,):
            raise ValueError(f"x must have {self.in_dim} features in its last dimension, got shape {tuple(x.shape)}")
        w = self.weights
        noise = gumbel_noise(w.shape, w.device, w.dtype) if self.gumbel and self.training else None
        return learnable_connections(x, w, self.candidates, self.temperature, noise, self.mode, self.training)

    def extra_repr(self) -> str:
        cand = "all" if self.candidates is None else self.num_candidates
        return (
            f"{self.in_dim}, {self.out_dim}, k={self.k}, candidates={cand}, temperature={self.temperature}, "
            f"gumbel={self.gumbel}, mode={self.mode!r}"
        )
