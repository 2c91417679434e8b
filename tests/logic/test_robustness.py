"""Robustness of the logic family: one test per defect (each failed before the fix). Cases that used to crash the
process run in a subprocess (``run_isolated``), so a regression fails the test instead of killing the suite."""

import io
import math
import struct

import numpy as np
import pytest
import torch
from relaxops import _ext
from relaxops.compat import difflogic
from relaxops.logic import GroupSum, LogicLayer, PackedLogicNet, connections, functional, ops, packed
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source
from relaxops.logic.io import load_gates, save_gates
from testing import BACKEND_DEVICE, assert_close, assert_raises_isolated, run_isolated

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
CPU_BACKENDS = [p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"]  # reference, cpu, triton
KERNELS = [b for b in CPU_BACKENDS if b != "reference"]


def grads(layer, x, backend=None):
    """Output and input / weight gradients of a random functional of ``layer(x)`` (optionally another backend)."""
    if backend is not None:
        layer.backend = backend
    x = x.detach().requires_grad_(True)
    y = layer(x)
    G = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    gx, gw = torch.autograd.grad((y * G).sum(), (x, layer.weights))
    return y.detach(), gx, gw


def small_model(widths=(16, 24, 12), k=3, seed=0):
    torch.manual_seed(seed)
    layers = [LogicLayer(i, o) for i, o in zip(widths[:-1], widths[1:])]
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, GroupSum(k, tau=2.0)).eval()


# --- 1. segfaults: every registered op and the C++ kernels check what they index with ----------------------


def test_edited_connection_out_of_range_raises_not_crashes():
    assert_raises_isolated(
        """
        import torch, relaxops
        layer = relaxops.LogicLayer(8, 8)
        with torch.no_grad():
            layer.idx_a[2] = 10**7
        layer(torch.rand(4, 8))
    """,
        "ValueError",
        "idx_a",
    )


# Each case runs in one fresh interpreter (the cases are independent; a crash in any fails the test). ``fwd``
# and ``bwd`` call the registered ops with the corrupted arguments.
_CRASH_SETUP = """
import torch, relaxops
from relaxops import _ext
from relaxops.logic import netlist
from relaxops.logic.connections import inverse_index

def fwd_bwd(backend, a, b, start, entry):
    xt, w = torch.rand(4, 5), torch.randn(4, 16)
    yt, coef = torch.ops.relaxops.logic_fwd(xt, a, b, w, start, entry, True, backend)
    torch.ops.relaxops.logic_bwd(torch.rand(4, 5), xt, a, b, w, coef, start, entry, True, True, backend)

def csr_case(backend, corrupt):
    a, b = torch.tensor([0, 1, 3, 3]), torch.tensor([1, 2, 0, 3])
    start, entry = inverse_index(a, b, 4)
    if corrupt == "entry_range": entry[3] = 10**9
    if corrupt == "start_decreasing": start[2] = 0
    if corrupt == "start_end": start[-1] = 10**9
    if corrupt == "stale": a = torch.tensor([0, 1, 2, 3])  # valid, but the index was built for the old a
    fwd_bwd(backend, a, b, start, entry)

def fwd_range(backend):
    a, b = torch.tensor([0, 1, 10**7, 2]), torch.tensor([1, 2, 0, 3])
    start, entry = inverse_index(torch.tensor([0, 1, 2, 2]), b, 4)
    fwd_bwd(backend, a, b, start, entry)

def cpp_forward():  # raw pointers: the C++ kernels check on their own
    xt, coef, yt = torch.rand(4, 5), torch.rand(3, 4), torch.empty(3, 5)
    a, b = torch.tensor([0, 1, -5]), torch.tensor([1, 2, 0])
    _ext._C.logic_forward(0, 5, 4, 3, xt.data_ptr(), a.data_ptr(), b.data_ptr(), coef.data_ptr(), yt.data_ptr())

def cpp_backward():
    a, b = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    start, entry = inverse_index(a, b, 4)
    entry[0] = 10**9
    xt, coef, g, gx, gc = torch.rand(4, 5), torch.rand(3, 4), torch.rand(3, 5), torch.empty(4, 5), torch.empty(3, 4)
    _ext._C.logic_backward(0, 5, 4, 3, xt.data_ptr(), a.data_ptr(), b.data_ptr(), coef.data_ptr(), g.data_ptr(),
                           start.data_ptr(), entry.data_ptr(), gx.data_ptr(), gc.data_ptr())

def cpp_packed():
    layer = (torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([1, 6]))
    prog = netlist.allocate(netlist.build(4, [layer], False))
    prog.src_a[0] = 10**6
    words, out = torch.zeros(4, 1, dtype=torch.int64), torch.empty(2, 1, dtype=torch.int64)
    _ext._C.logic_packed_layers(*prog.args(), 5, words.data_ptr(), out.data_ptr(), -1, 0)

def report(name, fn, *args):
    try:
        fn(*args)
        print(name, "| returned")
    except Exception as e:
        print(name, "|", type(e).__name__, "|", str(e).splitlines()[0])
"""


