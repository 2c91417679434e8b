"""Any dimension, padded rows, a k per row, hard (docs/math/sortnet.md, "Any dimension, padded rows, k per row, hard"):
relaxops.sort, rank, topk and the top-k loss on every backend against per-row calls of the float64 reference on the
unpadded rows, values and gradients; pads are 0 and get no gradient."""

import pytest
import relaxops
import torch
from relaxops.sortnet import networks, ops
from relaxops.sortnet.losses import topk_cross_entropy
from testing import BACKEND_DEVICE, KERNEL_BACKEND_DEVICE, assert_close, opcheck_calls

S = 3.0  # steepness: soft enough that every comparator mixes


def _padded(B, n, lengths, pad_value, device, seed=0):
    """``x [B, n]`` float64 with NaN / inf in the pads of ``lengths``, its real rows, and the pad mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, n, dtype=torch.float64, generator=g)
    pad = torch.arange(n) >= lengths[:, None]
    return x.masked_fill(pad, pad_value).to(device), x, pad.to(device)


def _lengths(n, B):
    """A row of length 0, a full row, 1 and odd lengths in between."""
    return torch.tensor([0, n, 1, n // 2 + 1, n - 2, 2][:B])


def _check_rows(out, grad, want, pad, what):
    """``out`` and ``grad`` (padded) against ``want``: per row, (out row restricted, grad row restricted) of the
    unpadded reference, or None for a row of length 0; every pad entry of the output selected by ``pad`` 0, the
    gradient of the pads 0, nothing NaN."""
    assert not torch.isnan(out).any() and not torch.isnan(grad).any(), what
    assert (grad[pad] == 0).all(), f"{what}: gradient reaches a pad"
    for b, w in enumerate(want):
        if w is None:
            assert (out[b] == 0).all() and (grad[b] == 0).all(), f"{what}: row of length 0"
            continue
        (o_sel, o_ref), (g_sel, g_ref) = w
        assert_close(o_sel(out[b]).cpu(), o_ref, msg=f"{what}: row {b}")
        assert_close(g_sel(grad[b]).cpu(), g_ref, msg=f"{what}: gradient of row {b}")


def _grad(out, x, seed=1):
    """The gradient of ``<out, r>`` for random ``r`` (pads included: they must not matter), and ``r``."""
    r = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(seed)).to(out.device)
    (g,) = torch.autograd.grad((out * r).sum(), x, retain_graph=True)
    return g, r


@pytest.mark.parametrize("backend,device", [p for p in BACKEND_DEVICE if p.values[0] != "triton"])
@pytest.mark.parametrize("network,n", [("bitonic", 33), ("odd_even", 7), ("bitonic_original", 7)])
@pytest.mark.parametrize("pad_value", [float("nan"), float("inf")])
def test_sort_and_rank_of_padded_rows_equal_unpadded_rows(backend, device, network, n, pad_value):
    lengths = _lengths(n, 6)
    xp, x, pad = _padded(6, n, lengths, pad_value, device)
    xp.requires_grad_(True)
    L = lengths.to(device)
    s, X = relaxops.sort(xp, network, steepness=S, backend=backend, lengths=L)
    r = relaxops.rank(xp, network, steepness=S, descending=True, backend=backend, lengths=L)
    gs, ws = _grad(s, xp, 1)
    gX, wX = _grad(X, xp, 2)
    gr, wr = _grad(r, xp, 3)
    want_s, want_X, want_r = [], [], []
    for b, Lb in enumerate(lengths.tolist()):
        if Lb == 0:
            want_s.append(None), want_X.append(None), want_r.append(None)
            continue
        xb = x[b : b + 1, :Lb].clone().requires_grad_(True)
        s1, X1 = relaxops.sort(xb, network, steepness=S, backend="reference")
        r1 = relaxops.rank(xb, network, steepness=S, descending=True, backend="reference")
        g1 = [
            torch.autograd.grad((o * w[b : b + 1, :Lb].cpu()).sum(), xb, retain_graph=True)[0][0]
            for o, w in ((s1, ws), (r1, wr))
        ]
        (gX1,) = torch.autograd.grad((X1 * wX[b : b + 1, :Lb, :Lb].cpu()).sum(), xb)
        first = lambda t, Lb=Lb: t[:Lb]  # noqa: E731
        want_s.append(((first, s1[0]), (first, g1[0])))
        want_r.append(((first, r1[0]), (first, g1[1])))
        want_X.append(((lambda t, Lb=Lb: t[:Lb, :Lb], X1[0]), (first, gX1[0])))
    for b, Lb in enumerate(lengths.tolist()):  # the pads of every output are 0
        assert (s[b, Lb:] == 0).all() and (r[b, Lb:] == 0).all()
        assert (X[b, Lb:] == 0).all() and (X[b, :, Lb:] == 0).all()
    _check_rows(s.detach(), gs, want_s, pad, "sorted")
    _check_rows(X.detach(), gX, want_X, pad, "X")
    _check_rows(r.detach(), gr, want_r, pad, "rank")


@pytest.mark.parametrize("backend,device", [p for p in BACKEND_DEVICE if p.values[0] != "triton"])
@pytest.mark.parametrize("network,n", [("splitter_selection", 33), ("bitonic", 7), ("odd_even", 7)])
def test_topk_of_padded_rows_with_a_k_per_row(backend, device, network, n):
    """Each row with its own length and k equals the top-k of its unpadded row with its k, right-aligned."""
    lengths = _lengths(n, 6)
    k = torch.tensor([2, 4, 3, 1, 4, 2])
    K = 4
    xp, x, pad = _padded(6, n, lengths, float("nan"), device)
    xp.requires_grad_(True)
    T = relaxops.topk(xp, k.to(device), network, steepness=S, backend=backend, lengths=lengths.to(device))
    assert T.shape == (6, n, K)
    gT, wT = _grad(T, xp)
    want = []
    for b, Lb in enumerate(lengths.tolist()):
        kb = min(int(k[b]), Lb)
        assert (T[b, Lb:] == 0).all() and (T[b, :, : K - kb] == 0).all()
        if Lb == 0:
            want.append(None)
            continue
        xb = x[b : b + 1, :Lb].clone().requires_grad_(True)
        T1 = relaxops.topk(xb, kb, network, steepness=S, backend="reference")
        (g1,) = torch.autograd.grad((T1 * wT[b : b + 1, :Lb, K - kb :].cpu()).sum(), xb)
        want.append(((lambda t, Lb=Lb, kb=kb: t[:Lb, K - kb :], T1[0]), (lambda t, Lb=Lb: t[:Lb], g1[0])))
    _check_rows(T.detach(), gT, want, pad, "topk")
    # a k per row without lengths: each row its own k
    T2 = relaxops.topk(x.to(device), k.to(device), network, steepness=S, backend=backend)
    for b in range(6):
        kb = int(k[b])
        T1 = relaxops.topk(x[b : b + 1], kb, network, steepness=S, backend="reference")
        assert_close(T2[b, :, K - kb :].cpu(), T1[0])
        assert (T2[b, :, : K - kb] == 0).all()


@pytest.mark.parametrize("backend,device", [p for p in BACKEND_DEVICE if p.values[0] != "triton"])
def test_mask_equals_the_rows_of_its_real_entries(backend, device):
    """A mask (real entries anywhere) gives on each row what its real entries alone give, put back in place; the
    sort's positions keep the real values first; dim and a 3-D x."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 9, 2, dtype=torch.float64, generator=g)
    mask = torch.rand(3, 9, 2, generator=g) < 0.6
    mask[0, :, 0] = False  # an empty row
    mask[1, :, 1] = True  # a full row
    xp = x.masked_fill(~mask, float("nan")).to(device).requires_grad_(True)
    m = mask.to(device)
    s, X = relaxops.sort(xp, "bitonic", steepness=S, backend=backend, dim=1, mask=m)
    r = relaxops.rank(xp, "odd_even", steepness=S, backend=backend, dim=-2, mask=m)
    T = relaxops.topk(xp, 3, "splitter_selection", steepness=S, backend=backend, dim=1, mask=m)
    assert s.shape == x.shape and r.shape == x.shape and X.shape == (3, 2, 9, 9) and T.shape == (3, 2, 9, 3)
    (g,) = torch.autograd.grad(s.sum() + (X * 0.3).sum() + (r**2).sum() + (T * 0.7).sum(), xp)
    assert not torch.isnan(g).any() and (g[~m] == 0).all()
    for a in range(3):
        for c in range(2):
            real = mask[a, :, c]
            L = int(real.sum())
            if L == 0:
                assert (s[a, :, c] == 0).all() and (X[a, c] == 0).all() and (T[a, c] == 0).all()
                continue
            xr = x[a, real, c][None]
            s1, X1 = relaxops.sort(xr, "bitonic", steepness=S, backend="reference")
            r1 = relaxops.rank(xr, "odd_even", steepness=S, backend="reference")
            T1 = relaxops.topk(xr, min(3, L), "splitter_selection", steepness=S, backend="reference")
            idx = real.nonzero()[:, 0]
            assert_close(s[a, :L, c].detach().cpu(), s1[0])
            assert (s[a, L:, c] == 0).all()
            assert_close(X[a, c][idx][:, :L].detach().cpu(), X1[0])
            assert_close(r[a, idx, c].detach().cpu(), r1[0])
            assert_close(T[a, c][idx][:, 3 - min(3, L) :].detach().cpu(), T1[0])
            assert (r[a, ~real, c] == 0).all() and (X[a, c][~real.to(device)] == 0).all()


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_dim_equals_movedim(backend, device, dim):
    x = torch.randn(5, 4, 3, dtype=torch.float64).to(device)
    kw = dict(steepness=S, backend=backend)
    s, X = relaxops.sort(x, "odd_even", descending=True, dim=dim, **kw)
    s0, X0 = relaxops.sort(x.movedim(dim, -1), "odd_even", descending=True, **kw)
    assert_close(s, s0.movedim(-1, dim))
    assert_close(X, X0)
    r = relaxops.rank(x, "bitonic", dim=dim, **kw)
    assert_close(r, relaxops.rank(x.movedim(dim, -1), "bitonic", **kw).movedim(-1, dim))
    T = relaxops.topk(x, 2, "splitter_selection", dim=dim, **kw)
    assert_close(T, relaxops.topk(x.movedim(dim, -1), 2, "splitter_selection", **kw))


