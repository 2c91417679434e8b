"""The chunked PAV of the CUDA kernels' long rows (fastsort.h: one thread per chunk, boundary blocks merged in a
tree of rounds, outputs and the backward per chunk), run here through its CPU test entry point (the same header
code, the chunks one after the other), against the sequential PAV of the cpu backend and the float64 reference;
and, on a GPU, the CUDA kernels on rows long enough to take that path (fastsort.cu's kLongRow = 128).

Bound: the blocks must be EQUAL to the sequential PAV's (PAV's blocks are unique; the inputs here keep merge
decisions away from rounding ties, and exact ties pool exactly); outputs and gradients within the float64
tolerance of tests/testing.py (merged statistics are the same sums formed in another order: a few ulps of the
block's terms, the same bound the cpu backend meets against the reference)."""

import pytest
import torch
from relaxops import _ext
from relaxops.fastsort import ops
from testing import KERNEL_BACKEND_DEVICE, assert_close

from .test_fastsort import scales, soft_grads

if not any(p.values[0] == "cpu" for p in KERNEL_BACKEND_DEVICE):
    pytest.skip("relaxops._C is not built", allow_module_level=True)

FWD = {"rank": ops.soft_rank_fwd, "sort": ops.soft_sort_fwd}
BWD = {"rank": ops.soft_rank_bwd, "sort": ops.soft_sort_bwd}


def chunked(op, x, reg, eps, descending, grad, chunks):
    """(out, perm, block, grad_x) of the chunked entry points."""
    B, n = x.shape
    out, perm, block = torch.empty_like(x), torch.empty(B, n, dtype=torch.int64), torch.empty(B, n, dtype=torch.int32)
    args = (_ext.dtype_code(x), ops.OPS[op], ops.reg_code(reg), eps, int(descending), B, n)
    _ext._C.fastsort_forward_chunked(*args, _ext.ptr(x), _ext.ptr(out), _ext.ptr(perm), _ext.ptr(block), chunks)
    gx = torch.empty_like(x)
    _ext._C.fastsort_backward_chunked(
        *args, _ext.ptr(grad), _ext.ptr(out), _ext.ptr(x), _ext.ptr(perm), _ext.ptr(block), _ext.ptr(gx), chunks
    )
    return out, perm, block, gx


