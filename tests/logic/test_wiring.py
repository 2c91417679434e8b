"""Learnable connections and the regression head (docs/math/logic.md §12): LearnableConnections against the float64
reference (values and gradients, both modes, with and without candidates, Gumbel noise), LogicLayer with learnable
connections (training, eval, packing and export equal to fixed connections, state_dict), GroupSum's offset beta and
a regression network that learns."""

import io
import shutil

import pytest
import torch
from relaxops.logic import GroupSum, LogicLayer, PackedLogicNet, discretize, reference
from relaxops.logic import io as logic_io
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source
from relaxops.logic.wiring import LearnableConnections, gumbel_noise, learnable_connections
from testing import assert_close, outputs_and_grads

MODES = ("straight_through", "soft")
# (in_dim, out_dim, k, num_candidates, batch shape): odd sizes, k = 1..3, all inputs or a subset, leading dims.
CASES = [(7, 5, 2, None, (3,)), (7, 5, 3, 4, (2, 3)), (1, 1, 1, None, (5,)), (13, 9, 2, 1, (4,)), (5, 11, 2, 5, ())]


def _module(in_dim, out_dim, k, cand, mode, dtype=torch.float32, temperature=0.7, gumbel=False):
    m = LearnableConnections(in_dim, out_dim, k, cand, temperature, gumbel, mode, init="normal", dtype=dtype)
    if cand is not None:
        m.candidates[0, 0, 0] = m.candidates[-1, 0, 0]  # a slot whose candidates repeat an input
    return m


def _module_grads(module, x, params, seed=7):
    """Output of ``module(x)`` and the gradients (x, then ``params``) of <out, G>, G as ``outputs_and_grads``."""
    xg = x.clone().requires_grad_()
    y = module(xg)
    G = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(y.dtype)
    return [y.detach(), *torch.autograd.grad((y * G).sum(), (xg, *params), allow_unused=True, materialize_grads=True)]


def _reference_grads(x, m, noise, seed):
    def fn(x, w):
        return reference.learnable_connections(x, w, m.candidates, m.temperature, noise, m.mode)

    return outputs_and_grads(fn, x.double(), m.weights.double(), seed=seed)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_values_and_gradients_match_reference(case, mode, dtype):
    in_dim, out_dim, k, cand, batch = case
    m = _module(in_dim, out_dim, k, cand, mode, dtype)
    x = torch.rand(*batch, in_dim, dtype=dtype)
    got = outputs_and_grads(lambda x, w: learnable_connections(x, w, m.candidates, 0.7, None, mode), x, m.weights)
    expected = _reference_grads(x, m, None, 7)
    assert got[0].shape == (*batch, k * out_dim)
    for g, e, what in zip(got, expected, ("output", "x grad", "weights grad")):
        assert_close(g, e.to(dtype), msg=what)
    # module forward = the function
    assert torch.equal(m(x), got[0])


@pytest.mark.parametrize("mode", MODES)
def test_feature_major_input(mode):
    """A logic layer's output (a transposed view) gives the same values and gradients, and stays feature-major."""
    m = _module(9, 4, 2, 3, mode, torch.float64)
    x = torch.rand(5, 9, dtype=torch.float64)
    xf = x.t().contiguous().t()
    for training in (True, False):
        m.train(training)
        got, expected = _module_grads(m, xf, [m.weights]), _module_grads(m, x, [m.weights])
        for g, e in zip(got, expected):
            assert torch.equal(g, e)
    assert not m(xf).is_contiguous() and m(xf).t().is_contiguous()


def test_straight_through_by_hand():
    """One slot, two candidates: value of the argmax, gradients p_c G to the inputs and (2 x_c - 1) G to the logits."""
    w = torch.tensor([[[0.3]], [[1.0]]], dtype=torch.float64, requires_grad=True)  # candidate 1 wins
    x = torch.tensor([[0.2, 0.9]], dtype=torch.float64, requires_grad=True)
    for y in (
        learnable_connections(x, w, None, 0.5),
        reference.learnable_connections(x, w, None, 0.5, None, "straight_through"),
    ):
        assert y.tolist() == [[0.9]]
        gx, gw = torch.autograd.grad(3 * y.sum(), (x, w))
        p = torch.softmax(torch.tensor([0.3, 1.0], dtype=torch.float64) / 0.5, 0)
        assert_close(gx, 3 * p[None])
        assert_close(gw.flatten(), torch.tensor([3 * (0.4 - 1), 3 * (1.8 - 1)], dtype=torch.float64))


