"""GenDR's occlusion distributions and T-conorms (docs/math/render.md §2.4 and §3), in PyTorch.

A face covers a pixel with probability ``D = F(u)``, ``u = s x / tau`` where ``s`` is +1 strictly inside the
face and -1 otherwise and ``x`` is the distance to the face boundary (its square in squared mode). ``F`` is one
of 18 CDFs; :func:`occlusion` returns ``F(u)`` and ``phi = f(u) / tau``, the derivative of ``D`` w.r.t. the
signed input ``s x``, with the branches, guards and gamma series of the original ``gendr`` kernel (normative).
The pixel's alpha folds the faces' ``D`` with a T-conorm, left to right from 0 (:func:`t_conorm`,
:func:`fold_step`, :func:`fold`); :func:`fold_grad` is ``dA / dD_f = g'(D_f) / g'(A)`` for the Archimedean
members (generator ``g``), with the kernel's clamps. ``average`` (docs/math/render.md §3.4) is SoftRas' mean of
the faces' ``D``, the thesis' baseline next to the T-conorms; it is no T-conorm and its fold step needs the face
count. Names and integer ids 0-9 are those of the original package (``heaviside`` and ``hyperbolic_secant`` are
aliases), ``average`` is id 10. Written for float64 correctness: the reference backend and the test oracle.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

DISTRIBUTIONS = (
    "hard", "uniform", "cubic_hermite", "wigner_semicircle", "gaussian", "laplace", "logistic", "gudermannian",
    "cauchy", "reciprocal", "gumbel_max", "gumbel_min", "exponential", "exponential_rev", "gamma", "gamma_rev",
    "levy", "levy_rev",
)  # fmt: skip
DISTRIBUTION_IDS = {name: i for i, name in enumerate(DISTRIBUTIONS)} | {"heaviside": 0, "hyperbolic_secant": 7}
SYMMETRIC_DISTRIBUTIONS = (
    "uniform",
    "cubic_hermite",
    "wigner_semicircle",
    "gaussian",
    "laplace",
    "logistic",
    "gudermannian",
    "cauchy",
    "reciprocal",
)
SHIFTED_DISTRIBUTIONS = DISTRIBUTIONS[12:]  # the only ones that read dist_shift

T_CONORMS = (
    "hard",
    "max",
    "probabilistic",
    "einstein",
    "hamacher",
    "frank",
    "yager",
    "aczel_alsina",
    "dombi",
    "schweizer_sklar",
    "average",  # not a T-conorm: the mean of the faces' D (docs/math/render.md §3.4)
)
T_CONORM_IDS = {name: i for i, name in enumerate(T_CONORMS)}
PARAMETRIC_T_CONORMS = T_CONORMS[4:10]  # the only ones that read aggr_alpha_t_conorm_p
# The dual T-norms T(a, b) = 1 - S(1 - a, 1 - b) of the T-conorms S (docs/math/render.md §3.5), under the T-conorm's
# name except min (the dual of max). hard and average have none: they are not T-conorms.
T_NORMS = ("min", "probabilistic", "einstein", "hamacher", "frank", "yager", "aczel_alsina", "dombi", "schweizer_sklar")
T_NORM_DUALS = {name: "max" if name == "min" else name for name in T_NORMS}  # T-norm name -> its T-conorm
# the parameter range of every parametric T-conorm, shared by its dual T-norm
PARAMETER_RANGES = {
    "hamacher": ">= 0",
    "frank": "> 0 and != 1",
    "yager": "> 0",
    "aczel_alsina": "> 0",
    "dombi": "> 0",
    "schweizer_sklar": "< 0",
}

GAMMA_STEPS = 32  # terms of the series of the regularized lower incomplete gamma function P(k, z)
GAMMA_THRESHOLD = 15.0  # P(k, z) is taken as exactly 1 beyond
LEVY_GUARD = 1e-6  # absolute, in (squared) distance units
CLAMP = 1e-6  # denominators of the T-conorm gradients
SATURATION = 1e-8  # aczel_alsina and dombi return exactly 1 when either complement is below this


# dist_scale and aggr_rgb_gamma: the gradients grow like 1 / tau and 1 / gamma (times up to 1e6 from the clamps of
# docs/math/render.md §5.2); below this they overflow float32
MIN_SCALE = 1e-12


def _finite(v: float) -> bool:
    return -math.inf < v < math.inf  # not math.isfinite: torch.compile(dynamic=True) traces comparisons only


MAX_OPTION = 1e30  # every float option, so that the float32 kernels see it finite (2 aggr_rgb_eps included)


def real(value, name: str) -> float:
    """A real number argument (not a bool or a string) with ``|value| <= 1e30`` as a float; TypeError or
    ValueError naming the argument otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    if not abs(value) <= MAX_OPTION:
        raise ValueError(f"{name} must be finite with |{name}| <= {MAX_OPTION}, got {value!r}")
    return float(value)


