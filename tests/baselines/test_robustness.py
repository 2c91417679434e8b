"""Robustness of the baselines family: registered ops that check their arguments (no crash), NeuralSort/SoftSort
finite for finite input, the documented non-finite behaviour in every backend, torch.compile and opcheck of every
public/registered op, memory refusals that name real options."""

import inspect
import math

import pytest
import torch
from relaxops.baselines import SmoothHardTopKLoss, SmoothTopKLoss, neuralsort, ops, smooth_topk_svm_loss, softsort
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, assert_raises_isolated

METHODS = {
    "neuralsort": (neuralsort, {}),
    "softsort": (softsort, {}),
    "softsort_pow2": (softsort, {"pow": 2.0}),
    "softsort_pow0.5": (softsort, {"pow": 0.5}),
}
KERNELS = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
CPU_BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
inf, nan = math.inf, math.nan


def matrix_and_grad(method, x, backend, k=None, tau=0.7):
    fn, kwargs = METHODS[method]
    x = x.detach().requires_grad_(True)
    X = fn(x, tau=tau, k=k, backend=backend, **kwargs)
    G = torch.randn(X.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(X.dtype)
    (grad,) = torch.autograd.grad((X * G).nansum(), x)
    return X.detach(), grad


# --- 1. registered ops never trust their arguments ----------------------------------------------------------


@pytest.mark.parametrize("backend", KERNELS)
@pytest.mark.parametrize("op", ["neuralsort_bwd", "softsort_bwd"])
def test_backward_with_out_of_range_permutation_raises(backend, op):
    """Used to read and write far outside grad_x (segfault); run in a child process."""
    pow_arg = "" if op == "neuralsort_bwd" else "1.0, "
    assert_raises_isolated(
        f"""
        import torch, relaxops
        x = torch.randn(3, 7, dtype=torch.float64)
        X = torch.rand(3, 7, 4, dtype=torch.float64)
        perm = torch.arange(7).repeat(3, 1)
        perm[1, 2] = 10**9
        torch.ops.relaxops.{op}(torch.randn_like(X), X, x, perm, 0.8, {pow_arg}"{backend}")
    """,
        "IndexError",
        "perm must hold indices in [0, 7)",
    )


def test_cpu_kernel_checks_perm_itself():
    """The C++ side checks the invariant it indexes memory with, whoever calls it."""
    assert_raises_isolated(
        """
        import torch
        from relaxops import _ext
        x = torch.randn(3, 7, dtype=torch.float64)
        X = torch.rand(3, 7, 4, dtype=torch.float64)
        perm = torch.arange(7).repeat(3, 1)
        perm[2, 6] = -5
        _ext._C.softsort_backward(1, 3, 7, 4, 0.8, 1.0, X.data_ptr(), X.data_ptr(), x.data_ptr(), perm.data_ptr(),
                                  0, 0, False, x.data_ptr())
    """,
        "ValueError",
        "softsort_backward: perm must hold indices in [0, n)",
    )


def _valid_args(backend):
    x = torch.randn(3, 7, dtype=torch.float64)
    X, perm = ops.neuralsort_fwd(x, 0.8, 4, backend)
    return x, X, perm


@pytest.mark.parametrize("backend", KERNELS)
def test_registered_ops_check_every_argument(backend):
    x, X, perm = _valid_args(backend)
    G = torch.randn_like(X)
    bad = [
        (lambda: ops.neuralsort_fwd(x, 0.8, 8, backend), ValueError, "neuralsort_fwd: k must be an integer in"),
        (lambda: ops.softsort_fwd(x, 0.8, 0, 1.0, backend), ValueError, "softsort_fwd: k must be an integer in"),
        (lambda: ops.neuralsort_fwd(x, -1.0, 3, backend), ValueError, "neuralsort_fwd: tau must be a finite"),
        (lambda: ops.softsort_fwd(x, 0.8, 3, nan, backend), ValueError, "softsort_fwd: pow must be a finite"),
        (lambda: ops.neuralsort_fwd(x.int(), 0.8, 3, backend), TypeError, "neuralsort_fwd: x must have dtype"),
        (lambda: ops.neuralsort_fwd(x[:, :0], 0.8, 1, backend), ValueError, "with n >= 1"),
        (lambda: ops.neuralsort_fwd(x[0], 0.8, 1, backend), ValueError, "neuralsort_fwd: x must have shape"),
        (lambda: ops.neuralsort_fwd(x.t(), 0.8, 1, backend), ValueError, "x must be contiguous"),
        (lambda: ops.neuralsort_fwd(x, 0.8, 3, "reference"), ValueError, "backend must be one of"),
        (lambda: ops.neuralsort_bwd(G, X, x, perm.int(), 0.8, backend), TypeError, "perm must have dtype"),
        (lambda: ops.neuralsort_bwd(G, X, x, perm[:2], 0.8, backend), ValueError, "perm must have shape [3, 7]"),
        (lambda: ops.neuralsort_bwd(G, X[:2], x, perm, 0.8, backend), ValueError, "X must have shape [3, 7, *]"),
        (lambda: ops.neuralsort_bwd(G[..., :3], X, x, perm, 0.8, backend), ValueError, "grad_X must have shape"),
        (lambda: ops.softsort_bwd(G.float(), X, x, perm, 0.8, 1.0, backend), TypeError, "grad_X must have dtype"),
        (
            lambda: ops.softsort_bwd(G, X.transpose(1, 2).contiguous().transpose(1, 2), x, perm, 0.8, 1.0, backend),
            ValueError,
            "X must be contiguous",
        ),
        (
            lambda: ops.softsort_bwd(G, torch.zeros(3, 7, 8, dtype=torch.float64), x, perm, 0.8, 1.0, backend),
            ValueError,
            "with 1 <= k <= n = 7",
        ),
        (lambda: ops.softsort_bwd(G, X, x, perm, 0.0, 1.0, backend), ValueError, "softsort_bwd: tau must be"),
    ]
    for call, exc, match in bad:
        with pytest.raises(exc, match=match.replace("[", r"\[").replace("]", r"\]").replace("*", r"\*")):
            call()


def test_cuda_backend_refused_for_cpu_tensors():
    x = torch.randn(2, 5)
    with pytest.raises(RuntimeError, match="neuralsort_fwd: backend 'cuda' cannot run"):
        ops.neuralsort_fwd(x, 1.0, 2, "cuda")


# --- 3. NeuralSort / SoftSort are finite for finite input ---------------------------------------------------


ISSUE_CASES = [  # (x, tau): the issue's three NeuralSort cases, then the same shapes of trouble for both
    (torch.arange(100.0).unsqueeze(0) + 1e5, 1e-3),
    (torch.tensor([[1e10]]), 1e-4),
    (torch.full((1, 3), 1e10), 1.0),
    (torch.full((2, 5), -3e9), 1e-30),
    (torch.tensor([[1e30, -1e30, 0.0, 1e30, 5.0]]), 1e-40),
    (torch.tensor([[1.0, 2.0, 2.0, 3.0]]) + 1e7, 1e-6),
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", range(len(ISSUE_CASES)))
def test_finite_input_gives_finite_columns_summing_to_one(backend, method, case):
    x, tau = ISSUE_CASES[case]
    for dtype in (torch.float32, torch.float64):
        X, grad = matrix_and_grad(method, x.to(dtype), backend, tau=tau)
        assert torch.isfinite(X).all(), f"{X.isnan().sum()} NaN"
        assert_close(X.sum(-2), torch.ones_like(X.sum(-2)), torch.float32)
        assert ((X >= 0) & (X <= 1)).all()
        if tau >= 1e-6:  # the gradient scales with 1 / tau: finite while that is
            assert torch.isfinite(grad).all()


def test_issue_examples_exact():
    """The issue's cases: one element has weight 1; equal huge values share each column equally."""
    for backend in CPU_BACKENDS:
        assert neuralsort(torch.tensor([[1e10]]), tau=1e-4, backend=backend).item() == 1.0
        X = neuralsort(torch.full((1, 3), 1e10), tau=1.0, backend=backend)
        assert_close(X, torch.full((1, 3, 3), 1 / 3), torch.float32)
        X = neuralsort(torch.arange(100.0).unsqueeze(0) + 1e5, tau=1e-3, backend=backend)
        assert_close(X[0], torch.eye(100), torch.float32)  # gaps of 1 at tau = 1e-3: a hard sort


@pytest.mark.parametrize("backend", KERNELS)
@pytest.mark.parametrize("method", list(METHODS))
def test_large_offset_matches_the_unshifted_reference(backend, method):
    """The matrices are shift invariant; the kernels (and the reference) compute them from centred values, so an
    offset of 1e6 (float32: exact integers plus multiples of 1/16) changes nothing."""
    x = torch.tensor([[0.0, 0.5, -1.25, 2.0, 0.75, -0.5, 1.5]])
    ref = matrix_and_grad(method, x.double(), "reference", tau=0.3)
    for a, b in zip(matrix_and_grad(method, x + 1e6, backend, tau=0.3), ref):
        assert_close(a, b, torch.float32)
    for a, b in zip(matrix_and_grad(method, x + 1e6, "reference", tau=0.3), ref):
        assert_close(a, b, torch.float32)


# --- 7. non-finite inputs: the documented limits, identical in every backend -------------------------------


NONFINITE_ROWS = torch.tensor(
    [
        [1.0, inf, 3.0, -inf, 0.5, inf, 2.0],
        [1.0, -inf, -inf, 0.3, 2.0, 5.0, 1.0],
        [inf, inf, inf, inf, inf, inf, inf],
        [-inf, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0],
    ],
    dtype=torch.float64,
)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("method", list(METHODS))
def test_infinities_are_the_limit(backend, method):
    """+-inf take the extreme positions (equal infinities share them), the finite elements get the matrix of the
    finite ones, the infinite elements gradient 0."""
    for row in NONFINITE_ROWS:
        X, grad = matrix_and_grad(method, row[None], backend, k=5)
        lo, hi = int((row == -inf).sum()), int((row == inf).sum())
        n, fin = row.numel(), row.isfinite()
        for j, r in enumerate(range(n - 5, n)):
            if r < lo:
                expected = (row == -inf).double() / lo
            elif r >= n - hi:
                expected = (row == inf).double() / hi
            else:
                sub = matrix_and_grad(method, row[fin][None], "reference")[0][0, :, r - lo]
                expected = torch.zeros(n, dtype=torch.float64).masked_scatter(fin, sub)
            assert_close(X[0, :, j], expected, torch.float64, msg=f"row {row.tolist()} column {j}")
        assert torch.isfinite(grad).all() and (grad[0, ~fin] == 0).all()


@pytest.mark.parametrize("method", list(METHODS))
def test_nonfinite_backends_agree(method):
    rows = torch.cat([NONFINITE_ROWS, torch.tensor([[1.0, inf, nan, -inf, 0.5, inf, 2.0]], dtype=torch.float64)])
    ref = matrix_and_grad(method, rows, "reference", k=6)
    for backend in KERNELS:
        for a, b in zip(matrix_and_grad(method, rows, backend, k=6), ref):
            assert_close(a, b, torch.float64)
    X, grad = ref
    assert X[-1].isnan().all()  # NaN: the whole row
    assert grad[-1, rows[-1].isinf()].eq(0).all() and grad[-1, ~rows[-1].isinf()].isnan().all()


def test_smooth_topk_nonfinite():
    s = torch.tensor(
        [
            [inf, 0.0, 1.0, 2.0, 3.0],
            [0.0, -inf, 1.0, 2.0, 3.0],
            [-inf, 0.0, 1.0, 2.0, 3.0],
            [0.0, inf, 1.0, 2.0, 3.0],
            [0.0, nan, 1.0, 2.0, 3.0],
        ],
        dtype=torch.float64,
        requires_grad=True,
    )
    for hard in (None, 1000.0):
        loss = smooth_topk_svm_loss(s, torch.zeros(5, dtype=torch.long), 2, hard_threshold=hard, reduction="none")
        (grad,) = torch.autograd.grad(loss[:4].sum(), s)
        assert loss[0] == 0 and torch.isfinite(loss[1]) and loss[2] == inf and loss[4].isnan()
        assert grad[1, 1] == 0 and torch.isfinite(grad[:4]).all()  # -inf other class: drops out
        # +inf other class (k = 2): joins every subset, the limit log(1 + e (e^0.5 + e + e^1.5)) = 3.2210
        assert abs(loss[3].item() - math.log1p(math.e * (math.exp(0.5) + math.e + math.exp(1.5)))) < 1e-12
        assert grad[3, 1] == 0


# --- 5. torch.compile (the full opcheck of every op: test_neuralsort_softsort.py::test_opcheck) ---------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("fn", [neuralsort, softsort])
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_fullgraph_with_changing_n(backend, fn, dynamic):
    torch._dynamo.reset()
    # the reference is plain PyTorch: aot_eager traces it as inductor does, minus inductor's slow C++ codegen
    compiler = "aot_eager" if backend == "reference" else "inductor"
    compiled = torch.compile(
        lambda x: fn(x, 0.5, k=2, hard=True, backend=backend), fullgraph=True, dynamic=dynamic, backend=compiler
    )
    for n in (3, 5, 8) if dynamic else (3, 5):  # static: each n is a fresh compile of the same graph, two show it
        x = torch.randn(2, 3, n, dtype=torch.float64)
        eager = matrix_and_grad_of(lambda t: fn(t, 0.5, k=2, hard=True, backend=backend), x)
        for a, b in zip(matrix_and_grad_of(compiled, x), eager):
            assert_close(a, b, torch.float64)


def matrix_and_grad_of(f, x):
    x = x.detach().requires_grad_(True)
    X = f(x)
    (grad,) = torch.autograd.grad((X * torch.linspace(-1, 1, X.numel()).view(X.shape)).sum(), x)
    return X.detach(), grad


# each loss in one mode (the two share their code)
@pytest.mark.parametrize("cls,dynamic", [(SmoothTopKLoss, False), (SmoothHardTopKLoss, True)])
def test_smooth_topk_compiles_fullgraph(cls, dynamic):
    torch._dynamo.reset()
    loss = cls(10, 2, tau=0.5)
    # plain PyTorch: aot_eager traces it as inductor does, minus inductor's slow C++ codegen
    compiled = torch.compile(loss, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for B in (3, 6) if dynamic else (3,):  # static: a second B only recompiles the same graph
        s = torch.randn(B, 10, dtype=torch.float64) * 4
        y = torch.randint(0, 10, (B,))
        s.requires_grad_(True)
        ref, out = loss(s, y), compiled(s, y)
        assert_close(out, ref, torch.float64)
        assert_close(torch.autograd.grad(out, s)[0], torch.autograd.grad(ref, s)[0], torch.float64)


# --- 8. memory refusals name options the function takes ---------------------------------------------------


@pytest.mark.parametrize("fn", [neuralsort, softsort])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_memory_error_names_real_options(fn, backend):
    with pytest.raises(MemoryError) as info:
        fn(torch.zeros(1, 4096).expand(10**6, 4096), k=4096, backend=backend)
    msg = str(info.value)
    assert "GiB" in msg and "return_matrix" not in msg
    hint = msg.rsplit(";", 1)[1]
    params = inspect.signature(fn).parameters
    for option in ("k", "backend"):
        if f" {option}" in hint or f"{option}=" in hint:
            assert option in params
    assert "batch" in hint


def test_reference_autograd_memory_is_refused():
    """NeuralSort's reference builds [B, n, n] pairwise sums: refused with the size even where the [B, n, 1]
    output is small (it used to fail in the allocator or exhaust the memory)."""
    assert_raises_isolated(
        """
        import torch, relaxops
        relaxops.neuralsort(torch.zeros(1, 3 * 10**6), k=1, backend="reference")
    """,
        "MemoryError",
        "or a compiled backend (backend='cpu' or 'cuda'",
    )
