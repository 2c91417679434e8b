"""Logic gate network cases: training layers against difflogic's Python formulation and torchlogix, and packed
inference.

* ``layer`` (fwd+bwd, fwd): one ``LogicLayer(N, N)`` in training mode on ``x [B, N]`` (gradients for ``x`` and the
  logits, cotangent ``g [B, N]``). The ``difflogic`` provider is difflogic 0.1.0's ``bin_op_s`` formulation (16
  relaxed gates weighted by ``softmax(w)``, autograd), loaded from its PyPI sdist, which is downloaded once to
  the relaxops cache (``~/.cache/relaxops``; its CUDA extension is not built; set ``DIFFLOGIC_SRC`` to an unpacked
  sdist to use another). The ``torchlogix`` provider is torchlogix 0.2.2's ``LogicDense`` (raw LUT
  parametrization: the same 16 gates in the same order, softmax in training, four coefficient einsums, autograd)
  with our layer's connections and logits copied in.
* ``packed`` (fwd): the discretized network on a Boolean batch -> int32 class counts, for the MNIST "small" shape
  (400 inputs, 6 x 8000 gates, 10 classes) and the CIFAR-10 "medium" one (9216 inputs, 4 x 128000 gates). Providers:
  ``packed`` (all threads), ``packed-1t`` (one thread), ``packed-words`` (pre-packed input, one thread),
  ``packed-words-every-gate`` (the same without netlist simplification: every gate of the model), ``float-eval``
  (the float eval-mode forward with our kernels, the reference of the speed-ups), ``compiled-c`` (the exported C
  library, one thread) and ``torchlogix-circuit`` (torchlogix's fastest inference path: the same discretized
  network, gates and connections copied into its layers, traced to its ``Circuit``, simplified and compiled by
  gcc with 64 samples per word, one thread; its class counts equal ours); the C libraries on the MNIST shape only,
  built once per run. Rows report ns per image.
* ``packed_conv`` (fwd, not in the default set: ``--full --filter thermometer``): a small LogicTreeNet-like
  convolutional network (``CONV_NET``: 3-bit thermometer codes of 3x16x16 images, two tree convolutions of depth 3
  with OR pooling, two dense layers, GroupSum) on a Boolean batch -> class counts. Providers (suffix ``-conv``):
  ``packed`` (all threads), ``packed-1t``, ``packed-words`` (pre-packed input, one thread), ``packed-every-gate``
  (one thread, no simplification), ``compiled-c`` (our exported C, one thread), ``float-eval`` (our eval-mode
  forward) and ``torchlogix-eval`` (torchlogix 0.2.2's layers of the same network in eval mode, the reference of
  the goal: its ``Circuit``, which the issue's goal names, cannot be imported on Python < 3.12, and
  ``torchlogix-circuit-conv`` is skipped there).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import tarfile
import urllib.request
import warnings

import torch

import relaxops
from relaxops._backend import cache_dir, unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "logic"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/9c/18/e7ee8ec8a895f000411853174636f6a90480076da43ca3df40e1e4875f"
    "cc/difflogic-0.1.0.tar.gz"
)
SHAPES = {"mnist_small": (400, [8000] * 6, 10), "cifar_medium": (9216, [128000] * 4, 10)}


@functools.cache
def _difflogic_functional():
    """difflogic's functional.py (pure PyTorch) from the sdist, or None (loaded once per run)."""
    root = os.environ.get("DIFFLOGIC_SRC") or os.path.join(cache_dir(), "difflogic-0.1.0")
    path = os.path.join(root, "difflogic", "functional.py")
    if not os.path.exists(path) and "DIFFLOGIC_SRC" not in os.environ:
        os.makedirs(os.path.dirname(root), exist_ok=True)
        archive = root + ".tar.gz"
        try:
            urllib.request.urlretrieve(SDIST_URL, archive)
            with tarfile.open(archive) as tar:
                tar.extractall(os.path.dirname(root), filter="data")
        except OSError:
            return None
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("difflogic_functional", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _layer_inputs(case):
    p = case.params
    g = torch.Generator().manual_seed(0)
    x = torch.rand(p["batch"], p["n"], generator=g).to(case.device).requires_grad_()
    torch.manual_seed(0)
    layer = relaxops.LogicLayer(p["n"], p["n"], device=case.device)
    cot = (torch.randn(p["batch"], p["n"], generator=g).to(case.device),)
    return layer, x, cot


def _ours(backend):
    def make(case):
        if case.op == "param":
            return _param_ours(case, backend)
        if case.op == "conv":
            return _conv_ours(case, backend)
        layer, x, (g,) = _layer_inputs(case)
        layer.backend = backend
        if backend != "reference":  # the cotangent in the layout of our output, as our next layer would give it
            g = g.t().contiguous().t()
        return (lambda: (layer(x),)), [x, layer.weights], (g,)

    def skip(case):
        if case.op == "conv" and backend not in ("reference", "cpu"):
            return f"no {backend} kernel of LogicConv2d yet"
        if case.op not in ("layer", "conv", "param"):
            return "packed cases have their own providers"
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        if backend == "reference" and case.params.get("n", 0) * case.params["batch"] > 10**7:
            return "the reference is too slow at this size"
        return unavailable_reason(backend, device)

    return Provider(backend, make, reference=False, skip=skip)


def _difflogic_make(case):
    functional = _difflogic_functional()
    layer, x, cot = _layer_inputs(case)
    a, b = layer.indices

    def forward():
        return (functional.bin_op_s(x[..., a], x[..., b], torch.softmax(layer.weights, -1)),)

    return forward, [x, layer.weights], cot


def _difflogic_skip(case):
    if case.op == "param":
        return "difflogic has the softmax two-input layer only (the layer cases)"
    if case.op != "layer":
        return "difflogic has no convolution" if case.op == "conv" else "packed cases have their own providers"
    return None if _difflogic_functional() is not None else "difflogic's sdist is not available"


def _torchlogix_layers():
    """torchlogix's ``layers`` module. torchlogix 0.2.2 declares Python >= 3.10, but its package ``__init__``
    imports its ``circuit`` module, whose f-strings need Python 3.12: before 3.12 the layers (which do not use it)
    are imported under a package module that skips that ``__init__``."""
    if sys.version_info < (3, 12) and "torchlogix" not in sys.modules:
        sys.modules["torchlogix"] = importlib.util.module_from_spec(importlib.util.find_spec("torchlogix"))
    return importlib.import_module("torchlogix.layers")


def _torchlogix_dense(layer):
    """A torchlogix ``LogicDense`` with the connections and logits of our ``LogicLayer`` (same gate ids)."""
    dense = _torchlogix_layers().LogicDense(layer.in_dim, layer.out_dim, device=str(layer.weights.device))
    with torch.no_grad():
        dense.weight.copy_(layer.weights)
        dense.connections.indices.copy_(torch.stack(layer.indices))
    return dense


def _torchlogix_make(case):
    if case.op == "param":
        return _param_torchlogix(case)
    if case.op == "conv":
        return _conv_torchlogix_make(case)
    layer, x, cot = _layer_inputs(case)
    dense = _torchlogix_dense(layer).train()
    return (lambda: (dense(x),)), [x, dense.weight], cot


def _torchlogix_skip(case):
    if case.op == "packed_conv":
        return "packed conv cases have their own providers"
    if case.op not in ("layer", "conv", "param"):
        return "packed cases have their own providers"
    return missing("torchlogix")


def _conv_inputs(case):
    """``LogicConv2d(c_in, c_out, 3, depth, padding=1)`` in training mode on ``x [batch, c_in, size, size]``."""
    p = case.params
    g = torch.Generator().manual_seed(0)
    x = torch.rand(p["batch"], p["c_in"], p["size"], p["size"], generator=g).to(case.device).requires_grad_()
    torch.manual_seed(0)
    layer = relaxops.LogicConv2d(p["c_in"], p["c_out"], 3, p["depth"], padding=1, generator=g, device=case.device)
    cot = (torch.randn(p["batch"], p["c_out"], p["size"], p["size"], generator=g).to(case.device),)
    return layer, x, cot


def _conv_ours(case, backend):
    layer, x, cot = _conv_inputs(case)
    layer.backend = backend
    return (lambda: (layer(x),)), [x, layer.weights], cot


def _torchlogix_conv(layer, size):
    """A torchlogix ``LogicConv2d`` computing what our ``layer`` computes (stride 1): our leaves as its level-0
    pairs (our leaf ``2 s + r`` = its pair ``s``, role ``r``; positions in its padded input) and our node logits
    as its per-level weights (our node ``offset(level) + i`` = its node ``i`` of that level)."""
    conv = _torchlogix_layers().LogicConv2d(
        in_dim=size,
        channels=layer.in_channels,
        num_kernels=layer.out_channels,
        tree_depth=layer.tree_depth,
        receptive_field_size=layer.kernel_size[0],
        stride=layer.stride[0],
        padding=layer.padding[0],
        device=str(layer.weights.device),
    )
    with torch.no_grad():
        node = 0
        for w in conv.tree_weights:  # [nodes of the level, out_channels, 16]
            w.copy_(layer.weights[:, node : node + w.shape[0]].transpose(0, 1))
            node += w.shape[0]
        idx = conv.connections.indices[0]  # [2, K, P, L / 2, 3] of (h, w, c)
        leaves = layer.leaves.reshape(layer.out_channels, -1, 2, 3).permute(2, 0, 1, 3)  # [2, K, L / 2, 3]
        side = (size + 2 * layer.padding[0] - layer.kernel_size[0]) // layer.stride[0] + 1
        pos = torch.arange(side, device=idx.device) * layer.stride[0]
        oy, ox = (t.reshape(-1) for t in torch.meshgrid(pos, pos, indexing="ij"))
        idx[..., 0] = leaves[:, :, None, :, 1] + oy[None, None, :, None]
        idx[..., 1] = leaves[:, :, None, :, 2] + ox[None, None, :, None]
        idx[..., 2] = leaves[:, :, None, :, 0]
    return conv


def _conv_torchlogix_make(case):
    layer, x, cot = _conv_inputs(case)
    conv = _torchlogix_conv(layer, case.params["size"]).train()
    return (lambda: (conv(x),)), [x, *conv.tree_weights], cot


def _packed_model(shape):
    """The seeded model of the shape (on CPU, in eval mode; the same for every batch)."""
    n_in, widths, k = SHAPES[shape]
    torch.manual_seed(0)
    dims = [n_in, *widths]
    layers = [relaxops.LogicLayer(i, o) for i, o in zip(dims[:-1], dims[1:])]
    return torch.nn.Sequential(torch.nn.Flatten(), *layers, relaxops.GroupSum(k, tau=10.0)).eval()


def _packed_batch(case):
    x = torch.rand(case.params["batch"], SHAPES[case.params["shape"]][0], generator=torch.Generator().manual_seed(1))
    return (x > 0.5).to(case.device)


@functools.cache
def _compiled(name, shape):
    """The C library of the shape's model, as a function of the NumPy Boolean batch (compiled once per run: the
    cases of a shape differ in the batch only)."""
    model = _packed_model(shape)
    if name == "compiled-c":
        from relaxops.logic.compile import CompiledLogicNet

        lib = CompiledLogicNet(model, num_bits=64)
        lib.compile(opt_level=1)
        return lib
    from torchlogix import Circuit

    dense = [_torchlogix_dense(layer) for layer in model if isinstance(layer, relaxops.LogicLayer)]
    theirs = torch.nn.Sequential(*dense, _torchlogix_layers().GroupSum(model[-1].k))  # tau 1: integer counts
    with warnings.catch_warnings():  # torch.fx's constant folding warns once per folded index tensor
        warnings.simplefilter("ignore", UserWarning)
        circuit = Circuit.from_model(theirs, [dense[0].in_dim])
    circuit.simplify()
    circuit.compile(opt_level=1, pack_bits=64)
    return lambda xn: circuit(xn, use_compiled=True)


def _packed_provider(name, num_threads=0, words=False, reference=False, simplify=True):
    def make(case):
        x = _packed_batch(case)
        if name in ("compiled-c", "torchlogix-circuit"):
            lib = _compiled(name, case.params["shape"])
            xn = x.cpu().numpy()
            return (lambda: (lib(xn),)), [], (None,)
        model = _packed_model(case.params["shape"])
        if name == "float-eval":
            model, xf = model.to(case.device), x.float()
            return (lambda: (model(xf),)), [], (None,)
        net = relaxops.PackedLogicNet(model, device=case.device, num_threads=num_threads, simplify=simplify)
        inp = relaxops.pack_bits(x) if words else x
        return (lambda: (net(inp),)), [], (None,)

    def skip(case):
        if case.op != "packed":
            return "layer and conv cases have their own providers"
        if name in ("compiled-c", "torchlogix-circuit"):
            if case.device != "cpu" or case.params["shape"] != "mnist_small":
                return "the C libraries are timed on the MNIST shape on CPU"
            if name == "torchlogix-circuit":
                if sys.version_info < (3, 12):
                    return "torchlogix 0.2.2's Circuit needs Python >= 3.12 (its circuit.py uses 3.12 f-strings)"
                if case.params["batch"] % 64:
                    return "torchlogix's circuit takes batches of whole 64-sample words"
                return missing("torchlogix")
        if num_threads and case.device != "cpu":
            return "thread counts apply to the CPU"
        return None

    return Provider(name, make, reference=reference, skip=skip)


# --- packed inference of a convolutional network --------------------------------------------------------------
# A small LogicTreeNet-like network on 3-bit thermometer codes of RGB 16x16 images ([9, 16, 16] input bits):
# LogicConv2d(9 -> 32, 3x3, padding 1, depth 3) + OrPooling2d(2) + LogicConv2d(32 -> 64, 3x3, padding 1, depth 3)
# + OrPooling2d(2) + Flatten + LogicLayer(1024 -> 2000) x 2 + GroupSum(10): 99k gates before simplification.
CONV_NET = dict(channels=3, thermometer=3, size=16, conv=(32, 64), depth=3, dense=2000, classes=10)


@functools.cache
def _conv_net():
    p = CONV_NET
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    c_in, size, layers = p["channels"] * p["thermometer"], p["size"], []
    for c_out in p["conv"]:
        conv = relaxops.LogicConv2d(c_in, c_out, 3, p["depth"], padding=1, generator=g)
        layers += [conv, relaxops.logic.OrPooling2d(2)]
        c_in, size = c_out, size // 2
    n = c_in * size * size
    layers += [
        torch.nn.Flatten(),
        relaxops.LogicLayer(n, p["dense"]),
        relaxops.LogicLayer(p["dense"], p["dense"]),
        relaxops.GroupSum(p["classes"], tau=10.0),
    ]
    return torch.nn.Sequential(*layers).eval(), (p["channels"] * p["thermometer"], p["size"], p["size"])


def _conv_batch(case):
    """Thermometer codes (3 uniform thresholds per channel) of random RGB images: Boolean [B, 9, 16, 16]."""
    p = CONV_NET
    images = torch.rand(
        case.params["batch"], p["channels"], p["size"], p["size"], generator=torch.Generator().manual_seed(1)
    )
    return relaxops.logic.Thermometer(p["thermometer"])(images).bool()


@functools.cache
def _conv_compiled():
    from relaxops.logic.compile import CompiledLogicNet

    model, shape = _conv_net()
    lib = CompiledLogicNet(model, num_bits=64, input_shape=shape)
    lib.compile(opt_level=1)
    return lib


@functools.cache
def _conv_torchlogix_eval():
    """The same network in torchlogix 0.2.2's layers (leaves, connections and logits copied in), eval mode: its
    inference path on Python < 3.12, where its Circuit cannot be imported. Its class counts equal ours."""
    model, shape = _conv_net()
    tl, mods, size = _torchlogix_layers(), [], shape[1]
    for m in model:
        if isinstance(m, relaxops.LogicConv2d):
            mods.append(_torchlogix_conv(m, size))
        elif isinstance(m, relaxops.logic.OrPooling2d):
            mods.append(tl.OrPooling2d(m.kernel_size[0], m.stride[0]))
            size //= m.stride[0]
        elif isinstance(m, relaxops.LogicLayer):
            mods.append(_torchlogix_dense(m))
        elif isinstance(m, torch.nn.Flatten):
            mods.append(torch.nn.Flatten())
        else:
            mods.append(tl.GroupSum(m.k, tau=m.tau))
    return torch.nn.Sequential(*mods).eval()


def _conv_packed_provider(name, num_threads=0, reference=False, simplify=True):
    def make(case):
        model, shape = _conv_net()
        x = _conv_batch(case)
        if name == "torchlogix-eval":
            theirs, xf = _conv_torchlogix_eval(), x.float()
            return (lambda: (theirs(xf),)), [], (None,)
        if name == "compiled-c":
            lib, xn = _conv_compiled(), x.reshape(x.shape[0], -1).numpy()
            return (lambda: (lib(xn),)), [], (None,)
        if name == "float-eval":
            xf = x.float()
            return (lambda: (model(xf),)), [], (None,)
        net = relaxops.PackedLogicNet(model, input_shape=shape, num_threads=num_threads, simplify=simplify)
        inp = relaxops.pack_bits(x.reshape(x.shape[0], -1)) if name == "packed-words" else x
        return (lambda: (net(inp),)), [], (None,)

    def skip(case):
        if case.op != "packed_conv":
            return "other cases have their own providers"
        if case.device != "cpu":
            return "the packed conv network is timed on the CPU"
        if name == "torchlogix-circuit":
            if sys.version_info < (3, 12):
                return "torchlogix 0.2.2's Circuit needs Python >= 3.12 (its circuit.py uses 3.12 f-strings)"
            return "torchlogix's Circuit of this conv network is not wired up here yet"
        if name == "torchlogix-eval":
            return missing("torchlogix")
        return None

    return Provider(name + "-conv", make, reference=reference, skip=skip)


# --- one training step per parametrization and layer kind, against torchlogix ----------------------------------
# op "param": fwd+bwd of one layer in training mode, built from torchlogix's arguments (kind: "dense" two-input
# layer, "lut" k-input lookup-table layer, "conv" tree convolution; parametrization in torchlogix's names: raw =
# our softmax, light, warp = our walsh). Ours is relaxops.compat.torchlogix's layer from seed 0 (a relaxops
# LogicLayer / LogicLUTLayer / LogicConv2d: our kernels); torchlogix's layer of the same arguments gets its state
# (connections and parameters) through state_dict, so both compute the same function.


def _param_layer(case):
    """(our layer, x, cotangent) of a ``param`` case."""
    from relaxops.compat import torchlogix as compat

    p = case.params
    options = dict(weight_init="random", forward_sampling=p.get("sampling", "soft"))
    kw = dict(lut_rank=p["k"], parametrization=p["parametrization"], parametrization_kwargs=options)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if p["kind"] == "conv":
        layer = compat.LogicConv2d(
            in_dim=p["size"], channels=p["c_in"], num_kernels=p["c_out"], tree_depth=p["depth"],
            receptive_field_size=3, padding=1, device=case.device, **kw,
        )  # fmt: skip
        x = torch.rand(p["batch"], p["c_in"], p["size"], p["size"], generator=g)
        cot = torch.randn(p["batch"], p["c_out"], p["size"], p["size"], generator=g)
    else:
        layer = compat.LogicDense(p["n"], p["n"], device=case.device, **kw)
        x, cot = torch.rand(p["batch"], p["n"], generator=g), torch.randn(p["batch"], p["n"], generator=g)
    return layer.train(), x.to(case.device).requires_grad_(), cot.to(case.device)


def _param_ours(case, backend):
    layer, x, g = _param_layer(case)
    layer.backend = backend
    with torch.no_grad():
        y = layer(x)
    if y.dim() == 2 and not y.is_contiguous() and y.t().is_contiguous():  # our feature-major output's layout
        g = g.t().contiguous().t()
    return (lambda: (layer(x),)), [x, *layer.parameters()], (g,)


def _param_torchlogix(case):
    ours, x, g = _param_layer(case)
    tl, p = _torchlogix_layers(), case.params
    options = dict(weight_init="random", forward_sampling=p.get("sampling", "soft"))
    kw = dict(lut_rank=p["k"], parametrization=p["parametrization"], parametrization_kwargs=options)
    if p["kind"] == "conv":
        theirs = tl.LogicConv2d(
            in_dim=p["size"], channels=p["c_in"], num_kernels=p["c_out"], tree_depth=p["depth"],
            receptive_field_size=3, padding=1, device=case.device, **kw,
        )  # fmt: skip
    else:
        theirs = tl.LogicDense(p["n"], p["n"], device=case.device, **kw)
    theirs.load_state_dict(ours.state_dict())
    theirs.train()
    return (lambda: (theirs(x),)), [x, *theirs.parameters()], (g,)


_CONV_PROVIDERS = (
    ("float-eval", dict(reference=True)),
    ("packed", {}),
    ("packed-1t", dict(num_threads=1)),
    ("packed-words", dict(num_threads=1)),
    ("packed-every-gate", dict(num_threads=1, simplify=False)),
    ("compiled-c", {}),
    ("torchlogix-eval", dict(reference=True)),
    ("torchlogix-circuit", dict(reference=True)),
)
for _name, _kw in _CONV_PROVIDERS:
    add_provider(FAMILY, _conv_packed_provider(_name, **_kw))

for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("difflogic", _difflogic_make, reference=True, skip=_difflogic_skip))
add_provider(FAMILY, Provider("torchlogix", _torchlogix_make, reference=True, skip=_torchlogix_skip))
add_provider(FAMILY, _packed_provider("float-eval", reference=True))
add_provider(FAMILY, _packed_provider("packed"))
add_provider(FAMILY, _packed_provider("packed-1t", num_threads=1))
add_provider(FAMILY, _packed_provider("packed-words", num_threads=1, words=True))
add_provider(FAMILY, _packed_provider("packed-words-every-gate", num_threads=1, words=True, simplify=False))
add_provider(FAMILY, _packed_provider("compiled-c"))
add_provider(FAMILY, _packed_provider("torchlogix-circuit", reference=True))

