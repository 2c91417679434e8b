"""The pieces of the ``quantile`` and ``knn`` experiments whose mistakes a smoke run would not show: the median
selection, the soft top-k membership against the hard kNN vote, the hard kNN classifier, the PCA baseline, the
direct loss's task loss and the papers' numbers beside ours."""

from __future__ import annotations

import pytest
import torch
from relaxops.experiments import knn, quantile


class Value(torch.nn.Module):
    """A stand-in network: the single pixel of a [B, 1, 1, 1] image, times ``factor``."""

    def __init__(self, factor: float = 1.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x.flatten(1)[:, :1] * self.factor


@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_median_weights_pick_the_median_in_the_hard_limit(method):
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(64, 7, generator=gen, dtype=torch.float64)
    w = quantile.median_weights(s, method, tau=1e-5)
    want = torch.nn.functional.one_hot(s.argsort(-1)[:, 3], 7).double()
    torch.testing.assert_close(w, want, atol=1e-6, rtol=0)
    soft = quantile.median_weights(s, method, tau=10.0)
    torch.testing.assert_close(soft.sum(-1), torch.ones(64, dtype=torch.float64))
    assert (soft > 0.01).all()  # a large tau spreads the weight over every element


@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_quantile_loss(method):
    """Scores ordered as the values and a regressor that returns value / scale give loss 0 in the hard limit; the
    distances to the median as scores select an extreme element, whose squared error is the loss."""
    values = torch.tensor([[30, 10, 50, 20, 40], [5, 1, 3, 2, 4]])
    r = values.double() / 100
    assert quantile.loss_fn(values.double(), r, values, method, 1e-3, 100.0).item() == pytest.approx(0, abs=1e-12)
    # scores |v - median|: the middle of their order is an element at distance 10 (or 1) from the median
    far = (values - values.median(-1, keepdim=True).values).abs().double() + torch.arange(5) * 1e-3
    loss = quantile.loss_fn(far, r, values, method, 1e-6, 100.0).item()
    assert loss == pytest.approx((0.1**2 + 0.01**2) / 2)


def test_quantile_evaluate():
    gen = torch.Generator().manual_seed(0)
    values = torch.stack([torch.randperm(1000, generator=gen)[:9] for _ in range(50)])
    images = values.double().view(50, 9, 1, 1, 1)
    m = quantile.evaluate(Value(), Value(1 / 1000), images, values, 1000.0)
    assert m["mse"] == pytest.approx(0, abs=1e-20) and m["spearman"] == pytest.approx(1) and m["hit"] == 1.0
    wrong = quantile.evaluate(Value(-1), Value(1 / 1000), images, values, 1000.0)  # reversed: the median still
    assert wrong["hit"] == 1.0
    shifted = quantile.evaluate(Value(), Value(1 / 1000), images + 100, values, 1000.0)  # regresses 100 too high
    assert shifted["mse"] == pytest.approx(0.01) and shifted["spearman"] == pytest.approx(1)
    constant = quantile.evaluate(Value(), Value(0), images, values, 1000.0)  # no ranks: Spearman 0
    assert constant["spearman"] == 0.0 and constant["mse"] > 0


def test_quantile_config_errors():
    with pytest.raises(ValueError, match="ns: every n must be odd"):
        quantile.check(dict(quantile.SCALES["smoke"], ns=[4]))
    with pytest.raises(ValueError, match="methods: 'ot_sort'"):
        quantile.check(dict(quantile.SCALES["smoke"], methods=["ot_sort"]))
    assert quantile.tau_for("softsort", 15) == 256.0 and quantile.tau_for("neuralsort", 7) == 1024.0


@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_soft_topk_is_the_hard_vote_in_the_hard_limit(method):
    """The soft membership of the k nearest is their k-hot indicator as tau -> 0, so the kNN probability of the
    true class (the loss / -k) is the fraction of the hard k nearest of that class."""
    gen = torch.Generator().manual_seed(1)
    eq, ec = torch.randn(8, 5, generator=gen), torch.randn(30, 5, generator=gen)
    yq, yc = torch.randint(3, (8,), generator=gen), torch.randint(3, (30,), generator=gen)
    k = 5
    d = knn.squared_distances(eq, ec)
    torch.testing.assert_close(d, torch.cdist(eq, ec).square(), atol=1e-5, rtol=1e-5)
    hard = torch.zeros(8, 30).scatter_(1, d.topk(k, largest=False).indices, 1.0)
    torch.testing.assert_close(knn.soft_topk(-d, method, k, 1e-4), hard, atol=1e-5, rtol=0)
    vote = (yc[d.topk(k, largest=False).indices] == yq[:, None]).float().mean(-1)  # hard kNN vote for the class
    loss = knn.relaxed_loss(eq, ec, yq, yc, method, k, 1e-4)
    assert -loss.item() / k == pytest.approx(vote.mean().item(), abs=1e-5)
    soft = knn.soft_topk(-d, method, k, 100.0)
    torch.testing.assert_close(soft.sum(-1), torch.full((8,), float(k)))
    assert soft.max() < 0.9


def test_knn_predict():
    train = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]])
    labels = torch.tensor([0, 0, 1, 1, 1, 2])
    test = torch.tensor([[0.4], [11.2], [1.9], [6.0]])
    assert knn.knn_predict(train, labels, test, 1).tolist() == [0, 1, 1, 1]
    assert knn.knn_predict(train, labels, test, 3).tolist() == [0, 1, 0, 1]
    # k = 2 ties one vote each: the nearer neighbour's class wins
    assert knn.knn_predict(train, labels, torch.tensor([[1.4], [1.6], [11.6]]), 2).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="k: must be in 1..6"):
        knn.knn_predict(train, labels, test, 7)


