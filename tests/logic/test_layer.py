"""Logic gate layers: gate tables, the 4-coefficient form, every backend against the float64 reference
(outputs and gradients), gradcheck, modules, connections and errors (docs/math/logic.md §6, properties 1-13)."""

import pytest
import torch
from relaxops import _ext
from relaxops.logic import GroupSum, LogicLayer, connections, functional, reference
from relaxops.logic.gates import GATE_COEF, TRUTH, coef_matrix
from testing import (
    BACKEND_DEVICE,
    KERNEL_BACKEND_DEVICE,
    assert_close,
    assert_low_precision_close,
    opcheck_calls,
    outputs_and_grads,
)

# (n_in, n_out, B): odd sizes, n_out < n_in, n_out >> n_in, B = 1.
SHAPES = [(1, 1, 1), (3, 2, 5), (7, 5, 33), (2, 9, 4), (100, 57, 65), (40, 300, 3)]
CPU_EXACT = [b for b in ("reference", "cpu") if any(p.values == (b, "cpu") for p in BACKEND_DEVICE)]


def wiring(n_in, n_out, seed=1):
    """Random connections with the cases the backward must get right: self-connected neurons, a repeated
    pair, and (when n_in > 2) an input that no neuron reads (the last one)."""
    g = torch.Generator().manual_seed(seed)
    hi = max(1, n_in - 1) if n_in > 2 else n_in
    a = torch.randint(0, hi, (n_out,), generator=g)
    b = torch.randint(0, hi, (n_out,), generator=g)
    b[::3] = a[::3]  # self connections
    if n_out >= 4:
        a[1], b[1] = a[2], b[2]  # repeated pair
    return a, b


def layer_call(x, a, b, w, backend, training=True):
    """A case's call, (function, args, kwargs): what the reference checks run and test_opcheck checks the ops of."""
    return functional.logic_layer, (x, a, b, w), dict(training=training, backend=backend)


def layer_grads(x, a, b, w, backend, training=True, seed=3):
    """Output and the gradients (x, weights) of a random linear functional of the output."""
    fn, args, kwargs = layer_call(x, a, b, w, backend, training)
    return outputs_and_grads(fn, *args, seed=seed, **kwargs)


# --- gates ----------------------------------------------------------------------------------------------


def test_gate_tables_agree():
    """Relaxed gates on {0,1}^2 == truth table == closed form == bitwise form on 0 / all-ones words."""
    for i in range(16):
        for A in (0, 1):
            for B in (0, 1):
                t = TRUTH[i][2 * A + B]
                assert t == (i >> (3 - (2 * A + B))) & 1
                f = reference.gate_values(
                    torch.tensor(float(A), dtype=torch.float64), torch.tensor(float(B), dtype=torch.float64)
                )[i]
                assert f.item() == t
                word = reference.gate_word(i, torch.tensor(-A), torch.tensor(-B))  # 0 or all ones
                assert word.item() == -t
                one_gate = reference.packed_layer(
                    torch.tensor([[-A], [-B]]), torch.tensor([0]), torch.tensor([1]), torch.tensor([i])
                )
                assert one_gate.item() == -t


def test_bilinear_coefficients():
    x = torch.rand(1000, 2, dtype=torch.float64)
    a, b = x[:, 0], x[:, 1]
    basis = torch.stack([torch.ones_like(a), a, b, a * b], -1)
    phi = torch.stack([(1 - a) * (1 - b), (1 - a) * b, a * (1 - b), a * b], -1)
    f = reference.gate_values(a, b)
    torch.testing.assert_close(basis @ coef_matrix(torch.float64).t(), f, rtol=0, atol=1e-12)
    torch.testing.assert_close(phi @ torch.tensor(TRUTH, dtype=torch.float64).t(), f, rtol=0, atol=1e-12)


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
def test_cpp_gate_table_matches_python():
    assert [tuple(r) for r in _ext._C.logic_gate_coef()] == list(GATE_COEF)


@pytest.mark.parametrize(
    "dtype,tol", [(torch.float64, dict(rtol=0, atol=1e-12)), (torch.float32, dict(rtol=1e-5, atol=1e-6))]
)
def test_four_coefficients_equal_sixteen_gates(dtype, tol):
    n_in, n_out, B = 31, 45, 17
    a, b = wiring(n_in, n_out)
    x = torch.rand(B, n_in, dtype=dtype)
    p = torch.softmax(torch.randn(n_out, 16, dtype=torch.float64), -1).to(dtype)
    y4 = reference.logic_layer(x, a, b, reference.coefficients(p))
    y16 = reference.logic_layer_16(x, a, b, p)
    torch.testing.assert_close(y4, y16, **tol)