def test_corrupt_arguments_raise_not_crash():
    cases = {
        "cpp_forward": ("ValueError", "a and b must hold indices"),
        "cpp_backward": ("ValueError", "not the inverse index"),
        "cpp_packed": ("ValueError", "src_a"),
    }
    for backend in KERNELS:
        cases[f"fwd_range {backend!r}"] = ("IndexError", "relaxops::logic_fwd: a must hold indices")
        for corrupt in ("entry_range", "start_decreasing", "start_end", "stale"):
            cases[f"csr_case {backend!r} {corrupt!r}"] = ("ValueError", "csr_")
    calls = "\n".join(f"report({k!r}, {k.split()[0]}, {', '.join(k.split()[1:])})" for k in cases)
    out = run_isolated(_CRASH_SETUP + calls).stdout.strip().splitlines()
    assert len(out) == len(cases), out
    for line, (name, (exc, match)) in zip(out, cases.items()):
        got = line.split(" | ")
        assert got[0] == name and got[1] == exc and match in got[2], line


@pytest.mark.parametrize("backend", KERNELS)
def test_registered_ops_check_arguments(backend):
    a, b = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    start, entry = connections.inverse_index(a, b, 4)
    xt, w = torch.rand(4, 5), torch.randn(3, 16)
    fwd = torch.ops.relaxops.logic_fwd
    with pytest.raises(ValueError, match="logic_fwd: xt must be contiguous"):
        fwd(torch.rand(5, 4).t(), a, b, w, start, entry, True, backend)
    with pytest.raises(TypeError, match="logic_fwd: a must have dtype"):
        fwd(xt, a.int(), b, w, start, entry, True, backend)
    with pytest.raises(ValueError, match=r"logic_fwd: b must have shape \[3\]"):
        fwd(xt, a, b[:2], w, start, entry, True, backend)
    with pytest.raises(ValueError, match=r"logic_fwd: w must have shape \[3, 16\]"):
        fwd(xt, a, b, w[:, :8], start, entry, True, backend)
    with pytest.raises(TypeError, match="logic_fwd: w must have dtype"):
        fwd(xt, a, b, w.double(), start, entry, True, backend)
    with pytest.raises(ValueError, match=r"logic_fwd: csr_start must have shape \[5\]"):
        fwd(xt, a, b, w, start[:-1], entry, True, backend)
    with pytest.raises(ValueError, match="logic_fwd: backend"):
        fwd(xt, a, b, w, start, entry, True, "reference")
    if backend == "cpu":
        with pytest.raises(TypeError, match="logic_fwd: xt must have dtype"):
            fwd(xt.half(), a, b, w, start, entry, True, backend)
    yt, coef = fwd(xt, a, b, w, start, entry, True, backend)
    with pytest.raises(ValueError, match=r"logic_bwd: grad_yt must have shape \[3, 5\]"):
        torch.ops.relaxops.logic_bwd(torch.rand(3, 4), xt, a, b, w, coef, start, entry, True, True, backend)
    with pytest.raises(ValueError, match=r"logic_bwd: coef must have shape \[3, 4\]"):
        torch.ops.relaxops.logic_bwd(torch.rand(3, 5), xt, a, b, w, coef[:1], start, entry, True, True, backend)
    with pytest.raises(ValueError, match=r"logic_transpose: x must have shape"):
        torch.ops.relaxops.logic_transpose(torch.rand(3))


def test_packed_functions_check_arguments():
    p = packed.pack_bits(torch.rand(70, 5) > 0.5)
    for backend in ("reference", "cpu"):
        with pytest.raises(ValueError, match=r"a must hold values in \[0, 5\)"):
            packed.packed_layer(p, torch.tensor([0, 5]), torch.tensor([1, 2]), torch.tensor([1, 6]), backend)
        with pytest.raises(ValueError, match=r"op must hold values in \[0, 16\)"):
            packed.packed_layer(p, torch.tensor([0, 4]), torch.tensor([1, 2]), torch.tensor([1, 16]), backend)
        with pytest.raises(ValueError, match="one length"):
            packed.packed_layer(p, torch.tensor([0, 4]), torch.tensor([1]), torch.tensor([1, 6]), backend)
    with pytest.raises(ValueError, match="batch_size"):
        packed.PackedBits(torch.zeros(3, 0, dtype=torch.int64), -1)


