"""Splitting backpropagation (docs/math/training.md §1.3/§1.4, §7)."""

from __future__ import annotations

import pytest
import torch
from relaxops.training import split_loss
from torch import nn


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 7), nn.Tanh(), nn.Linear(7, 3)).double()


def smooth_batch_loss(Y):
    """A smooth loss that couples the rows of the batch (it need not decompose over samples)."""
    return (Y.sin() * Y.roll(1, 0)).sum() + 0.3 * Y.square().sum() ** 1.5 / Y.shape[0]


@pytest.mark.parametrize("eta", [0.05, 0.3])
def test_gradient_step_split_equals_one_sgd_step_on_the_loss(eta):
    """(a) a unit gradient step in output space, (b) SGD(eta) on 1/2||z* - f||^2 (sum) == SGD(eta) on l."""
    X = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    direct, split = mlp(), mlp()
    opt = torch.optim.SGD(direct.parameters(), lr=eta)
    opt.zero_grad()
    smooth_batch_loss(direct(X)).backward()
    opt.step()

    def unit_gradient_step(Y):
        Y = Y.clone().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(smooth_batch_loss(Y), Y)
        return Y.detach() - g

    opt = torch.optim.SGD(split.parameters(), lr=eta)
    opt.zero_grad()
    split_loss(split(X), unit_gradient_step, reduction="sum").backward()
    opt.step()
    for a, b in zip(direct.parameters(), split.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    # the step did something: a split with the wrong sign would not match
    assert not torch.allclose(mlp()[0].weight, split[0].weight)


@pytest.mark.parametrize("reduction, scale", [("mean", 1 / 5), ("sum", 1.0)])
def test_split_loss_gradient_and_constant_target(reduction, scale):
    """d/dy = (y - z*) / N for 'mean' (no 1/N for 'sum'); z* has no grad_fn, the inner step runs without grad."""
    y = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    seen = {}

    def inner(y0):
        seen["grad_enabled"] = torch.is_grad_enabled()
        seen["requires_grad"] = y0.requires_grad
        z = y0 * 2 + 1
        seen["z"] = z
        return z

    loss = split_loss(y, inner, reduction)
    (grad,) = torch.autograd.grad(loss, y)
    z = seen["z"]
    assert z.grad_fn is None and not seen["grad_enabled"] and not seen["requires_grad"]
    torch.testing.assert_close(grad, (y.detach() - z) * scale)
    torch.testing.assert_close(loss, 0.5 * ((z - y.detach()) ** 2).sum() * scale)


def test_split_loss_none_and_trailing_dims():
    y = torch.randn(4, 2, 3, requires_grad=True)
    r = split_loss(y, lambda y0: torch.zeros_like(y0), "none")
    assert r.shape == (4,)
    torch.testing.assert_close(r, 0.5 * y.detach().square().sum((1, 2)))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda y: split_loss(y, lambda t: t, "avg"), ValueError, "reduction"),
        (lambda y: split_loss(y, 3), TypeError, "inner_step"),
        (lambda y: split_loss(y, lambda t: t[:1]), ValueError, "inner_step must return"),
        (lambda y: split_loss(y.long(), lambda t: t), TypeError, "y must be"),
        (lambda y: split_loss([1.0], lambda t: t), TypeError, "y must be"),
    ],
)
def test_split_loss_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call(torch.randn(3, 2))


def test_split_loss_needs_a_sample():
    with pytest.raises(ValueError, match="at least one sample"):
        split_loss(torch.zeros(0, 3), lambda t: t)
    assert split_loss(torch.ones(3), lambda t: t * 0).item() == pytest.approx(0.5)  # [N]: one output per sample
