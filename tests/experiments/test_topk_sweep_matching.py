"""The pieces of ``topk-sweep`` and of ``matching``'s Gumbel-Sinkhorn baseline that a smoke run would not check:
P_K from alpha, the sweep's configurations and loss, the Sinkhorn plan and its hard limit, the reconstruction
loss's convention, the epoch-time table."""

from __future__ import annotations

import pytest
import torch
from relaxops.demos import perturbed
from relaxops.experiments import matching, topk_sweep
from relaxops.training import assignment, sample_noise, sort_perm


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.75, 1.0, 0.6])
def test_p_k_from_alpha(alpha):
    p = topk_sweep.p_k(alpha)
    assert p == [1 - alpha, 0, 0, 0, alpha] and sum(p) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.5", True, float("nan")])
def test_p_k_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha: must be a number in"):
        topk_sweep.p_k(alpha)


def test_configurations():
    cfg = dict(alphas=[0.0, 0.75, 1.0], m=16, alpha=0.75, ms=[6, 16, 40])
    assert topk_sweep.configurations(cfg) == [(0.0, 16), (0.75, 16), (1.0, 16), (0.75, 6), (0.75, 40)]
    for bad in (5, 101, 10.0):
        with pytest.raises(ValueError, match=r"m, ms: each m must be an integer in \(5, 100\]"):
            topk_sweep.configurations(dict(cfg, ms=[bad]))
    with pytest.raises(ValueError, match="alpha: must be"):
        topk_sweep.configurations(dict(cfg, alpha=2.0))


def test_sweep_loss_at_alpha_0_is_softmax_over_the_preselection():
    """alpha = 0: softmax cross-entropy over the true class and the m - 1 highest other scores (m = 100: all);
    alpha = 1: the top-5 term alone, which vanishes when the label is far ahead of the rest."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 100, generator=gen, dtype=torch.float64)
    y = torch.randint(100, (8,), generator=gen)
    full = torch.nn.functional.cross_entropy(x, y)
    assert topk_sweep.make_loss(0.0, 100, 100.0)(x, y).item() == pytest.approx(full.item(), rel=1e-4)
    others = x.scatter(1, y[:, None], -torch.inf).topk(15).values
    chosen = torch.cat([x.gather(1, y[:, None]), others], 1)
    want = torch.nn.functional.cross_entropy(chosen, torch.zeros(8, dtype=torch.long))
    assert topk_sweep.make_loss(0.0, 16, 100.0)(x, y).item() == pytest.approx(want.item(), rel=1e-4)
    assert topk_sweep.make_loss(0.0, 16, 100.0).m == 16 and topk_sweep.make_loss(0.0, 100, 100.0).m is None
    ahead = x.scatter(1, y[:, None], 100.0)
    assert topk_sweep.make_loss(1.0, 16, 100.0)(ahead, y).item() < 1e-3 < full.item()


def test_sinkhorn_plan_is_doubly_stochastic():
    gen = torch.Generator().manual_seed(1)
    theta = torch.randn(3, 7, 7, generator=gen, dtype=torch.float64)
    plan = perturbed.log_sinkhorn(theta, 200).exp()
    ones = torch.ones(3, 7, dtype=torch.float64)
    assert torch.allclose(plan.sum(-2), ones, atol=1e-12) and torch.allclose(plan.sum(-1), ones, atol=1e-8)
    assert (plan > 0).all()
    # 20 iterations, as the baseline: columns exact, rows close
    plans = perturbed.gumbel_sinkhorn(theta, 1.0, 10, 20, torch.Generator().manual_seed(2))
    assert plans.shape == (10, 3, 7, 7)
    assert torch.allclose(plans.sum(-2), torch.ones(10, 3, 7, dtype=torch.float64), atol=1e-12)
    assert (plans.sum(-1) - 1).abs().max() < 1e-2


def test_gumbel_sinkhorn_hard_limit_is_the_matching():
    """At a small temperature the plan is the matching of the perturbed scores (the same noise drawn again)."""
    gen = torch.Generator().manual_seed(3)
    theta = torch.randn(4, 6, 6, generator=gen, dtype=torch.float64) * 10  # no near-ties of the objective
    plans = perturbed.gumbel_sinkhorn(theta, 0.01, 2, 2000, torch.Generator().manual_seed(4))
    noise = sample_noise((2, 4, 6, 6), "gumbel", torch.Generator().manual_seed(4), torch.float64)
    hard = assignment(theta + noise)
    assert (plans - hard).abs().max() < 0.05
    assert torch.equal(assignment(plans), hard)
    assert not torch.equal(hard[0], hard[1])  # the two samples differ: the noise matters
    with pytest.raises(ValueError, match="temperature: must be a positive number"):
        perturbed.gumbel_sinkhorn(theta, 0.0, 1, 20)


def test_reconstruction_of_the_true_matching_is_the_sorted_sequence():
    x = torch.tensor([[0.3, 0.9, 0.1, 0.5]])
    assert torch.equal(perturbed.reconstruct(sort_perm(x), x), torch.tensor([[0.9, 0.5, 0.3, 0.1]]))
    uniform = torch.full((4, 4), 0.25)
    assert torch.allclose(perturbed.reconstruct(uniform, x), x.mean().expand(1, 4))


def test_gumbel_sinkhorn_training():
    gen = torch.Generator().manual_seed(0)
    data = (*perturbed.make_data(2, 10, 5, gen), *perturbed.make_data(2, 20, 5, gen))
    exact, wrong, sigma, seconds = perturbed.train(perturbed.GUMBEL_SINKHORN, data, 40, 0)
    assert exact > 50 and wrong.shape == (2,) and sigma == 1.0 and seconds > 0
    with pytest.raises(ValueError, match="method: must be one of"):
        perturbed.train("sinkhorn", data, 1, 0)


def test_matching_paper_columns_and_epoch_table():
    assert matching.METHODS[-1] == perturbed.GUMBEL_SINKHORN and len(matching.PAPER_COLUMN) == 4
    assert all(len(v) == 4 for v in matching.PAPER.values())
    assert matching._paper(dict(d=60, method=perturbed.GUMBEL_SINKHORN)) == {"sorted": 21.0}
    summary = [dict(d=10, method="learned sigma", epoch_s=0.02), dict(d=10, method="sigma = 0", epoch_s=0.01),
               dict(d=10, method=perturbed.GUMBEL_SINKHORN, epoch_s=0.05)]  # fmt: skip
    lines = matching.epoch_table(summary).splitlines()
    assert lines[2].split() == ["10", "0.0200", "0.0500", "2.50", "0.2470", "0.2880", "1.17"]


@pytest.mark.parametrize("gs_reps", [1, 3, 2.0])
def test_matching_rejects_bad_gs_reps(gs_reps, tmp_path):
    from relaxops.experiments.runner import Record

    cfg = dict(matching.SCALES["smoke"], gs_reps=gs_reps)
    with pytest.raises(ValueError, match="gs_reps: must be an integer from 2 to reps = 2"):
        matching.run(cfg, None, [0], Record("matching", "x", cfg, tmp_path))