def rows(n, seed):
    """Random rows, a row of ties (runs of equal values), a row with +-inf (soft_rank's infinite groups)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, n, generator=g, dtype=torch.float64) * 2
    x[1] = torch.randint(-3, 4, (n,), generator=g).double()
    x[2] = torch.linspace(-1, 1, n, dtype=torch.float64) + 0.1 * x[0]  # nearly sorted: long pools at large eps
    if n >= 3:
        x[3, 0], x[3, n // 2], x[3, -1] = torch.inf, -torch.inf, torch.inf
    return x


@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 33, 100])
def test_chunked_equals_sequential(op, reg, n):
    """Chunk counts 1 (no merge), 2, 3 (an uneven tree), 9 (chunks of 4 on n = 33), 64 (empty trailing chunks):
    the same blocks as the sequential PAV, outputs and gradients as it and as the reference."""
    x = rows(n, n)
    if op == "sort":
        x = x[:3]  # an infinity makes a soft_sort row NaN: no PAV
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for eps in (1e-2, 0.5, 30.0):
        for descending in (False, True):
            out, perm, block = FWD[op](x, reg, eps, descending, "cpu")
            gx = BWD[op](g, out, x, perm, block, reg, eps, descending, "cpu")
            ref_out, ref_grad = soft_grads(op, x, "reference", reg, eps, descending, seed=3)
            s_out, s_grad = scales(op, eps, x)
            for chunks in (1, 2, 3, 9, 64):
                c_out, c_perm, c_block, c_gx = chunked(op, x, reg, eps, descending, g, chunks)
                what = f"eps={eps} descending={descending} chunks={chunks}"
                assert torch.equal(c_perm, perm) and torch.equal(c_block, block), what
                assert_close(c_out, out, torch.float64, scale=s_out, msg=what)
                assert_close(c_gx, gx, torch.float64, scale=s_grad, msg=what)
                c_out2, _, _, c_grad = chunked(
                    op,
                    x,
                    reg,
                    eps,
                    descending,
                    torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64),
                    chunks,
                )
                assert_close(c_out2, ref_out, torch.float64, scale=s_out, msg=what)
                assert_close(c_grad, ref_grad, torch.float64, scale=s_grad, msg=what)


def test_chunked_merges_across_many_chunks():
    """One pool over the whole row (eps large) built from 97 chunks, and blocks crossing several chunk boundaries
    (chunks of 1..2 positions): the same blocks and numbers as the sequential PAV, float32 and float64. (Not
    eps = 3 on the integer row: there sort L2's merge threshold (cP + cT) / 6 equals differences of block means
    exactly, a tie that rounding decides either way; both choices give the same outputs, not the same blocks.)"""
    x = rows(193, 5)[:3]
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        for op in ("rank", "sort"):
            for reg, eps in (("l2", 1e3), ("kl", 1e3), ("l2", 2.9), ("kl", 0.7)):
                out, perm, block = FWD[op](x.to(dtype), reg, eps, False, "cpu")
                gx = BWD[op](g.to(dtype), out, x.to(dtype), perm, block, reg, eps, False, "cpu")
                for chunks in (97, 193, 4096):
                    c_out, _, c_block, c_gx = chunked(op, x.to(dtype), reg, eps, False, g.to(dtype), chunks)
                    assert torch.equal(c_block, block)
                    assert_close(c_out, out, dtype, scale=scales(op, eps, x)[0])
                    assert_close(c_gx, gx, dtype, scale=scales(op, eps, x)[1])
                if eps == 1e3 and reg == "l2":
                    assert (block == 0).all()  # one pool: the merges reached across every boundary


def test_chunked_nan_rows_and_malformed_blocks():
    x = torch.randn(2, 40, dtype=torch.float64)
    x[1, 7] = torch.nan
    out, perm, block, gx = chunked("rank", x, "l2", 1.0, False, torch.ones_like(x), 5)
    assert out[1].isnan().all() and gx[1].isnan().all() and torch.isfinite(out[0]).all()
    assert torch.equal(block[1], torch.arange(40, dtype=torch.int32))
    block[0, 5] = 3  # not a run start nor its predecessor's block
    gx = torch.empty_like(x)
    with pytest.raises(ValueError, match="partition"):
        _ext._C.fastsort_backward_chunked(
            _ext.dtype_code(x),
            0,
            0,
            1.0,
            0,
            2,
            40,
            _ext.ptr(torch.ones_like(x)),
            _ext.ptr(out),
            _ext.ptr(x),
            _ext.ptr(perm),
            _ext.ptr(block),
            _ext.ptr(gx),
            5,
        )


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rank", "sort"])
@pytest.mark.parametrize("reg", ["l2", "kl"])
def test_cuda_long_rows(op, reg):
    """Rows of n >= 128 take the block-per-row kernels (32 to 256 threads): odd n, ties, descending, strengths from
    hard to one pool; blocks equal to the cpu backend's (the sequential PAV), outputs and gradients as it and as the
    float64 reference."""
    for n in (128, 255, 1000, 1537, 4099):
        x = rows(n, n)
        if op == "sort":
            x = x[:3]
        for eps in (1e-3, 0.5, 1e3):
            for descending in (False, True):
                cpu = FWD[op](x, reg, eps, descending, "cpu")
                gpu = FWD[op](x.cuda(), reg, eps, descending, "cuda")
                assert torch.equal(gpu[2].cpu(), cpu[2]), f"blocks n={n} eps={eps}"
                s_out, s_grad = scales(op, eps, x)
                assert_close(gpu[0].cpu(), cpu[0], torch.float64, scale=s_out)
                g = torch.randn(x.shape, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
                gx = BWD[op](g, cpu[0], x, cpu[1], cpu[2], reg, eps, descending, "cpu")
                g_gpu = BWD[op](g.cuda(), gpu[0], x.cuda(), gpu[1], gpu[2], reg, eps, descending, "cuda")
                assert_close(g_gpu.cpu(), gx, torch.float64, scale=s_grad)
                ref_out, ref_grad = soft_grads(op, x, "reference", reg, eps, descending, seed=n)
                out, grad = soft_grads(op, x.cuda(), "cuda", reg, eps, descending, seed=n)
                assert_close(out.cpu(), ref_out, torch.float64, scale=s_out)
                assert_close(grad.cpu(), ref_grad, torch.float64, scale=s_grad)