# --- 2. stale state: connections assignable, in-place edits rebuild the inverse index ------------------------


@pytest.mark.parametrize("backend", KERNELS)
def test_in_place_edit_of_connections_rebuilds_inverse_index(backend):
    torch.manual_seed(0)
    layer = LogicLayer(8, 8).double()
    x = torch.rand(4, 8, dtype=torch.float64)
    grads(layer, x, backend)  # builds and uses the index
    with torch.no_grad():
        layer.idx_a[2] = (layer.idx_a[2] + 3) % 8
        layer.idx_b[5] = (layer.idx_b[5] + 1) % 8
    got = grads(layer, x, backend)
    want = grads(layer, x, "reference")
    for u, v in zip(got, want):
        assert_close(u, v, torch.float64)


def test_indices_assignable_and_validated():
    torch.manual_seed(0)
    layer = difflogic.LogicLayer(6, 7, device="cpu")
    a, b = torch.randint(0, 6, (7,)), torch.randint(0, 6, (7,))
    layer.indices = (a, b)
    assert torch.equal(layer.idx_a, a) and torch.equal(layer.indices[1], b)
    start, entry = connections.inverse_index(a, b, 6)
    assert torch.equal(layer.given_x_indices_of_y_start, start) and torch.equal(layer.given_x_indices_of_y, entry // 2)
    x = torch.rand(3, 6, dtype=torch.float32)
    for u, v in zip(grads(layer, x, "cpu"), grads(layer, x, "reference")):
        assert_close(u, v, torch.float32)
    with pytest.raises(ValueError, match="idx_a"):
        layer.indices = (torch.full((7,), 6), b)
    with pytest.raises(ValueError, match="idx_b"):
        layer.indices = (a, b[:3])
    with pytest.raises(ValueError, match="pair"):
        layer.indices = a


def test_edit_bypassing_the_version_counter_is_not_silent():
    """``.data`` hides an edit from the version counter: the backward's own check of the index catches it."""
    torch.manual_seed(0)
    layer = LogicLayer(8, 8)
    x = torch.rand(4, 8, requires_grad=True)
    layer(x)
    layer.idx_a.data[2] = (layer.idx_a[2] + 3) % 8
    with pytest.raises(ValueError, match="inverse index"):
        layer(x).sum().backward()


@pytest.mark.parametrize("name", ["idx_a", "idx_b"])
def test_load_state_dict_out_of_range_index(name):
    layer = LogicLayer(8, 8)
    state = layer.state_dict()
    state[name] = state[name].clone()
    state[name][3] = 300_000_000  # used to size the inverse index (GBs) before any error
    with pytest.raises(ValueError, match=f"{name} must hold input indices in \\[0, in_dim=8\\)"):
        layer.load_state_dict(state)
    state[name][3] = -1
    with pytest.raises(ValueError, match=name):
        layer.load_state_dict(state)


# --- 6. reference backend: empty batches, half precision accumulated in float32 -----------------------------


def test_reference_empty_batch():
    model = small_model()
    for backend in ("reference", "cpu"):
        net = PackedLogicNet(model, backend=backend)
        assert net(torch.zeros(0, 16, dtype=torch.bool)).shape == (0, 3)
        p = packed.pack_bits(torch.zeros(0, 6, dtype=torch.bool), backend)
        assert packed.group_count(p, 2, backend).shape == (0, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reference_half_accumulates_in_float32(dtype):
    torch.manual_seed(0)
    a, b = connections.random_connections(100, 200)
    x = torch.rand(64, 100, dtype=torch.float64)
    w = torch.randn(200, 16)
    low = functional.logic_layer(x.to(dtype), a, b, w, backend="reference")
    # exactly: one rounding of the float32 result (the documented "accumulate in float32")
    assert torch.equal(low, functional.logic_layer(x.to(dtype).float(), a, b, w, backend="reference").to(dtype))
    exact = functional.logic_layer(x.to(dtype).double(), a, b, w.double(), backend="reference")
    eps = torch.finfo(dtype).eps
    assert float(((low.double() - exact).abs() / exact.abs().clamp_min(1e-3)).max()) <= eps / 2 * 1.01


# --- 8. PackedLogicNet: leading Flatten, ValueError for shapes, eval mode ------------------------------------


def test_readme_example():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), LogicLayer(784, 8000), LogicLayer(8000, 8000), GroupSum(k=10, tau=10.0)
    )
    model.eval()
    net = PackedLogicNet(model)
    x_bool = torch.rand(5, 28, 28) > 0.5
    counts = net(x_bool)
    with torch.no_grad():
        expected = (model(x_bool.float()) * 10.0).round().to(torch.int32)
    assert torch.equal(counts, expected)
    assert torch.equal(net(x_bool.reshape(5, 784)), expected)


