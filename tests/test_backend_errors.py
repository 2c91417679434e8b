"""One error type for a backend that cannot run, in every family; a bad backend name stays a ValueError. CPU tensors
with backend 'cuda' cannot run on any machine (the CUDA kernels take CUDA tensors)."""

from __future__ import annotations

import pytest
import relaxops
import torch
from relaxops import BackendUnavailableError, _backend
from relaxops.logic import ops as logic_ops
from relaxops.render import ops as render_ops
from relaxops.render.relaxations import RasterSettings
from relaxops.training.solvers import assignment

needs_no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(), reason="backend 'cuda' must be unavailable for CPU tensors"
)

x = torch.randn(3, 5)
layer = relaxops.LogicLayer(5, 6)
fv, tex = torch.rand(1, 2, 9), torch.rand(1, 2, 1, 3)
cases = {  # family: a public call taking a backend
    "sortnet": lambda b: relaxops.sort(x, backend=b),
    "sortnet rank": lambda b: relaxops.rank(x, backend=b),
    "sortnet topk": lambda b: relaxops.topk(x, 2, backend=b),
    "otsort": lambda b: relaxops.ot_sort(x, backend=b),
    "fastsort": lambda b: relaxops.soft_sort(x, backend=b),
    "baselines": lambda b: relaxops.neuralsort(x, backend=b),
    "render": lambda b: relaxops.rasterize(fv, tex, image_size=4, backend=b),
    "render_buffers": lambda b: relaxops.render.render_buffers(fv, image_size=4, backend=b),
    "logic": lambda b: relaxops.logic.logic_layer(torch.rand(3, 5), layer.idx_a, layer.idx_b, layer.weights, backend=b),
    "logic packed": lambda b: relaxops.pack_bits(torch.zeros(3, 5, dtype=torch.bool), backend=b),
    "algorithms": lambda b: relaxops.bubble_sort(x, backend=b),
    "algorithms edit_distance": lambda b: relaxops.edit_distance(torch.rand(2, 3, 4), torch.rand(2, 3, 4), backend=b),
    "algorithms shortest_path": lambda b: relaxops.shortest_path(torch.rand(1, 3, 3), backend=b),
    "training": lambda b: assignment(torch.randn(3, 3), backend=b),
}


def test_exported():
    assert relaxops.BackendUnavailableError is _backend.BackendUnavailableError
    assert issubclass(BackendUnavailableError, RuntimeError)


@pytest.mark.parametrize("family", list(cases))
def test_every_family_raises_backend_unavailable(family):
    with pytest.raises(BackendUnavailableError, match=r"backend 'cuda' cannot run: .*CUDA tensors"):
        cases[family]("cuda")


@pytest.mark.parametrize("family", list(cases))
def test_bad_backend_name_is_a_value_error(family):
    with pytest.raises(ValueError, match="backend"):
        cases[family]("gpu")


def test_registered_ops_raise_backend_unavailable():
    a, b, w = layer.idx_a, layer.idx_b, layer.weights.detach()
    start, entry = layer.csr_start, layer.csr_entry
    with pytest.raises(BackendUnavailableError, match="relaxops::logic_fwd: backend 'cuda' cannot run"):
        logic_ops.logic_fwd(torch.rand(5, 3), a, b, w, start, entry, True, "cuda")
    ints, floats = RasterSettings.from_options(4).to_lists()
    with pytest.raises(BackendUnavailableError, match="relaxops::render_fwd: backend 'cuda' cannot run"):
        render_ops.render_fwd(fv[0], tex[0], torch.tensor([0, 2]), ints, floats, "cuda")
    with pytest.raises(BackendUnavailableError, match="relaxops::sortnet_values_fwd: backend 'cuda' cannot run"):
        torch.ops.relaxops.sortnet_values_fwd(x, "bitonic", 4, 3.0, 0.25, "cuda")


def test_launcher():
    with pytest.raises(ValueError, match=r"relaxops::op: backend must be one of \['cpu'\], got 'triton'"):
        _backend.launcher("op", "triton", torch.device("cpu"), cpu=object)
    kernels = object()
    assert _backend.launcher("op", "cpu", torch.device("cpu"), cpu=kernels) is kernels
    with pytest.raises(BackendUnavailableError, match="relaxops::op: backend 'cpu' cannot run: .*CPU tensors"):
        _backend.launcher("op", "cpu", torch.device("meta"), cpu=kernels)


def test_requested_reads_the_environment(monkeypatch):
    monkeypatch.delenv("RELAXOPS_BACKEND", raising=False)
    assert _backend.requested("auto") == "auto"
    assert _backend.requested("cpu") == "cpu"
    monkeypatch.setenv("RELAXOPS_BACKEND", "reference")
    assert _backend.requested("auto") == "reference"
    assert _backend.requested("cpu") == "cpu"
    monkeypatch.setenv("RELAXOPS_BACKEND", "gpu")
    with pytest.raises(ValueError, match="RELAXOPS_BACKEND must be one of"):
        _backend.requested("auto")
