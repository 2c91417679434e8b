"""Export of trained networks: the C library equals the packed kernel and the float eval mode, for every word
size and batch size (difflogic's small-batch and one-layer failures included); the Verilog netlist equals them
too (simulated with Icarus Verilog, and evaluated statement by statement)."""

import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from relaxops.logic import GroupSum, LogicLayer, PackedLogicNet, reference
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source


def make_model(widths, k, seed=0):
    """Flatten + LogicLayers + GroupSum whose gates cover all 16 ids (not/nor/nand/one set padding bits)."""
    torch.manual_seed(seed)
    layers = []
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        layer = LogicLayer(n_in, n_out)
        with torch.no_grad():
            layer.weights.copy_(torch.nn.functional.one_hot(torch.randperm(n_out) % 16, 16) * 3.0)
        layers.append(layer)
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(k, tau=1.5)).eval()


def reference_outputs(model, x):
    """The last layer's bits [B, n_last] and the class counts [B, k] of the reference packed evaluation."""
    words = reference.pack(x)
    for layer in model[1:-1]:
        words = reference.packed_layer(words, layer.idx_a, layer.idx_b, layer.gate_ids())
    return reference.unpack(words, x.shape[0]), reference.group_count(words, x.shape[0], model[-1].k)


def expected_counts(model, x):
    return reference_outputs(model, x)[1]


@pytest.mark.parametrize("widths,k", [((11, 16), 4), ((13, 20, 12), 3), ((30, 45, 33, 21), 7)], ids=str)
@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "every-gate"])
def test_c_library_equals_packed(widths, k, bits, simplify, tmp_path):
    model = make_model(widths, k)
    compiled = CompiledLogicNet(model, num_bits=bits)
    compiled.simplify = simplify
    compiled.compile(opt_level=0, save_lib_path=str(tmp_path / "net.so"))
    net = PackedLogicNet(model)
    for B in (1, 5, bits - 1, bits, bits + 1, 200):
        x = torch.rand(B, widths[0]) > 0.5
        out = compiled(x)
        assert out.dtype == torch.int32 and out.shape == (B, k)
        expected = expected_counts(model, x)
        assert torch.equal(out, expected), f"B={B}"
        assert torch.equal(net(x), expected)
        assert int(out.max()) <= widths[-1] // k
    loaded = CompiledLogicNet.load(str(tmp_path / "net.so"), k, bits)
    x = torch.rand(77, widths[0]) > 0.5
    assert torch.equal(loaded(x.numpy()), expected_counts(model, x))


