"""relaxops.rank without the n x n matrix (docs/math/sortnet.md §5): every backend against the matrix definition
``rank = X @ (1..n)`` of the float64 reference, gradients, registered ops, memory."""

import functools
import math
import re

import pytest
import relaxops
import torch
from relaxops.sortnet import ops, reference
from relaxops.sortnet.networks import get_network, register_network, resolve_network
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    assert_low_precision_close,
    gapped,
    outputs_and_grads,
    relaxation_cases,
    run_isolated,
)

NETWORKS = ("bitonic", "odd_even", "bitonic_original")
SIZES = (1, 2, 3, 5, 7, 33, 100)


def matrix_rank(x, network, relaxation, steepness=3.0, art_lambda=0.25, descending=False):
    """The definition: the float64 reference's relaxed permutation matrix times the positions 1..n."""
    n = x.shape[-1]
    xb = x.reshape(-1, n)
    _, X = reference.sort(xb, resolve_network(network, n), relaxation, steepness, art_lambda)
    r = X @ torch.arange(1, n + 1, dtype=X.dtype, device=X.device)
    return ((n + 1) - r if descending else r).reshape(x.shape)


# ``f(x)`` and the input gradient of a random linear functional of it (G seeded with 5).
rank_grads = functools.partial(outputs_and_grads, seed=5)


def rank_call(x, backend, network, relaxation, descending=False, steepness=3.0):
    """A case's call, (function, args, kwargs): what the definition checks run and the op checks
    (tests/sortnet/test_ops.py) check the ops of."""
    return relaxops.rank, (x, network, relaxation, steepness), dict(descending=descending, backend=backend)


@functools.cache
def definition(network, relaxation, n):
    """x [3, n] and the ranks and gradient of the matrix definition in float64 and in float32 (computed once for
    all backends: the dense reference is most of these tests' time)."""
    torch.manual_seed(n)
    x = gapped((3, n))
    f = lambda v: matrix_rank(v, network, relaxation)  # noqa: E731
    return x, tuple(t.detach() for t in rank_grads(f, x)), tuple(t.detach() for t in rank_grads(f, x.float()))


def definition_cases():
    for p, relaxation, n in relaxation_cases(BACKEND_DEVICE, SIZES):
        backend, device = p.values
        yield pytest.param(backend, device, relaxation, n, marks=p.marks, id=f"{n}-{relaxation}-{backend}-{device}")


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("backend,device,relaxation,n", list(definition_cases()))
def test_rank_equals_the_matrix_definition(backend, device, network, relaxation, n):
    """Ascending and descending (n + 1 - rank: the same cotangent gives the negated gradient), float64 and float32
    (as accurate as the definition computed in float32)."""
    x, (r, g), (r32, g32) = definition(network, relaxation, n)
    for descending in (False, True):
        want = ((n + 1) - r, -g) if descending else (r, g)
        fn, args, kwargs = rank_call(x.to(device), backend, network, relaxation, descending)
        got = rank_grads(fn, *args, **kwargs)
        for a, b, what in zip(got, want, ("rank", "grad")):
            assert_close(a.cpu(), b, torch.float64, scale=n, msg=f"{what} float64 descending={descending}")
    fn, args, kwargs = rank_call(x.to(device, torch.float32), backend, network, relaxation, True)
    got = rank_grads(fn, *args, **kwargs)
    for a, lo, b, what in zip(got, ((n + 1) - r32, -g32), want, ("rank", "grad")):
        assert a.dtype == torch.float32
        assert_as_accurate_as_reference(a.cpu(), lo, b, torch.float32, scale=n, msg=f"{what} float32")


