"""NeuralSort and SoftSort along any dimension, on padded rows (lengths, mask), with a k per row, and hard=True:
every backend against a Python loop of unpadded float64 reference calls, one row at a time."""

import math

import pytest
import torch
from relaxops.baselines import neuralsort, ops, reference, softsort
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, opcheck_calls, outputs_and_grads

METHODS = {"neuralsort": (neuralsort, {}), "softsort": (softsort, {}), "softsort_pow0.5": (softsort, {"pow": 0.5})}
ORACLE = {"neuralsort": reference.neuralsort, "softsort": reference.softsort}
TAU = 0.7


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def row_oracle(method, x, k):
    """The float64 reference on one unpadded row ``x [L]`` (L >= 1), its last ``k`` ascending positions:
    ``[L, k]``."""
    fn = ORACLE[method.split("_")[0]]
    kw = {"pow": METHODS[method][1]["pow"]} if "pow" in METHODS[method][1] else {}
    return fn(x[None], TAU, k, **kw)[0]


def expected(method, x, real, k, G):
    """(X, grad) of rows ``x [B, n]`` with real entries ``real [B, n]`` (any positions), from unpadded per-row
    reference calls: the layout of the public functions (k None: n columns, left-aligned; k an int or [B] tensor:
    ``K = max k`` columns, right-aligned), and the gradient of ``sum(X * G)``; pads 0."""
    B, n = x.shape
    K = n if k is None else int(k.max()) if torch.is_tensor(k) else k
    X = torch.zeros(B, n, K, dtype=x.dtype)
    grad = torch.zeros_like(x)
    for b in range(B):
        idx = real[b].nonzero().squeeze(-1)
        L = len(idx)
        if L == 0:
            continue
        kb = L if k is None else min(int(k[b]) if torch.is_tensor(k) else k, L)
        cols = torch.arange(kb) if k is None else torch.arange(K - kb, K)
        xr = x[b, idx].detach().requires_grad_(True)
        Xr = row_oracle(method, xr, L if k is None else kb)
        (g,) = torch.autograd.grad((Xr * G[b][idx][:, cols]).sum(), xr)
        X[b, idx[:, None], cols[None, :]] = Xr.detach()
        grad[b, idx] = g
    return X, grad


def padded_rows(B, n, seed):
    """``x [B, n]`` float64 with lengths covering 0, 1, n and random ones; NaN, +-inf in the pads."""
    g = _gen(seed)
    x = torch.randn(B, n, dtype=torch.float64, generator=g)
    lengths = torch.randint(0, n + 1, (B,), generator=g)
    lengths[:3] = torch.tensor([0, n, 1])
    pad = torch.arange(n) >= lengths[:, None]
    junk = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64)[torch.randint(0, 3, (B, n), generator=g)]
    return torch.where(pad, junk, x), lengths


def call_and_grad(method, x, backend, G, **kwargs):
    """(X, grad of sum(X * G)) of the public function."""
    fn, kw = METHODS[method]
    x = x.detach().requires_grad_(True)
    X = fn(x, TAU, backend=backend, **kw, **kwargs)
    (grad,) = torch.autograd.grad((X * G.to(X.device)).sum(), x)
    return X.detach().cpu(), grad.cpu()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("n", [7, 33])