def _flag(value, name: str) -> bool:
    if not (isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1))):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _image_size(image_size) -> tuple[int, int]:
    if isinstance(image_size, numbers.Integral) and not isinstance(image_size, bool):
        size = (image_size, image_size)
    elif isinstance(image_size, (tuple, list, torch.Size)):
        size = tuple(image_size)
    else:
        size = None
    if (
        size is None
        or len(size) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in size)
    ):
        raise TypeError(f"image_size must be an int or a pair (H, W) of ints, got {image_size!r}")
    if min(size) < 1:
        raise ValueError(f"image_size must be >= 1 (an int or a pair (H, W) of them), got {image_size!r}")
    return int(size[0]), int(size[1])


def _name(value, names: tuple, ids: dict, what: str) -> str:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[int(value)]
    if isinstance(value, str) and value in ids:
        return names[ids[value]]
    raise ValueError(f"{what} must be one of {sorted(ids)} or an id in [0, {len(names)}), got {value!r}")


def distribution_name(dist_func) -> str:
    """The canonical name of a distribution given by name, alias or integer id."""
    return _name(dist_func, DISTRIBUTIONS, DISTRIBUTION_IDS, "dist_func")


def t_conorm_name(aggr_alpha_func) -> str:
    """The canonical name of a T-conorm (or ``average``) given by name or integer id."""
    return _name(aggr_alpha_func, T_CONORMS, T_CONORM_IDS, "aggr_alpha_func")


def check_distribution(dist_func, dist_scale, dist_shape=None, dist_shift=None):
    """Validated ``(name, tau, shape, shift)``; ``None`` parameters become 0."""
    name = distribution_name(dist_func)
    tau = real(dist_scale, "dist_scale")
    if not _finite(tau) or tau < 0 or (tau == 0 and name != "hard") or 0 < tau < MIN_SCALE:
        raise ValueError(f"dist_scale must be finite and >= {MIN_SCALE} (or 0 for 'hard'), got {dist_scale!r}")
    shape = 0.0 if dist_shape is None else real(dist_shape, "dist_shape")
    shift = 0.0 if dist_shift is None else real(dist_shift, "dist_shift")
    if not (_finite(shape) and _finite(shift)):
        raise ValueError(f"dist_shape and dist_shift must be finite, got {dist_shape!r} and {dist_shift!r}")
    if name in ("gamma", "gamma_rev") and shape <= 0:
        raise ValueError(f"dist_shape (the gamma shape k) must be > 0 for {name!r}, got {dist_shape!r}")
    return name, tau, shape, shift


def _parameter(name: str, p, what: str) -> float:
    """The family parameter ``p`` as a float (``None`` becomes 0), ValueError naming ``what`` if outside the range
    of ``name`` (:data:`PARAMETER_RANGES`; the other names ignore it)."""
    lam = 0.0 if p is None else real(p, what)
    if not _finite(lam):
        raise ValueError(f"{what} must be finite, got {p!r}")
    valid = {
        "hamacher": lam >= 0,
        "frank": lam > 0 and lam != 1,
        "yager": lam > 0,
        "aczel_alsina": lam > 0,
        "dombi": lam > 0,
        "schweizer_sklar": lam < 0,
    }.get(name, True)
    if not valid:
        raise ValueError(f"{what} must be {PARAMETER_RANGES[name]} for {name!r}, got {p!r}")
    return lam


def check_t_conorm(aggr_alpha_func, p=None):
    """Validated ``(name, p)``; ``None`` becomes 0, and parameters outside the family's range raise."""
    name = t_conorm_name(aggr_alpha_func)
    return name, _parameter(name, p, "aggr_alpha_t_conorm_p")


