"""Exact solvers (docs/math/training.md §6.3, §7): argmax_onehot, topk_khot, sort_perm, assignment, checked by
enumeration, against scipy's linear_sum_assignment, and for their tie rules and errors."""

import itertools
import math

import pytest
import torch
from relaxops import _ext
from relaxops.training import argmax_onehot, assignment, sort_perm, topk_khot
from relaxops.training import ops as training_ops
from testing import opcheck_calls

scipy_optimize = pytest.importorskip("scipy.optimize")

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
BACKENDS = ["reference"] + (["cpu"] if _ext.has_cpu() else [])


def _objective(theta, P):
    """sum_i theta[i, perm_i] in float64, summed in row order (as the enumeration sums)."""
    perm = P.argmax(-1, keepdim=True)
    return theta.double().gather(-1, perm).squeeze(-1).sum(-1)


def _scipy_objective(theta):
    """The objective of scipy's maximum-weight matching of every item, summed as _objective sums."""
    d = theta.shape[-1]
    x = theta.double().reshape(-1, d, d)
    P = torch.zeros_like(x)
    for b, item in enumerate(x.numpy()):
        r, c = scipy_optimize.linear_sum_assignment(item, maximize=True)
        P[b, torch.from_numpy(r), torch.from_numpy(c)] = 1.0
    return _objective(x, P).reshape(theta.shape[:-2])


def _is_perm(P):
    return bool(((P == 0) | (P == 1)).all() and (P.sum(-1) == 1).all() and (P.sum(-2) == 1).all())


# --- argmax / top-k ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_onehot_enumeration_and_ties(dtype):
    g = torch.Generator().manual_seed(0)
    theta = torch.randint(0, 3, (50, 6), generator=g).to(dtype)  # many ties
    out = argmax_onehot(theta)
    assert out.dtype == dtype and not out.requires_grad
    for row, o in zip(theta.tolist(), out.tolist()):
        best = max(row)
        assert o == [1.0 if i == row.index(best) else 0.0 for i in range(6)]  # the lowest index of the maximum
    x = torch.randn(2, 3, 7, requires_grad=True)
    y = argmax_onehot(x)
    assert y.shape == (2, 3, 7) and not y.requires_grad
    assert torch.equal(y.argmax(-1), x.argmax(-1))


@pytest.mark.parametrize("n", [1, 2, 5, 10])
def test_topk_khot_enumeration(n):
    g = torch.Generator().manual_seed(n)
    for theta in (
        torch.randn(8, n, generator=g, dtype=torch.float64),
        torch.randint(0, 3, (8, n), generator=g).double(),
    ):
        for k in range(n + 1):
            out = topk_khot(theta, k)
            assert bool((out.sum(-1) == k).all())
            for row, o in zip(theta.tolist(), out.tolist()):
                # the best subset; among the best, the lexicographically smallest index set (ties -> lowest indices)
                best = max(itertools.combinations(range(n), k), key=lambda S: (sum(row[i] for i in S), [-i for i in S]))
                assert [i for i in range(n) if o[i] == 1.0] == list(best)


def test_topk_khot_dtypes_and_leading_dims():
    x = torch.randn(2, 3, 9, dtype=torch.float64)
    for dtype in DTYPES:
        y = topk_khot(x.to(dtype), 4)
        assert y.dtype == dtype and y.shape == (2, 3, 9)
        assert bool((y.sum(-1) == 4).all())
    assert topk_khot(torch.zeros(0, 5), 2).shape == (0, 5)