# Training: one layer of N neurons, fwd+bwd and fwd, at batch 100 and 1000; goal on CPU: >= 20x difflogic's
# Python path at N = 8000, B = 100. Default run (CPU and GPU): fwd+bwd at B = 100 for N = 2000, 8000, 64000 (the
# plotted sweep).
for _device in ("cpu", "cuda"):
    for _n in (2000, 8000, 64000):
        for _batch in (100, 1000):
            _goal = ("difflogic", 20.0) if _device == "cpu" and _n == 8000 and _batch == 100 else None
            _label = f"N={_n} B={_batch}"
            add_case(
                Case(
                    FAMILY,
                    "layer",
                    _label,
                    dict(n=_n, batch=_batch),
                    "fwd+bwd",
                    _device,
                    default=_batch == 100,
                    goal=_goal,
                    sweep="n",
                )
            )
            add_case(Case(FAMILY, "layer", _label, dict(n=_n, batch=_batch), "fwd", _device, sweep="n"))
    # Tree convolution: LogicConv2d(16 -> 64, 3x3, padding 1) on 16x16 maps, B = 64, depth 2 and 3,
    # fwd+bwd in training mode; goal on CPU: >= 4x torchlogix 0.2.2's LogicConv2d of the same shape.
    for _depth in (2, 3):
        add_case(
            Case(
                FAMILY,
                "conv",
                f"C=16->64 16x16 k=3 d={_depth} B=64",
                dict(batch=64, c_in=16, c_out=64, size=16, depth=_depth),
                "fwd+bwd",
                _device,
                default=_depth == 3,
                goal=("torchlogix", 4.0) if _device == "cpu" else None,
                sweep="depth",
            )
        )
    # Packed inference throughput against the batch (ns per image; goal: <= 150 ns per image on one CPU thread,
    # MNIST small). Default run: MNIST small, on CPU up to B = 16384 (the float-eval reference takes ~1.5 s per
    # call there on 2 cores at load average ~3; at 65536 ~4x that and 4.6 GB).
    for _shape, _batch in (
        ("mnist_small", 1024),
        ("mnist_small", 16384),
        ("mnist_small", 65536),
        ("cifar_medium", 8192),
    ):
        add_case(
            Case(
                FAMILY,
                "packed",
                f"{_shape} B={_batch}",
                dict(shape=_shape, batch=_batch),
                "fwd",
                _device,
                default=_shape == "mnist_small" and (_batch < 65536 or _device == "cuda"),
                items=_batch,
                sweep="batch",
            )
        )
    # Packed inference of the convolutional network above (ns per image).
    # The goal (>= 10x torchlogix's compiled Circuit, CPU) names a provider that cannot be imported on
    # Python < 3.12 (torchlogix-circuit-conv, skipped there): bench/torchlogix_circuit_conv.py times that Circuit of
    # the same network in a Python >= 3.12 environment. No goal is set here, so that the eval-mode torchlogix
    # reference (thousands of times slower) is not reported as meeting it.
    add_case(
        Case(
            FAMILY,
            "packed_conv",
            "thermometer 3x16x16 conv d=3 B=1024",
            dict(batch=1024),
            "fwd",
            _device,
            default=False,
            items=1024,
            sweep="batch",
        )
    )

