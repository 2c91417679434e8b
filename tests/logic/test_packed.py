"""Bit-packed inference: packing, packed layers and group counts on every backend against the reference, and
the bit-for-bit contract with the float eval-mode forward (docs/math/logic.md §6, properties 14-17)."""

import pytest
import torch
from relaxops import _backend, _ext
from relaxops.logic import (
    GroupSum,
    LogicLayer,
    PackedBits,
    PackedLogicNet,
    functional,
    pack_bits,
    packed,
    reference,
    unpack_bits,
)

BATCHES = (1, 2, 7, 63, 64, 65, 100, 127, 128, 1000)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
BACKEND_DEVICE = [
    pytest.param(b, d, id=f"{b}-{d}", marks=[pytest.mark.gpu] if d == "cuda" else [])
    for d in DEVICES
    for b in ("reference", "cpu", "cuda")
    if _backend.unavailable_reason(b, torch.device(d)) is None
]
SIMD_LEVELS = list(range(_ext._C.logic_simd_best() + 1)) if _ext.has_cpu() else []


def random_model(widths, k, tau=1.0, seed=0, all_gates=True):
    """A Flatten + LogicLayers + GroupSum model whose gates include every id (not/nor/nand/one set padding)."""
    torch.manual_seed(seed)
    layers = [torch.nn.Flatten()]
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        layer = LogicLayer(n_in, n_out)
        if all_gates:
            with torch.no_grad():
                ids = torch.arange(n_out) % 16
                layer.weights.copy_(torch.nn.functional.one_hot(ids[torch.randperm(n_out)], 16) * 5.0)
        layers.append(layer)
    layers.append(GroupSum(k, tau))
    return torch.nn.Sequential(*layers).eval()


def float_counts(model, x_bool):
    """round(float eval-mode output * tau), computed with the reference."""
    h = x_bool.double()
    for layer in model[1:-1]:
        coef = functional.gate_coefficients(layer.weights.detach().cpu(), False, torch.float64)
        h = reference.logic_layer(h, layer.idx_a.cpu(), layer.idx_b.cpu(), coef)
    return (reference.group_sum(h, model[-1].k, model[-1].tau) * model[-1].tau).round().to(torch.int32)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("D", [13, 64, 130])
