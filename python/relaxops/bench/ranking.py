"""Ranking cases on padded batches: rows of different lengths in one call with ``lengths=`` against a Python loop
over the rows (what a user of torchsort writes today, and the same loop over our own op), and the NDCG losses of
``relaxops.losses`` against allRank's (1.4.3).

(a) ``soft_rank`` / ``soft_sort`` of ``x [B, n]`` float32, B = 64, row ``b`` holding ``L_b`` real entries, ``L_b``
uniform in [n / 4, n] (fixed seed), L2 regularisation of strength 1.0, loss ``sum(out * g)`` over the real entries:
``cpu`` is one call with ``lengths=``; ``cpu-loop`` and ``torchsort-loop`` call the op on ``x[b, :L_b]`` row by row.
(b) ``neural_ndcg`` / ``approx_ndcg``: scores ``[B, n]`` float32 and graded relevance in {0..4} of the same padded
rows; ours (``cpu``) with ``lengths=`` (NeuralSort at ``tau = 1`` and 50 Sinkhorn iterations at tolerance 1e-6;
ApproxNDCG with the pairwise sigmoid ranks at temperature 1, the same computation as allRank's, and as
``cpu-soft_rank`` with ``soft_rank`` at strength 1.0), allRank's ``neuralNDCG`` / ``approxNDCGLoss`` with its
padding value -1 on the pads. All fwd+bwd on CPU; the losses' values agree (tests/ranking/test_peers.py).
"""

from __future__ import annotations

import importlib
import sys
import types

import torch

import relaxops
from relaxops._backend import unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "ranking"
BATCH = 64
STRENGTH = 1.0
PADDED_Y = -1.0  # allRank's padding value of the relevance


def allrank_losses():
    """allRank's ``allrank.models.losses`` module. Its package imports its data loading (torchvision, scikit-learn)
    and file utilities (gcsfs, pinned old versions) on the way to the losses, which need from them only the
    padding value (-1) and the device choice: where that import fails, those two modules are provided here (in
    ``sys.modules``) and the import is retried."""
    try:
        return importlib.import_module("allrank.models.losses")
    except ImportError:
        pass
    for name, attrs in (
        ("allrank.data.dataset_loading", dict(PADDED_Y_VALUE=-1)),
        ("allrank.models.model_utils", dict(get_torch_device=lambda: torch.device("cpu"))),
    ):
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module
    return importlib.import_module("allrank.models.losses")


