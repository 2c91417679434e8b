"""Relaxed edit distance (docs/math/algorithms.md §4.4) on every backend against the float64 reference: odd sizes,
values and gradients, gradcheck, opcheck, torch.compile, the anchors of docs/math/algorithms.md §3, the hard limit,
AlgoVision's program, bad arguments and non-finite letters."""

import itertools
import math

import pytest
import torch
from relaxops.algorithms import ops, programs
from relaxops.algorithms.functional import edit_distance
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    opcheck_calls,
    outputs_and_grads,
)

SIZES = (0, 1, 2, 5, 7, 33)
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]
KERNELS_CPU = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
# (n, m, K): every pair of SIZES, the letter count cycling through 1, 2, 5
SHAPES = [(n, m, (1, 2, 5)[k % 3]) for k, (n, m) in enumerate(itertools.product(SIZES, SIZES))]


def letters(B, n, K, dtype=torch.float64, sharp=2.0, seed=0):
    """Random letter distributions [B, n, K] (softmax of scaled normal logits)."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(B, n, K, generator=g, dtype=torch.float64) * sharp, -1).to(dtype)


def one_hot(words, K=None):
    """[B, n, K] one-hot letters of equal-length strings over 'a', 'b', ..."""
    idx = torch.tensor([[ord(c) - ord("a") for c in w] for w in words])
    return torch.nn.functional.one_hot(idx, K or int(idx.max()) + 1).double()


def edit_call(s, t, backend, beta=5.0, return_matrix=True):
    """A case's call, (function, args, kwargs): what the reference checks run and test_opcheck checks the ops of."""
    return edit_distance, (s, t, beta), dict(return_matrix=return_matrix, backend=backend)


def edit_grads(s, t, backend, beta=5.0, seed=3):
    """distance, D and the gradients (s, t) of a fixed random linear functional of both (seed None: their sum)."""
    fn, args, kwargs = edit_call(s, t, backend, beta)
    return outputs_and_grads(fn, *args, seed=seed, **kwargs)


def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a):
        cur = [i + 1]
        for j, cb in enumerate(b):
            cur.append(min(prev[j + 1] + 1, cur[j] + 1, prev[j] + (ca != cb)))
        prev = cur
    return prev[-1]


# the Triton interpreter runs the sizes up to 7 (a 33 x 33 DP takes it ~40 s on 2 cores); GPUs run every size
MATCH_CASES = [
    pytest.param(*p.values, n, m, K, id=f"{p.id}-{n}x{m}x{K}", marks=p.marks)
    for p in KERNEL_BACKEND_DEVICE
    for n, m, K in SHAPES
    if p.values != ("triton", "cpu") or max(n, m) <= 7
]


@pytest.mark.parametrize("backend,device,n,m,K", MATCH_CASES)
def test_matches_reference(backend, device, n, m, K):
    s, t = letters(3, n, K, seed=n), letters(3, m, K, seed=100 + m)
    ref = edit_grads(s, t, "reference")
    out = edit_grads(s.to(device), t.to(device), backend)
    # the DP adds O(n + m) rounded terms per cell; gradients sum over the n m cells
    scale = max(1.0, (n + m) / 10)
    for a, b, what in zip(out, ref, ("distance", "D", "grad s", "grad t")):
        assert a.shape == b.shape and a.dtype == b.dtype, what
        assert_close(a.cpu(), b, torch.float64, scale=scale, msg=f"{what} float64")
    low = edit_grads(s.float(), t.float(), "reference")
    out32 = edit_grads(s.to(device, torch.float32), t.to(device, torch.float32), backend)
    for a, lo, b, what in zip(out32, low, ref, ("distance", "D", "grad s", "grad t")):
        assert_as_accurate_as_reference(a.cpu(), lo, b, torch.float32, scale=scale, msg=f"{what} float32")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("B", [0, 1, 3])
