"""Ranking losses: the exact metric in the hard limit (scipy's spearmanr / pearsonr / kendalltau, an exact NDCG@k and
recall@k written here), padded lists equal to per-list unpadded calls (values and gradients, nothing from the pads),
any dim, reductions, bad arguments."""

import math

import numpy as np
import pytest
import scipy.stats
import torch
from relaxops import losses
from testing import gapped


def _seed(s):
    return torch.Generator().manual_seed(s)


def _relevance(shape, seed=1, levels=4):
    return torch.randint(0, levels, shape, generator=_seed(seed)).to(torch.float64)


def exact_ndcg(s, rel, k=None, gain=lambda r: 2.0**r - 1):
    s, g = np.asarray(s), gain(np.asarray(rel, dtype=np.float64))
    k = len(s) if k is None else min(k, len(s))
    disc = 1 / np.log2(np.arange(k) + 2)
    ideal = (np.sort(g)[::-1][:k] * disc).sum()
    return (g[np.argsort(-s, kind="stable")][:k] * disc).sum() / ideal if ideal > 0 else 0.0


def exact_recall(s, rel, k):
    top = np.argsort(-np.asarray(s), kind="stable")[:k]
    relevant = np.asarray(rel) > 0
    return relevant[top].sum() / min(k, relevant.sum())


# --- the hard limit is the exact metric ---------------------------------------------------------------------------


def test_correlations_equal_scipy():
    x = gapped((4, 9))
    y = _relevance((4, 9), levels=5) + torch.rand(4, 9, dtype=torch.float64, generator=_seed(2)) * (
        torch.arange(4) < 2
    ).unsqueeze(-1)  # rows 2, 3: ties in the target
    sp = losses.spearman_loss(x, y, regularization_strength=1e-3, reduction="none")
    pe = losses.pearson_loss(x, y, reduction="none")
    xt = x.clone()
    xt[:, 1] = xt[:, 0]  # a tie in the scores: tau-b's score-tie count
    ke = losses.kendall_loss(xt, y, temperature=1e-9, reduction="none")
    for b in range(4):
        assert sp[b].item() == pytest.approx(1 - scipy.stats.spearmanr(x[b], y[b]).statistic, abs=1e-12)
        assert pe[b].item() == pytest.approx(1 - scipy.stats.pearsonr(x[b], y[b]).statistic, abs=1e-12)
        assert ke[b].item() == pytest.approx(1 - scipy.stats.kendalltau(xt[b], y[b]).statistic, abs=1e-12)


@pytest.mark.parametrize(
    "ranker, options",
    [
        ("soft_rank", dict(regularization_strength=1e-3)),
        ("pairwise", dict(temperature=1e-4)),
        ("neuralsort", dict(tau=1e-4)),
        ("softsort", dict(tau=1e-4)),
        ("rank", dict(steepness=1e3)),
        ("ot_rank", dict(epsilon=1e-3, tolerance=1e-4, squashing="none")),
    ],
)
def test_every_ranker_reaches_spearman(ranker, options):
    x = gapped((2, 6))
    y = torch.randn(2, 6, dtype=torch.float64, generator=_seed(3))
    ours = losses.spearman_loss(x, y, ranker=ranker, reduction="none", **options)
    exact = torch.tensor([1 - scipy.stats.spearmanr(x[b], y[b]).statistic for b in range(2)], dtype=x.dtype)
    assert torch.allclose(ours, exact, atol=1e-9 if ranker in ("soft_rank", "pairwise") else 3e-2)


@pytest.mark.parametrize("k", [None, 1, 3, 7])
@pytest.mark.parametrize("gain", ["exp", "linear"])
def test_ndcg_losses_equal_exact_ndcg(k, gain):
    x = gapped((5, 7))
    rel = _relevance((5, 7))
    rel[0] = 0  # no relevant entry: NDCG 0, loss 0, not counted in the mean
    g = (lambda r: 2.0**r - 1) if gain == "exp" else (lambda r: r)
    exact = torch.tensor([exact_ndcg(x[b], rel[b], k, g) for b in range(5)], dtype=x.dtype)
    assert torch.allclose(losses.ndcg(x, rel, k, gain=gain), exact, atol=1e-12)
    neural = losses.neural_ndcg_loss(x, rel, k, gain=gain, tau=1e-4, reduction="none")
    approx = losses.approx_ndcg_loss(x, rel, k, gain=gain, regularization_strength=1e-3, reduction="none")
    for ours in (neural, approx):
        assert ours[0] == 0
        assert torch.allclose(1 - ours[1:], exact[1:], atol=1e-9)
    mean = losses.approx_ndcg_loss(x, rel, k, gain=gain, regularization_strength=1e-3)
    assert mean.item() == pytest.approx(float((1 - exact[1:]).mean()), abs=1e-9)


