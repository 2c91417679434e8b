"""LogicConv2d (tree convolutions): every backend against the float64 reference, eval mode against a gate-by-gate
evaluation, gradcheck, opcheck, torch.compile, initialisation, state_dict and bad arguments."""

from __future__ import annotations

import itertools

import pytest
import torch
from relaxops import BackendUnavailableError, _ext
from relaxops.logic import LogicConv2d, logic_conv2d, ops, reference
from relaxops.logic.connections import conv_inverse_index, conv_leaves
from relaxops.logic.gates import GATE_A, TRUTH, gate_coefficients
from testing import KERNEL_BACKEND_DEVICE, assert_low_precision_close, opcheck_calls

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="the C++ extension is not built")

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}

# (C_in, C_out, H, W, kernel, stride, padding, depth, batch): odd sizes, every value of the brief's grid appears.
SHAPES = [
    (1, 1, 1, 1, 1, 1, 0, 1, 1),
    (3, 5, 7, 5, 3, 2, 1, 3, 3),
    (3, 5, 5, 7, 3, 1, 1, 2, 3),
    (1, 5, 7, 7, 3, 1, 0, 3, 1),
    (3, 1, 5, 5, 1, 2, 0, 2, 3),
    (3, 5, 1, 5, 3, 1, 1, 1, 0),
    (1, 5, 5, 1, 1, 1, 1, 3, 3),
    (3, 5, 7, 7, 3, 2, 0, 1, 1),
]


def _shape_id(s):
    return "C{}-{}_{}x{}_k{}s{}p{}_d{}_B{}".format(*s)


def _layer(C_in, C_out, k, s, p, d, dtype=torch.float64, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    return LogicConv2d(C_in, C_out, k, d, stride=s, padding=p, generator=g, dtype=dtype, **kw)


def conv_case(shape, dtype, backend, device="cpu", training=True):
    """A case of the reference checks: the layer (its logits require grad) and an input of the shape's batch;
    test_opcheck checks the ops of its calls."""
    C_in, C_out, H, W, k, s, p, d, B = shape
    layer = _layer(C_in, C_out, k, s, p, d, dtype=dtype, backend=backend).train(training).to(device)
    return layer, torch.rand(B, C_in, H, W, dtype=dtype, device=device)


def _reference_grads(layer, x, g, training):
    """Output and gradients (x, logits) of the float64 reference."""
    x64 = x.detach().double().requires_grad_()
    w64 = layer.weights.detach().double().requires_grad_()
    y = reference.logic_conv2d(
        x64,
        layer.leaves,
        gate_coefficients(w64, training, torch.float64),
        layer.kernel_size,
        layer.stride,
        layer.padding,
    )
    gx, gw = torch.autograd.grad((y * g.double()).sum(), (x64, w64), allow_unused=True)
    return y, gx, gw


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_cpu_matches_reference(shape, dtype, training):
    C_in, C_out, H, W, k, s, p, d, B = shape
    layer, x = conv_case(shape, dtype, "cpu", training=training)
    x.requires_grad_()
    y = layer(x)
    g = torch.randn_like(y)
    gx, gw = torch.autograd.grad((y * g).sum(), (x, layer.weights), allow_unused=True)
    yr, gxr, gwr = _reference_grads(layer, x, g, training)
    assert y.shape == yr.shape == (B, C_out, (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1)
    torch.testing.assert_close(y, yr.to(dtype), **TOL[dtype])
    torch.testing.assert_close(gx, gxr.to(dtype), **TOL[dtype])
    if training:
        torch.testing.assert_close(gw, gwr.to(dtype), **TOL[dtype])
    else:
        assert gw is None  # the argmax passes no gradient to the logits


def _gate_by_gate(layer, xb):
    """Eval mode evaluated literally on Booleans: each node's argmax gate applied by its truth table."""
    kh, kw = layer.kernel_size
    (sh, sw), (ph, pw) = layer.stride, layer.padding
    B, _, H, W = xb.shape
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    ids = layer.gate_ids().tolist()
    L = layer.num_leaves
    out = torch.zeros(B, layer.out_channels, Ho, Wo, dtype=torch.bool)
    for b, k, oy, ox in itertools.product(range(B), range(layer.out_channels), range(Ho), range(Wo)):
        v = []
        for c, dy, dx in layer.leaves[k].tolist():
            iy, ix = oy * sh - ph + dy, ox * sw - pw + dx
            v.append(bool(xb[b, c, iy, ix]) if 0 <= iy < H and 0 <= ix < W else False)
        for n in range(L - 1):
            v.append(bool(TRUTH[ids[k][n]][2 * v[2 * n] + v[2 * n + 1]]))
        out[b, k, oy, ox] = v[-1]
    return out


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[3], SHAPES[4]], ids=_shape_id)
def test_eval_is_boolean_and_equals_gate_by_gate(shape, backend):
    C_in, C_out, H, W, k, s, p, d, B = shape
    layer = _layer(C_in, C_out, k, s, p, d, dtype=torch.float32, backend=backend).eval()
    with torch.no_grad():
        layer.weights.normal_(0, 3)  # many different gates
    xb = torch.rand(B, C_in, H, W) > 0.5
    want = _gate_by_gate(layer, xb)
    y_bool = layer(xb)
    assert y_bool.dtype == torch.bool
    assert torch.equal(y_bool, want)
    y = layer(xb.float())
    assert torch.equal(y, want.float())  # exactly 0 / 1


