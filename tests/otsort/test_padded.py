"""Any dimension, padded rows, k per row and hard=True for the OT sort ops on every backend: ``dim`` equals movedim,
padded batches (lengths and mask) equal per-row unpadded reference calls (values and gradients; pads 0 with zero
gradient, NaN and inf in the pads never read), the hard forward equals the exact result with the soft op's gradient,
bad arguments raise errors naming them, and opcheck of the ops called with row lengths."""

import functools

import pytest
import torch
from relaxops import OTSort, ot_quantile, ot_rank, ot_sort, ot_topk
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, gapped, opcheck_calls

# converged solves (the comparisons are far above the tolerance); the Triton interpreter runs every iteration in
# Python: a large epsilon there (few iterations), small rows
SOLVE = dict(epsilon=0.1, epsilon0=0.1, tolerance=1e-12, max_iterations=4000)
SOLVE_TRITON = dict(epsilon=0.4, epsilon0=0.4, tolerance=1e-12, max_iterations=4000)


def _solve(backend):
    return SOLVE_TRITON if backend == "triton" else SOLVE


def _module(x, **kw):
    names = ("epsilon", "epsilon0", "tolerance", "max_iterations", "backend", "dim", "hard")
    opts = {k: kw.pop(k) for k in names if k in kw}
    return tuple(OTSort(**opts)(x, **kw))


# op -> (call, kinds of its outputs): "pos" per position (prefix), "elem" per element, "mat" [*batch, n, m]
OPS = {
    "sort": (ot_sort, ("pos",)),
    "sort_desc_plan": (functools.partial(ot_sort, descending=True, return_plan=True), ("pos", "mat")),
    "rank": (ot_rank, ("elem",)),
    "quantile": (functools.partial(ot_quantile, q=[0.8, 0.3]), ("pos",)),
    "topk": (functools.partial(ot_topk, k=3), ("pos", "elem")),
    "module": (_module, ("pos", "elem")),
}


def _outs(out):
    return tuple(out) if isinstance(out, tuple) else (out,)


def _row_call(op, xr, backend, k=None, **kw):
    """The op on one unpadded row ``xr [L]`` (as ``[1, L]``), its own k for the top-k."""
    fn, _ = OPS[op]
    if op == "topk":
        fn = functools.partial(ot_topk, k=min(k, xr.shape[-1]))
    return _outs(fn(xr.unsqueeze(0), backend=backend, **kw))


def _padded_case(n, lengths, how, device):
    """``x [B, n]`` with NaN / inf in the pads, and the op's keyword (lengths or mask) plus each row's real entries."""
    B = lengths.shape[0]
    x = gapped((B, n), gap=0.1)
    if how == "lengths":
        real = torch.arange(n) < lengths.unsqueeze(-1)
        kw = dict(lengths=lengths.to(device))
    else:  # the real entries scattered over the row
        real = torch.zeros(B, n, dtype=torch.bool)
        for b in range(B):
            real[b, torch.randperm(n)[: int(lengths[b])]] = True
        kw = dict(mask=real.to(device))
    pads = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=x.dtype)
    x = torch.where(real, x, pads[torch.arange(n) % 3])
    return x.to(device), real, kw


def _expected(op, x, real, backend, G, k=None, **kw):
    """Per-row unpadded calls (on x's device) placed into the padded layout, on the CPU: the outputs, and the
    gradient of sum_o <out_o, G_o> with respect to x (0 on the pads)."""
    _, kinds = OPS[op]
    B, n = x.shape
    outs = [torch.zeros_like(g) for g in G]
    grad = torch.zeros(B, n, dtype=x.dtype)
    for b in range(B):
        idx = real[b].nonzero().squeeze(-1)
        if idx.numel() == 0:
            continue
        xr = x[b, idx.to(x.device)].detach().requires_grad_(True)
        ys = _row_call(op, xr, backend, k=None if k is None else int(k[b]), **kw)
        loss = 0
        for o, y, kind, g in zip(outs, ys, kinds, G):
            y = y[0].cpu()
            if kind == "pos":
                o[b, : y.shape[-1]] = y.detach()
                loss = loss + (y * g[b, : y.shape[-1]]).sum()
            elif kind == "elem":
                o[b, idx] = y.detach()
                loss = loss + (y * g[b, idx]).sum()
            else:
                o[b, idx, : y.shape[-1]] = y.detach()
                loss = loss + (y * g[b, idx, : y.shape[-1]]).sum()
        grad[b, idx] = torch.autograd.grad(loss, xr)[0].cpu()
    return outs, grad


