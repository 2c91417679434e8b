"""k-input lookup-table layers (docs/math/logic.md §11): the kernels against the float64 reference (values and
gradients, every activation and the counter-based noise), the parametrizations and sampling modes through the
module, exact discretization, and the lowering to two-input gates (packed engine, C and Verilog export equal to
eval mode bit for bit)."""

import re
import shutil

import pytest
import torch
from relaxops import selftest
from relaxops.logic import (
    GroupSum,
    LogicLUTLayer,
    PackedLogicNet,
    discretize,
    logic_lut,
    pack_bits,
    parametrize,
    reference,
)
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source
from relaxops.logic.connections import lut_connections, lut_inverse_index
from relaxops.logic.lower import _Builder, lut_gates
from relaxops.logic.netlist import build_graph, evaluate
from relaxops.logic.ops import logic_lut_bwd, logic_lut_fwd
from testing import opcheck_calls

KS = [2, 3, 4, 5, 6]
ACTS = ["none", "sigmoid", "sigmoid_st"]
B, N_IN, N_OUT = 5, 11, 7  # odd sizes


def case(k, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed + 10 * k)
    x = torch.rand(B, N_IN, dtype=dtype, generator=g)
    idx = torch.randint(0, N_IN, (k, N_OUT), generator=g)
    q = torch.randn(N_OUT, 1 << k, dtype=dtype, generator=g)
    return x, idx, q


def run(x, idx, q, act, seed, backend):
    """Output and gradients (x, table) of sum(y * w) for a fixed w."""
    x, q = x.clone().requires_grad_(), q.clone().requires_grad_()
    y = logic_lut(x, idx, q, act, seed, 0.75, backend=backend)
    w = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(y.dtype)
    return (y.detach(), *torch.autograd.grad((y * w).sum(), (x, q)))


def assert_close(got, want, dtype):
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("seed", [-1, 12345], ids=["plain", "noise"])
def test_cpu_equals_reference(k, act, seed):
    for dtype in (torch.float64, torch.float32):
        x, idx, q = case(k, dtype)
        want = run(x.double(), idx, q.double(), act, seed, "reference")
        assert_close(run(x, idx, q, act, seed, "cpu"), want, dtype)


@pytest.mark.heavy  # the Triton interpreter
@pytest.mark.parametrize("k", KS)
def test_triton_equals_reference(k):
    x, idx, q = case(k)
    act = ACTS[k % 3]
    for seed in (-1, 7):
        assert_close(run(x, idx, q, act, seed, "triton"), run(x, idx, q, act, seed, "reference"), torch.float64)
    if k == 4:
        x, idx, q = case(k, torch.float32)
        want = run(x.double(), idx, q.double(), "sigmoid", 5, "reference")
        assert_close(run(x, idx, q, "sigmoid", 5, "triton"), want, torch.float32)


def test_reference_is_the_basis_sum():
    """The reference against a literal evaluation: sum over the 2^k corners of the table times the corner's
    probability, with the noise of parametrize.logistic_noise at s n_out + j."""
    x, idx, q = case(3)
    y = reference.logic_lut(x, idx, q, "sigmoid", 4, 0.5)
    for s in range(B):
        for j in range(N_OUT):
            u = 0.0
            for t in range(8):
                p = 1.0
                for i in range(3):
                    xi = float(x[s, idx[i, j]])
                    p *= xi if (t >> (2 - i)) & 1 else 1 - xi
                u += float(q[j, t]) * p
            u += 0.5 * float(parametrize.logistic_noise(4, torch.tensor(s * N_OUT + j), torch.float64))
            assert abs(float(y[s, j]) - 1 / (1 + torch.exp(torch.tensor(-u, dtype=torch.float64)))) < 1e-12


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("k", KS)
def test_gradcheck(backend, k):
    g = torch.Generator().manual_seed(k)
    x = torch.rand(3, 6, dtype=torch.float64, generator=g, requires_grad=True)
    idx = torch.randint(0, 6, (k, 4), generator=g)
    idx[1, 0] = idx[0, 0]  # a neuron reading one input twice
    q = torch.randn(4, 1 << k, dtype=torch.float64, generator=g, requires_grad=True)
    for act, seed in (("none", -1), ("sigmoid", 3)):

        def fn(a, t, act=act, seed=seed):
            return logic_lut(a, idx, t, act, seed, 0.5, backend=backend)

        assert torch.autograd.gradcheck(fn, (x, q))


