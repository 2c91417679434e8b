"""Property-based (fuzz) tests of every public op of the logic family: LogicLayer / logic_layer, GroupSum /
group_sum, the packed inference path (pack_bits, unpack_bits, packed_layer, group_count, PackedLogicNet), the
exporters (c_source / CompiledLogicNet, verilog_source), the gate file format (save_gates / load_gates) and the
difflogic compatibility modules.

Random shapes (empty batch, 1-D, n = 1, odd sizes), every float dtype, parameters at their extremes, strided /
expanded / transposed inputs, NaN / inf / huge values and ties. Well-conditioned inputs are compared with the
float64 reference (outputs and gradients; triton through the interpreter on small cases); everywhere invariants are
checked (non-finite exactly where a non-finite input is read, packed == eval mode, round trips, clear errors).
Profile "ci" by default; HYPOTHESIS_PROFILE=long for a longer local campaign.
"""

import io
import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from relaxops import _ext
from relaxops.compat import difflogic
from relaxops.logic import (
    GroupSum,
    LogicLayer,
    PackedLogicNet,
    functional,
    group_sum,
    pack_bits,
    packed,
    reference,
    unpack_bits,
)
from relaxops.logic.compile import CompiledLogicNet, c_source, verilog_source
from relaxops.logic.gates import gate_coefficients
from relaxops.logic.io import load_gates, save_gates
from strategies import BATCH, FLOAT_DTYPES, LAYOUTS, SIZES, extreme, layout
from testing import TOLERANCES, assert_close, outputs_and_grads

from .test_compile import eval_verilog

pytestmark = pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
SIMD_LEVELS = list(range(_ext._C.logic_simd_best() + 1)) if _ext.has_cpu() else [0]


def examples(n: int) -> int:
    """``n`` examples under the "ci" profile (bounded time); the profile's own count under a longer one."""
    return max(n, settings.default.max_examples) if settings.default.max_examples > 30 else n


def random_wiring(seed: int, n_in: int, n_out: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_in, (n_out,), generator=g), torch.randint(0, n_in, (n_out,), generator=g)


def maxabs(t) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def run(x, a, b, w, training, backend):
    """Output and gradients (x, w) of a fixed random functional of the output."""
    return outputs_and_grads(functional.logic_layer, x, a, b, w, training, backend=backend)


# --- relaxed layer: against the float64 reference ---------------------------------------------------------------


@given(
    n_in=SIZES,
    n_out=SIZES,
    batch=BATCH,
    dtype=st.sampled_from(FLOAT_DTYPES),
    kind=LAYOUTS,
    training=st.booleans(),
    backend=st.sampled_from(["auto", "cpu", "triton", "reference"]),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=examples(60))
def test_layer_matches_float64_reference(n_in, n_out, batch, dtype, kind, training, backend, seed):
    if backend == "cpu" and dtype not in (torch.float32, torch.float64):
        backend = "auto"  # the C++ kernel takes float32/float64 only (auto falls back to the reference)
    if backend == "triton" and math.prod(batch) * (n_in + n_out) > 2000:
        backend = "cpu" if dtype in (torch.float32, torch.float64) else "auto"  # interpreter: small cases only
    g = torch.Generator().manual_seed(seed)
    a, b = random_wiring(seed, n_in, n_out)
    x64 = torch.rand(*batch, n_in, generator=g, dtype=torch.float64)
    x = layout(x64.to(dtype), kind)
    x64 = x.double()  # the values the kernel sees (rounded, or the rows an expanded view repeats)
    w = torch.randn(n_out, 16, generator=g, dtype=torch.float64) * 3
    w_low = w.to(torch.float64 if dtype == torch.float64 else torch.float32)
    got = run(x, a, b, w_low, training, backend)
    exact = run(x64, a, b, w_low.double(), training, "reference")
    assert got[0].shape == (*batch, n_out) and got[0].dtype == dtype
    # probabilities in, probabilities out (a convex combination of gates; rounding only)
    assert bool(((got[0].double() >= -1e-2) & (got[0].double() <= 1 + 1e-2)).all())
    if dtype in TOLERANCES:
        B = max(1, math.prod(batch))
        for u, v in zip(got, exact):
            assert_close(u.double(), v, dtype, scale=B)  # gradients of the logits sum over the batch
    else:
        low_ref = run(x, a, b, w_low, training, "reference")
        for u, lo, v in zip(got, low_ref, exact):
            err, ref_err = maxabs(u.double() - v), maxabs(lo.double() - v)
            # half types: at most twice the reference's own error in that dtype (the kernels also accumulate
            # in float32), plus one unit roundoff of the largest value (ties of rounding).
            assert err <= 2 * ref_err + torch.finfo(dtype).eps * max(1.0, maxabs(v))


