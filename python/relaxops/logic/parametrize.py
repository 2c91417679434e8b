"""Gate parametrizations and sampling modes (docs/math/logic.md §10): from a neuron's parameters to the table of
its k-input lookup gate.

Every parametrization reduces to one thing the kernels evaluate: a table ``q [n, 2^k]`` per neuron and an output
activation. The neuron's relaxed output is the multilinear interpolation of its table at the inputs,

    u(x) = sum_t q[t] prod_i (x_i if bit i of t else 1 - x_i),     y = act(u),

where entry ``t`` is the input pattern with the FIRST input as its most significant bit (for k = 2: ``t = 2 a +
b``, so ``q = [T(0,0), T(0,1), T(1,0), T(1,1)]`` as in gates.TRUTH). ``act`` is the identity (``"none"``) or the
logistic sigmoid (``"sigmoid"``); ``"sigmoid_st"`` forwards ``u > 0`` and backpropagates the sigmoid's derivative
(a straight-through output). For two inputs the table becomes the four coefficients of the bilinear form (``c0 =
q0``, ``c1 = q2 - q0``, ``c2 = q1 - q0``, ``c3 = q3 - q2 - q1 + q0``), which the two-input kernels take.

Parametrizations (parameters per neuron):

* ``"softmax"`` (16, k = 2 only): difflogic's distribution over the 16 gates, ``q = softmax(w / tau) @ TRUTH``.
* ``"light"`` (2^k): one logit per table entry, ``q = sigmoid(w / tau)`` (Light DLGN, Rüttgers et al. 2025).
* ``"walsh"`` (2^k): Walsh coefficients of the neuron's pre-activation ``z(X) = sum_s w_s prod_{i in s} X_i`` on
  the signed inputs ``X_i = 1 - 2 x_i``; its corner values are the Hadamard transform ``H w`` (``H[t, s] =
  (-1)^popcount(s & t)``), and the output is ``sigmoid(-z / tau)`` (torchlogix's ``"warp"``): ``q = -(H w) / tau``
  with ``act = "sigmoid"``.

Sampling modes in training (eval mode is always the discrete gate, whatever the mode):

* ``"soft"``: the relaxation above.
* ``"hard"``: straight-through: forward the discrete gate of the current parameters, backward the soft one.
* ``"gumbel_soft"`` / ``"gumbel_hard"``: the same with noise: Gumbel noise on the 16 logits (softmax), logistic
  noise on the 2^k logits (light), drawn once per forward from torch's generator, shared by the batch; for walsh,
  logistic noise on each OUTPUT, ``y = sigmoid(u + L / tau)``, ``L`` from :func:`logistic_noise` (counter-based,
  so the backward and every backend regenerate the same values from a seed and the output's flat index).

Discretization (eval mode): softmax ``argmax`` (ties: lowest id; gates outside a chosen subset never win); light
``w > 0``; walsh ``H w < 0``. The truth table's gate id (k = 2) is ``sum_t T[t] 2^(2^k - 1 - t)``, gates.py's ids.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .gates import GATE_NAMES, NUM_GATES, init_gate_logits, truth_matrix

PARAMETRIZATIONS = ("softmax", "light", "walsh")
SAMPLINGS = ("soft", "hard", "gumbel_soft", "gumbel_hard")
ACTS = ("none", "sigmoid", "sigmoid_st")
MAX_K = 6


def check_k(k, parametrization: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_K:
        raise ValueError(f"k must be an integer in [2, {MAX_K}], got {k!r}")
    if parametrization == "softmax" and k != 2:
        raise ValueError(f"parametrization='softmax' (16 gates) needs k=2, got k={k}; use 'light' or 'walsh'")
    return k


def check_options(parametrization, sampling, temperature) -> float:
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"parametrization must be one of {list(PARAMETRIZATIONS)}, got {parametrization!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {list(SAMPLINGS)}, got {sampling!r}")
    # one chained comparison (no math.isfinite): it traces under torch.compile(dynamic=True), where floats are symbolic
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def num_params(parametrization: str, k: int) -> int:
    """Parameters per neuron: 16 for softmax, ``2^k`` for light and walsh."""
    return NUM_GATES if parametrization == "softmax" else 1 << k


def gate_mask(gates, device=None) -> torch.Tensor | None:
    """Bool ``[16]`` of the allowed gates from names or ids (``None``: all gates; then None is returned)."""
    if gates is None:
        return None
    try:
        items = list(gates)
    except TypeError:
        raise ValueError(f"gates must be a sequence of gate names or ids, got {gates!r}") from None
    mask = torch.zeros(NUM_GATES, dtype=torch.bool)
    for g in items:
        if isinstance(g, str) and g in GATE_NAMES:
            mask[GATE_NAMES.index(g)] = True
        elif isinstance(g, int) and not isinstance(g, bool) and 0 <= g < NUM_GATES:
            mask[g] = True
        else:
            raise ValueError(f"gates: {g!r} is neither a gate name {list(GATE_NAMES)} nor an id in [0, 16)")
    if not bool(mask.any()):
        raise ValueError("gates must name at least one gate")
    return mask.to(device)


def hadamard(k: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Sylvester's ``H [2^k, 2^k]``, ``H[t, s] = (-1)^popcount(s & t)`` (symmetric, ``H H = 2^k I``)."""
    t = torch.arange(1 << k)
    bits = t[:, None] & t[None, :]
    parity = torch.zeros_like(bits)
    for i in range(k):
        parity ^= (bits >> i) & 1
    return (1 - 2 * parity).to(dtype=dtype, device=device)


