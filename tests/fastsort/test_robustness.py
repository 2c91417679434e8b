"""Robustness of the fastsort family: registered ops that check every argument (no crash), the C++ kernels'
own checks, the documented non-finite behaviour in every backend, finite results for finite input at extreme
strengths and magnitudes, clear errors for bad arguments, memory refusal."""

import math

import pytest
import torch
from relaxops import soft_rank, soft_sort
from relaxops.fastsort import ops
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, assert_raises_isolated

KERNELS = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
CPU_BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
inf, nan = math.inf, math.nan


def out_and_grad(fn, x, backend, reg="l2", eps=0.7, descending=False):
    x = x.detach().requires_grad_(True)
    out = fn(x, reg, eps, descending, backend=backend)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(out.dtype)
    (grad,) = torch.autograd.grad((out * g).nansum(), x)
    return out.detach(), grad


# --- registered ops never trust their arguments -----------------------------------------------------------------


@pytest.mark.parametrize("backend", KERNELS)
def test_registered_ops_check_every_argument(backend):
    x = torch.randn(3, 7, dtype=torch.float64)
    out, perm, block = ops.soft_rank_fwd(x, "l2", 1.0, False, backend)
    G = torch.randn_like(out)
    bad = [
        (lambda: ops.soft_rank_fwd(x, "l1", 1.0, False, backend), ValueError, "regularization must be one of"),
        (lambda: ops.soft_sort_fwd(x, "l2", 0.0, False, backend), ValueError, "regularization_strength must be"),
        (lambda: ops.soft_sort_fwd(x, "l2", nan, False, backend), ValueError, "regularization_strength must be"),
        (lambda: ops.soft_sort_fwd(x, "l2", 1e-320, False, backend), ValueError, "regularization_strength must be"),
        (lambda: ops.soft_rank_fwd(x.int(), "l2", 1.0, False, backend), TypeError, "x must have dtype"),
        (lambda: ops.soft_rank_fwd(x[:, :0], "l2", 1.0, False, backend), ValueError, "1 <= n < 2^31"),
        (lambda: ops.soft_rank_fwd(x[0], "l2", 1.0, False, backend), ValueError, "x must have shape"),
        (lambda: ops.soft_rank_fwd(x.t(), "l2", 1.0, False, backend), ValueError, "x must be contiguous"),
        (lambda: ops.soft_rank_fwd(x, "l2", 1.0, False, "reference"), ValueError, "backend must be one of"),
        (
            lambda: ops.soft_rank_bwd(G, out, x, perm.int(), block, "l2", 1.0, False, backend),
            TypeError,
            "perm must have dtype",
        ),
        (
            lambda: ops.soft_rank_bwd(G, out, x, perm, block.long(), "l2", 1.0, False, backend),
            TypeError,
            "block must have dtype",
        ),
        (
            lambda: ops.soft_rank_bwd(G, out, x, perm[:2], block, "l2", 1.0, False, backend),
            ValueError,
            "perm must have shape",
        ),
        (
            lambda: ops.soft_rank_bwd(G.float(), out, x, perm, block, "l2", 1.0, False, backend),
            TypeError,
            "grad must have dtype",
        ),
        (
            lambda: ops.soft_sort_bwd(G, out[:, :3], x, perm, block, "l2", 1.0, False, backend),
            ValueError,
            "out must have shape",
        ),
    ]
    for call, exc, match in bad:
        with pytest.raises(exc, match=match.replace("[", r"\[").replace("^", r"\^")):
            call()


@pytest.mark.parametrize("backend", KERNELS)
def test_backward_with_bad_indices_raises(backend):
    """Out-of-range perm / block entries, and a block that is no partition, are refused (in a child process:
    a crash must not take the test run down)."""
    exc, match = ("ValueError", "fastsort_backward: perm must hold") if backend == "cpu" else ("IndexError", "perm")
    for edit in ("perm[1, 2] = 10**9", "perm[0, 0] = -3"):
        assert_raises_isolated(
            f"""
            import torch, relaxops
            from relaxops.fastsort import ops
            x = torch.randn(3, 7, dtype=torch.float64)
            out, perm, block = ops.soft_rank_fwd(x, "l2", 1.0, False, "{backend}")
            {edit}
            ops.soft_rank_bwd(torch.randn_like(out), out, x, perm, block, "l2", 1.0, False, "{backend}")
        """,
            exc,
            match,
        )
    if backend == "cpu":
        assert_raises_isolated(
            """
            import torch, relaxops
            from relaxops.fastsort import ops
            x = torch.randn(3, 7, dtype=torch.float64)
            out, perm, block = ops.soft_sort_fwd(x, "kl", 1.0, False, "cpu")
            block[1] = torch.tensor([0, 0, 0, 1, 4, 4, 4], dtype=torch.int32)  # not a run start
            ops.soft_sort_bwd(torch.randn_like(out), out, x, perm, block, "kl", 1.0, False, "cpu")
        """,
            "ValueError",
            "block the run starts of a partition",
        )