@pytest.mark.parametrize(
    "method, options",
    [("neuralsort", dict(tau=1e-4)), ("sort", dict(steepness=1e4)), ("ot_sort", dict(epsilon=1e-3, tolerance=1e-4))],
)
def test_neural_ndcg_matrices(method, options):
    x = gapped((2, 8))
    rel = _relevance((2, 8), seed=4)
    exact = torch.tensor([exact_ndcg(x[b], rel[b], 4) for b in range(2)], dtype=x.dtype)
    ours = 1 - losses.neural_ndcg_loss(x, rel, 4, method=method, reduction="none", **options)
    assert torch.allclose(ours, exact, atol=1e-3)


def test_topk_recall_equals_exact_recall():
    x = gapped((4, 9))
    rel = _relevance((4, 9), seed=5, levels=2)
    rel[1] = 0
    for k in (1, 3, 9):
        for method, options in (("neuralsort", dict(tau=1e-4)), ("softsort", dict(tau=1e-4))):
            ours = losses.topk_recall_loss(x, rel, k, method=method, reduction="none", **options)
            assert ours[1] == 0
            for b in (0, 2, 3):
                assert ours[b].item() == pytest.approx(1 - exact_recall(x[b], rel[b], k), abs=1e-9)
    exact = torch.tensor([0.0 if b == 1 else 1 - exact_recall(x[b], rel[b], 3) for b in range(4)], dtype=x.dtype)
    ours = losses.topk_recall_loss(x, rel, 3, method="topk", steepness=1e4, reduction="none")
    assert torch.allclose(ours, exact, atol=1e-2)
    ours = losses.topk_recall_loss(x, rel, 3, method="ot_topk", epsilon=1e-3, tolerance=1e-4, reduction="none")
    assert torch.allclose(ours, exact, atol=1e-2)


# --- padded lists, dim, reductions --------------------------------------------------------------------------------

LOSSES = [
    ("spearman", lambda s, t, **kw: losses.spearman_loss(s, t, regularization_strength=0.5, **kw)),
    ("spearman pairwise", lambda s, t, **kw: losses.spearman_loss(s, t, ranker="pairwise", temperature=0.5, **kw)),
    ("pearson", lambda s, t, **kw: losses.pearson_loss(s, t, **kw)),
    ("kendall", lambda s, t, **kw: losses.kendall_loss(s, t, temperature=0.5, **kw)),
    ("neural_ndcg", lambda s, t, **kw: losses.neural_ndcg_loss(s, t, 3, tau=0.5, **kw)),
    ("neural_ndcg softsort", lambda s, t, **kw: losses.neural_ndcg_loss(s, t, method="softsort", tau=0.5, **kw)),
    ("approx_ndcg", lambda s, t, **kw: losses.approx_ndcg_loss(s, t, 2, regularization_strength=0.5, **kw)),
    ("approx_ndcg pairwise", lambda s, t, **kw: losses.approx_ndcg_loss(s, t, ranker="pairwise", **kw)),
    ("topk_recall", lambda s, t, **kw: losses.topk_recall_loss(s, t, 2, method="neuralsort", tau=0.5, **kw)),
    ("neural_ndcg ot_sort", lambda s, t, **kw: losses.neural_ndcg_loss(s, t, 3, method="ot_sort", epsilon=1e-2, **kw)),
    ("spearman rank", lambda s, t, **kw: losses.spearman_loss(s, t, ranker="rank", steepness=3.0, **kw)),
    ("topk_recall topk", lambda s, t, **kw: losses.topk_recall_loss(s, t, 2, method="topk", steepness=3.0, **kw)),
]