@pytest.mark.skipif(not relaxops._ext.has_cpu(), reason="needs the compiled cpu kernels")
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_cpu_backward_recomputing_equals_saving(monkeypatch, network, relaxation):
    """The cpu backward from the forward's saved values pass (the default) and recomputing it (forwards whose
    saved values would not fit; the registered ops) give the same gradient, bit for bit, float32 and float64."""
    for n, dtype in ((7, torch.float64), (100, torch.float32), (600, torch.float32)):
        x = gapped((20, n)).to(dtype)
        f = lambda v: relaxops.rank(v, network, relaxation, 3.0, backend="cpu")  # noqa: E731
        saving = rank_grads(f, x)
        monkeypatch.setattr(ops, "_RANK_SAVED_MAX", 0)
        recomputing = rank_grads(f, x)
        monkeypatch.undo()
        assert torch.equal(saving[0], recomputing[0]) and torch.equal(saving[1], recomputing[1]), (n, dtype)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_registered_network(backend, device):
    layers = [[(0, 3), (4, 1)], [(2, 0), (1, 3)], [(0, 1), (2, 4)], [(3, 4)], [(1, 2)]]
    key = register_network(layers, 5)
    x = gapped((4, 5))
    want = rank_grads(lambda v: matrix_rank(v, key, "reciprocal"), x)
    got = rank_grads(lambda v: relaxops.rank(v, key, "reciprocal", 3.0, backend=backend), x.to(device))
    for a, b in zip(got, want):
        assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("shape", [(0, 5), (5,), (2, 3, 7), (1, 1, 16)])
def test_batch_shapes(backend, device, shape):
    x = gapped(shape) if shape[0] else torch.zeros(shape, dtype=torch.float64)
    want = rank_grads(lambda v: matrix_rank(v, "bitonic", "cauchy"), x)
    got = rank_grads(lambda v: relaxops.rank(v, "bitonic", "cauchy", 3.0, backend=backend), x.to(device))
    for a, b in zip(got, want):
        assert a.shape == b.shape == x.shape
        assert_close(a.cpu(), b, torch.float64)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, device, dtype):
    """Error against float64 at most twice that of the reference run in the same precision (docs/math/sortnet.md
    §9.4)."""
    x = gapped((4, 17), gap=0.1)
    exact = rank_grads(lambda v: matrix_rank(v, "bitonic", "logistic"), x)
    low_ref = rank_grads(lambda v: relaxops.rank(v, "bitonic", "logistic", 3.0, backend="reference"), x.to(dtype))
    got = rank_grads(lambda v: relaxops.rank(v, "bitonic", "logistic", 3.0, backend=backend), x.to(device, dtype))
    for a, lr, e in zip(got, low_ref, exact):
        assert a.dtype == dtype
        assert_low_precision_close(a.cpu(), lr, e, slack=1e-2 * max(1.0, e.abs().max().item()))