def _padded_and_grad(op, x, backend, seed=3, **kw):
    fn, _ = OPS[op]
    xg = x.detach().requires_grad_(True)
    outs = _outs(fn(xg, backend=backend, **kw))
    gen = torch.Generator().manual_seed(seed)
    G = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]
    loss = sum((o * g.to(o.device)).sum() for o, g in zip(outs, G))
    return [o.detach().cpu() for o in outs], torch.autograd.grad(loss, xg)[0].cpu(), G


def _compare(got, want, what, tol=1e-8):
    """To ``tol`` of the largest magnitude (1e-12 for the reference against itself: a padded row is the unpadded
    row to rounding; a kernel against the reference: to the solves' convergence)."""
    scale = max(1.0, want.abs().max().item())
    assert torch.isfinite(got).all(), f"{what}: not finite"
    assert (got - want).abs().max().item() <= tol * scale, f"{what}: {(got - want).abs().max().item():.3g}"


def _padded_params():
    """(backend, device, n, how, op): every op on n = 7 with lengths and n = 33 with a mask; the interpreted Triton
    kernels on n = 7 only (the module, which calls nothing new, left to the others)."""
    for p in BACKEND_DEVICE:
        for op in OPS:
            if p.values == ("triton", "cpu"):
                if op != "module":
                    how = "lengths" if op in ("sort", "topk") else "mask"
                    yield pytest.param(*p.values, 7, how, op, id=f"{p.id}-7-{how}-{op}", marks=p.marks)
                continue
            for n, how in ((7, "lengths"), (33, "mask")):
                yield pytest.param(*p.values, n, how, op, id=f"{p.id}-{n}-{how}-{op}", marks=p.marks)


