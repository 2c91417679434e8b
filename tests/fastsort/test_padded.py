"""soft_rank / soft_sort along any dimension, on padded rows (lengths, mask) and with hard=True, on every backend.

Ground truth for padding: a loop of the float64 reference on each row's real entries alone (the unpadded row);
the pads hold NaN and inf, get outputs 0 and gradients exactly 0. The chunked PAV of the CUDA kernels' long rows
(fastsort.h) runs here through its CPU test entry point and the Triton kernels' chunked path, with lengths."""

import pytest
import torch
from relaxops import _ext, soft_rank, soft_sort
from relaxops.fastsort import ops
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, opcheck_calls, outputs_and_grads

FNS = {"rank": soft_rank, "sort": soft_sort}
CASES = [("l2", 0.3, False), ("kl", 1.0, True), ("l2", 5.0, True), ("kl", 0.05, False)]


def padded_rows(n, seed=0):
    """Rows [6, n] float64 and lengths: a length-0 row, a full row, a row of length 1, a row with ties (scaled so
    that no merge condition holds within rounding of equality: the block structure, and so the gradient, is then
    the same for every backend), a row whose real part holds +inf (soft_rank's infinite group; soft_sort: a NaN
    row), random lengths; NaN and +-inf pads."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, n, generator=g, dtype=torch.float64) * 2
    x[3] = torch.randint(-2, 3, (n,), generator=g).double() * 0.5**0.5  # ties; no merge within rounding of a tie
    lengths = torch.tensor([0, n, 1, n - 2, max(n - 1, 0), int(torch.randint(0, n + 1, (), generator=g))])
    x[4, 0] = torch.inf
    pad = torch.arange(n) >= lengths.unsqueeze(-1)
    junk = torch.tensor([torch.nan, torch.inf, -torch.inf], dtype=torch.float64).repeat(n)[:n].expand(6, n)
    return torch.where(pad, junk, x), lengths


def per_row_reference(op, x, real, reg, eps, descending, G):
    """(out, grad) from the reference on each row's real entries alone (``real`` [B, n] bool), placed as the padded
    op places them: ranks at the real elements, sorted values at positions 0..L-1; zeros elsewhere."""
    out, grad = torch.zeros_like(x), torch.zeros_like(x)
    for b in range(x.shape[0]):
        L = int(real[b].sum())
        if L == 0:
            continue
        xb = x[b][real[b]].detach().requires_grad_(True)
        o = FNS[op](xb[None], reg, eps, descending, backend="reference")[0]
        if op == "rank":
            (gb,) = torch.autograd.grad((o * G[b][real[b]]).sum(), xb)
            out[b][real[b]] = o.detach()
        else:
            (gb,) = torch.autograd.grad((o * G[b, :L]).sum(), xb)
            out[b, :L] = o.detach()
        grad[b][real[b]] = gb
    return out, grad


def call(op, x, backend, reg, eps, descending, G, **kwargs):
    xg = x.detach().requires_grad_(True)
    out = FNS[op](xg, reg, eps, descending, backend=backend, **kwargs)
    (grad,) = torch.autograd.grad((out * G.to(out)).sum(), xg)
    return out.detach(), grad


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("op", ["rank", "sort"])
def test_lengths_and_mask_equal_unpadded_rows(backend, device, op):
    """Odd n, a length-0 and a full row, NaN/inf pads: values and gradients of the real entries equal the unpadded
    rows' (to the float64 tolerance), pads 0 with gradient exactly 0, nothing NaN outside NaN rows."""
    interpreted = backend == "triton" and device == "cpu"  # ~1 s a call: one size, one case
    for n in (33,) if interpreted else (7, 33):
        x, lengths = padded_rows(n, seed=n)
        G = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        real = torch.arange(n) < lengths.unsqueeze(-1)
        mask = torch.rand(x.shape, generator=torch.Generator().manual_seed(2)) < 0.6
        mask[0], mask[1] = False, True
        xm = torch.where(mask, x.nan_to_num(0.5, 9.0, -9.0), torch.nan)  # NaN at every pad
        for reg, eps, descending in CASES[1:2] if interpreted else CASES:
            for xx, kw, rl in ((x, dict(lengths=lengths), real), (xm, dict(mask=mask), mask)):
                what = f"n={n} {reg} eps={eps} descending={descending} {list(kw)[0]}"
                ref_out, ref_grad = per_row_reference(op, xx, rl, reg, eps, descending, G)
                kw = {k: v.to(device) for k, v in kw.items()}
                out, grad = call(op, xx.to(device), backend, reg, eps, descending, G.to(device), **kw)
                out, grad = out.cpu(), grad.cpu()
                s = max(1.0, 1 / eps)
                assert_close(out, ref_out, torch.float64, scale=n * s, msg=what)
                assert_close(grad, ref_grad, torch.float64, scale=s, msg=what)
                pads = ~rl if op == "rank" else torch.arange(n) >= rl.sum(-1, keepdim=True)
                assert (out[pads] == 0).all() and (grad[~rl] == 0).all(), what
                nan_rows = ref_out.isnan().any(-1)
                assert not out[~nan_rows].isnan().any() and not grad[~nan_rows].isnan().any(), what


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_dim_equals_movedim(backend, device):
    """A 3-D x along each dimension (negative too), with lengths along it: equal to the op on x.movedim(dim, -1)."""
    x = torch.randn(3, 5, 4, dtype=torch.float64, device=device)
    dims = (-2,) if backend == "triton" else (0, 1, -1, -2)  # the interpreter: ~1 s a call
    for op, fn in FNS.items():
        for dim in dims:
            for reg, eps, descending in CASES[: 1 if backend == "triton" else 2]:
                xl = x.movedim(dim, -1)
                got = outputs_and_grads(fn, x, reg, eps, descending, backend=backend, dim=dim)
                want = outputs_and_grads(
                    lambda v, *a, fn=fn, dim=dim, **k: fn(v.movedim(dim, -1), *a, **k).movedim(-1, dim),
                    x,
                    reg,
                    eps,
                    descending,
                    backend=backend,
                )
                for a, b in zip(got, want):
                    assert_close(a, b, torch.float64, msg=f"{op} dim={dim}")
                lengths = torch.arange(xl.shape[:-1].numel(), device=device).reshape(xl.shape[:-1]) % (xl.shape[-1] + 1)
                got = fn(x, reg, eps, descending, backend=backend, dim=dim, lengths=lengths)
                want = fn(
                    xl.reshape(-1, xl.shape[-1]), reg, eps, descending, backend=backend, lengths=lengths.flatten()
                )
                assert_close(got, want.reshape(xl.shape).movedim(-1, dim), torch.float64, msg=f"{op} dim={dim}")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_hard_is_exact_with_the_soft_gradient(backend, device):
    """hard=True: exactly sorted values / integer ranks (ties by index; descending: 1 = the largest), pads 0; the
    gradient equals the soft op's."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-4, 5, (4, 9), generator=g).double().to(device)  # ties
    lengths = torch.tensor([9, 0, 4, 1], device=device)
    real = torch.arange(9, device=device) < lengths.unsqueeze(-1)
    interpreted = backend == "triton" and device == "cpu"  # ~1 s a call
    for descending in (True,) if interpreted else (False, True):
        for op, fn in FNS.items():
            for kw in (dict(lengths=lengths),) if interpreted else (dict(), dict(lengths=lengths)):
                hard = outputs_and_grads(fn, x, "l2", 0.5, descending, backend=backend, hard=True, **kw)
                soft = outputs_and_grads(fn, x, "l2", 0.5, descending, backend=backend, **kw)
                assert_close(hard[1], soft[1], torch.float64, msg=f"{op} grad")
                r = real if kw else torch.ones_like(real)
                for b in range(4):
                    L, row = int(r[b].sum()), x[b, : int(r[b].sum())]
                    order = torch.sort(-row if descending else row, stable=True).indices
                    if op == "sort":
                        want = row[order]
                        assert torch.equal(hard[0][b, :L], want) and (hard[0][b, L:] == 0).all()
                    else:
                        want = torch.empty(L, dtype=x.dtype, device=device)
                        want[order] = torch.arange(1, L + 1, dtype=x.dtype, device=device)
                        assert torch.equal(hard[0][b, :L], want) and (hard[0][b, L:] == 0).all()


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values != ("triton", "cpu")])
def test_opcheck_with_lengths(backend, device):
    """opcheck of the ops with lengths (finite values: opcheck's comparisons do not take NaN as equal). The
    interpreted Triton kernels are left to test_fastsort.py's opcheck (the same ops, without lengths)."""
    lengths = padded_rows(7)[1].to(device)
    x = torch.randn(lengths.shape[0], 7, dtype=torch.float64, device=device)
    for op, fn in FNS.items():
        names = opcheck_calls(fn, x, "kl", 0.7, True, backend=backend, lengths=lengths)
        assert names == [f"relaxops::soft_{op}_fwd", f"relaxops::soft_{op}_bwd"], names


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
@pytest.mark.parametrize("op", ["rank", "sort"])
def test_chunked_pav_with_lengths(op):
    """The CUDA kernels' chunked PAV and backward (their CPU test entry point) with lengths: the blocks, outputs and
    gradients of the sequential cpu kernels with the same lengths."""
    x, lengths = padded_rows(33, seed=4)
    B, n = x.shape
    G = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for reg, eps, descending in CASES:
        out, perm, block = (
            ops.soft_rank_fwd(x, reg, eps, descending, "cpu", lengths)
            if op == "rank"
            else (ops.soft_sort_fwd(x, reg, eps, descending, "cpu", lengths))
        )
        bwd = ops.soft_rank_bwd if op == "rank" else ops.soft_sort_bwd
        gx = bwd(G, out, x, perm, block, reg, eps, descending, "cpu", lengths)
        for chunks in (1, 3, 9):
            c_out, c_perm, c_block, c_gx = (torch.empty_like(t) for t in (x, perm, block, x))
            args = (_ext.dtype_code(x), ops.OPS[op], ops.reg_code(reg), eps, int(descending), B, n)
            _ext._C.fastsort_forward_chunked(
                *args, _ext.ptr(x), _ext.ptr(c_out), _ext.ptr(c_perm), _ext.ptr(c_block), chunks, _ext.ptr(lengths)
            )
            _ext._C.fastsort_backward_chunked(
                *args,
                _ext.ptr(G),
                _ext.ptr(c_out),
                _ext.ptr(x),
                _ext.ptr(c_perm),
                _ext.ptr(c_block),
                _ext.ptr(c_gx),
                chunks,
                _ext.ptr(lengths),
            )
            what = f"{reg} eps={eps} descending={descending} chunks={chunks}"
            assert torch.equal(c_perm, perm) and torch.equal(c_block, block), what
            assert_close(c_out, out, torch.float64, scale=n / eps, msg=what)
            assert_close(c_gx, gx, torch.float64, scale=1 / eps, msg=what)


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] == "triton"])
def test_triton_chunked_with_lengths(backend, device):
    """The Triton kernels' chunked PAV and sums (forced on short rows) with lengths: the reference's rows."""
    from relaxops.fastsort import triton as kernels

    x, lengths = padded_rows(33, seed=6)
    x, lengths = x.to(device), lengths.to(device)
    G = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device)
    real = torch.arange(33, device=device) < lengths.unsqueeze(-1)
    for op in ("rank", "sort"):
        reg, eps, descending = CASES[1]
        ref_out, ref_grad = per_row_reference(op, x.cpu(), real.cpu(), reg, eps, descending, G.cpu())
        out, perm, block = (torch.empty_like(x, dtype=t) for t in (x.dtype, torch.int64, torch.int32))
        kernels.forward(op, x, reg, eps, descending, out, perm, block, lengths, chunks=5)
        gx = torch.empty_like(x)
        kernels.backward(op, G, out, x, perm, block, reg, eps, descending, gx, lengths, chunks=5)
        assert_close(out.cpu(), ref_out, torch.float64, scale=33, msg=op)
        assert_close(gx.cpu(), ref_grad, torch.float64, msg=op)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(dim=2), IndexError, "dim"),
        (dict(dim=0.5), TypeError, "dim"),
        (dict(lengths=torch.tensor([1, 8])), ValueError, "lengths"),
        (dict(lengths=torch.tensor([1.0, 2.0])), TypeError, "lengths"),
        (dict(lengths=torch.tensor([1])), ValueError, "lengths"),
        (dict(mask=torch.ones(2, 7)), TypeError, "mask"),
        (dict(mask=torch.ones(2, 6, dtype=torch.bool)), ValueError, "mask"),
        (dict(mask=torch.ones(2, 7, dtype=torch.bool), lengths=torch.tensor([1, 2])), ValueError, "at most one"),
        (dict(hard=1), TypeError, "hard"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, err, match):
    for fn in FNS.values():
        with pytest.raises(err, match=match):
            fn(torch.randn(2, 7), backend="reference", **kwargs)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_ops_check_lengths(backend, device):
    """The registered ops refuse a lengths tensor of the wrong dtype, shape or values (cpu: the C++ kernel's check)."""
    x = torch.randn(2, 5, dtype=torch.float64, device=device)
    for bad, err, match in (
        (torch.tensor([1, 2], dtype=torch.int32), TypeError, "lengths must have dtype"),
        (torch.tensor([1, 2, 3]), ValueError, "lengths must have shape"),
        (torch.tensor([1, 6]), (ValueError, IndexError), "lengths must"),
        (torch.tensor([-1, 2]), (ValueError, IndexError), "lengths must"),
    ):
        with pytest.raises(err, match=match):
            ops.soft_rank_fwd(x, "l2", 1.0, False, backend, bad.to(device))
