"""The stochastic (Plackett-Luce) variants of NeuralSort and SoftSort in the ``sorting``, ``quantile`` and ``knn``
experiments: the Gumbel perturbation, the loss as the mean of the deterministic losses of the perturbed copies, the
limit of a concentrated distribution, and the method names each experiment accepts."""

from __future__ import annotations

import json
import math

import pytest
import torch
from relaxops.experiments import knn, quantile, reproduce, sorting

PL = list(sorting.STOCHASTIC)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gumbel_perturb_has_the_gumbel_moments_and_follows_the_generator():
    s = torch.linspace(-2.0, 3.0, 500, dtype=torch.float64)
    z = sorting.gumbel_perturb(s, 400, gen(1))
    assert z.shape == (400, 500) and z.dtype == torch.float64
    g = z - s  # 2e5 standard Gumbel draws: standard error of the mean 1.28 / sqrt(2e5) = 0.003
    assert abs(g.mean().item() - 0.5772156649015329) < 0.015
    assert abs(g.var().item() - math.pi**2 / 6) < 0.05
    torch.testing.assert_close(sorting.gumbel_perturb(s, 400, gen(1)), z, rtol=0, atol=0)
    assert not torch.equal(sorting.gumbel_perturb(s, 400, gen(2)), z)
    # batched scores: one independent draw per sample, set and element
    b = sorting.gumbel_perturb(torch.zeros(3, 4), 2, gen(0))
    assert b.shape == (2, 3, 4) and b.flatten().unique().numel() == 24


def test_gumbel_max_of_the_perturbation_samples_plackett_luce():
    # the first place of a Plackett-Luce ordering with log-parameters s is element i with probability softmax(s)_i
    s = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    first = sorting.gumbel_perturb(s, 100_000, gen(3)).argmax(-1)
    freq = torch.bincount(first, minlength=3).double() / len(first)
    torch.testing.assert_close(freq, s.softmax(0), atol=0.01, rtol=0)


def numbers(sets: int, n: int, seed: int = 0):
    g = gen(seed)
    values = torch.stack([torch.randperm(100, generator=g)[:n] for _ in range(sets)])
    s = (values.double() / 30 + torch.randn(sets, n, generator=g, dtype=torch.float64)).requires_grad_()
    return s, values


@pytest.mark.parametrize("method", PL)
def test_sorting_loss_is_the_mean_of_the_deterministic_losses_of_the_copies(method):
    s, values = numbers(6, 5)
    base = sorting.STOCHASTIC[method]
    copies = sorting.gumbel_perturb(s, sorting.PL_SAMPLES, gen(7))
    each = torch.stack([sorting.loss_fn(c, values, base, 2.0, per_set=True) for c in copies])
    got = sorting.loss_fn(s, values, method, 2.0, per_set=True, generator=gen(7))
    torch.testing.assert_close(got, each.mean(0))
    torch.testing.assert_close(sorting.loss_fn(s, values, method, 2.0, generator=gen(7)), each.mean())
    # noise moves the loss: it is not the deterministic loss of the unperturbed scores
    assert not torch.allclose(got, sorting.loss_fn(s, values, base, 2.0, per_set=True))
    got.sum().backward()
    assert s.grad is not None and s.grad.abs().sum() > 0


