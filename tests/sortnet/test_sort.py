"""relaxops.sort / rank on every backend against the float64 reference: outputs, gradients, properties."""

import math

import pytest
import relaxops
import torch
from relaxops.sortnet import reference
from relaxops.sortnet.networks import get_network
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    available_backends,
    gapped,
    outputs_and_grads,
    relaxation_cases,
)

NETWORKS = ("bitonic", "odd_even", "bitonic_original")
SIZES = (1, 2, 3, 5, 7, 8, 16, 33, 100)


def sort_call(x, backend, network, relaxation, steepness=3.0, **kw):
    """A case's call, (function, args, kwargs): what the reference checks run and the op checks
    (tests/sortnet/test_ops.py) check the ops of."""
    return relaxops.sort, (x, network, relaxation, steepness), dict(backend=backend, **kw)


def sort_grads(x, backend, network, relaxation, steepness=3.0, **kw):
    """Sorted values, X and the input gradient of a random linear functional of both (``outputs_and_grads``)."""
    fn, args, kwargs = sort_call(x, backend, network, relaxation, steepness, **kw)
    return outputs_and_grads(fn, *args, **kwargs)


def reference_cases():
    for p, relaxation, n in relaxation_cases(KERNEL_BACKEND_DEVICE, SIZES):
        backend, device = p.values
        yield pytest.param(backend, device, relaxation, n, marks=p.marks, id=f"{n}-{relaxation}-{backend}-{device}")


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("backend,device,relaxation,n", list(reference_cases()))
def test_matches_reference(backend, device, network, relaxation, n):
    x = gapped((3, n))
    ref = sort_grads(x, "reference", network, relaxation)
    for a, b, what in zip(sort_grads(x.to(device), backend, network, relaxation), ref, ("sorted", "X", "grad")):
        assert_close(a.cpu(), b, torch.float64, scale=max(1.0, n / 10), msg=f"{what} float64")
    ref32 = sort_grads(x.float(), "reference", network, relaxation)
    out = sort_grads(x.to(device, torch.float32), backend, network, relaxation)
    for a, r, b, what in zip(out, ref32, ref, ("sorted", "X", "grad")):
        assert_as_accurate_as_reference(a.cpu(), r, b, torch.float32, scale=max(1.0, n / 10), msg=f"{what} float32")


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7), (1, 1, 16)])
def test_batch_shapes(backend, device, shape):
    x = gapped(shape) if shape[0] else torch.zeros(shape, dtype=torch.float64)
    ref = sort_grads(x, "reference", "bitonic", "cauchy")
    out = sort_grads(x.to(device), backend, "bitonic", "cauchy")
    for a, b in zip(out, ref):
        assert a.shape == b.shape
        assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("network", ["bitonic", "odd_even"])