def test_pack_round_trip(backend, device, B, D):
    x = torch.rand(B, D) > 0.5
    p = pack_bits(x.to(device), backend=backend)
    assert p.words.shape == (D, -(-B // 64)) and p.words.dtype == torch.int64
    expected = reference.pack(x)
    assert torch.equal(p.words.cpu(), expected)
    # bit s % 64 of word s // 64 is sample s; padding bits are 0
    for s in (0, B // 2, B - 1):
        assert torch.equal((expected[:, s // 64] >> (s % 64)) & 1, x[s].to(torch.int64))
    if B % 64:
        assert int((expected[:, -1] >> (B % 64)).abs().sum()) == 0
    assert torch.equal(unpack_bits(p, backend=backend).cpu(), x)


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_every_gate_on_words(backend, device):
    """Each gate's packed form equals its truth table on the four input combinations, 64 samples a word."""
    x = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]] * 20, dtype=torch.bool)  # 80 samples: two words
    p = pack_bits(x.to(device), backend=backend)
    a, b, op = torch.zeros(16, dtype=torch.int64), torch.ones(16, dtype=torch.int64), torch.arange(16)
    out = packed.packed_layer(p, a.to(device), b.to(device), op.to(device), backend=backend)
    bits = out.unpack(backend=backend).cpu()  # [80, 16]
    for i in range(16):
        truth = torch.tensor([(i >> (3 - (2 * u + v))) & 1 for u, v in x[:4].long().tolist()], dtype=torch.bool)
        assert torch.equal(bits[:, i], truth.repeat(20)), f"gate {i}"


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("B", BATCHES)
def test_model_counts_equal_float_eval(backend, device, B):
    model = random_model([23, 40, 33, 30], k=3, tau=1.7)
    x = torch.rand(B, 23) > 0.5
    expected = float_counts(model, x)
    net = PackedLogicNet(model, device=device, backend=backend)
    assert torch.equal(net(x.to(device)).cpu(), expected)
    assert torch.equal(net(pack_bits(x.to(device), backend=backend)).cpu(), expected)
    # the module path: model(PackedBits) runs the layers bitwise and GroupSum counts
    model_dev = model.to(device)
    if backend != "reference" or device == "cpu":
        assert torch.equal(model_dev(pack_bits(x.to(device), backend=backend)).cpu(), expected)
    model.cpu()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_intermediate_layers_equal_float_eval(backend, device):
    model = random_model([17, 50, 27], k=3)
    x = torch.rand(77, 17) > 0.5
    h_float = x.double()
    p = pack_bits(x.to(device), backend=backend)
    for layer in model[1:-1]:
        coef = functional.gate_coefficients(layer.weights.detach(), False, torch.float64)
        h_float = reference.logic_layer(h_float, layer.idx_a, layer.idx_b, coef)
        layer.to(device)
        p = packed.packed_layer(p, layer.idx_a, layer.idx_b, layer.gate_ids(), backend=backend)
        layer.cpu()
        assert torch.equal(p.unpack(backend=backend).cpu(), h_float.bool())


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
@pytest.mark.parametrize("simd", SIMD_LEVELS)
@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("B", [1, 65, 1000, 5000])
@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "every-gate"])
def test_cpu_simd_levels_and_threads(simd, num_threads, B, simplify):
    model = random_model([140, 300, 257, 260], k=10, tau=3.0, seed=2)
    x = torch.rand(B, 140) > 0.5
    expected = float_counts(model, x)
    net = PackedLogicNet(model, backend="cpu", num_threads=num_threads, simd=simd, simplify=simplify)
    assert torch.equal(net(x), expected)
    assert torch.equal(net(pack_bits(x, backend="cpu")), expected)
    last = net.layers_forward(pack_bits(x, backend="cpu"))
    assert torch.equal(packed.group_count(last, 10, backend="cpu", simd=simd, num_threads=num_threads), expected)


def test_single_layer_and_one_class():
    model = random_model([9, 16], k=1)
    x = torch.rand(70, 9) > 0.5
    assert torch.equal(PackedLogicNet(model)(x), float_counts(model, x))


def test_constant_network_and_empty_batch():
    """Every gate folds to a constant (no gate is left to run) and a batch of 0 samples."""
    model = random_model([5, 6, 4], k=2, all_gates=False)
    with torch.no_grad():
        model[1].weights.copy_(torch.nn.functional.one_hot(torch.full((6,), 15), 16) * 5.0)  # one
        model[2].weights.copy_(torch.nn.functional.one_hot(torch.tensor([1, 6, 1, 14]), 16) * 5.0)  # and/xor/nand
    x = torch.rand(70, 5) > 0.5
    net = PackedLogicNet(model)
    assert net.num_gates == 0
    assert torch.equal(net(x), float_counts(model, x))
    assert net(torch.zeros(0, 5, dtype=torch.bool)).shape == (0, 2)


def test_errors():
    with pytest.raises(TypeError, match="x must be a torch.bool"):
        pack_bits(torch.rand(3, 4))
    with pytest.raises(ValueError, match=r"\[B, D\]"):
        pack_bits(torch.ones(3, dtype=torch.bool))
    p = pack_bits(torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="k must be an integer >= 1 dividing"):
        packed.group_count(p, 4)
    model = random_model([6, 8], k=2)
    net = PackedLogicNet(model)
    with pytest.raises(ValueError, match=r"x must have shape \[B, 6\]"):
        net(torch.ones(3, 7, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        net(torch.ones(3, 6))
    with pytest.raises(ValueError, match="simd"):
        PackedLogicNet(model, simd=5)
    model.train()
    with pytest.raises(RuntimeError, match="eval mode"):
        model(p)
    with pytest.raises(ValueError, match="words"):
        PackedBits(torch.zeros(3, 2, dtype=torch.int64), 5)
    with pytest.raises(ValueError, match="GroupSum"):
        PackedLogicNet(torch.nn.Sequential(LogicLayer(4, 4)))
