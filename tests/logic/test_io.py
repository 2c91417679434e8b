"""Saving and loading trained logic networks: state_dict round trip and the compact gate-id format."""

import io

import pytest
import torch
from relaxops.logic import GroupSum, LogicLayer, PackedLogicNet
from relaxops.logic.io import load_gates, save_gates


def model(widths=(300, 301, 160), k=4, tau=2.5):
    torch.manual_seed(0)
    layers = [LogicLayer(i, o) for i, o in zip(widths[:-1], widths[1:])]
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(k, tau)).eval()


def test_state_dict_round_trip():
    m = model()
    other = model()
    torch.manual_seed(1)
    fresh = torch.nn.Sequential(torch.nn.Flatten(), LogicLayer(300, 301), LogicLayer(301, 160), GroupSum(4, 2.5))
    fresh.load_state_dict(m.state_dict())
    fresh.eval()
    x = torch.rand(9, 300)
    assert torch.equal(fresh(x), other(x))


@pytest.mark.parametrize("widths", [(5, 3), (300, 301, 160), (70000, 40000, 20000)], ids=str)
def test_gate_format_round_trip(widths):
    m = model(widths, k=1 if widths[-1] == 3 else 4)
    buf = io.BytesIO()
    save_gates(m, buf)
    n_gates = sum(widths[1:])
    index_bytes = sum(2 * o * (1 if i <= 256 else 2 if i <= 65536 else 4) for i, o in zip(widths[:-1], widths[1:]))
    assert len(buf.getvalue()) <= 40 + 5 * len(widths) + index_bytes + (n_gates + len(widths)) // 2
    buf.seek(0)
    state = torch.random.get_rng_state()
    loaded = load_gates(buf)
    assert torch.equal(state, torch.random.get_rng_state())  # loading draws no random numbers
    assert loaded[-1].k == m[-1].k and loaded[-1].tau == m[-1].tau and not loaded.training
    for a, b in zip(m[1:-1], loaded[1:-1]):
        assert torch.equal(a.idx_a, b.idx_a) and torch.equal(a.idx_b, b.idx_b)
        assert torch.equal(a.gate_ids(), b.gate_ids())
    if widths[0] < 1000:
        x = torch.rand(100, widths[0]) > 0.5
        assert torch.equal(PackedLogicNet(loaded)(x), PackedLogicNet(m)(x))


def test_file_path(tmp_path):
    m = model()
    save_gates(m, tmp_path / "net.rlx")
    loaded = load_gates(tmp_path / "net.rlx")
    x = torch.rand(5, 300).round()
    with torch.no_grad():
        assert torch.equal(loaded(x), m(x))


def test_bad_file():
    with pytest.raises(ValueError, match="magic"):
        load_gates(io.BytesIO(b"not a network"))
