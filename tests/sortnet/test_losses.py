"""relaxops.TopKCrossEntropyLoss: the definition, CrossEntropyLoss semantics, backends, errors."""

import pytest
import relaxops
import torch
from relaxops.sortnet import reference
from relaxops.sortnet.losses import _log
from relaxops.sortnet.networks import resolve_network
from testing import BACKEND_DEVICE

METHODS = ("splitter_selection", "bitonic", "odd_even", "neuralsort", "softsort", "ot_sort")


def rank_probabilities(x, method, inv_temp, K):
    """P[b, c, r - 1] = probability that class c has rank r (1 = highest), r <= K, from the dense matrices."""
    n = x.shape[1]
    if method in ("neuralsort", "softsort"):
        X = getattr(relaxops, method)(x, 1.0 / inv_temp, backend="reference")
    elif method == "ot_sort":
        X = n * relaxops.ot_sort(x, 1.0 / inv_temp, return_plan=True, backend="reference")[1]
    else:
        key = f"{method}:{K}" if method == "splitter_selection" else method
        X = reference.sort(x, resolve_network(key, n), "cauchy", inv_temp)[1]
    return X[..., -K:].flip(-1)


def definition(x, y, p_k, method, inv_temp, top1_mode):
    """The loss by its definition -log sum_k P_K(k) sum_{r <= k} P[r, y] (split forms for 'sm' / 'smce')."""
    B, K = x.shape[0], len(p_k)
    P = rank_probabilities(x, method, inv_temp, K)[torch.arange(B), y]  # [B, K]
    top = [P[:, :k].sum(1) for k in range(1, K + 1)]  # P(y in the top k)
    softmax_y = torch.softmax(x, 1)[torch.arange(B), y]
    smooth = lambda q: -torch.log(q * (1 - 2e-7) + 1e-7)  # noqa: E731
    if top1_mode == "sort":
        return smooth(sum(p * t for p, t in zip(p_k, top))).mean()
    rest = sum((p * t for p, t in zip(p_k[1:], top[1:])), torch.zeros(B, dtype=x.dtype))
    if top1_mode == "sm":
        return smooth(p_k[0] * softmax_y + rest).mean()
    ce = torch.nn.functional.cross_entropy(x, y)
    return p_k[0] * ce + sum(p_k[1:]) * smooth(rest).mean()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("top1_mode", ["sm", "smce", "sort"])
@pytest.mark.parametrize("p_k", [[0.2] * 5, [0.5, 0, 0, 0, 0.5], [0.1, 0.9], [1.0]])
def test_matches_definition(method, top1_mode, p_k):
    x = torch.randn(7, 13, dtype=torch.float64) * 2
    y = torch.randint(0, 13, (7,))
    loss = relaxops.TopKCrossEntropyLoss(p_k, method, inverse_temperature=1.5, top1_mode=top1_mode)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    got, expected = loss(xa, y), definition(xb, y, p_k, method, 1.5, top1_mode)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(got, xa)[0], torch.autograd.grad(expected, xb)[0], rtol=1e-7, atol=1e-10
    )


@pytest.mark.parametrize("backend,device", BACKEND_DEVICE)
@pytest.mark.parametrize("method", METHODS)
def test_backends_agree(backend, device, method):
    x = torch.randn(6, 21, dtype=torch.float64) * 2
    y = torch.randint(0, 21, (6,))
    loss = relaxops.TopKCrossEntropyLoss([0.3, 0.2, 0.5], method, "logistic_phi", 2.0, m=8, backend="reference")
    xa = x.clone().requires_grad_(True)
    expected = loss(xa, y)
    loss.backend = backend
    xb = x.to(device).requires_grad_(True)
    got = loss(xb, y.to(device))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(got, xb)[0].cpu(), torch.autograd.grad(expected, xa)[0], rtol=1e-7, atol=1e-10
    )


def test_preselection_forces_the_true_class_in():
    x = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([5])  # the lowest score
    loss = relaxops.topk_cross_entropy(x, y, [0.5, 0.5], "odd_even", m=3, top1_mode="sort")
    sub = torch.tensor([[0.0, 5.0, 4.0]], dtype=torch.float64)  # [s_y, the two highest others], label 0
    expected = relaxops.topk_cross_entropy(sub, torch.tensor([0]), [0.5, 0.5], "odd_even", top1_mode="sort")
    torch.testing.assert_close(loss, expected)
    (g,) = torch.autograd.grad(loss, x)
    assert g[0, 2:5].abs().sum() == 0 and g[0, 5] < 0  # only the selected scores get gradients