def test_gradcheck_cpu_and_reference():
    for backend in ("cpu", "reference"):
        layer = _layer(3, 2, 3, 2, 1, 2, backend=backend)
        x = torch.rand(2, 3, 5, 4, dtype=torch.float64, requires_grad=True)
        w = layer.weights.detach().clone().requires_grad_()
        csr = conv_inverse_index(layer.leaves, 3)

        def f(x, w, backend=backend, layer=layer, csr=csr):
            return logic_conv2d(x, layer.leaves, w, 3, 2, 1, True, csr, backend)

        assert torch.autograd.gradcheck(f, (x, w))


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that a reference check's calls make (stride 2, padding, depth 3): the layer in training
    (gradients of the input and the logits) and in eval mode (no gradient of the logits), and the functional form
    with the logits' gradient alone."""
    made = ["relaxops::logic_conv_fwd", "relaxops::logic_conv_bwd"]
    for training in (True, False):
        layer, x = conv_case(SHAPES[1], torch.float32, backend, device, training)
        assert opcheck_calls(layer, x) == made
    csr = conv_inverse_index(layer.leaves, SHAPES[1][0])
    conv = lambda w: logic_conv2d(x, layer.leaves, w, 3, 2, 1, True, csr, backend)  # noqa: E731
    assert opcheck_calls(conv, layer.weights.detach()) == made


def test_torch_compile_fullgraph():
    layer = _layer(3, 5, 3, 1, 1, 2, dtype=torch.float32, backend="cpu")
    x = torch.rand(2, 3, 6, 5, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    y, yc = layer(x), compiled(x)
    torch.testing.assert_close(yc, y)
    torch.testing.assert_close(torch.autograd.grad(yc.sum(), x)[0], torch.autograd.grad(y.sum(), x)[0])


def test_backward_is_deterministic():
    layer = _layer(3, 8, 3, 1, 1, 3, dtype=torch.float32, backend="cpu")
    x = torch.rand(7, 3, 9, 9, requires_grad=True)
    grads = [torch.autograd.grad(layer(x).square().sum(), (x, layer.weights)) for _ in range(3)]
    for g in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(g, grads[0]))


@pytest.mark.parametrize("connections", ["random", "two_channels"])
def test_init_reproducible_and_in_range(connections):
    a = _layer(4, 6, (3, 2), 1, 0, 3, seed=3, connections=connections)
    b = _layer(4, 6, (3, 2), 1, 0, 3, seed=3, connections=connections)
    c = _layer(4, 6, (3, 2), 1, 0, 3, seed=4, connections=connections)
    assert torch.equal(a.leaves, b.leaves) and torch.equal(a.weights, b.weights)
    assert not torch.equal(a.leaves, c.leaves)
    assert a.leaves.shape == (6, 8, 3) and a.leaves.dtype == torch.int64 and a.weights.shape == (6, 7, 16)
    assert a.leaves[..., 0].max() < 4 and a.leaves[..., 1].max() < 3 and a.leaves[..., 2].max() < 2
    assert a.leaves.min() >= 0
    if connections == "two_channels":
        ch = a.leaves[..., 0]
        assert torch.equal(ch[:, 0::2], ch[:, :1].expand(-1, 4)) and torch.equal(ch[:, 1::2], ch[:, 1:2].expand(-1, 4))
        assert (ch[:, 0] != ch[:, 1]).all()
    leaves = conv_leaves(1, 3, 4, (1, 1), connections, torch.Generator().manual_seed(0))
    assert (leaves == 0).all()