@pytest.mark.parametrize("backend,device", [p for p in BACKEND_DEVICE if p.values[0] != "triton"])
def test_hard_forward_is_exact_and_backward_is_the_relaxed_gradient(backend, device):
    x = torch.tensor(
        [[0.3, -1.0, 0.3, 2.0, 0.5, float("nan"), 7.0], [0.3, -1.0, 0.3, 2.0, 0.5, 1.5, -4.0]], dtype=torch.float64
    )
    L = torch.tensor([5, 7]).to(device)
    kw = dict(steepness=S, backend=backend, lengths=L)
    xh = x.to(device).requires_grad_(True)
    xs = x.to(device).requires_grad_(True)
    s, X = relaxops.sort(xh, "bitonic", descending=True, hard=True, **kw)
    assert s.tolist() == [[2.0, 0.5, 0.3, 0.3, -1.0, 0, 0], [2.0, 1.5, 0.5, 0.3, 0.3, -1.0, -4.0]]
    assert X[0, :5, :5].tolist() == [  # element c at descending position r; ties by index (ascending, stable)
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],
        [0, 0, 1, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
    ]
    assert (X[0, 5:] == 0).all() and (X[0, :, 5:] == 0).all()
    r = relaxops.rank(xh, "bitonic", hard=True, **kw)
    assert r.tolist() == [[2, 1, 3, 5, 4, 0, 0], [3, 2, 4, 7, 5, 6, 1]]
    T = relaxops.topk(xh, torch.tensor([2, 1]).to(device), "splitter_selection", hard=True, **kw)
    assert T[0].T.tolist() == [[0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0, 0]]
    assert T[1].T.tolist() == [[0] * 7, [0, 0, 0, 1, 0, 0, 0]]
    wr = torch.arange(7.0, dtype=torch.float64).to(device)
    fn = lambda s, X, r, T: (s * 1.5).sum() + (X * 0.25).sum() + (r * wr).sum() + (T * 2).sum()  # noqa: E731
    (gh,) = torch.autograd.grad(fn(s, X, r, T), xh)
    s2, X2 = relaxops.sort(xs, "bitonic", descending=True, **kw)
    r2 = relaxops.rank(xs, "bitonic", **kw)
    T2 = relaxops.topk(xs, torch.tensor([2, 1]).to(device), "splitter_selection", **kw)
    (gs,) = torch.autograd.grad(fn(s2, X2, r2, T2), xs)
    assert_close(gh.cpu(), gs.cpu())
    assert (gh[0, 5:] == 0).all()
    with torch.no_grad():  # without a gradient the relaxed op does not run
        assert relaxops.rank(x[:1].to(device), hard=True, backend=backend, lengths=L[:1]).tolist() == [
            [2, 1, 3, 5, 4, 0, 0]
        ]