def test_cross_entropy_semantics():
    x = torch.randn(9, 11, dtype=torch.float64)
    y = torch.randint(0, 11, (9,))
    y[2] = -100
    w = torch.rand(11, dtype=torch.float64) + 0.5
    per = relaxops.topk_cross_entropy(x, y, [0.5, 0.5], reduction="none", weight=w)
    assert per.shape == (9,) and per[2] == 0
    keep = y != -100
    unweighted = relaxops.topk_cross_entropy(x[keep], y[keep], [0.5, 0.5], reduction="none")
    torch.testing.assert_close(per[keep], unweighted * w[y[keep]])
    torch.testing.assert_close(relaxops.topk_cross_entropy(x, y, [0.5, 0.5], reduction="sum", weight=w), per.sum())
    torch.testing.assert_close(relaxops.topk_cross_entropy(x, y, [0.5, 0.5], weight=w), per.sum() / w[y[keep]].sum())
    # p_k = [1] with 'smce' is softmax cross-entropy, weights and ignore_index included
    ce = torch.nn.CrossEntropyLoss(weight=w)(x, y)
    torch.testing.assert_close(relaxops.TopKCrossEntropyLoss([1.0], top1_mode="smce", weight=w)(x, y), ce)


def test_per_sample_p_k():
    x, y = torch.randn(4, 9, dtype=torch.float64), torch.randint(0, 9, (4,))
    pk = torch.tensor([[1.0, 0, 0], [0, 0, 1.0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    loss = relaxops.TopKCrossEntropyLoss([1 / 3] * 3, reduction="none")
    per = loss(x, y, pk)
    for b in range(4):
        single = relaxops.topk_cross_entropy(x[b : b + 1], y[b : b + 1], pk[b].tolist(), reduction="none")
        torch.testing.assert_close(per[b : b + 1], single)


def test_confident_correct_prediction_has_small_loss():
    x = torch.zeros(2, 50)
    x[0, 7], x[1, 3] = 30.0, 30.0
    loss = relaxops.TopKCrossEntropyLoss([0.2] * 5, "splitter_selection", "logistic", 10.0, top1_mode="sort")
    assert loss(x, torch.tensor([7, 3])) < 1e-3
    assert loss(x, torch.tensor([8, 4])) > 1.0


def test_ot_sort_method_hard_limit():
    """At a high inverse temperature the optimal-transport ranking is the exact one: a label ranked in the top 3
    has a loss near 0 with P_K = [0, 0, 1], one ranked 4th a large loss."""
    x = torch.tensor([[3.0, 9.0, 1.0, 7.0, 5.0, 0.0, 2.0]], dtype=torch.float64).repeat(2, 1)
    loss = relaxops.TopKCrossEntropyLoss([0, 0, 1.0], "ot_sort", inverse_temperature=1e3, top1_mode="sort")
    per = relaxops.topk_cross_entropy(x, torch.tensor([4, 0]), [0, 0, 1.0], "ot_sort", inverse_temperature=1e3,
                                      top1_mode="sort", reduction="none")  # fmt: skip
    assert per[0] < 1e-3 and per[1] > 5.0
    assert loss(x[:1], torch.tensor([3])) < 1e-3


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(p_k=[0.5, 0.4]), ValueError, "p_k must sum to 1"),
        (dict(p_k=[1.5, -0.5]), ValueError, "p_k must be finite and non-negative"),
        (dict(p_k="abc"), TypeError, "p_k must be a sequence of numbers"),
        (dict(m=2), ValueError, r"m must be an integer > K"),
        (dict(top1_mode="max"), ValueError, "top1_mode must be one of"),
        (dict(method="sinkhorn"), ValueError, "method must be one of"),
        (dict(reduction="avg"), ValueError, "reduction must be one of"),
        (dict(inverse_temperature=0.0), ValueError, "inverse_temperature must be a finite number > 0"),
    ],
)
def test_bad_construction(kwargs, exc, match):
    args = dict(p_k=[0.5, 0.5])
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        relaxops.TopKCrossEntropyLoss(**args)