def test_residual_init():
    layer = _layer(3, 4, 3, 1, 1, 2, init="residual", residual_probability=0.9)
    p = torch.softmax(layer.weights, -1)
    torch.testing.assert_close(p[..., GATE_A], torch.full((4, 3), 0.9, dtype=torch.float64))
    assert (layer.gate_ids() == GATE_A).all()
    # Eval mode: every node passes its A input, so the output is leaf 0 of each tree.
    layer.eval()
    x = torch.rand(2, 3, 5, 5, dtype=torch.float64)
    leaf0 = reference.conv_leaf_values(x, layer.leaves, (3, 3), (1, 1), (1, 1))[:, :, 0]
    assert torch.equal(layer(x), leaf0)


def test_state_dict_round_trip_and_leaf_validation():
    a = _layer(3, 5, 3, 1, 1, 2, seed=0, backend="cpu")
    b = _layer(3, 5, 3, 1, 1, 2, seed=1, backend="cpu")
    b.load_state_dict(a.state_dict())
    x = torch.rand(2, 3, 6, 6, dtype=torch.float64)
    assert torch.equal(a(x), b(x))
    assert torch.equal(b.csr_start, a.csr_start) and torch.equal(b.csr_entry, a.csr_entry)
    bad = a.state_dict()
    bad["leaves"] = bad["leaves"].clone()
    bad["leaves"][0, 0, 0] = 3
    with pytest.raises(ValueError, match="channel"):
        b.load_state_dict(bad)
    bad["leaves"][0, 0] = torch.tensor([0, 0, 3])
    with pytest.raises(ValueError, match="dx"):
        b.set_leaves(bad["leaves"])
    with pytest.raises(ValueError, match="shape"):
        b.set_leaves(torch.zeros(5, 3, 3, dtype=torch.int64))
    new = torch.zeros(5, 4, 3, dtype=torch.int64)
    b.set_leaves(new)
    assert torch.equal(b.leaves, new) and b.csr_start.tolist() == [0, 20, 20, 20]
    # An in-place edit is seen at the next call (the inverse index is rebuilt).
    with torch.no_grad():
        b.leaves[:, :, 0] = 2
    y = b(x.requires_grad_())
    yr = reference.logic_conv2d(x, b.leaves, gate_coefficients(b.weights, True, torch.float64), (3, 3), (1, 1), (1, 1))
    torch.testing.assert_close(y, yr)
    gx = torch.autograd.grad(y.sum(), x)[0]
    assert gx[:, :2].abs().sum() == 0 and gx[:, 2].abs().sum() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="in_channels"):
        LogicConv2d(0, 4, 3, 2)
    with pytest.raises(ValueError, match="out_channels"):
        LogicConv2d(2, 2.5, 3, 2)
    with pytest.raises(ValueError, match="tree_depth"):
        LogicConv2d(2, 4, 3, 0)
    with pytest.raises(ValueError, match="kernel_size"):
        LogicConv2d(2, 4, 0, 2)
    with pytest.raises(ValueError, match="stride"):
        LogicConv2d(2, 4, 3, 2, stride=(1, 0))
    with pytest.raises(ValueError, match="padding"):
        LogicConv2d(2, 4, 3, 2, padding=-1)
    with pytest.raises(ValueError, match="connections"):
        LogicConv2d(2, 4, 3, 2, connections="unique")
    with pytest.raises(ValueError, match="init"):
        LogicConv2d(2, 4, 3, 2, init="zeros")
    layer = LogicConv2d(2, 4, 3, 2)
    with pytest.raises(ValueError, match=r"\[B, 2, H, W\]"):
        layer(torch.rand(1, 3, 5, 5))
    with pytest.raises(ValueError, match="larger than the padded input"):
        layer(torch.rand(1, 2, 2, 5))
    with pytest.raises(TypeError):
        layer(torch.ones(1, 2, 5, 5, dtype=torch.int64))
    x = torch.rand(1, 2, 5, 5)
    start, entry = conv_inverse_index(layer.leaves, 2)
    with pytest.raises(ValueError, match="geometry"):
        ops.logic_conv_fwd(x, layer.leaves, layer.weights.detach(), start, entry, [3, 3, 1, 1], True, "cpu")
    with pytest.raises(IndexError, match="channel"):
        ops.logic_conv_fwd(
            x,
            layer.leaves + torch.tensor([2, 0, 0]),
            layer.weights.detach(),
            start,
            entry,
            [3, 3, 1, 1, 0, 0],
            True,
            "cpu",
        )
    with pytest.raises(BackendUnavailableError, match="logic_conv_fwd: backend 'cuda' cannot run"):
        ops.logic_conv_fwd(x, layer.leaves, layer.weights.detach(), start, entry, [3, 3, 1, 1, 0, 0], True, "cuda")
    # A stale inverse index is refused by the kernel's own check.
    y, coef = ops.logic_conv_fwd(x, layer.leaves, layer.weights.detach(), start, entry, [3, 3, 1, 1, 0, 0], True, "cpu")
    with pytest.raises(ValueError, match="inverse index"):
        ops.logic_conv_bwd(
            torch.ones_like(y),
            x,
            layer.leaves,
            layer.weights.detach(),
            coef,
            start,
            entry.flip(0),
            [3, 3, 1, 1, 0, 0],
            True,
            False,
            "cpu",
        )