def test_slot_layout_and_candidates():
    """Slot s of neuron j at s * out_dim + j; with candidates, the argmax candidate's input."""
    m = LearnableConnections(6, 4, 3, num_candidates=2)
    with torch.no_grad():
        m.weights.zero_()
        m.weights[1] = 1.0  # every slot picks its second candidate
    x = torch.arange(6, dtype=torch.float32)[None]
    expected = m.candidates[1].reshape(-1).float()  # [k, out] row-major = slot-major
    assert torch.equal(m(x)[0], expected)
    assert torch.equal(m.resolved_indices(), m.candidates[1])
    m.eval()
    assert torch.equal(m(x)[0], expected)
    assert m.candidates.shape == (2, 3, 4) and m.candidates.dtype == torch.int64
    assert int(m.candidates.min()) >= 0 and int(m.candidates.max()) < 6


def test_gradcheck_soft():
    """The soft mode's exact gradient, with Gumbel noise and candidates, and with every input a candidate."""
    m = _module(5, 3, 2, 3, "soft", torch.float64)
    x = torch.rand(2, 5, dtype=torch.float64, requires_grad=True)
    w = m.weights.detach().requires_grad_()
    noise = gumbel_noise(w.shape, None, torch.float64)
    dense = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    for fn in (learnable_connections, reference.learnable_connections):
        assert torch.autograd.gradcheck(lambda x, w, fn=fn: fn(x, w, m.candidates, 0.7, noise, "soft"), (x, w))
        assert torch.autograd.gradcheck(lambda x, w, fn=fn: fn(x, w, None, 0.7, None, "soft"), (x, dense))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cand", [None, 3])
def test_gumbel_reproducible(mode, cand):
    m = _module(7, 5, 2, cand, mode, torch.float64, gumbel=True)
    x = torch.rand(4, 7, dtype=torch.float64)
    torch.manual_seed(11)
    got = _module_grads(m, x, [m.weights])
    torch.manual_seed(11)
    noise = gumbel_noise(m.weights.shape, None, torch.float64)
    expected = _reference_grads(x, m, noise, 7)
    for g, e in zip(got, expected):
        assert_close(g, e)
    torch.manual_seed(11)
    assert torch.equal(m(x), got[0])
    draws = {tuple(m(x).flatten().tolist()) for _ in range(8)}
    assert len(draws) > 1  # the noise changes the choice between calls
    m.eval()
    assert torch.equal(m(x), x[:, m.resolved_indices().reshape(-1)])  # eval: no noise


def test_compile_fullgraph():
    for mode in MODES:
        m = _module(7, 5, 2, 3, mode)
        x = torch.rand(3, 7, requires_grad=True)
        compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
        y = compiled(x)
        assert torch.equal(y, m(x))
        (gx,) = torch.autograd.grad(y.sum(), x)
        assert torch.equal(gx, torch.autograd.grad(m(x).sum(), x)[0])


def test_errors():
    with pytest.raises(ValueError, match="in_dim"):
        LearnableConnections(0, 3)
    with pytest.raises(ValueError, match="k must"):
        LearnableConnections(4, 3, k=0)
    with pytest.raises(ValueError, match="num_candidates"):
        LearnableConnections(4, 3, num_candidates=5)
    with pytest.raises(ValueError, match="temperature"):
        LearnableConnections(4, 3, temperature=0.0)
    with pytest.raises(ValueError, match="mode"):
        LearnableConnections(4, 3, mode="hard")
    with pytest.raises(ValueError, match="init"):
        LearnableConnections(4, 3, init="zeros")
    with pytest.raises(TypeError, match="gumbel"):
        LearnableConnections(4, 3, gumbel=1)
    m = LearnableConnections(4, 3, num_candidates=2)
    with pytest.raises(ValueError, match="x must have 4"):
        m(torch.rand(2, 5))
    with pytest.raises(TypeError, match="x must"):
        m(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="candidates"):
        learnable_connections(torch.rand(2, 4), m.weights, m.candidates[:1])
    with pytest.raises(ValueError, match="weights must have in_dim"):
        learnable_connections(torch.rand(2, 4), m.weights)
    with pytest.raises(ValueError, match="noise"):
        learnable_connections(torch.rand(2, 4), m.weights, m.candidates, noise=torch.zeros(1))
    bad = m.state_dict()
    bad["candidates"] = bad["candidates"].clone().fill_(4)
    with pytest.raises(ValueError, match="candidates must hold input indices"):
        m.load_state_dict(bad)


# --- LogicLayer(connections="learnable") ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cand", [None, 2])
def test_layer_matches_reference(mode, cand):
    torch.manual_seed(0)
    layer = LogicLayer(9, 7, connections="learnable", num_candidates=cand, connection_temperature=0.6,
                       connection_mode=mode, dtype=torch.float64, backend="cpu")  # fmt: skip
    x = torch.rand(5, 9, dtype=torch.float64)
    got = _module_grads(layer, x, [layer.weights, layer.wiring.weights])
    n = torch.arange(7)

    def ref(x, g, w):
        slots = reference.learnable_connections(x, w, layer.wiring.candidates, 0.6, None, mode)
        return reference.logic_layer(slots, n, n + 7, reference.coefficients(torch.softmax(g, -1)))

    for g, e in zip(got, outputs_and_grads(ref, x, layer.weights, layer.wiring.weights)):
        assert_close(g, e)


