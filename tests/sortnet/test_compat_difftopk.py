"""relaxops.compat.difftopk against the difftopk package: top-k networks, NeuralSort/SoftSort, losses."""

import contextlib
import importlib
import inspect
import io

import numpy as np
import pytest
import relaxops
import torch
from relaxops.compat import difftopk as ours
from testing import gapped

with contextlib.redirect_stdout(io.StringIO()):  # difftopk prints a note when torch-sparse is missing
    difftopk = pytest.importorskip("difftopk")
    from difftopk import functional as dt_functional
    from difftopk import networks as dt_networks

pytestmark = pytest.mark.filterwarnings("ignore:the original \\(diffsort\\) bitonic wiring")


def dense_splitter_selection(n, k):
    """difftopk's own splitter selection network as dense float32 layer matrices (its dense executor runs them
    without torch-sparse)."""
    with contextlib.redirect_stdout(io.StringIO()):
        net = dt_networks.sparse_splitter_selection_network(n, k)
    return [[torch.from_numpy(np.asarray(m)).float() for m in layer[:4]] for layer in net]


def original_topk(kind, x, k, steepness, art_lambda, distribution):
    if kind == "splitter_selection":
        net = dense_splitter_selection(x.shape[1], k)
    else:
        net = dt_networks.get_sorting_network(kind, x.shape[1], "cpu")
    return dt_functional.execute_topk(net, x, k, steepness, art_lambda, distribution)[1]


@pytest.mark.parametrize("kind", ["bitonic", "odd_even", "splitter_selection"])
@pytest.mark.parametrize("distribution", relaxops.RELAXATIONS)
@pytest.mark.parametrize("n,k", [(5, 1), (5, 5), (16, 3), (22, 4), (33, 5)])
@pytest.mark.parametrize("sparse", [False, True])
def test_difftopknet_matches_difftopk(kind, distribution, n, k, sparse):
    x = gapped((4, n), dtype=torch.float32, gap=0.05) * 3
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    expected = original_topk(kind, xa, k, 4.0, 0.4, distribution)
    none, X = ours.DiffTopkNet(kind, n, k, sparse=sparse, steepness=4.0, art_lambda=0.4, distribution=distribution)(xb)
    assert none is None and X.shape == (4, n, k) and X.dtype == torch.float32
    torch.testing.assert_close(X, expected, rtol=1e-4, atol=1e-5)
    g = torch.randn(X.shape, generator=torch.Generator().manual_seed(3))
    (ga,) = torch.autograd.grad((expected * g).sum(), xa)
    (gb,) = torch.autograd.grad((X * g).sum(), xb)
    torch.testing.assert_close(gb, ga, rtol=1e-3, atol=1e-4)


def test_sparse_bitonic_network_is_diffsorts_bitonic():
    """difftopk's sparse bitonic network has the comparators of diffsort's bitonic network (so sparse=True and
    sparse=False agree, and both are relaxops' bitonic_original)."""
    for n in (5, 16, 22, 33):
        dense = dt_networks.get_sorting_network("bitonic", n, "cpu")
        sparse = dt_networks.sparse_bitonic_network(n)
        for a, b in zip(dense, sparse):
            for m1, m2 in zip(a, b[:4]):
                np.testing.assert_array_equal(m1.numpy(), m2)


def test_topk_function_and_get_sorting_network():
    x = gapped((3, 12), dtype=torch.float32)
    net = ours.get_sorting_network("odd_even", 12, "cpu")
    none, X = ours.topk(net, x, 4, 5.0, 0.25, "logistic")
    torch.testing.assert_close(X, original_topk("odd_even", x, 4, 5.0, 0.25, "logistic"), rtol=1e-4, atol=1e-5)
    with pytest.raises(ours.DifftopkCompatError):
        ours.get_sorting_network("sparse_bitonic", 12, "cpu")