@pytest.mark.parametrize("depth", [1, 3])
def test_same_network_as_torchlogix(depth):
    """Our conventions map onto torchlogix 0.2.2's LogicConv2d (the benchmark's peer): with our leaves and logits
    copied in, both compute the same outputs in training and eval mode."""
    import importlib.util

    if importlib.util.find_spec("torchlogix") is None:  # not importorskip: its package __init__ needs Python 3.12
        pytest.skip("torchlogix is not installed")
    from relaxops.bench import logic as bench_logic

    layer = _layer(3, 5, 3, 1, 1, depth, dtype=torch.float32, backend="cpu")
    theirs = bench_logic._torchlogix_conv(layer, 6)
    x = torch.rand(2, 3, 6, 6)
    for training in (True, False):
        layer.train(training), theirs.train(training)
        torch.testing.assert_close(layer(x), theirs(x), atol=1e-5, rtol=1e-5)


# --- GPU backends (CUDA where a GPU is lent; Triton there or through TRITON_INTERPRET=1 on CPU tensors) ----------

GPU_BACKEND_DEVICE = [p for p in KERNEL_BACKEND_DEVICE if p.values[0] != "cpu"]
# Tiny shapes (the Triton interpreter): stride 2 + padding + depth 3, 1x1 output, non-square, kernel 1 with stride
# 2, an empty batch, depth 4 with stride 3.
GPU_SHAPES = [SHAPES[1], SHAPES[0], SHAPES[2], SHAPES[4], SHAPES[5], (2, 3, 6, 7, 2, 3, 0, 4, 2)]


def _kernel_run(layer, x, g, backend, device, dtype):
    """Output and gradients (x, logits) of ``layer``'s network through ``backend`` on ``device`` in ``dtype``."""
    xd = x.detach().to(device, dtype).requires_grad_()
    w = layer.weights.detach().to(device, torch.float64 if dtype == torch.float64 else torch.float32)
    w.requires_grad_(layer.training)
    csr = tuple(t.to(device) for t in conv_inverse_index(layer.leaves, layer.in_channels))
    y = logic_conv2d(
        xd, layer.leaves.to(device), w, layer.kernel_size, layer.stride, layer.padding, layer.training, csr, backend
    )
    wanted = (xd, w) if layer.training else (xd,)
    grads = torch.autograd.grad((y * g.to(device, dtype)).sum(), wanted)
    return y, grads[0], (grads[1] if layer.training else None)


@pytest.mark.parametrize("backend,device", GPU_BACKEND_DEVICE)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=_shape_id)
def test_gpu_backends_match_reference(backend, device, shape, training):
    C_in, C_out, H, W, k, s, p, d, B = shape
    layer = _layer(C_in, C_out, k, s, p, d, seed=d).train(training)
    with torch.no_grad():
        layer.weights.normal_(0, 2)
    x = torch.rand(B, C_in, H, W, dtype=torch.float64)
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    g = torch.randn(B, C_out, Ho, Wo, dtype=torch.float64)
    yr, gxr, gwr = _reference_grads(layer, x, g, training)
    for dtype in (torch.float64, torch.float32):
        y, gx, gw = _kernel_run(layer, x, g, backend, device, dtype)
        assert y.dtype == gx.dtype == dtype and y.device.type == device
        torch.testing.assert_close(y.cpu(), yr.to(dtype), **TOL[dtype])
        torch.testing.assert_close(gx.cpu(), gxr.to(dtype), **TOL[dtype])
        if training:
            torch.testing.assert_close(gw.cpu(), gwr.to(gw.dtype), **TOL[dtype])