@pytest.mark.parametrize("name,loss", LOSSES, ids=[c[0] for c in LOSSES])
@pytest.mark.parametrize("how", ["lengths", "mask"])
def test_padded_lists_equal_unpadded_lists(name, loss, how):
    n = 7
    lengths = torch.tensor([7, 0, 3, 1, 5, 6])
    x0 = torch.randn(6, n, dtype=torch.float64, generator=_seed(6))
    rel0 = _relevance((6, n), seed=7)
    if how == "lengths":
        valid = torch.arange(n) < lengths.unsqueeze(-1)
        kw = dict(lengths=lengths)
    else:
        valid = torch.rand(6, n, generator=_seed(8)) < 0.6
        valid[0], valid[1] = True, False
        kw = dict(mask=valid)
    fill = torch.where(torch.rand(6, n, generator=_seed(9)) < 0.5, math.nan, math.inf).to(torch.float64)
    x = torch.where(valid, x0, fill).requires_grad_()
    rel = torch.where(valid, rel0, fill)  # the targets' pads are never read either
    out = loss(x, rel, reduction="none", **kw)
    assert out.shape == (6,)
    w = torch.randn(6, dtype=x.dtype, generator=_seed(10))
    (grad,) = torch.autograd.grad((out * w).sum(), x)
    assert not out.isnan().any() and not grad.isnan().any() and (grad[~valid] == 0).all()
    assert out[1] == 0
    for b in (0, 2, 3, 4, 5):
        xb = x0[b][valid[b]].unsqueeze(0).requires_grad_()
        ob = loss(xb, rel0[b][valid[b]].unsqueeze(0), reduction="none")
        assert torch.allclose(out[b : b + 1], ob, atol=1e-12, rtol=0), (b, out[b], ob)
        (gb,) = torch.autograd.grad((ob * w[b]).sum(), xb)
        assert torch.allclose(grad[b][valid[b]], gb[0], atol=1e-12, rtol=0), b
    mean, total = loss(x, rel, **kw), loss(x, rel, reduction="sum", **kw)
    assert torch.allclose(total, out.sum())
    if name not in ("spearman", "spearman pairwise", "spearman rank", "pearson", "kendall"):
        return
    targets = [rel0[b][valid[b]] for b in range(6)]
    defined = sum(t.numel() >= 2 and t.unique().numel() > 1 for t in targets)  # a correlation needs two values
    assert torch.allclose(mean, out.sum() / defined)


@pytest.mark.parametrize("name,loss", LOSSES[::2], ids=[c[0] for c in LOSSES[::2]])
def test_dim_equals_movedim(name, loss):
    x = torch.randn(2, 6, 3, dtype=torch.float64, generator=_seed(11))
    rel = _relevance((2, 6, 3), seed=12)
    for dim in (1, -2):
        ours = loss(x, rel, dim=dim, reduction="none")
        assert ours.shape == (2, 3)
        assert torch.allclose(ours, loss(x.movedim(1, -1), rel.movedim(1, -1), reduction="none"), atol=1e-12)
    lengths = torch.tensor([[6, 2, 4], [0, 5, 3]])
    ours = loss(x, rel, dim=1, lengths=lengths, reduction="none")
    assert torch.allclose(ours, loss(x.movedim(1, -1), rel.movedim(1, -1), lengths=lengths, reduction="none"))


def test_per_list_k():
    x = gapped((3, 6))
    rel = _relevance((3, 6), seed=13)
    rel[:, 0] = 2  # every list has a relevant entry
    k = torch.tensor([1, 4, 6])
    ours = losses.neural_ndcg_loss(x, rel, k, tau=1e-4, reduction="none")
    exact = torch.tensor([1 - exact_ndcg(x[b], rel[b], int(k[b])) for b in range(3)], dtype=x.dtype)
    assert torch.allclose(ours, exact, atol=1e-9)
    assert torch.allclose(losses.ndcg(x, rel, k), 1 - exact, atol=1e-12)