def test_packed_net_shape_errors_and_training_mode():
    model = small_model()
    net = PackedLogicNet(model)
    for bad in (
        torch.zeros(3, 15, dtype=torch.bool),
        torch.zeros(16, dtype=torch.bool),
        torch.zeros(3, 2, 9, dtype=torch.bool),
    ):
        with pytest.raises(ValueError, match=r"x must have shape \[B, 16\]"):
            net(bad)
    plain = torch.nn.Sequential(*list(model)[1:]).eval()  # no Flatten: [B, 16] only
    with pytest.raises(ValueError, match=r"x must have shape \[B, 16\]"):
        PackedLogicNet(plain)(torch.zeros(3, 4, 4, dtype=torch.bool))
    model.train()
    with pytest.raises(ValueError, match=r"training mode.*eval\(\)"):
        PackedLogicNet(model)


# --- 9. export: names, tuple networks, the gate file format ------------------------------------------------


def test_verilog_module_name():
    model = small_model()
    for bad in ("module", "wire", "logic", "always_ff", "net\u00e9", "1net", "a-b", "", "x y", 5):
        with pytest.raises(ValueError, match="module_name"):
            verilog_source(model, module_name=bad)
    assert "module My_net1 (" in verilog_source(model, module_name="My_net1")


@pytest.mark.parametrize(
    "case,match",
    [
        ("index -1", r"layers\[0\] a must hold values in \[0, 4\)"),
        ("index too large", r"layers\[1\] b must hold values in \[0, 6\)"),
        ("gate -1", r"layers\[0\] op must hold values in \[0, 16\)"),
        ("gate 16", r"layers\[1\] op must hold values"),
        ("lengths", r"layers\[0\] b must be an integer vector"),
        ("float", r"layers\[0\] a must be an integer vector"),
        ("classes", "num_classes=4 must divide"),
        ("no layers", "layers must be a non-empty list"),
        ("inputs", "num_inputs must be an integer >= 1"),
    ],
)
def test_tuple_network_is_validated(case, match):
    a0, b0, op0 = np.array([0, 1, 2, 3, 0, 1]), np.array([1, 2, 3, 0, 2, 3]), np.arange(6)
    a1, b1, op1 = np.array([0, 5, 2]), np.array([1, 4, 3]), np.array([6, 7, 15])
    layers = [[a0, b0, op0], [a1, b1, op1]]
    num_inputs, num_classes = 4, 3
    if case == "index -1":
        a0[1] = -1
    elif case == "index too large":
        b1[2] = 6
    elif case == "gate -1":
        op0[0] = -1
    elif case == "gate 16":
        op1[0] = 16
    elif case == "lengths":
        layers[0][1] = b0[:5]
    elif case == "float":
        layers[0][0] = a0.astype(float)
    elif case == "classes":
        num_classes = 4
    elif case == "no layers":
        layers = []
    elif case == "inputs":
        num_inputs = 0
    network = (num_inputs, [tuple(layer) for layer in layers], num_classes)
    for export in (c_source, verilog_source, lambda n: CompiledLogicNet(n)):
        with pytest.raises(ValueError, match=match):
            export(network)


def gate_file(model=None) -> bytes:
    buf = io.BytesIO()
    save_gates(model if model is not None else small_model(), buf)
    return buf.getvalue()


def test_load_gates_rejects_truncated_and_trailing_bytes():
    data = gate_file()
    for n in range(len(data)):
        with pytest.raises(ValueError, match="magic|corrupt"):
            load_gates(io.BytesIO(data[:n]))
    with pytest.raises(ValueError, match="2 trailing bytes"):
        load_gates(io.BytesIO(data + b"\0\0"))
    load_gates(io.BytesIO(data))


def test_load_gates_rejects_bad_width_and_class_count():
    data = bytearray(gate_file())
    header = 8 + struct.calcsize("<BIIId")
    bad = bytearray(data)
    bad[header + 4] = 8  # layer 0's index width
    with pytest.raises(ValueError, match="index width 8"):
        load_gates(io.BytesIO(bytes(bad)))
    bad = bytearray(data)
    struct.pack_into("<I", bad, 8 + 9, 5)  # num_classes 5 does not divide the last layer's 12 outputs
    with pytest.raises(ValueError, match="5 classes do not divide"):
        load_gates(io.BytesIO(bytes(bad)))
    bad = bytearray(data)
    struct.pack_into("<d", bad, 8 + 13, math.nan)
    with pytest.raises(ValueError, match="tau"):
        load_gates(io.BytesIO(bytes(bad)))


