"""Packed inference and C / Verilog export of convolutional logic gate networks (LogicConv2d, OrPooling2d,
Flatten, LogicLayer, GroupSum), lowered to the netlist: equal to the float eval-mode forward bit for bit, for odd
shapes and batch sizes, with and without simplification; bad models raise clear errors."""

import shutil

import pytest
import torch
from relaxops import _backend, _ext
from relaxops.logic import GroupSum, LogicConv2d, LogicLayer, OrPooling2d, PackedLogicNet, netlist, pack_bits
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source

from .test_compile import simulate_verilog

BATCHES = (1, 63, 64, 65, 130)
BACKENDS = [b for b in ("cpu", "reference") if _backend.unavailable_reason(b, torch.device("cpu")) is None]
if torch.cuda.is_available():  # the PyTorch netlist interpreter on the GPU
    BACKENDS.append(pytest.param("cuda", marks=pytest.mark.gpu))

# (name, input (C, H, W), conv layers [(c_out, kernel, stride, padding, depth)], pool after each conv
# (kernel, stride, padding) or None, head: "dense" (Flatten + LogicLayer + GroupSum) or "direct"
# (GroupSum(start_dim=1)), k)
CONFIGS = [
    ("c1-5x5-k1-d1-direct", (1, 5, 5), [(4, 1, 1, 0, 1)], [None], "direct", 2),
    ("c3-7x7-k3-p1-d2-pool2-dense", (3, 7, 7), [(6, 3, 1, 1, 2)], [(2, 2, 0)], "dense", 3),
    ("c3-5x5-k3-s2-p1-d3-dense", (3, 5, 5), [(5, 3, 2, 1, 3)], [None], "dense", 4),
    ("c1-7x7-k3-s2-d2-pool3s2p1-direct", (1, 7, 7), [(6, 3, 2, 0, 2)], [(3, 2, 1)], "direct", 3),
    ("c3-7x7-k1-s2-d3-pool2-direct", (3, 7, 7), [(4, 1, 2, 0, 3)], [(2, 2, 0)], "direct", 4),
    ("c3-5x7-k3-p1-d1-dense", (3, 5, 7), [(3, 3, 1, 1, 1)], [None], "dense", 5),
    ("two-convs-pool-dense", (3, 7, 7), [(6, 3, 1, 1, 2), (8, 3, 1, 1, 3)], [(2, 2, 0), (2, 1, 1)], "dense", 2),
]


def all_gate_logits(param, seed):
    """Logits whose argmax covers all 16 gate ids (not / nor / nand / one set padding bits; zero / one fold)."""
    g = torch.Generator().manual_seed(seed)
    n = param.numel() // 16
    ids = torch.randperm(n, generator=g) % 16
    with torch.no_grad():
        param.copy_(
            (torch.nn.functional.one_hot(ids, 16) * 4.0 + 0.1 * torch.rand(n, 16, generator=g)).reshape(param.shape)
        )