def padded_batch(n: int, batch: int = BATCH, seed: int = 0):
    """``(x [batch, n] float32, lengths [batch] int64 uniform in [n / 4, n], relevance [batch, n] in {0..4},
    cotangent [batch, n])``, fixed by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, generator=g)
    lengths = torch.randint(max(1, n // 4), n + 1, (batch,), generator=g)
    relevance = torch.randint(0, 5, (batch, n), generator=g).float()
    return x, lengths, relevance, torch.randn(batch, n, generator=g)


def _case(op, n, default):
    params = dict(n=n, batch=BATCH, lengths="U[n/4, n]", dtype="float32")
    goal = ("torchsort-loop", 1.0) if op in ("soft_rank", "soft_sort") else ("allRank", 1.0)
    add_case(Case(FAMILY, op, f"n={n} B={BATCH} padded", params, "fwd+bwd", "cpu", default, None, goal, BATCH, "n"))


def _sorting(case) -> bool:
    return case.op in ("soft_rank", "soft_sort")


def _ours_lengths(case):
    x, lengths, rel, cot = padded_batch(case.params["n"], case.params["batch"])
    x.requires_grad_()
    if _sorting(case):
        fn = getattr(relaxops, case.op)
        return (lambda: (fn(x, "l2", STRENGTH, lengths=lengths, backend="cpu"),)), [x], (cot,)
    if case.op == "neural_ndcg":
        return (lambda: (relaxops.losses.neural_ndcg_loss(x, rel, lengths=lengths, tau=1.0),)), [x], (torch.ones(()),)
    return (
        (lambda: (relaxops.losses.approx_ndcg_loss(x, rel, lengths=lengths, ranker="pairwise", temperature=1.0),)),
        [x],
        (torch.ones(()),),
    )


def _rows_of(case):
    x, lengths, _, cot = padded_batch(case.params["n"], case.params["batch"])
    rows = [x[b, :L].clone().requires_grad_() for b, L in enumerate(lengths.tolist())]
    return rows, tuple(cot[b, :L] for b, L in enumerate(lengths.tolist()))


def _ours_loop(case):
    """Our op on each list alone (unpadded), one call per list: what a padded batch saves."""
    rows, cots = _rows_of(case)
    if _sorting(case):
        fn = getattr(relaxops, case.op)
        return (lambda: tuple(fn(r, "l2", STRENGTH, backend="cpu") for r in rows)), rows, cots
    _, lengths, rel, _ = padded_batch(case.params["n"], case.params["batch"])
    rels = [rel[b, :L] for b, L in enumerate(lengths.tolist())]
    if case.op == "neural_ndcg":
        fn = lambda r, t: relaxops.losses.neural_ndcg_loss(r, t, tau=1.0)  # noqa: E731
    else:
        fn = lambda r, t: relaxops.losses.approx_ndcg_loss(r, t, ranker="pairwise", temperature=1.0)  # noqa: E731
    return (lambda: tuple(fn(r, t) for r, t in zip(rows, rels))), rows, tuple(torch.ones(()) for _ in rows)


def _torchsort_loop(case):
    import torchsort

    rows, cots = _rows_of(case)
    fn = getattr(torchsort, case.op)
    return (lambda: tuple(fn(r.unsqueeze(0), "l2", STRENGTH)[0] for r in rows)), rows, cots


def _ours_soft_rank(case):
    x, lengths, rel, _ = padded_batch(case.params["n"], case.params["batch"])
    x.requires_grad_()
    loss = relaxops.losses.approx_ndcg_loss
    return (
        (lambda: (loss(x, rel, lengths=lengths, ranker="soft_rank", regularization_strength=STRENGTH),)),
        [x],
        (torch.ones(()),),
    )


def _allrank(case):
    losses = allrank_losses()
    x, lengths, rel, _ = padded_batch(case.params["n"], case.params["batch"])
    x.requires_grad_()
    pad = torch.arange(x.shape[-1]) >= lengths.unsqueeze(-1)
    y = rel.masked_fill(pad, PADDED_Y)
    if case.op == "neural_ndcg":
        return (lambda: (losses.neuralNDCG(x, y, temperature=1.0),)), [x], (torch.ones(()),)
    return (lambda: (losses.approxNDCGLoss(x, y, alpha=1.0),)), [x], (torch.ones(()),)


def _only(ops, extra=None):
    def skip(case):
        if case.op not in ops:
            return f"runs only {', '.join(ops)}"
        return extra(case) if extra else None

    return skip


_SORTS = ("soft_rank", "soft_sort")
_LOSSES = ("neural_ndcg", "approx_ndcg")
add_provider(FAMILY, Provider("cpu", _ours_lengths, skip=lambda case: unavailable_reason("cpu", torch.device("cpu"))))
add_provider(FAMILY, Provider("cpu-loop", _ours_loop))
add_provider(FAMILY, Provider("torchsort-loop", _torchsort_loop, True, _only(_SORTS, lambda c: missing("torchsort"))))
add_provider(FAMILY, Provider("cpu-soft_rank", _ours_soft_rank, skip=_only(("approx_ndcg",))))
add_provider(FAMILY, Provider("allRank", _allrank, True, _only(_LOSSES, lambda c: missing("allrank"))))

for _op in _SORTS:
    for _n in (128, 1024):
        _case(_op, _n, default=_op == "soft_rank")
for _op in _LOSSES:
    for _n in (32, 128):
        _case(_op, _n, default=True)