def test_batch_sizes_and_shapes(backend, device, B):
    s, t = letters(B, 5, 3), letters(B, 4, 3, seed=1)
    ref = edit_grads(s, t, "reference")
    out = edit_grads(s.to(device), t.to(device), backend)
    for a, b in zip(out, ref):
        assert a.shape == b.shape
        assert_close(a.cpu(), b, torch.float64)
    # leading batch dimensions [2, 3, ...] are rows of one batch
    s2, t2 = letters(6, 5, 3, seed=2).reshape(2, 3, 5, 3), letters(6, 4, 3, seed=3).reshape(2, 3, 4, 3)
    d, D = edit_distance(s2.to(device), t2.to(device), return_matrix=True, backend=backend)
    assert d.shape == (2, 3) and D.shape == (2, 3, 6, 5)
    assert_close(
        d.cpu(),
        edit_distance(s2.reshape(6, 5, 3), t2.reshape(6, 4, 3), backend="reference").reshape(2, 3),
        torch.float64,
    )


@pytest.mark.parametrize("backend", CPU_EXACT)
def test_gradcheck(backend):
    """float64 finite differences at generic points (no norm below the cosine's eps, where torch's convention
    does not differentiate the clamp)."""
    for n, m, K in ((3, 4, 2), (1, 5, 3), (4, 1, 1)):
        s = letters(2, n, K, seed=n).requires_grad_(True)
        t = letters(2, m, K, seed=m + 7).requires_grad_(True)
        assert torch.autograd.gradcheck(
            lambda a, b: edit_distance(a, b, 3.0, return_matrix=True, backend=backend),
            (s, t),
            eps=1e-6,
            atol=1e-6,
            rtol=1e-5,
        )


