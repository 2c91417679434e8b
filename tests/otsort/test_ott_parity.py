"""Parity with ott-jax 0.6.0's ``ott.tools.soft_sort`` (ranks, sort, top-k sort, quantile, topk_mask) at the same
epsilon, squashing and targets. ott runs its default solver (float32, absolute L1 column error < 1e-3); ours runs
to convergence in float64, so the differences are ott's truncation: its L1 marginal error of 1e-3 moves a rank
(values in [0, n - 1], plan entries ~ 1 / n) by about 1e-3 n at most and a sorted value by about 1e-3 times the
value range per target weight 1 / m, i.e. ~1e-3 m; the bounds below are 3 times that."""

import numpy as np
import pytest
import torch
from relaxops import ot_quantile, ot_rank, ot_sort, ot_topk
from relaxops.bench.otsort import ott_squash

ott = pytest.importorskip("ott", reason="ott-jax is not installed: pip install ott-jax")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from ott.tools import soft_sort  # noqa: E402

EPS = 1e-2
OURS = dict(
    epsilon=EPS, epsilon0=None, squashing=ott_squash, tolerance=1e-10, max_iterations=20000, backend="reference"
)


def theirs(fn, x, **kw):
    # jit-compiled as one program: op by op, JAX compiles each primitive and loop of ott's solver apart (~5x slower)
    run = jax.jit(lambda v: fn(v, axis=-1, epsilon=EPS, **kw))
    return torch.from_numpy(np.asarray(run(jnp.asarray(x.float().numpy()))).copy()).double()


@pytest.mark.parametrize("n", [5, 33, 100])
def test_ranks_and_sort(n):
    x = torch.randn(3, n, dtype=torch.float64)
    assert (ot_rank(x, **OURS) - theirs(soft_sort.ranks, x)).abs().max() <= 3e-3 * n
    rng = (x.amax(-1) - x.amin(-1)).max()
    assert (ot_sort(x, **OURS) - theirs(soft_sort.sort, x)).abs().max() <= 3e-3 * n * rng


@pytest.mark.parametrize("n,k", [(10, 3), (50, 5)])
def test_topk_sort_and_mask(n, k):
    x = torch.randn(3, n, dtype=torch.float64)
    rng = (x.amax(-1) - x.amin(-1)).max()
    ours = ot_topk(x, k, **OURS).values.flip(-1)  # ott: the top-k in ascending order
    assert (ours - theirs(soft_sort.sort, x, topk=k)).abs().max() <= 3e-3 * n * rng
    # ott's mask solves a 2-target problem b = (1 - k / n, k / n): p = mass on the top target, read off our ranks
    r = ot_rank(x, b=torch.tensor([1 - k / n, k / n], dtype=torch.float64), **OURS)
    mask = (r + 1 - n + k) / k
    assert (mask - theirs(soft_sort.topk_mask, x, k=k)).abs().max() <= 3e-3 * n / k


@pytest.mark.parametrize("q", [[0.5], [0.8, 0.2, 0.5]])
def test_quantile(q):
    x = torch.randn(3, 60, dtype=torch.float64)
    rng = (x.amax(-1) - x.amin(-1)).max()
    ours = ot_quantile(x, q, **OURS)
    them = theirs(soft_sort.quantile, x, q=jnp.asarray(q))
    assert ours.shape == them.shape
    assert (ours - them).abs().max() <= 3e-3 * 2 * len(q) * rng / 0.02


def test_unsquashed_offset_rows_are_otts_unshifted_ones():
    """squashing="none" is ott's ``squashing_fun=identity``: targets on [0, 1], an absolute epsilon. The plan is
    invariant under a shift of x, so our ranks of x + 100 are ott's of x, and our sorted values ott's plus 100 (ott
    itself fails on the offset rows: it resolves its float32 cost (x + 100 - y)^2 / epsilon ~ 1e6 to 0.06 only)."""
    n = 9
    x = torch.rand(3, n, dtype=torch.float64)  # on [0, 1], where ott's cost is well resolved
    kw = dict(OURS, squashing="none", tolerance=1e-6)  # ott's own error is ~1e-3
    ident = lambda v: v  # noqa: E731
    assert (ot_rank(x + 100, **kw) - theirs(soft_sort.ranks, x, squashing_fun=ident)).abs().max() <= 3e-3 * n
    rng = (x.amax(-1) - x.amin(-1)).max()
    assert (ot_sort(x + 100, **kw) - 100 - theirs(soft_sort.sort, x, squashing_fun=ident)).abs().max() <= 3e-3 * n * rng