@pytest.mark.parametrize("parametrization", ["light", "walsh"])
def test_two_inputs_equal_the_bilinear_form(parametrization):
    torch.manual_seed(0)
    layer = LogicLUTLayer(9, 13, k=2, parametrization=parametrization, init="random", dtype=torch.float64)
    x = torch.rand(5, 9, dtype=torch.float64)
    q, act = layer.table(torch.float64)
    u = reference.logic_layer(x, layer.indices[0], layer.indices[1], parametrize.coefficients(q))
    want = torch.sigmoid(u) if act == "sigmoid" else u
    for backend in ("reference", "cpu"):
        layer.backend = backend
        torch.testing.assert_close(layer(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("parametrization", ["light", "walsh"])
@pytest.mark.parametrize("sampling", parametrize.SAMPLINGS)
def test_module_backends_agree(parametrization, sampling):
    """Every parametrization and sampling mode through the module: the same generator state gives the same
    logistic noise (light: on the logits; walsh: per output, from one seed), so cpu equals the reference."""
    for k in (2, 4, 6):
        torch.manual_seed(k)
        layer = LogicLUTLayer(N_IN, N_OUT, k=k, parametrization=parametrization, sampling=sampling,
                              temperature=0.7, init="random", dtype=torch.float64)  # fmt: skip
        x0 = torch.rand(B, N_IN, dtype=torch.float64)
        results = []
        for backend in ("reference", "cpu"):
            layer.backend = backend
            layer.weights.grad = None
            x = x0.clone().requires_grad_()
            torch.manual_seed(100)
            y = layer(x)
            (y * torch.arange(N_OUT, dtype=torch.float64)).sum().backward()
            results.append((y.detach(), x.grad, layer.weights.grad.clone()))
        assert_close(results[1], results[0], torch.float64)
        if sampling.endswith("hard") and parametrization == "walsh":
            assert set(results[0][0].unique().tolist()) <= {0.0, 1.0}


@pytest.mark.heavy
@pytest.mark.parametrize("k", KS)
def test_module_triton(k):
    parametrization, sampling = [("walsh", "gumbel_hard"), ("light", "gumbel_soft"), ("walsh", "soft")][k % 3]
    torch.manual_seed(k)
    layer = LogicLUTLayer(N_IN, N_OUT, k=k, parametrization=parametrization, sampling=sampling, init="random")
    x0 = torch.rand(B, N_IN)
    results = []
    for backend in ("cpu", "triton"):
        layer.backend = backend
        layer.weights.grad = None
        x = x0.clone().requires_grad_()
        torch.manual_seed(1)
        y = layer(x)
        (y * torch.arange(N_OUT)).sum().backward()
        results.append((y.detach(), x.grad, layer.weights.grad.clone()))
    assert_close(results[1], results[0], torch.float32)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("parametrization", ["light", "walsh"])
def test_eval_mode_is_the_truth_table(k, parametrization):
    torch.manual_seed(k)
    layer = LogicLUTLayer(N_IN, N_OUT, k=k, parametrization=parametrization, init="random").eval()
    x = (torch.rand(9, N_IN) > 0.5).float()
    T = layer.truth_tables()
    assert T.dtype == torch.bool and T.shape == (N_OUT, 1 << k)
    t = sum(x[:, layer.indices[i]].long() << (k - 1 - i) for i in range(k))  # [9, N_OUT] table entries
    want = T[torch.arange(N_OUT), t].float()
    for backend in ("reference", "cpu"):
        layer.backend = backend
        assert torch.equal(layer(x), want)
    packed = layer(pack_bits(x.bool()))
    assert torch.equal(packed.unpack().float(), want)


def test_connections():
    torch.manual_seed(0)
    for k in KS:
        idx = lut_connections("random", 10, 13, k)
        counts = torch.bincount(idx.flatten(), minlength=10)
        assert idx.shape == (k, 13) and int(counts.max() - counts.min()) <= 1
        idx = lut_connections("unique", 10, 13, k)
        counts = torch.bincount(idx.flatten(), minlength=10)
        assert int(counts.max() - counts.min()) <= 1
        assert all(len(set(idx[:, j].tolist())) == k for j in range(13))
    given = torch.tensor([[0, 1, 2], [2, 1, 0], [1, 1, 1]])
    layer = LogicLUTLayer(3, 3, k=3, connections=given)
    assert torch.equal(layer.indices, given) and layer.indices.dtype == torch.int64
    start, entry = lut_inverse_index(given, 3)
    assert start.tolist() == [0, 2, 7, 9]
    assert entry.tolist() == [0, 7, 2, 3, 4, 5, 8, 1, 6]  # k j + i reading inputs 0, 1, 2


def test_indices_edit_rebuilds_the_inverse_index():
    torch.manual_seed(0)
    layer = LogicLUTLayer(6, 4, k=3)
    x = torch.rand(3, 6, requires_grad=True)
    layer(x).sum().backward()
    with torch.no_grad():
        layer.indices[:, 0] = torch.tensor([5, 5, 5])
    x.grad = None
    layer(x).sum().backward()
    layer.backend = "reference"
    gx = torch.autograd.grad(layer(x).sum(), x)[0]
    torch.testing.assert_close(x.grad, gx)


class FixedWiring(torch.nn.Module):
    """A stand-in for learned connections: gathers fixed inputs (slot-major) and resolves to them."""

    def __init__(self, idx):
        super().__init__()
        self.idx = idx

    def forward(self, x):
        return x[..., self.idx.reshape(-1)]

    def resolved_indices(self):
        return self.idx


def test_wiring_hook():
    """A wiring module replaces the gather: training runs on its slot inputs, eval mode and packing on its
    resolved indices; both equal the layer with those indices as fixed connections."""
    torch.manual_seed(0)
    fixed = LogicLUTLayer(N_IN, N_OUT, k=3, parametrization="walsh", init="random", dtype=torch.float64)
    wired = LogicLUTLayer(N_IN, N_OUT, k=3, parametrization="walsh", dtype=torch.float64)
    wired.load_state_dict(fixed.state_dict())
    wired.indices.zero_()  # not used: the wiring decides
    wired.wiring = FixedWiring(fixed.indices.clone())
    x = torch.rand(B, N_IN, dtype=torch.float64, requires_grad=True)
    y, yw = fixed(x), wired(x)
    torch.testing.assert_close(yw, y)
    torch.testing.assert_close(torch.autograd.grad(yw.sum(), x)[0], torch.autograd.grad(y.sum(), x)[0])
    fixed.eval(), wired.eval()
    xb = (x > 0.5).double()
    assert torch.equal(wired(xb), fixed(xb))
    model = torch.nn.Sequential(wired, GroupSum(7)).eval()
    assert torch.equal(PackedLogicNet(model)(xb.bool()), float_counts(model, xb.bool()))


@pytest.mark.parametrize("num_candidates", [None, 3])
def test_learnable_connections(num_candidates):
    """connections='learnable': the gates read the wiring's slots in training (its logits get a gradient), and eval
    mode, packing and export equal the layer with the resolved wiring as fixed connections."""
    torch.manual_seed(0)
    layer = LogicLUTLayer(
        N_IN, N_OUT, k=3, connections="learnable", num_candidates=num_candidates, dtype=torch.float64, backend="cpu"
    )
    assert layer.indices is None and layer.wiring.weights.shape[1:] == (3, N_OUT)
    x = torch.rand(B, N_IN, dtype=torch.float64, requires_grad=True)
    slots = layer.wiring(x)
    q, act = layer.table(torch.float64)
    want = reference.logic_lut(slots, layer.slot_indices(x.device)[0], q, act, -1, 0.0)
    y = layer(x)
    torch.testing.assert_close(y, want)
    y.square().sum().backward()
    assert layer.wiring.weights.grad.abs().sum() > 0 and x.grad.abs().sum() > 0
    fixed = LogicLUTLayer(N_IN, N_OUT, k=3, connections=layer.resolved_indices(), dtype=torch.float64)
    fixed.weights.data.copy_(layer.weights.data)
    layer.eval(), fixed.eval()
    xb = (x.detach() > 0.5).double()
    assert torch.equal(layer(xb), fixed(xb))
    model = torch.nn.Sequential(layer, GroupSum(7)).eval()
    assert torch.equal(PackedLogicNet(model)(xb.bool()), float_counts(model, xb.bool()))
    state = layer.state_dict()
    assert "indices" not in state and "wiring.weights" in state
    with pytest.raises(ValueError, match="connections='learnable'"):
        LogicLUTLayer(N_IN, N_OUT, k=3, num_candidates=2)


def test_errors():
    with pytest.raises(ValueError, match="k must be"):
        LogicLUTLayer(4, 4, k=7)
    with pytest.raises(ValueError, match="k must be"):
        LogicLUTLayer(4, 4, k=1)
    with pytest.raises(ValueError, match="LogicLayer"):
        LogicLUTLayer(4, 4, k=2, parametrization="softmax")
    with pytest.raises(ValueError, match="parametrization"):
        LogicLUTLayer(4, 4, parametrization="bogus")
    with pytest.raises(ValueError, match="sampling"):
        LogicLUTLayer(4, 4, sampling="bogus")
    with pytest.raises(ValueError, match="out_dim \\* k"):
        LogicLUTLayer(20, 4, k=4)
    with pytest.raises(ValueError, match="connections must be one of"):
        LogicLUTLayer(4, 4, connections="bogus")
    with pytest.raises(ValueError, match="connections must be an integer tensor of shape"):
        LogicLUTLayer(4, 4, k=3, connections=torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="connections must hold input indices"):
        LogicLUTLayer(4, 4, k=2, connections=torch.full((2, 4), 4))
    with pytest.raises(ValueError, match="unique"):
        LogicLUTLayer(3, 4, k=4, connections="unique")
    layer = LogicLUTLayer(4, 4, k=2)
    with pytest.raises(ValueError, match="features"):
        layer(torch.rand(2, 5))
    with pytest.raises(RuntimeError, match="eval mode"):
        layer(pack_bits(torch.rand(3, 4) > 0.5))
    x, idx, q = case(3)
    with pytest.raises(ValueError, match="table must have shape"):
        logic_lut(x, idx, q[:, :4])
    with pytest.raises(ValueError, match="act must be"):
        logic_lut(x, idx, q, act="relu")
    with pytest.raises(ValueError, match="indices must hold"):
        logic_lut(x, idx + N_IN, q)
    with pytest.raises(ValueError, match="seed"):
        logic_lut(x, idx, q, seed=-2)
    start, entry = lut_inverse_index(idx, N_IN)
    xt = x.t().contiguous()
    with pytest.raises(ValueError, match="indices must have k"):
        logic_lut_fwd(xt, idx[:1].contiguous(), q[:, :2].contiguous(), start, entry, 0, -1, 0.0, "cpu")
    with pytest.raises(TypeError, match="table"):
        logic_lut_fwd(xt, idx, q.float(), start, entry, 0, -1, 0.0, "cpu")
    with pytest.raises(ValueError, match="act"):
        logic_lut_fwd(xt, idx, q, start, entry, 3, -1, 0.0, "cpu")
    g = torch.ones(N_OUT, B, dtype=torch.float64)
    with pytest.raises(ValueError, match="inverse index"):  # the C++ kernel checks its index
        logic_lut_bwd(g, xt, idx, q, start, entry.flip(0).contiguous(), g, 0, True, False, "cpu")
    with pytest.raises(TypeError, match="sig"):
        logic_lut_bwd(g, xt, idx, q, start, entry, g.float(), 2, True, False, "cpu")


# --- lowering to two-input gates: packing and export -------------------------------------------------------


def trained_looking(layer, seed):
    """Weights whose tables mix random entries with the cases the lowering folds: constant tables, tables
    independent of an input (equal halves), xor-like ones (complementary halves)."""
    k, m = layer.k, 1 << layer.k
    g = torch.Generator().manual_seed(seed)
    tables = torch.rand(layer.out_dim, m, generator=g) > 0.5
    t = torch.arange(m)
    tables[0], tables[1] = False, True
    tables[2] = ((t >> (k - 1)) & 1).bool()  # the first input
    tables[3] = (((t >> (k - 1)) ^ t) & 1).bool()  # first xor last
    tables[4::5, m // 2 :] = tables[4::5, : m // 2]  # independent of the first input
    tables[5::7, 1::2] = ~tables[5::7, 0::2]  # complementary halves in the last input
    s = torch.where(tables, -1.0, 1.0) * (0.5 + torch.rand(layer.out_dim, m, generator=g))  # sign: the entry
    with torch.no_grad():
        if layer.parametrization == "light":
            layer.weights.copy_(-s)
        else:  # walsh: corners z = H w; entry 1 where z < 0
            layer.weights.copy_(s @ parametrize.hadamard(k) / m)
    assert torch.equal(layer.truth_tables(), tables)


def lut_model(k, parametrization, seed=0):
    torch.manual_seed(seed)
    layers = [LogicLUTLayer(13, 24, k=k, parametrization=parametrization, connections="unique"),
              LogicLUTLayer(24, 18, k=k, parametrization=parametrization)]  # fmt: skip
    for i, layer in enumerate(layers):
        trained_looking(layer, seed + i)
    return torch.nn.Sequential(*layers, GroupSum(3, tau=2.0)).eval()


def float_counts(model, x):
    with torch.no_grad():
        return (model(x.float()) * model[-1].tau).round().to(torch.int32)


@pytest.mark.parametrize("k", KS)
def test_lut_gates_compute_the_tables(k):
    """Every table of k inputs in a sample (and the folded special cases) through the netlist interpreter."""
    g = torch.Generator().manual_seed(k)
    n = 40
    tables = torch.rand(n, 1 << k, generator=g) > 0.5
    tables[0], tables[1] = False, True
    idx = torch.randint(0, k + 2, (k, n), generator=g)
    builder = _Builder(k + 2)
    builder.gather(lut_gates(builder, tables, idx))
    x = torch.rand(130, k + 2, generator=g) > 0.5
    t = sum(x[:, idx[i]].long() << (k - 1 - i) for i in range(k))
    want = tables[torch.arange(n), t]
    for simplify in (True, False):
        net = build_graph(k + 2, builder.ops, simplify)
        assert torch.equal(pack_bits(x).__class__(evaluate(net, pack_bits(x).words), 130).unpack(), want)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("parametrization", ["light", "walsh"])
def test_packed_and_c_equal_eval(k, parametrization, tmp_path):
    model = lut_model(k, parametrization)
    x = torch.rand(70, 13, generator=torch.Generator().manual_seed(1)) > 0.5
    expected = float_counts(model, x)
    for simplify in (True, False):
        net = PackedLogicNet(model, simplify=simplify)
        assert torch.equal(net(x), expected)
    assert torch.equal(PackedLogicNet(model, backend="reference")(x), expected)
    with pytest.raises(ValueError, match="k-input tables"):
        discretize(model)
    if parametrization == "walsh" or k in (2, 6):  # the C library, built with the system compiler
        lib = CompiledLogicNet(model, num_bits=64)
        lib.compile(opt_level=0, save_lib_path=str(tmp_path / "net.so"))
        assert torch.equal(lib(x), expected)


def eval_verilog(source, x_bits):
    """The emitted netlist evaluated statement by statement on one sample (Python ints as wires, two's complement:
    bit 0 is the one-bit value): the outputs ``y``."""
    env = {f"x{i}": int(v) for i, v in enumerate(x_bits)}
    y = {}
    for line in source.splitlines():
        m = re.fullmatch(r"\s*(?:wire (\w+)|assign y\[(\d+)\]) = (.*);", line)
        if m:
            expr = m.group(3).replace("1'b0", "0").replace("1'b1", "1")
            value = eval(re.sub(r"x\[(\d+)\]", r"x\1", expr), {}, env) & 1
            if m.group(1):
                env[m.group(1)] = value
            else:
                y[int(m.group(2))] = value
    return [y[j] for j in range(len(y))]


@pytest.mark.parametrize("k", [3, 5])
def test_verilog_equals_eval(k, tmp_path):
    model = lut_model(k, "walsh", seed=2)
    x = torch.rand(12, 13, generator=torch.Generator().manual_seed(2)) > 0.5
    expected = float_counts(model, x)
    source = verilog_source(model)
    with torch.no_grad():
        bits = model[:-1](x.float()).int()
    assert torch.equal(bits.reshape(12, 3, 6).sum(-1), expected)  # GroupSum(3): 6 outputs a class
    for s in range(12):
        assert eval_verilog(source, x[s].tolist()) == bits[s].tolist()
    assert "LogicLUTLayer" in source and "GroupSum" in c_source(model)
    if shutil.which("iverilog") is not None:  # the simulator (CI installs it)
        from .test_compile import simulate_verilog

        rows = simulate_verilog(tmp_path, source, x, 18, 3)
        assert [r[1] for r in rows] == expected.tolist()


@pytest.mark.heavy
def test_selftest_entry():
    """A shard of the selftest's cases (the Triton interpreter is slow): one per size, three activations."""
    assert selftest.check("logic_lut", "triton", "cpu", shard=(2, 7)) == []


def test_opcheck():
    """opcheck of the ops the layer calls: training with noise (walsh, gumbel_soft: input and table gradients) and
    eval mode (no table gradient)."""
    made = {"relaxops::logic_lut_fwd", "relaxops::logic_lut_bwd"}
    torch.manual_seed(0)
    layer = LogicLUTLayer(N_IN, N_OUT, k=3, parametrization="walsh", sampling="gumbel_soft", backend="cpu")
    x = torch.rand(B, N_IN)
    assert made <= set(opcheck_calls(layer, x))
    assert made <= set(opcheck_calls(layer.eval(), x))


def test_torch_compile_fullgraph():
    torch.manual_seed(0)
    layer = LogicLUTLayer(N_IN, N_OUT, k=4, backend="cpu")
    x = torch.rand(B, N_IN, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    y, yc = layer(x), compiled(x)
    torch.testing.assert_close(yc, y)
    torch.testing.assert_close(torch.autograd.grad(yc.sum(), x)[0], torch.autograd.grad(y.sum(), x)[0])
