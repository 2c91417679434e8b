"""Relaxed shortest path on grids (docs/math/algorithms.md §4.2, AlgoVision's example program): every backend against
the float64 reference (outputs and gradients, odd shapes, both loops, every T-conorm, several betas), the anchors of
docs/math/algorithms.md §3, AlgoVision 0.1.2 itself, the hard limit (Dijkstra), gradcheck, opcheck, torch.compile, bad
arguments."""

import math

import pytest
import torch
from relaxops import _ext
from relaxops.algorithms import ops
from relaxops.algorithms import reference as R
from relaxops.algorithms.functional import shortest_path
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_as_accurate_as_reference,
    assert_close,
    opcheck_calls,
    outputs_and_grads,
)

SHAPES = [(1, 1), (1, 5), (3, 3), (5, 7), (12, 12), (20, 20)]
TRITON_SHAPES = [(1, 1), (1, 5), (3, 4)]  # the interpreter runs one program, and one lane group, at a time
T_CONORMS = [("probabilistic", None), ("hamacher", 5.0), ("yager_1", None)]
LOOPS = ("for", "while")
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]


def grid_cost(B, H, W, seed=0):
    """AlgoVision's example costs: sigmoid(4 z) + 0.2, float64."""
    g = torch.Generator().manual_seed(seed)
    return torch.sigmoid(torch.randn(B, H, W, generator=g, dtype=torch.float64) * 4) + 0.2


def path_call(cost, backend, **kw):
    """A case's call, (function, args, kwargs): what the reference checks run and test_opcheck checks the ops of."""
    return shortest_path, (cost,), dict(backend=backend, **kw)


def path_grads(cost, backend, device="cpu", dtype=torch.float64, **kw):
    """The path and the cost gradient of a random linear functional of it (float64 on the CPU)."""
    fn, args, kwargs = path_call(cost.to(device, dtype), backend, **kw)
    return [t.cpu().double() for t in outputs_and_grads(fn, *args, **kwargs)]