def test_c_source_compiles_cleanly(tmp_path):
    for bits in (8, 64):
        path = tmp_path / f"net{bits}.c"
        path.write_text(c_source(make_model((13, 20, 12), 3), bits))
        for cc in ("gcc", "clang"):
            if shutil.which(cc) is None:
                continue
            done = subprocess.run(
                [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", str(path), "-o", str(tmp_path / "net.o")],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr


def test_errors(tmp_path):
    model = make_model((11, 16), 4)
    with pytest.raises(ValueError, match="num_bits"):
        CompiledLogicNet(model, num_bits=12)
    with pytest.raises(ValueError, match="cpu_compiler"):
        CompiledLogicNet(model, cpu_compiler="icc")
    with pytest.raises(ValueError, match="device"):
        CompiledLogicNet(model, device="cuda")
    with pytest.raises(ValueError, match="num_classes=3 must divide"):
        c_source((11, [(np.arange(16) % 11, np.arange(16) % 11, np.arange(16) % 16)], 3))
    compiled = CompiledLogicNet(model)
    with pytest.raises(RuntimeError, match="compile"):
        compiled(torch.ones(2, 11, dtype=torch.bool))
    compiled.compile(opt_level=0)
    with pytest.raises(TypeError, match="bool"):
        compiled(torch.ones(2, 11))
    with pytest.raises(ValueError, match="shape"):
        compiled(torch.ones(2, 12, dtype=torch.bool))


# --- Verilog --------------------------------------------------------------------------------------------


def eval_verilog(source, x_bits):
    """Evaluates the emitted netlist statement by statement on one sample (Python ints as wires)."""
    wires = {"x": {i: int(v) for i, v in enumerate(x_bits)}}
    counts = {}
    for line in source.splitlines():
        m = re.fullmatch(r"\s*assign (\w+)\[(\d+)\] = (.*);", line)
        if m:
            name, j, expr = m.group(1), int(m.group(2)), m.group(3)
            expr = expr.replace("1'b0", "0").replace("1'b1", "1")
            expr = re.sub(r"(\w+)\[(\d+)\]", lambda t: str(wires[t.group(1)][int(t.group(2))]), expr)
            wires.setdefault(name, {})[j] = eval(expr) & 1  # two's complement ints: bit 0 is the one-bit result
            continue
        m = re.fullmatch(r"\s*assign counts\[(\d+) \+: (\d+)\] = (.*);", line)
        if m:
            bits = [int(t) for t in re.findall(r"y\[(\d+)\]", m.group(3))]
            counts[int(m.group(1)) // int(m.group(2))] = bits
        m = re.fullmatch(r"\s*assign y = (\w+);", line)
        if m:
            wires["y"] = wires[m.group(1)]
    y = wires["y"]
    return [y[j] for j in range(len(y))], [sum(y[i] for i in counts[c]) for c in range(len(counts))]


def test_verilog_netlist_equals_reference():
    model = make_model((9, 16, 12), 3)
    source = verilog_source(model)
    x = torch.rand(40, 9) > 0.5
    last, expected = reference_outputs(model, x)
    for s in range(40):
        y, counts = eval_verilog(source, x[s].tolist())
        assert y == last[s].int().tolist() and counts == expected[s].tolist()


def simulate_verilog(tmp_path, source: str, x: torch.Tensor, n: int, k: int) -> list:
    """Runs the emitted module ``logic_net`` under Icarus Verilog on the rows of ``x`` (Boolean ``[B, D]``):
    per row, the ``n`` bits of ``y`` and the ``k`` class counts."""
    B, D = x.shape
    lb = int(np.ceil(np.log2(n // k + 1)))  # the width of a count
    (tmp_path / "net.v").write_text(source)
    lines = [
        "module tb;",
        f"  reg [{D - 1}:0] x; wire [{n - 1}:0] y; wire [{k * lb - 1}:0] counts;",
        "  logic_net dut(.x(x), .y(y), .counts(counts));",
        "  initial begin",
    ]
    shows = " ".join(["%0d"] * k)
    args = ", ".join(f"counts[{c * lb + lb - 1}:{c * lb}]" for c in range(k))
    for s in range(B):
        value = "".join("1" if v else "0" for v in reversed(x[s].tolist()))
        lines.append(f'    x = {D}\'b{value}; #1 $display("%b {shows}", y, {args});')
    lines += ["  end", "endmodule"]
    (tmp_path / "tb.v").write_text("\n".join(lines) + "\n")
    subprocess.run(
        ["iverilog", "-o", str(tmp_path / "sim"), str(tmp_path / "net.v"), str(tmp_path / "tb.v")], check=True
    )
    out = subprocess.run(["vvp", str(tmp_path / "sim")], capture_output=True, text=True, check=True).stdout.split("\n")
    rows = []
    for s in range(B):
        y_bits, *counts = out[s].split()
        rows.append(([int(c) for c in reversed(y_bits)], [int(c) for c in counts]))
    return rows


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed (CI installs it)")
def test_verilog_simulation(tmp_path):
    model = make_model((9, 16, 12), 3)
    x = torch.rand(40, 9) > 0.5
    rows = simulate_verilog(tmp_path, verilog_source(model), x, 12, 3)
    last, expected = reference_outputs(model, x)
    for s, (y, counts) in enumerate(rows):
        assert y == last[s].int().tolist()
        assert counts == expected[s].tolist()
