"""Fast soft sort / soft rank on every backend against the float64 reference: odd sizes, both regularizations,
strengths 1e-4..1e4, descending, ties, batch shapes, half precision, gradients (gradcheck, finite differences),
opcheck, torch.compile, the worked examples of docs/math/fastsort.md §2 and the invariants of the projections."""

import math

import pytest
import torch
from relaxops import soft_rank, soft_sort
from relaxops.fastsort import ops
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    gapped,
    opcheck_calls,
    outputs_and_grads,
)

SIZES = (1, 2, 3, 5, 7, 33, 100)
FNS = {"rank": soft_rank, "sort": soft_sort}
REGS = ("l2", "kl")
STRENGTHS = (1e-4, 1e-2, 1.0, 1e2, 1e4)
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]


def soft_call(op, x, backend, reg="l2", eps=1.0, descending=False):
    """A case's call, (function, args, kwargs): what the reference checks run and test_opcheck checks the ops of."""
    return FNS[op], (x, reg, eps, descending), dict(backend=backend)


def soft_grads(op, x, backend, reg="l2", eps=1.0, descending=False, seed=7):
    """soft_rank / soft_sort's output and the input gradient of a random linear functional of it."""
    fn, args, kwargs = soft_call(op, x, backend, reg, eps, descending)
    return outputs_and_grads(fn, *args, seed=seed, **kwargs)


def scales(op, eps, x):
    """atol multipliers of (output, gradient): rank gradients scale with 1 / eps, sorted values with |x| and, inside
    pooled blocks, with n / eps (the offsets (j - mid) / eps)."""
    n = x.shape[-1]
    mag = max(1.0, x.abs().max().item() if x.numel() else 1.0)
    if op == "rank":
        return max(1.0, n / 10), max(1.0, 1 / eps)
    return max(1.0, n / 10) * mag * max(1.0, n * min(1.0, 1 / eps)), 1.0


# The cases of the reference checks, (op, regularization, strength, descending) on every size; the op checks take
# those of strength 1 (the forward and backward op of both functions, both regularizations and directions).
CASES = [(op, reg, eps, desc) for op in FNS for reg in REGS for eps in (0.01, 1.0, 10.0) for desc in (False, True)]


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("n", SIZES)
def test_matches_reference(backend, device, n):
    x = torch.randn(3, n, dtype=torch.float64)
    for op, reg, eps, descending in CASES:
        if eps == 1.0 or n <= 33 or backend != "triton":
            ref = soft_grads(op, x, "reference", reg, eps, descending)
            out = soft_grads(op, x.to(device), backend, reg, eps, descending)
            for a, b, s, what in zip(out, ref, scales(op, eps, x), ("out", "grad")):
                assert a.shape == b.shape and a.dtype == b.dtype
                assert_close(a.cpu(), b, torch.float64, scale=s, msg=f"{what} float64 eps={eps} desc={descending}")
            low = soft_grads(op, x.float(), "reference", reg, eps, descending)
            out32 = soft_grads(op, x.to(device, torch.float32), backend, reg, eps, descending)
            for a, lo, b, s, what in zip(out32, low, ref, scales(op, eps, x), ("out", "grad")):
                assert_as_accurate_as_reference(a.cpu(), lo, b, torch.float32, scale=s, msg=f"{what} float32 eps={eps}")


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] != "triton"])
@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", REGS)
def test_strengths_and_long_rows(backend, device, op, reg):
    """Strengths 1e-4..1e4 (hard to fully pooled) on rows of 1000 (radix-sorted on the CPU) and 150 (std::sort)."""
    for n in (150, 1000):
        x = torch.randn(2, n, dtype=torch.float64)
        for eps in STRENGTHS:
            ref = soft_grads(op, x, "reference", reg, eps)
            for a, b, s in zip(soft_grads(op, x.to(device), backend, reg, eps), ref, scales(op, eps, x)):
                assert_close(a.cpu(), b, torch.float64, scale=s, msg=f"n={n} eps={eps}")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("reg", REGS)
def test_ties(backend, device, reg):
    """Tied values always pool in the ranks (equal ranks); sorted values of ties are equal; gradients as the
    reference's autograd (the stable sort's order among ties)."""
    x = torch.tensor(
        [[0.5, -1.0, 0.5, 2.0, -1.0, 0.5, 0.0], [1.0] * 7, [3.0, 3.0, 1e-3, 2.0, 2.0, 2.0, 9.0]], dtype=torch.float64
    )
    for op in ("rank", "sort"):
        for eps in (1e-3, 0.3, 5.0):
            for desc in (False, True):
                ref = soft_grads(op, x, "reference", reg, eps, desc)
                out = soft_grads(op, x.to(device), backend, reg, eps, desc)
                for a, b, s in zip(out, ref, scales(op, eps, x)):
                    assert_close(a.cpu(), b, torch.float64, scale=s)
    r = soft_rank(x.to(device), reg, 1e-3, backend=backend).cpu()
    assert r[0, 0] == r[0, 2] == r[0, 5] and r[0, 1] == r[0, 4]
    assert_close(r[1], torch.full((7,), 4.0, dtype=torch.float64), torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7), (1, 1)])