def _learnable_model(seed=0):
    torch.manual_seed(seed)
    layers = [
        LogicLayer(11, 16, connections="learnable", num_candidates=3),
        LogicLayer(16, 13, connections="learnable"),
        LogicLayer(13, 12, connections="learnable", connection_gumbel=True),
    ]
    for layer in layers:
        with torch.no_grad():
            layer.weights.copy_(torch.nn.functional.one_hot(torch.randperm(layer.out_dim) % 16, 16) * 3.0)
            layer.wiring.weights.normal_()
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(3, tau=1.5, beta=torch.tensor([0.25, -1.0, 2.0])))


def _fixed_copy(model):
    """The same network with the resolved wiring as given (fixed) connections."""
    mods = [torch.nn.Flatten()]
    for layer in list(model)[1:-1]:
        fixed = LogicLayer(layer.in_dim, layer.out_dim, connections=layer.indices)
        fixed.weights = torch.nn.Parameter(layer.weights.detach().clone())
        mods.append(fixed)
    head = model[-1]
    return torch.nn.Sequential(*mods, GroupSum(head.k, head.tau, head.beta)).eval()


def test_layer_eval_packs_and_exports_like_fixed_connections():
    model = _learnable_model().eval()
    fixed = _fixed_copy(model)
    for layer in list(model)[1:-1]:
        a, b = layer.indices
        assert a.dtype == torch.int64 and a.shape == (layer.out_dim,)
        r = layer.wiring.resolved_indices()
        assert torch.equal(a, r[0]) and torch.equal(b, r[1])
    x = torch.rand(70, 11) > 0.5
    y = model(x.float())
    assert torch.equal(y, fixed(x.float()))
    counts = PackedLogicNet(model)(x)
    assert torch.equal(counts, PackedLogicNet(fixed)(x))
    assert torch.equal(model[-1].from_counts(counts, torch.float32), y)  # the packed path of a regression model
    assert torch.equal(counts, ((y - model[-1].beta) * 1.5).round().int())
    for got, want in zip(discretize(model)[1], discretize(fixed)[1]):
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert c_source(model) == c_source(fixed)
    assert verilog_source(model) == verilog_source(fixed)
    f1, f2 = io.BytesIO(), io.BytesIO()
    logic_io.save_gates(model, f1)
    logic_io.save_gates(fixed, f2)
    assert f1.getvalue() == f2.getvalue()
    loaded = logic_io.load_gates(io.BytesIO(f1.getvalue()))  # version 2: the offsets travel with the gates
    assert f1.getvalue()[8] == 2 and torch.equal(loaded(x.float()), y)


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="needs a C compiler")
def test_regression_model_c_library_equals_eval(tmp_path):
    """The C library of a learnable-wiring regression network: its counts through from_counts equal eval mode."""
    model = _learnable_model(3).eval()
    compiled = CompiledLogicNet(model, num_bits=64)
    compiled.compile(opt_level=0, save_lib_path=str(tmp_path / "net.so"))
    x = torch.rand(67, 11) > 0.5
    assert torch.equal(model[-1].from_counts(compiled(x), torch.float32), model(x.float()))


def test_save_gates_offsets():
    """A GroupSum without offsets writes version 1 files as before; offsets make version 2; truncated offsets raise."""
    model = _fixed_copy(_learnable_model().eval())
    plain = torch.nn.Sequential(*list(model)[:-1], GroupSum(3, tau=1.5)).eval()
    f = io.BytesIO()
    logic_io.save_gates(plain, f)
    assert f.getvalue()[8] == 1 and logic_io.load_gates(io.BytesIO(f.getvalue()))[-1].beta == 0.0
    scalar = torch.nn.Sequential(*list(model)[:-1], GroupSum(3, tau=1.5, beta=-0.5)).eval()
    g = io.BytesIO()
    logic_io.save_gates(scalar, g)
    x = torch.rand(9, 11).round()
    assert torch.equal(logic_io.load_gates(io.BytesIO(g.getvalue()))(x), scalar(x))
    with pytest.raises(ValueError, match="truncated in the offsets"):
        logic_io.load_gates(io.BytesIO(g.getvalue()[:40]))


def test_layer_state_dict_round_trip():
    model = _learnable_model(1)
    fresh = _learnable_model(2)
    assert "1.wiring.weights" in model.state_dict() and "1.wiring.candidates" in model.state_dict()
    assert "1.idx_a" not in model.state_dict()
    fresh.load_state_dict(model.state_dict())
    x = torch.rand(4, 11)
    for mode in (False, True):
        model.train(mode)
        fresh.train(mode)
        torch.manual_seed(3)
        y1 = model(x)
        torch.manual_seed(3)
        assert torch.equal(fresh(x), y1)


