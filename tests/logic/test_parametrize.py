"""Gate parametrizations, sampling modes, temperature and gate subsets on LogicLayer and LogicConv2d
(docs/math/logic.md §10): every backend against the float64 reference (values and gradients), the reference against
a literal evaluation of the table, gradcheck, the counter-based noise, straight-through and eval modes, gate
subsets, and packing / C export of the discretized models."""

from __future__ import annotations

import itertools

import pytest
import torch
from relaxops import _ext, _triton
from relaxops.logic import GroupSum, LogicConv2d, LogicLayer, PackedLogicNet, functional, ops, parametrize, reference
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source
from relaxops.logic.connections import conv_inverse_index, conv_leaves, inverse_index
from relaxops.logic.gates import GATE_NAMES, truth_matrix
from relaxops.logic.io import load_gates, save_gates
from testing import opcheck_calls

from .test_compile import eval_verilog

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="the C++ extension is not built")

TT = truth_matrix(torch.int64)  # [16, 4]
PARAMS = parametrize.PARAMETRIZATIONS
SAMPLINGS = parametrize.SAMPLINGS
TAU = 0.5  # 1 / tau = 2 is exact in float32 (Triton's noise_scale argument)
B, N_IN, N_OUT = 5, 9, 7
CONV = dict(C_in=2, C_out=3, H=4, W=5, kernel=(3, 2), stride=(1, 2), padding=1, L=4, B=2)


def _weights(n, par, dtype=torch.float64):
    return parametrize.init_weights(n, 2, par, dtype=dtype)


def _dense(par, sampling, backend, x, a, b, w, training=True, seed=7):
    """Output and gradients (x, w) under a fixed generator state (so the gumbel noise is drawn identically)."""
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    y = functional.logic_layer(x, a, b, w, training, backend=backend, parametrization=par, sampling=sampling,
                               temperature=TAU)  # fmt: skip
    g = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * g).sum().backward()
    return y.detach(), x.grad, w.grad if w.grad is not None else torch.zeros_like(w)


def _literal_dense(x, a, b, q, act, seed, scale):
    """The table's multilinear interpolation written out (parametrize's docstring), then act(u + noise)."""
    xa, xb = x[:, a], x[:, b]
    u = q[:, 0] * (1 - xa) * (1 - xb) + q[:, 1] * (1 - xa) * xb + q[:, 2] * xa * (1 - xb) + q[:, 3] * xa * xb
    if seed >= 0:
        u = u + scale * parametrize.logistic_noise(seed, torch.arange(u.numel()).reshape(u.shape), torch.float64)
    return {"none": u, "sigmoid": torch.sigmoid(u), "sigmoid_st": (u > 0).double()}[act]


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, N_IN, generator=g, dtype=torch.float64)
    a, b = torch.randint(0, N_IN, (N_OUT,), generator=g), torch.randint(0, N_IN, (N_OUT,), generator=g)
    return x, a, b