@pytest.mark.parametrize("tau", [0.5, 2.0])
@pytest.mark.parametrize("hard", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_neuralsort_softsort_match_difftopk(tau, hard, n):
    x = torch.randn(3, n) * 2
    for mine, theirs in (
        (ours.NeuralSort(tau, hard), difftopk.NeuralSort(tau, hard)),
        (ours.SoftSort(tau, hard), difftopk.SoftSort(tau, hard)),
    ):
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        expected, got = theirs(xa), mine(xb)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        g = torch.randn(got.shape)
        (ga,) = torch.autograd.grad((expected * g).sum(), xa)
        (gb,) = torch.autograd.grad((got * g).sum(), xb)
        torch.testing.assert_close(gb, ga, rtol=1e-3, atol=1e-4)


def original_loss(method, inv_temp, p_k, n, m, distribution, art_lambda, top1_mode):
    """difftopk's TopKCrossEntropyLoss; its sparse networks (which need torch-sparse) are swapped for the dense
    evaluation of the same network, which is the same math."""
    with contextlib.redirect_stdout(io.StringIO()):
        loss = difftopk.TopKCrossEntropyLoss(method, inv_temp, p_k, n, m, distribution, art_lambda, top1_mode=top1_mode)
    net = getattr(loss, "top_k_net", None)
    if net is not None and net.sparse:
        size = m or n
        net.sparse = False
        net.sorting_network = (
            dense_splitter_selection(size, len(p_k))
            if method == "splitter_selection"
            else dt_networks.get_sorting_network("bitonic", size, "cpu")
        )
    return loss


LOSS_METHODS = ["bitonic", "bitonic__non_sparse", "splitter_selection", "odd_even", "neuralsort", "softsort"]
P_KS = [[0.2] * 5, [0.5, 0, 0, 0, 0.5], [1.0], [0.0, 1.0], [0.25, 0, 0, 0.75]]


@pytest.mark.parametrize("method", LOSS_METHODS)
@pytest.mark.parametrize("m", [None, 9])
@pytest.mark.parametrize(
    "top1_mode,p_k",
    [(mode, p_k) for mode in ("sm", "smce", "sort") for p_k in P_KS if not (mode == "smce" and len(p_k) == 1)],
)  # difftopk fails there
def test_loss_matches_difftopk(method, top1_mode, m, p_k):
    n, B = 25, 8
    x = torch.randn(B, n, generator=torch.Generator().manual_seed(1)) * 3
    y = torch.randint(0, n, (B,), generator=torch.Generator().manual_seed(2))
    args = (method, 2.0, p_k, n, m, "logistic_phi", 0.5)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    expected = original_loss(*args, top1_mode)(xa, y)
    got = ours.TopKCrossEntropyLoss(*args, top1_mode=top1_mode)(xb, y)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    (ga,) = torch.autograd.grad(expected, xa)
    (gb,) = torch.autograd.grad(got, xb)
    torch.testing.assert_close(gb, ga, rtol=1e-4, atol=1e-5)  # float32: the TOLERANCES table


@pytest.mark.parametrize("cls", ["SmoothTopKLoss", "SmoothHardTopKLoss"])
def test_smooth_losses_match_difftopk(cls):
    x = torch.randn(10, 12, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 3
    y = torch.randint(0, 12, (10,), generator=torch.Generator().manual_seed(5))
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    expected = getattr(difftopk, cls)(12, 3, 1.0)(xa, y)
    got = getattr(ours, cls)(12, 3, 1.0, device="cpu")(xb, y)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    (ga,) = torch.autograd.grad(expected, xa)
    (gb,) = torch.autograd.grad(got, xb)
    torch.testing.assert_close(gb, ga, rtol=1e-6, atol=1e-9)  # difftopk's log(1 - e^u) is coarse (~1e-7 here)


def test_smce_with_k_1():
    """p_k = [1] with 'smce' is plain softmax cross-entropy (difftopk fails there)."""
    x, y = torch.randn(6, 10), torch.randint(0, 10, (6,))
    got = ours.TopKCrossEntropyLoss("odd_even", 1.0, [1.0], 10, distribution="cauchy", top1_mode="smce")(x, y)
    torch.testing.assert_close(got, torch.nn.functional.cross_entropy(x, y))


def test_attributes_and_errors():
    net = ours.DiffTopkNet("splitter_selection", 20, 3, sparse=True, steepness=2.0, distribution="optimal")
    assert (net.sorting_network_type, net.size, net.k, net.sparse, net.steepness, net.distribution) == (
        "splitter_selection",
        20,
        3,
        True,
        2.0,
        "optimal",
    )
    with pytest.raises(NotImplementedError):
        ours.DiffTopkNet("bubble", 20, 3)
    with pytest.raises(ValueError, match="vectors must be a 2-D tensor"):
        net(torch.randn(20))
    loss = ours.TopKCrossEntropyLoss("softsort", 1.0, [0.5, 0.5], 10, m=4)
    assert (loss.k, loss.n, loss.m, loss.top1_mode, loss.p_k) == (2, 10, 4, "sm", [0.5, 0.5])
    with pytest.raises(NotImplementedError, match="needs a distribution"):
        ours.TopKCrossEntropyLoss("bitonic", 1.0, [0.5, 0.5], 10)
    with pytest.raises(ValueError, match="unknown"):
        ours.TopKCrossEntropyLoss("sinkhorn", 1.0, [0.5, 0.5], 10)
    with pytest.raises(ValueError, match="p_k must sum to 1"):
        ours.TopKCrossEntropyLoss("softsort", 1.0, [0.5, 0.4], 10)
    with pytest.raises(ValueError, match="m must satisfy k < m < n"):
        ours.TopKCrossEntropyLoss("softsort", 1.0, [0.5, 0.5], 10, m=2)
    with pytest.raises(ValueError, match="m must satisfy k < m < n"):
        ours.TopKCrossEntropyLoss("softsort", 1.0, [0.5, 0.5], 10, m=10)
    with pytest.raises(ValueError, match=r"outputs must be \[batch, n\]"):
        loss(torch.randn(3, 11), torch.zeros(3, dtype=torch.long))


# --- difftopk's README (art_lambda=None), DiffTopkNet.sorting_network, submodules ---------------------------------


def test_readme_loss_with_art_lambda_none():
    """difftopk's README builds the loss with art_lambda=None (read only by 'logistic_phi')."""
    kwargs = dict(
        diffsort_method="odd_even",
        inverse_temperature=2,
        p_k=[0.5, 0.0, 0.0, 0.0, 0.5],
        n=1000,
        m=16,
        distribution="cauchy",
        art_lambda=None,
        device="cpu",
        top1_mode="sm",
    )
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(6)) * 3
    y = torch.randint(0, 1000, (4,), generator=torch.Generator().manual_seed(7))
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    expected = difftopk.TopKCrossEntropyLoss(**kwargs)(xa, y)
    got = ours.TopKCrossEntropyLoss(**kwargs)(xb, y)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        torch.autograd.grad(got, xb)[0], torch.autograd.grad(expected, xa)[0], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("distribution", [d for d in relaxops.RELAXATIONS if d != "logistic_phi"])
def test_difftopknet_art_lambda_none(distribution):
    x = gapped((3, 16), dtype=torch.float32)
    expected = difftopk.DiffTopkNet("bitonic", 16, 3, art_lambda=None, distribution=distribution)(x)[1]
    net = ours.DiffTopkNet("bitonic", 16, 3, art_lambda=None, distribution=distribution)
    assert net.art_lambda is None
    torch.testing.assert_close(net(x)[1], expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"art_lambda must be a number in \[0.0, 1.0\], got None"):
        ours.DiffTopkNet("bitonic", 16, 3, art_lambda=None, distribution="logistic_phi")


def _dense(layer):
    return [m.to_dense().T if m.is_sparse else m for m in layer[:4]]  # difftopk's sparse layers hold m.T


@pytest.mark.parametrize(
    "kind,sparse", [("bitonic", False), ("odd_even", False), ("bitonic", True), ("splitter_selection", True)]
)
def test_difftopknet_sorting_network(kind, sparse):
    """The network's dense layers (difftopk's matrices, densified for sparse=True); forward runs what the attribute
    holds once read or replaced."""
    n, k = 22, 4
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = difftopk.DiffTopkNet(kind, n, k, sparse=sparse).sorting_network
    net = ours.DiffTopkNet(kind, n, k, sparse=sparse, steepness=4.0)
    x = gapped((3, n), dtype=torch.float32)
    before = net(x)[1]
    assert len(net.sorting_network) == len(theirs)
    for mine, layer in zip(net.sorting_network, theirs):
        for a, b in zip(mine, _dense(layer)):
            assert a.dtype == torch.float32 and torch.equal(a, b)
    torch.testing.assert_close(net(x)[1], before, rtol=1e-5, atol=1e-6)
    net.sorting_network = ours.get_sorting_network("odd_even", n, "cpu")
    expected = original_topk("odd_even", x, k, 4.0, 0.25, "cauchy")
    torch.testing.assert_close(net(x)[1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["difftopk", "functional", "networks", "losses", "neuralsort", "softsort", "smooth_topk"]
)
def test_submodules_have_difftopks_names(name):
    """``from relaxops.compat.difftopk.<module> import ...`` as from difftopk's modules (names it leaves out are
    documented in the module's docstring)."""
    from testing import assert_mirrors, defined_names

    with contextlib.redirect_stdout(io.StringIO()):
        theirs = importlib.import_module(f"difftopk.{name}")
    mine = importlib.import_module(f"relaxops.compat.difftopk.{name}")
    assert_mirrors(mine, defined_names(theirs))
    for attr in mine.__all__:
        if hasattr(ours, attr):
            assert getattr(mine, attr) is getattr(ours, attr)


def test_functional_execute_topk():
    from relaxops.compat.difftopk import functional

    x = gapped((3, 12), dtype=torch.float32)
    net = ours.get_sorting_network("bitonic", 12, "cpu")
    expected = original_topk("bitonic", x, 4, 5.0, 0.25, "cauchy")
    torch.testing.assert_close(functional.execute_topk(net, x, 4, 5.0)[1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", ["SmoothTopKLoss", "SmoothHardTopKLoss"])
def test_smooth_losses_forward_arguments(cls):
    """difftopk's ``forward(x, y)``: callers that pass them by name work."""
    mine, theirs = getattr(ours, cls)(12, 3), getattr(difftopk, cls)(12, 3)
    names = list(inspect.signature(mine.forward).parameters)
    assert names == list(inspect.signature(theirs.forward).parameters) == ["x", "y"]
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    y = torch.randint(0, 12, (5,), generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(mine(x=x, y=y), theirs(x=x.clone(), y=y), rtol=1e-10, atol=1e-12)
