"""relaxops.topk / DiffTopkNet on every backend against the float64 reference: outputs, gradients, properties."""

import pytest
import relaxops
import torch
from relaxops.sortnet import networks, reference
from relaxops.sortnet.networks import resolve_network
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    gapped,
    outputs_and_grads,
    relaxation_cases,
)

NETWORKS = ("splitter_selection", "bitonic", "odd_even", "bitonic_original")
SIZES_K = ((1, 1), (2, 1), (2, 2), (3, 2), (5, 5), (7, 3), (16, 5), (33, 5), (100, 1), (100, 7))


def topk_call(x, k, backend, network, relaxation, steepness=3.0, **kw):
    """A case's call, (function, args, kwargs): what the reference checks run and the op checks
    (tests/sortnet/test_ops.py) check the ops of."""
    return relaxops.topk, (x, k, network, relaxation, steepness), dict(backend=backend, **kw)


def topk_grads(x, k, backend, network, relaxation, steepness=3.0, **kw):
    """X_top and the input gradient of a random linear functional of it (zero for n = 1: no comparators)."""
    fn, args, kwargs = topk_call(x, k, backend, network, relaxation, steepness, **kw)
    return outputs_and_grads(fn, *args, **kwargs)


def reference_cases():
    for p, relaxation, (n, k) in relaxation_cases(KERNEL_BACKEND_DEVICE, SIZES_K):
        backend, device = p.values
        yield pytest.param(
            backend, device, relaxation, n, k, marks=p.marks, id=f"{backend}-{device}-{relaxation}-{n}-{k}"
        )


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("backend,device,relaxation,n,k", list(reference_cases()))
def test_matches_reference(backend, device, network, relaxation, n, k):
    x = gapped((3, n))
    ref = topk_grads(x, k, "reference", network, relaxation)
    for a, b, what in zip(topk_grads(x.to(device), k, backend, network, relaxation), ref, ("X_top", "grad")):
        assert_close(a.cpu(), b, torch.float64, scale=max(1.0, n / 10), msg=f"{what} float64")
    ref32 = topk_grads(x.float(), k, "reference", network, relaxation)
    out = topk_grads(x.to(device, torch.float32), k, backend, network, relaxation)
    for a, r, b, what in zip(out, ref32, ref, ("X_top", "grad")):
        assert_as_accurate_as_reference(a.cpu(), r, b, torch.float32, scale=max(1.0, n / 10), msg=f"{what} float32")


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("n,k", [(3, 1), (7, 3), (12, 12), (33, 5), (50, 10)])
def test_equals_last_columns_of_full_matrix(network, n, k):
    """Bi-directional top-k == the last k columns of the dense relaxed permutation matrix of the same network."""
    x = gapped((4, n))
    net = resolve_network(f"{network}:{k}" if network == "splitter_selection" else network, n)
    _, X = reference.sort(x, net, "logistic_phi", 4.0, 0.4)
    top = reference.topk(x, net, k, "logistic_phi", 4.0, 0.4)
    assert_close(top, X[..., -k:], torch.float64)
    assert_close(relaxops.topk(x, k, network, "logistic_phi", 4.0, 0.4, backend="cpu"), X[..., -k:], torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("n,k", [(2, 1), (9, 4), (40, 5), (64, 64)])
def test_hard_limit_selects_torch_topk(backend, device, network, n, k):
    x = gapped((5, n)).to(device)
    X = relaxops.topk(x, k, network, "logistic", 1e4, backend=backend).cpu()
    idx = torch.topk(x.cpu(), k, dim=-1).indices  # descending: idx[:, 0] is rank 1 = column k - 1
    expected = torch.zeros(5, n, k, dtype=X.dtype).scatter_(1, idx.flip(-1).unsqueeze(1), 1.0)
    torch.testing.assert_close(X, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("network", ["splitter_selection", "bitonic"])
def test_columns_are_distributions(backend, device, network):
    x = gapped((4, 37)).to(device)
    X = relaxops.topk(x, 6, network, "cauchy", 2.0, backend=backend).cpu()
    assert (X >= -1e-15).all()
    assert_close(X.sum(-2), torch.ones(4, 6, dtype=X.dtype))  # each rank is a distribution over the elements
    assert (X.sum(-1) <= 1 + 1e-12).all()  # an element's mass over the top k is at most 1


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7), (1, 1, 16)])
def test_batch_shapes(backend, device, shape):
    x = gapped(shape) if shape[0] else torch.zeros(shape, dtype=torch.float64)
    k = min(3, shape[-1])
    ref = topk_grads(x, k, "reference", "splitter_selection", "cauchy")
    out = topk_grads(x.to(device), k, backend, "splitter_selection", "cauchy")
    assert out[0].shape == (*shape[:-1], shape[-1], k)
    for a, b in zip(out, ref):
        assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    x = gapped((4, 21), gap=0.2)
    exact = topk_grads(x, 4, "reference", "splitter_selection", "cauchy")
    low = topk_grads(x.to(dtype), 4, "reference", "splitter_selection", "cauchy")
    out = topk_grads(x.to(device, dtype), 4, backend, "splitter_selection", "cauchy")
    assert out[0].dtype == dtype
    for a, r, e in zip(out, low, exact):
        assert_low_precision_close(a.cpu(), r, e)