@pytest.mark.parametrize("backend,device", [p for p in BACKEND_DEVICE if p.values[0] != "triton"])
def test_topk_loss_of_padded_class_lists(backend, device):
    """Each sample's loss is that of its real classes alone (lengths, and a mask in another order); hard=True is
    finite and has the relaxed gradient."""
    g = torch.Generator().manual_seed(3)
    B, n = 4, 9
    x = torch.randn(B, n, dtype=torch.float64, generator=g)
    lengths = torch.tensor([9, 3, 6, 2])
    target = torch.tensor([7, 2, 0, 1])
    p_k = [0.5, 0.0, 0.25, 0.25]
    xp = x.masked_fill(torch.arange(n) >= lengths[:, None], float("nan")).to(device).requires_grad_(True)
    kw = dict(method="splitter_selection", inverse_temperature=S, backend=backend, reduction="none")
    loss = topk_cross_entropy(xp, target.to(device), p_k, lengths=lengths.to(device), **kw)
    (gx,) = torch.autograd.grad(loss.sum(), xp)
    assert (gx[torch.arange(n).to(device) >= lengths.to(device)[:, None]] == 0).all()
    for b in range(B):
        Lb = int(lengths[b])
        xb = x[b : b + 1, :Lb].clone().requires_grad_(True)
        # a k above the sample's classes counts all of them: P_K's mass of k >= L_b moves to k = L_b
        pk_b = p_k[: Lb - 1] + [sum(p_k[Lb - 1 :])] if Lb < len(p_k) else p_k
        want = topk_cross_entropy(xb, target[b : b + 1], pk_b, **dict(kw, backend="reference"))
        (g1,) = torch.autograd.grad(want.sum(), xb)
        assert_close(loss[b].detach().cpu(), want[0].detach())
        assert_close(gx[b, :Lb].cpu(), g1[0])
    # a mask: the real classes anywhere; each sample's loss is that of its real classes in their order
    mask = torch.rand(B, n, generator=g) < 0.6
    mask[torch.arange(B), target] = True
    tm = target.clone()
    lm = topk_cross_entropy(x.to(device), tm.to(device), p_k, mask=mask.to(device), **kw)
    for b in range(B):
        xr = x[b][mask[b]][None]
        Lb, t = xr.shape[1], int(mask[b, : target[b]].sum())
        pk_b = p_k[: Lb - 1] + [sum(p_k[Lb - 1 :])] if Lb < len(p_k) else p_k
        want = topk_cross_entropy(xr, torch.tensor([t]), pk_b, **dict(kw, backend="reference"))
        assert_close(lm[b].cpu(), want[0])
    # hard: the exact rank of the label among the real classes, q = w_rank (top1_mode 'sort'), finite throughout
    xh = x.to(device).requires_grad_(True)
    kh = dict(kw, top1_mode="sort")
    lh = topk_cross_entropy(xh, target.to(device), p_k, lengths=lengths.to(device), hard=True, **kh)
    w = torch.tensor([1.0, 0.5, 0.5, 0.25], dtype=torch.float64)  # w_r = P_K(k >= r)
    for b in range(B):
        Lb = int(lengths[b])
        rank = int((x[b, :Lb] > x[b, target[b]]).sum()) + 1
        q = w[rank - 1] if rank <= min(4, Lb) else 0.0
        assert_close(lh[b].detach().cpu(), -torch.log(torch.as_tensor(q * (1 - 2e-7) + 1e-7, dtype=torch.float64)))
    (gh,) = torch.autograd.grad(lh.sum(), xh)
    assert torch.isfinite(gh).all() and (gh[torch.arange(n).to(device) >= lengths.to(device)[:, None]] == 0).all()