# --- layer against the reference --------------------------------------------------------------------------


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_layer_matches_reference(backend, device, shape, training):
    n_in, n_out, B = shape
    a, b = wiring(n_in, n_out)
    x = torch.rand(B, n_in, dtype=torch.float64)
    w = torch.randn(n_out, 16, dtype=torch.float64)
    ref = layer_grads(x, a, b, w, "reference", training)
    for dtype in (torch.float64, torch.float32):
        out = layer_grads(x.to(device, dtype), a.to(device), b.to(device), w.to(device), backend, training)
        scale = max(1.0, B * n_out / 1000)  # the weight gradient sums over the batch
        for got, want, what in zip(out, ref, ("y", "grad_x", "grad_w")):
            assert got.shape == want.shape, what
            assert_close(got.cpu(), want, dtype, scale=scale, msg=f"{what} {dtype}")
    if n_in > 2:  # the last input is read by no neuron: its gradient is exactly 0
        assert (out[1][:, -1] == 0).all()


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_self_connections_get_both_partials(backend, device):
    """A neuron with a == b computes c0 + (c1 + c2) x + c3 x^2: dy/dx = c1 + c2 + 2 c3 x (not 2 dy/da, the
    original CUDA kernel's error)."""
    n = 4
    a = torch.arange(n)
    x = torch.rand(5, n, dtype=torch.float64)
    w = torch.randn(n, 16, dtype=torch.float64) * 3
    x_ = x.to(device).requires_grad_(True)
    y = functional.logic_layer(x_, a.to(device), a.to(device), w.to(device), backend=backend)
    (gx,) = torch.autograd.grad(y.sum(), x_)
    c = reference.coefficients(torch.softmax(w, -1))
    expected = c[:, 1] + c[:, 2] + 2 * c[:, 3] * x
    assert_close(gx.cpu(), expected, torch.float64)


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] != "cpu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(backend, device, dtype):
    n_in, n_out, B = 37, 29, 65
    a, b = wiring(n_in, n_out)
    x = torch.rand(B, n_in, dtype=torch.float64)
    w = torch.randn(n_out, 16, dtype=torch.float64)
    exact = layer_grads(x, a, b, w, "reference")
    low_ref = layer_grads(x.to(dtype), a, b, w.float(), "reference")
    out = layer_grads(x.to(device, dtype), a.to(device), b.to(device), w.float().to(device), backend)
    assert out[0].dtype == dtype
    for got, lo, ex in zip(out, low_ref, exact):
        # slack: half precision's unit roundoff (~1e-3) relative to the magnitude (the weight gradient sums 65)
        assert_low_precision_close(
            got.detach().cpu(), lo.detach(), ex.detach(), slack=1e-3 * max(1.0, float(ex.abs().max()))
        )


def test_cpu_backend_rejects_half():
    if not _ext.has_cpu():
        pytest.skip("relaxops._C is not built")
    a, b = wiring(4, 4)
    with pytest.raises(TypeError, match="x"):
        functional.logic_layer(torch.rand(3, 4, dtype=torch.float16), a, b, torch.randn(4, 16), backend="cpu")
    # auto falls back to the reference for dtypes the CPU kernel lacks
    y = functional.logic_layer(torch.rand(3, 4, dtype=torch.bfloat16), a, b, torch.randn(4, 16))
    assert y.dtype == torch.bfloat16