@pytest.mark.parametrize(
    "backend", [b.values[0] for b in BACKEND_DEVICE if b.values[1] == "cpu" and b.values[0] in ("reference", "cpu")]
)
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_gradcheck(backend, network, relaxation):
    x = gapped((2, 6), gap=0.1).requires_grad_(True)
    for descending in (False, True):
        assert torch.autograd.gradcheck(
            lambda v, desc=descending: relaxops.rank(v, network, relaxation, 2.0, descending=desc, backend=backend),
            (x,),
            eps=1e-6,
            atol=1e-6,
        )


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_double_backward_raises(backend, device):
    """Eager calls bypass the dispatcher, but not under create_graph: a second derivative through the kernels
    raises instead of silently leaving out this op's term."""
    x = gapped((2, 6), gap=0.1).to(device).requires_grad_(True)
    (g,) = torch.autograd.grad((relaxops.rank(x, backend=backend) ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="sortnet_rank_bwd.*no autograd formula"):
        torch.autograd.grad(g.sum() + (x**3).sum(), x)


@pytest.mark.parametrize("op", ["sort", "rank", "topk"])
def test_reference_double_backward_raises(op):
    """The reference treats f'(d) as a constant in its backward: a second derivative raises like the kernels' instead
    of silently leaving out f''(d) (it did: a diagonal of 8.3 against about 1e-3 by finite differences)."""
    x = gapped((2, 6), gap=0.1).requires_grad_(True)
    call = {
        "sort": lambda v: relaxops.sort(v, backend="reference")[0],
        "rank": lambda v: relaxops.rank(v, backend="reference"),
        "topk": lambda v: relaxops.topk(v, 2, backend="reference"),
    }[op]
    (g,) = torch.autograd.grad((call(x) ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(g.sum(), x)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_registered_ops_check_their_arguments(backend, device):
    x = torch.randn(3, 7, dtype=torch.float64, device=device)
    bad = [
        (lambda: ops.rank_fwd(x.float().half(), "bitonic", 4, 3.0, 0.25, backend), TypeError, "x"),
        (lambda: ops.rank_fwd(x.t(), "bitonic", 4, 3.0, 0.25, backend), ValueError, "x"),
        (lambda: ops.rank_fwd(x, "bubble", 4, 3.0, 0.25, backend), ValueError, "network"),
        (lambda: ops.rank_fwd(x[:, :0].contiguous(), "bitonic", 4, 3.0, 0.25, backend), ValueError, "n"),
        (lambda: ops.rank_fwd(x, "bitonic", 6, 3.0, 0.25, backend), ValueError, "relaxation"),
        (lambda: ops.rank_fwd(x, "bitonic", 4, -3.0, 0.25, backend), ValueError, "steepness"),
        (lambda: ops.rank_bwd(x, x[:, 1:].contiguous(), "bitonic", 4, 3.0, 0.25, backend), ValueError, "grad_rank"),
        (lambda: ops.rank_bwd(x, x.float(), "bitonic", 4, 3.0, 0.25, backend), TypeError, "grad_rank"),
        (lambda: ops.rank_bwd(x[0], x[0], "bitonic", 4, 3.0, 0.25, backend), ValueError, "x"),
        (lambda: ops.rank_bwd(x, x, "bitonic", 4, 3.0, 2.0, backend), ValueError, "art_lambda"),
    ]
    for call, exc, arg in bad:
        with pytest.raises(exc, match=f"relaxops::sortnet_rank_(fwd|bwd): .*{arg}"):
            call()


# The Triton interpreter is too slow for this size; the triton kernels run it on a GPU.
@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values != ("triton", "cpu")])
def test_kernel_agrees_with_the_matrix_kernels_at_n_1000(backend, device):
    """A long network (bitonic n = 1000, 55 layers): the rank kernels against today's rank through the kernels'
    own matrix (X @ pos, whose backward goes through the matrix kernels), float64 and float32."""
    x = gapped((2, 1000), gap=0.01)
    pos = torch.arange(1, 1001, dtype=torch.float64, device=device)
    for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 2e-4)):
        want = rank_grads(
            lambda v: relaxops.sort(v.double(), "bitonic", "cauchy", 10.0, backend=backend)[1] @ pos,
            x.to(device, dtype),
        )
        got = rank_grads(lambda v: relaxops.rank(v, "bitonic", "cauchy", 10.0, backend=backend), x.to(device, dtype))
        for a, b, what in zip(got, want, ("rank", "grad")):
            err = (a.double() - b.double()).abs().max().item()
            assert err <= tol * max(1.0, b.abs().max().item()), f"{what} {dtype}: {err}"


# n = 600 with the interpreted Triton kernels is too slow; they run it on a GPU
@pytest.mark.parametrize(
    "backend,device,n",
    [(*p.values, n) for p in KERNEL_BACKEND_DEVICE for n in (100, 600) if n == 100 or p.values != ("triton", "cpu")],
)
def test_rows_do_not_depend_on_the_batch(backend, device, n):
    """A row alone gives the same rank and gradient (bit for bit on cpu) as inside a batch of 40; at n = 600 the
    cpu kernels share a lone row's tile over the threads, layer by layer, and run the batch a tile per thread."""
    x = gapped((40, n)).float().to(device)
    g = torch.randn(40, n, device=device)

    def outputs(rows):
        v = x[rows].detach().requires_grad_(True)
        r = relaxops.rank(v, "bitonic", "cauchy", 3.0, backend=backend)
        return r, torch.autograd.grad((r * g[rows]).sum(), v)[0]

    whole = outputs(slice(0, 40))
    for b in (0, 17, 39):
        for a, w in zip(outputs(slice(b, b + 1)), whole):
            if backend == "cpu":
                assert torch.equal(a[0], w[b])
            else:
                assert_close(a[0].cpu(), w[b].cpu(), torch.float32)