def test_bad_call():
    loss = relaxops.TopKCrossEntropyLoss([0.5, 0.5], m=4)
    x, y = torch.randn(3, 6), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=r"target must hold class indices in \[0, 6\)"):
        loss(x, torch.tensor([0, 6, 1]))
    with pytest.raises(ValueError, match=r"target must have shape \[3\]"):
        loss(x, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="target must be an integer tensor"):
        loss(x, y.float())
    with pytest.raises(ValueError, match=r"m must be an integer with K < m < n"):
        loss(torch.randn(3, 4), y)
    with pytest.raises(ValueError, match=r"a per-sample p_k must have shape \[3, K\]"):
        loss(x, y, torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="p_k must sum to 1"):
        loss(x, y, torch.full((3, 2), 0.3))
    with pytest.raises(ValueError, match=r"weight must be a tensor of shape \[6\]"):
        relaxops.topk_cross_entropy(x, y, [0.5, 0.5], weight=torch.ones(5))
    with pytest.raises(ValueError, match="input must be"):
        loss(torch.randn(3, 6, 2), y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_preselection_equals_torch(dtype):
    """The CPU preselection kernel (one pass each way, what the loss runs with m on the cpu backend) against
    PyTorch's scatter + topk + cat: the values in order (NaN first, as torch.topk), and the gradient, which goes to
    the selected columns (ties: the lower column first)."""
    from relaxops.sortnet import ops

    g = torch.Generator().manual_seed(0)
    B, n, m = 37, 101, 9
    x = torch.randn(B, n, generator=g, dtype=dtype)
    x[3, 7] = float("nan")
    x[5] = 1.0  # all tied
    x[6, 10], x[6, 11] = float("inf"), float("-inf")
    y = torch.randint(0, n, (B,), generator=g)
    xa = x.clone().requires_grad_(True)
    got = ops.preselect(xa, y, m)
    others = x.scatter(1, y[:, None], float("-inf"))
    expected = torch.cat([x.gather(1, y[:, None]), others.topk(m - 1, 1).values], 1)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    cot = torch.randn(B, m, generator=g, dtype=dtype)
    (grad,) = torch.autograd.grad(got, xa, cot)
    for b in range(B):
        row = x[b].tolist()
        key = lambda j, row=row: (row[j] == row[j], -row[j] if row[j] == row[j] else 0.0, j)  # noqa: E731
        chosen = [int(y[b])] + sorted((j for j in range(n) if j != int(y[b])), key=key)[: m - 1]
        want = torch.zeros(n, dtype=dtype)
        want[chosen] = cot[b]
        assert torch.equal(grad[b], want), b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_label_softmax_equals_torch(dtype):
    """The CPU kernel of the loss's top-1 term, softmax(x)[b, index[b]], against PyTorch's softmax: values (NaN
    where a row has NaN or +inf), the gradient, and the second derivative through create_graph."""
    from relaxops.sortnet import ops

    g = torch.Generator().manual_seed(1)
    x = torch.randn(23, 17, generator=g, dtype=dtype) * 3
    x[2, 5] = float("nan")
    x[4, 1] = float("-inf")
    x[6, 0] = float("inf")
    index = torch.randint(0, 17, (23,), generator=g)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    got = ops.label_softmax(xa, index)
    expected = torch.softmax(xb, -1).gather(1, index[:, None]).squeeze(1)
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    cot = torch.randn(23, generator=g, dtype=dtype)
    torch.testing.assert_close(
        torch.autograd.grad(got, xa, cot)[0], torch.autograd.grad(expected, xb, cot)[0], equal_nan=True, **tol
    )
    if dtype == torch.float64:
        y = torch.randn(5, 7, generator=g, dtype=dtype, requires_grad=True)
        torch.autograd.gradgradcheck(lambda t: ops.label_softmax(t, index[:5] % 7), (y,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_log_equals_log(dtype):
    """The CPU path's log from log1p (PyTorch's log stalls on a shared CPU): within 2 ulp of log, same gradient."""
    z = torch.cat(
        [torch.logspace(-7, 0, 2001, dtype=torch.float64), torch.tensor([0.5, 0.5 - 1e-12, 1.0], dtype=torch.float64)]
    ).to(dtype)
    z.requires_grad_(True)
    got, want = _log(z, True), torch.log(z.double())
    eps = torch.finfo(dtype).eps
    assert ((got.double() - want).abs() <= 2 * eps * want.abs().clamp(min=1)).all()
    (grad,) = torch.autograd.grad(got.sum(), z)
    torch.testing.assert_close(grad, 1 / z.detach(), rtol=4 * eps, atol=0)
