"""Relaxed shortest path, bad input and edge cases: clear errors naming the argument (public function and registered
ops), the C++ kernels' own checks, non-finite and extreme costs in every backend, batch independence of the "for"
loop, memory refusal, and a property-based comparison of the CPU kernel with the reference."""

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from relaxops import _ext
from relaxops.algorithms import ops
from relaxops.algorithms.functional import shortest_path
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close

KERNELS = [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values[1] == "cpu"]
CPU_BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]
# without the interpreted Triton kernels: where while loops may run up to max_iter steps
CPU_EXACT = [b for b in CPU_BACKENDS if b != "triton"]


def grid_cost(B, H, W, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.sigmoid(torch.randn(B, H, W, generator=g, dtype=torch.float64) * 4) + 0.2


def test_bad_arguments_name_the_argument():
    c = grid_cost(2, 3, 4)
    bad = [
        (lambda: shortest_path([[1.0]]), TypeError, "cost must be a torch.Tensor"),
        (lambda: shortest_path(c.half()), TypeError, "cost must be float32 or float64"),
        (lambda: shortest_path(c.long()), TypeError, "cost must be float32 or float64"),
        (lambda: shortest_path(c[0, 0]), ValueError, "cost must have shape"),
        (lambda: shortest_path(c[None]), ValueError, "cost must have shape"),
        (lambda: shortest_path(c[:, :0]), ValueError, "cost must have shape"),
        (lambda: shortest_path(c, beta=0.0), ValueError, "beta must be a finite number > 0"),
        (lambda: shortest_path(c, beta=-1.0), ValueError, "beta must be"),
        (lambda: shortest_path(c, beta=math.inf), ValueError, "beta must be"),
        (lambda: shortest_path(c, beta=True), ValueError, "beta must be"),
        (lambda: shortest_path(c, n_iter=0), ValueError, "n_iter must be an integer in [1, 2^31)"),
        (lambda: shortest_path(c, n_iter=2.0), ValueError, "n_iter must be an integer"),
        (lambda: shortest_path(c, n_trace=-1), ValueError, "n_trace must be an integer in [0, 2^31)"),
        (lambda: shortest_path(c, loop="until"), ValueError, "loop must be one of ['for', 'while']"),
        (lambda: shortest_path(c, loop="while", n_trace=3), ValueError, "n_trace sets the steps of loop='for'"),
        (lambda: shortest_path(c, t_conorm="max"), ValueError, "t_conorm must be one of"),
        (lambda: shortest_path(c, t_conorm="hamacher"), ValueError, "hamacher_p is required"),
        (lambda: shortest_path(c, t_conorm="hamacher", hamacher_p=0.0), ValueError, "hamacher_p must be a finite"),
        (lambda: shortest_path(c, t_conorm="hamacher", hamacher_p=math.nan), ValueError, "hamacher_p must be"),
        (lambda: shortest_path(c, hamacher_p=2.0), ValueError, "hamacher_p is the parameter of t_conorm='hamacher'"),
        (lambda: shortest_path(c, loop="while", max_iter=-1), ValueError, "max_iter must be an integer"),
        (lambda: shortest_path(c, loop="while", epsilon=-1e-5), ValueError, "epsilon must be a finite number >= 0"),
        (lambda: shortest_path(c, loop="while", epsilon=math.nan), ValueError, "epsilon must be"),
        (lambda: shortest_path(c, backend="gpu"), ValueError, "backend must be one of"),
    ]
    for call, exc, match in bad:
        with pytest.raises(exc, match=re.escape(match)):
            call()


@pytest.mark.parametrize("backend", KERNELS)
def test_registered_ops_check_every_argument(backend):
    c = grid_cost(2, 3, 4)
    args = (5.0, 7, 7, "probabilistic", 0.0, "for", 16, 1e-5)
    out, jac, pi, steps = ops.shortest_path_fwd(c, *args, True, backend)
    G = torch.randn_like(out)
    fwd, bwd = ops.shortest_path_fwd, ops.shortest_path_bwd
    bad = [
        (lambda: fwd(c, 0.0, *args[1:], True, backend), ValueError, "beta must be a finite number > 0"),
        (lambda: fwd(c, 5.0, 0, *args[2:], True, backend), ValueError, "n_iter must be an integer in [1, 2^31)"),
        (lambda: fwd(c, *args[:2], -1, *args[3:], True, backend), ValueError, "n_trace must be"),
        (lambda: fwd(c, *args[:3], "max", *args[4:], True, backend), ValueError, "t_conorm must be one of"),
        (lambda: fwd(c, *args[:3], "hamacher", -2.0, *args[5:], True, backend), ValueError, "hamacher_p must be"),
        (lambda: fwd(c, *args[:5], "do", *args[6:], True, backend), ValueError, "loop must be one of"),
        (lambda: fwd(c, *args[:6], -3, 1e-5, True, backend), ValueError, "max_iter must be"),
        (lambda: fwd(c, *args[:7], -1.0, True, backend), ValueError, "epsilon must be"),
        (lambda: fwd(c, *args, True, "reference"), ValueError, "backend must be one of"),
        (lambda: fwd(c.int(), *args, True, backend), TypeError, "cost must have dtype"),
        (lambda: fwd(c[0], *args, True, backend), ValueError, "cost must have shape"),
        (lambda: fwd(c[:, :, :0], *args, True, backend), ValueError, "H, W >= 1"),
        (lambda: fwd(c.transpose(1, 2), *args, True, backend), ValueError, "cost must be contiguous"),
        (lambda: bwd(G.float(), jac, pi, steps, *args, backend), TypeError, "jac must have dtype"),
        (lambda: bwd(G, jac[:, :2], pi, steps, *args, backend), ValueError, "jac must have shape"),
        (lambda: bwd(G, jac[:, :0], pi, steps, *args, backend), ValueError, "save=False"),
        (lambda: bwd(G, jac, pi[..., :4], steps, *args, backend), ValueError, "pi must have shape"),
        (lambda: bwd(G, jac, pi, steps.long(), *args, backend), TypeError, "steps must have dtype"),
        (lambda: bwd(G[:, :2].contiguous(), jac, pi, steps, *args, backend), ValueError, "jac must have shape"),
    ]
    for call, exc, match in bad:
        with pytest.raises(exc, match=re.escape(match)):
            call()
    # the kernels check the step count they are given (n_trace for "for", <= max_iter for "while")
    with pytest.raises(ValueError, match="steps must be n_trace"):
        bwd(G, jac, pi, torch.tensor([9], dtype=torch.int32), *args, backend)
    while_args = (5.0, 7, 7, "probabilistic", 0.0, "while", 16, 1e-5)
    with pytest.raises(ValueError, match="steps must be"):
        bwd(G, jac, pi, torch.tensor([17], dtype=torch.int32), *while_args, backend)


def test_cpu_kernel_checks_its_parameters():
    if not _ext.has_cpu():
        pytest.skip("relaxops._C is not built")
    c = grid_cost(1, 2, 2)
    out, pi, steps = torch.empty_like(c), c.new_empty(1, 8, 2, 4), torch.empty(1, dtype=torch.int32)
    for ints, floats, match in (
        ((1, 2, 2, 0, 1, 0, 0, 8), (1.0, 0.0, 0.0), "n_iter"),
        ((1, 2, 2, 1, 1, 2, 0, 8), (1.0, 0.0, 0.0), "loop"),
        ((1, 2, 2, 1, 1, 0, 3, 8), (1.0, 0.0, 0.0), "t_conorm"),
        ((1, 2, 2, 1, 1, 0, 1, 8), (1.0, 0.0, 0.0), "hamacher_p"),
        ((1, 2, 2, 1, 1, 0, 0, 8), (math.nan, 0.0, 0.0), "beta"),
        ((1, 0, 2, 1, 1, 0, 0, 8), (1.0, 0.0, 0.0), "H >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            _ext._C.shortest_path_forward(
                1, ints, floats, c.data_ptr(), out.data_ptr(), 0, pi.data_ptr(), steps.data_ptr()
            )


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("loop", ["for", "while"])
def test_non_finite_costs(backend, loop):
    """A NaN or infinite cost makes its row NaN (0 inf in the program's sums) and leaves the other rows as they are."""
    # the NaN row never stops a while loop: the interpreter runs a smaller grid and max_iter steps
    c = grid_cost(3, 3, 4, seed=2) if backend == "triton" else grid_cost(3, 4, 5, seed=2)
    kw = dict(loop=loop, backend=backend, **({"max_iter": 48} if loop == "while" and backend == "triton" else {}))
    clean = shortest_path(c[1:], **kw)
    for bad in (math.nan, math.inf, -math.inf):
        x = c.clone()
        x[0, 2, 1] = bad
        out = shortest_path(x, **kw)
        assert out[0].isnan().all(), f"{bad}"
        assert_close(out[1:], clean, torch.float64)


@pytest.mark.parametrize("backend", CPU_EXACT)
def test_extreme_finite_costs(backend):
    """Any finite costs give finite paths and gradients: large, tiny, zero and negative node weights, both dtypes."""
    for dtype in (torch.float64, torch.float32):
        for c in (
            grid_cost(2, 4, 5) * 1e6,
            grid_cost(2, 4, 5) * 1e-6,
            torch.zeros(2, 4, 5, dtype=torch.float64),
            grid_cost(2, 4, 5) - 0.9,
            -grid_cost(2, 4, 5),
        ):
            for loop in ("for", "while"):
                x = c.to(dtype).requires_grad_(True)
                out = shortest_path(x, loop=loop, backend=backend)
                (g,) = torch.autograd.grad(out.sum(), x)
                assert out.isfinite().all() and g.isfinite().all(), (dtype, loop, c.flatten()[:3])
                ref = shortest_path(c.to(dtype), loop=loop, backend="reference")
                assert_close(out.detach().double(), ref.double(), dtype, scale=10)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_for_loop_rows_are_independent(backend):
    c = grid_cost(4, 5, 6, seed=4)
    out = shortest_path(c, backend=backend)
    for b in range(4):
        assert_close(shortest_path(c[b : b + 1], backend=backend), out[b : b + 1], torch.float64)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_while_trip_count_is_the_batch_max(backend):
    """AlgoVision's batch-wide rule: a row alone stops when its own continuation probability is <= epsilon; in a batch
    it runs as many steps as the slowest row, which moves its result by at most ~epsilon."""
    c = grid_cost(2, 4, 5, seed=5) if backend == "triton" else grid_cost(2, 6, 6, seed=5)
    c[1] = c[1] * 4  # a longer-lasting row
    together = shortest_path(c, loop="while", backend=backend)
    alone = shortest_path(c[:1], loop="while", backend=backend)
    assert (together[0] - alone[0]).abs().max() < 1e-4
    if backend != "reference":
        _, _, _, steps = ops.shortest_path_fwd(
            c, 10.0, 12, 12, "probabilistic", 0.0, "while", 1024, 1e-5, False, backend
        )
        _, _, _, one = ops.shortest_path_fwd(
            c[:1].contiguous(), 10.0, 12, 12, "probabilistic", 0.0, "while", 1024, 1e-5, False, backend
        )
        assert int(steps) >= int(one)


def test_memory_refusal():
    """A grid whose saved Jacobians cannot fit is refused with their size before anything is allocated."""
    leaf = torch.zeros(1, 1, 1, dtype=torch.float64, requires_grad=True)
    for backend in CPU_BACKENDS:
        with pytest.raises(MemoryError, match=r"GiB.*fewer rounds \(n_iter\)"):
            shortest_path(leaf.expand(64, 3000, 3000), backend=backend)


@given(
    B=st.integers(0, 3),
    H=st.integers(1, 9),
    W=st.integers(1, 9),
    beta=st.floats(0.5, 40.0),
    loop=st.sampled_from(["for", "while"]),
    tc=st.sampled_from(["probabilistic", "hamacher", "yager_1"]),
    seed=st.integers(0, 2**16),
)
def test_fuzz_cpu_against_reference(B, H, W, beta, loop, tc, seed):
    if "cpu" not in CPU_BACKENDS:
        pytest.skip("relaxops._C is not built")
    c = (grid_cost(B, H, W, seed) * 3).requires_grad_(True)
    kw = dict(beta=beta, loop=loop, t_conorm=tc, hamacher_p=1.5 if tc == "hamacher" else None)
    outs = []
    for backend in ("reference", "cpu"):
        out = shortest_path(c, backend=backend, **kw)
        g = torch.autograd.grad(out.sum(), c)[0]
        outs.append((out.detach(), g))
    for a, b in zip(outs[1], outs[0]):
        assert_close(a, b, torch.float64, scale=max(1.0, b.abs().max().item() if b.numel() else 1.0))


@pytest.mark.parametrize("loop", ["for", "while"])
def test_parallel_rows(loop):
    """A batch large enough for the CPU kernel's rows to run in parallel (>= 2^20 cell updates; each thread with its
    own work buffers, the while loop's trip count a reduction over the threads) equals the reference."""
    if "cpu" not in CPU_BACKENDS:
        pytest.skip("relaxops._C is not built")
    c = grid_cost(70, 20, 20, seed=9)
    c[::7] *= 3  # rows of other trip counts
    c.requires_grad_(True)
    g = torch.randn(c.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    outs = []
    for backend in ("reference", "cpu"):
        out = shortest_path(c, 10.0, 40, loop=loop, backend=backend)
        outs.append((out.detach(), torch.autograd.grad((out * g).sum(), c)[0]))
    for a, b in zip(outs[1], outs[0]):
        assert_close(a, b, torch.float64, scale=max(1.0, b.abs().max().item()))
