"""High-precision oracle of the smooth top-k SVM loss: enumeration of the k-subsets in decimal arithmetic."""

import itertools
from decimal import Context, Decimal, localcontext

import torch

_CTX = Context(prec=80, Emin=-(10**9), Emax=10**9)


def _lse_and_marginals(s, members, offsets, k, t):
    """``log sum_Y exp(sum s_Y / (k t) + offset_Y)`` and ``P(c in Y)`` under those weights, for every class c."""
    values = [sum(s[c] for c in Y) / k / t + o for Y, o in zip(members, offsets)]
    top = max(values)
    weights = [(v - top).exp() for v in values]
    total = sum(weights)
    marginals = [sum(w for w, Y in zip(weights, members) if c in Y) / total for c in range(len(s))]
    return top + total.ln(), marginals


def exact_loss_and_grad(scores: torch.Tensor, labels: torch.Tensor, k: int, tau: float, alpha: float = 1.0):
    """Per sample ``tau LSE_Y((alpha [y not in Y] + mean s_Y) / tau) - tau LSE_{Y holding y}(mean s_Y / tau)`` over
    the k-subsets ``Y`` and its gradient ``(P(c in Y) - P_y(c in Y)) / k`` (P: the two softmax distributions), with
    80 significant digits (each float score converts exactly, so a 1e30 next to a 1 keeps both). Returns float64
    ``[B]`` and ``[B, n]``; for finite scores and small ``n`` only."""
    B, n = scores.shape
    subsets = list(itertools.combinations(range(n), k))
    losses, grads = [], []
    with localcontext(_CTX):
        t, a = Decimal(tau), Decimal(alpha)
        for row, y in zip(scores.double().tolist(), labels.tolist()):
            s = [Decimal(v) for v in row]
            # values (alpha [y not in Y] + mean s_Y) / tau of all subsets, and of those holding y
            everything, p_all = _lse_and_marginals(s, subsets, [(0 if y in Y else a) / t for Y in subsets], k, t)
            with_y = [Y for Y in subsets if y in Y]
            holding, p_y = _lse_and_marginals(s, with_y, [0] * len(with_y), k, t)
            losses.append(float(t * (everything - holding)))
            grads.append([float((pa - py) / k) for pa, py in zip(p_all, p_y)])
    return torch.tensor(losses, dtype=torch.float64).reshape(B), torch.tensor(grads, dtype=torch.float64).reshape(B, n)