def scale(t):
    return max(1.0, t.abs().max().item()) if t.numel() else 1.0


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("t_conorm,p", T_CONORMS)
@pytest.mark.parametrize("loop", LOOPS)
def test_matches_reference(backend, device, t_conorm, p, loop):
    shapes, interpreted = SHAPES, backend == "triton" and device == "cpu"
    if interpreted:  # fewer while loops (tens of steps each) and float32 runs there
        shapes = TRITON_SHAPES + [(5, 7)] if loop == "for" else TRITON_SHAPES[2:]
    for i, (H, W) in enumerate(shapes):
        B = (1, 3, 2)[i % 3]
        beta = (10.0, 2.0, 25.0)[i % 3]
        cost = grid_cost(B, H, W, seed=i)
        kw = dict(beta=beta, t_conorm=t_conorm, hamacher_p=p, loop=loop)
        ref = path_grads(cost, "reference", **kw)
        out = path_grads(cost, backend, device, **kw)
        for a, b, what in zip(out, ref, ("path", "gradient")):
            assert a.shape == b.shape == (B, H, W)
            assert_close(a, b, torch.float64, scale=scale(b), msg=f"{what} float64 {H}x{W} beta={beta}")
        if interpreted and i < len(shapes) - 1:
            continue
        low = path_grads(cost, "reference", dtype=torch.float32, **kw)
        out32 = path_grads(cost, backend, device, dtype=torch.float32, **kw)
        for a, lo, b, what in zip(out32, low, ref, ("path", "gradient")):
            assert_as_accurate_as_reference(
                a, lo, b, torch.float32, scale=scale(b), msg=f"{what} float32 {H}x{W} beta={beta}"
            )


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_few_rounds_and_steps(backend, device):
    """n_iter = 1 (no saved Jacobians) and 2, n_trace = 0, 1 and more steps than the path has cells (the leak)."""
    cases = (((2, 2), 1, 3), ((1, 3), 1, 1), ((2, 3), 2, 0), ((3, 2), 2, 9), ((4, 4), 4, 30))
    for j, ((H, W), n_iter, n_trace) in enumerate(cases):
        cost = grid_cost(2, H, W, seed=H * W)
        for t_conorm, p in T_CONORMS if backend != "triton" else T_CONORMS[j % 3 : j % 3 + 1]:
            kw = dict(n_iter=n_iter, n_trace=n_trace, t_conorm=t_conorm, hamacher_p=p)
            for a, b in zip(path_grads(cost, backend, device, **kw), path_grads(cost, "reference", **kw)):
                assert_close(a, b, torch.float64, scale=scale(b), msg=f"{H}x{W} n_iter={n_iter} n_trace={n_trace}")
    zero = shortest_path(grid_cost(2, 3, 3).to(device), n_trace=0, backend=backend)
    assert (zero == 0).all()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_constant_paths_are_differentiable(backend, device):
    """A traceback of at most one step never reads the rounds' pi, and one round's pi does not read the costs: the
    path is a constant of the costs, still in the graph, with gradient 0 (NaN in a row with a non-finite cost once
    a round's pi reads it; its path stays finite)."""
    cost = grid_cost(3, 3, 4, seed=1)
    cost[2, 1, 2] = math.nan
    corner = torch.zeros(3, 4, dtype=torch.float64)
    corner[2, 3] = 1.0
    p_continue = torch.sigmoid(torch.tensor(10.0, dtype=torch.float64)).item()  # the while loop's, beta = 10
    for kw, path in (
        (dict(n_trace=0), 0 * corner),
        (dict(n_trace=1), corner),
        (dict(loop="while", max_iter=0), 0 * corner),
        (dict(loop="while", max_iter=1), p_continue * corner),
        (dict(n_iter=1), None),
    ):
        x = cost.to(device).requires_grad_(True)
        out = shortest_path(x, backend=backend, **kw)
        (grad,) = torch.autograd.grad(out.sum(), x)
        assert out.detach().isfinite().all() and (grad[:2] == 0).all(), kw
        if path is not None:
            assert_close(out.detach().cpu(), path.expand(3, 3, 4), torch.float64, msg=f"{kw}")
        assert grad[2].isnan().any() if "n_iter" not in kw else (grad[2] == 0).all(), kw


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_batch_shapes(backend, device):
    """[B, H, W] and [H, W]; B = 0 gives empty results and gradients."""
    cost = grid_cost(3, 4, 5).to(device)
    for loop in LOOPS:
        full = shortest_path(cost, loop=loop, backend=backend)
        single = shortest_path(cost[1], loop=loop, backend=backend)
        assert single.shape == (4, 5)
        if loop == "for":  # the while loop's trip count is the batch's
            assert_close(single.cpu(), full[1].cpu(), torch.float64)
        empty = torch.zeros(0, 4, 5, dtype=torch.float64, device=device, requires_grad=True)
        out = shortest_path(empty, loop=loop, backend=backend)
        assert out.shape == (0, 4, 5)
        (g,) = torch.autograd.grad(out.sum(), empty)
        assert g.shape == (0, 4, 5)


def test_spec_anchors():
    """docs/math/algorithms.md §3: beta = 10, float32, 8 rounds and 8 traceback steps on [[1,5,1],[1,5,1],[1,1,1]], and
    uniform costs with 6 and 6 (the leak around the start), probabilistic; to the digits the anchors give."""
    backends = CPU_EXACT + [p.values[0] for p in KERNEL_BACKEND_DEVICE if p.values == ("triton", "cpu")]
    cases = [
        (
            torch.tensor([[1.0, 5, 1], [1, 5, 1], [1, 1, 1]]),
            8,
            [[1, 1.3e-17, 9.3e-14], [1, 9.4e-14, 4.54e-5], [4.54e-5, 0.999955, 1]],
            [[1e-6, 0.05e-17, 0.05e-14], [1e-6, 0.05e-14, 0.005e-5], [0.005e-5, 0.5e-6, 1e-6]],
        ),
        (
            torch.ones(3, 3),
            6,
            [[1, 0.5555, 4.5e-9], [0.5555, 0.99996, 4.5e-5], [4.5e-9, 4.5e-5, 1]],
            [[1e-6, 0.5e-4, 0.05e-9], [0.5e-4, 0.5e-5, 0.05e-5], [0.05e-9, 0.05e-5, 1e-6]],
        ),
    ]
    for backend in backends:
        for cost, n, want, tol in cases:
            got = shortest_path(cost, 10.0, n, backend=backend).double()
            err = (got - torch.tensor(want, dtype=torch.float64)).abs()
            assert (err <= torch.tensor(tol, dtype=torch.float64)).all(), f"{backend}:\n{got}"