def test_layer_errors():
    with pytest.raises(ValueError, match="connections must be one of"):
        LogicLayer(4, 3, connections="learned")
    with pytest.raises(ValueError, match="connections='learnable'"):
        LogicLayer(4, 3, num_candidates=2)
    with pytest.raises(ValueError, match="num_candidates"):
        LogicLayer(4, 3, connections="learnable", num_candidates=0)
    layer = LogicLayer(4, 3, connections="learnable")
    with pytest.raises(ValueError, match="indices"):
        layer.indices = (torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="eval mode"):
        from relaxops.logic import pack_bits

        layer(pack_bits(torch.ones(2, 4, dtype=torch.bool)))


# --- GroupSum's offset and regression -----------------------------------------------------------------------


def test_group_sum_beta():
    x = torch.rand(3, 2, 12, dtype=torch.float64)
    for beta in (0.0, -1.5, torch.tensor([0.5, -2.0, 1.0], dtype=torch.float64)):
        y = GroupSum(3, tau=2.5, beta=beta)(x)
        assert_close(y, x.reshape(3, 2, 3, 4).sum(-1) / 2.5 + beta)
        assert_close(y, reference.group_sum(x, 3, 2.5, beta))
    head = GroupSum(3, tau=2.5, beta=0.5, learn_beta=True).double()
    assert isinstance(head.beta, torch.nn.Parameter) and head.beta.shape == (3,)
    (g,) = torch.autograd.grad(head(x).sum(), head.beta)
    assert torch.equal(g, torch.full((3,), 6.0, dtype=torch.float64))
    # feature-major input (a logic layer's output) takes the same values
    xt = x[0].t().contiguous().t()
    assert torch.equal(GroupSum(3, 2.5, head.beta.detach())(xt), GroupSum(3, 2.5, head.beta.detach())(x[0].clone()))
    # state_dict: the tensor beta round-trips; a number beta adds no state
    sd = GroupSum(3, beta=torch.tensor([1.0, 2.0, 3.0])).state_dict()
    other = GroupSum(3, beta=torch.zeros(3))
    other.load_state_dict(sd)
    assert other.beta.tolist() == [1.0, 2.0, 3.0]
    assert GroupSum(3, beta=1.0).state_dict() == {}
    assert GroupSum(2, tau=4.0, beta=1.0).from_counts(torch.tensor([[3, 8]], dtype=torch.int32)).tolist() == [
        [1.75, 3.0]
    ]


def test_group_sum_beta_errors():
    with pytest.raises(ValueError, match="beta"):
        GroupSum(3, beta=torch.zeros(2))
    with pytest.raises(ValueError, match="beta"):
        GroupSum(3, beta=float("nan"))
    with pytest.raises(ValueError, match="beta"):
        GroupSum(3, beta="1")
    with pytest.raises(TypeError, match="learn_beta"):
        GroupSum(3, learn_beta=1)
    with pytest.raises(ValueError, match="counts"):
        GroupSum(3).from_counts(torch.zeros(2, 2))


def test_regression_network_learns():
    """A learnable-wiring network with a GroupSum(1, tau, beta) head fits a generated target: MSE falls."""
    torch.manual_seed(0)
    x = (torch.rand(256, 8) > 0.5).float()
    target = 2.0 * x[:, 0] + x[:, 1] * x[:, 2] - 1.5 * (x[:, 3] != x[:, 4]).float() + 0.5 * x[:, 5]
    model = torch.nn.Sequential(
        LogicLayer(8, 48, connections="learnable", init="residual"),
        LogicLayer(48, 48, connections="learnable", num_candidates=8, init="residual"),
        GroupSum(1, tau=12.0, beta=-1.5, learn_beta=True),
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.05)

    def mse():
        return torch.nn.functional.mse_loss(model(x)[:, 0], target)

    start = mse().item()
    for _ in range(150):
        opt.zero_grad()
        loss = mse()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        final = mse().item()
    assert final < 0.5 * start, (start, final)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_cuda_matches_cpu(mode):
    """The same torch ops on CUDA: values, gradients (scatter-adds in another order: close, not equal), eval mode."""
    for cand in (None, 3):
        m = _module(9, 6, 3, cand, mode, torch.float64, gumbel=False)
        x = torch.rand(5, 9, dtype=torch.float64)
        expected = _module_grads(m, x, [m.weights])
        got = _module_grads(m.cuda(), x.cuda(), [m.weights])
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e)
        m.eval()
        assert torch.equal(m(x.cuda()).cpu(), x[:, m.resolved_indices().cpu().reshape(-1)])
        m.cpu()