@pytest.mark.parametrize("backend,device,n,how,op", list(_padded_params()))
def test_padded_rows_equal_unpadded_rows(backend, device, n, how, op):
    torch.manual_seed(n)
    lengths = torch.tensor([n, 0, 1, n // 2, n - 2])  # a full row, an empty row, a row of one
    x, real, kw = _padded_case(n, lengths, how, device)
    solve = _solve(backend)
    outs, grad, G = _padded_and_grad(op, x, backend, **kw, **solve)
    want, want_grad = _expected(op, x.cpu(), real, "reference", G, k=torch.full((5,), 3), **solve)
    tol = 1e-12 if backend == "reference" else 1e-8
    for o, w in zip(outs, want):
        _compare(o, w, f"{op} outputs", tol)
    _compare(grad, want_grad, f"{op} gradient", tol)
    if backend != "reference":  # and the kernels' own unpadded rows, to rounding
        want, want_grad = _expected(op, x, real, backend, G, k=torch.full((5,), 3), **solve)
        for o, w in zip(outs, want):
            _compare(o, w, f"{op} outputs", 1e-12)
        _compare(grad, want_grad, f"{op} gradient", 1e-12)
    assert (grad[~real] == 0).all()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_k_per_row(backend, device):
    """A k per row (with and without lengths): row b equals ot_topk of its real entries with its own k, values
    first then 0 up to K = max k."""
    n = 6 if backend == "triton" else 9
    torch.manual_seed(1)
    k = torch.tensor([1, 3, 2, 4])
    for lengths in (None, torch.tensor([n, 2, 0, n - 1])):
        x, real, kw = _padded_case(n, lengths if lengths is not None else torch.full((4,), n), "lengths", device)
        kw = kw if lengths is not None else {}
        outs, grad, G = _padded_and_grad("topk", x, backend, k=k.to(device), **kw, **_solve(backend))
        assert outs[0].shape == (4, 4)
        want, want_grad = _expected("topk", x.cpu(), real, "reference", G, k=k, **_solve(backend))
        for o, w in zip(outs, want):
            _compare(o, w, "topk k per row")
        _compare(grad, want_grad, "topk k per row gradient")


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_dim_equals_movedim(backend, device):
    x = gapped((3, 4, 5), gap=0.1).to(device)
    dims = (1, -2, 0)
    if backend == "triton":  # the interpreter: one dimension, small
        x, dims = x[:2, :2, :3], (-2,)
    kw = dict(backend=backend, **{**_solve(backend), "tolerance": 1e-6})  # the same solve either way
    for d in dims:
        xm = x.movedim(d, -1)
        back = functools.partial(torch.movedim, source=-1, destination=d)
        assert_close(ot_sort(x, dim=d, **kw), back(ot_sort(xm, **kw)), torch.float64)
        assert_close(ot_rank(x, dim=d, descending=True, **kw), back(ot_rank(xm, descending=True, **kw)), torch.float64)
        assert_close(ot_quantile(x, [0.5, 0.2], dim=d, **kw), back(ot_quantile(xm, [0.5, 0.2], **kw)), torch.float64)
        assert ot_quantile(x, 0.5, dim=d, **kw).shape == xm.shape[:-1]
        top, topm = ot_topk(x, 2, dim=d, **kw), ot_topk(xm, 2, **kw)
        assert_close(top.values, back(topm.values), torch.float64)
        assert_close(top.mask, back(topm.mask), torch.float64)
        _, plan = ot_sort(x, dim=d, return_plan=True, **kw)
        assert_close(plan, ot_sort(xm, return_plan=True, **kw)[1], torch.float64)  # [*batch, n, m]
        res, resm = OTSort(dim=d, **kw)(x), OTSort(**kw)(xm)
        assert_close(res.ranks, back(resm.ranks), torch.float64)


def _window_quantiles(xs, levels, weight):
    """The zero-temperature quantiles of one row by hand: the mean of the sorted values over the mass window of
    each quantile target (docs/math/otsort.md)."""
    from relaxops.otsort import quantile_targets

    L = xs.shape[0]
    b, order = quantile_targets(levels, L, weight)
    cum = torch.tensor([0.0] + b, dtype=torch.float64).cumsum(0)
    s = xs.sort().values
    out = []
    for j in range(1, len(b), 2):
        lo, hi = cum[j], cum[j + 1]
        ar = torch.arange(L + 1, dtype=torch.float64) / L
        w = (torch.minimum(ar[1:], hi) - torch.maximum(ar[:-1], lo)).clamp_min(0)
        out.append((w * s).sum() / (hi - lo))
    return torch.stack(out)[order]


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
def test_hard_forward_exact_gradient_soft(backend, device):
    n = 6 if backend == "triton" else 11
    torch.manual_seed(2)
    x = gapped((3, n), gap=0.1)
    x[0, 1] = x[0, 3]  # a tie: broken by index, as torch.sort(stable=True)
    lengths = torch.tensor([n, n - 3, 0])
    kw = dict(backend=backend, lengths=lengths.to(device), **_solve(backend))
    xd = x.to(device)
    for b in range(3):
        x[b, int(lengths[b]) :] = 0
    real = torch.arange(n) < lengths.unsqueeze(-1)
    key = torch.where(real, x, torch.inf)
    srt = key.sort(dim=-1, stable=True)
    want_sorted = torch.where(real, srt.values, 0)
    want_ranks = torch.where(
        real, torch.empty_like(x).scatter_(-1, srt.indices, torch.arange(n).double().expand(3, n)), 0
    )
    k = torch.tensor([2, 1, 3])
    calls = {
        "sort": (functools.partial(ot_sort, **kw), want_sorted),
        "rank": (functools.partial(ot_rank, **kw), want_ranks),
        "topk_values": (lambda v, **h: ot_topk(v, k.to(device), **kw, **h).values, None),
        "topk_mask": (lambda v, **h: ot_topk(v, k.to(device), **kw, **h).mask, None),
        "quantile": (lambda v, **h: ot_quantile(v, [0.7, 0.2], weight=0.1, **kw, **h), None),
    }
    top_sorted = torch.where(real, x, -torch.inf).sort(dim=-1, descending=True, stable=True)
    kk = torch.minimum(k, lengths).unsqueeze(-1)
    calls["topk_values"] = (calls["topk_values"][0], torch.where(torch.arange(3) < kk, top_sorted.values[:, :3], 0))
    top_ranks = torch.empty_like(x).scatter_(-1, top_sorted.indices, torch.arange(n).double().expand(3, n))
    calls["topk_mask"] = (calls["topk_mask"][0], (real & (top_ranks < kk)).double())
    wq = [_window_quantiles(x[b, : int(lengths[b])], [0.7, 0.2], 0.1) for b in range(2)]
    calls["quantile"] = (calls["quantile"][0], torch.stack(wq + [torch.zeros(2, dtype=torch.float64)]))
    for name, (fn, want) in calls.items():
        hard, hard_grad = _with_grad(fn, xd, hard=True)
        soft, soft_grad = _with_grad(fn, xd)
        assert torch.equal(hard.cpu(), want) or name == "quantile", (name, hard, want)
        assert_close(hard.cpu(), want, torch.float64, msg=name)
        assert_close(hard_grad, soft_grad, torch.float64, msg=name)  # the soft op's gradient
    res = OTSort(hard=True, backend=backend, **_solve(backend))(xd, lengths=lengths.to(device))
    assert torch.equal(res.values.cpu(), want_sorted) and torch.equal(res.ranks.cpu(), want_ranks)
    # weighted sources: the monotone plan's read-outs (a row of weight 1/2 on one entry takes half the targets)
    a = torch.ones(1, 4, dtype=torch.float64)
    a[0, 2] = 3
    r = ot_rank(
        torch.tensor([[0.4, 0.1, 0.3, 0.2]], dtype=torch.float64).to(device),
        a=a.to(device),
        hard=True,
        **_solve(backend),
        backend=backend,
    )
    # sorted order 1, 3, 2, 0 with masses 1/6, 1/6, 1/2, 1/6 onto 4 targets of 1/4 (north-west corner), by hand
    T = torch.tensor(
        [[0, 0, 0, 1 / 6], [1 / 6, 0, 0, 0], [0, 1 / 6, 1 / 4, 1 / 12], [1 / 12, 1 / 12, 0, 0]], dtype=torch.float64
    )
    cs = torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64)
    want = 4 * (T @ cs) / torch.tensor([1 / 6, 1 / 6, 1 / 2, 1 / 6], dtype=torch.float64) - 1
    assert_close(r.cpu()[0], want, torch.float64)


def _with_grad(fn, x, **kw):
    xg = x.detach().requires_grad_(True)
    out = fn(xg, **kw)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(out.device)
    return out.detach(), torch.autograd.grad((out * g).sum(), xg)[0].cpu()


def test_bad_arguments_name_them():
    x = torch.randn(2, 5, dtype=torch.float64)
    cases = [
        (lambda: ot_sort(x, dim=2), IndexError, "dim must be in"),
        (lambda: ot_rank(x, dim=1.0), TypeError, "dim must be an int"),
        (lambda: ot_sort(x, lengths=torch.tensor([1, 6])), ValueError, "lengths must lie in"),
        (lambda: ot_sort(x, lengths=torch.tensor([1.0, 2.0])), TypeError, "lengths must be an int32 or int64"),
        (lambda: ot_sort(x, lengths=torch.tensor([1, 2, 3])), ValueError, "lengths must have x's shape without dim"),
        (lambda: ot_rank(x, mask=torch.ones(2, 5)), TypeError, "mask must be a bool tensor"),
        (lambda: ot_rank(x, mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, "mask must have x's shape"),
        (
            lambda: ot_rank(x, lengths=torch.tensor([1, 2]), mask=torch.ones(2, 5, dtype=torch.bool)),
            ValueError,
            "lengths and mask",
        ),
        (lambda: ot_topk(x, torch.tensor([0, 2])), ValueError, "k must lie in"),
        (lambda: ot_topk(x, torch.tensor([1, 2, 3])), ValueError, "k as a tensor must have"),
        (lambda: ot_topk(x, torch.tensor([1.0, 2.0])), TypeError, "k must be an int or an int32/int64 tensor"),
        (lambda: ot_topk(x, 2.0), TypeError, "k must be an int or an integer tensor"),
        (lambda: ot_sort(x, hard=1), TypeError, "hard must be a bool"),
        (lambda: OTSort(hard="yes"), TypeError, "hard must be a bool"),
        (lambda: ot_quantile(x, 0.5, hard=None), TypeError, "hard must be a bool"),
        (
            lambda: ot_sort(x, lengths=torch.tensor([1, 2]), squashing=torch.sigmoid),
            ValueError,
            "squashing: a callable",
        ),
        (lambda: ot_sort(x, a=torch.ones(2, 4)), ValueError, "a must have 5 entries along the op dimension"),
        (lambda: ot_rank(x, a=-torch.ones(5), lengths=torch.tensor([2, 5])), ValueError, "a must hold finite weights"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    # a's pads are ignored (not checked), its real entries renormalised over the row
    a = torch.tensor([[1.0, 2.0, -1.0, float("nan"), 0.0], [1.0] * 5], dtype=torch.float64)
    r = ot_rank(x, a=a, lengths=torch.tensor([2, 5]), epsilon=0.1, backend="reference")
    assert_close(r[0, :2], ot_rank(x[:1, :2], a=a[:1, :2] * 7, epsilon=0.1, backend="reference")[0], torch.float64)


@pytest.mark.parametrize("backend,device", KERNEL_BACKEND_DEVICE)
def test_opcheck_with_lengths(backend, device):
    """opcheck of the four ops called with row lengths and target lengths (ot_rank's own targets per row, an empty
    row among them)."""
    x = gapped((3, 6), gap=0.2).to(device)
    lengths = torch.tensor([6, 0, 4], device=device)
    solve = dict(epsilon=0.3, tolerance=1e-3, max_iterations=40, backend=backend, lengths=lengths)
    want = [
        "relaxops::ot_sinkhorn_fwd",
        "relaxops::ot_apply_fwd",
        "relaxops::ot_apply_bwd",
        "relaxops::ot_sinkhorn_bwd",
    ]
    assert opcheck_calls(ot_rank, x, **solve) == want
