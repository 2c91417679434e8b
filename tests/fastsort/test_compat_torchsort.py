"""relaxops.compat.torchsort against torchsort 0.1.10: same values and gradients (float64, 1e-5 and much better),
same errors, and the weaknesses it fixes (float32 soft_sort at small strength, bfloat16, KL gradients at small
strength) where torchsort is installed; its results on integer tensors and its submodule ``ops`` (known values)
everywhere."""

import importlib

import pytest
import torch
from relaxops.compat import torchsort as ours
from testing import assert_mirrors, defined_names


@pytest.fixture
def torchsort():
    return pytest.importorskip("torchsort")


def value_and_grad(fn, x, *args):
    x = x.detach().requires_grad_(True)
    out = fn(x, *args)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
    (grad,) = torch.autograd.grad((out * g).sum(), x)
    return out.detach(), grad


@pytest.mark.parametrize("name", ["soft_rank", "soft_sort"])
@pytest.mark.parametrize("regularization", ["l2", "kl"])
@pytest.mark.parametrize("strength", [0.01, 0.1, 1.0, 10.0, 100.0])
def test_agrees_with_torchsort(torchsort, name, regularization, strength):
    """Both regularizations, several strengths, odd sizes, ties: outputs and gradients to 1e-5 (in fact ~1e-12).
    Torchsort's KL rank backward exponentiates x / eps unshifted: rows where it overflows are left out."""
    for n in (1, 2, 5, 33, 100):
        x = torch.randn(4, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) * 2
        x[0, : n // 2] = x[0, 0]  # ties
        theirs = value_and_grad(getattr(torchsort, name), x, regularization, strength)
        mine = value_and_grad(getattr(ours, name), x, regularization, strength)
        torch.testing.assert_close(mine[0], theirs[0], rtol=1e-5, atol=1e-5)
        # Which of the tied elements receives the gradient of a sorted position is the sort's choice (torchsort's
        # descending sort is not stable): compare the tie group's total and the other elements exactly.
        tie = torch.zeros_like(x, dtype=torch.bool)
        tie[0, : n // 2] = True
        for g in (mine[1], theirs[1]):
            g[0, 0] = g[tie].sum()
            g[tie & (torch.arange(n) > 0)] = 0
        ok = theirs[1].isfinite().all(-1)
        assert ok.any()
        torch.testing.assert_close(mine[1][ok], theirs[1][ok], rtol=1e-5, atol=1e-5 / min(1.0, strength))


def test_spec_examples_through_both(torchsort):
    x = torch.tensor([[8.0, 0, 5, 3, 2, 1, 6, 7, 9]], dtype=torch.float64)
    for mod in (ours, torchsort):
        torch.testing.assert_close(mod.soft_rank(x), torch.tensor([[8.0, 1, 5, 4, 3, 2, 6, 7, 9]], dtype=torch.float64))
        torch.testing.assert_close(
            mod.soft_sort(x, regularization_strength=0.1),
            torch.tensor([[0.0, 1, 2, 3, 5, 6, 7, 8, 9]], dtype=torch.float64),
        )


@pytest.mark.parametrize("name", ["soft_rank", "soft_sort"])
def test_same_errors(torchsort, name):
    for bad in (torch.randn(5), torch.randn(2, 3, 4)):
        for mod in (ours, torchsort):
            with pytest.raises(ValueError, match="'values' should be a 2d-tensor but got"):
                getattr(mod, name)(bad)
    for mod in (ours, torchsort):
        with pytest.raises(ValueError, match="'regularization' should be a 'l2' or 'kl'"):
            getattr(mod, name)(torch.randn(2, 3), regularization="l1")
    with pytest.raises(ValueError, match="regularization_strength must be a finite number > 0"):
        getattr(ours, name)(torch.randn(2, 3), regularization_strength=0.0)


def test_fixes_float32_soft_sort_precision(torchsort):
    """The issue's figure: torchsort's float32 soft_sort at n = 1000, eps = 1e-4 has a mean error ~0.1 against the
    float64 result; ours is float32-exact."""
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))
    exact = torchsort.soft_sort(x.double(), regularization_strength=1e-4)
    assert (torchsort.soft_sort(x, regularization_strength=1e-4).double() - exact).abs().mean() > 1e-2
    assert (ours.soft_sort(x, regularization_strength=1e-4).double() - exact).abs().max() <= 1e-6 * exact.abs().max()


