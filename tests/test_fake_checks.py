"""The fake kernels of the logic and render ops run the eager checks: a bad argument raises the same error while
torch.compile traces (FakeTensor) as in an eager call."""

from __future__ import annotations

import pytest
import relaxops
import torch
from relaxops.logic import ops as logic_ops
from relaxops.render import ops as render_ops
from relaxops.render.relaxations import RasterSettings
from torch._subclasses.fake_tensor import FakeTensorMode


def _logic_args():
    layer = relaxops.LogicLayer(5, 6)
    w = layer.weights.detach()[:, :8].contiguous()  # [n_out, 8]: must be [n_out, 16]
    return torch.rand(5, 3), layer.idx_a, layer.idx_b, w, layer.csr_start, layer.csr_entry


def _render_args():
    ints, floats = RasterSettings.from_options(4).to_lists()
    fv, tex = torch.rand(2, 9), torch.rand(2, 1, 3, dtype=torch.float64)  # textures: not fv's dtype
    return fv, tex, torch.tensor([0, 2]), ints, floats


CASES = {
    "logic_fwd": (
        lambda xt, a, b, w, s, e: logic_ops.logic_fwd(xt, a, b, w, s, e, True, "cpu"),
        _logic_args,
        ValueError,
        r"relaxops::logic_fwd: w must have shape \[6, 16\]",
    ),
    "render_fwd": (
        lambda fv, tex, mo, ints, floats: render_ops.render_fwd(fv, tex, mo, ints, floats, "cpu"),
        _render_args,
        TypeError,
        r"relaxops::render_fwd: textures must have dtype",
    ),
}


@pytest.mark.parametrize("op", list(CASES))
def test_fake_kernel_raises_as_eager(op):
    call, make, exc, match = CASES[op]
    args = make()
    with pytest.raises(exc, match=match):
        call(*args)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        with pytest.raises(exc, match=match):
            call(*fake)


@pytest.mark.parametrize("op", list(CASES))
def test_compiled_graph_raises_as_eager(op):
    call, make, exc, match = CASES[op]
    args = make()
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=match) as info:  # dynamo wraps the fake kernel's error
        compiled(*args)
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(e, exc) for e in chain) or exc.__name__ in str(info.value)
