"""Robustness of the otsort family: registered ops that check their arguments, the documented non-finite behaviour on
every backend, finite outputs for finite input of any magnitude, clear errors and memory refusals."""

import math

import pytest
import torch
from relaxops import OTSort, ot_quantile, ot_rank, ot_sort, ot_topk
from relaxops.otsort import ops, squash
from relaxops.otsort.functional import PRECISION
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, assert_raises_isolated

KERNELS = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
CPU_BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
# (backend, backward): the interpreted Triton kernels in the implicit mode only here (the unrolled replay runs its
# iterations in Python; it is compared with the reference in test_otsort.py and checked by opcheck)
MODES = [(b, w) for b in CPU_BACKENDS for w in ("implicit", "unrolled") if b != "triton" or w == "implicit"]
inf, nan = math.inf, math.nan


def outputs_and_grad(fn, x, backend, backward="implicit", **kw):
    """Outputs and the gradient of their sum (30 iterations at most: these are invariants, not accuracy)."""
    x = x.detach().requires_grad_(True)
    outs = fn(x, 0.05, backend=backend, backward=backward, max_iterations=30, **kw)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum(o.nansum() for o in outs)
    (grad,) = torch.autograd.grad(loss, x)
    return [o.detach() for o in outs], grad


FNS = [ot_sort, ot_rank, lambda x, *a, **k: ot_topk(x, 2, *a, **k), lambda x, *a, **k: ot_quantile(x, [0.3], *a, **k)]


@pytest.mark.parametrize("backend,backward", MODES)
@pytest.mark.parametrize("bad", [nan, inf, -inf])
def test_non_finite_row_is_nan_others_unaffected(backend, backward, bad):
    x = torch.randn(3, 6, dtype=torch.float64)
    x[1, 2] = bad
    for fn in FNS:
        outs, grad = outputs_and_grad(fn, x, backend, backward)
        clean, clean_grad = outputs_and_grad(fn, x[[0, 2]], backend, backward)
        for o, c in zip(outs, clean):
            assert o[1].isnan().all()
            assert_close(o[[0, 2]], c, torch.float64)
        assert grad[1].isnan().all()
        assert_close(grad[[0, 2]], clean_grad, torch.float64)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_finite_input_gives_finite_output(backend, dtype):
    """Huge, tiny, tied and constant rows: finite values, ranks in range, finite gradients; sorted values scale with
    x (the row is transported as x / max|x|)."""
    big = torch.finfo(dtype).max * 0.05 / (16 * 5)  # the documented bound for finite gradients at epsilon 0.05
    x = torch.tensor(
        [[big, -big, 0.0, big / 2, 1.0], [1e-30, 2e-30, 3e-30, 0.0, -1e-30], [2.0] * 5, [1.0, 1.0, 0.0, 0.0, 1.0]],
        dtype=dtype,
    )
    for backward in [w for b, w in MODES if b == backend]:
        for fn in FNS:
            outs, grad = outputs_and_grad(fn, x, backend, backward)
            for o in outs:
                assert o.isfinite().all(), (fn, backward)
            assert grad.isfinite().all(), (fn, backward)
    r = ot_rank(x, 0.05, backend=backend)
    assert ((r >= -1e-3) & (r <= 4 + 1e-3)).all()
    assert_close(ot_sort(x[2:3], tolerance=1e-9, backend=backend), x[2:3], dtype)  # a constant row: itself
    s = ot_sort(x[:1], backend=backend)
    assert s[0, 0] < 0 < s[0, -1] and s[0, -1] > big / 4


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_unscaled_positions_in_range_finite_beyond_refused(backend):
    """squashing="none", a callable and targets y enter the transport unscaled, centred at their midranges (mid): up
    to the documented precision bound finfo.eps max|xs - mid| max|y - mid| / epsilon <= PRECISION, outputs and
    gradients are finite and ranks in range; beyond it, or beyond the overflow bound sqrt(epsilon finfo.max / 16) of
    max|xs - mid| + max|y - mid|, the eager call refuses, naming the argument (float32 positions of 1e17 once gave
    ranks of 50 for n = 5). An offset alone is never refused (a bfloat16 one-target row of 1.6e30 once gave NaN)."""
    eps = 1e-3
    finfo = torch.finfo(torch.float32)
    v = 0.9 * PRECISION * eps / (finfo.eps * 0.5)  # max|x - mid| at 0.9 of the bound (max|y - mid| = 0.5)
    x = torch.tensor([[v, -v, 0.0, 0.5, 0.0]])
    for fn in FNS:
        for squashing in ("none", lambda t: t):
            xx = x.clone().requires_grad_(True)
            outs = fn(xx, eps, epsilon0=1.0, squashing=squashing, backend=backend, max_iterations=30)
            outs = outs if isinstance(outs, tuple) else (outs,)
            (grad,) = torch.autograd.grad(sum(o.sum() for o in outs), xx)
            assert all(o.isfinite().all() for o in outs) and grad.isfinite().all(), (fn, squashing)
    r = ot_rank(x + 1e3, eps, epsilon0=1.0, squashing="none", backend=backend, max_iterations=30)
    assert ((r >= -1e-2) & (r <= 4 + 1e-2)).all()
    with pytest.raises(ValueError, match=r"^x \(squashed\) too large for the precision of torch.float32 at"):
        ot_sort(x * 1.2, eps, squashing="none", backend=backend)
    assert ot_sort(x.double() * 1.2, eps, squashing="none", backend=backend, max_iterations=30).isfinite().all()
    with pytest.raises(ValueError, match=r"^x \(squashed\) too large for the transport"):
        ot_rank(torch.tensor([[1e30, -1e30]]), eps, squashing="none", backend=backend)
    with pytest.raises(ValueError, match=r"^y too large for the precision"):
        ot_sort(torch.randn(2, 3), eps, y=torch.tensor([0.0, 1.0, 1e3]), backend=backend)
    bound = math.sqrt(eps * finfo.max / 16)
    with pytest.raises(ValueError, match=r"^y too large for the transport"):
        ot_sort(torch.randn(2, 3), eps, y=torch.tensor([0.0, 1.0, 3 * bound]), backend=backend)
    with pytest.raises(ValueError, match=r"^y must hold finite"):
        ot_sort(torch.randn(2, 3), eps, y=torch.tensor([0.0, 1.0, inf]), backend=backend)
    for big in (torch.tensor([[1.6e30]], dtype=torch.bfloat16), torch.tensor([[1e30, 1e30, 1e30]])):
        r = ot_rank(big, eps, squashing="none", descending=True, backend=backend)
        assert r.isfinite().all() and (r.double() - (big.shape[-1] - 1) / 2).abs().max() < 1e-3