def test_pca_baseline_on_a_toy_set():
    """Two classes apart along one direction, and 40 noise dimensions: the first principal component (fitted on
    the training part) is that direction, and kNN on it classifies the test part exactly."""
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(400) % 2
    x = torch.randn(400, 41, generator=gen)
    x[:, 0] = (2 * y - 1) * 10 + 0.1 * torch.randn(400, generator=gen)
    x[:, 1:] *= 6
    train_f, test_f = knn.pca_features(x[:300].view(300, 1, 41, 1), x[300:].view(100, 1, 41, 1), 1)
    assert train_f.shape == (300, 1) and test_f.shape == (100, 1)
    assert (knn.knn_predict(train_f, y[:300], test_f, 3) == y[300:]).all()
    assert torch.corrcoef(torch.stack([train_f[:, 0], x[:300, 0]]))[0, 1].abs() > 0.95


def test_direct_task_loss():
    """The forward value is the number of wrong-class candidates among the k nearest (sigma = 0), and the
    gradient pulls a right-class candidate just outside the k nearest towards the query."""
    eq = torch.zeros(1, 1)
    ec = torch.tensor([[1.0], [2.0], [3.0], [4.0]], requires_grad=True)
    yq, yc = torch.tensor([0]), torch.tensor([1, 0, 1, 0])
    eps = torch.tensor(-1.0)
    loss = knn.direct_task_loss(eq, ec, yq, yc, 2, None, eps, torch.Generator().manual_seed(0))
    assert loss.item() == 1.0  # the two nearest: classes 1 and 0
    loss.backward()
    # a descent step moves candidate 3 (class 0) towards the query at 0 and candidate 0 (class 1) away
    assert ec.grad[3, 0] > 0 and ec.grad[0, 0] < 0 and ec.grad[2, 0] == 0
    assert eps.item() < -1.0  # |eps| grew until the loss-augmented top-2 changed (scores 1 apart)


def test_knn_paper_numbers_and_errors():
    entry = dict(dataset="mnist5k", k=3, method="neuralsort")
    assert knn._paper(entry) == {"SoftSort (best k)": 99.5, "Cohen Indelman-Hazan": 99.5}
    assert knn._paper(dict(entry, dataset="cifar10", k=9, method="direct_learned")) == {"Cohen Indelman-Hazan": 91.7}
    assert knn._paper(dict(entry, k=2, method="direct_sigma0")) is None
    with pytest.raises(ValueError, match="methods: 'ot_sort'"):
        knn.check(dict(knn.SCALES["smoke"], methods=["ot_sort"]))
    with pytest.raises(ValueError, match="ks: every k must be in 1..candidates = 20"):
        knn.check(dict(knn.SCALES["smoke"], ks=[21]))


def test_embeddings_shapes():
    cfg = knn.SCALES["smoke"]
    conv = knn.make_model(cfg, "mnist5k", torch.zeros(2, 1, 28, 28))
    assert conv(torch.rand(3, 1, 28, 28)).shape == (3, cfg["embed"])
    res = knn.make_model(cfg, "fashion_mnist", torch.zeros(2, 1, 28, 28))
    assert res(torch.rand(2, 1, 28, 28)).shape == (2, 512)
    assert res(torch.rand(2, 3, 32, 32)).shape == (2, 512)


def test_relaxed_subset_sums_to_k_and_hardens_to_the_top_k():
    keys = torch.tensor([[0.3, -1.0, 2.0, 0.9, 0.0]], dtype=torch.float64)
    soft = knn.relaxed_subset(keys, 2, 1.0)
    assert torch.allclose(soft.sum(-1), torch.tensor([2.0], dtype=torch.float64))
    assert (soft > 0).all() and (soft < 1).all()
    assert torch.allclose(knn.relaxed_subset(keys, 2, 1e-3), torch.tensor([[0, 0, 1, 1, 0]], dtype=torch.float64))


def test_autoencoder_and_classifier_baselines_train():
    cfg = dict(knn.SCALES["smoke"], ae_steps=3, steps=3)
    images = torch.rand(40, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(40) % 10
    code = knn.embed(knn.train_autoencoder(cfg, images, 0), images)
    assert code.shape == (40, 50) and (code >= 0).all()
    logits = knn.embed(knn.train_classifier(cfg, "mnist5k", (images, labels), 0), images)
    assert logits.shape == (40, 10) and torch.isfinite(logits).all()


def test_relaxed_subset_gradient_stays_finite_when_a_key_dominates():
    keys = torch.tensor([[0.0, -500.0, 300.0, 1.0]], dtype=torch.float32, requires_grad=True)
    knn.relaxed_subset(keys, 3, 1.0).pow(2).sum().backward()
    assert torch.isfinite(keys.grad).all()
