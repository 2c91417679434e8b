"""opcheck of the registered OT sort ops and torch.compile (fullgraph, static and dynamic shapes) of the public
functions, in both backward modes."""

import pytest
import torch
from relaxops import ot_quantile, ot_rank, ot_sort, ot_topk
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, gapped, opcheck_calls

from .test_otsort import ot_call


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    """opcheck of the ops that the reference checks' calls (test_otsort.py's OPS) make, in both backward modes,
    with and without the plan (whose gradient the plan-reading backward takes): the solve at tolerance 1e-3, which
    converges in about 10 iterations (opcheck calls each op a dozen times; the interpreter runs every iteration)."""
    x = gapped((3, 6), gap=0.2).to(device)
    a = torch.rand(3, 6, dtype=torch.float64, device=device) + 0.5
    solve = dict(epsilon=0.2, tolerance=1e-3, max_iterations=40)
    cases = [("sort", dict(backward="implicit")), ("rank_desc", dict(backward="unrolled"))]
    cases += [("rank", dict(a=a, return_plan=True, backward="implicit")), ("sort_m3", dict(return_plan=True))]
    for op, kw in cases:
        fn, args, kwargs = ot_call(op, x, backend, **solve, **kw)
        names = opcheck_calls(fn, *args, **kwargs)
        want = ["relaxops::ot_sinkhorn_fwd", "relaxops::ot_apply_fwd", "relaxops::ot_apply_bwd"]
        assert names == want + ["relaxops::ot_sinkhorn_bwd"], (op, names)


# each backward mode and each dynamic setting once (the four combinations cost ~100 s of CI; the graph of a backward
# mode does not depend on dynamic, which only changes how the second shape is handled). Inductor spends its time on
# C++ for the plain-PyTorch code around the ops, torch's to test: aot_eager (dynamo, fake tensors, AOT autograd, no
# codegen) for implicit; inductor for unrolled (a static, then a dynamic graph; a history of data-dependent size)
@pytest.mark.parametrize(
    "backward, dynamic, compiler", [("implicit", True, "aot_eager"), ("unrolled", False, "inductor")]
)
def test_compile_fullgraph(backward, dynamic, compiler):
    backend = "cpu" if ("cpu", "cpu") in [p.values for p in BACKEND_DEVICE] else "reference"
    torch._dynamo.reset()
    x = gapped((2, 9), gap=0.2).requires_grad_(True)

    def f(v):
        kw = dict(epsilon=0.05, backward=backward, backend=backend)
        top = ot_topk(v, 3, **kw)
        return ot_rank(v, **kw), ot_sort(v, **kw), top.values, top.mask, ot_quantile(v, [0.2, 0.7], **kw)

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic, backend=compiler)
    for xx in (x, gapped((3, 11), gap=0.2).requires_grad_(True)):
        eager, comp = f(xx), compiled(xx)
        for a, b in zip(comp, eager):
            assert_close(a, b, torch.float64)
        g1 = torch.autograd.grad(sum(o.sum() for o in comp), xx)[0]
        g2 = torch.autograd.grad(sum(o.sum() for o in eager), xx)[0]
        assert_close(g1, g2, torch.float64)


def test_compile_cache_key_carries_the_version():
    # a graph compiled by another relaxops (whose ops' fake kernels returned other shapes) must not be replayed from
    # torch's on-disk caches, which key graphs by their code only
    import relaxops
    import torch.compiler.config as cfg

    assert f"relaxops-{relaxops.__version__}" in cfg.cache_key_tag.split()