# --- sort_perm ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("descending", [True, False])
def test_sort_perm_sorts_and_is_stable(descending):
    s = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0]])
    P = sort_perm(s, descending=descending)
    order = P[0].argmax(0).tolist()  # order[j] = i of the j-th position
    assert order == ([0, 2, 3, 1, 4] if descending else [1, 4, 3, 0, 2])
    x = torch.randn(4, 3, 11, dtype=torch.float64)
    P = sort_perm(x, descending=descending)
    assert _is_perm(P)
    assert torch.equal((P.transpose(-1, -2) @ x.unsqueeze(-1)).squeeze(-1), x.sort(-1, descending=descending).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
def test_sort_perm_equals_assignment_with_decreasing_c(n, backend):
    g = torch.Generator().manual_seed(n)
    s = torch.randn(6, n, generator=g, dtype=torch.float64)
    c = -(torch.linspace(0, 1, n, dtype=torch.float64) ** 1.5) + 0.3  # strictly decreasing
    theta = s.unsqueeze(-1) * c
    assert torch.equal(sort_perm(s), assignment(theta, backend=backend))
    assert torch.equal(sort_perm(s, descending=False), assignment(-theta, backend=backend))


# --- assignment --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6])
def test_assignment_enumeration(d, backend):
    g = torch.Generator().manual_seed(d)
    perms = torch.tensor(list(itertools.permutations(range(d))))
    for theta in (
        torch.randn(10, d, d, generator=g, dtype=torch.float64),
        torch.randint(0, 3, (10, d, d), generator=g).double(),
    ):
        P = assignment(theta, backend=backend)
        assert _is_perm(P)
        # the objective of every one of the d! permutations: the returned one is the best
        all_vals = theta[:, torch.arange(d), perms].sum(-1)  # [10, d!]
        assert torch.equal(_objective(theta, P), all_vals.max(-1).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [1, 2, 3, 7, 16, 33])
def test_assignment_matches_scipy(d, backend):
    g = torch.Generator().manual_seed(100 + d)
    B = 4 if backend == "reference" else 24
    for theta in (
        torch.randn(B, d, d, generator=g, dtype=torch.float64),
        torch.rand(B, d, d, generator=g, dtype=torch.float64) * 1e3 - 500,
        torch.randint(0, 3, (B, d, d), generator=g).double(),  # ties: the objective must agree
        torch.randint(-1000, 1000, (B, d, d), generator=g).double(),
    ):
        P = assignment(theta, backend=backend)
        assert P.dtype == theta.dtype and _is_perm(P)
        got, want = _objective(theta, P), _scipy_objective(theta)
        if theta.round().equal(theta):
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_assignment_dtypes(dtype, backend):
    g = torch.Generator().manual_seed(1)
    theta = torch.randn(5, 9, 9, generator=g).to(dtype)
    P = assignment(theta, backend=backend)
    assert P.dtype == dtype and _is_perm(P) and not P.requires_grad
    torch.testing.assert_close(_objective(theta, P), _scipy_objective(theta), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_assignment_shapes(backend):
    theta = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    P = assignment(theta, backend=backend)
    assert P.shape == (2, 3, 5, 5) and not P.requires_grad
    assert torch.equal(_objective(theta.detach(), P), _scipy_objective(theta.detach()))
    assert assignment(torch.randn(0, 4, 4), backend=backend).shape == (0, 4, 4)
    assert assignment(torch.randn(3, 0, 0), backend=backend).shape == (3, 0, 0)
    assert assignment(torch.randn(2, 0, 3, 3), backend=backend).shape == (2, 0, 3, 3)
    assert torch.equal(assignment(torch.randn(1, 1), backend=backend), torch.ones(1, 1))
    t = torch.randn(4, 6, 6, dtype=torch.float64)
    strided = t.transpose(-1, -2)  # not contiguous
    assert torch.equal(_objective(strided, assignment(strided, backend=backend)), _scipy_objective(strided))


def test_assignment_theta_zero_tie_rule_is_deterministic():
    for backend in BACKENDS:
        P = assignment(torch.zeros(3, 5, 5), backend=backend)
        assert _is_perm(P) and torch.equal(P, assignment(torch.zeros(3, 5, 5), backend=backend))
    # the reference inserts rows in order and takes the lowest free column: the identity at theta = 0
    assert torch.equal(assignment(torch.zeros(5, 5), backend="reference"), torch.eye(5))


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
def test_assignment_cpu_kernel_writes_every_entry_and_opcheck():
    theta = torch.randn(7, 12, 12)
    P = training_ops.assignment_matrix(theta, "cpu")  # torch.empty_like output: the kernel writes every entry
    assert P.dtype == torch.float32 and _is_perm(P)
    # every default test of opcheck on the op the public call makes (no gradient: the solver is piecewise constant)
    assert opcheck_calls(assignment, theta, backend="cpu", backward=False) == ["relaxops::assignment_matrix"]
    x = torch.randn(5, 4, 4, dtype=torch.float64)
    x[3, 0, 0] = math.nan
    with pytest.raises(ValueError, match="1 of the 5 matrices"):
        training_ops.assignment_matrix(x, "cpu")


def test_bad_input_errors():
    with pytest.raises(TypeError, match="theta"):
        argmax_onehot(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="theta"):
        argmax_onehot(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="k must be"):
        topk_khot(torch.randn(5), 6)
    with pytest.raises(ValueError, match="k must be"):
        topk_khot(torch.randn(5), -1)
    with pytest.raises(TypeError, match="s must"):
        sort_perm([1.0, 2.0])
    with pytest.raises(TypeError, match="descending"):
        sort_perm(torch.randn(3), descending="yes")
    with pytest.raises(ValueError, match="square"):
        assignment(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="at least 2"):
        assignment(torch.randn(3))
    with pytest.raises(TypeError, match="theta"):
        assignment(torch.randint(0, 3, (3, 3)))
    for bad in (math.nan, math.inf, -math.inf):
        x = torch.randn(2, 4, 4)
        x[1, 2, 3] = bad
        with pytest.raises(ValueError, match="finite"):
            assignment(x)
    with pytest.raises(NotImplementedError, match="no Triton assignment kernel"):
        assignment(torch.randn(3, 3), backend="triton")
    with pytest.raises(ValueError, match="backend"):
        assignment(torch.randn(3, 3), backend="fast")
    with pytest.raises(ValueError, match="theta"):
        training_ops.assignment_matrix(torch.randn(2, 3, 4), "cpu")
    with pytest.raises(ValueError, match="backend"):
        training_ops.assignment_matrix(torch.randn(2, 3, 3), "reference")