def test_bfloat16_and_kl_gradients(torchsort):
    x = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    with pytest.raises(RuntimeError):
        torchsort.soft_rank(x.bfloat16())
    for fn in (ours.soft_rank, ours.soft_sort):
        out = fn(x.bfloat16())
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), fn(x.bfloat16().float()), rtol=1e-2, atol=0.1)
    xd = x.double() * 3
    _, theirs = value_and_grad(torchsort.soft_rank, xd, "kl", 1e-3)
    _, mine = value_and_grad(ours.soft_rank, xd, "kl", 1e-3)
    assert not theirs.isfinite().all() and mine.isfinite().all()


README_X = [[8, 0, 5, 3, 2, 1, 6, 7, 9]]  # torchsort's README passes this int64 tensor


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_integer_values_like_torchsort(dtype):
    """torchsort computes integer rows in the default float dtype and returns that dtype: its README's values."""
    x = torch.tensor(README_X, dtype=dtype)
    out = ours.soft_sort(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.arange(9.0).unsqueeze(0) + 5 / 9)
    sharp = torch.tensor([[0.0, 1, 2, 3, 5, 6, 7, 8, 9]])
    torch.testing.assert_close(ours.soft_sort(x, regularization_strength=0.1), sharp)
    ranks = torch.tensor([[8.0, 1, 5, 4, 3, 2, 6, 7, 9]])
    torch.testing.assert_close(ours.soft_rank(x), ranks)
    torch.testing.assert_close(ours.soft_rank(x, "kl"), ranks, rtol=0, atol=1e-5)
    # torchsort fails on soft_sort(int, "kl") (a dtype error in its extension): the float result
    torch.testing.assert_close(ours.soft_sort(x, "kl"), ours.soft_sort(x.float(), "kl"))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert ours.soft_rank(x).dtype == ours.soft_sort(x).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)
    with pytest.raises(TypeError, match="'values' should hold real numbers, got torch.bool"):
        ours.soft_rank(x > 3)


def test_integer_values_agree_with_torchsort(torchsort):
    x = torch.tensor(README_X)
    for name, regularization in (("soft_rank", "l2"), ("soft_rank", "kl"), ("soft_sort", "l2")):
        theirs, mine = getattr(torchsort, name)(x, regularization), getattr(ours, name)(x, regularization)
        assert mine.dtype == theirs.dtype == torch.float32
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def test_ops_submodule():
    """``torchsort.ops``: soft_rank, soft_sort and the autograd functions' ``apply``; the isotonic solvers are
    documented as left out."""
    ops = importlib.import_module("relaxops.compat.torchsort.ops")
    assert ops.soft_rank is ours.soft_rank and ops.soft_sort is ours.soft_sort
    assert_mirrors(
        ops,
        [
            "soft_rank",
            "soft_sort",
            "SoftRank",
            "SoftSort",
            "isotonic_l2",
            "isotonic_kl",
            "isotonic_l2_backward",
            "isotonic_kl_backward",
        ],
    )
    x = torch.tensor([[0.3, -1.0, 2.0, 0.1]], dtype=torch.float64, requires_grad=True)
    for cls, fn in ((ops.SoftRank, ours.soft_rank), (ops.SoftSort, ours.soft_sort)):
        for args in ((), ("kl", 0.5)):
            y = cls.apply(x, *args)
            torch.testing.assert_close(y, fn(x, *args))
            (g,) = torch.autograd.grad(y[0, 1], x)
            (g_ref,) = torch.autograd.grad(fn(x, *args)[0, 1], x)
            torch.testing.assert_close(g, g_ref)


def test_ops_names_are_torchsorts(torchsort):
    assert_mirrors(
        importlib.import_module("relaxops.compat.torchsort.ops"),
        defined_names(importlib.import_module("torchsort.ops")),
    )
