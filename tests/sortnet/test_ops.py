"""The registered torch.library ops: opcheck, torch.compile, autograd composition."""

import pytest
import relaxops
import torch
from relaxops.sortnet import ops
from testing import KERNEL_BACKEND_DEVICE, gapped, opcheck_calls

from .test_rank import rank_call
from .test_sort import sort_call
from .test_topk import topk_call


def op_cases(backend, device):
    """Cases of the reference checks (their calls: tests/sortnet/test_sort.py, test_topk.py, test_rank.py) and the
    ops each call makes, forward and backward: sort with and without X, a bi-directional top-k (reversed network,
    the last k columns, no gradient of the sorted values) and ranks ascending and descending."""
    x = gapped((3, 7), device=device)
    matrix, rank = {"values_fwd", "matrix_fwd", "matrix_bwd", "values_bwd"}, {"rank_fwd", "rank_bwd"}
    return [
        (sort_call(x, backend, "bitonic", "cauchy"), matrix),
        (sort_call(x, backend, "odd_even", "logistic_phi", return_matrix=False), {"values_fwd", "values_bwd"}),
        (topk_call(x, 3, backend, "splitter_selection", "optimal"), matrix),
        (rank_call(x, backend, "bitonic", "cauchy"), rank),
        (rank_call(x[:, :5], backend, "odd_even", "logistic", descending=True, steepness=2.0), rank),
    ]


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """The full opcheck (every default test_util, test_aot_dispatch_dynamic included) of the ops of each case."""
    for (fn, args, kwargs), want in op_cases(backend, device):
        names = opcheck_calls(fn, *args, **kwargs)
        assert {name.removeprefix("relaxops::sortnet_") for name in names} == want, names


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] != "triton"])
def test_torch_compile_fullgraph(backend, device):
    def f(x):
        s, X = relaxops.sort(x, "bitonic", "cauchy", 5.0, backend=backend)
        return (s * torch.arange(9.0, device=x.device)).sum() + X.diagonal(dim1=-2, dim2=-1).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 9, device=device, requires_grad=True)
    (g1,) = torch.autograd.grad(f(x), x)
    y = x.detach().clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(compiled(y), y)
    torch.testing.assert_close(g1, g2)


def test_values_backward_matches_autograd_of_alpha_path():
    """The alpha output is differentiable: a loss on alpha alone reaches x through the relaxation."""
    x = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    _, d, alpha = ops.values_fwd(x, "odd_even", 0, 2.0, 0.25, "cpu")
    assert not d.requires_grad or d.grad_fn is not None
    torch.autograd.gradcheck(lambda v: ops.values_fwd(v, "odd_even", 0, 2.0, 0.25, "cpu")[2], (x,))