@pytest.mark.parametrize("method", PL)
def test_sorting_loss_of_a_concentrated_distribution_is_the_deterministic_one(method):
    # relaxed_sort(c s + g, c tau) = relaxed_sort(s + g / c, tau): as c grows the Plackett-Luce distribution with
    # log-parameters c s concentrates on the argsort of s, and the stochastic loss tends to the deterministic one
    s, values = numbers(6, 5, seed=1)
    s = s.detach()
    base, tau = sorting.STOCHASTIC[method], 0.5
    want = sorting.loss_fn(s, values, base, tau, per_set=True)
    far = sorting.loss_fn(s, values, method, tau, per_set=True, generator=gen(0))
    near = sorting.loss_fn(1e6 * s, values, method, 1e6 * tau, per_set=True, generator=gen(0))
    assert (far - want).abs().max() > 1e-2
    torch.testing.assert_close(near, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("method", PL)
def test_quantile_loss_is_the_mean_of_the_deterministic_losses_of_the_copies(method):
    s, values = numbers(4, 5, seed=2)
    r = torch.rand(4, 5, generator=gen(3), dtype=torch.float64)
    base, tau = sorting.STOCHASTIC[method], quantile.tau_for(method, 5) / 1000
    copies = sorting.gumbel_perturb(s, sorting.PL_SAMPLES, gen(5))
    each = torch.stack([quantile.loss_fn(c, r, values, base, tau, 100.0) for c in copies])
    torch.testing.assert_close(quantile.loss_fn(s, r, values, method, tau, 100.0, gen(5)), each.mean())
    near = quantile.loss_fn(1e6 * s, r, values, method, 1e6 * tau, 100.0, gen(5))
    torch.testing.assert_close(near, quantile.loss_fn(s, r, values, base, tau, 100.0), atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", PL)
def test_knn_loss_is_the_mean_of_the_deterministic_losses_of_the_copies(method):
    g = gen(4)
    eq, ec = torch.randn(3, 8, generator=g, dtype=torch.float64), torch.randn(10, 8, generator=g, dtype=torch.float64)
    yq, yc = torch.randint(3, (3,), generator=g), torch.randint(3, (10,), generator=g)
    base = sorting.STOCHASTIC[method]
    copies = sorting.gumbel_perturb(-knn.squared_distances(eq, ec), sorting.PL_SAMPLES, gen(9))
    correct = (yq[:, None] == yc[None, :]).double()
    each = torch.stack([-(correct * knn.soft_topk(c, base, 3, 4.0)).sum(-1).mean() for c in copies])
    torch.testing.assert_close(knn.relaxed_loss(eq, ec, yq, yc, method, 3, 4.0, gen(9)), each.mean())
    near = knn.relaxed_loss(1e3 * eq, 1e3 * ec, yq, yc, method, 3, 1e6 * 4.0, gen(9))
    torch.testing.assert_close(near, knn.relaxed_loss(eq, ec, yq, yc, base, 3, 4.0), atol=1e-6, rtol=0)


def test_the_names_in_each_experiment_and_its_scales():
    for module in (sorting, quantile, knn):
        assert set(PL) <= set(module.METHODS) and set(PL) <= set(module.SCALES["paper"]["methods"])
        for scale in ("smoke", "small"):  # run separately: the default runs and their results files keep their rows
            assert not set(PL) & set(module.SCALES[scale]["methods"])
        module.check(dict(module.SCALES["smoke"], methods=PL))
        with pytest.raises(ValueError, match="methods"):
            module.check(dict(module.SCALES["smoke"], methods=["neuralsort_gumbel"]))
    assert quantile.tau_for("neuralsort_pl", 15) == 4096.0 and quantile.tau_for("softsort_pl", 5) == 4096.0
    with pytest.raises(ValueError, match="training"):
        sorting.objective("softsort_pl", 1.0, "fisher")


def test_the_papers_stochastic_numbers():
    assert sorting._paper(dict(n=7, method="neuralsort_pl")) == {"EM": 63.6, "EW": 87.3}
    assert sorting._paper(dict(n=7, method="softsort_pl")) is None  # SoftSort's Table 1 is lost in its source
    assert knn._paper(dict(dataset="mnist5k", k=3, method="neuralsort_pl")) == {
        "SoftSort (best k)": 99.4,
        "Cohen Indelman-Hazan": 99.3,
    }
    assert knn._paper(dict(dataset="cifar10", k=9, method="softsort_pl")) == {"SoftSort (best k)": 90.64}


@pytest.mark.parametrize("name", ["sorting", "quantile", "knn"])
def test_smoke_runs_of_the_stochastic_variants(name, tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlxtend")
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    reproduce(name, "smoke", out=tmp_path, plot=False, overrides={"methods": ",".join(PL)})
    result = json.loads((tmp_path / f"{name}-smoke.json").read_text())
    assert [row["method"] for row in result["rows"]] == PL
    assert all(0.0 <= e[m] <= 1.0 for e in result["summary"] for m in e if m + "_std" in e and m != "spearman")
    with pytest.raises(ValueError, match="methods"):
        reproduce(name, "smoke", out=tmp_path, plot=False, overrides={"methods": "stochastic_neuralsort"})