def test_gradcheck_cpu():
    x = gapped((2, 9)).requires_grad_(True)
    for network in ("splitter_selection", "odd_even"):
        torch.autograd.gradcheck(
            lambda v, net=network: relaxops.topk(v, 3, net, "logistic_phi", 2.0, backend="cpu"), (x,)
        )


def test_difftopknet_module():
    x = gapped((3, 50))
    net = relaxops.DiffTopkNet("splitter_selection", 50, 5, steepness=4.0, distribution="gaussian")
    none, X = net(x)
    assert none is None and X.shape == (3, 50, 5)
    assert_close(X, relaxops.topk(x, 5, "splitter_selection", "gaussian", 4.0))
    with pytest.raises(ValueError, match="vectors must have size 50"):
        net(torch.randn(3, 49))
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, size\]"):
        relaxops.DiffTopkNet("bitonic", 4, 5)
    with pytest.raises(ValueError, match="network must be one of"):
        relaxops.DiffTopkNet("bubble", 4, 2)


@pytest.mark.parametrize("k", [0, 6, -1, 2.0, True, None])
def test_bad_k(k):
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, n\] = \[1, 5\]"):
        relaxops.topk(torch.randn(2, 5), k)


def test_bad_arguments():
    with pytest.raises(ValueError, match="network must be one of"):
        relaxops.topk(torch.randn(2, 5), 2, network="bubble")
    with pytest.raises(ValueError, match="steepness must be a finite number > 0"):
        relaxops.topk(torch.randn(2, 5), 2, steepness=0.0)
    with pytest.raises(TypeError, match="x must be float16, bfloat16, float32 or float64"):
        relaxops.topk(torch.arange(5), 2)
    with pytest.raises(ValueError, match="network must be one of"):  # selection networks do not sort
        relaxops.sort(torch.randn(2, 5), network="splitter_selection")


def test_splitter_selection_is_much_shallower():
    assert len(relaxops.network_layers("splitter_selection", 1024, 5)) == 22
    assert len(relaxops.network_layers("bitonic", 1024)) == 55
    assert len(relaxops.network_layers("splitter_selection", 10450, 5)) == 27


def test_torch_compile_fullgraph():
    def f(x):
        return (relaxops.topk(x, 3, "splitter_selection", "cauchy", 5.0, backend="cpu") * torch.arange(3.0)).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 11, requires_grad=True)
    (g1,) = torch.autograd.grad(f(x), x)
    y = x.detach().clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(compiled(y), y)
    torch.testing.assert_close(g1, g2)


def test_too_large_network_is_refused_before_building(monkeypatch):
    """The splitter selection network for the top k = 10^5 of n = 10^5 would have billions of comparators: refused
    from its count alone (no builder runs), naming n, k and the limit, and pointing to the bitonic network."""

    def build(*args):
        raise AssertionError("a network was built")

    monkeypatch.setattr(networks, "splitter_selection_layers", build)
    monkeypatch.setattr(networks, "_BUILDERS", dict.fromkeys(networks._BUILDERS, build))
    monkeypatch.setattr(networks, "_make_network", build)
    x = torch.zeros(1, 100000).expand(1000, 100000)
    match = (
        r"splitter_selection network for the top k = 100000 of n = 100000 has more than 16777216 comparators"
        r".*use a smaller n or k, or network='bitonic' \(\d+ comparators\)"
    )
    with pytest.raises(ValueError, match=match):
        relaxops.topk(x, 100000)
    with pytest.raises(ValueError, match=r"bitonic network for n = 1000000 has \d+ comparators"):
        relaxops.topk(torch.zeros(1, 10**6), 5, "bitonic")


@pytest.mark.parametrize("n,k", [(7, 3), (33, 5), (100, 16), (101, 17)])
def test_cpu_topk_rows_equal_the_matrix_rows(n, k):
    """topk_rows (the label's row of the top-k matrix, what the top-k loss reads) on the cpu backend: the kernels
    write that row and read its gradient directly; equal bit for bit to the row of the full matrix."""
    from relaxops.sortnet.functional import topk_rows

    g = torch.Generator().manual_seed(n)
    x = torch.randn(19, n, generator=g, dtype=torch.float64)
    rows = torch.randint(0, n, (19,), generator=g)
    cot = torch.randn(19, k, generator=g, dtype=torch.float64)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    got = topk_rows(xa, k, rows, "splitter_selection", "cauchy", 10.0, 0.25, "cpu")
    full = relaxops.topk(xb, k, backend="cpu")[torch.arange(19), rows]
    assert torch.equal(got, full)
    assert torch.equal(torch.autograd.grad(got, xa, cot)[0], torch.autograd.grad(full, xb, cot)[0])