def test_cpu_kernel_checks_its_parameters():
    """The C++ side checks what it relies on, whoever calls it."""
    from relaxops import _ext

    x = torch.randn(2, 4, dtype=torch.float64)
    o, p, b = torch.empty_like(x), torch.empty(2, 4, dtype=torch.int64), torch.empty(2, 4, dtype=torch.int32)
    for args, match in (
        ((1, 2, 0, 1.0, 0), "op must be 0"),
        ((1, 0, 5, 1.0, 0), "regularization must be"),
        ((1, 0, 0, -1.0, 0), "regularization_strength must be"),
        ((1, 0, 0, 1.0, 3), "descending"),
        ((2, 0, 0, 1.0, 0), "dtype must be"),
    ):
        with pytest.raises(ValueError, match=match):
            _ext._C.fastsort_forward(*args, 2, 4, x.data_ptr(), o.data_ptr(), p.data_ptr(), b.data_ptr())


# --- bad arguments of the public functions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(regularization="l1"), ValueError, r"regularization must be one of \['l2', 'kl'\]"),
        (dict(regularization=None), ValueError, "regularization must be one of"),
        (dict(regularization_strength=0.0), ValueError, "regularization_strength must be a finite number > 0"),
        (dict(regularization_strength=-1.0), ValueError, "regularization_strength must be a finite number > 0"),
        (dict(regularization_strength=math.inf), ValueError, "regularization_strength must be a finite number > 0"),
        (dict(regularization_strength=math.nan), ValueError, "regularization_strength must be a finite number > 0"),
        (
            dict(regularization_strength=1e-310),
            ValueError,
            r"regularization_strength must be >= 2.2250738585072014e-308",
        ),
        (dict(descending=1), TypeError, "descending must be a bool, got int"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
        (dict(backend="cuda"), RuntimeError, "backend 'cuda' cannot run"),
    ],
)
@pytest.mark.parametrize("fn", [soft_rank, soft_sort])
def test_bad_arguments(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(torch.randn(2, 5), **kwargs)


@pytest.mark.parametrize("fn", [soft_rank, soft_sort])
def test_bad_inputs(fn):
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        fn([1.0, 2.0])
    with pytest.raises(TypeError, match="x must be float16, bfloat16, float32 or float64"):
        fn(torch.arange(5))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        fn(torch.tensor(1.0))
    with pytest.raises(ValueError, match="n >= 1"):
        fn(torch.randn(3, 0))


def test_memory_refusal_names_the_size():
    """A batch whose buffers would not fit is refused with its size before any allocation (a meta-free check:
    expand makes a huge view without memory)."""
    x = torch.zeros(1, 1).expand(2**20, 2**16)
    with pytest.raises(MemoryError, match=r"needs \d+\.\d GiB"):
        soft_rank(x, backend="cpu")


# --- finite input: finite output at every strength and magnitude ------------------------------------------------

EXTREME = [
    (torch.arange(100.0).unsqueeze(0) + 1e5, 1e-3),
    (torch.tensor([[1e10]]), 1e-4),
    (torch.full((1, 3), 1e10), 1.0),
    (torch.full((2, 5), -3e9), 1e-30),
    (torch.tensor([[1e30, -1e30, 0.0, 1e30, 5.0]]), 1e-30),
    (torch.tensor([[1e30, -1e30, 0.0, 1e30, 5.0]]), 1e30),
    (torch.tensor([[1.0, 2.0, 2.0, 3.0]]) + 1e7, 1e-6),
    (torch.tensor([[1e-30, -2e-30, 3e-30]]), 1e4),
    (torch.tensor([[0.0, 1e10, 2e10, 1e10 + 4096.0, -5e9]]), 1e-300),  # x / eps overflows
    (torch.linspace(-2.0, 3.0, 50).unsqueeze(0), ops.MIN_STRENGTH),  # rho / eps overflows
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("case", range(len(EXTREME)))
def test_finite_input_gives_finite_output(backend, reg, case):
    x, eps = EXTREME[case]
    n = x.shape[-1]
    for dtype in (torch.float32, torch.float64):
        for fn in (soft_rank, soft_sort):
            out, grad = out_and_grad(fn, x.to(dtype), backend, reg, eps)
            assert torch.isfinite(out).all() and torch.isfinite(grad).all(), (fn.__name__, dtype)
        r = soft_rank(x.to(dtype), reg, eps, backend=backend)
        assert ((r >= 1 - 1e-3) & (r <= n + 1e-3)).all()


def hard_average_ranks(x):
    """The limit eps -> 0 of soft_rank: 1-based ascending ranks, tied elements sharing the mean of their ranks."""
    below = (x.unsqueeze(-1) > x.unsqueeze(-2)).sum(-1)
    equal = (x.unsqueeze(-1) == x.unsqueeze(-2)).sum(-1)
    return (below + (equal + 1) / 2).double()


TIES_FUZZ = torch.tensor([[0.0] * 7 + [2.771186135993236] * 3 + [5.937335675987216] * 14], dtype=torch.float64)
NORMAL_ROW = torch.randn(1, 2000, generator=torch.Generator().manual_seed(0))  # rounding to half makes ties


@pytest.mark.parametrize("backend", [b for b in CPU_BACKENDS if b in ("reference", "cpu")])
@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("eps", [1e-16, 1e-30, ops.MIN_STRENGTH])
def test_ties_at_tiny_strengths_give_the_hard_ranks(backend, reg, eps):
    """Blocks of equal values far from 0 at tiny strengths (x / eps has ulps larger than the ranks): the hard
    tie-averaged ranks, in float64 and in half precision, and the C++ kernel's gradient."""
    for x in (TIES_FUZZ, TIES_FUZZ.flip(-1) - 1e3, NORMAL_ROW.half(), NORMAL_ROW.bfloat16()):
        for descending in (False, True):
            r, grad = out_and_grad(soft_rank, x, backend, reg, eps, descending)
            hard = hard_average_ranks(-x if descending else x).to(x.dtype)
            assert_close(r.double(), hard.double(), torch.float64, msg=f"{x.dtype} descending={descending}")
            if "cpu" in KERNELS and backend == "reference" and x.dtype == torch.float64:
                assert_close(grad, out_and_grad(soft_rank, x, "cpu", reg, eps, descending)[1], scale=1 / eps)


# --- non-finite inputs: the documented behaviour, identical in every backend --------------------------------------

ROWS = torch.tensor(
    [
        [1.0, inf, 3.0, -inf, 0.5, inf, 2.0],
        [1.0, -inf, -inf, 0.3, 2.0, 5.0, 1.0],
        [inf, inf, inf, inf, inf, inf, inf],
        [1.0, inf, nan, -inf, 0.5, inf, 2.0],
        [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
    ],
    dtype=torch.float64,
)


@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("descending", [False, True])
def test_nonfinite_backends_agree(reg, descending):
    for fn in (soft_rank, soft_sort):
        ref = out_and_grad(fn, ROWS, "reference", reg, 0.7, descending)
        for backend in KERNELS:
            for a, b in zip(out_and_grad(fn, ROWS, backend, reg, 0.7, descending), ref):
                assert_close(a, b, torch.float64, msg=f"{fn.__name__} {backend}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("reg", ["l2", "kl"])
def test_nonfinite_rank_is_the_limit(backend, reg):
    """soft_rank: +-inf take the extreme ranks (equal infinities share their mean rank), the finite elements the
    soft ranks over the remaining positions (the limit of a large finite value), gradient 0 at infinities; a NaN
    makes the row NaN. soft_sort: a NaN or an infinity makes the row NaN."""
    r, grad = out_and_grad(soft_rank, ROWS, backend, reg)
    assert_close(r[0, [1, 5]], torch.full((2,), 6.5, dtype=torch.float64), torch.float64)
    assert r[0, 3] == 1.0
    assert_close(r[1, [1, 2]], torch.full((2,), 1.5, dtype=torch.float64), torch.float64)
    assert_close(r[2], torch.full((7,), 4.0, dtype=torch.float64), torch.float64)
    big = ROWS[:2].nan_to_num(posinf=1e6, neginf=-1e6)
    for row in (0, 1):  # equal infinities as equal large values: ties
        big_r = soft_rank(big[row : row + 1], reg, 0.7, backend="reference")
        assert_close(r[row : row + 1], big_r, torch.float64)
    fin = ROWS[:3].isfinite()
    assert (grad[:3][~fin] == 0).all() and torch.isfinite(grad[:3]).all()
    assert r[3].isnan().all() and grad[3].isnan().all()
    assert torch.isfinite(r[4]).all() and torch.isfinite(grad[4]).all()
    s, gs = out_and_grad(soft_sort, ROWS, backend, reg)
    assert s[:4].isnan().all() and gs[:4].isnan().all()
    assert torch.isfinite(s[4]).all() and torch.isfinite(gs[4]).all()
