"""Noise samplers for perturbed predictors (docs/math/training.md §6.2), drawn from a ``torch.Generator``.

Every kind is an inverse-CDF (or Box-Muller, for ``normal``) transform of uniforms that are clamped to
``[tiny, 1 - eps]`` of the dtype they are drawn in, so no sample is ever infinite:

================  =====================================================  ==================
kind              sample                                                 mean, variance
================  =====================================================  ==================
``gumbel``        ``-log(-log U)`` (standard Gumbel)                     γ_E, π²/6
``gumbel0``       ``-log(-log U) - γ_E`` (zero-mean Gumbel)               0, π²/6
``gumbel_var3``   ``β (-log(-log U)) - β γ_E``, ``β = √18/π`` (official)   0, 3
``logistic``      ``log U - log(1 - U)``                                 0, π²/3
``normal``        standard normal (``torch.randn``)                      0, 1
``cauchy``        ``tan(π (U - ½))`` (standard Cauchy)                   undefined
================  =====================================================  ==================

Half-precision samples are drawn and transformed in float32, then rounded (Cauchy tails are clamped to the
dtype's largest finite value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

NOISE_KINDS = ("gumbel", "gumbel0", "gumbel_var3", "logistic", "normal", "cauchy")
EULER_GAMMA = 0.5772156649015329
GUMBEL_VAR3_SCALE = math.sqrt(18.0) / math.pi  # scale of a Gumbel with variance 3 (π² β² / 6 = 3)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_noise_kind(kind, name: str = "noise") -> str:
    if not isinstance(kind, str) or kind not in NOISE_KINDS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, NOISE_KINDS))}, got {kind!r}")
    return kind


def _check_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, torch.Size):
        return tuple(shape)
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence) or isinstance(shape, str):
        raise TypeError(f"shape must be a sequence of non-negative ints, got {shape!r}")
    out = []
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"shape must be a sequence of non-negative ints, got {tuple(shape)!r}")
        out.append(int(s))
    return tuple(out)


def uniform(
    shape, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """Uniforms on ``[tiny, 1 - eps]`` of ``dtype`` (never exactly 0 or 1), drawn from ``generator``."""
    u = torch.rand(shape, generator=generator, dtype=dtype, device=device)
    info = torch.finfo(dtype)
    return u.clamp_(info.tiny, 1.0 - info.eps)


def sample_noise(
    shape,
    kind: str = "gumbel0",
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    """Draws a tensor of i.i.d. noise of the given kind.

    Args:
        shape: the output shape (a sequence of non-negative ints, or ``torch.Size``).
        kind: one of ``NOISE_KINDS``: ``gumbel``, ``gumbel0``, ``gumbel_var3``, ``logistic``, ``normal``,
            ``cauchy`` (see the module docstring for the formulas).
        generator: a ``torch.Generator`` on ``device`` (``None``: torch's default generator). The same generator
            state gives the same samples.
        dtype: a floating dtype (float16, bfloat16, float32, float64).
        device: where the samples are drawn (default: the generator's device, else CPU).

    Returns:
        A finite ``[*shape]`` tensor of ``dtype`` on ``device``.
    """
    shape = _check_shape(shape)
    check_noise_kind(kind, "kind")
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(f"dtype must be float16, bfloat16, float32 or float64, got {dtype}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"generator is on {generator.device} but the noise is drawn on {device}")
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    if kind == "normal":
        z = torch.randn(shape, generator=generator, dtype=work, device=device)
    else:
        u = uniform(shape, generator, work, device)
        if kind == "logistic":
            z = torch.log(u) - torch.log1p(-u)
        elif kind == "cauchy":
            # in float64: float32's π/2 exceeds π/2, so tan(π (tiny - ½)) would come out large and *positive*
            z = torch.tan(math.pi * (u.double() - 0.5))
            big = torch.finfo(work).max
            z = z.clamp(-big, big).to(work)
        else:
            z = -torch.log(-torch.log(u))
            if kind == "gumbel0":
                z = z - EULER_GAMMA
            elif kind == "gumbel_var3":
                z = GUMBEL_VAR3_SCALE * (z - EULER_GAMMA)
    if work != dtype:
        big = torch.finfo(dtype).max
        z = z.clamp(-big, big).to(dtype)
    return z


def noise_score(z: torch.Tensor, kind: str) -> torch.Tensor:
    """``∇ν(z)`` for the noise density ``μ(z) ∝ exp(-ν(z))`` of ``kind`` (element-wise): the score used by the
    perturbed-optimizer Jacobian estimator of Berthet et al. (2020), ``J = E[y*(θ + σZ) ∇ν(Z)ᵀ] / σ``.

    normal ``z``; gumbel ``1 - exp(-z)``; gumbel0 the same at ``z + γ_E``; gumbel_var3 ``(1 - exp(-g)) / β`` at
    ``g = z / β + γ_E``; logistic ``tanh(z / 2)``; cauchy ``2z / (1 + z²)``.
    """
    check_noise_kind(kind, "noise")
    if kind == "normal":
        return z
    if kind == "logistic":
        return torch.tanh(0.5 * z)
    if kind == "cauchy":
        return 2.0 * z / (1.0 + z * z)
    if kind == "gumbel":
        return -torch.expm1(-z)
    if kind == "gumbel0":
        return -torch.expm1(-(z + EULER_GAMMA))
    return -torch.expm1(-(z / GUMBEL_VAR3_SCALE + EULER_GAMMA)) / GUMBEL_VAR3_SCALE