@given(
    n_in=SIZES, n_out=SIZES, batch=BATCH, dtype=st.sampled_from(FLOAT_DTYPES), training=st.booleans(), data=st.data()
)
@settings(max_examples=examples(40))
def test_layer_extreme_inputs(n_in, n_out, batch, dtype, training, data):
    """Non-finite outputs exactly where a neuron reads a NaN / inf input (as long as the finite values cannot
    overflow the bilinear form), NaN where it reads a NaN; every backend gives the same non-finite pattern."""
    x = data.draw(extreme((*batch, n_in), dtype))
    seed = data.draw(st.integers(0, 2**31 - 1))
    a, b = random_wiring(seed, n_in, n_out)
    w = torch.randn(n_out, 16, generator=torch.Generator().manual_seed(seed))
    w = w.double() if dtype == torch.float64 else w
    finite = x.isfinite()
    bound = math.sqrt(torch.finfo(dtype).max) / 8  # |c| <= 2, four terms: no overflow below this
    small = bool((x[finite].double().abs() <= bound).all()) if finite.any() else True
    backends = ["reference", "auto"] + (["triton"] if x.numel() <= 256 else [])
    outs = {bk: run(x, a, b, w, training, bk) for bk in backends}
    reads = ~finite[..., a] | ~finite[..., b]
    for bk, (y, gx, gw) in outs.items():
        assert bool(y[reads & (x.isnan()[..., a] | x.isnan()[..., b])].isnan().all()), bk
        if small:
            assert torch.equal(~y.isfinite(), reads), bk
            for u, v in zip((y, gx, gw), outs["reference"]):
                assert torch.equal(u.isnan(), v.isnan()) and torch.equal(u.isinf(), v.isinf()), bk