@pytest.mark.parametrize("method, options", [("neuralsort", dict(tau=0.5)), ("ot_topk", dict(epsilon=1e-2))])
def test_per_list_k_of_padded_lists(method, options):
    x0 = torch.randn(4, 7, dtype=torch.float64, generator=_seed(15))
    rel = _relevance((4, 7), seed=16, levels=2)
    rel[:, 0] = 1
    lengths, k = torch.tensor([7, 0, 3, 5]), torch.tensor([2, 1, 3, 4])
    x = torch.where(torch.arange(7) < lengths.unsqueeze(-1), x0, math.nan)
    out = losses.topk_recall_loss(x, rel, k, lengths=lengths, method=method, reduction="none", **options)
    assert out[1] == 0
    for b in (0, 2, 3):
        L = int(lengths[b])
        one = losses.topk_recall_loss(x0[b : b + 1, :L], rel[b : b + 1, :L], int(k[b]), method=method, **options)
        assert torch.allclose(out[b], one, atol=1e-12, rtol=0), b


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda x, t: losses.spearman_loss(x, t, reduction="avg"), ValueError, "reduction"),
        (lambda x, t: losses.ndcg(x[:, :0], t[:, :0]), ValueError, "scores must have at least one entry"),
        (lambda x, t: losses.spearman_loss(x, t, ranker="sort"), ValueError, "ranker"),
        (lambda x, t: losses.spearman_loss(x, t[:, :3]), ValueError, "target"),
        (lambda x, t: losses.spearman_loss(x, t.tolist()), TypeError, "target"),
        (lambda x, t: losses.pearson_loss(x.long(), t), TypeError, "scores"),
        (lambda x, t: losses.kendall_loss(x, t, temperature=0), ValueError, "temperature"),
        (lambda x, t: losses.ndcg(x, -t), ValueError, "relevance"),
        (lambda x, t: losses.ndcg(x, t, 0), ValueError, "k"),
        (lambda x, t: losses.ndcg(x, t, torch.tensor([1, 0])), ValueError, "k"),
        (lambda x, t: losses.ndcg(x, t, torch.tensor([1.0, 2.0])), TypeError, "k"),
        (lambda x, t: losses.ndcg(x, t, gain="log"), ValueError, "gain"),
        (lambda x, t: losses.neural_ndcg_loss(x, t, method="soft_rank"), ValueError, "method"),
        (lambda x, t: losses.neural_ndcg_loss(x, t, sinkhorn_iterations=-1), ValueError, "sinkhorn_iterations"),
        (lambda x, t: losses.neural_ndcg_loss(x, t, sinkhorn_tolerance=0.0), ValueError, "sinkhorn_tolerance"),
        (lambda x, t: losses.approx_ndcg_loss(x, t, lengths=torch.tensor([7, 1])), ValueError, "lengths"),
        (lambda x, t: losses.topk_recall_loss(x, t, 0), ValueError, "k"),
        (lambda x, t: losses.topk_recall_loss(x, t, 2, method="sort"), ValueError, "method"),
    ],
)
def test_bad_arguments_name_themselves(call, err, match):
    with pytest.raises(err, match=match):
        call(torch.randn(2, 6), torch.rand(2, 6))


def test_hard_operators_give_the_exact_metric_and_a_gradient():
    x = gapped((3, 8)).requires_grad_()
    rel = _relevance((3, 8), seed=14)
    rel[:, 0] = 1
    cases = [
        (lambda **o: losses.spearman_loss(x, rel, reduction="none", **o), dict(regularization_strength=0.5)),
        (lambda **o: losses.neural_ndcg_loss(x, rel, 3, reduction="none", **o), dict(tau=0.5)),
        (lambda **o: losses.approx_ndcg_loss(x, rel, 3, reduction="none", **o), dict(regularization_strength=0.5)),
        (lambda **o: losses.topk_recall_loss(x, rel, 3, method="neuralsort", reduction="none", **o), dict(tau=0.5)),
    ]
    exact = [
        torch.tensor([1 - scipy.stats.spearmanr(x[b].detach(), rel[b]).statistic for b in range(3)]),
        1 - losses.ndcg(x, rel, 3),
        1 - losses.ndcg(x, rel, 3),
        torch.tensor([1 - exact_recall(x[b].detach(), rel[b], 3) for b in range(3)]),
    ]
    for (loss, options), want in zip(cases, exact):
        hard = loss(hard=True, **options)
        assert torch.allclose(hard, want.to(x.dtype), atol=1e-12)
        (g_hard,) = torch.autograd.grad(hard.sum(), x)  # straight-through: the relaxed operator's Jacobian
        assert g_hard.isfinite().all() and g_hard.abs().sum() > 0


@pytest.mark.parametrize("iterations", [1, 3, 50])
def test_sinkhorn_gradient(iterations):
    """The Sinkhorn scaling's own backward against finite differences: a list that stops first (nearly doubly
    stochastic already), one that runs on, a padded one (its pad row and column 0)."""
    from relaxops.ranking.losses import _Sinkhorn

    X = torch.rand(3, 4, 4, dtype=torch.float64, generator=_seed(17)) + 0.5
    X[0] = 0.25 + 1e-4 * X[0]
    valid = torch.tensor([[True] * 4, [True] * 4, [True] * 3 + [False]])
    real = valid.unsqueeze(-1) & valid.unsqueeze(-2)  # a pad's row and column are 0, not variables
    f = lambda t: _Sinkhorn.apply(torch.where(real, t, 0), valid, iterations, 1e-3)  # noqa: E731
    torch.autograd.gradcheck(f, (X.requires_grad_(),))
    rel = _relevance((2, 5), seed=18)
    rel[:, 0] = 1
    x = gapped((2, 5)).requires_grad_()
    torch.autograd.gradcheck(
        lambda t: losses.neural_ndcg_loss(t, rel, 3, tau=0.7, sinkhorn_iterations=iterations), (x,)
    )