# --- non-finite inputs: the rule of relaxops.sort --------------------------------------------------------------


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("relaxation", relaxops.RELAXATIONS)
def test_infinities(backend, device, network, relaxation):
    """+-inf are the largest/smallest values (hard comparisons): ranks and gradients stay finite and equal the
    matrix definition; infinities take the end ranks."""
    inf = math.inf
    x = torch.tensor(
        [
            [inf, 0.3, -inf, 1.2, inf, -0.7, 0.3],
            [-inf, -inf, 2.0, 1.0, -1.0, 0.5, inf],
            [1e30, -1e30, 3.0, inf, 2.0, -1e30, 0.0],
        ],
        dtype=torch.float64,
    )
    kw = dict(network=network, relaxation=relaxation, steepness=4.0, art_lambda=0.5)
    r, g = rank_grads(lambda v: relaxops.rank(v, backend=backend, **kw), x.to(device))
    r, g = r.cpu(), g.cpu()
    assert r.isfinite().all() and g.isfinite().all()
    want = rank_grads(lambda v: matrix_rank(v, network, relaxation, 4.0, 0.5), x)
    assert_close(r, want[0], scale=10)
    assert_close(g, want[1], scale=10)
    if network != "bitonic_original":  # a sorting network for n = 7: -inf at the start, +inf at the end
        assert_close(r[1, :2], torch.tensor([1.5, 1.5], dtype=torch.float64))
        assert r[0, 2] == 1 and r[2, 3] == 7


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_nan_stays_in_its_row(backend, device):
    x = torch.tensor([[0.2, math.nan, -1.0, 3.0, 0.5], [0.2, 0.1, -1.0, 3.0, 0.5]], device=device)
    r, g = rank_grads(lambda v: relaxops.rank(v, backend=backend), x)
    assert r[0].isnan().any() and r[1].isfinite().all() and g[1].isfinite().all()


# --- memory: O(L n) per row ------------------------------------------------------------------------------------


