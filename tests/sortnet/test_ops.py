"""The registered torch.library ops: opcheck, torch.compile, autograd composition."""

import pytest
import relaxops
import torch
from relaxops.sortnet import ops
from testing import KERNEL_BACKEND_DEVICE


def op_cases(backend, device):
    x = torch.randn(3, 7, dtype=torch.float64, device=device)
    s, d, alpha = ops.values_fwd(x, "bitonic", 4, 3.0, 0.25, backend)
    X = ops.matrix_fwd(alpha, 7, "bitonic", 0, backend)
    return [
        (ops.values_fwd, (x.requires_grad_(True), "bitonic", 4, 3.0, 0.25, backend)),
        (ops.values_bwd, (torch.randn_like(s), torch.randn_like(alpha), d, alpha, 7, "bitonic", 4, 3.0, 0.25, backend)),
        (ops.values_bwd, (None, None, d, alpha, 7, "bitonic", 4, 3.0, 0.25, backend)),
        (ops.matrix_fwd, (alpha.detach().requires_grad_(True), 7, "bitonic", 0, backend)),
        (ops.matrix_fwd, (alpha.detach().requires_grad_(True), 7, "reversed:bitonic", 4, backend)),
        (ops.matrix_bwd, (torch.randn_like(X), alpha, 7, "bitonic", 0, backend)),
        (ops.matrix_bwd, (torch.randn_like(X[:, 4:]), alpha, 7, "reversed:bitonic", 4, backend)),
    ]


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """The full opcheck (every default test_util, test_aot_dispatch_dynamic included)."""
    for op, args in op_cases(backend, device):
        torch.library.opcheck(op, args)


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