# --- 5. torch.compile and opcheck -----------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_compile_fullgraph_dynamic(training):
    """Forward and backward of LogicLayer + GroupSum compile (inductor) with fullgraph and dynamic shapes, the
    batch size changing between calls (0 included)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), LogicLayer(12, 16), LogicLayer(16, 8), GroupSum(2, tau=3.0))
    model.train(training)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for B in (5, 7, 1, 0):
        x = torch.rand(B, 3, 4, requires_grad=True)
        y, yc = model(x), compiled(x)
        assert_close(yc.detach(), y.detach(), torch.float32)
        if B:
            g = torch.autograd.grad(y.sum(), (x, *model.parameters()), allow_unused=True, materialize_grads=True)
            gc = torch.autograd.grad(yc.sum(), (x, *model.parameters()), allow_unused=True, materialize_grads=True)
            for u, v in zip(gc, g):
                assert_close(u, v, torch.float32)


def test_compile_fullgraph_changing_width():
    """A recompile for another layer width (static shapes) is not a graph break."""
    for n in (6, 9):
        torch.manual_seed(0)
        layer = LogicLayer(n, n + 3)
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        x = torch.rand(4, n, requires_grad=True)
        assert_close(compiled(x), layer(x), torch.float32)


# (opcheck of the layer's ops: tests/logic/test_layer.py::test_opcheck; of the conv ops: tests/logic/test_conv.py)


# --- 7. non-finite inputs: documented, the same in every backend --------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_non_finite_inputs(value, training, dtype):
    torch.manual_seed(0)
    n_in, n_out, B = 9, 40, 7
    a, b = torch.randint(0, n_in, (n_out,)), torch.randint(0, n_in, (n_out,))
    x = torch.rand(B, n_in, dtype=dtype)
    x[2, 3] = x[4, 0] = x[4, 5] = value
    w = torch.randn(n_out, 16, dtype=dtype)
    G = torch.randn(B, n_out, dtype=dtype)
    results = {}
    for backend in CPU_BACKENDS:
        xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        y = functional.logic_layer(xx, a, b, ww, training, backend=backend)
        gx, gw = torch.autograd.grad((y * G).sum(), (xx, ww), allow_unused=True, materialize_grads=True)
        results[backend] = (y.detach(), gx, gw)
    y = results["reference"][0]
    reads = ~x.isfinite()[:, a] | ~x.isfinite()[:, b]  # [B, n_out]: the neuron reads a non-finite input
    assert torch.equal(~y.isfinite(), reads)  # non-finite exactly where a non-finite input is read
    if math.isnan(value):
        assert y[reads].isnan().all()
    for backend in KERNELS:
        for got, want in zip(results[backend], results["reference"]):
            assert_close(got, want, dtype)  # equal_nan, and the same +-inf


# --- found by the fuzz suite (beyond the list) ---------------------------------------------------------


def test_transpose_never_aliases_its_input():
    """Shapes whose transpose is already contiguous ([1, n], [n, 1]) in dtypes without the C++ kernel: the op
    returned its input's view, which torch.library rejects (custom ops must not alias)."""
    for shape in ((1, 3), (3, 1)):
        x = torch.rand(shape, dtype=torch.float16)
        y = ops.logic_transpose(x)
        assert y.shape == shape[::-1] and torch.equal(y, x.t()) and y.data_ptr() != x.data_ptr()
    torch.manual_seed(0)
    layer = LogicLayer(2, 1, backend="triton")
    x = torch.rand(1, 4, dtype=torch.float16)[:, ::2]  # one sample, strided: transposed through the op
    want = functional.logic_layer(x.double(), layer.idx_a, layer.idx_b, layer.weights.double(), backend="reference")
    torch.testing.assert_close(layer(x).double(), want, rtol=1e-3, atol=1e-3)  # one float16 rounding


def test_packed_layers_empty_batch():
    model = small_model()
    p = packed.pack_bits(torch.zeros(0, 16, dtype=torch.bool))
    for backend in ("reference", "cpu"):
        assert PackedLogicNet(model, backend=backend).layers_forward(p).words.shape == (12, 0)
        assert packed.packed_layer(
            p, torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([1, 6]), backend
        ).words.shape == (2, 0)