@pytest.mark.parametrize("par,sampling", list(itertools.product(PARAMS, SAMPLINGS)))
def test_reference_is_the_literal_table(par, sampling):
    x, a, b = _case()
    w = _weights(N_OUT, par)
    torch.manual_seed(3)
    y = functional.logic_layer(x, a, b, w, True, backend="reference", parametrization=par, sampling=sampling,
                               temperature=TAU)  # fmt: skip
    torch.manual_seed(3)  # the same draws: the logits' noise first, then the walsh seed
    q, act = parametrize.lut_table(w, par, 2, True, sampling, TAU)
    gumbel = par == "walsh" and sampling.startswith("gumbel")
    seed = parametrize.new_seed() if gumbel else -1
    torch.testing.assert_close(y, _literal_dense(x, a, b, q, act, seed, 1 / TAU), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("par,sampling", list(itertools.product(PARAMS, SAMPLINGS)))
def test_dense_backends_equal_reference(par, sampling, backend):
    x, a, b = _case()
    w = _weights(N_OUT, par)
    ref = _dense(par, sampling, "reference", x, a, b, w)
    for got, want in zip(_dense(par, sampling, backend, x, a, b, w), ref):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    # float32 kernels against the float64 reference (torch.rand draws other logit noise in float32)
    if backend == "cpu" and (par == "walsh" or not sampling.startswith("gumbel")):
        got = _dense(par, sampling, backend, x.float(), a, b, w.float())
        for g32, want in zip(got, ref):
            torch.testing.assert_close(g32.double(), want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("par,sampling", [(p, s) for p in PARAMS for s in SAMPLINGS if s in ("soft", "gumbel_hard")])
def test_conv_backends_equal_reference(par, sampling, backend):
    c = CONV
    g = torch.Generator().manual_seed(1)
    x = torch.rand(c["B"], c["C_in"], c["H"], c["W"], generator=g, dtype=torch.float64)
    leaves = conv_leaves(c["C_in"], c["C_out"], c["L"], c["kernel"], "random", g)
    w = _weights(c["C_out"] * (c["L"] - 1), par).reshape(c["C_out"], c["L"] - 1, -1)

    def run(be):
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        torch.manual_seed(5)
        y = functional.logic_conv2d(xx, leaves, ww, c["kernel"], c["stride"], c["padding"], True, backend=be,
                                    parametrization=par, sampling=sampling, temperature=TAU)  # fmt: skip
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        return y.detach(), xx.grad, ww.grad

    for got, want in zip(run(backend), run("reference")):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_conv_reference_noise_index():
    """The conv reference's node noise sits at ((((b C_out + k) Ho + oy) Wo + ox) (L - 1) + node): a depth-1 tree
    is one node per output, so its output is sigmoid(u + L / tau) at the output's own flat index."""
    x = torch.rand(2, 2, 3, 4, dtype=torch.float64)
    leaves = conv_leaves(2, 3, 2, (2, 2), "random", torch.Generator().manual_seed(0))
    coef = torch.randn(3, 1, 4, dtype=torch.float64)
    u = reference.logic_conv2d(x, leaves, coef, (2, 2), (1, 1), (0, 0))
    y = reference.logic_conv2d_act(x, leaves, coef, (2, 2), (1, 1), (0, 0), "sigmoid", 11, 2.0)
    noise = parametrize.logistic_noise(11, torch.arange(u.numel()).reshape(u.shape), torch.float64)
    torch.testing.assert_close(y, torch.sigmoid(u + 2.0 * noise), atol=1e-14, rtol=0)


@pytest.mark.parametrize("act,seed", [(0, 12), (1, -1), (1, 12)])
def test_gradcheck_cpu_ops(act, seed):
    x, a, b = _case()
    xt = x.t().contiguous().requires_grad_()
    coef = torch.randn(N_OUT, 4, dtype=torch.float64, requires_grad=True)
    csr = inverse_index(a, b, N_IN)
    torch.autograd.gradcheck(lambda xt, c: ops.logic_act_fwd(xt, a, b, c, *csr, act, seed, 1.5, "cpu")[0], (xt, coef))
    c = CONV
    xc = torch.rand(1, c["C_in"], 3, 4, dtype=torch.float64, requires_grad=True)
    leaves = conv_leaves(c["C_in"], 2, 4, (2, 2), "random", torch.Generator().manual_seed(2))
    cc = (0.5 * torch.randn(2, 3, 4, dtype=torch.float64)).requires_grad_()
    ccsr = conv_inverse_index(leaves, c["C_in"])
    geom = [2, 2, 1, 1, 1, 0]
    torch.autograd.gradcheck(
        lambda xc, cc: ops.logic_conv_act_fwd(xc, leaves, cc, *ccsr, geom, act, seed, 1.5, "cpu"), (xc, cc)
    )


def test_gradcheck_reference():
    x, a, b = _case()
    x.requires_grad_()
    coef = torch.randn(N_OUT, 4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda x, c: reference.logic_layer_act(x, a, b, c, "sigmoid", 4, 2.0), (x, coef))


def test_sigmoid_st_forwards_step_backwards_sigmoid():
    x, a, b = _case()
    coef = torch.randn(N_OUT, 4, dtype=torch.float64)
    csr = inverse_index(a, b, N_IN)
    grads = []
    for act in (1, 2):
        xt, c = x.t().contiguous().requires_grad_(), coef.clone().requires_grad_()
        y, st = ops.logic_act_fwd(xt, a, b, c, *csr, act, 3, 1.0, "cpu")
        if act == 2:  # forward the step; the sigmoid saved for the backward
            u = ops.logic_act_fwd(xt.detach(), a, b, coef, *csr, 0, 3, 1.0, "cpu")[0]
            assert torch.equal(y, (u > 0).double())
            torch.testing.assert_close(st, torch.sigmoid(u), atol=1e-15, rtol=0)
        else:
            assert st.shape == (0,)
        y.sum().backward()
        grads.append((xt.grad, c.grad))
    for g1, g2 in zip(*grads):
        torch.testing.assert_close(g1, g2, atol=1e-14, rtol=0)


def test_noise_reproducible_and_counter_based():
    layer = LogicLayer(N_IN, N_OUT, parametrization="walsh", sampling="gumbel_soft", dtype=torch.float64,
                       backend="cpu")  # fmt: skip
    x = torch.rand(B, N_IN, dtype=torch.float64)
    torch.manual_seed(9)
    y1 = layer(x)
    torch.manual_seed(9)
    assert torch.equal(layer(x), y1)
    assert not torch.equal(layer(x), y1)  # a new seed per forward
    # the noise of one sample does not depend on the batch around it (sample-major index b n_out + j)
    torch.manual_seed(9)
    seed = parametrize.new_seed()
    coef = parametrize.coefficients(parametrize.lut_table(layer.weights, "walsh", 2, True, "soft", 1.0)[0])
    full = ops.logic_act_fwd(x.t().contiguous(), *layer.indices, coef.detach(), *layer.inverse_index(), 1, seed,
                             1.0, "cpu")[0].t()  # fmt: skip
    torch.testing.assert_close(full, y1, atol=0, rtol=0)
    bits = parametrize.noise_bits(seed, torch.arange(B * N_OUT))
    assert bits.unique().numel() == B * N_OUT and int(bits.max()) < 2**32


@pytest.mark.parametrize("par", PARAMS)
def test_hard_modes_forward_the_discrete_gate(par):
    layer = LogicLayer(N_IN, N_OUT, parametrization=par, sampling="hard", dtype=torch.float64, backend="cpu")
    x = torch.rand(B, N_IN, dtype=torch.float64)
    if par == "walsh":  # the step of the interpolated z: the discrete gate on Boolean inputs
        x = (x > 0.5).double()
    y = layer(x)
    assert torch.equal(y, layer.eval()(x))
    table = TT[layer.gate_ids()]  # [n_out, 4]
    xb = (x > 0.5).long()
    if par == "walsh":
        assert torch.equal(y, table[torch.arange(N_OUT), 2 * xb[:, layer.idx_a] + xb[:, layer.idx_b]].double())
    layer.train()
    y.sum().backward()
    assert layer.weights.grad.abs().sum() > 0  # the straight-through gradient reaches the weights


@pytest.mark.parametrize("par", PARAMS)
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_eval_equals_truth_table(par, backend):
    torch.manual_seed(0)
    layer = LogicLayer(N_IN, 33, parametrization=par, backend=backend, dtype=torch.float64).eval()
    x = torch.rand(B, N_IN) > 0.5
    y = layer(x.double())
    ids = layer.gate_ids()
    want = TT[ids][torch.arange(33), 2 * x[:, layer.idx_a].long() + x[:, layer.idx_b].long()]
    assert torch.equal(y, want.double())
    assert torch.equal(TT[ids].bool(), parametrize.truth_tables(layer.weights, par, 2))


def test_gate_subset():
    allowed = ["and", "or", "xor", 12]
    layer = LogicLayer(N_IN, N_OUT, gates=allowed, dtype=torch.float64, backend="cpu")
    mask = layer.gate_mask
    assert mask.tolist() == [i in (1, 7, 6, 12) for i in range(16)]
    with torch.no_grad():
        layer.weights[:, ~mask] += 10  # the forbidden gates have the largest logits
    assert bool(mask[layer.gate_ids()].all())
    assert set(layer.gate_ids().tolist()) <= {1, 6, 7, 12}
    x = torch.rand(B, N_IN, dtype=torch.float64)
    for sampling in SAMPLINGS:
        layer.sampling = sampling
        layer.weights.grad = None
        layer(x).sum().backward()
        assert torch.equal(layer.weights.grad[:, ~mask], torch.zeros_like(layer.weights.grad[:, ~mask]))
        assert layer.weights.grad[:, mask].abs().sum() > 0
    # training at any temperature equals the softmax over the subset alone
    layer.sampling = "soft"
    y = layer(x)
    p = torch.softmax(layer.weights[:, mask] / 1.0, -1)
    coef = p @ reference.coef_matrix(torch.float64)[mask]
    torch.testing.assert_close(y, reference.logic_layer(x, layer.idx_a, layer.idx_b, coef), atol=1e-12, rtol=0)
    conv = LogicConv2d(2, 3, 2, 2, gates=["a", "b"])
    assert set(conv.gate_ids().flatten().tolist()) <= {3, 5} and conv.gate_mask.sum() == 2


def test_softmax_defaults_keep_stream_and_fast_path(monkeypatch):
    torch.manual_seed(4)
    layer = LogicLayer(N_IN, N_OUT)
    torch.manual_seed(4)
    assert torch.equal(layer.weights, torch.randn(N_OUT, 16))
    assert layer.gate_mask is None and layer.parametrization == "softmax"
    for par, shape in (("light", (N_OUT, 4)), ("walsh", (N_OUT, 4))):
        assert LogicLayer(N_IN, N_OUT, parametrization=par).weights.shape == shape
        assert LogicConv2d(2, 3, 2, 2, parametrization=par).weights.shape == (3, 3, 4)
    # the default configuration (and every softmax eval without a subset) runs the unchanged op; the others the new
    x = torch.rand(B, N_IN)
    calls = []

    def spy(name, f):
        return lambda *args: calls.append(name) or f(*args)

    for name in ("logic_fwd", "logic_act_fwd"):
        monkeypatch.setattr(ops, name, spy(name, getattr(ops, name)))
    for kw, training, want in (
        ({}, True, "logic_fwd"),
        (dict(temperature=0.5, sampling="hard"), False, "logic_fwd"),
        (dict(temperature=0.5), True, "logic_act_fwd"),
        (dict(gates=["and"]), False, "logic_act_fwd"),
        (dict(parametrization="light"), False, "logic_act_fwd"),
    ):
        calls.clear()
        LogicLayer(N_IN, N_OUT, backend="cpu", **kw).train(training)(x)
        assert calls == [want], kw


def test_bad_options():
    for kw, name in (
        (dict(parametrization="warp"), "parametrization"),
        (dict(sampling="gumbel"), "sampling"),
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(parametrization="light", gates=["and"]), "gates"),
        (dict(gates=["nand2"]), "gates"),
        (dict(gates=[]), "gates"),
    ):
        with pytest.raises(ValueError, match=name):
            LogicLayer(N_IN, N_OUT, **kw)
        with pytest.raises(ValueError, match=name):
            LogicConv2d(2, 3, 2, 2, **kw)
    x, a, b = _case()
    with pytest.raises(ValueError, match="weights"):
        functional.logic_layer(x, a, b, torch.zeros(N_OUT, 16), parametrization="walsh")
    with pytest.raises(ValueError, match="act"):
        ops.logic_act_fwd(x.t().contiguous(), a, b, torch.zeros(N_OUT, 4, dtype=torch.float64),
                          *inverse_index(a, b, N_IN), 3, -1, 1.0, "cpu")  # fmt: skip


def _model(par, gates=None, seed=0):
    torch.manual_seed(seed)
    layers = [LogicLayer(11, 24, parametrization=par, gates=gates), LogicLayer(24, 18, parametrization=par,
                                                                               gates=gates)]  # fmt: skip
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(3, tau=1.0)).eval()


