"""RESGRO (docs/math/training.md §3, §7): the best of K candidates per row, bootstrapped subsets,
downhill on average, row independence, determinism, one loss call, bad input."""

from __future__ import annotations

import pytest
import torch
from relaxops.training import ResgroLoss, resgro_target

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


class Recorder:
    """A per-row loss (distance to a per-row centre) that remembers the candidates it was called with."""

    def __init__(self, centre):
        self.centre, self.calls = centre, []

    def __call__(self, candidates):
        self.calls.append(candidates.clone())
        return (candidates - self.centre).square().sum(-1)


@pytest.mark.parametrize("noise", ["gaussian", "cauchy", "laplace", "logistic", "uniform"])
@pytest.mark.parametrize("include_current", [False, True])
def test_vanilla_target_is_the_brute_force_argmin(noise, include_current):
    N, m, K = 5, 3, 7
    y = torch.randn(N, m, dtype=F64, generator=gen(1))
    loss = Recorder(torch.randn(N, m, dtype=F64, generator=gen(2)))
    z = resgro_target(y, loss, K, noise, 0.5, generator=gen(3), include_current=include_current)
    assert len(loss.calls) == 1  # one call on all candidates stacked
    cands = loss.calls[0]
    assert cands.shape == (K + include_current, N, m)
    if include_current:
        assert torch.equal(cands[0], y)
    for n in range(N):
        values = [((cands[k, n] - loss.centre[n]) ** 2).sum().item() for k in range(len(cands))]
        best = min(range(len(values)), key=lambda k: (values[k], k))
        assert torch.equal(z[n], cands[best, n])


@pytest.mark.parametrize("subsets", ["per_row", "shared"])
def test_bootstrapped_target_is_the_mean_of_subset_argmins(subsets):
    N, m, K, M, R = 4, 2, 3, 9, 6
    y = torch.randn(N, m, dtype=F64, generator=gen(1))
    loss = Recorder(torch.zeros(N, m, dtype=F64))
    z = resgro_target(y, loss, K, "gaussian", 0.4, pool_size=M, n_sets=R, generator=gen(7), subsets=subsets)
    pool = loss.calls[0]
    assert pool.shape == (M, N, m)
    # the subsets: the generator's draws after the pool's noise, as documented (R uniform keys per pool member)
    g = gen(7)
    torch.randn((M, N, m), generator=g, dtype=F64)
    keys = torch.rand((R, M, 1 if subsets == "shared" else N), generator=g)
    for n in range(N):
        winners = []
        for r in range(R):
            members = sorted(keys[r, :, 0 if subsets == "shared" else n].argsort()[:K].tolist())
            assert len(set(members)) == K
            values = [(pool[j, n] ** 2).sum().item() for j in members]
            winners.append(pool[members[min(range(K), key=lambda i: (values[i], i))], n])
        torch.testing.assert_close(z[n], torch.stack(winners).mean(0))


def test_bootstrap_with_the_whole_pool_is_vanilla_over_the_pool():
    """K = M: every subset is the whole pool, so every set's winner is the pool's argmin (no RNG detail involved)."""
    y = torch.randn(6, 3, dtype=F64, generator=gen(0))
    loss = Recorder(torch.ones(6, 3, dtype=F64))
    z = resgro_target(y, loss, 8, "gaussian", 0.3, pool_size=8, n_sets=5, generator=gen(1))
    pool = loss.calls[0]
    best = loss(pool).argmin(0)
    torch.testing.assert_close(z, pool[best, torch.arange(6)])


def test_several_vanilla_sets_average_their_winners():
    y = torch.randn(3, 2, dtype=F64)
    loss = Recorder(torch.zeros(3, 2, dtype=F64))
    z = resgro_target(y, loss, 4, "gaussian", 0.2, n_sets=3, generator=gen(2))
    cands = loss.calls[0].view(3, 4, 3, 2)  # set r = candidates r K .. (r + 1) K - 1
    values = cands.square().sum(-1)
    winners = cands.gather(1, values.argmin(1)[:, None, :, None].expand(3, 1, 3, 2)).squeeze(1)
    torch.testing.assert_close(z, winners.mean(0))


@pytest.mark.parametrize("pool_size, n_sets", [(None, 1), (30, 10)])
def test_target_moves_a_convex_quadratic_downhill_on_average(pool_size, n_sets):
    """l(z) = 1/2||z - c||^2 with |y - c| = 1 and noise 0.05: the best of 10 candidates lowers l by about
    0.05 * E[max of 10 normals] ~ 0.05 * 1.5 per row, against a per-row spread of ~0.05: over 2000 rows the mean
    decrease is ~100 standard errors from 0. One candidate (K = 1) goes uphill on average by s^2 m / 2 > 0, which
    shows that the comparison can fail."""
    N, m = 2000, 4
    c = torch.zeros(N, m, dtype=F64)
    y = torch.nn.functional.normalize(torch.randn(N, m, dtype=F64, generator=gen(0)), dim=-1)

    def loss(z):
        return 0.5 * (z - c).square().sum(-1)

    z = resgro_target(y, loss, 10, "gaussian", 0.05, pool_size=pool_size, n_sets=n_sets, generator=gen(1))
    decrease = loss(y) - loss(z)
    assert decrease.mean() > 10 * decrease.std() / N**0.5
    z1 = resgro_target(y, loss, 1, "gaussian", 0.05, generator=gen(1))
    assert (loss(y) - loss(z1)).mean() < 0