def _gamma_p(k: float, z: torch.Tensor) -> torch.Tensor:
    """The kernel's P(k, z) for 0 < z <= 15: z^k e^-z sum_{i < 32} z^i / Gamma(k + i + 1)."""
    term = torch.full_like(z, 1.0 / math.gamma(k + 1))
    total = term.clone()
    for i in range(1, GAMMA_STEPS):
        term = term * z / (k + i)
        total = total + term
    return z.pow(k) * torch.exp(-z) * total


def _gamma_density(k: float, z: torch.Tensor) -> torch.Tensor:
    """z^(k-1) e^-z / Gamma(k) for z > 0 (0 elsewhere)."""
    zp = torch.where(z > 0, z, torch.ones_like(z))
    return torch.where(z > 0, torch.exp((k - 1) * torch.log(zp) - zp - math.lgamma(k)), torch.zeros_like(z))


def _levy_cdf_density(z: torch.Tensor, valid: torch.Tensor):
    """erfc(sqrt(1 / (2 z))) and z^(-3/2) e^(-1/(2z)) / sqrt(2 pi) where valid (z > 0), else 0."""
    zp = torch.where(valid, z, torch.ones_like(z))
    cdf = torch.special.erfc(torch.sqrt(0.5 / zp))
    dens = zp.pow(-1.5) * torch.exp(-0.5 / zp) / math.sqrt(2 * math.pi)
    zero = torch.zeros_like(z)
    return torch.where(valid, cdf, zero), torch.where(valid, dens, zero)


def occlusion(sx: torch.Tensor, tau: float, dist_func, dist_shape: float = 0.0, dist_shift: float = 0.0):
    """``(F(u), f(u) / tau)`` with ``u = sx / tau`` for the signed input ``sx`` (``d``, or ``s r^2`` in squared
    mode) of pixels outside their face's hard-coverage test; ``hard`` has no distance form (its coverage is the
    closed inside test of the renderer) and is rejected here."""
    name = distribution_name(dist_func)
    if name == "hard":
        raise ValueError("dist_func 'hard' is a closed inside test, not a function of the distance")
    u = sx / tau
    au = u.abs()
    one, zero = torch.ones_like(u), torch.zeros_like(u)
    k, sh = dist_shape, dist_shift
    if name == "uniform":
        F = torch.where(u < -1, zero, torch.where(u < 1, (u + 1) / 2, one))
        f = torch.where(au < 1, 0.5 * one, zero)
    elif name == "cubic_hermite":
        y = (u + 1) / 2
        F = torch.where(u < -1, zero, torch.where(u < 1, 3 * y * y - 2 * y**3, one))
        f = torch.where(au <= 1, 0.75 * (1 - u * u), zero)
    elif name == "wigner_semicircle":
        uc = u.clamp(-1, 1)
        F = torch.where(
            u < -1, zero, torch.where(u < 1, 0.5 + (uc * torch.sqrt(1 - uc * uc) + torch.asin(uc)) / math.pi, one)
        )
        f = torch.where(au <= 1, (2 / math.pi) * torch.sqrt((1 - uc * uc).clamp_min(0)), zero)
    elif name == "gaussian":
        F = 0.5 * torch.special.erfc(-u / math.sqrt(2))
        f = torch.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)
    elif name == "laplace":
        e = torch.exp(-au) / 2
        F = torch.where(u < 0, e, 1 - e)
        f = e
    elif name == "logistic":
        F = torch.sigmoid(u)
        f = F * (1 - F)
    elif name == "gudermannian":
        F = torch.atan(torch.tanh(u / 2)) * (2 / math.pi) + 0.5
        f = 1 / (torch.cosh(u) * math.pi)
    elif name == "cauchy":
        F = 0.5 + torch.atan(u) / math.pi
        f = 1 / (math.pi * (1 + u * u))
    elif name == "reciprocal":
        F = 0.5 + u / (2 * (1 + au))
        f = 1 / (2 * (1 + au) ** 2)
    elif name == "gumbel_max":
        F = torch.exp(-torch.exp(-u))
        f = torch.exp(-(u + torch.exp(-u)))
    elif name == "gumbel_min":
        F = -torch.expm1(-torch.exp(u))
        f = torch.exp(u - torch.exp(u))
    elif name == "exponential":
        z = u + sh
        F = torch.where(z < 0, zero, -torch.expm1(-z.clamp_min(0)))
        f = torch.where(z < 0, zero, torch.exp(-z.clamp_min(0)))
    elif name == "exponential_rev":
        z = u - sh
        F = torch.where(z > 0, one, torch.exp(z.clamp_max(0)))
        f = torch.where(z > 0, zero, torch.exp(z.clamp_max(0)))
    elif name == "gamma":
        z = u + sh
        zc = z.clamp(0, GAMMA_THRESHOLD)
        F = torch.where(z <= 0, zero, torch.where(z > GAMMA_THRESHOLD, one, _gamma_p(k, zc)))
        f = _gamma_density(k, z)
    elif name == "gamma_rev":
        z = sh - u
        zc = z.clamp(0, GAMMA_THRESHOLD)
        F = torch.where(u >= sh, one, torch.where(z > GAMMA_THRESHOLD, zero, 1 - _gamma_p(k, zc)))
        f = torch.where(u < sh, _gamma_density(k, z), zero)
    elif name == "levy":
        z = u + sh
        F, f = _levy_cdf_density(z, z * tau > LEVY_GUARD)
    else:  # levy_rev
        z = sh - u
        cdf, f = _levy_cdf_density(z, -z * tau < -LEVY_GUARD)
        F = torch.where(-z * tau >= -LEVY_GUARD, one, 1 - cdf)
    return F, f / tau