def test_bad_arguments_name_themselves():
    x = torch.randn(2, 5)
    with pytest.raises(TypeError, match="hard"):
        relaxops.sort(x, hard=1)
    with pytest.raises(ValueError, match="lengths"):
        relaxops.rank(x, lengths=torch.tensor([1, 6]))
    with pytest.raises(TypeError, match="mask"):
        relaxops.topk(x, 2, mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="k"):
        relaxops.topk(x, torch.tensor([0, 2]))
    with pytest.raises(IndexError, match="dim"):
        relaxops.sort(x, dim=2)
    with pytest.raises(ValueError, match="lengths"):
        relaxops.sort(x, networks.register_network([[(0, 1)]], 5), lengths=torch.tensor([1, 2]), backend="cpu")
    with pytest.raises(ValueError, match="lengths and mask"):
        topk_cross_entropy(x, torch.tensor([0, 1]), [1.0], method="neuralsort", lengths=torch.tensor([5, 5]))
    with pytest.raises(ValueError, match="real class"):
        topk_cross_entropy(x, torch.tensor([0, 4]), [1.0], lengths=torch.tensor([5, 3]), backend="reference")
    with pytest.raises(ValueError, match="lengths"):
        ops.rank_fwd(x.double(), "bitonic", 0, 1.0, 0.25, "cpu", torch.tensor([6, 1]))


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] == "triton"])
def test_triton_refuses_lengths(backend, device):
    with pytest.raises(ValueError, match="triton backend does not take lengths"):
        relaxops.sort(torch.randn(2, 5, device=device), backend=backend, lengths=torch.tensor([3, 5], device=device))