@pytest.mark.parametrize("par,gates", [("light", None), ("walsh", None), ("softmax", ["and", "xor", "not_b"])])
def test_packed_and_exported_equal_eval(par, gates, tmp_path):
    model = _model(par, gates)
    x = torch.rand(70, 11) > 0.5
    want = torch.round(model(x.float())).to(torch.int32)
    assert torch.equal(PackedLogicNet(model)(x), want)
    if gates is not None:
        assert all(bool(m.gate_mask[m.gate_ids()].all()) for m in model[1:-1])
    assert "int" in c_source(model)  # compiled below
    source = verilog_source(model)
    for s in range(0, 70, 9):
        assert eval_verilog(source, x[s].tolist())[1] == want[s].tolist()
    compiled = CompiledLogicNet(model, num_bits=64)
    compiled.compile(opt_level=0, save_lib_path=str(tmp_path / "net.so"))
    assert torch.equal(compiled(x), want)
    save_gates(model, tmp_path / "net.bin")  # discretized ids: a light / walsh model round-trips
    assert torch.equal(torch.round(load_gates(tmp_path / "net.bin")(x.float())).to(torch.int32), want)


@pytest.mark.parametrize("par", ["light", "walsh"])
def test_packed_conv_equals_eval(par):
    torch.manual_seed(0)
    conv = LogicConv2d(2, 4, 3, 2, padding=1, parametrization=par, generator=torch.Generator().manual_seed(0))
    model = torch.nn.Sequential(conv, torch.nn.Flatten(), GroupSum(2)).eval()
    x = torch.rand(9, 2, 5, 5) > 0.5
    want = torch.round(model(x.float())).to(torch.int32)
    assert torch.equal(PackedLogicNet(model, input_shape=(2, 5, 5))(x), want)
    assert torch.equal(model[0](x), model[0](x.float()).bool())