@pytest.mark.parametrize("backend,device", GPU_BACKEND_DEVICE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_backends_low_precision(backend, device, dtype):
    """Half data, float32 arithmetic: at most twice the error of the reference run in the same precision."""
    layer = _layer(3, 4, 3, 1, 1, 3, seed=1)
    x = torch.rand(2, 3, 5, 6, dtype=torch.float64)
    g = torch.randn(2, 4, 5, 6, dtype=torch.float64)
    exact = _reference_grads(layer, x, g, True)
    x_low = x.to(dtype).requires_grad_()
    w_low = layer.weights.detach().float().requires_grad_()
    y_low = reference.logic_conv2d(
        x_low, layer.leaves, gate_coefficients(w_low, True, torch.float32), (3, 3), (1, 1), (1, 1)
    )
    low = (y_low, *torch.autograd.grad((y_low * g.to(dtype)).sum(), (x_low, w_low)))
    out = _kernel_run(layer, x, g, backend, device, dtype)
    assert out[0].dtype == dtype and out[1].dtype == dtype and out[2].dtype == torch.float32
    for got, lo, ex in zip(out, low, exact):
        assert_low_precision_close(
            got.detach().cpu(), lo.detach(), ex.detach(), slack=1e-3 * max(1.0, float(ex.detach().abs().max()))
        )


@pytest.mark.parametrize("backend,device", GPU_BACKEND_DEVICE)
def test_gpu_backends_deterministic_and_unread_channel(backend, device):
    """Bit-identical gradients on repeated runs; a channel no leaf reads gets exactly zero gradient."""
    layer = _layer(4, 6, 3, 1, 1, 2, dtype=torch.float32, seed=2)
    leaves = layer.leaves.clone()
    leaves[..., 0] %= 3  # channel 3 unread
    layer.set_leaves(leaves)
    x = torch.rand(5, 4, 7, 6, device=device)
    g = torch.randn(5, 6, 7, 6)
    runs = [_kernel_run(layer, x, g, backend, device, torch.float32) for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    assert (runs[0][1][:, 3] == 0).all() and (runs[0][1][:, :3] != 0).any()


@pytest.mark.parametrize("backend,device", GPU_BACKEND_DEVICE)
def test_gpu_backends_refuse_bad_index_and_depth(backend, device):
    layer = _layer(2, 3, 3, 1, 0, 2, dtype=torch.float32)
    leaves = layer.leaves.to(device)
    x = torch.rand(1, 2, 5, 5, device=device)
    w = layer.weights.detach().to(device)
    start, entry = (t.to(device) for t in conv_inverse_index(layer.leaves, 2))
    geometry = [3, 3, 1, 1, 0, 0]
    y, coef = ops.logic_conv_fwd(x, leaves, w, start, entry, geometry, True, backend)
    with pytest.raises(ValueError, match="inverse index"):
        ops.logic_conv_bwd(torch.ones_like(y), x, leaves, w, coef, start, entry.flip(0), geometry, True, False, backend)
    if backend == "triton":
        deep = torch.zeros(1, 1 << 13, 3, dtype=torch.int64, device=device)
        csr = conv_inverse_index(deep, 2)
        with pytest.raises(ValueError, match="depth"):
            ops.logic_conv_fwd(x, deep, torch.zeros(1, (1 << 13) - 1, 16, device=device), *csr, geometry, True, backend)


def test_auto_takes_an_unverified_gpu_kernel_only_after_selftest(tmp_path, monkeypatch):
    """`auto` on GPUs: the conv family is its own (a verified dense logic kernel does not count for it)."""
    from relaxops import _backend

    monkeypatch.setenv("RELAXOPS_CACHE_DIR", str(tmp_path))
    cpu = torch.device("cpu")
    assert not {("logic_conv", "cuda"), ("logic_conv", "triton")} & set(_backend.VERIFIED_GPU)
    assert _backend.GPU_PREFERENCE["logic_conv"] == ("cuda", "triton")
    _backend.record_selftest(
        [{**_backend.device_identity(cpu), "family": "logic", "backend": "triton", "status": "passed", "detail": ""}]
    )
    assert _backend.gpu_choice("logic_conv", cpu) == "reference"


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("depth", [3, 6])
def test_gpu_benchmark_size(backend, depth):
    """The benchmark's size (B = 64, 16 -> 64 channels, 16 x 16) and a deep tree, float32, vs float64 reference."""
    layer = _layer(16, 64, 3, 1, 1, depth, seed=depth)
    x = torch.rand(64, 16, 16, 16, dtype=torch.float64)
    g = torch.randn(64, 64, 16, 16, dtype=torch.float64)
    yr, gxr, gwr = _reference_grads(layer, x, g, True)
    y, gx, gw = _kernel_run(layer, x, g, backend, "cuda", torch.float32)
    torch.testing.assert_close(y.cpu(), yr.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gx.cpu(), gxr.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gw.cpu(), gwr.float(), atol=1e-4 * max(1.0, float(gwr.abs().max())), rtol=1e-4)
