"""Our ranking losses against the peers a user would pick (when installed): allRank's neuralNDCG and approxNDCGLoss
(allRank 1.4.3, its padded lists marked by the relevance -1) and a Spearman loss written on torchsort.soft_rank
(torchsort 0.1.10)."""

import pytest
import torch
from relaxops import losses


def _batch(seed=0, B=5, n=9):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, n, generator=g)
    rel = torch.randint(0, 5, (B, n), generator=g).float()
    rel[:, 0] = 1  # every list has a relevant entry (allRank's approxNDCG counts the others in its mean)
    real = torch.rand(B, n, generator=g) < 0.7
    real[:, 0] = True
    real[0] = True  # a full list
    return x, rel, real  # real: True on the real entries, anywhere in the list


def _allrank():
    pytest.importorskip("allrank")
    from relaxops.bench.ranking import allrank_losses

    return allrank_losses()


@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("tau", [1.0, 0.3])
@pytest.mark.parametrize("padded", [False, True])
def test_neural_ndcg_equals_allrank(k, tau, padded):
    x, rel, real = _batch()
    peer = _allrank()
    xa = x.clone().requires_grad_()
    xo = x.clone().requires_grad_()
    if padded:  # allRank reads the pads off the relevance (-1), and its NeuralSort expects them at the end
        lengths = real.sum(-1)
        real = torch.arange(x.shape[-1]) < lengths.unsqueeze(-1)
        theirs = peer.neuralNDCG(xa, rel.masked_fill(~real, -1.0), temperature=tau, k=k)
        ours = losses.neural_ndcg_loss(xo, rel, k, lengths=lengths, tau=tau)
    else:
        theirs = peer.neuralNDCG(xa, rel, temperature=tau, k=k)
        ours = losses.neural_ndcg_loss(xo, rel, k, tau=tau)
    assert ours.item() - 1 == pytest.approx(theirs.item(), abs=2e-6)  # theirs is -NDCG, ours 1 - NDCG
    theirs.backward()
    ours.backward()
    assert torch.allclose(xo.grad, xa.grad, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 4.0])
@pytest.mark.parametrize("padded", [False, True])
def test_approx_ndcg_equals_allrank(alpha, padded):
    x, rel, real = _batch(seed=1)
    peer = _allrank()
    xa = x.clone().requires_grad_()
    xo = x.clone().requires_grad_()
    kw = dict(mask=real) if padded else {}
    theirs = peer.approxNDCGLoss(xa, rel.masked_fill(~real, -1.0) if padded else rel, alpha=alpha)
    ours = losses.approx_ndcg_loss(xo, rel, ranker="pairwise", temperature=1 / alpha, **kw)
    assert ours.item() - 1 == pytest.approx(theirs.item(), abs=2e-6)
    theirs.backward()
    ours.backward()
    assert torch.allclose(xo.grad, xa.grad, atol=1e-5)


def test_spearman_equals_one_written_on_torchsort():
    torchsort = pytest.importorskip("torchsort")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 11, generator=g, dtype=torch.float64)
    y = torch.randn(4, 11, generator=g, dtype=torch.float64)

    def theirs(pred, target):  # the Spearman loss of torchsort's README, per row, with exact target ranks
        pred = torchsort.soft_rank(pred, regularization_strength=0.5)
        target = torchsort.soft_rank(target, regularization_strength=1e-3)
        pred, target = pred - pred.mean(-1, keepdim=True), target - target.mean(-1, keepdim=True)
        pred, target = pred / pred.norm(dim=-1, keepdim=True), target / target.norm(dim=-1, keepdim=True)
        return (1 - (pred * target).sum(-1)).mean()

    xa = x.clone().requires_grad_()
    xo = x.clone().requires_grad_()
    a, o = theirs(xa, y), losses.spearman_loss(xo, y, regularization_strength=0.5)
    assert o.item() == pytest.approx(a.item(), abs=1e-12)
    a.backward()
    o.backward()
    assert torch.allclose(xo.grad, xa.grad, atol=1e-12)