def _frank_t_norm(a: torch.Tensor, b: torch.Tensor, L: float) -> torch.Tensor:
    """Frank's T-norm ``log_lam(1 + (lam^a - 1)(lam^b - 1) / (lam - 1))`` from ``L = ln(lam)`` (docs/math/render.md
    §3.5), finite for every ``lam > 0, != 1`` and relatively accurate (the kernels' ``frank_t_norm``)."""
    if L > -1:
        # the ratio (lam^b - 1) / (lam - 1) in [0, 1]: no power overflows
        return torch.log1p(torch.expm1(a * L) * (torch.expm1(b * L) / math.expm1(L))) / L
    # lam < 1/e: 1 + ... cancels as lam -> 0; with u = -ln(lam), m = min(a, b), M = max(a, b) the same value is
    # m - log1p(r) / u, r = (1 - e^(-m u)) (1 - e^(-(1-M) u)) e^(-(M-m) u) / (1 - e^-u) in [0, 1.6): a product, so
    # T(a, 0) = 0 and T(a, 1) = a exactly
    u = -L
    m, M = torch.minimum(a, b), torch.maximum(a, b)
    r = torch.expm1(-m * u) * torch.expm1(-(1 - M) * u) * torch.exp(-(M - m) * u) / -math.expm1(-u)
    return m - torch.log1p(r) / u


def t_conorm(a: torch.Tensor, b: torch.Tensor, aggr_alpha_func, p: float = 0.0) -> torch.Tensor:
    """``a ⊥ b`` as the kernel computes it (through the dual T-norm of ``1 - a``, ``1 - b`` where it does).
    ``hard`` is not a T-conorm: ``1`` where ``b > 0.5``, else ``a`` (the kernel's union of the D > 0.5 regions).
    ``average`` has no binary form (its step needs the face count): ValueError, see :func:`fold_step`."""
    name = t_conorm_name(aggr_alpha_func)
    lam = p
    ac, bc = 1 - a, 1 - b
    if name == "average":
        raise ValueError("aggr_alpha_func 'average' is not a T-conorm (no binary form): fold_step takes the face count")
    if name == "hard":
        return torch.where(b > 0.5, torch.ones_like(a), a)
    if name == "max":
        return torch.maximum(a, b)
    if name == "probabilistic":
        return a + b - a * b
    if name == "einstein":
        return (a + b) / (1 + a * b)
    if name == "hamacher":
        return 1 - ac * bc / torch.clamp(lam + (1 - lam) * (ac + bc - ac * bc), min=CLAMP)
    if name == "frank":
        # S(a, b) + T(a, b) = a + b (Frank's functional equation): a + b - T(a, b) has no cancellation (T <= min(a,
        # b)); where a + b >= 1 the dual 1 - T(1 - a, 1 - b) keeps S <= 1 and S(a, 1) = 1 exactly
        L, s = math.log(lam), a + b
        return torch.where(s < 1, s - _frank_t_norm(a, b, L), 1 - _frank_t_norm(ac, bc, L))
    if name == "yager":
        return 1 - torch.clamp(1 - (a**lam + b**lam) ** (1 / lam), min=0)
    sat = (ac < SATURATION) | (bc < SATURATION)
    acs, bcs = torch.where(sat, torch.full_like(ac, 0.5), ac), torch.where(sat, torch.full_like(bc, 0.5), bc)
    if name == "aczel_alsina":
        t = torch.exp(-(((-torch.log(acs)) ** lam + (-torch.log(bcs)) ** lam) ** (1 / lam)))
    elif name == "dombi":
        t = 1 / (1 + (((1 - acs) / acs) ** lam + ((1 - bcs) / bcs) ** lam) ** (1 / lam))
    else:  # schweizer_sklar
        return 1 - (ac**lam + bc**lam - 1) ** (1 / lam)
    return torch.where(sat, torch.ones_like(a), 1 - t)


