"""relaxops.compat.difflogic against difflogic 0.1.0's documented behaviour (signatures, attributes, random calls,
the 16-gate formulation of its Python path, PackBitsTensor's bit layout) and the packed / compiled contract."""

import ctypes
import importlib
import inspect
import subprocess

import numpy as np
import pytest
import torch
from relaxops.compat.difflogic import CompiledLogicNet, GroupSum, LogicLayer, PackBitsTensor
from relaxops.logic import reference

# difflogic 0.1.0's signatures, parameter by parameter (name, default).
SIGNATURES = {
    LogicLayer.__init__: [
        ("in_dim", None),
        ("out_dim", None),
        ("device", "cuda"),
        ("grad_factor", 1.0),
        ("implementation", None),
        ("connections", "random"),
    ],
    GroupSum.__init__: [("k", None), ("tau", 1.0), ("device", "cuda")],
    PackBitsTensor.__init__: [("t", None), ("bit_count", 32), ("device", "cuda")],
    CompiledLogicNet.__init__: [
        ("model", None),
        ("device", "cpu"),
        ("num_bits", 64),
        ("cpu_compiler", "gcc"),
        ("verbose", False),
    ],
    CompiledLogicNet.compile: [("opt_level", 1), ("save_lib_path", None), ("verbose", False)],
    CompiledLogicNet.load: [("save_lib_path", None), ("num_classes", None), ("num_bits", None)],
}


@pytest.mark.parametrize("fn", list(SIGNATURES), ids=lambda f: f.__qualname__)
def test_signatures(fn):
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in params]
    assert got == SIGNATURES[fn]


def difflogic_forward(x, layer, training):
    """difflogic's Python path: the 16 relaxed gates weighted by softmax(w) (train) or the argmax one-hot."""
    w = layer.weights
    p = torch.softmax(w, -1) if training else torch.nn.functional.one_hot(w.argmax(-1), 16).to(x.dtype)
    return reference.logic_layer_16(x, layer.indices[0], layer.indices[1], p)


def test_layer_attributes_and_random_calls():
    torch.manual_seed(3)
    layer = LogicLayer(8, 6, device="cpu")
    torch.manual_seed(3)
    w = torch.randn(6, 16)
    c = torch.randperm(12) % 8
    c = torch.randperm(8)[c].reshape(2, 6)
    assert torch.equal(layer.weights.detach(), w)
    assert isinstance(layer.indices, tuple) and torch.equal(layer.indices[0], c[0])
    assert torch.equal(layer.indices[1], c[1]) and layer.indices[0].dtype == torch.int64
    assert layer.implementation == "python" and layer.connections == "random"
    assert layer.num_neurons == layer.num_weights == 6 and layer.in_dim == 8 and layer.out_dim == 6
    assert layer.extra_repr() == "8, 6, train"
    # difflogic's inverse index: for each input, the neurons reading it (a neuron reading it twice twice)
    lists = [[] for _ in range(8)]
    for j in range(6):
        lists[int(c[0, j])].append(j)
        lists[int(c[1, j])].append(j)
    assert layer.given_x_indices_of_y_start.tolist() == [0] + torch.tensor([len(v) for v in lists]).cumsum(0).tolist()
    assert sorted(layer.given_x_indices_of_y.tolist()) == sorted(j for v in lists for j in v)
    assert LogicLayer(8, 6, device="cpu", implementation="cuda").implementation == "cuda"
    with pytest.raises(ValueError, match="implementation"):
        LogicLayer(8, 6, device="cpu", implementation="triton")