def test_gate_names_cover_ids():
    """table_ids of the 16 truth tables are the gate ids (gates.TRUTH and GATE_NAMES agree with parametrize)."""
    assert torch.equal(parametrize.table_ids(TT.bool()), torch.arange(16))
    assert len(GATE_NAMES) == 16


def test_opcheck():
    """opcheck of the activation ops (forward and backward) as a walsh gumbel layer and tree convolution call them."""
    x, a, b = _case()
    w = _weights(N_OUT, "walsh").requires_grad_()
    kw = dict(backend="cpu", parametrization="walsh", sampling="gumbel_hard", temperature=TAU)
    made = opcheck_calls(functional.logic_layer, x.requires_grad_(), a, b, w, True, **kw)
    assert "relaxops::logic_act_fwd" in made and "relaxops::logic_act_bwd" in made
    leaves = conv_leaves(2, 3, 4, (2, 2), "random", torch.Generator().manual_seed(0))
    xc = torch.rand(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    wc = _weights(9, "light").reshape(3, 3, 4).requires_grad_()
    kw = dict(backend="cpu", parametrization="light", sampling="soft", temperature=TAU)
    made = opcheck_calls(functional.logic_conv2d, xc, leaves, wc, (2, 2), 1, 1, True, **kw)
    assert "relaxops::logic_conv_act_fwd" in made and "relaxops::logic_conv_act_bwd" in made


@pytest.mark.parametrize("par,sampling", [("walsh", "gumbel_hard"), ("walsh", "soft")])
def test_triton_gpu_tiling_equals_reference(monkeypatch, par, sampling):
    """The Triton kernels with a GPU's launch plan (relaxops._triton.PLAN_FOR_GPU), run by the interpreter: the
    dense layer's [4, 256] output tiles (B = 300, 9 neurons: 3 x 2 tiles) and the conv's [32, 32] leaf tiles
    (L = 32, 54 output positions: 2 blocks), the last ones partial; walsh's output activation, with its noise
    (gumbel_hard) and without."""
    monkeypatch.setattr(_triton, "PLAN_FOR_GPU", True)
    g = torch.Generator().manual_seed(2)
    x = torch.rand(300, N_IN, generator=g, dtype=torch.float64)
    a, b = torch.randint(0, N_IN, (9,), generator=g), torch.randint(0, N_IN, (9,), generator=g)
    w = _weights(9, par)
    for got, want in zip(_dense(par, sampling, "triton", x, a, b, w), _dense(par, sampling, "reference", x, a, b, w)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    kernel, stride, padding, L = (3, 2), (1, 2), 1, 32
    x = torch.rand(2, 2, 9, 11, generator=g, dtype=torch.float64)  # Ho, Wo = 9, 6
    leaves = conv_leaves(2, 3, L, kernel, "random", g)
    w = _weights(3 * (L - 1), par).reshape(3, L - 1, -1)

    def run(be):
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        torch.manual_seed(5)
        y = functional.logic_conv2d(xx, leaves, ww, kernel, stride, padding, True, backend=be, parametrization=par,
                                    sampling=sampling, temperature=TAU)  # fmt: skip
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        return y.detach(), xx.grad, ww.grad

    for got, want in zip(run("triton"), run("reference")):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
