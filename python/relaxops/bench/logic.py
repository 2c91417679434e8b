"""Logic gate network cases: training layers against difflogic's Python formulation, and packed inference.

* ``layer`` (fwd+bwd, fwd): one ``LogicLayer(N, N)`` in training mode on ``x [B, N]`` (gradients for ``x`` and the
  logits, cotangent ``g [B, N]``). The ``difflogic`` provider is difflogic 0.1.0's ``bin_op_s`` formulation (16
  relaxed gates weighted by ``softmax(w)``, autograd), loaded from its PyPI sdist, which is downloaded once to
  the relaxops cache (``~/.cache/relaxops``; its CUDA extension is not built; set ``DIFFLOGIC_SRC`` to an unpacked
  sdist to use another).
* ``packed`` (fwd): the discretized network on a Boolean batch -> int32 class counts, for the MNIST "small" shape
  (400 inputs, 6 x 8000 gates, 10 classes) and the CIFAR-10 "medium" one (9216 inputs, 4 x 128000 gates). Providers:
  ``packed`` (all threads), ``packed-1t`` (one thread), ``packed-words`` (pre-packed input, one thread),
  ``packed-words-every-gate`` (the same without netlist simplification: every gate of the model), ``float-eval``
  (the float eval-mode forward with our kernels, the reference of the speed-ups) and ``compiled-c``
  (the exported C library, one thread; MNIST shape only). Rows report ns per image.
"""

from __future__ import annotations

import importlib.util
import os
import tarfile
import urllib.request

import torch

import relaxops
from relaxops._backend import cache_dir, unavailable_reason

from .registry import Case, Provider, add_case, add_provider

FAMILY = "logic"
SDIST_URL = ("https://files.pythonhosted.org/packages/9c/18/e7ee8ec8a895f000411853174636f6a90480076da43ca3df40e1e4875f"
             "cc/difflogic-0.1.0.tar.gz")
SHAPES = {"mnist_small": (400, [8000] * 6, 10), "cifar_medium": (9216, [128000] * 4, 10)}


def _difflogic_functional():
    """difflogic's functional.py (pure PyTorch) from the sdist, or None."""
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
        layer, x, (g,) = _layer_inputs(case)
        layer.backend = backend
        if backend != "reference":  # the cotangent in the layout of our output, as our next layer would give it
            g = g.t().contiguous().t()
        return (lambda: (layer(x),)), [x, layer.weights], (g,)

    def skip(case):
        if case.op != "layer":
            return "packed cases have their own providers"
        device = torch.device(case.device)
        if backend == "triton" and device.type == "cpu":
            return "the triton interpreter is too slow to time"
        if backend == "reference" and case.params["n"] * case.params["batch"] > 10**7:
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
    if case.op != "layer":
        return "packed cases have their own providers"
    return None if _difflogic_functional() is not None else "difflogic's sdist is not available"


def _packed_model(case):
    n_in, widths, k = SHAPES[case.params["shape"]]
    torch.manual_seed(0)
    dims = [n_in, *widths]
    layers = [relaxops.LogicLayer(i, o) for i, o in zip(dims[:-1], dims[1:])]
    model = torch.nn.Sequential(torch.nn.Flatten(), *layers, relaxops.GroupSum(k, tau=10.0)).eval()
    x = torch.rand(case.params["batch"], n_in, generator=torch.Generator().manual_seed(1)) > 0.5
    return model, x.to(case.device)


def _packed_provider(name, num_threads=0, words=False, reference=False, simplify=True):
    def make(case):
        model, x = _packed_model(case)
        if name == "float-eval":
            xf = x.float()
            return (lambda: (model(xf),)), [], (None,)
        if name == "compiled-c":
            from relaxops.logic.compile import CompiledLogicNet

            lib = CompiledLogicNet(model, num_bits=64)
            lib.compile(opt_level=1)
            xn = x.cpu().numpy()
            return (lambda: (lib(xn),)), [], (None,)
        net = relaxops.PackedLogicNet(model, device=case.device, num_threads=num_threads, simplify=simplify)
        inp = relaxops.pack_bits(x) if words else x
        return (lambda: (net(inp),)), [], (None,)

    def skip(case):
        if case.op != "packed":
            return "layer cases have their own providers"
        if name == "compiled-c" and (case.device != "cpu" or case.params["shape"] != "mnist_small"):
            return "the C library is timed on the MNIST shape on CPU"
        if num_threads and case.device != "cpu":
            return "thread counts apply to the CPU"
        return None

    return Provider(name, make, reference=reference, skip=skip)


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, Provider("difflogic", _difflogic_make, reference=True, skip=_difflogic_skip))
add_provider(FAMILY, _packed_provider("float-eval", reference=True))
add_provider(FAMILY, _packed_provider("packed"))
add_provider(FAMILY, _packed_provider("packed-1t", num_threads=1))
add_provider(FAMILY, _packed_provider("packed-words", num_threads=1, words=True))
add_provider(FAMILY, _packed_provider("packed-words-every-gate", num_threads=1, words=True, simplify=False))
add_provider(FAMILY, _packed_provider("compiled-c"))

# Training: layers of 8k and 64k neurons at batch 100 and 1000; goal on CPU: >= 20x difflogic's Python path.
for _device in ("cpu", "cuda"):
    for _n in (8000, 64000):
        for _batch in (100, 1000):
            _goal = ("difflogic", 20.0) if _device == "cpu" else None
            add_case(Case(FAMILY, "layer", f"N={_n} B={_batch}", dict(n=_n, batch=_batch), "fwd+bwd", _device,
                          default=_n == 8000 and _batch == 100, goal=_goal))
            add_case(Case(FAMILY, "layer", f"N={_n} B={_batch}", dict(n=_n, batch=_batch), "fwd", _device))
    # Packed inference throughput (ns per image; goal: <= 150 ns per image on one CPU thread, MNIST small).
    for _shape, _batch in (("mnist_small", 65536), ("cifar_medium", 8192)):
        add_case(Case(FAMILY, "packed", f"{_shape} B={_batch}", dict(shape=_shape, batch=_batch), "fwd", _device,
                      default=_shape == "mnist_small", items=_batch))