@given(
    n=SIZES,
    B=st.integers(0, 5),
    scale=st.sampled_from([1e-30, 1.0, 1e4, 1e30]),
    special=st.sampled_from(["none", "nan", "ties"]),
    training=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
@settings(max_examples=examples(30))
def test_layer_extreme_logits(n, B, scale, special, training, dtype):
    """Logits of any finite magnitude give finite outputs (stable softmax); ties pick the lowest gate in eval mode;
    a NaN logit gives NaN outputs for its neuron in training and counts as the maximum in eval mode; the C++ kernel
    and the reference agree."""
    torch.manual_seed(n * 7 + B)
    a, b = random_wiring(n + B, n, n)
    w = (torch.randn(n, 16) * scale).to(dtype)
    if special == "ties":
        w = w.round().clamp(-1, 1)
    if special == "nan":
        w[0, 3] = math.nan
    x = torch.rand(B, n, dtype=dtype)
    got, want = run(x, a, b, w, training, "cpu"), run(x.double(), a, b, w.double(), training, "reference")
    assert_close(got[0].double(), want[0], dtype)
    if special == "nan" and training and B:
        assert bool(got[0][:, 0].isnan().all()) and bool(got[0][:, 1:].isfinite().all())
    elif special != "nan":
        assert bool(got[0].isfinite().all())
    if special != "nan":  # the logits' gradient through the softmax of huge logits is ~0: absolute tolerance
        for u, v in zip(got[1:], want[1:]):
            assert_close(u.double(), v, dtype, scale=max(1, B))


@given(
    n_in=st.integers(1, 12),
    n_out=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    edits=st.lists(
        st.tuples(st.sampled_from(["idx_a", "idx_b", "assign", "load"]), st.integers(0, 11), st.integers(-3, 14)),
        min_size=1,
        max_size=4,
    ),
)
@settings(max_examples=examples(30))
def test_connection_edits(n_in, n_out, seed, edits):
    """Connections edited in place, assigned or loaded: a valid edit gives the reference's gradients, an invalid
    one a ValueError naming the tensor, never a crash or a stale inverse index."""
    assume(2 * n_out >= n_in)
    torch.manual_seed(seed)
    layer = LogicLayer(n_in, n_out).double()
    x = torch.rand(3, n_in, dtype=torch.float64)
    layer.backend = "cpu"
    for what, j, v in edits:
        j, valid = j % n_out, 0 <= v < n_in
        if what in ("idx_a", "idx_b"):  # in place
            with torch.no_grad():
                getattr(layer, what)[j] = v
            if not valid:
                with pytest.raises(ValueError, match=what):
                    layer(x)
                with torch.no_grad():
                    getattr(layer, what)[j] = 0
        else:
            a = layer.idx_a.clone()
            a[j] = v

            def edit(a=a, what=what):
                if what == "assign":
                    layer.indices = (a, layer.idx_b)
                else:
                    layer.load_state_dict(dict(layer.state_dict(), idx_a=a))

            if valid:
                edit()
            else:
                with pytest.raises(ValueError, match="idx_a"):
                    edit()
        xx = x.clone().requires_grad_(True)
        y = layer(xx)
        G = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        gx, gw = torch.autograd.grad((y * G).sum(), (xx, layer.weights))
        want = run(x, layer.idx_a, layer.idx_b, layer.weights, True, "reference")
        for u, v in zip((y.detach(), gx, gw), want):
            assert_close(u, v, torch.float64)


@given(
    n=st.integers(1, 40),
    k=st.integers(1, 8),
    batch=BATCH,
    dtype=st.sampled_from(FLOAT_DTYPES),
    kind=LAYOUTS,
    tau=st.sampled_from([1e-3, 1.0, 7.5, 1e6]),
    feature_major=st.booleans(),
)
@settings(max_examples=examples(40))
def test_group_sum(n, k, batch, dtype, kind, tau, feature_major):
    n = n * k
    x = layout(torch.rand(*batch, n, dtype=torch.float64).to(dtype), kind)
    if feature_major and x.dim() == 2:
        x = x.t().contiguous().t()  # the layout a logic layer's output has
    xg = x.detach().requires_grad_(True)
    y = group_sum(xg, k, tau)
    (gx,) = torch.autograd.grad(y.sum(), xg) if y.numel() else (torch.zeros_like(x),)
    exact = x.double().reshape(*batch, k, n // k).sum(-1) / tau
    assert y.shape == (*batch, k) and y.dtype == dtype
    tol, fi = TOLERANCES.get(dtype, dict(rtol=1e-2, atol=1e-2)), torch.finfo(dtype)
    # n additions of relative error tol; plus twice the subnormal spacing (x / 1e6 is subnormal in float16)
    atol = tol["atol"] * n / tau + 2 * fi.tiny * fi.eps
    torch.testing.assert_close(y.double(), exact, rtol=tol["rtol"] * n, atol=atol)
    # 1 / tau rounded once (atol: 1 / tau = 1e-6 is subnormal in float16)
    torch.testing.assert_close(
        gx.double(), torch.full(x.shape, 1 / tau, dtype=torch.float64), rtol=fi.eps, atol=fi.tiny
    )
    assert torch.equal(GroupSum(k, tau)(x), y)
    with pytest.raises(ValueError, match="divide"):
        group_sum(x, n + 1, tau)


# --- packed inference ----------------------------------------------------------------------------------------


def model_strategy():
    return st.tuples(
        st.lists(st.integers(1, 40), min_size=1, max_size=4),
        st.integers(1, 4),
        st.integers(1, 6),
        st.booleans(),
        st.booleans(),
        st.integers(0, 2**31 - 1),
    )


def make_model(spec):
    """A Flatten? + LogicLayer... + GroupSum model in eval mode, gates of every id, relaxops' or difflogic's
    modules. Each width is the drawn one, raised to half the previous width (LogicLayer's rule), times k."""
    widths, k, n_in, flatten, compat, seed = spec
    torch.manual_seed(seed)
    dims = [n_in]
    for w in widths:
        dims.append(max(w, -(-dims[-1] // (2 * k))) * k)
    layers = []
    for i, o in zip(dims[:-1], dims[1:]):
        layer = difflogic.LogicLayer(i, o, device="cpu") if compat else LogicLayer(i, o)
        with torch.no_grad():
            ids = torch.randint(0, 16, (o,))
            layer.weights.copy_(torch.nn.functional.one_hot(ids, 16) * 2.0 + torch.randn(o, 16) * 0.1)
        layers.append(layer)
    head = difflogic.GroupSum(k, 1.5, device="cpu") if compat else GroupSum(k, 1.5)
    model = torch.nn.Sequential(*([torch.nn.Flatten()] if flatten else []), *layers, head).eval()
    return model, n_in


def eval_counts(model, x_bool):
    """round(eval-mode output * tau): the counts the packed paths must reproduce bit for bit."""
    with torch.no_grad():
        return (model(x_bool.float()) * model[-1].tau).round().to(torch.int32)


@given(
    spec=model_strategy(),
    B=st.sampled_from([0, 1, 2, 31, 63, 64, 65, 130]),
    backend=st.sampled_from(["reference", "cpu"]),
    simplify=st.booleans(),
    simd=st.sampled_from(SIMD_LEVELS),
    threads=st.sampled_from([0, 1, 3]),
    as_words=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=examples(40))
def test_packed_net_equals_eval_mode(spec, B, backend, simplify, simd, threads, as_words, seed):
    model, n_in = make_model(spec)
    x = torch.rand(B, n_in, generator=torch.Generator().manual_seed(seed)) > 0.5
    net = PackedLogicNet(model, backend=backend, simplify=simplify, simd=simd, num_threads=threads)
    want = eval_counts(model, x)
    got = net(pack_bits(x, backend) if as_words else x)
    assert got.dtype == torch.int32 and torch.equal(got, want)
    if spec[3] and B:  # a leading Flatten takes any shape that flattens to num_inputs
        assert torch.equal(net(x.reshape(B, 1, n_in)), want)
    last = net.layers_forward(pack_bits(x, backend))
    assert torch.equal(packed.group_count(last, model[-1].k, backend), want)


@given(
    B=st.integers(0, 200),
    D=st.integers(1, 70),
    n_out=st.integers(1, 40),
    backend=st.sampled_from(["reference", "cpu"]),
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(["contiguous", "transposed"]),
)
@settings(max_examples=examples(40))
def test_packed_primitives(B, D, n_out, backend, seed, kind):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, D, generator=g) > 0.5
    xv = x.t().contiguous().t() if kind == "transposed" else x
    p = pack_bits(xv, backend)
    assert p.words.shape == (D, -(-B // 64)) and torch.equal(p.words, reference.pack(x))
    assert torch.equal(unpack_bits(p, backend), x)
    a, b = torch.randint(0, D, (n_out,), generator=g), torch.randint(0, D, (n_out,), generator=g)
    op = torch.randint(0, 16, (n_out,), generator=g)
    out = packed.packed_layer(p, a, b, op, backend)
    want = reference.unpack(reference.packed_layer(p.words, a, b, op), B)
    assert torch.equal(out.unpack(), want)
    coef = gate_coefficients(torch.nn.functional.one_hot(op, 16).double(), False, torch.float64)
    assert torch.equal(want.double(), reference.logic_layer(x.double(), a, b, coef))  # packed == float eval
    for k in (1, D):
        counts = packed.group_count(p, k, backend)
        assert torch.equal(counts, x.reshape(B, k, D // k).sum(-1, dtype=torch.int32))


def is_valid_network(num_inputs, layers, num_classes) -> bool:
    if num_inputs < 1 or num_classes < 1:
        return False
    prev = num_inputs
    for a, b, op in layers:
        if not len(a) == len(b) == len(op) >= 1:
            return False
        if min(int(a.min()), int(b.min())) < 0 or max(int(a.max()), int(b.max())) >= prev:
            return False
        if int(op.min()) < 0 or int(op.max()) >= 16:
            return False
        prev = len(a)
    return prev % num_classes == 0


@given(
    n_in=st.integers(1, 10),
    widths=st.lists(st.integers(1, 10), min_size=1, max_size=3),
    k=st.integers(1, 3),
    corrupt=st.sampled_from(["none", "a", "b", "op", "length", "classes", "inputs"]),
    value=st.integers(-3, 20),
)
@settings(max_examples=examples(40))
def test_exporters_validate_networks(n_in, widths, k, corrupt, value):
    """A network given as a tuple is exported only if valid; anything else is a ValueError."""
    g = torch.Generator().manual_seed(n_in + 31 * value)
    layers, prev = [], n_in
    for w in widths:
        w *= k
        layers.append(
            [
                torch.randint(0, prev, (w,), generator=g),
                torch.randint(0, prev, (w,), generator=g),
                torch.randint(0, 16, (w,), generator=g),
            ]
        )
        prev = w
    num_inputs, num_classes = n_in, k
    if corrupt in ("a", "b", "op"):
        layers[-1]["abo".index(corrupt[0])][0] = value
    elif corrupt == "length":
        layers[0][1] = layers[0][1][:-1]
    elif corrupt == "classes":
        num_classes = value
    elif corrupt == "inputs":
        num_inputs = value
    net = (num_inputs, [tuple(t) for t in layers], num_classes)
    valid = is_valid_network(*net)
    for export in (c_source, verilog_source):
        if valid:
            export(net)
        else:
            with pytest.raises(ValueError):
                export(net)


@given(spec=model_strategy(), bits=st.sampled_from([8, 16, 32, 64]), B=st.integers(0, 70))
@settings(max_examples=examples(4))
def test_compiled_c_and_verilog_equal_eval_mode(spec, bits, B, tmp_path_factory):
    model, n_in = make_model(spec)
    x = torch.rand(B, n_in) > 0.5
    want = eval_counts(model, x)
    lib = CompiledLogicNet(model, num_bits=bits)
    lib.compile(opt_level=0, save_lib_path=str(tmp_path_factory.mktemp("c") / "net.so"))
    assert torch.equal(lib(x), want)
    source = verilog_source(model, module_name="fuzz_net")
    for s in range(min(B, 5)):
        assert eval_verilog(source, x[s].tolist())[1] == want[s].tolist()


@given(
    spec=model_strategy(),
    cut=st.integers(0, 10**6),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    tail=st.binary(max_size=3),
)
@settings(max_examples=examples(40))
def test_gate_file_round_trip_and_corruption(spec, cut, flips, tail):
    """save/load round-trips; a corrupted file loads as a valid network or raises ValueError, nothing else."""
    model, n_in = make_model(spec)
    buf = io.BytesIO()
    save_gates(model, buf)
    data = buf.getvalue()
    loaded = load_gates(io.BytesIO(data))
    x = torch.rand(9, n_in) > 0.5
    assert torch.equal(PackedLogicNet(loaded)(x), eval_counts(model, x))
    bad = bytearray(data[: cut % (len(data) + 1)] + tail)
    for pos, v in flips:
        if bad:
            bad[pos % len(bad)] = v
    try:
        net = load_gates(io.BytesIO(bytes(bad)))
    except ValueError:
        return
    PackedLogicNet(net)(torch.zeros(3, net[1].in_dim, dtype=torch.bool))  # what loads is a network that runs