def algovision_program(beta, n_iter, t_conorm, p, loop):
    """AlgoVision 0.1.2's shortest-path example as docs/math/algorithms.md §4.2 describes it, built from AlgoVision's
    own classes (its Var tensors in torch's default dtype, as the example's)."""
    from algovision import Algorithm, For, Input, LEq, Let, Output, Var, While

    def relax(d, cost):
        N = R.sp_neighbours(d)
        weights = torch.nn.functional.softmin(N * beta, dim=-1)
        return torch.nn.functional.pad((weights * N).sum(-1) + cost, (1, 1, 1, 1), value=1e12), weights

    tc = {
        "probabilistic": lambda a, b: a + b - a * b,
        "hamacher": lambda a, b: (a + b + (p - 2) * a * b) / (1 + (p - 1) * a * b),
        "yager_1": lambda a, b: 1 - torch.relu(1 - a - b),
    }[t_conorm]
    body = (Let("path", lambda path, trace: tc(path, trace)), Let("trace", lambda trace, pi: R.sp_move(trace, pi)))
    traceback = For("j", n_iter, *body) if loop == "for" else While(LEq(lambda path: path[:, 0, 0], 1.0), *body)
    return Algorithm(
        Input("cost"),
        Var("d", lambda cost: torch.full((cost.shape[1] + 2, cost.shape[2] + 2), 1e12)),
        Var("pi", lambda cost: torch.zeros(cost.shape[1], cost.shape[2], 8)),
        Var("trace", lambda cost: torch.zeros(cost.shape[1], cost.shape[2])),
        Var("path", lambda cost: torch.zeros(cost.shape[1], cost.shape[2])),
        Let("d", [1, 1], 0.0),
        Let("trace", [-1, -1], 1.0),
        For("i", n_iter, Let(["d", "pi"], relax), Let("d", [1, 1], 0.0)),
        traceback,
        Output("path"),
        beta=beta,
    )


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")  # AlgoVision indexes with lists
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("t_conorm,p", T_CONORMS)
def test_matches_algovision(loop, t_conorm, p):
    """Values and gradients equal AlgoVision's program (run with float64 as torch's default dtype) to 1e-9."""
    pytest.importorskip("algovision")
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        for i, (B, H, W, n_iter) in enumerate(((3, 3, 3, 6), (2, 5, 7, 12), (3, 1, 5, 6), (2, 12, 10, 25))):
            cost = grid_cost(B, H, W, seed=10 + i).requires_grad_(True)
            want = algovision_program(10.0, n_iter, t_conorm, p, loop)(cost)
            g = torch.randn(want.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
            (want_grad,) = torch.autograd.grad((want * g).sum(), cost)
            for backend in CPU_EXACT:
                got = shortest_path(cost, 10.0, n_iter, t_conorm=t_conorm, hamacher_p=p, loop=loop, backend=backend)
                (grad,) = torch.autograd.grad((got * g).sum(), cost)
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
                torch.testing.assert_close(grad, want_grad, rtol=1e-9, atol=1e-9 * scale(want_grad))
    finally:
        torch.set_default_dtype(previous)


def dijkstra_path(cost):
    """The cheapest 8-connected path from (0, 0) to (H - 1, W - 1) under node weights (entering a cell costs its
    weight), as a 0/1 map, and the margin by which every path through a cell off it is dearer."""
    sparse = pytest.importorskip("scipy.sparse")
    csgraph = pytest.importorskip("scipy.sparse.csgraph")
    H, W = cost.shape
    rows, cols, vals = [], [], []
    for y in range(H):
        for x in range(W):
            for dy, dx in R.SP_OFFSETS:
                if 0 <= y + dy < H and 0 <= x + dx < W:
                    rows.append(y * W + x)
                    cols.append((y + dy) * W + x + dx)
                    vals.append(float(cost[y + dy, x + dx]))
    graph = sparse.csr_matrix((vals, (rows, cols)), shape=(H * W, H * W))
    dist, pred = csgraph.dijkstra(graph, indices=0, return_predecessors=True)
    to_end = csgraph.dijkstra(graph.T, indices=H * W - 1)  # cost of reaching the end from each cell (excl. itself)
    on = torch.zeros(H * W, dtype=torch.float64)
    v = H * W - 1
    while v >= 0:
        on[v] = 1
        v = pred[v]
    through = torch.tensor(dist + to_end, dtype=torch.float64)  # the cheapest path through each cell
    margin = (through[on == 0] - dist[-1]).min().item() if (on == 0).any() else math.inf
    return on.reshape(H, W), margin


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_hard_limit_is_dijkstra(backend, device):
    """With a large beta, enough rounds and as many traceback steps as the path has cells, the relaxed path is the
    unique cheapest path (grids drawn until each path is unique by a margin of 0.1)."""
    sizes = [(5, 7), (1, 6), (12, 12)] if backend != "triton" else [(4, 5)]
    seed = 0
    for H, W in sizes:
        while True:
            cost = grid_cost(1, H, W, seed=seed)[0] + 0.5
            seed += 1
            want, margin = dijkstra_path(cost)
            if margin > 0.1:
                break
        out = shortest_path(cost.to(device), 300.0, H * W, n_trace=int(want.sum()), backend=backend).cpu()
        torch.testing.assert_close(out, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", CPU_EXACT)
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("t_conorm,p", T_CONORMS)
def test_gradcheck(backend, loop, t_conorm, p):
    cost = grid_cost(2, 3, 4, seed=3).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda c: shortest_path(c, 2.0, t_conorm=t_conorm, hamacher_p=p, loop=loop, backend=backend), (cost,)
    )


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that a reference check's call makes (both loops, a traced Hamacher case), with and without
    the Jacobian that the backward needs."""
    interpreted = backend == "triton" and device == "cpu"
    cost = grid_cost(2, 2, 3).to(device) if interpreted else grid_cost(2, 3, 4).to(device)
    # the interpreter runs opcheck's dozen calls per op in about a minute with both loops: the "for" loop there
    # (the while loop's kernels run in test_matches_reference and test_while_trip_count_is_the_batch_max)
    for loop, n_iter in (("for", 2),) if interpreted else (("for", 4), ("while", 1)):
        kw = dict(beta=3.0, n_iter=n_iter, t_conorm="hamacher", hamacher_p=2.5, loop=loop)
        kw |= {"n_trace": 3} if loop == "for" else {}  # the while loop traces until it stops
        fn, args, kwargs = path_call(cost, backend, max_iter=6 if interpreted else 64, **kw)
        names = opcheck_calls(fn, *args, **kwargs)
        assert names == ["relaxops::shortest_path_fwd", "relaxops::shortest_path_bwd"], names
        assert opcheck_calls(fn, *args, backward=False, **kwargs) == ["relaxops::shortest_path_fwd"]  # no Jacobian


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic):
    backend = "cpu" if ("cpu", "cpu") in [p.values for p in BACKEND_DEVICE] else "reference"
    torch._dynamo.reset()

    def f(c):
        return shortest_path(c, 5.0, backend=backend), shortest_path(
            c, 5.0, loop="while", t_conorm="yager_1", backend=backend
        )

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for c in (grid_cost(2, 4, 5), grid_cost(3, 6, 7)):
        c.requires_grad_(True)
        eager, comp = f(c), compiled(c)
        for a, b in zip(comp, eager):
            assert_close(a, b, torch.float64)
        g1 = torch.autograd.grad(sum(o.sum() for o in comp), c)[0]
        g2 = torch.autograd.grad(sum(o.sum() for o in eager), c)[0]
        assert_close(g1, g2, torch.float64)
    with torch.no_grad():  # the forward without saved Jacobians
        assert_close(compiled(c)[0], f(c)[0], torch.float64)


def test_enum_ids_agree():
    if not _ext.has_cpu():
        pytest.skip("relaxops._C is not built")
    assert _ext._C.shortest_path_ids() == {**ops.SP_T_CONORMS, **ops.SP_LOOPS}
