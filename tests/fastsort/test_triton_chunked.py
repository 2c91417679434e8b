"""The chunked PAV and chunked backward sums of the Triton kernels (fastsort/triton.py: rows of n >= LONG_ROW),
forced onto short rows through the launchers' ``chunks`` (run through TRITON_INTERPRET=1 here: small cases only),
against the sequential Triton kernel and the float64 reference; on a GPU, long rows through the public functions.

Bound (as tests/fastsort/test_chunked.py): the blocks must be EQUAL to the sequential PAV's (PAV's blocks are
unique; these inputs keep merge decisions away from rounding ties, and exact ties pool exactly); outputs and
gradients within the float64 tolerance of tests/testing.py (rtol 1e-9, atol 1e-10 times the scales of
test_fastsort.py: merged statistics and block sums are the same sums formed in another order, a few ulps of the
block's terms); repeats bit-identical (no atomics: crossing blocks are summed in chunk order)."""

import pytest
import torch
from relaxops import soft_rank, soft_sort
from relaxops.fastsort import ops
from testing import KERNEL_BACKEND_DEVICE, assert_close

from .test_fastsort import scales, soft_grads

if not any(p.values == ("triton", "cpu") for p in KERNEL_BACKEND_DEVICE):
    pytest.skip("the triton backend does not run on CPU tensors here", allow_module_level=True)
if not any(p.values[0] == "cpu" for p in KERNEL_BACKEND_DEVICE):
    pytest.skip("relaxops._C (the sequential PAV compared with) is not built", allow_module_level=True)

from relaxops.fastsort import triton as kernels  # noqa: E402

FWD = {"rank": ops.soft_rank_fwd, "sort": ops.soft_sort_fwd}
BWD = {"rank": ops.soft_rank_bwd, "sort": ops.soft_sort_bwd}
FNS = {"rank": soft_rank, "sort": soft_sort}
# (n, chunks, strength, descending): chunks of 1 position, uneven trees (3 chunks of 2 + 2 + 1 and 3 + 3 + 1),
# chunks of 4 on n = 33, 64 chunks of 2 on n = 100 (the last 14 empty); strengths from no pooling to one pool
CASES = [
    (1, 1, 0.5, False),
    (2, 2, 30.0, True),
    (3, 3, 0.05, False),
    (5, 3, 0.5, True),
    (7, 3, 30.0, False),
    (33, 9, 0.5, True),
    (33, 9, 30.0, False),
    (100, 64, 0.5, False),
]


