"""NeuralSort and SoftSort on every backend against the float64 reference and the difftopk modules."""

import functools
import math

import pytest
import torch
from relaxops import _triton
from relaxops.baselines import neuralsort, reference, softsort
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    opcheck_calls,
    outputs_and_grads,
)

SIZES = (1, 2, 3, 5, 7, 33, 100)
# (name, function, keyword arguments): SoftSort with the paper's |d|, squared distances, and pow < 1.
METHODS = {
    "neuralsort": (neuralsort, {}),
    "softsort": (softsort, {}),
    "softsort_pow2": (softsort, {"pow": 2.0}),
    "softsort_pow0.5": (softsort, {"pow": 0.5}),
}
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]


def k_values(n):
    """1, an odd k, n and None (= n), without repeats."""
    ks = [1, min(n, max(1, n // 3) | 1), n]
    return [k for i, k in enumerate(ks) if k not in ks[:i]] + [None]


def gapped(shape, dtype=torch.float64, gap=0.05, device="cpu"):
    """Random rows whose values differ by at least `gap` (no ties: finite differences stay valid)."""
    n = shape[-1]
    rows = [
        torch.randperm(n).to(dtype) * 2 * gap + torch.rand(n, dtype=dtype) * gap for _ in range(math.prod(shape[:-1]))
    ]
    return (torch.stack(rows).reshape(shape) - n * gap).to(device)


def perm_call(method, x, backend, k=None, tau=0.7, hard=False):
    """(function, args, kwargs) of a method's call: the case that the reference checks and the op checks run."""
    fn, kwargs = METHODS[method]
    return fn, (x,), dict(tau=tau, k=k, hard=hard, backend=backend, **kwargs)


def perm_grads(method, x, backend, k=None, tau=0.7, hard=False, seed=7):
    """X and the input gradient of a random linear functional of X."""
    fn, args, kwargs = perm_call(method, x, backend, k, tau, hard)
    return outputs_and_grads(fn, *args, seed=seed, **kwargs)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
@pytest.mark.parametrize("n", SIZES)
def test_matches_reference(backend, device, method, n):
    x = torch.randn(3, n, dtype=torch.float64)
    scale = max(1.0, n / 10)
    for k in k_values(n):
        ref = perm_grads(method, x, "reference", k)
        out = perm_grads(method, x.to(device), backend, k)
        for a, b, what in zip(out, ref, ("X", "grad")):
            assert a.shape == b.shape
            assert_close(a.cpu(), b, torch.float64, scale=scale, msg=f"{what} float64 k={k}")
        ref32 = perm_grads(method, x.float(), "reference", k)
        out32 = perm_grads(method, x.to(device, torch.float32), backend, k)
        for a, r, b, what in zip(out32, ref32, ref, ("X", "grad")):
            assert_as_accurate_as_reference(a.cpu(), r, b, torch.float32, scale=scale, msg=f"{what} float32 k={k}")


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["softsort_pow2", "softsort_pow0.5"])
@pytest.mark.parametrize("n", [5, 33])
def test_softsort_pow_matches_reference(backend, device, method, n):
    x = torch.randn(3, n, dtype=torch.float64)
    for k in (1, n):
        for a, b in zip(perm_grads(method, x.to(device), backend, k), perm_grads(method, x, "reference", k)):
            assert_close(a.cpu(), b, torch.float64, scale=max(1.0, n / 10))


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", list(METHODS))
def test_ties(backend, device, method):
    """Tied values: sign(0) = 0 in the b adjoint (NeuralSort) and the stable sort's choice of the element that
    receives the gradient of a sorted value (SoftSort), as the reference's autograd."""
    x = torch.tensor([[0.5, -1.0, 0.5, 2.0, -1.0, 0.5, 0.0], [1.0] * 7], dtype=torch.float64)
    for k in (2, 7):
        for a, b in zip(perm_grads(method, x.to(device), backend, k), perm_grads(method, x, "reference", k)):
            assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7)])
def test_batch_shapes(backend, device, shape):
    x = torch.randn(shape, dtype=torch.float64)
    for method in ("neuralsort", "softsort"):
        ref = perm_grads(method, x, "reference", 3)
        out = perm_grads(method, x.to(device), backend, 3)
        for a, b in zip(out, ref):
            assert a.shape == b.shape
            assert_close(a.cpu(), b, torch.float64)
        assert out[0].shape == (*shape, 3)


def last_columns_and_grad(f, x, k):
    """(the last k columns of f(x), the gradient of a fixed random linear functional of them)."""
    x = x.detach().requires_grad_(True)
    X = f(x)[..., -k:]
    G = torch.randn(X.shape, generator=torch.Generator().manual_seed(3))
    (grad,) = torch.autograd.grad((X * G).sum(), x)
    return X.detach(), grad


def difftopk_softsort(module, x):
    """How difftopk's TopKCrossEntropyLoss applies SoftSort: on -x, transposed to element x ascending rank."""
    return module(-x).transpose(-2, -1)