@pytest.mark.parametrize("backend", CPU_EXACT)
def test_gradcheck(backend):
    a, b = wiring(6, 5)
    x = torch.rand(3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: functional.logic_layer(x, a, b, w, backend=backend), (x, w))


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls make (the input transpose, the layer's forward and
    backward), both dtypes and modes, with gradients of the input and the weights, of the weights alone (a first
    layer) and of the input alone."""
    a, b = (t.to(device) for t in wiring(7, 5))
    ops_made = ["relaxops::logic_transpose", "relaxops::logic_fwd", "relaxops::logic_transpose", "relaxops::logic_bwd"]
    for dtype in (torch.float32, torch.float64):
        x = torch.rand(9, 7, dtype=dtype, device=device)
        w = torch.randn(5, 16, dtype=dtype, device=device)
        calls = [layer_call(x, a, b, w, backend, training) for training in (True, False)]
        fn, _, kwargs = calls[0]
        calls.append((fn, (x, a, b), dict(kwargs, weights=w)))  # weights by keyword: the input's gradient alone
        calls.append((lambda w_, x=x: functional.logic_layer(x, a, b, w_, backend=backend), (w,), {}))  # w alone
        for fn_, args, kw in calls:
            assert opcheck_calls(fn_, *args, **kw) == ops_made


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_backward_is_deterministic(backend, device):
    a, b = wiring(50, 80)
    x = torch.rand(257, 50, device=device)
    w = torch.randn(80, 16, device=device)
    first, second = (
        layer_grads(x, a.to(device), b.to(device), w, backend),
        layer_grads(x, a.to(device), b.to(device), w, backend),
    )
    for u, v in zip(first, second):
        assert torch.equal(u, v)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_large_grid(backend):
    """More work items than one grid dimension holds (65535 * 32): grid-stride loops / launch logic."""
    n_in, n_out, B = 3000, 70000, 40
    a, b = wiring(n_in, n_out)
    x = torch.rand(B, n_in, dtype=torch.float64)
    w = torch.randn(n_out, 16, dtype=torch.float64)
    ref = layer_grads(x, a, b, w, "reference")
    out = layer_grads(x.cuda().float(), a.cuda(), b.cuda(), w.cuda(), backend)
    for got, want in zip(out, ref):
        assert_close(got.cpu(), want, torch.float32, scale=B)


# --- modules ----------------------------------------------------------------------------------------------


def test_module_train_eval_and_layout():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), LogicLayer(12, 30), LogicLayer(30, 20), GroupSum(5, tau=2.0))
    x = torch.rand(7, 3, 4)
    y = model(x)
    assert y.shape == (7, 5)
    l1, l2 = model[1], model[2]
    h = reference.logic_layer(x.reshape(7, 12), *l1.indices, reference.coefficients(torch.softmax(l1.weights, -1)))
    h = reference.logic_layer(h, *l2.indices, reference.coefficients(torch.softmax(l2.weights, -1)))
    assert_close(y.detach(), reference.group_sum(h, 5, 2.0).detach(), torch.float32)
    model.eval()
    xb = x.round()
    ye = model(xb)
    counts = ye * 2.0
    assert torch.equal(counts, counts.round())  # eval mode on Boolean inputs: integer counts
    assert repr(l1).endswith("12, 30, eval)") and "k=5, tau=2.0" in repr(model[3])


def test_grad_factor_scales_input_gradient():
    torch.manual_seed(0)
    plain = LogicLayer(10, 12)
    scaled = LogicLayer(10, 12, grad_factor=1.7)
    scaled.load_state_dict(plain.state_dict())
    x = torch.rand(4, 10, dtype=torch.float32)
    outs = []
    for layer in (plain, scaled):
        x_ = x.clone().requires_grad_(True)
        y = layer(x_)
        (gx,) = torch.autograd.grad(y.sum(), x_)
        outs.append((y.detach(), gx))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1] * 1.7, outs[1][1])


def test_state_dict_round_trip():
    torch.manual_seed(0)
    layer = LogicLayer(9, 11, connections="unique")
    other = LogicLayer(9, 11)
    other.load_state_dict(layer.state_dict())
    assert torch.equal(other.idx_a, layer.idx_a) and torch.equal(other.idx_b, layer.idx_b)
    assert torch.equal(other.csr_entry, layer.csr_entry)
    x = torch.rand(3, 9)
    assert torch.equal(other(x), layer(x))


def test_seeded_like_difflogic():
    """Random calls in difflogic's order: weights randn, then the connections on the CPU generator."""
    torch.manual_seed(5)
    layer = LogicLayer(8, 6)
    torch.manual_seed(5)
    w = torch.randn(6, 16)
    c = torch.randperm(12) % 8
    c = torch.randperm(8)[c].reshape(2, 6)
    assert torch.equal(layer.weights.detach(), w)
    assert torch.equal(layer.idx_a, c[0]) and torch.equal(layer.idx_b, c[1])


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
def test_torch_compile_fullgraph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(LogicLayer(10, 16, backend="cpu"), LogicLayer(16, 8, backend="cpu"), GroupSum(2))
    x = torch.rand(5, 10, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y, yc = model(x), compiled(x)
    torch.testing.assert_close(yc, y)
    (g,) = torch.autograd.grad(y.sum(), x)
    (gc,) = torch.autograd.grad(yc.sum(), x)
    torch.testing.assert_close(gc, g)


# --- connections ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_in,n_out", [(8, 8), (10, 7), (5, 40), (1, 1), (100, 50)])
def test_random_connections_balanced(n_in, n_out):
    a, b = connections.random_connections(n_in, n_out)
    uses = torch.bincount(torch.cat([a, b]), minlength=n_in)
    assert int(uses.min()) >= (2 * n_out) // n_in and int(uses.max()) <= -(-2 * n_out // n_in)


def test_unique_connections():
    a, b = connections.unique_connections(6, 6)
    assert set(zip(a.tolist(), b.tolist())) == {(0, 1), (2, 3), (4, 5), (1, 2), (3, 4), (0, 2)}
    a, b = connections.unique_connections(20, 60)
    pairs = list(zip(a.tolist(), b.tolist()))
    assert len(set(pairs)) == 60 and all(i < j for i, j in pairs)
    a, b = connections.unique_connections(5, 3)  # difflogic leaves input 4 unused here
    assert set(zip(a.tolist(), b.tolist())) == {(0, 1), (2, 3), (1, 2)}


def test_inverse_index():
    a, b = torch.tensor([2, 0, 1, 2]), torch.tensor([2, 1, 0, 0])
    start, entry = connections.inverse_index(a, b, 4)
    assert start.tolist() == [0, 3, 5, 8, 8]
    assert entry.tolist() == [2, 5, 7, 3, 4, 0, 1, 6]


# --- errors -----------------------------------------------------------------------------------------------


def test_errors():
    with pytest.raises(ValueError, match="in_dim"):
        LogicLayer(0, 4)
    with pytest.raises(ValueError, match="out_dim"):
        LogicLayer(4, 0)
    with pytest.raises(ValueError, match=r"out_dim \* 2 must be >= in_dim"):
        LogicLayer(9, 4)
    with pytest.raises(ValueError, match=r"out_dim \* 2 must be >= in_dim"):
        LogicLayer(9, 4, connections="unique")
    with pytest.raises(ValueError, match="unique"):
        LogicLayer(6, 16, connections="unique")  # more than 15 distinct pairs
    with pytest.raises(ValueError, match="unique"):
        LogicLayer(3, 3, connections="unique")  # difflogic's candidate loop stops early
    with pytest.raises(ValueError, match="connections"):
        LogicLayer(4, 4, connections="dense")
    layer = LogicLayer(4, 4)
    with pytest.raises(ValueError, match="x must have 4 features"):
        layer(torch.rand(2, 5))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="k=3 must divide"):
        GroupSum(3)(torch.rand(2, 4))
    with pytest.raises(ValueError, match="k"):
        GroupSum(0)
    with pytest.raises(ValueError, match="tau"):
        GroupSum(2, tau=0.0)


