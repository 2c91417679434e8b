"""opcheck of the registered OT sort ops and torch.compile (fullgraph, static and dynamic shapes) of the public
functions, in both backward modes."""

import math

import pytest
import torch
from relaxops import ot_quantile, ot_rank, ot_sort, ot_topk
from relaxops.otsort import ops, squash
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, gapped


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck(backend, device):
    x = gapped((3, 6), gap=0.2).to(device)
    xs = squash(x).contiguous()
    y = torch.linspace(0, 1, 4, dtype=torch.float64, device=device).repeat(3, 1).contiguous()
    la = torch.full((3, 6), -math.log(6), dtype=torch.float64, device=device)
    lb = torch.full((3, 4), -math.log(4), dtype=torch.float64, device=device)
    u, v = x.clone(), torch.rand(3, 4, dtype=torch.float64, device=device)
    for unrolled in (False, True):
        # tolerance 1e-3: converges in 10 iterations (20-25 at 1e-6, slow in interpreted triton)
        f, g, e, it, hist = ops.ot_sinkhorn_fwd(xs, y, la, lb, 0.2, 0.3, 0.9, 1e-3, 40, unrolled, backend)
        grad = xs.clone().requires_grad_(True)
        torch.library.opcheck(ops.ot_sinkhorn_fwd, (grad, y, la, lb, 0.2, 0.3, 0.9, 1e-3, 40, unrolled, backend))
        torch.library.opcheck(
            ops.ot_sinkhorn_bwd,
            (
                torch.randn_like(f),
                torch.randn_like(g),
                xs,
                y,
                la,
                lb,
                f,
                g,
                e,
                it,
                hist,
                0.2,
                0.3,
                0.9,
                unrolled,
                backend,
            ),
        )
    cols, rows, plan = ops.ot_apply_fwd(xs, y, f, g, e, la, lb, u, v, True, backend)
    for want in (False, True):
        torch.library.opcheck(
            ops.ot_apply_fwd,
            (xs.clone().requires_grad_(True), y, f, g, e, la, lb, u.clone().requires_grad_(True), v, want, backend),
        )
    for gplan in (None, torch.randn_like(plan)):
        torch.library.opcheck(
            ops.ot_apply_bwd,
            (torch.randn_like(cols), torch.randn_like(rows), gplan, xs, y, f, g, e, la, lb, u, v, cols, rows, backend),
        )


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