def test_difftopk_agreement():
    """Soft matrices and their gradients equal the original modules' (float32: difftopk computes in float32)."""
    difftopk = pytest.importorskip("difftopk")
    for n in (2, 3, 5, 7, 16, 33):
        x = torch.randn(4, n)
        for tau in (0.5, 2.0):
            for k in sorted({1, min(3, n), n}):
                pairs = [
                    (functools.partial(neuralsort, tau=tau, k=k), difftopk.NeuralSort(tau)),
                    (
                        functools.partial(softsort, tau=tau, k=k, pow=1.5),
                        functools.partial(difftopk_softsort, difftopk.SoftSort(tau, pow=1.5)),
                    ),
                ]
                for ours, theirs in pairs:
                    for a, b in zip(last_columns_and_grad(ours, x, k), last_columns_and_grad(theirs, x, k)):
                        assert_close(a, b, torch.float32, scale=max(1.0, n / 4), msg=f"{ours} n={n} k={k}")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_hard_is_straight_through(backend, device, method):
    """hard=True: the exact top-k matrix of the stable sort forward (column j: the element at ascending position
    n - k + j), the soft matrix's gradient backward."""
    x = gapped((3, 9), gap=0.02).to(device)
    soft, g_soft = perm_grads(method, x, backend, 4, tau=0.5)
    hard, g_hard = perm_grads(method, x, backend, 4, tau=0.5, hard=True)
    top = torch.sort(x, dim=-1, stable=True).indices[:, -4:]
    expected = torch.nn.functional.one_hot(top, 9).transpose(-2, -1).to(soft.dtype)
    assert torch.equal(hard, expected)
    assert_close(g_hard, g_soft, torch.float64)


def test_hard_matches_difftopk():
    """Without ties, difftopk's one-hot per rank (SoftSort) and per element (NeuralSort, close to a permutation
    at a small tau) are the exact permutation that relaxops forwards."""
    difftopk = pytest.importorskip("difftopk")
    x = torch.randn(5, 8)
    theirs = difftopk.SoftSort(0.7, hard=True)(-x).transpose(-2, -1)
    assert_close(softsort(x, 0.7, 5, hard=True), theirs[..., -5:], torch.float32)
    x = gapped((5, 8), dtype=torch.float32, gap=0.1)
    assert_close(neuralsort(x, 0.01, 5, hard=True), difftopk.NeuralSort(0.01, hard=True)(x)[..., -5:], torch.float32)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", list(METHODS))