@pytest.mark.parametrize("backend,device", [p for p in KERNEL_BACKEND_DEVICE if p.values[0] != "triton"])
def test_opcheck_with_lengths(backend, device):
    """The registered ops with lengths and a k per row (a prefix network and per-length networks)."""
    x = torch.randn(4, 7, dtype=torch.float64).to(device)
    L = torch.tensor([7, 0, 3, 5]).to(device)
    cases = [
        ((relaxops.sort, (x, "bitonic"), dict(steepness=S, backend=backend, lengths=L)), None),
        ((relaxops.rank, (x, "odd_even"), dict(steepness=S, backend=backend, lengths=L)), None),
        (
            (relaxops.topk, (x, torch.tensor([2, 1, 3, 2]).to(device), "bitonic"), dict(backend=backend, lengths=L)),
            None,
        ),
    ]
    for (fn, args, kwargs), _ in cases:
        assert opcheck_calls(fn, *args, **kwargs)


def test_padded_network_is_a_prefix_of_the_network_for_n():
    """bitonic and odd_even: the network for L is the first prefix_layers(L) layers of the one for n, restricted to
    wires below L (what lets every row of a batch run the network for n)."""
    for kind in networks.PREFIX_NETWORKS:
        for n in (1, 2, 7, 16, 17, 33):
            full = networks.network_layers(kind, n)
            for L in range(0, n + 1):
                want = [sorted(layer) for layer in networks.network_layers(kind, L)] if L else []
                got = [
                    sorted((i, j) for i, j in layer if i < L and j < L)
                    for layer in full[: networks.prefix_layers(kind, L)]
                ]
                assert got == want, (kind, n, L)


def test_modules_pass_dim_lengths_mask_k_and_hard():
    x = torch.randn(3, 6, 2, dtype=torch.float64)
    L = torch.tensor([[6, 2], [0, 5], [3, 6]])
    m = relaxops.DiffSortNet("bitonic", 6, steepness=S, backend="cpu", dim=1, hard=True)
    s, X = m(x, lengths=L)
    s0, X0 = relaxops.sort(x, "bitonic", steepness=S, backend="cpu", dim=1, lengths=L, hard=True)
    assert torch.equal(s, s0) and torch.equal(X, X0)
    t = relaxops.DiffTopkNet("splitter_selection", 6, 3, steepness=S, backend="cpu", dim=-2)
    k = torch.tensor([[1, 3], [2, 2], [3, 1]])
    _, T = t(x, k=k, lengths=L)
    assert torch.equal(T, relaxops.topk(x, k, steepness=S, backend="cpu", dim=-2, lengths=L))
    with pytest.raises(ValueError, match="size 6 along dim = 1"):
        m(x.transpose(1, 2))
