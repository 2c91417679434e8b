"""Noise samplers (docs/math/training.md §6.2): moments of every kind, no infinities at the clamped extremes, generator
determinism, the score functions used by the perturbed optimizer, and argument errors."""

from __future__ import annotations

import math

import pytest
import torch
from relaxops.training import NOISE_KINDS, sample_noise
from relaxops.training.noise import EULER_GAMMA, noise_score

# (mean, variance) of each kind with a finite variance
MOMENTS = {
    "gumbel": (EULER_GAMMA, math.pi**2 / 6),
    "gumbel0": (0.0, math.pi**2 / 6),
    "gumbel_var3": (0.0, 3.0),
    "logistic": (0.0, math.pi**2 / 3),
    "normal": (0.0, 1.0),
}
N = 400_000


@pytest.mark.parametrize("kind", sorted(MOMENTS))
def test_moments(kind):
    z = sample_noise((N,), kind, torch.Generator().manual_seed(3), dtype=torch.float64)
    mean, var = MOMENTS[kind]
    # the sample mean has standard error sqrt(var / N); the sample variance sqrt((m4 - var^2) / N) with the
    # fourth central moment m4 estimated from the same samples; 5 standard errors with a fixed seed
    assert abs(z.mean().item() - mean) < 5 * math.sqrt(var / N)
    m4 = ((z - z.mean()) ** 4).mean().item()
    assert abs(z.var().item() - var) < 5 * math.sqrt((m4 - var**2) / N)


def test_cauchy_quartiles():
    z = sample_noise((N,), "cauchy", torch.Generator().manual_seed(4), dtype=torch.float64)
    # standard Cauchy: quartiles -1, 0, 1; the empirical q-quantile has standard error sqrt(q(1-q)/N) / f(x_q)
    # with density f(+-1) = 1/(2 pi), f(0) = 1/pi
    q = torch.quantile(z[:100_000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    se = [math.sqrt(0.1875 / 1e5) * 2 * math.pi, math.sqrt(0.25 / 1e5) * math.pi, math.sqrt(0.1875 / 1e5) * 2 * math.pi]
    for got, want, s in zip(q.tolist(), [-1.0, 0.0, 1.0], se):
        assert abs(got - want) < 5 * s


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("kind", NOISE_KINDS)
def test_extreme_uniforms_give_finite_noise(monkeypatch, kind, dtype):
    real_rand = torch.rand

    def extremes(shape, generator=None, dtype=None, device=None):  # exactly 0, exactly 1, just below 1, tiny
        u = real_rand(shape, generator=generator, dtype=dtype, device=device)
        u[:4] = torch.tensor([0.0, 1.0, 1.0 - torch.finfo(dtype).eps / 4, 1e-300], dtype=torch.float64).to(dtype)
        return u

    monkeypatch.setattr(torch, "rand", extremes)
    z = sample_noise((8,), kind, torch.Generator().manual_seed(0), dtype=dtype)
    assert z.dtype == dtype and z.shape == (8,)
    assert torch.isfinite(z).all(), (kind, z)
    if kind != "normal":  # normal noise does not use uniforms; for the others the clamped 0 gives the smallest
        assert z[0] == z.min() and z[1] == z.max()


def test_generator_determinism_and_shapes():
    a = sample_noise((2, 3, 4), "gumbel", torch.Generator().manual_seed(7))
    b = sample_noise(torch.Size([2, 3, 4]), "gumbel", torch.Generator().manual_seed(7))
    c = sample_noise((2, 3, 4), "gumbel", torch.Generator().manual_seed(8))
    assert a.shape == (2, 3, 4) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sample_noise((0, 3), "normal").shape == (0, 3)


def test_gumbel_variants_are_affine_maps_of_one_draw():
    g = sample_noise((1000,), "gumbel", torch.Generator().manual_seed(1), dtype=torch.float64)
    g0 = sample_noise((1000,), "gumbel0", torch.Generator().manual_seed(1), dtype=torch.float64)
    g3 = sample_noise((1000,), "gumbel_var3", torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(g0, g - EULER_GAMMA)
    torch.testing.assert_close(g3, math.sqrt(18) / math.pi * (g - EULER_GAMMA))


@pytest.mark.parametrize("kind", NOISE_KINDS)
def test_noise_score_is_minus_log_density_derivative(kind):
    # the score must be d/dz of -log density; check it against autograd of each density's -log formula
    z = torch.linspace(-3, 3, 13, dtype=torch.float64, requires_grad=True)
    beta = math.sqrt(18) / math.pi
    nu = {
        "normal": z**2 / 2,
        "gumbel": z + torch.exp(-z),
        "gumbel0": (z + EULER_GAMMA) + torch.exp(-(z + EULER_GAMMA)),
        "gumbel_var3": (z / beta + EULER_GAMMA) + torch.exp(-(z / beta + EULER_GAMMA)),
        "logistic": z + 2 * torch.log1p(torch.exp(-z)),
        "cauchy": torch.log1p(z**2),
    }[kind]
    (grad,) = torch.autograd.grad(nu.sum(), z)
    torch.testing.assert_close(noise_score(z.detach(), kind), grad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        sample_noise((3,), "laplace")
    with pytest.raises(ValueError, match="shape must be"):
        sample_noise((3, -1), "normal")
    with pytest.raises(TypeError, match="shape must be"):
        sample_noise("3", "normal")
    with pytest.raises(TypeError, match="dtype must be"):
        sample_noise((3,), "normal", dtype=torch.int64)
    with pytest.raises(TypeError, match="generator must be"):
        sample_noise((3,), "normal", generator=0)
