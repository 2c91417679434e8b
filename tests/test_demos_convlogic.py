"""The convlogic demo: a short run (packed == eval mode is asserted inside and printed), the torchlogix twin of its
network, and the comparison's skip message when torchlogix is missing."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from relaxops.demos import convlogic, logic


@pytest.fixture
def quick_timing(monkeypatch):
    """Throughput rows on small batches with short runs: the demo's printing is tested, not its figures."""
    monkeypatch.setattr(convlogic, "THROUGHPUT_BATCH", 256)
    monkeypatch.setattr(convlogic, "FLOAT_BATCH", 64)
    monkeypatch.setattr(logic, "RUNS", 2)
    monkeypatch.setattr(logic, "RUN_S", 0.001)


def test_short_run_packed_equals_eval(capsys, quick_timing):
    convlogic.main(steps=5)
    out = capsys.readouterr().out
    assert "packed inference accuracy" in out and "class counts identical to eval mode" in out
    gates = convlogic.num_model_gates()
    assert f"gates: {gates} before simplification, " in out
    for row in ("packed, 1 thread", "float eval mode", "baseline, dense logic network of the same gate budget"):
        assert row in out
    assert "torchlogix" not in out


def test_packed_mismatch_raises(monkeypatch, quick_timing):
    """The demo's check can fail: a packed network that drops a class count is caught."""
    real = convlogic.relaxops.PackedLogicNet

    class Off(real):
        def __call__(self, x):
            counts = super().__call__(x)
            counts[0, 0] += 1
            return counts

    monkeypatch.setattr(convlogic.relaxops, "PackedLogicNet", Off)
    with pytest.raises(RuntimeError, match="packed inference differs from the eval-mode forward"):
        convlogic.main(steps=1)


def test_model_gate_count_and_shapes():
    model = convlogic.make_model(0)
    net = convlogic.relaxops.PackedLogicNet(model.eval(), input_shape=convlogic.INPUT_SHAPE, simplify=False)
    assert net.graph.num_model_gates == convlogic.num_model_gates()
    dense = convlogic.make_dense_model(0, convlogic.num_model_gates())
    assert abs(sum(m.out_dim for m in dense[1:-1]) - convlogic.num_model_gates()) < 40


@pytest.mark.skipif(importlib.util.find_spec("torchlogix") is None, reason="torchlogix is not installed")
def test_torchlogix_twin_has_our_shapes():
    x = torch.rand(3, *convlogic.INPUT_SHAPE).round()
    ours, theirs = convlogic.make_model(0), convlogic.make_torchlogix_model(0)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        x, y = a(x), b(x)
        assert y.shape == x.shape, (a, b)
    params = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert params(ours) == params(theirs)  # the same gates: 16 logits each


def test_compare_skips_without_torchlogix(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchlogix", None)  # find_spec -> None: not installed
    convlogic.compare_torchlogix(0, 1, None, None, 0.5, 1.0)
    out = capsys.readouterr().out
    assert out.startswith(
        "--compare torchlogix: skipped, torchlogix is not installed: pip install --no-deps torchlogix==0.2.2"
    )


def test_unknown_compare_raises():
    with pytest.raises(ValueError, match="compare must be one of"):
        convlogic.main(steps=1, compare="difflogic")