def make_model(config, seed=0):
    _, (C, H, W), convs, pools, head, k = config
    torch.manual_seed(seed)
    layers, c = [], C
    for i, ((c_out, kernel, stride, padding, depth), pool) in enumerate(zip(convs, pools)):
        conv = LogicConv2d(
            c, c_out, kernel, depth, stride=stride, padding=padding, generator=torch.Generator().manual_seed(seed + i)
        )
        all_gate_logits(conv.weights, seed + 10 * i)
        layers.append(conv)
        H, W = (H + 2 * padding - kernel) // stride + 1, (W + 2 * padding - kernel) // stride + 1
        if pool is not None:
            pk, ps, pp = pool
            layers.append(OrPooling2d(pk, ps, pp))
            H, W = (H + 2 * pp - pk) // ps + 1, (W + 2 * pp - pk) // ps + 1
        c = c_out
    if head == "dense":
        n = c * H * W
        dense = LogicLayer(n, k * (-(-n // (2 * k))))  # 2 out_dim >= in_dim, k | out_dim
        all_gate_logits(dense.weights, seed + 99)
        layers += [torch.nn.Flatten(), dense, GroupSum(k, tau=3.0)]
    else:
        layers.append(GroupSum(k, tau=3.0, start_dim=1))
    return torch.nn.Sequential(*layers).eval()


def float_counts(model, x):
    """round(float eval-mode output * tau): the oracle."""
    with torch.no_grad():
        return (model(x.float()) * model[-1].tau).round().to(torch.int32)


def batch(config, B, seed=1):
    C, H, W = config[1]
    return torch.rand(B, C, H, W, generator=torch.Generator().manual_seed(seed + B)) > 0.5


@pytest.mark.parametrize("config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "every-gate"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_equals_float_eval(config, simplify, backend):
    model = make_model(config)
    device = "cuda" if backend == "cuda" else "cpu"
    net = PackedLogicNet(model, device=device, input_shape=config[1], simplify=simplify, backend=backend)
    for B in BATCHES if backend != "reference" else (65,):
        x = batch(config, B)
        expected = float_counts(model, x)
        out = net(x.to(device)).cpu()
        assert out.dtype == torch.int32 and out.shape == expected.shape
        assert torch.equal(out, expected), f"B={B}"
    if backend == "cpu":  # the other input forms: flat, 0/1 floats, pre-packed words
        x = batch(config, 77)
        expected = float_counts(model, x)
        assert torch.equal(net(x.reshape(77, -1)), expected)
        assert torch.equal(net(x.float()), expected)
        assert torch.equal(net(pack_bits(x.reshape(77, -1))), expected)
        assert torch.equal(net(x[:0]), expected[:0])


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
@pytest.mark.parametrize("simd", list(range(_ext._C.logic_simd_best() + 1)) if _ext.has_cpu() else [])
def test_simd_levels_fused_trees(simd):
    """Every SIMD level of the engine (packing of Boolean images, plain and fused runs) on the two-conv network,
    whose trees and pools are mostly fused pairs."""
    config = CONFIGS[6]
    model = make_model(config)
    net = PackedLogicNet(model, input_shape=config[1], simd=simd, num_threads=1)
    runs = net._plan.op_start[1:] - net._plan.op_start[:-1]
    assert int(runs.reshape(-1, netlist.RUNS)[:, 16:].sum()) > 0  # fused entries are present
    x = batch(config, 130)
    assert torch.equal(net(x), float_counts(model, x))
    assert torch.equal(net(pack_bits(x.reshape(130, -1))), float_counts(model, x))


def test_dense_network_with_input_shape():
    """A dense network given input_shape goes through the lowering too, with the layered path's results."""
    torch.manual_seed(3)
    layers = [LogicLayer(30, 40), LogicLayer(40, 24)]
    for i, layer in enumerate(layers):
        all_gate_logits(layer.weights, i)
    model = torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(4, tau=2.0)).eval()
    x = torch.rand(100, 2, 3, 5) > 0.5
    lowered = PackedLogicNet(model, input_shape=(2, 3, 5))
    assert lowered.graph is not None and PackedLogicNet(model).graph is None
    assert torch.equal(lowered(x), PackedLogicNet(model)(x.reshape(100, -1)))
    assert torch.equal(lowered(x), float_counts(model, x))


def test_simplification_folds_padding_and_layers_forward():
    config = CONFIGS[1]
    model = make_model(config)
    every = PackedLogicNet(model, input_shape=config[1], simplify=False)
    simple = PackedLogicNet(model, input_shape=config[1])
    C_out, L = 6, 4
    tree_gates = C_out * 7 * 7 * (L - 1)
    pool_gates = C_out * 3 * 3 * 3  # 2x2 windows of a 7x7 map, 3x3 of them: 3 ORs each
    assert every.num_gates == tree_gates + pool_gates + model[-2].out_dim + 1  # + the constant-0 gate
    assert simple.num_gates < every.num_gates
    x = batch(config, 70)
    out_bits = simple.layers_forward(pack_bits(x.reshape(70, -1))).unpack()
    with torch.no_grad():
        expected = model[:-1](x.float()) > 0.5
    assert torch.equal(out_bits, expected)
    assert torch.equal(every.layers_forward(pack_bits(x.reshape(70, -1))).unpack(), expected)


@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[3], CONFIGS[6]], ids=[CONFIGS[i][0] for i in (1, 3, 6)])
@pytest.mark.parametrize("bits,simplify", [(64, True), (8, False)])
def test_c_export_equals_float_eval(config, bits, simplify):
    model = make_model(config)
    lib = CompiledLogicNet(model, num_bits=bits, input_shape=config[1])
    lib.simplify = simplify
    lib.compile(opt_level=0)
    for B in (1, 65, 130):
        x = batch(config, B)
        expected = float_counts(model, x)
        assert torch.equal(lib(x), expected), f"B={B}"
        assert torch.equal(lib(x.reshape(B, -1).numpy()), expected)
    assert "channel-major" in verilog_source(model, input_shape=config[1])
    assert c_source(model, input_shape=config[1]).count("= (W)(") < c_source(model, 64, False, config[1]).count("=")


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed (CI installs it)")
@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "every-gate"])
def test_verilog_simulation(simplify, tmp_path):
    config = CONFIGS[3]  # direct GroupSum: y is the pooled 6 x 2 x 2 map, channel-major
    model = make_model(config)
    B = 30
    x = batch(config, B)
    with torch.no_grad():
        y = (model[:-1](x.float()) > 0.5).reshape(B, -1)
    source = verilog_source(model, input_shape=config[1], simplify=simplify)
    rows = simulate_verilog(tmp_path, source, x.reshape(B, -1), y.shape[1], model[-1].k)
    expected = float_counts(model, x)
    for s, (y_bits, counts) in enumerate(rows):
        assert y_bits == y[s].int().tolist()
        assert counts == expected[s].tolist()