def test_reference_gradient_is_torchs_cosine():
    """The oracle's cost is torch.cosine_similarity's: with a zero letter and a letter below eps = 1e-8, the
    gradient is torch's (the clamp not differentiated), which the kernels reproduce in test_zero_and_tiny_letters."""
    x = torch.tensor([[3e-9, 4e-9]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[1e-5, 0.0]], dtype=torch.float64)
    c = torch.nn.functional.cosine_similarity(x, y, -1)
    (g,) = torch.autograd.grad(c.sum(), x)
    # d cos / d x = y / (N(x) N(y)) - cos / N(x) * x / |x|, N = max(|x|, 1e-8)
    nx, ny, rx = 1e-8, 1e-5, 5e-9
    want = y / (nx * ny) - c.item() / nx * x.detach() / rx
    assert abs(c.item() - 0.3) < 1e-15
    assert_close(g, want, torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_zero_and_tiny_letters(backend, device):
    s, t = letters(2, 4, 3), letters(2, 5, 3, seed=1)
    s[0, 1] = 0.0
    s[1, 2] = 1e-9
    t[1, 3] = torch.tensor([3e-9, 0.0, 4e-9], dtype=torch.float64)
    t[0, 0] = 0.0
    ref = edit_grads(s, t, "reference")
    out = edit_grads(s.to(device), t.to(device), backend)
    for a, b, what in zip(out, ref, ("distance", "D", "grad s", "grad t")):
        assert_close(a.cpu(), b, torch.float64, scale=b.abs().max().item(), msg=what)


def test_anchors():
    """docs/math/algorithms.md §3 (AlgoVision, float64, Min(beta = 5)), to 1e-7 relative. The anchors were taken at
    AlgoVision's default epsilon = 1e-5; with one row, one-hot letters (cosines exactly 0 or 1: a skipped branch has
    weight 0) and these soft letters (no cosine within 1e-5 of 0 or 1) its branch skip changes nothing."""
    for backend in CPU_EXACT:
        d, D = edit_distance(one_hot(["ab"]), one_hot(["ba"]), 5.0, return_matrix=True, backend=backend)
        assert abs(d.item() - 2.008672473) <= 1e-7 * 2.008672473
        want = torch.tensor([[0, 1, 2], [1, 1.01329671, 1.00643830], [2, 1.00643830, 2.00867247]], dtype=torch.float64)
        torch.testing.assert_close(D[0], want, rtol=1e-7, atol=1e-8)
        d = edit_distance(one_hot(["abba"]), one_hot(["aba"]), 5.0, backend=backend)
        assert abs(d.item() - 1.010178202) <= 1e-7 * 1.010178202
        assert abs(edit_distance(one_hot(["abba"]), one_hot(["aba"]), 100.0, backend=backend).item() - 1.0) < 1e-12
        s = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]], dtype=torch.float64, requires_grad=True)
        t = torch.tensor([[[0.3, 0.7], [0.6, 0.4]]], dtype=torch.float64)
        d = edit_distance(s, t, 5.0, backend=backend)
        assert abs(d.item() - 0.772178071) <= 1e-7 * 0.772178071
        (g,) = torch.autograd.grad(d.sum(), s)
        want = torch.tensor([[0.10823497, -0.97411473], [-0.80101865, 0.20025466]], dtype=torch.float64)
        torch.testing.assert_close(g[0], want, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_hard_limit(backend, device):
    """One-hot letters and a large beta: the exact Levenshtein distance (the relaxed minimum is within
    3 e^-beta (n + m) of the hard one; exact ties average equal values)."""
    g = torch.Generator().manual_seed(5)
    words = [
        (
            "".join("abcd"[int(i)] for i in torch.randint(0, 4, (n,), generator=g)),
            "".join("abcd"[int(i)] for i in torch.randint(0, 4, (m,), generator=g)),
        )
        for n, m in ((7, 5), (7, 5), (7, 5), (7, 5))
    ]
    s = one_hot([a for a, _ in words], 4).to(device)
    t = one_hot([b for _, b in words], 4).to(device)
    d = edit_distance(s, t, 60.0, backend=backend).cpu()
    want = torch.tensor([levenshtein(a, b) for a, b in words], dtype=torch.float64)
    assert (d - want).abs().max() < 1e-9
    same = edit_distance(s, s, 60.0, backend=backend)
    assert same.abs().max() < 1e-9


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_symmetry_and_empty_sequences(backend, device):
    s, t = letters(3, 6, 3).to(device), letters(3, 4, 3, seed=1).to(device)
    assert_close(edit_distance(s, t, backend=backend), edit_distance(t, s, backend=backend), torch.float64)
    empty = s[:, :0]
    assert_close(
        edit_distance(empty, t, backend=backend).cpu(), torch.full((3,), 4.0, dtype=torch.float64), torch.float64
    )
    assert_close(
        edit_distance(s, empty, backend=backend).cpu(), torch.full((3,), 6.0, dtype=torch.float64), torch.float64
    )
    x = s.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(edit_distance(x, empty, backend=backend).sum(), x)
    assert (g == 0).all()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_letter(backend, device, bad):
    """A non-finite letter makes its row's distance and gradient NaN; other rows are unaffected."""
    s, t = letters(3, 4, 2), letters(3, 5, 2, seed=1)
    s[1, 2, 0] = bad
    out = edit_grads(s.to(device), t.to(device), backend, seed=None)
    clean = edit_grads(s[[0, 2]].to(device), t[[0, 2]].to(device), backend, seed=None)
    d, D, gs, gt = (x.cpu() for x in out)
    assert d[1].isnan() and gs[1].isnan().all() and gt[1].isnan().all()
    assert D[1, 3:, 1:].isnan().all() and not D[1, :3].isnan().any()
    for a, c in zip(out, clean):
        assert_close(a[[0, 2]].cpu(), c.cpu(), torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    s, t = letters(3, 7, 3), letters(3, 6, 3, seed=1)
    exact = edit_grads(s, t, "reference")
    low = edit_grads(s.to(dtype), t.to(dtype), "reference")
    out = edit_grads(s.to(device, dtype), t.to(device, dtype), backend)
    for a, lo, e in zip(out, low, exact):
        assert a.dtype == dtype
        assert_low_precision_close(a.cpu(), lo, e, slack=1e-2 * max(1.0, e.abs().max().item()))


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls make: with and without D (no gradient of D), and an
    empty string."""
    s, t = letters(2, 5, 3).to(device), letters(2, 4, 3, seed=1).to(device)
    for a, b, return_matrix in ((s, t, True), (s, t, False), (s[:, :0], t, True)):
        fn, args, kwargs = edit_call(a, b, backend, 2.0, return_matrix)
        names = opcheck_calls(fn, *args, **kwargs)
        assert names == ["relaxops::edit_distance_fwd", "relaxops::edit_distance_bwd"], (return_matrix, names)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic):
    backend = "cpu" if "cpu" in KERNELS_CPU else "reference"
    torch._dynamo.reset()

    def f(a, b):
        d, D = edit_distance(a, b, 4.0, return_matrix=True, backend=backend)
        return d, D

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for n, m in ((5, 4), (7, 6)):
        s = letters(3, n, 2).requires_grad_(True)
        t = letters(3, m, 2, seed=1).requires_grad_(True)
        eager, comp = f(s, t), compiled(s, t)
        for a, b in zip(comp, eager):
            assert_close(a, b, torch.float64)
        g1 = torch.autograd.grad(sum(o.sum() for o in comp), (s, t))
        g2 = torch.autograd.grad(sum(o.sum() for o in eager), (s, t))
        for a, b in zip(g1, g2):
            assert_close(a, b, torch.float64)
        # the distance alone: D gets no gradient (the backward op without grad_D)
        g1 = torch.autograd.grad(compiled(s, t)[0].sum(), (s, t))
        g2 = torch.autograd.grad(f(s, t)[0].sum(), (s, t))
        for a, b in zip(g1, g2):
            assert_close(a, b, torch.float64)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(beta=0.0), ValueError, "beta must be a finite number > 0"),
        (dict(beta=math.inf), ValueError, "beta must be a finite number > 0"),
        (dict(beta="5"), ValueError, "beta must be a finite number > 0"),
        (dict(return_matrix=1), TypeError, "return_matrix must be a bool"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
        (dict(backend="cuda"), RuntimeError, "backend 'cuda' cannot run"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    if kwargs.get("backend") == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(exc, match=match):
        edit_distance(letters(2, 3, 2), letters(2, 4, 2), **kwargs)


def test_bad_tensors():
    s = letters(2, 3, 2)
    cases = [
        ((s.numpy(), s), TypeError, "s must be a torch.Tensor"),
        ((s, torch.ones(2, 4, 2, dtype=torch.long)), TypeError, "t must be float16, bfloat16, float32 or float64"),
        ((s[0, 0], s), ValueError, r"s must have at least 2 dimension"),
        ((s, s.float()), TypeError, "t must have the dtype of s"),
        ((s, letters(2, 4, 3)), ValueError, "the same letter dimension K >= 1"),
        ((s[..., :0], s[..., :0]), ValueError, "the same letter dimension K >= 1"),
        ((s, letters(3, 4, 2)), ValueError, "must have the same batch dimensions"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            edit_distance(*args)


@pytest.mark.parametrize("backend", KERNELS_CPU)
def test_registered_ops_check_arguments(backend):
    s, t = letters(2, 3, 2), letters(2, 4, 2)
    cases = [
        ((s.float(), t, 1.0, backend), TypeError, "t must have dtype"),
        ((s.transpose(1, 2), t, 1.0, backend), ValueError, "s must be contiguous"),
        ((s.transpose(1, 2).contiguous(), t, 1.0, backend), ValueError, r"t must have shape \[2, \*, 3\]"),
        ((s[:, :, :0], t, 1.0, backend), ValueError, "K >= 1"),
        ((s, t[:1], 1.0, backend), ValueError, r"t must have shape \[2, \*, 2\]"),
        ((s, t, -1.0, backend), ValueError, "beta must be a finite number > 0"),
        ((s, t, 1.0, "reference"), ValueError, "backend must be one of"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            ops.edit_distance_fwd(*args)
    D, cos = ops.edit_distance_fwd(s, t, 1.0, backend)
    gd = D[:, -1, -1].clone()
    with pytest.raises(ValueError, match=r"cos must have shape \[2, 3, 4\]"):
        ops.edit_distance_bwd(gd, D, s, t, D, cos[:, :2], 1.0, backend)
    with pytest.raises(ValueError, match="grad_D must be contiguous"):
        ops.edit_distance_bwd(gd, D.transpose(1, 2).contiguous().transpose(1, 2), s, t, D, cos, 1.0, backend)
    with pytest.raises(ValueError, match=r"grad_distance must have shape \[2\]"):
        ops.edit_distance_bwd(gd[:1], None, s, t, D, cos, 1.0, backend)


# --- AlgoVision's program (docs/math/algorithms.md §4.4) --------------------------------------------------------------


def algovision_levenshtein(n, m, beta, epsilon):
    """AlgoVision's program (docs/math/algorithms.md §4.4) built with its own classes: (the distance, D)."""
    av = pytest.importorskip("algovision")
    program = programs.edit_distance_program(beta, M=av, epsilon=epsilon)

    def run(s, t):
        D = program(s, t)
        return D[:, -1, -1], D

    return run


@pytest.mark.parametrize("epsilon", [0.0, 1e-9])
@pytest.mark.parametrize("sharp", [2.0, 30.0])
def test_matches_algovision(epsilon, sharp):
    """AlgoVision's program with (almost) no branch skipping, float64: values and gradients. sharp = 30 gives
    near-one-hot letters, whose cosines (~1e-13) are skipped at AlgoVision's default epsilon = 1e-5 (see
    test_algovision_default_epsilon) but not at 1e-9."""
    B, n, m, K = 3, 6, 5, 3
    s = letters(B, n, K, sharp=sharp).requires_grad_(True)
    t = letters(B, m, K, sharp=sharp, seed=1).requires_grad_(True)
    d_av, D_av = algovision_levenshtein(n, m, 5.0, epsilon)(s, t)
    g_av = torch.autograd.grad(d_av.sum() + D_av.sum(), (s, t))
    for backend in CPU_EXACT:
        d, D = edit_distance(s, t, 5.0, return_matrix=True, backend=backend)
        g = torch.autograd.grad(d.sum() + D.sum(), (s, t))
        for a, b in zip((d, D, *g), (d_av, D_av, *g_av)):
            assert_close(a, b, torch.float64, scale=10)


def test_algovision_default_epsilon():
    """At AlgoVision's default epsilon = 1e-5 a branch whose probability is <= 1e-5 for the whole batch is skipped:
    for a near-certain mismatch (cos ~ 1e-13) the program keeps the previous cell's cost weighted by cos, so the
    distance moves by ~1e-7 but the cost's derivative in cos becomes (previous cost - 1), 0 after a mismatch,
    instead of -1: the gradients differ by O(1). The fused op computes the relaxation itself."""
    B, n, m, K = 1, 8, 8, 2
    s = letters(B, n, K, sharp=30.0).requires_grad_(True)
    t = letters(B, m, K, sharp=30.0, seed=1).requires_grad_(True)
    d_av, _ = algovision_levenshtein(n, m, 5.0, 1e-5)(s, t)
    g_av = torch.autograd.grad(d_av.sum(), (s, t))
    d = edit_distance(s, t, 5.0, backend="reference")
    g = torch.autograd.grad(d.sum(), (s, t))
    assert 0 < (d - d_av).abs().max() < 1e-5
    assert max((a - b).abs().max() for a, b in zip(g, g_av)) > 0.1


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_double_backward_raises(backend, device):
    """Eager calls bypass the dispatcher, but not under create_graph: a second derivative through the kernels
    raises instead of silently leaving out this op's term."""
    s = letters(2, 4, 3).to(device).requires_grad_(True)
    t = letters(2, 3, 3, seed=1).to(device)
    (g,) = torch.autograd.grad((edit_distance(s, t, backend=backend) ** 2).sum(), s, create_graph=True)
    with pytest.raises(RuntimeError, match="edit_distance_bwd.*no autograd formula"):
        torch.autograd.grad(g.sum() + (s**3).sum(), s)