def test_large_batch_runs_in_bounded_memory():
    """B = 128, n = 5000 (the issue's case that could not run: X alone is 12.8 GB in float32) forward and backward
    on the cpu kernels, first recomputing the values pass in the backward, then saving it in the forward. Peak
    resident memory: recomputing, it grows by the work buffers (per thread, 3 C + 3 n values for each of 16 rows:
    44 MB) and less than 64 MiB more (x, its ranks and gradient are 2.6 MB each); saving, by at most the saved d
    and alpha (2 C values per row, 228 MB) more. Both give the same ranks and gradient, bit for bit, and those of
    a row computed alone."""
    proc = run_isolated("""
    import resource, torch, relaxops
    from relaxops.sortnet import ops
    torch.manual_seed(0)
    x = torch.randn(128, 5000, requires_grad=True)
    g = torch.randn(128, 5000)
    def rank_and_grad(v):
        r = relaxops.rank(v, backend="cpu")
        return r, torch.autograd.grad((r * g[:len(v)]).sum(), v)[0]
    C = ops.resolve_network("bitonic", 5000).num_comparators  # built before the baseline
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ops._RANK_SAVED_MAX, most = 0, ops._RANK_SAVED_MAX
    r, grad = rank_and_grad(x)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    ops._RANK_SAVED_MAX = most
    r2, grad2 = rank_and_grad(x)
    grown2 = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert torch.equal(r2, r) and torch.equal(grad2, grad)
    r1, g1 = rank_and_grad(x[:1].detach().requires_grad_(True))
    assert torch.equal(r1, r[:1]) and torch.equal(g1, grad[:1])
    assert r.isfinite().all() and grad.isfinite().all()
    print(grown, grown2, relaxops._ext._C.num_threads() * 16 * (3 * C + 3 * 5000) * 4, 2 * C * 128 * 4)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown, grown2, work, saved = map(int, proc.stdout.split()[-4:])
    assert grown < work + (64 << 20), f"peak memory grew by {grown / 2**20:.0f} MiB recomputing the values pass"
    assert grown2 < work + saved + (64 << 20), f"peak memory grew by {grown2 / 2**20:.0f} MiB saving it"


def test_saved_values_pass_is_per_call():
    """The cpu forward's saved values pass lives in reused buffers: graphs alive at once get their own (two
    forwards, then their backwards in either order, equal the calls run one after the other, bit for bit), and a
    buffer is handed out again only once the graph that saved it is gone."""
    x1, x2 = gapped((20, 300)).float(), gapped((20, 300)).float().flip(-1).contiguous()
    g = torch.randn(20, 300)
    alone = []
    for x in (x1, x2):
        v = x.detach().requires_grad_(True)
        r = relaxops.rank(v, backend="cpu")
        alone.append((r, torch.autograd.grad((r * g).sum(), v)[0]))
    for order in ((0, 1), (1, 0)):
        vs = [x.detach().requires_grad_(True) for x in (x1, x2)]
        rs = [relaxops.rank(v, backend="cpu") for v in vs]
        grads = {i: torch.autograd.grad((rs[i] * g).sum(), vs[i])[0] for i in order}
        for i in (0, 1):
            assert torch.equal(rs[i], alone[i][0]) and torch.equal(grads[i], alone[i][1])
    pool = ops._RANK_SAVED
    a = pool.take(1000, torch.float32)
    b = pool.take(1000, torch.float32)
    assert a.data_ptr() != b.data_ptr()
    pa = a.data_ptr()
    del a
    assert pool.take(1000, torch.float32).data_ptr() == pa
    kept = ops._ext.ReusedBuffers(keep_bytes=3000)
    bufs = [kept.take(500, torch.float32) for _ in range(3)]
    del bufs
    kept.take(10, torch.float32)  # of the three free 2000-byte buffers, one stays
    assert sorted(e[0].numel() for e in kept._bufs) == [10, 500]
    alive = [kept.take(3, torch.float64) for _ in range(70)]  # a pool of at most 64, forgetting the oldest
    assert len(kept._bufs) == 64 and len({a.data_ptr() for a in alive}) == 70


@pytest.mark.parametrize(
    "backend,hint", [("cpu", "use a smaller batch"), ("reference", "or a kernel backend (backend='cpu' or 'cuda')")]
)
def test_memory_check_is_linear_in_the_network(backend, hint):
    """The refusal is sized by the input and the network (O(n) per row for the kernels, O(L n) for the reference's
    autograd), not by the matrix: ranks whose n x n matrix would take 40 GB run; too large a batch is refused with
    its size and a hint."""
    C = get_network("bitonic", 4096).num_comparators
    x = torch.zeros(1, 4096).expand(600, 4096)
    assert 600 * 4096 * 4096 * 4 > 40e9
    with torch.no_grad():
        assert relaxops.rank(x, backend="cpu").shape == (600, 4096)
    rows = 10**7 if backend == "cpu" else 10**5  # 3 n x 4 bytes x rows = 490 GB; 7 C x 4 bytes x rows = 447 GB
    assert 3 * 4096 * 4 * 10**7 > 400e9 and 7 * C * 4 * 10**5 > 400e9
    match = rf"relaxed rank of x \[{rows}, 4096\] \({backend} .* GiB.*{re.escape(hint)}$"
    with pytest.raises(MemoryError, match=match):
        relaxops.rank(torch.zeros(1, 4096).expand(rows, 4096), backend=backend)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_gpu_rows_longer_than_shared_memory(backend):
    """n = 20000 in float64: two rows (the backward's) do not fit a block's shared memory, so the CUDA kernels keep
    them in global memory (the output row and the workspace); the same ranks and gradient as the cpu kernels."""
    x = gapped((2, 20000), gap=0.01)
    want = rank_grads(lambda v: relaxops.rank(v, backend="cpu"), x)
    got = rank_grads(lambda v: relaxops.rank(v, backend=backend), x.cuda())
    for a, b in zip(got, want):
        assert_close(a.cpu(), b, torch.float64, scale=100)