# One training step (fwd+bwd) per parametrization and layer kind against torchlogix 0.2.2 (goal on CPU: ahead of it
# in every row): dense two-input layers (N = 8000, B = 100), k-input LUT layers (k = 4, 6), tree convolutions
# (16 -> 32 channels, 3x3, depth 3, 16x16 maps, B = 32). Not in the default run: --full --filter param.
for _kind, _k, _params in (
    ("dense", 2, dict(n=8000, batch=100)),
    ("lut", 4, dict(n=8000, batch=100)),
    ("lut", 6, dict(n=8000, batch=100)),
    ("conv", 2, dict(c_in=16, c_out=32, size=16, depth=3, batch=32)),
):
    for _p in ("raw", "light", "warp") if _k == 2 else ("light", "warp"):
        _size = f"N={_params['n']}" if "n" in _params else "C=16->32 16x16 d=3"
        for _device in ("cpu", "cuda"):
            add_case(
                Case(
                    FAMILY,
                    "param",
                    f"{_kind} {_p} k={_k} {_size} B={_params['batch']}",
                    dict(kind=_kind, parametrization=_p, k=_k, **_params),
                    "fwd+bwd",
                    _device,
                    goal=("torchlogix", 1.0) if _device == "cpu" else None,
                    sweep="k",
                )
            )
