"""relaxops.compat.difflogic against difflogic 0.1.0's documented behaviour (signatures, attributes, random calls,
the 16-gate formulation of its Python path, PackBitsTensor's bit layout) and the packed / compiled contract."""

import inspect

import pytest
import torch
from relaxops.compat.difflogic import CompiledLogicNet, GroupSum, LogicLayer, PackBitsTensor
from relaxops.logic import reference

# difflogic 0.1.0's signatures, parameter by parameter (name, default).
SIGNATURES = {
    LogicLayer.__init__: [("in_dim", None), ("out_dim", None), ("device", "cuda"), ("grad_factor", 1.0),
                          ("implementation", None), ("connections", "random")],
    GroupSum.__init__: [("k", None), ("tau", 1.0), ("device", "cuda")],
    PackBitsTensor.__init__: [("t", None), ("bit_count", 32), ("device", "cuda")],
    CompiledLogicNet.__init__: [("model", None), ("device", "cpu"), ("num_bits", 64), ("cpu_compiler", "gcc"),
                                ("verbose", False)],
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
    assert p.t.shape == (11, W) and p.t.dtype == {8: torch.int8, 16: torch.int16, 32: torch.int32,
                                                   64: torch.int64}[bits]
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
    model = torch.nn.Sequential(torch.nn.Flatten(), LogicLayer(12, 40, device="cpu"),
                                LogicLayer(40, 30, device="cpu"), GroupSum(3, tau=2.0, device="cpu")).eval()
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