def _face_count(faces, name: str) -> int:
    if isinstance(faces, bool) or not isinstance(faces, numbers.Integral) or faces < 1:
        raise ValueError(f"faces (the mesh's face count) must be an int >= 1 for {name!r}, got {faces!r}")
    return int(faces)


def fold_step(A: torch.Tensor, D: torch.Tensor, aggr_alpha_func, p: float = 0.0, faces=None) -> torch.Tensor:
    """One step of the alpha fold: ``A ⊥ D`` for a T-conorm; ``A + D / faces`` for ``average``, whose fold over the
    surviving faces is their summed ``D`` over the mesh's face count ``faces`` (culled faces count 0)."""
    name = t_conorm_name(aggr_alpha_func)
    if name == "average":
        return A + D / _face_count(faces, name)
    return t_conorm(A, D, name, p)


def fold(D: torch.Tensor, aggr_alpha_func, p: float = 0.0) -> torch.Tensor:
    """The pixel alpha ``A = (((0 ⊥ D_0) ⊥ D_1) ⊥ ...)`` over the last dimension (faces in ascending index);
    ``average``: the mean over that dimension, accumulated as the kernels do."""
    A = torch.zeros_like(D[..., 0])
    for i in range(D.shape[-1]):
        A = fold_step(A, D[..., i], aggr_alpha_func, p, D.shape[-1])
    return A


def check_t_norm(name, p=None, arg: str = "name", p_arg: str = "p"):
    """Validated ``(name, p)`` of a T-norm of :data:`T_NORMS` (no integer ids) and its parameter, in the range of
    the T-conorm of the same family (``None`` becomes 0); the errors name the arguments ``arg`` and ``p_arg``."""
    if not (isinstance(name, str) and name in T_NORMS):
        hint = " ('hard' and 'average' are no T-conorms and have no dual T-norm)" if name in ("hard", "average") else ""
        raise ValueError(f"{arg} must be one of {list(T_NORMS)}{hint}, got {name!r}")
    return name, _parameter(name, p, p_arg)