def test_batch_shapes(backend, device, shape):
    x = torch.randn(shape, dtype=torch.float64)
    for op in ("rank", "sort"):
        ref = soft_grads(op, x, "reference")
        out = soft_grads(op, x.to(device), backend)
        for a, b in zip(out, ref):
            assert a.shape == shape
            assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_strided_input(backend, device):
    x = torch.randn(7, 5, dtype=torch.float64, device=device).t()  # last dim strided
    for fn in FNS.values():
        assert_close(fn(x, backend=backend), fn(x.contiguous(), backend=backend), torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    """Computed in float32 (float64 statistics): error vs float64 at most twice the reference run in low precision."""
    x = torch.randn(4, 17, dtype=torch.float64)
    for op in ("rank", "sort"):
        for reg in REGS:
            exact = soft_grads(op, x, "reference", reg, 0.5)
            low_ref = soft_grads(op, x.to(dtype), "reference", reg, 0.5)
            out = soft_grads(op, x.to(device, dtype), backend, reg, 0.5)
            for a, lr, e in zip(out, low_ref, exact):
                assert a.dtype == dtype
                assert_low_precision_close(a.cpu(), lr, e, slack=2e-2)


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", REGS)
@pytest.mark.parametrize("descending", [False, True])
def test_gradcheck(backend, op, reg, descending):
    x = (gapped((2, 6), gap=0.1) * 3).requires_grad_(True)
    for eps in (0.2, 1.0, 5.0):  # singletons, mixed blocks, one block
        assert torch.autograd.gradcheck(lambda v, eps=eps: FNS[op](v, reg, eps, descending, backend=backend), (x,))


def test_spec_worked_examples():
    """docs/math/fastsort.md §2: torchsort's ranks and L2 sorted values of x = [8, 0, 5, 3, 2, 1, 6, 7, 9]."""
    x = torch.tensor([[8.0, 0, 5, 3, 2, 1, 6, 7, 9]], dtype=torch.float64)
    for backend in CPU_EXACT + ["triton"] * any(p.values[0] == "triton" for p in KERNEL_BACKEND_DEVICE):
        assert_close(
            soft_rank(x, backend=backend),
            torch.tensor([[8.0, 1, 5, 4, 3, 2, 6, 7, 9]], dtype=torch.float64),
            torch.float64,
        )
        pooled = 41 / 9 + torch.arange(9, dtype=torch.float64) - 4  # one block: mean + (j - mid) / eps
        assert_close(soft_sort(x, backend=backend), pooled[None], torch.float64)
        assert_close(
            soft_sort(x, regularization_strength=0.1, backend=backend),
            torch.tensor([[0.0, 1, 2, 3, 5, 6, 7, 8, 9]], dtype=torch.float64),
            torch.float64,
        )


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("reg", REGS)
def test_descending_definition(backend, device, reg):
    """descending=True is soft_rank(-x) (the largest gets rank 1) and -soft_sort(-x) (values descending); in the hard
    limit the descending ranks are n + 1 - the ascending ones and the values are flipped."""
    x = gapped((3, 8), gap=0.1).to(device)
    for eps in (0.05, 1.0):
        assert_close(
            soft_rank(x, reg, eps, True, backend=backend), soft_rank(-x, reg, eps, backend=backend), torch.float64
        )
        assert_close(
            soft_sort(x, reg, eps, True, backend=backend), -soft_sort(-x, reg, eps, backend=backend), torch.float64
        )
    hard = soft_rank(x, reg, 1e-4, backend=backend)
    assert_close(soft_rank(x, reg, 1e-4, True, backend=backend), 9 - hard, torch.float64)
    assert_close(
        soft_sort(x, reg, 1e-4, True, backend=backend), soft_sort(x, reg, 1e-4, backend=backend).flip(-1), torch.float64
    )


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("reg", REGS)
def test_limits_and_invariants(backend, device, reg):
    """eps -> 0: the hard ranks (1-based) and torch.sort; eps -> oo (L2): all ranks (n + 1) / 2, all values the mean;
    ranks sum to n (n + 1) / 2 and lie in [1, n]; permutation equivariance; sorted values non-decreasing."""
    x = gapped((4, 13), gap=0.05).to(device)
    hard_rank = x.argsort(-1).argsort(-1).double() + 1
    assert_close(soft_rank(x, reg, 1e-4, backend=backend), hard_rank, torch.float64)
    assert_close(soft_sort(x, reg, 1e-4, backend=backend), x.sort(-1).values, torch.float64)
    for eps in (0.03, 0.5, 3.0):
        r = soft_rank(x, reg, eps, backend=backend)
        assert ((r >= 1 - 1e-9) & (r <= 13 + 1e-9)).all()
        assert_close(r.sum(-1), torch.full((4,), 91.0, dtype=torch.float64, device=device), torch.float64, scale=10)
        s = soft_sort(x, reg, eps, backend=backend)
        assert (s.diff(dim=-1) >= -1e-9).all()
        perm = torch.randperm(13, device=device)
        assert_close(soft_rank(x[:, perm], reg, eps, backend=backend), r[:, perm], torch.float64)
        assert_close(soft_sort(x[:, perm], reg, eps, backend=backend), s, torch.float64)
    if reg == "l2":  # one block: rank (x - mean) / eps + (n + 1) / 2, value mean + (j - mid) / eps
        mean = x.mean(-1, keepdim=True)
        assert_close(soft_rank(x, reg, 1e3, backend=backend), (x - mean) / 1e3 + 7, torch.float64, scale=10)
        j = torch.arange(13, dtype=torch.float64, device=device)
        assert_close(soft_sort(x, reg, 1e3, backend=backend), mean + (j - 6) / 1e3, torch.float64, scale=10)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_float32_soft_sort_accurate_at_small_strength(backend, device):
    """torchsort's float32 soft_sort at n = 1000, eps = 1e-4 is off by 0.1 on average (it forms rho / eps ~ 1e7 and
    subtracts it again); ours is float32-exact against the float64 oracle."""
    n = 1000 if backend != "triton" else 100
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(1))
    for reg in REGS:
        exact = soft_sort(x.double(), reg, 1e-4, backend="reference")
        out = soft_sort(x.to(device), reg, 1e-4, backend=backend).cpu().double()
        assert (out - exact).abs().max().item() <= 4 * torch.finfo(torch.float32).eps * exact.abs().max().item()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_backward_uses_recorded_blocks(backend, device):
    """Two blocks whose isotonic values differ by 5e-10: torchsort's backward (1e-9 tolerance) pools them; ours
    keeps the forward's blocks, so the gradient is the true one (singletons: the ranks are locally constant)."""
    x = torch.tensor([[0.0, 1.0 + 5e-10], [2.0, 1.0 - 5e-10]], dtype=torch.float64, device=device)
    out, grad = soft_grads("rank", x, backend)
    assert_close(out.cpu(), torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64), torch.float64)
    assert (grad == 0).all()
    fd = (soft_rank(x + 1e-12, backend=backend) - soft_rank(x, backend=backend)) / 1e-12
    assert (fd == 0).all()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_kl_gradient_finite_at_small_strength(backend, device):
    """torchsort exponentiates x / eps unshifted in its KL backward (NaN at eps = 1e-3 for unit inputs); ours uses
    the forward's ranks and block weights: finite, and equal to the reference's autograd."""
    x = torch.randn(2, 30, dtype=torch.float64) * 3
    for eps in (1e-3, 1e-2):
        out, grad = soft_grads("rank", x.to(device), backend, "kl", eps)
        ref = soft_grads("rank", x, "reference", "kl", eps)
        assert torch.isfinite(grad).all()
        for a, b in zip((out, grad), ref):
            assert_close(a.cpu(), b, torch.float64, scale=1 / eps)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_nan_filled_outputs_are_written(backend, device):
    """The autouse fixture NaN-fills every fresh buffer; finite input gives finite outputs, blocks and gradients."""
    x = torch.randn(5, 41, dtype=torch.float64, device=device)
    for fwd in (ops.soft_rank_fwd, ops.soft_sort_fwd):
        for reg in REGS:
            out, perm, block = fwd(x, reg, 0.7, False, backend)
            assert torch.isfinite(out).all()
            assert torch.equal(perm.cpu(), x.cpu().sort(dim=-1, stable=True).indices)
            j = torch.arange(41)
            b = block.cpu().long()
            assert (b[:, 0] == 0).all() and ((b[:, 1:] == j[1:]) | (b[:, 1:] == b[:, :-1])).all()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls make (their cases of strength 1, n = 7)."""
    x = torch.randn(3, 7, dtype=torch.float64, device=device)
    for op, reg, eps, descending in CASES:
        if eps == 1.0:
            fn, args, kwargs = soft_call(op, x, backend, reg, eps, descending)
            names = opcheck_calls(fn, *args, **kwargs)
            assert names == [f"relaxops::soft_{op}_fwd", f"relaxops::soft_{op}_bwd"], names


@pytest.mark.parametrize("backend", [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_fullgraph(backend, dynamic):
    """Both public functions under torch.compile(fullgraph=True), static and dynamic shapes, changing n and batch
    dims, forward and backward equal to eager."""
    for fn in (soft_rank, soft_sort):
        torch._dynamo.reset()
        compiled = torch.compile(
            lambda v, fn=fn: fn(v, "kl", 0.5, True, backend=backend), fullgraph=True, dynamic=dynamic
        )
        for shape in ((3, 7), (3, 9), (2, 2, 5)):
            x = torch.randn(shape, dtype=torch.float64)
            eager = run_fn(lambda v, fn=fn: fn(v, "kl", 0.5, True, backend=backend), x)
            for a, b in zip(run_fn(compiled, x), eager):
                assert_close(a, b, torch.float64)


def run_fn(f, x):
    x = x.detach().requires_grad_(True)
    out = f(x)
    (grad,) = torch.autograd.grad((out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum(), x)
    return out.detach(), grad


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_registered_op_is_differentiable(backend, device):
    """torch.ops.relaxops.soft_rank_fwd carries its own autograd (register_autograd), as the public path."""
    x = gapped((2, 6), gap=0.1).to(device).requires_grad_(True)
    out = torch.ops.relaxops.soft_rank_fwd(x, "l2", 0.7, False, backend)[0]
    (g1,) = torch.autograd.grad(out.sum() + (out * out).sum(), x)
    out2 = soft_rank(x, "l2", 0.7, backend=backend)
    (g2,) = torch.autograd.grad(out2.sum() + (out2 * out2).sum(), x)
    assert_close(g1, g2, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("op", ["rank", "sort"])
def test_double_backward_raises(backend, device, op):
    """Eager calls bypass the dispatcher, but not under create_graph: a second derivative through the kernels
    raises instead of silently leaving out this op's term."""
    x = gapped((2, 6), gap=0.1).to(device).requires_grad_(True)
    fn = soft_rank if op == "rank" else soft_sort
    (g,) = torch.autograd.grad((fn(x, backend=backend) ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=f"soft_{op}_bwd.*no autograd formula"):
        torch.autograd.grad(g.sum() + (x**3).sum(), x)


def test_softsort_is_a_different_op():
    """relaxops.softsort (Prillo & Eisenschlos) returns a relaxed permutation matrix; relaxops.soft_sort values."""
    import relaxops

    x = torch.randn(2, 5)
    assert relaxops.softsort(x).shape == (2, 5, 5) and relaxops.soft_sort(x).shape == (2, 5)
    assert math.isclose(relaxops.soft_rank(x).sum().item(), 30.0, rel_tol=1e-5)


@pytest.mark.parametrize("op", ["rank", "sort"])
def test_parallel_rows_equal_serial_rows(op):
    """B n >= 2^20 runs the rows on the OpenMP threads (fastsort_cpu.cpp's kParallelWork): the same numbers as each
    row alone (one thread), forward and backward."""
    if not any(p.values[0] == "cpu" for p in KERNEL_BACKEND_DEVICE):
        pytest.skip("relaxops._C is not built")
    x = torch.randn(5, 210_000, dtype=torch.float32)
    out, grad = soft_grads(op, x, "cpu", "kl", 0.3, True)
    for b in range(5):
        o, g = soft_grads(op, x[b : b + 1], "cpu", "kl", 0.3, True)
        assert torch.equal(o, out[b : b + 1])
        g_all = torch.autograd.grad(
            (
                FNS[op](x.requires_grad_(True), "kl", 0.3, True, backend="cpu")[b : b + 1]
                * torch.randn(1, 210_000, generator=torch.Generator().manual_seed(7), dtype=torch.float64).float()
            ).sum(),
            x,
        )[0][b : b + 1]
        assert torch.equal(g, g_all)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 3, 7, 100, 191, 192, 1000])
def test_cpu_sort_equals_torch_stable_sort(dtype, n):
    """The CPU kernel's own sorts (merge sort of packed keys below 192 elements, radix sort above) give
    torch.sort(stable=True)'s permutation of sgn x: ties by index, -0.0 equal to 0.0."""
    if not any(p.values[0] == "cpu" for p in KERNEL_BACKEND_DEVICE):
        pytest.skip("relaxops._C is not built")
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-3, 4, (4, n), generator=g).to(dtype) * 0.5
    x[1] = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    x[2, ::3] = -0.0
    for descending in (False, True):
        perm = ops.soft_sort_fwd(x, "l2", 1.0, descending, "cpu")[1]
        assert torch.equal(perm, torch.sort(-x if descending else x, dim=-1, stable=True).indices)