@pytest.mark.parametrize("connections", ["random", "unique"])
@pytest.mark.parametrize("training", [True, False])
def test_forward_and_gradients_match_difflogic(connections, training):
    torch.manual_seed(0)
    layer = LogicLayer(20, 33, device="cpu", connections=connections).double()
    layer.train(training)
    x = torch.rand(7, 20, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    y_ref = difflogic_forward(x, layer, training)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(y)
    grads = torch.autograd.grad((y * g).sum(), (x, layer.weights), allow_unused=True)
    grads_ref = torch.autograd.grad((y_ref * g).sum(), (x, layer.weights), allow_unused=True)
    for got, want in zip(grads, grads_ref):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@pytest.mark.parametrize("B", [1, 5, 7, 9, 31, 33, 63, 65, 100])
def test_pack_bits_tensor_layout(bits, B):
    x = torch.rand(B, 11) > 0.5
    p = PackBitsTensor(x, bit_count=bits, device="cpu")
    W = -(-B // bits)
    assert (
        p.t.shape == (11, W) and p.t.dtype == {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
    )
    assert p.pad_len == (bits - B % bits) % bits and p.bit_count == bits
    u = p.t.to(torch.int64) & ((1 << bits) - 1)  # the unsigned words
    for s in range(B):
        assert torch.equal((u[:, s // bits] >> (s % bits)) & 1, x[s].long())
    if B % bits:
        assert not (u[:, -1] >> (B % bits)).any()  # padding bits are 0 after packing
    if x[bits - 1 :: bits].any():
        assert (p.t < 0).any()  # words with the top bit set are negative
    assert torch.equal(p.group_sum(1)[:, 0], x.sum(1, dtype=torch.int32))


@pytest.mark.parametrize("bits", [8, 32, 64])
@pytest.mark.parametrize("B", [1, 3, 64, 65, 130])
def test_packed_model_and_compiled_equal_float_eval(bits, B, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        LogicLayer(12, 40, device="cpu"),
        LogicLayer(40, 30, device="cpu"),
        GroupSum(3, tau=2.0, device="cpu"),
    ).eval()
    x = torch.rand(B, 12) > 0.5
    with torch.no_grad():
        expected = (model(x.float()) * 2.0).round().to(torch.int32)
    p = PackBitsTensor(x, bit_count=bits, device="cpu")
    counts = model(p)
    assert counts.dtype == torch.int32 and torch.equal(counts, expected)
    assert p.t.shape[0] == 30  # difflogic updates the PackBitsTensor in place
    compiled = CompiledLogicNet(model, num_bits=bits)
    compiled.compile(save_lib_path=str(tmp_path / "net.so"))
    assert torch.equal(compiled(x), expected) and torch.equal(compiled(x.numpy()), expected)
    loaded = CompiledLogicNet.load(str(tmp_path / "net.so"), 3, bits)
    assert torch.equal(loaded(x), expected)


def test_packed_input_needs_eval_mode():
    layer = LogicLayer(4, 4, device="cpu")
    with pytest.raises(RuntimeError, match="training"):
        layer(PackBitsTensor(torch.ones(3, 4, dtype=torch.bool), device="cpu"))
    with pytest.raises(ValueError, match="bit_count"):
        PackBitsTensor(torch.ones(3, 4, dtype=torch.bool), bit_count=12, device="cpu")


# --- get_connections, the C code helpers, submodules -----------------------------------------------------------


def test_get_connections_draws_like_difflogic():
    layer = LogicLayer(6, 5, device="cpu")
    params = inspect.signature(layer.get_connections).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("connections", inspect.Parameter.empty),
        ("device", "cuda"),
    ]
    torch.manual_seed(11)
    a, b = layer.get_connections("random", device="cpu")
    torch.manual_seed(11)
    c = torch.randperm(10) % 6  # difflogic's draw: a balanced multiset of inputs, randomly relabelled
    c = torch.randperm(6)[c].reshape(2, 5)
    assert torch.equal(a, c[0]) and torch.equal(b, c[1]) and a.dtype == b.dtype == torch.int64
    torch.manual_seed(12)
    a, b = layer.get_connections("unique", device="cpu")
    torch.manual_seed(12)
    perm = torch.randperm(5)  # candidate pairs (0, 1), (2, 3), (4, 5), then (1, 2), (3, 4)
    assert torch.equal(a, torch.tensor([0, 2, 4, 1, 3])[perm]) and torch.equal(b, torch.tensor([1, 3, 5, 2, 4])[perm])
    with pytest.raises(ValueError, match="connections must be one of"):
        layer.get_connections("full", device="cpu")


def test_functional_module():
    from relaxops.compat.difflogic import functional
    from testing import assert_mirrors

    assert_mirrors(functional, ["bin_op", "bin_op_s", "get_unique_connections", "GradFactor", "BITS_TO_NP_DTYPE"])
    a, b = torch.rand(4, 7, dtype=torch.float64), torch.rand(4, 7, dtype=torch.float64)
    torch.testing.assert_close(functional.bin_op(a, b, 6), a + b - 2 * a * b)  # xor
    torch.testing.assert_close(functional.bin_op(a, b, np.int64(11)), 1 - b + a * b)  # b implies a
    p = torch.softmax(torch.randn(7, 16, dtype=torch.float64), -1)
    torch.testing.assert_close(
        functional.bin_op_s(a, b, p), sum(p[:, i] * functional.bin_op(a, b, i) for i in range(16))
    )
    with pytest.raises(ValueError, match="gate id"):
        functional.bin_op(a, b, 16)
    torch.manual_seed(2)
    x, y = functional.get_unique_connections(6, 5, device="cpu")
    torch.manual_seed(2)
    perm = torch.randperm(5)
    assert torch.equal(x, torch.tensor([0, 2, 4, 1, 3])[perm]) and torch.equal(y, torch.tensor([1, 3, 5, 2, 4])[perm])
    v = torch.ones(3, requires_grad=True)
    (g,) = torch.autograd.grad(functional.GradFactor.apply(v, 2.5).sum(), v)
    assert torch.equal(g, torch.full((3,), 2.5))
    assert functional.BITS_TO_NP_DTYPE[16] is np.int16


@pytest.mark.parametrize(
    "name, names",
    [
        ("difflogic", ["LogicLayer", "GroupSum", "LogicLayerCudaFunction"]),
        ("packbitstensor", ["PackBitsTensor"]),
        (
            "compiled_model",
            [
                "CompiledLogicNet",
                "ALL_OPERATIONS",
                "BITS_TO_DTYPE",
                "BITS_TO_ZERO_LITERAL",
                "BITS_TO_ONE_LITERAL",
                "BITS_TO_C_DTYPE",
                "BITS_TO_NP_DTYPE",
            ],
        ),
    ],
)
def test_submodules(name, names):
    """``from relaxops.compat.difflogic.<module> import ...`` with difflogic 0.1.0's module names."""
    from relaxops.compat import difflogic
    from testing import assert_mirrors

    module = importlib.import_module(f"relaxops.compat.difflogic.{name}")
    assert_mirrors(module, names)
    for attr in module.__all__:
        if hasattr(difflogic, attr):
            assert getattr(module, attr) is getattr(difflogic, attr)


@pytest.mark.parametrize("bits", [8, 64])
def test_gate_and_layer_code_compute_the_gates(bits, tmp_path):
    """get_layer_code / get_gate_code (difflogic's statement layout) compiled with the system C compiler compute
    the network's gates on words; every gate op appears."""
    from relaxops.compat.difflogic.compiled_model import ALL_OPERATIONS, BITS_TO_DTYPE
    from relaxops.logic.gates import TRUTH

    assert ALL_OPERATIONS[6] == "xor" and len(ALL_OPERATIONS) == 16
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        LogicLayer(9, 16, device="cpu"),
        LogicLayer(16, 12, device="cpu"),
        LogicLayer(12, 6, device="cpu"),
        GroupSum(2, device="cpu"),
    ).eval()
    with torch.no_grad():
        model[0].weights.copy_(torch.nn.functional.one_hot(torch.arange(16), 16) * 5.0)  # all 16 gates
    net = CompiledLogicNet(model, num_bits=bits)
    layers = [(layer.indices[0], layer.indices[1], layer.weights.argmax(1)) for layer in model[:3]]
    prefix_sums = [0, 16, 28]
    word = BITS_TO_DTYPE[bits]
    code = [f"void net(const {word} *inp, {word} *out) {{"]
    for i, (a, b, op) in enumerate(layers):
        code += net.get_layer_code(a, b, op, i, prefix_sums)
    code.append("}")
    src, lib = tmp_path / "net.c", tmp_path / "net.so"
    src.write_text("\n".join(code) + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True, capture_output=True)
    np_word = {8: np.uint8, 64: np.uint64}[bits]
    fn = ctypes.CDLL(str(lib)).net
    fn.argtypes = [np.ctypeslib.ndpointer(np_word, flags="C_CONTIGUOUS")] * 2
    rng = np.random.default_rng(0)
    inp = rng.integers(0, 2**bits, size=9, dtype=np_word)
    out = np.zeros(6, dtype=np_word)
    fn(inp, out)
    ones = np_word(~np_word(0))
    v = inp
    for a, b, op in layers:  # expected: each gate's truth table applied bitwise
        va, vb = v[a.numpy()], v[b.numpy()]
        t = np.array(TRUTH, dtype=np_word)[op.numpy()] * ones  # [gates, 4] masks of T(0,0), T(0,1), T(1,0), T(1,1)
        v = (t[:, 0] & ~va & ~vb) | (t[:, 1] & ~va & vb) | (t[:, 2] & va & ~vb) | (t[:, 3] & va & vb)
    assert np.array_equal(out, v)
    assert net.get_gate_code("x", "y", 0) == f"({word}) (0)"
    with pytest.raises(ValueError, match="gate_op must be a gate id"):
        net.get_gate_code("x", "y", 16)