def _norm(x: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """``(x^lam + y^lam)^(1/lam)`` for ``x, y`` in ``[0, inf]``, ``lam > 0``, as ``m (1 + (s/m)^lam)^(1/lam)`` with
    ``m`` the larger and ``s`` the smaller of the two, so that neither power overflows; 0 where both are 0."""
    m, s = torch.maximum(x, y), torch.minimum(x, y)
    pos = m > 0
    ms = torch.where(pos, m, torch.ones_like(m))
    r = torch.where(s < m, s / ms, torch.ones_like(m))  # s / m, also 1 for s = m = inf
    return torch.where(pos, ms * (1 + r**lam) ** (1 / lam), torch.zeros_like(m))


def t_norm(a: torch.Tensor, b: torch.Tensor, name="probabilistic", p=None) -> torch.Tensor:
    """The T-norm ``a ⊤ b = 1 - ((1 - a) ⊥ (1 - b))``, dual of the T-conorm of the same name (``min``: of ``max``),
    in each family's closed form (docs/math/render.md §3.5) for ``a, b`` in ``[0, 1]``.

    ``p`` is the family parameter with the ranges of :func:`check_t_conorm` (``None``: 0; ValueError naming ``p``
    outside them). The forms are exact at the boundary (``a ⊤ 1 = a``, ``a ⊤ 0 = 0``) and cannot overflow: Frank
    through ``expm1`` (and a second form for ``p < 1/e``), the power sums of Yager, Aczél-Alsina and Dombi through
    ``_norm``, Schweizer-Sklar factored by the smaller argument ``m`` of the larger ``M`` as
    ``m (1 + (M/m)^p - m^(-p))^(1/p)``. Where the forms are 0/0 or infinite (Hamacher 0 at ``a = b = 0``;
    Schweizer-Sklar, Aczél-Alsina and Dombi where ``a`` or ``b`` is 0) the value is the limit 0, with zero gradient.
    Unlike the T-conorms' (``SATURATION``, ``CLAMP``) there is no threshold. The gradients are finite inside
    ``(0, 1)^2``.
    """
    name, lam = check_t_norm(name, p)
    if name == "min":
        return torch.minimum(a, b)
    if name == "probabilistic":
        return a * b
    if name == "einstein":
        return a * b / (1 + (1 - a) * (1 - b))
    zero = torch.zeros_like(a * b)
    if name == "hamacher":
        den = lam + (1 - lam) * (a + b - a * b)  # >= min(lam, 1) > 0 unless lam = 0 and a = b = 0
        pos = den > 0
        return torch.where(pos, a * b / torch.where(pos, den, torch.ones_like(den)), zero)
    if name == "frank":
        return _frank_t_norm(a, b, math.log(lam))
    if name == "yager":
        return torch.clamp(1 - _norm(1 - a, 1 - b, lam), min=0)
    if name == "schweizer_sklar":
        m, M = torch.minimum(a, b), torch.maximum(a, b)
        pos = m > 0
        ms = torch.where(pos, m, torch.ones_like(m))
        return torch.where(pos, ms * (1 + (M / ms) ** lam - ms ** (-lam)) ** (1 / lam), zero)
    pos = (a > 0) & (b > 0)  # the generators are infinite at 0
    a_s, b_s = torch.where(pos, a, torch.ones_like(a)), torch.where(pos, b, torch.ones_like(b))
    if name == "aczel_alsina":
        t = torch.exp(-_norm(-torch.log(a_s), -torch.log(b_s), lam))
    else:  # dombi
        t = 1 / (1 + _norm((1 - a_s) / a_s, (1 - b_s) / b_s, lam))
    return torch.where(pos, t, zero)


def t_norm_fold(x: torch.Tensor, name="probabilistic", p=None) -> torch.Tensor:
    """``((1 ⊤ x_0) ⊤ x_1) ⊤ ...`` over the last dimension (1 for an empty one), see :func:`t_norm`."""
    out = x.new_ones(x.shape[:-1])
    for i in range(x.shape[-1]):
        out = t_norm(out, x[..., i], name, p)
    return out


def _ratio(d: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``d / a`` where ``a > d``, else 1."""
    return torch.where(a > d, d / torch.where(a > d, a, torch.ones_like(a)), torch.ones_like(d))


def fold_grad(A: torch.Tensor, D: torch.Tensor, aggr_alpha_func, p: float = 0.0, faces=None) -> torch.Tensor:
    """``dA / dD_f`` from the final alpha ``A`` (broadcast against ``D``) and each face's ``D_f``, with the
    kernel's clamps (docs/math/render.md §3.2). ``hard`` passes 1 (the kernel's straight-through surrogate); ``max``
    gives 1 to every face equal to ``A``; ``yager`` gives 0 once saturated (``A == 1``); ``average`` gives
    ``1 / faces`` to every face (``faces``: the mesh's face count, required for it)."""
    name = t_conorm_name(aggr_alpha_func)
    lam = p
    one = torch.ones_like(D)
    if name == "average":
        return torch.full_like(D, 1 / _face_count(faces, name))
    if name == "hard":
        return one
    if name == "max":
        return (D == A).to(D.dtype)
    if name == "probabilistic":
        return (1 - A) / torch.clamp(1 - D, min=CLAMP)
    if name == "einstein":
        return (1 - A * A) / torch.clamp(1 - D * D, min=CLAMP)
    if name == "hamacher":
        return (1 - A) * (1 + (lam - 1) * A) / torch.clamp((1 - D) * (1 + (lam - 1) * D), min=CLAMP)
    if name == "frank":
        # lam^(A-D) (lam^(1-A) - 1) / (q + copysign(CLAMP, q)), q = lam^(1-D) - 1, through L = ln(lam): for L > 0
        # numerator and denominator times lam^(D-1), for L < 0 both negated, so that no power overflows
        L = math.log(lam)
        if L > 0:
            return -torch.expm1(-(1 - A) * L) / (CLAMP * torch.exp(-(1 - D) * L) - torch.expm1(-(1 - D) * L))
        return -torch.exp((A - D) * L) * torch.expm1((1 - A) * L) / (CLAMP - torch.expm1((1 - D) * L))
    # yager, aczel_alsina, dombi: g(D)^(lam-1) g(A)^(1-lam) as one power of the ratio g(D) / g(A) <= 1 (A >= D; 1
    # where rounding breaks that), as the kernels: the two factors alone under- and overflow for a large lam
    if name == "yager":
        g = torch.where(D > 0, _ratio(D, A) ** (lam - 1), torch.zeros_like(D))  # D = 0 contributes nothing
        return torch.where(A == 1, torch.zeros_like(D), g)
    if name == "aczel_alsina":
        gd = -torch.log1p(torch.clamp(-D, min=-1 + CLAMP))
        ga = -torch.log1p(torch.clamp(-A, min=-1 + CLAMP))
        return (1 - A) * _ratio(gd, ga) ** (lam - 1) / torch.clamp(1 - D, min=CLAMP)
    if name == "dombi":
        cd, ca = torch.clamp(1 - D, min=CLAMP), torch.clamp(1 - A, min=CLAMP)
        return (1 - A) ** 2 * _ratio(D / cd, A / ca) ** (lam - 1) / cd**2
    # schweizer_sklar
    return (torch.clamp(1 - D, min=CLAMP) / torch.clamp(1 - A, min=CLAMP)) ** (lam - 1)


# The cut u_c of docs/math/render.md §2.4 (shift 0): F(-u) <= 1e-6 for every u >= u_c, so a face farther than the
# matching distance is dropped by the probability cull anyway. inf: heavy tails, only dist_eps culls them. Shifted
# families move their cut by the shift (non-reversed: u_c = s_h; reversed: u_c(0) - s_h).
CUT_POINTS = {
    "hard": 0.0, "uniform": 1.0, "cubic_hermite": 1.0, "wigner_semicircle": 1.0, "gaussian": 4.7535,
    "laplace": 13.1224, "logistic": 13.8156, "gudermannian": 13.364, "cauchy": math.inf, "reciprocal": math.inf,
    "gumbel_max": 2.6258, "gumbel_min": 13.832, "exponential": 0.0, "exponential_rev": 13.832, "gamma": 0.0,
    "gamma_rev": GAMMA_THRESHOLD, "levy": 0.0, "levy_rev": math.inf,
}  # fmt: skip
RGB_FUNCS = ("hard", "softmax")
TEXTURE_TYPES = ("surface", "vertex")


def _choice(value, names: tuple, what: str) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < len(names):
        return int(value)
    if isinstance(value, str) and value in names:
        return names.index(value)
    raise ValueError(f"{what} must be one of {list(names)} (or an id in [0, {len(names)})), got {value!r}")


@dataclass(frozen=True)
class RasterSettings:
    """Validated rasterizer options (docs/math/render.md §1.5), shared by every backend. ``dist``, ``alpha``, ``rgb``
    and ``texture`` are the integer ids the kernels switch on; ``reach`` is the distance (NDC) beyond which a face
    cannot touch a pixel, the radius the tiled kernels grow each face's bounding box by."""

    height: int
    width: int
    dist: int
    tau: float
    squared: bool
    shape: float
    shift: float
    eps: float
    alpha: int
    p: float
    rgb: int
    rgb_eps: float
    gamma: float
    near: float
    far: float
    double_side: bool
    texture: int
    background: tuple[float, float, float]

    @classmethod
    def from_options(
        cls,
        image_size=256,
        background_color=(0, 0, 0),
        dist_func="uniform",
        dist_scale=1e-2,
        dist_squared=False,
        dist_shape=None,
        dist_shift=None,
        dist_eps=1e4,
        aggr_alpha_func="probabilistic",
        aggr_alpha_t_conorm_p=None,
        aggr_rgb_func="softmax",
        aggr_rgb_eps=1e-3,
        aggr_rgb_gamma=1e-3,
        near=1,
        far=100,
        double_side=True,
        texture_type="surface",
    ):
        """Validated settings: TypeError for an argument of the wrong type, ValueError for one out of range, each
        naming the argument."""
        height, width = _image_size(image_size)
        dist, tau, shape, shift = check_distribution(dist_func, dist_scale, dist_shape, dist_shift)
        alpha, p = check_t_conorm(aggr_alpha_func, aggr_alpha_t_conorm_p)
        eps = real(dist_eps, "dist_eps")
        if not eps >= 1 or not _finite(eps):
            raise ValueError(f"dist_eps must be finite and >= 1, got {dist_eps!r}")
        rgb_eps = real(aggr_rgb_eps, "aggr_rgb_eps")
        gamma = real(aggr_rgb_gamma, "aggr_rgb_gamma")
        if not (_finite(gamma) and gamma >= MIN_SCALE):
            raise ValueError(f"aggr_rgb_gamma must be finite and >= {MIN_SCALE}, got {aggr_rgb_gamma!r}")
        near, far = real(near, "near"), real(far, "far")
        if not (0 < near < far):  # perspective-correct depth 1 / sum(w / z) is meaningless for z <= 0
            raise ValueError(f"near and far must satisfy 0 < near < far, got {near!r} and {far!r}")
        if isinstance(background_color, (str, bytes)) or not isinstance(background_color, (tuple, list, torch.Tensor)):
            raise TypeError(f"background_color must be 3 numbers (RGB), got {background_color!r}")
        bg = tuple(real(c.item() if isinstance(c, torch.Tensor) else c, "background_color") for c in background_color)
        if len(bg) != 3 or not all(_finite(c) for c in bg):
            raise ValueError(f"background_color must be 3 finite numbers, got {background_color!r}")
        return cls(
            height,
            width,
            DISTRIBUTION_IDS[dist],
            tau,
            _flag(dist_squared, "dist_squared"),
            shape,
            shift,
            eps,
            T_CONORM_IDS[alpha],
            p,
            _choice(aggr_rgb_func, RGB_FUNCS, "aggr_rgb_func"),
            rgb_eps,
            gamma,
            near,
            far,
            _flag(double_side, "double_side"),
            _choice(texture_type, TEXTURE_TYPES, "texture_type"),
            bg,
        )

    @property
    def reach(self) -> float:
        """``min(sqrt(dist_eps tau), r_F)`` with ``r_F`` the distance of the cut u_c (docs/math/render.md §5.4)."""
        name = DISTRIBUTIONS[self.dist]
        cut = CUT_POINTS[name]
        if name in SHIFTED_DISTRIBUTIONS:
            cut = max(0.0, cut - self.shift if name.endswith("_rev") else self.shift)
        cut = cut * 1.001 + 1e-3  # the table's cuts are rounded to 4-5 digits
        r_f = math.sqrt(self.tau * cut) if self.squared else self.tau * cut
        return min(math.sqrt(self.eps * self.tau), r_f)

    def to_lists(self) -> tuple[list[int], list[float]]:
        """The settings as the op's ``ints`` and ``floats`` (the kernels' order, csrc/bindings/binding_utils.h
        after the sizes B, F, H, W, T)."""
        ints = [self.dist, self.alpha, self.rgb, self.texture, int(self.squared), int(self.double_side)]
        floats = [
            self.tau,
            self.shape,
            self.shift,
            self.eps,
            self.p,
            self.rgb_eps,
            self.gamma,
            self.near,
            self.far,
            *self.background,
        ]
        return [self.height, self.width, *ints], floats

    @classmethod
    def from_lists(cls, ints: list[int], floats: list[float]) -> RasterSettings:
        """The inverse of :meth:`to_lists`, validated as :meth:`from_options` (ValueError/TypeError naming the
        option)."""
        if len(ints) != 8 or len(floats) != 12:
            raise ValueError(
                f"expected 8 ints (H, W, dist, alpha, rgb, texture, squared, double_side) and 12 floats "
                f"(tau, shape, shift, eps, p, rgb_eps, gamma, near, far, r, g, b), got {len(ints)} and "
                f"{len(floats)}"
            )
        H, W, dist, alpha, rgb, texture, squared, double_side = ints
        tau, shape, shift, eps, p, rgb_eps, gamma, near, far, *bg = floats
        return cls.from_options(
            (H, W),
            bg,
            dist,
            tau,
            squared,
            shape,
            shift,
            eps,
            alpha,
            p,
            rgb,
            rgb_eps,
            gamma,
            near,
            far,
            double_side,
            texture,
        )