def test_lengths_equal_unpadded_rows(backend, device, method, n):
    B = 6
    x, lengths = padded_rows(B, n, seed=n)
    real = torch.arange(n) < lengths[:, None]
    ks = torch.randint(1, n + 1, (B,), generator=_gen(1))
    for k in (None, 3, ks):
        K = n if k is None else int(k.max()) if torch.is_tensor(k) else k
        G = torch.randn(B, n, K, dtype=torch.float64, generator=_gen(2))
        kk = k.to(device) if torch.is_tensor(k) else k
        X, grad = call_and_grad(method, x.to(device), backend, G, k=kk, lengths=lengths.to(device))
        X_ref, grad_ref = expected(method, x, real, k, G)
        assert not X.isnan().any() and not grad.isnan().any()
        assert_close(X, X_ref, torch.float64, msg=f"X k={k}")
        assert_close(grad, grad_ref, torch.float64, msg=f"grad k={k}")
        assert (X[~real] == 0).all() and (grad[~real] == 0).all()  # pad rows and pad gradients exactly 0


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_mask_along_dim_equals_unpadded_rows(backend, device, method):
    """A mask (real entries anywhere) along dim 1 of a 3-D x: rows of X follow x's element order."""
    n = 7
    x = torch.randn(2, n, 3, dtype=torch.float64, generator=_gen(3))
    mask = torch.rand(2, n, 3, generator=_gen(4)) < 0.6
    mask[0, :, 0] = True  # a full row
    mask[1, :, 1] = False  # an empty row
    x = x.masked_fill(~mask, math.nan)
    rows, real = x.movedim(1, -1).reshape(-1, n), mask.movedim(1, -1).reshape(-1, n)
    for k in (None, 2):
        K = n if k is None else k
        G = torch.randn(2, 3, n, K, dtype=torch.float64, generator=_gen(5))
        X, grad = call_and_grad(method, x.to(device), backend, G, k=k, dim=1, mask=mask.to(device))
        X_ref, grad_ref = expected(method, rows, real, k, G.reshape(-1, n, K))
        assert X.shape == (2, 3, n, K)
        assert_close(X, X_ref.reshape(2, 3, n, K), torch.float64)
        assert_close(grad, grad_ref.reshape(2, 3, n).movedim(-1, 1), torch.float64)
        assert (grad[~mask] == 0).all()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_dim_equals_movedim(backend, device, method):
    fn, _ = METHODS[method]
    x = torch.randn(3, 5, 2, dtype=torch.float64, generator=_gen(6)).to(device)
    for dim, k in ((-3, None), (1, 2)):
        moved = outputs_and_grads(lambda v, d=dim, k=k: fn(v.movedim(d, -1), TAU, k, backend=backend), x)
        out = outputs_and_grads(lambda v, d=dim, k=k: fn(v, TAU, k, backend=backend, dim=d), x)
        assert out[0].shape == moved[0].shape
        assert_close(out[0], moved[0], torch.float64)
        assert_close(out[1], moved[1], torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_k_per_row_full_rows(backend, device, method):
    """Each row equals the op on it alone with its own k, right-aligned (column K - 1 = the largest)."""
    n = 9
    x = torch.randn(2, 3, n, dtype=torch.float64, generator=_gen(7))
    k = torch.tensor([[1, 4, 9], [2, 2, 5]])
    G = torch.randn(6, n, 9, dtype=torch.float64, generator=_gen(8))
    X, grad = call_and_grad(method, x.to(device), backend, G.reshape(2, 3, n, 9), k=k.to(device))
    X_ref, grad_ref = expected(method, x.reshape(6, n), torch.ones(6, n, dtype=torch.bool), k.reshape(6), G)
    assert_close(X, X_ref.reshape(2, 3, n, 9), torch.float64)
    assert_close(grad, grad_ref.reshape(2, 3, n), torch.float64)


def exact_expected(x, lengths, k):
    """The exact matrix by a per-row loop: column of position r = one-hot of the element torch.sort(stable=True)
    puts there."""
    B, n = x.shape
    K = n if k is None else int(k.max()) if torch.is_tensor(k) else k
    P = torch.zeros(B, n, K, dtype=x.dtype)
    for b in range(B):
        L = int(lengths[b])
        order = torch.sort(x[b, :L], stable=True).indices
        kb = L if k is None else min(int(k[b]) if torch.is_tensor(k) else k, L)
        for q in range(kb):  # the q-th largest: position L - 1 - q
            col = L - 1 - q if k is None else K - 1 - q
            P[b, order[L - 1 - q], col] = 1
    return P


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", ["neuralsort", "softsort"])
def test_hard_is_exact_with_soft_gradient(backend, device, method):
    n = 7
    x, lengths = padded_rows(5, n, seed=9)
    x[3, :4] = torch.tensor([0.5, -1.0, 0.5, 0.5], dtype=torch.float64)  # ties: by index
    lengths[3] = 4
    for k in (None, 3, torch.tensor([2, 7, 1, 4, 3])):
        K = n if k is None else int(k.max()) if torch.is_tensor(k) else k
        G = torch.randn(5, n, K, dtype=torch.float64, generator=_gen(10))
        kk = k.to(device) if torch.is_tensor(k) else k
        kw = dict(k=kk, lengths=lengths.to(device))
        H, g_hard = call_and_grad(method, x.to(device), backend, G, hard=True, **kw)
        _, g_soft = call_and_grad(method, x.to(device), backend, G, **kw)
        assert torch.equal(H, exact_expected(x, lengths, k)), f"k={k}"
        assert_close(g_hard, g_soft, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck_padded(backend, device):
    """opcheck of the ops with lengths: the left-aligned full matrix (NeuralSort), a k per row (SoftSort)."""
    x, lengths = padded_rows(3, 7, seed=11)
    x, lengths = x.to(device), lengths.to(device)
    k = torch.tensor([1, 3, 7], device=device)
    for fn, kk in ((neuralsort, None), (softsort, k)):
        names = opcheck_calls(fn, x, TAU, kk, backend=backend, lengths=lengths)
        assert names == [f"relaxops::{fn.__name__}_fwd", f"relaxops::{fn.__name__}_bwd"]


@pytest.mark.parametrize("backend", [p.values[0] for p in BACKEND_DEVICE if p.values == ("cpu", "cpu")])
def test_gradcheck_padded(backend):
    x = (torch.randperm(10, generator=_gen(12)).to(torch.float64) * 0.3).reshape(2, 5).requires_grad_(True)
    lengths = torch.tensor([3, 5])
    for fn in (neuralsort, softsort):
        for k in (None, torch.tensor([2, 4])):
            assert torch.autograd.gradcheck(lambda v, f=fn, k=k: f(v, 0.5, k, lengths=lengths, backend=backend), (x,))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(dim=2), IndexError, "dim must be in"),
        (dict(dim=1.0), TypeError, "dim must be an int"),
        (dict(lengths=torch.tensor([1.0, 2.0])), TypeError, "lengths must be an int32 or int64 tensor"),
        (dict(lengths=torch.tensor([1, 2, 3])), ValueError, "lengths must have x's shape without dim"),
        (dict(lengths=torch.tensor([1, 6])), ValueError, r"lengths must lie in \[0, n\]"),
        (dict(mask=torch.ones(2, 5)), TypeError, "mask must be a bool tensor"),
        (dict(mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, "mask must have x's shape"),
        (dict(lengths=torch.tensor([1, 2]), mask=torch.ones(2, 5, dtype=torch.bool)), ValueError, "at most one"),
        (dict(k=0), ValueError, r"k must be an integer in \[1, n\]"),
        (dict(k=6), ValueError, r"k must be an integer in \[1, n\]"),
        (dict(k=2.0), ValueError, r"k must be an integer in \[1, n\]"),
        (dict(k=torch.tensor([1, 6])), ValueError, r"k must lie in \[1, n\]"),
        (dict(k=torch.tensor([1.0, 2.0])), TypeError, "k must be an int or an int32/int64 tensor"),
        (dict(k=torch.tensor([1, 2, 3])), ValueError, "k as a tensor must have x's shape without dim"),
        (dict(hard=1), TypeError, "hard must be a bool"),
    ],
)
@pytest.mark.parametrize("fn", [neuralsort, softsort])
def test_bad_arguments(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(torch.randn(2, 5), backend="reference", **kwargs)


@pytest.mark.parametrize("backend", [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"])
def test_registered_ops_check_rows(backend):
    x = torch.randn(2, 5, dtype=torch.float64)
    with pytest.raises(IndexError, match=r"lengths must hold indices in \[0, 6\)"):
        ops.neuralsort_fwd(x, 0.5, 3, backend, torch.tensor([2, 6]))
    with pytest.raises(IndexError, match=r"ks must hold indices in \[0, 4\)"):
        ops.softsort_fwd(x, 0.5, 3, 1.0, backend, None, torch.tensor([2, 4]))
    with pytest.raises(ValueError, match="left=True needs k = n"):
        ops.neuralsort_fwd(x, 0.5, 3, backend, None, None, True)
    with pytest.raises(TypeError, match="lengths must have dtype"):
        ops.neuralsort_fwd(x, 0.5, 3, backend, torch.tensor([2, 3], dtype=torch.int32))