def init_weights(
    n: int,
    k: int,
    parametrization: str,
    init: str = "random",
    residual_probability: float = 0.9,
    temperature: float = 1.0,
    device=None,
    dtype=None,
) -> torch.Tensor:
    """Initial parameters ``[n, num_params]``. ``"random"``: softmax ``N(0, 1)`` (difflogic), light ``U(0, 1)``
    and walsh ``N(0, 1)`` (torchlogix). ``"residual"``: every neuron starts near the pass-through of its first input:
    softmax as ``gates.init_gate_logits``; light ``N(0, 1)`` shifted by -3 on the entries whose first input is 0 and
    +3 on the others (torchlogix, random); walsh the exact coefficients of the pass-through with the output logit
    ``tau log(p / (1 - p))`` at every corner, ``p = residual_probability`` (deterministic)."""
    if init not in ("random", "residual"):
        raise ValueError(f"init must be one of ['random', 'residual'], got {init!r}")
    if parametrization == "softmax":
        return init_gate_logits(n, init, residual_probability, device=device, dtype=dtype)
    m = 1 << k
    if init == "random":
        w = torch.rand(n, m, device=device) if parametrization == "light" else torch.randn(n, m, device=device)
        return w.to(dtype) if dtype is not None else w
    p = residual_probability
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
        raise ValueError(f"residual_probability must be a number in (0, 1), got {p!r}")
    first = (torch.arange(m) >= m // 2).to(torch.float64)  # the pass-through's table: the first input
    if parametrization == "light":
        w = torch.randn(n, m, device=device)
        w += (6 * first - 3).to(w.dtype).to(w.device)
        return w.to(dtype) if dtype is not None else w
    # walsh: corners z(t) = -c (output 1) where the first input is 1, +c elsewhere; w = H z / 2^k
    c = temperature * math.log(p / (1 - p))
    z = c * (1 - 2 * first)
    w = hadamard(k, torch.float64) @ z / m
    return w.expand(n, m).to(dtype=dtype or torch.get_default_dtype(), device=device).clone()


def _straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    return (hard - soft).detach() + soft


def _gumbel(shape, like: torch.Tensor) -> torch.Tensor:
    u = torch.rand(shape, device=like.device, dtype=like.dtype)
    return -torch.log(-torch.log(u + 1e-20) + 1e-20)


def _logistic(shape, like: torch.Tensor) -> torch.Tensor:
    u = torch.rand(shape, device=like.device, dtype=like.dtype)
    return torch.log(u + 1e-20) - torch.log(1 - u + 1e-20)


def truth_tables(weights: torch.Tensor, parametrization: str, k: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The discretized gates: bool ``[n, 2^k]`` truth tables (entry order as the module docstring)."""
    w = weights.detach()
    if parametrization == "softmax":
        if mask is not None:
            w = w.masked_fill(~mask, -math.inf)
        return truth_matrix(torch.float32, w.device)[w.argmax(-1)] > 0.5
    if parametrization == "light":
        return w > 0
    return (w @ hadamard(k, w.dtype, w.device)) < 0


def table_ids(tables: torch.Tensor) -> torch.Tensor:
    """int64 ids of bool truth tables ``[n, 2^k]``: ``sum_t T[t] 2^(2^k - 1 - t)`` (k <= 5: ids fit in int64)."""
    m = tables.shape[-1]
    if m > 32:
        raise ValueError("table_ids: ids of 6-input tables do not fit in int64; use the tables themselves")
    weights = 2 ** torch.arange(m - 1, -1, -1, device=tables.device, dtype=torch.int64)
    return (tables.to(torch.int64) * weights).sum(-1)


def lut_table(
    weights: torch.Tensor,
    parametrization: str,
    k: int,
    training: bool,
    sampling: str = "soft",
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, str]:
    """``(q [n, 2^k], act)``: the table and output activation the kernels evaluate (module docstring), computed
    with autograd in ``dtype`` (default: weights' dtype). For walsh with a gumbel mode the returned ``act`` is
    ``"sigmoid"`` / ``"sigmoid_st"`` and the caller adds the per-output noise (:func:`logistic_noise`)."""
    w = weights.to(dtype) if dtype is not None else weights
    tau = temperature
    if not training:
        return truth_tables(w, parametrization, k, mask).to(w.dtype), "none"
    if parametrization == "softmax":
        logits = w if mask is None else w.masked_fill(~mask, -math.inf)
        if sampling.startswith("gumbel"):
            logits = logits + _gumbel(logits.shape, logits)
        p = torch.softmax(logits / tau, dim=-1)
        if sampling in ("hard", "gumbel_hard"):
            p = _straight_through(F.one_hot(p.argmax(-1), NUM_GATES).to(p.dtype), p)
        return p @ truth_matrix(p.dtype, p.device), "none"
    if parametrization == "light":
        logits = w + _logistic(w.shape, w) if sampling.startswith("gumbel") else w
        q = torch.sigmoid(logits / tau)
        if sampling in ("hard", "gumbel_hard"):
            q = _straight_through((q > 0.5).to(q.dtype), q)
        return q, "none"
    q = -(w @ hadamard(k, w.dtype, w.device)) / tau
    return q, ("sigmoid_st" if sampling in ("hard", "gumbel_hard") else "sigmoid")


def coefficients(q: torch.Tensor) -> torch.Tensor:
    """Two-input tables ``[n, 4]`` -> the bilinear coefficients ``[c0, c1, c2, c3]`` (differentiable)."""
    q00, q01, q10, q11 = q.unbind(-1)
    return torch.stack((q00, q10 - q00, q01 - q00, q11 - q10 - q01 + q00), -1)


# --- counter-based logistic noise (walsh gumbel modes) ---------------------------------------------------------
#
# U = (hash(seed, i) + 0.5) / 2^32 in (0, 1), L = log(U) - log(1 - U), for the flat output index i. hash32 is the
# "lowbias32" integer mix (xor-shift-multiply, all arithmetic mod 2^32); the kernels implement the same function on
# uint32, the reference below on int64 with masks (so it runs on every device).

_M32 = 0xFFFFFFFF


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on the low 32 bits of int64 ``x`` (returns values in [0, 2^32))."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def noise_bits(seed: int, index: torch.Tensor) -> torch.Tensor:
    """``hash32(lo(i) ^ hash32(hi(i) ^ hash32(seed)))`` for int64 flat indices ``i >= 0``."""
    s = hash32(torch.tensor(seed & _M32, dtype=torch.int64, device=index.device))
    return hash32((index & _M32) ^ hash32((index >> 32) ^ s))


def logistic_noise(seed: int, index: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """Logistic(0, 1) noise at int64 flat indices, from the seed (see above); float64 arithmetic, then ``dtype``."""
    u = (noise_bits(seed, index).to(torch.float64) + 0.5) / 4294967296.0
    return (torch.log(u) - torch.log1p(-u)).to(dtype)


def new_seed() -> int:
    """A noise seed in [0, 2^31) from torch's default generator (so ``torch.manual_seed`` fixes it)."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())