def test_bad_models():
    config = CONFIGS[1]
    model = make_model(config)
    shape = config[1]
    with pytest.raises(ValueError, match="input_shape"):
        PackedLogicNet(model)
    with pytest.raises(ValueError, match="input_shape"):
        PackedLogicNet(model, input_shape=(3, 7))
    with pytest.raises(ValueError, match="input channels"):
        PackedLogicNet(model, input_shape=(2, 7, 7))
    with pytest.raises(ValueError, match="kernel_size"):
        PackedLogicNet(
            torch.nn.Sequential(LogicConv2d(1, 2, 3, 1), GroupSum(2, start_dim=1)).eval(), input_shape=(1, 2, 2)
        )
    with pytest.raises(ValueError, match="in_dim"):
        PackedLogicNet(model, input_shape=(3, 9, 9))
    with pytest.raises(ValueError, match="training mode"):
        PackedLogicNet(make_model(config).train(), input_shape=shape)
    with pytest.raises(ValueError, match="ReLU.*unsupported module"):
        PackedLogicNet(
            torch.nn.Sequential(model[0], torch.nn.ReLU(), GroupSum(2, start_dim=1)).eval(), input_shape=shape
        )
    with pytest.raises(ValueError, match="Flatten"):
        PackedLogicNet(torch.nn.Sequential(model[0], LogicLayer(6 * 49, 148), GroupSum(2)).eval(), input_shape=shape)
    with pytest.raises(ValueError, match="start_dim=1"):
        PackedLogicNet(torch.nn.Sequential(model[0], GroupSum(7)).eval(), input_shape=shape)
    with pytest.raises(ValueError, match="must divide"):
        PackedLogicNet(torch.nn.Sequential(model[0], GroupSum(5, start_dim=1)).eval(), input_shape=shape)
    with pytest.raises(ValueError, match="needs a \\[C, H, W\\] map"):
        PackedLogicNet(
            torch.nn.Sequential(torch.nn.Flatten(), model[0], GroupSum(2, start_dim=1)).eval(), input_shape=shape
        )
    with pytest.raises(ValueError, match="end with a GroupSum"):
        PackedLogicNet(torch.nn.Sequential(model[0], model[1]).eval(), input_shape=shape)
    net = PackedLogicNet(model, input_shape=shape)
    with pytest.raises(ValueError, match="shape"):
        net(torch.zeros(4, 3, 7, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="Boolean"):
        net(torch.full((4, 3, 7, 7), 0.5))
    with pytest.raises(ValueError, match="features"):
        net(pack_bits(torch.zeros(4, 10, dtype=torch.bool)))
    with pytest.raises(ValueError, match="input_shape"):
        c_source(model)
    with pytest.raises(ValueError, match="training mode"):
        verilog_source(make_model(config).train(), input_shape=shape)