@pytest.mark.parametrize("backend", KERNELS)
def test_unrolled_backward_with_bad_iteration_counts_raises(backend):
    """iters beyond the history would read outside it: the C++ kernel checks the counts (run in a child)."""
    assert_raises_isolated(
        f"""
        import math, torch
        from relaxops.otsort import ops
        xs = torch.rand(2, 5, dtype=torch.float64)
        y = torch.linspace(0, 1, 5, dtype=torch.float64).repeat(2, 1)
        la = torch.full((2, 5), -math.log(5), dtype=torch.float64)
        f, g, e, it, hist = ops.ot_sinkhorn_fwd(xs, y, la, la.clone(), 0.1, 0.1, 0.95, 1e-6, 50, True, "{backend}")
        it[1] = 10**6
        ops.ot_sinkhorn_bwd(torch.ones_like(f), torch.zeros_like(g), xs, y, la, la.clone(), f, g, e, it, hist, 0.1,
                            0.1, 0.95, True, "{backend}")
    """,
        "ValueError",
        "iters must be in [0, history_len]",
    )


def test_cpu_kernel_checks_its_parameters():
    assert_raises_isolated(
        """
        import torch
        from relaxops import _ext
        x = torch.rand(2, 5, dtype=torch.float64)
        p = x.data_ptr()
        _ext._C.ot_sinkhorn_forward(1, (2, 5, 5), (0.1, 0.1, 0.95, 1e-3, 0, 0), p, p, p, p, p, p, p, p, 0, 0, 0)
    """,
        "ValueError",
        "max_iterations must be >= 1",
    )


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(epsilon=0.0), ValueError, "epsilon must be a finite number > 0"),
        (dict(epsilon=math.inf), ValueError, "epsilon must be a finite number > 0"),
        (dict(epsilon0=-1.0), ValueError, "epsilon0 must be a finite number > 0"),
        (dict(annealing=0.0), ValueError, r"annealing must be a number in \(0, 1\]"),
        (dict(annealing=1.5), ValueError, r"annealing must be a number in \(0, 1\]"),
        (dict(tolerance=-1.0), ValueError, "tolerance must be a finite number >= 0"),
        (dict(max_iterations=0), ValueError, r"max_iterations must be in \[1, 2\^31 - 1\]"),
        (dict(max_iterations=2.0), TypeError, "max_iterations must be an int"),
        (dict(squashing="atan"), ValueError, r"squashing must be one of \['logistic', 'none'\] or a callable"),
        (dict(backward="auto"), ValueError, r"backward must be one of \['implicit', 'unrolled'\]"),
        (dict(descending=1), TypeError, "descending must be a bool"),
        (dict(num_targets=0), ValueError, "num_targets must be an integer >= 1"),
        (dict(a=torch.ones(4)), ValueError, "a must have 5 entries along the op dimension dim"),
        (dict(a=-torch.ones(5)), ValueError, "a must hold finite weights > 0"),
        (dict(b=torch.tensor([1.0, math.nan])), ValueError, "b must hold finite weights > 0"),
        (dict(a=torch.ones(3, 5)), ValueError, r"a of shape \(3, 5\) does not broadcast to \(2, 5\)"),
        (dict(y=torch.ones(2, 3, 5)), ValueError, r"y of shape \(2, 3, 5\) does not broadcast"),
        (dict(squashing=lambda x: x[..., :2]), ValueError, "squashing must return a tensor of the shape of x"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
        (dict(backend="cuda"), RuntimeError, "backend 'cuda' cannot run"),
    ],
)
@pytest.mark.parametrize("fn", [ot_sort, ot_rank])
def test_bad_arguments(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(torch.randn(2, 5), **kwargs)


def test_bad_arguments_of_quantile_topk_and_module():
    x = torch.randn(2, 5)
    for q, match in (
        (0.0, "distinct levels in"),
        ([0.5, 0.5], "distinct levels"),
        ([], "non-empty"),
        ("a", "q must be a float or a 1-D sequence"),
        ([[0.2]], "1-D"),
        (torch.ones(2, 1), "1-D"),
    ):
        with pytest.raises((ValueError, TypeError), match=match):
            ot_quantile(x, q)
    with pytest.raises(ValueError, match="weight must be a finite number > 0"):
        ot_quantile(x, 0.5, weight=0.0)
    for k, exc in ((0, ValueError), (6, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="k must"):
            ot_topk(x, k)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        OTSort(epsilon=-1.0)
    with pytest.raises(TypeError, match="x must be float16, bfloat16, float32 or float64"):
        ot_rank(torch.arange(5))
    with pytest.raises(ValueError, match=r"n >= 1"):
        ot_sort(torch.zeros(3, 0))


def test_memory_refusal_names_the_options():
    x = torch.zeros(1, 4096).expand(10**6, 4096)
    with pytest.raises(MemoryError, match=r"GiB.*return_plan=False"):
        ot_sort(x, return_plan=True, backend="cpu" if "cpu" in KERNELS else "reference")
    with pytest.raises(MemoryError, match=r"GiB.*backward='implicit'"):
        ot_sort(x.requires_grad_(True), backward="unrolled", backend="cpu" if "cpu" in KERNELS else "reference")


@pytest.mark.parametrize("backend", KERNELS)
def test_registered_ops_check_arguments(backend):
    xs = squash(torch.randn(2, 5, dtype=torch.float64)).contiguous()
    y = torch.linspace(0, 1, 3, dtype=torch.float64).repeat(2, 1)
    la = torch.full((2, 5), -math.log(5), dtype=torch.float64)
    lb = torch.full((2, 3), -math.log(3), dtype=torch.float64)
    args = [xs, y, la, lb, 0.05, 0.1, 0.95, 1e-3, 100, False, backend]
    cases = [
        (0, xs.float(), TypeError, "y must have dtype"),
        (0, xs.t(), ValueError, "xs must be contiguous"),
        (1, y[:1], ValueError, r"y must have shape \[2, \*\]"),
        (2, la[:, :4], ValueError, "loga must have shape"),
        (3, lb.t().contiguous().t(), ValueError, "logb must be contiguous"),
        (4, 0.0, ValueError, "epsilon must be a number in"),
        (6, 1.5, ValueError, "decay must be a number in"),
        (7, -1.0, ValueError, "tolerance must be a number in"),
        (8, 0, ValueError, "max_iterations must be"),
        (10, "reference", ValueError, "backend must be one of"),
    ]
    for i, bad, exc, match in cases:
        a = list(args)
        a[i] = bad
        with pytest.raises(exc, match=match):
            ops.ot_sinkhorn_fwd(*a)
    f, g, e, it, hist = ops.ot_sinkhorn_fwd(*args)
    with pytest.raises(ValueError, match="the unrolled backward needs the history of an unrolled forward"):
        ops.ot_sinkhorn_bwd(f, g, xs, y, la, lb, f, g, e, it, hist, 0.05, 0.1, 0.95, True, backend)
    with pytest.raises(ValueError, match="gplan must have shape"):
        ops.ot_apply_bwd(g, f, torch.zeros(2, 5, 2, dtype=torch.float64), xs, y, f, g, e, la, lb, xs, y, g, f, backend)
    with pytest.raises(TypeError, match="iters must have dtype"):
        ops.ot_sinkhorn_bwd(f, g, xs, y, la, lb, f, g, e, it.long(), hist, 0.05, 0.1, 0.95, False, backend)