def rows(op, n):
    """A random row, integer ties, a nearly sorted row (long pools at large strengths), +-inf (soft_rank's infinite
    groups; soft_sort: a NaN row) and a NaN row."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(5, n, generator=g, dtype=torch.float64) * 2
    x[1] = torch.randint(-3, 4, (n,), generator=g).double()
    x[2] = torch.linspace(-1, 1, n, dtype=torch.float64) + 0.1 * x[0]
    x[3, 0], x[3, n // 2] = torch.inf, -torch.inf
    if n >= 5:
        x[3, -1] = torch.inf
    x[4, n // 3] = torch.nan
    return x


def launch(op, x, reg, eps, descending, g, chunks):
    """(out, perm, block, grad_x) of the Triton launchers (fresh buffers: NaN-filled floats, block -1)."""
    out, perm = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int64, device=x.device)
    block = torch.full(x.shape, -1, dtype=torch.int32, device=x.device)
    kernels.forward(op, x, reg, eps, descending, out, perm, block, chunks=chunks)
    gx = torch.empty_like(x)
    kernels.backward(op, g, out, x, perm, block, reg, eps, descending, gx, chunks=chunks)
    return out, perm, block, gx


def bits(t):
    return t.view(torch.int64 if t.dtype == torch.float64 else torch.int32)


@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", ["l2", "kl"])
def test_chunked_equals_sequential(op, reg):
    """Blocks equal to the sequential PAV's (the cpu backend's; at n = 33 also the sequential Triton kernel's),
    outputs and gradients as it and as the float64 reference, NaN rows NaN, soft_rank's infinities at the extreme
    ranks with gradient 0; strengths from no pooling to one pool, descending; repeats bit-identical."""
    fwd, bwd = FWD[op], BWD[op]
    for n, chunks, eps, descending in CASES:
        x = rows(op, n)
        g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        out, perm, block, gx = got = launch(op, x, reg, eps, descending, g, chunks)
        what = f"n={n} chunks={chunks} eps={eps} descending={descending}"
        c_out, c_perm, c_block = fwd(x, reg, eps, descending, "cpu")
        c_gx = bwd(g, c_out, x, c_perm, c_block, reg, eps, descending, "cpu")
        assert torch.equal(perm, c_perm) and torch.equal(block, c_block), what
        s_out, s_grad = scales(op, eps, x[:3])
        assert_close(out, c_out, torch.float64, scale=s_out, msg=what)
        assert_close(gx, c_gx, torch.float64, scale=s_grad, msg=what)
        fin = 4 if op == "rank" else 3  # rows without a NaN (soft_sort: without an infinity)
        assert torch.isfinite(out[:fin]).all() and torch.isfinite(gx[:fin]).all(), what
        assert out[fin:].isnan().all() and gx[fin:].isnan().all(), what
        assert torch.equal(block[fin:], torch.arange(n, dtype=torch.int32).expand(5 - fin, n)), what
        if op == "rank":
            assert (gx[3][x[3].isinf()] == 0).all(), what
        xr = x[:fin].clone().requires_grad_(True)
        ref = FNS[op](xr, reg, eps, descending, backend="reference")
        (ref_grad,) = torch.autograd.grad(ref, xr, g[:fin])
        assert_close(out[:fin], ref.detach(), torch.float64, scale=s_out, msg=what)
        assert_close(gx[:fin], ref_grad, torch.float64, scale=s_grad, msg=what)
        if n == 33 and eps == 0.5:
            seq = launch(op, x, reg, eps, descending, g, None)  # n < LONG_ROW: the sequential kernel
            assert torch.equal(seq[2], block), what
            assert_close(out, seq[0], torch.float64, scale=s_out, msg=what)
            assert_close(gx, seq[3], torch.float64, scale=s_grad, msg=what)
            again = launch(op, x, reg, eps, descending, g, chunks)
            assert all(torch.equal(bits(a), bits(b)) for a, b in zip(again, got)), what


def test_chunked_one_pool_across_every_chunk():
    """A row pooled into one block from 33 chunks of one position (every merge round cascades across the whole
    left segment; the backward's crossing block covers every chunk), float32 and float64."""
    x = torch.linspace(-1, 1, 33, dtype=torch.float64)[None] + 0.01 * torch.randn(2, 33, dtype=torch.float64)
    g = torch.randn(x.shape, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        for op in ("rank", "sort"):
            out, _, block, gx = launch(op, x.to(dtype), "l2", 1e3, False, g.to(dtype), 33)
            seq = launch(op, x.to(dtype), "l2", 1e3, False, g.to(dtype), None)
            assert (block == 0).all() and (seq[2] == 0).all()
            assert_close(out, seq[0], dtype, scale=scales(op, 1e3, x)[0])
            assert_close(gx, seq[3], dtype, scale=scales(op, 1e3, x)[1])


def test_long_rows_take_the_chunked_path():
    """n >= LONG_ROW through the registered ops (the launchers' default: LONG_CHUNKS chunks): the cpu backend's
    blocks (its sequential PAV), outputs and gradients; n = 1031 leaves the last chunk short."""
    n = 1031
    assert n >= kernels.LONG_ROW
    x = torch.randn(2, n, dtype=torch.float64)
    x[1] = torch.randint(-20, 20, (n,)).double()
    g = torch.randn(x.shape, dtype=torch.float64)
    for op, reg, eps in (("rank", "l2", 1e-3), ("rank", "kl", 0.5), ("sort", "l2", 30.0), ("sort", "kl", 3.0)):
        cpu = FWD[op](x, reg, eps, False, "cpu")
        tri = FWD[op](x, reg, eps, False, "triton")
        assert torch.equal(tri[2], cpu[2]), f"{op} {reg}"
        assert (cpu[2] != torch.arange(n)).any() and (cpu[2] != 0).any()  # pools, not one
        s_out, s_grad = scales(op, eps, x)
        assert_close(tri[0], cpu[0], torch.float64, scale=s_out)
        gx_cpu = BWD[op](g, cpu[0], x, cpu[1], cpu[2], reg, eps, False, "cpu")
        assert_close(
            BWD[op](g, tri[0], x, tri[1], tri[2], reg, eps, False, "triton"), gx_cpu, torch.float64, scale=s_grad
        )


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", ["l2", "kl"])
def test_triton_long_rows_on_gpu(op, reg):
    """The chunked Triton kernels on a GPU (n >= LONG_ROW): the cpu backend's blocks, outputs and gradients as it
    and as the float64 reference; forced chunk counts on a short row as under the interpreter."""
    for n in (1024, 1537, 4099):
        x = rows(op, n)[:3]
        for eps in (1e-3, 0.5, 1e3):
            for descending in (False, True):
                fwd, bwd = FWD[op], BWD[op]
                cpu = fwd(x, reg, eps, descending, "cpu")
                gpu = fwd(x.cuda(), reg, eps, descending, "triton")
                assert torch.equal(gpu[2].cpu(), cpu[2]), f"blocks n={n} eps={eps}"
                s_out, s_grad = scales(op, eps, x)
                assert_close(gpu[0].cpu(), cpu[0], torch.float64, scale=s_out)
                g = torch.randn(x.shape, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
                gx = bwd(g, cpu[0], x, cpu[1], cpu[2], reg, eps, descending, "cpu")
                g_gpu = bwd(g.cuda(), gpu[0], x.cuda(), gpu[1], gpu[2], reg, eps, descending, "triton")
                assert_close(g_gpu.cpu(), gx, torch.float64, scale=s_grad)
                ref_out, ref_grad = soft_grads(op, x, "reference", reg, eps, descending, seed=n)
                out, grad = soft_grads(op, x.cuda(), "triton", reg, eps, descending, seed=n)
                assert_close(out.cpu(), ref_out, torch.float64, scale=s_out)
                assert_close(grad.cpu(), ref_grad, torch.float64, scale=s_grad)
    x = rows(op, 33)
    g = torch.randn(x.shape, dtype=torch.float64)
    seq = launch(op, x.cuda(), reg, 0.5, False, g.cuda(), None)
    out, perm, block, gx = launch(op, x.cuda(), reg, 0.5, False, g.cuda(), 9)
    assert torch.equal(perm, seq[1]) and torch.equal(block, seq[2])
    s_out, s_grad = scales(op, 0.5, x[:3])
    assert_close(out.cpu(), seq[0].cpu(), torch.float64, scale=s_out)
    assert_close(gx.cpu(), seq[3].cpu(), torch.float64, scale=s_grad)