def test_permutation_equivariance_and_columns_sum_to_one(backend, device, method):
    fn, kwargs = METHODS[method]
    x = torch.randn(4, 13, dtype=torch.float64, device=device)
    perm = torch.randperm(13, device=device)
    X = fn(x, 0.6, 6, backend=backend, **kwargs)
    Xp = fn(x[:, perm], 0.6, 6, backend=backend, **kwargs)
    assert_close(Xp, X[:, perm], torch.float64)
    assert ((X >= 0) & (X <= 1)).all()
    assert_close(X.sum(-2), torch.ones(4, 6, dtype=torch.float64, device=device), torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_two_elements_closed_form(backend, device, method):
    """n = 2: the larger element's weight at the top position (and the smaller's at the bottom) is
    sigmoid(|x0 - x1| / tau), the logistic sorting network with steepness 1 / tau."""
    fn, _ = METHODS[method]
    x = torch.tensor([[0.3, -0.2], [-1.0, 0.5], [2.0, 2.0]], dtype=torch.float64, device=device)
    X = fn(x, 0.4, backend=backend)
    a = torch.sigmoid((x[:, 0] - x[:, 1]).abs() / 0.4)
    big = x.argmax(-1)  # the tie [2, 2] has weights 1/2 = sigmoid(0) everywhere
    rows = torch.arange(3, device=device)
    assert_close(X[rows, big, 1], a, torch.float64)
    assert_close(X[rows, 1 - big, 0], a, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls make: every method at n = 7 and an odd k < n."""
    x = torch.randn(3, 7, dtype=torch.float64, device=device)
    for method in METHODS:
        fn, args, kwargs = perm_call(method, x, backend, k_values(7)[1])
        names = opcheck_calls(fn, *args, **kwargs)
        assert names == [f"relaxops::{fn.__name__}_fwd", f"relaxops::{fn.__name__}_bwd"], (method, names)


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("method", list(METHODS))
def test_gradcheck(backend, method):
    fn, kwargs = METHODS[method]
    x = gapped((2, 6), gap=0.1).requires_grad_(True)
    for k in (1, 3, 6):
        f = functools.partial(fn, tau=0.5, k=k, backend=backend, **kwargs)
        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    x = torch.randn(4, 17, dtype=torch.float64)
    for method in ("neuralsort", "softsort"):
        exact = perm_grads(method, x, "reference", 5)
        low_ref = perm_grads(method, x.to(dtype), "reference", 5)
        out = perm_grads(method, x.to(device, dtype), backend, 5)
        for a, lr, e in zip(out, low_ref, exact):
            assert a.dtype == dtype
            assert_low_precision_close(a.cpu(), lr, e)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_large_n_small_k_needs_no_square_buffer(backend, device):
    """n = 40000, k = 2: an n x n intermediate would be 12.8 GB; the fused kernels need O(n k)."""
    x = torch.randn(1, 40000, device=device)
    for method in ("neuralsort", "softsort"):
        X, g = perm_grads(method, x, backend, 2, tau=0.1)
        assert X.shape == (1, 40000, 2) and torch.isfinite(g).all()
        assert_close(X.sum(-2), torch.ones(1, 2, device=device), torch.float32, scale=10.0)
        assert X[0, x[0].argmax(), 1] == X[0, :, 1].max()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_nan_propagates_without_crash(backend, device):
    x = torch.randn(3, 8, dtype=torch.float64, device=device)
    x[0, 3] = math.nan
    for method in ("neuralsort", "softsort"):
        X = METHODS[method][0](x, 0.5, 3, backend=backend)
        assert X[0].isnan().any()
        assert torch.isfinite(X[1:]).all()


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(tau=0.0), ValueError, "tau must be a finite number > 0"),
        (dict(tau=-1.0), ValueError, "tau must be a finite number > 0"),
        (dict(tau=math.inf), ValueError, "tau must be a finite number > 0"),
        (dict(tau=math.nan), ValueError, "tau must be a finite number > 0"),
        (dict(tau="1"), ValueError, "tau must be a finite number > 0"),
        (dict(k=0), ValueError, r"k must be an integer in \[1, n\] = \[1, 5\] or a tensor of them, got 0"),
        (dict(k=6), ValueError, r"k must be an integer in \[1, n\] = \[1, 5\] or a tensor of them, got 6"),
        (dict(k=2.0), ValueError, r"k must be an integer in \[1, n\] = \[1, 5\] or a tensor of them, got 2.0"),
        (dict(k=True), ValueError, r"k must be an integer in \[1, n\] = \[1, 5\] or a tensor of them, got True"),
        (dict(hard=1), TypeError, "hard must be a bool, got int"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
        (dict(backend="cuda"), RuntimeError, "backend 'cuda' cannot run"),
    ],
)
@pytest.mark.parametrize("fn", [neuralsort, softsort])
def test_bad_arguments(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(torch.randn(2, 5), **kwargs)


@pytest.mark.parametrize("pow", [0.0, -1.0, math.inf, math.nan, None])
def test_bad_pow(pow):
    with pytest.raises(ValueError, match="pow must be a finite number > 0"):
        softsort(torch.randn(2, 5), pow=pow)


@pytest.mark.parametrize("fn", [neuralsort, softsort])
def test_bad_tensors(fn):
    with pytest.raises(TypeError, match="x must be float16, bfloat16, float32 or float64, got torch.int64"):
        fn(torch.arange(5))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        fn([3.0, 1.0])
    with pytest.raises(ValueError, match=r"n >= 1"):
        fn(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        fn(torch.tensor(1.0))
    with pytest.raises(MemoryError, match=r"matrix of shape \(1000000, 4096, 4096\).*GiB"):
        fn(torch.zeros(1, 4096).expand(10**6, 4096))


def test_reference_is_the_pairwise_form():
    """The oracle itself against the papers' formulas written out for one row (descending ranks on -x for
    NeuralSort, SoftSort's descending rows on -x), so the reference cannot drift with the kernels."""
    x = torch.randn(6, dtype=torch.float64)
    n, tau = 6, 0.9
    s = -x
    A = (s[:, None] - s[None, :]).abs()
    P = torch.stack([torch.softmax(((n + 1 - 2 * (i + 1)) * s - A.sum(1)) / tau, 0) for i in range(n)])
    assert_close(reference.neuralsort(x[None], tau, n)[0], P.T, torch.float64)
    srt = s.sort(descending=True).values
    P = torch.softmax(-((s[None, :] - srt[:, None]).abs() ** 2) / tau, 1)
    assert_close(reference.softsort(x[None], tau, n, 2.0)[0], P.T, torch.float64)


@pytest.mark.heavy
@pytest.mark.skipif(("triton", "cpu") not in [p.values for p in BACKEND_DEVICE], reason="Triton is not available")
@pytest.mark.parametrize("method", list(METHODS))
def test_gpu_tiling_matches_reference(monkeypatch, method):
    """The Triton kernels with a GPU's launch plan (relaxops._triton.PLAN_FOR_GPU), run by the interpreter: n = 301,
    k = 45 span two blocks of 32 columns, 3 column-kernel blocks of 128 elements and 10 element-kernel blocks of
    32 elements, the last ones partial."""
    monkeypatch.setattr(_triton, "PLAN_FOR_GPU", True)
    n, k = 301, 45
    x = torch.randn(2, n, dtype=torch.float64)
    scale = n / 10
    ref = perm_grads(method, x, "reference", k)
    for a, b, what in zip(perm_grads(method, x, "triton", k), ref, ("X", "grad")):
        assert_close(a, b, torch.float64, scale=scale, msg=f"{what} float64")
    ref32 = perm_grads(method, x.float(), "reference", k)
    for a, r, b, what in zip(perm_grads(method, x.float(), "triton", k), ref32, ref, ("X", "grad")):
        assert_as_accurate_as_reference(a, r, b, torch.float32, scale=scale, msg=f"{what} float32")