@pytest.mark.parametrize("pool_size, n_sets", [(None, 1), (None, 3), (12, 4)])
def test_rows_are_independent(pool_size, n_sets):
    """Changing row 2's loss never changes row 1's target (same generator)."""
    y = torch.randn(3, 2, dtype=F64, generator=gen(0))

    def make(w):
        return lambda z: (
            (z - torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=F64)).square().sum(-1)
            * torch.tensor([1.0, 1.0, w], dtype=F64)
            + torch.tensor([0.0, 0.0, 1.0], dtype=F64) * z[..., 0] * w
        )

    a = resgro_target(y, make(1.0), 5, "cauchy", 1.0, pool_size=pool_size, n_sets=n_sets, generator=gen(3))
    b = resgro_target(y, make(-7.0), 5, "cauchy", 1.0, pool_size=pool_size, n_sets=n_sets, generator=gen(3))
    assert torch.equal(a[:2], b[:2])
    assert not torch.equal(a[2], b[2])


def test_deterministic_nan_losses_and_dtype():
    y = torch.randn(4, 3)
    loss = lambda z: torch.where(z[..., 0] > 0, torch.nan, z.square().sum(-1))  # noqa: E731
    a = resgro_target(y, loss, 6, generator=gen(4))
    b = resgro_target(y, loss, 6, generator=gen(4))
    assert torch.equal(a, b) and a.dtype == torch.float32
    assert torch.isfinite(a).all()
    assert not torch.equal(a, resgro_target(y, loss, 6, generator=gen(5)))


def test_resgro_loss_gradient_is_y_minus_target():
    y = torch.randn(5, 3, dtype=F64, requires_grad=True)
    centre = torch.zeros(5, 3, dtype=F64)
    module = ResgroLoss(lambda z, c: (z - c).square().sum(-1), K=4, scale=0.2, generator=gen(8))
    out = module(y, centre)
    (grad,) = torch.autograd.grad(out, y)
    z = resgro_target(y, lambda z: (z - centre).square().sum(-1), 4, scale=0.2, generator=gen(8))
    torch.testing.assert_close(grad, (y.detach() - z) / 5)
    assert ResgroLoss(lambda z: z.sum(-1), reduction="none")(y).shape == (5,)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(K=0), ValueError, "K must be"),
        (dict(K=2.0), ValueError, "K must be"),
        (dict(noise="normal"), ValueError, "noise must be"),
        (dict(scale=0.0), ValueError, "scale must be"),
        (dict(pool_size=2, K=3), ValueError, "pool_size must be >= K"),
        (dict(n_sets=0), ValueError, "n_sets"),
        (dict(subsets="all"), ValueError, "subsets"),
        (dict(generator=3), TypeError, "generator"),
    ],
)
def test_bad_arguments(kwargs, error, words):
    args = dict(K=3, noise="gaussian", scale=0.1)
    args.update(kwargs)
    with pytest.raises(error, match=words):
        resgro_target(torch.randn(2, 2), lambda z: z.sum(-1), **args)
    with pytest.raises(error, match=words):
        ResgroLoss(lambda z: z.sum(-1), **args)


def test_bad_shapes_and_loss_outputs():
    with pytest.raises(ValueError, match=r"y must be \[N, m\]"):
        resgro_target(torch.randn(3), lambda z: z.sum(-1), 2)
    with pytest.raises(ValueError, match="loss_per_sample must map"):
        resgro_target(torch.randn(3, 2), lambda z: z.sum(), 2)
    with pytest.raises(TypeError, match="loss_per_sample must be callable"):
        resgro_target(torch.randn(3, 2), None, 2)


def test_ties_go_to_the_lowest_index():
    """A constant loss ties every candidate: vanilla takes the first, bootstrapped the lowest pool index of each
    subset, and include_current keeps the current point."""
    y = torch.randn(3, 2, dtype=F64)
    loss = Recorder(torch.zeros(3, 2, dtype=F64))
    const = lambda z: loss(z) * 0  # noqa: E731
    z = resgro_target(y, const, 5, generator=gen(1))
    torch.testing.assert_close(z, loss.calls[-1][0])
    M, K, R = 10, 3, 4
    z = resgro_target(y, const, K, pool_size=M, n_sets=R, generator=gen(2))
    pool = loss.calls[-1]
    g = gen(2)
    torch.randn((M, 3, 2), generator=g, dtype=F64)
    keys = torch.rand((R, M, 3), generator=g)
    lowest = keys.argsort(1)[:, :K].min(1).values  # [R, N]
    torch.testing.assert_close(z, pool[lowest, torch.arange(3)].mean(0))
    torch.testing.assert_close(resgro_target(y, const, K, pool_size=M, generator=gen(2), include_current=True), y)