def test_values_only_mode(backend, device, network):
    x = gapped((4, 13))
    s_ref, _, g_ref = sort_grads(x, "reference", network, "optimal", return_matrix=False)
    s, X, g = sort_grads(x.to(device), backend, network, "optimal", return_matrix=False)
    assert X is None
    assert_close(s.cpu(), s_ref, torch.float64)
    assert_close(g.cpu(), g_ref, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    x = gapped((4, 17), gap=0.1)
    exact = sort_grads(x, "reference", "bitonic", "logistic")
    low_ref = sort_grads(x.to(dtype), "reference", "bitonic", "logistic")
    out = sort_grads(x.to(device, dtype), backend, "bitonic", "logistic")
    for a, lr, e in zip(out, low_ref, exact):
        assert a.dtype == dtype
        assert_low_precision_close(a.cpu(), lr, e)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("network", ["bitonic", "odd_even"])
def test_doubly_stochastic_and_sorted_is_x_at_X(backend, device, network):
    x = torch.randn(5, 37, dtype=torch.float64, device=device)
    s, X = relaxops.sort(x, network, "cauchy", 5.0, backend=backend)
    ones = torch.ones(5, 37, dtype=torch.float64, device=device)
    assert ((X >= 0) & (X <= 1)).all()
    assert_close(X.sum(-1), ones, torch.float64)
    assert_close(X.sum(-2), ones, torch.float64)
    assert_close((x.unsqueeze(-2) @ X).squeeze(-2), s, torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("network", ["bitonic", "odd_even"])
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_hard_limit_is_argsort(backend, device, network, relaxation):
    x = gapped((3, 21), gap=0.01).to(device)
    s, X = relaxops.sort(x, network, relaxation, 1e9, backend=backend)
    perm = torch.argsort(x, dim=-1)
    hard = torch.nn.functional.one_hot(perm, 21).transpose(-2, -1).to(X.dtype)
    tol = 1e-6  # cauchy's tails decay as 1/(pi s d): ~ 1e-7 per swap at s = 1e9, d = 0.01
    assert (X - hard).abs().max() < tol
    assert (s - torch.sort(x, dim=-1).values).abs().max() < tol


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("relaxation", relaxops.MONOTONE_RELAXATIONS)
def test_monotone_relaxations_give_monotone_outputs(backend, device, relaxation):
    x = torch.randn(9, dtype=torch.float64, device=device)
    J = torch.autograd.functional.jacobian(
        lambda v: relaxops.sort(v, "odd_even", relaxation, 2.0, return_matrix=False, backend=backend)[0], x
    )
    assert J.min() >= -1e-9


def test_logistic_output_is_not_monotone():
    x = torch.randn(9, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(
        lambda v: relaxops.sort(v, "odd_even", "logistic", 2.0, return_matrix=False)[0], x
    )
    assert J.min() < -1e-3


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_two_elements_closed_form(backend, device, relaxation):
    from relaxops.sortnet.relaxations import alpha_and_slope

    x = torch.tensor([[0.3, -0.2], [-1.0, 0.5]], dtype=torch.float64, device=device)
    _, X = relaxops.sort(x, "bitonic", relaxation, 2.0, backend=backend)
    a = alpha_and_slope(x[:, 1] - x[:, 0], relaxation, 2.0)[0]
    expected = torch.stack([torch.stack([a, 1 - a], -1), torch.stack([1 - a, a], -1)], -2)
    assert_close(X, expected, torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_error_bound_over_layers(backend, device):
    x = torch.randn(8, 50, dtype=torch.float64, device=device)
    s, _ = relaxops.sort(x, "odd_even", "optimal", 4.0, return_matrix=False, backend=backend)
    bound = 50 * 1 / (16 * 4.0)  # L layers x per-swap error 1 / (16 s)
    assert (s - x.sort(-1).values).abs().max() <= bound


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_descending_and_rank(backend, device):
    x = gapped((2, 9)).to(device)
    s, X = relaxops.sort(x, backend=backend)
    sd, Xd = relaxops.sort(x, descending=True, backend=backend)
    assert torch.equal(sd, s.flip(-1)) and torch.equal(Xd, X.flip(-1))
    r = relaxops.rank(x, backend=backend)
    assert_close(r.sum(-1), torch.full((2,), 45.0, dtype=torch.float64, device=device), torch.float64)
    assert_close(r, X @ torch.arange(1.0, 10.0, dtype=torch.float64, device=device), torch.float64)
    hard = relaxops.rank(x, steepness=1e6, backend=backend)
    assert torch.equal(hard.round().long(), x.argsort(-1).argsort(-1) + 1)
    rd = relaxops.rank(x, descending=True, backend=backend)
    assert_close(rd, 10 - r, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_nan_and_inf_propagate_without_crash(backend, device):
    x = torch.randn(3, 8, dtype=torch.float64, device=device)
    x[0, 3] = math.nan
    x[1, 5] = math.inf
    s, X = relaxops.sort(x, "bitonic", "cauchy", backend=backend)
    assert s[0].isnan().any() and X[0].isnan().any()
    assert s[1].isnan().any() or s[1].isinf().any()
    assert torch.isfinite(s[2]).all() and torch.isfinite(X[2]).all()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_deterministic(backend, device):
    x = torch.randn(6, 70, device=device)
    a = sort_grads(x, backend, "bitonic", "logistic")
    b = sort_grads(x, backend, "bitonic", "logistic")
    for u, v in zip(a, b):
        assert torch.equal(u, v)


@pytest.mark.parametrize(
    "backend", [b.values[0] for b in BACKEND_DEVICE if b.values[1] == "cpu" and b.values[0] in ("reference", "cpu")]
)
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_gradcheck(backend, network, relaxation):
    x = gapped((2, 6), gap=0.1).requires_grad_(True)

    def f(v):
        s, X = relaxops.sort(v, network, relaxation, 2.0, backend=backend)
        return s, X

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)


def test_reference_untouched_wires_pass_through_exactly():
    x = torch.randn(2, 5, dtype=torch.float64)
    s, X = reference.sort(x, get_network("odd_even", 5), "cauchy", 1e-3)
    assert torch.isfinite(X).all() and torch.equal(X.sum(-1) * 0 + 1, torch.ones(2, 5, dtype=torch.float64))


# The Triton interpreter is too slow for this size; the triton kernels run it on a GPU.
@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values != ("triton", "cpu")])
def test_long_network_uses_checkpointed_backward(backend, device):
    """odd-even n = 130 in float64 has C = 8385 comparators: past the 1 MiB trajectory budget of the cpu and cuda
    matrix backward, so their tiles recompute segments from checkpoints; results must not change."""
    x = gapped((2, 130), gap=0.02)
    ref = sort_grads(x, "reference", "odd_even", "cauchy", steepness=2.0)
    out = sort_grads(x.to(device), backend, "odd_even", "cauchy", steepness=2.0)
    for a, b, what in zip(out, ref, ("sorted", "X", "grad")):
        assert_close(a.cpu(), b, torch.float64, scale=13.0, msg=what)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_rows_do_not_depend_on_the_batch(backend, device):
    """A row gives the same outputs and gradient alone as inside a batch (the cpu matrix backward splits work
    by rows for large batches and by column tiles for single rows: the sums keep one order)."""
    x = gapped((3, 100)).float().to(device)
    gs, gX = torch.randn(3, 100, device=device), torch.randn(3, 100, 100, device=device)

    def outputs(rows):
        v = x[rows].detach().requires_grad_(True)
        s, X = relaxops.sort(v, "bitonic", "cauchy", 3.0, backend=backend)
        (g,) = torch.autograd.grad((s * gs[rows]).sum() + (X * gX[rows]).sum(), v)
        return s, X, g

    whole = outputs(slice(0, 3))
    for b in range(3):
        for a, w in zip(outputs(slice(b, b + 1)), whole):
            if backend == "cpu":
                assert torch.equal(a[0], w[b])
            else:
                assert_close(a[0].cpu(), w[b].cpu(), torch.float32)


@pytest.mark.heavy  # the interpreter, 2 minutes per case
@pytest.mark.skipif("triton" not in available_backends("cpu"), reason="needs the interpreted Triton backend")
@pytest.mark.parametrize("B,n", [(2, 19), (300, 3)])
def test_triton_chunks_and_row_blocks(monkeypatch, B, n):
    """The Triton kernels planned as on a GPU with 16-element chunks: a layer in several chunks of wires (n = 19:
    N_PAD 32, chunks of 16 wires, of 1 in the matrix pass) and two rows per program (B = 300, n = 3), sort,
    rank and padded rows against the float64 reference; the matrix forward in a launch per row block."""
    from relaxops import _triton
    from relaxops.sortnet import triton as sortnet_triton

    monkeypatch.setattr(_triton, "PLAN_FOR_GPU", True)
    monkeypatch.setattr(sortnet_triton, "_CHUNK", 16)
    monkeypatch.setattr(sortnet_triton, "_FORWARD_SCRATCH_BYTES", 1)  # the matrix forward: a launch per row block
    x = gapped((B, n))
    lengths = torch.tensor([n, 1, n // 2 + 1, 0]).repeat((B + 3) // 4)[:B]
    calls = [
        lambda v, b: relaxops.sort(v, "bitonic", "cauchy", 3.0, backend=b),
        lambda v, b: relaxops.rank(v, "odd_even", "logistic", backend=b),
        lambda v, b: relaxops.sort(v, "bitonic", "cauchy", 3.0, backend=b, lengths=lengths),
        lambda v, b: relaxops.rank(v, backend=b, lengths=lengths),
    ]
    for i, call in enumerate(calls):
        got = outputs_and_grads(call, x, "triton")
        want = outputs_and_grads(call, x, "reference")
        for a, r in zip(got, want):
            if r is not None:
                assert_close(a, r, torch.float64, scale=max(1.0, n / 10), msg=f"call {i}")