def test_init_gate_logits():
    from relaxops.logic.gates import GATE_A, init_gate_logits

    p = torch.softmax(init_gate_logits(5, "residual", residual_probability=0.95, dtype=torch.float64), -1)
    assert torch.allclose(p[:, GATE_A], torch.full((5,), 0.95, dtype=torch.float64))
    assert GATE_A == 3  # truth table 0011: the first input passed through
    torch.manual_seed(0)
    a = init_gate_logits(4)
    torch.manual_seed(0)
    assert torch.equal(a, torch.randn(4, 16))  # difflogic's draw
    for bad in (
        dict(init="zeros"),
        dict(init="residual", residual_probability=1.0),
        dict(init="residual", residual_probability=0.05),
    ):
        with pytest.raises(ValueError):
            init_gate_logits(2, **bad)


def test_connections_are_value_checked_once_and_again_after_an_edit(monkeypatch):
    """The range checks of the connections read them on the host (a synchronisation on a GPU): done once per
    unchanged tensor, not per step; an in-place edit is checked again, and an out-of-range edit still raises."""
    calls = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: calls.append(1) or aminmax(*a, **k))
    layer = LogicLayer(50, 40)
    x = torch.rand(8, 50, requires_grad=True)
    layer(x).sum().backward()
    first = len(calls)
    for _ in range(2):
        layer(x).sum().backward()
    assert len(calls) == first
    with torch.no_grad():
        layer.idx_a[0] = 49
    layer(x).sum().backward()
    assert len(calls) > first
    with torch.no_grad():
        layer.idx_a[0] = 50
    with pytest.raises(ValueError, match="idx_a must hold input indices"):
        layer(x)
