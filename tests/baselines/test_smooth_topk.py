"""relaxops.baselines.smooth_topk: the smooth top-k SVM loss against difftopk's smooth_topk.py, a brute-force
enumeration of the k-subsets, an autograd float64 recursion, gradcheck, the hard closed form, reductions, errors."""

import itertools
import math

import pytest
import torch
from relaxops.baselines import smooth_topk as st
from relaxops.baselines.smooth_topk import SmoothHardTopKLoss, SmoothTopKLoss, smooth_topk_svm_loss
from testing import DEVICES, TOLERANCES, assert_as_accurate_as_reference, assert_close

from .smooth_topk_oracle import exact_loss_and_grad

try:
    from difftopk import smooth_topk as difftopk_st
except ImportError:  # the tests that do not compare with the original still run
    difftopk_st = None
needs_difftopk = pytest.mark.skipif(difftopk_st is None, reason="difftopk is not installed")
# difftopk instantiates its autograd Function (deprecated in torch)
pytestmark = pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")

# (n, k, tau): odd n, k = 1, 2, 5, 10, and n at the smallest allowed value for k (n - 1 = k + p - 1).
CASES = [
    (2, 1, 1.0),
    (5, 1, 0.5),
    (6, 2, 1.0),
    (7, 2, 2.0),
    (7, 3, 0.5),
    (7, 5, 1.0),
    (9, 5, 2.0),
    (33, 5, 1.0),
    (100, 5, 0.5),
    (50, 10, 1.0),
]
SMALL_CASES = [c for c in CASES if c[0] <= 9]


# ---------------------------------------------------------------------------------------------------------------
# oracles (float64, autograd)


def others_and_true(scores, labels):
    """``[B, n-1]`` scores of the other classes (in order) and ``[B]`` the true class's score."""
    keep = torch.ones_like(scores, dtype=torch.bool).scatter(1, labels[:, None], False)
    return scores[keep].view(scores.shape[0], -1), scores.gather(1, labels[:, None]).squeeze(1)


def brute_force(scores, labels, k, tau, alpha=1.0):
    """Log-sum-exp definition over all k-subsets Y: tau LSE_Y((alpha [y not in Y] + mean s_Y) / tau)
    - tau LSE_{Y containing y}(mean s_Y / tau); per sample ``[B]``."""
    n = scores.shape[1]
    subsets = torch.tensor(list(itertools.combinations(range(n), k)))  # [S, k]
    means = scores[:, subsets].mean(-1)  # [B, S]
    holds_y = (subsets[None] == labels[:, None, None]).any(-1)
    everything = torch.logsumexp((means + alpha * (~holds_y).to(means.dtype)) / tau, dim=1)
    with_y = torch.logsumexp((means / tau).masked_fill(~holds_y, -math.inf), dim=1)
    return tau * (everything - with_y)


def recursion(scores, labels, k, tau, alpha=1.0):
    """Same loss from log e_j by the class-by-class recursion e_j <- e_j + z_c e_{j-1} (log space, all terms
    positive, so autograd gives exact gradients); per sample ``[B]``."""
    others, true = others_and_true(scores, labels)
    log_z = others / (k * tau)
    log_e = [torch.zeros_like(true)]  # degrees 0 .. min(c, k) after c classes
    for c in range(log_z.shape[1]):
        grown = [log_e[-1] + log_z[:, c]] if len(log_e) <= k else []
        log_e = [log_e[0]] + [torch.logaddexp(log_e[j], log_e[j - 1] + log_z[:, c]) for j in range(1, len(log_e))]
        log_e += grown
    u = alpha / tau + log_e[k] - log_e[k - 1] - true / (k * tau)
    return tau * torch.logaddexp(torch.zeros_like(u), u)


def hard_closed_form(scores, labels, k, alpha=1.0):
    others, true = others_and_true(scores, labels)
    kth = others.sort(dim=1, descending=True).values[:, k - 1]
    return torch.clamp(alpha + (kth - true) / k, min=0)


def value_and_grad(fn, scores):
    scores = scores.detach().clone().requires_grad_(True)
    loss = fn(scores)
    (grad,) = torch.autograd.grad(loss.sum(), scores)
    return loss.detach(), grad


def make_inputs(B, n, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, n, generator=g, dtype=torch.float64) * scale, torch.randint(0, n, (B,), generator=g)


def make_mixed(B, n, k, tau, seed=0):
    """Scores where every other row has its top k lifted by 2 k tau ln(1000) (hard rows), labels inside and
    outside the top k."""
    scores, labels = make_inputs(B, n, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    for b in range(0, B, 2):
        top = torch.randperm(n, generator=g)[:k]
        scores[b, top] += 2 * k * tau * math.log(1000.0)
    return scores, labels


def is_hard(scores, k, tau):
    top = scores.topk(k + 1, dim=1).values
    return top[:, k - 1] - top[:, k] >= k * tau * math.log(1000.0)


# ---------------------------------------------------------------------------------------------------------------
# the math


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 13])
def test_log_normalized_elementary_symmetric_polynomials(m):
    """The product tree of sorted runs (odd counts padded with the empty run) against the sums over all j-subsets,
    relative to the product of the j largest variables."""
    scores = torch.randn(4, m, generator=torch.Generator().manual_seed(m), dtype=torch.float64) * 3
    scores = scores.sort(dim=1, descending=True).values
    degree, scale = min(m, 6), 0.7
    g = st._log_normalized_elementary_symmetric(scores, degree, scale)
    assert g.shape == (4, degree + 1)
    for j in range(degree + 1):
        subsets = list(itertools.combinations(range(m), j))
        subsets = torch.tensor(subsets, dtype=torch.long).reshape(len(subsets), j)
        expected = torch.logsumexp(scores[:, subsets].sum(-1) / scale, dim=1) - scores[:, :j].sum(1) / scale
        torch.testing.assert_close(g[:, j], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,k,tau", SMALL_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_equals_subset_enumeration(n, k, tau, dtype):
    scores, labels = make_inputs(6, n, scale=3.0, seed=n + 10 * k)
    alpha = 0.7
    exact = brute_force(scores, labels, k, tau, alpha)
    ours = smooth_topk_svm_loss(scores.to(dtype), labels, k, tau, alpha, hard_threshold=None, reduction="none")
    assert ours.dtype == dtype and ours.shape == (6,)
    assert_close(ours, exact, dtype)


@pytest.mark.parametrize("n,k,tau", CASES)
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_float64_gradient_equals_recursion(n, k, tau, scale):
    """Exact to float64 rounding at both scales (at x100, difftopk's alternating series cancels)."""
    scores, labels = make_inputs(8, n, scale=scale, seed=n + 10 * k)
    exact_loss, exact_grad = value_and_grad(lambda s: recursion(s, labels, k, tau), scores)
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, hard_threshold=None, reduction="none"), scores
    )
    assert_close(loss, exact_loss, scale=scale)
    torch.testing.assert_close(grad, exact_grad, rtol=1e-9, atol=1e-9 * exact_grad.abs().max().item())


@pytest.mark.parametrize("n,k,tau", [(5, 1, 1.0), (6, 2, 0.5), (7, 3, 2.0), (9, 5, 1.0), (12, 2, 0.3)])
def test_gradcheck_smooth(n, k, tau):
    scores, labels = make_inputs(3, n, scale=2.0, seed=n)
    scores.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, 0.7, hard_threshold=None, reduction="none"), (scores,)
    )


def test_float32_gradient_at_large_scores():
    """At scores x100 (where difftopk's alternating series cancels) the float32 gradient is accurate."""
    n, k, tau = 33, 5, 1.0
    scores, labels = make_inputs(8, n, scale=100.0, seed=3)
    scores = scores.float().double()  # the float32 input exactly
    _, exact = value_and_grad(lambda s: recursion(s, labels, k, tau).mean(), scores)
    _, grad = value_and_grad(lambda s: smooth_topk_svm_loss(s, labels, k, tau, hard_threshold=None), scores.float())
    assert_close(grad.double(), exact, torch.float32, scale=exact.abs().max().item())


def assert_matches_oracle(scores, labels, k, tau, alpha, dtype, msg=""):
    """Loss and gradient in ``dtype`` against the 80-digit oracle on the same (``dtype``-rounded) scores: rtol and
    atol of ``dtype``, the gradient's atol relative to its largest entry (rounding of a few bounded weights)."""
    scores = scores.to(dtype)
    exact_loss, exact_grad = exact_loss_and_grad(scores, labels, k, tau, alpha)
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, alpha, hard_threshold=None, reduction="none"), scores
    )
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all(), msg
    assert_close(loss.double(), exact_loss, dtype, msg=f"loss {msg}")
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(
        grad.double(),
        exact_grad,
        rtol=tol["rtol"],
        atol=tol["atol"] * max(1.0, exact_grad.abs().max().item()),
        msg=f"grad {msg}",
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dominant_scores_are_exact(dtype):
    """Issue: one score ~1/eps times the others made the log-space product tree absorb every smaller factor
    (scores [0, 1e30, 1, 2, 3], label 0, k = 2 gave 0.69 instead of 3.22). Against the 80-digit oracle: that
    case, and rows of O(1) scores with some entries (true class included) replaced by +-1e8, 1e15, 1e30."""
    assert_matches_oracle(torch.tensor([[0.0, 1e30, 1.0, 2.0, 3.0]]), torch.tensor([0]), 2, 1.0, 1.0, dtype)
    g = torch.Generator().manual_seed(0)
    for n, k, tau in [(5, 1, 1.0), (5, 2, 1.0), (7, 3, 0.5), (9, 2, 2.0), (8, 5, 1.0)]:
        for big in (1e8, 1e15, 1e30):
            scores, labels = make_inputs(6, n, seed=n + k)
            huge = torch.rand(6, n, generator=g) < 0.3
            sign = torch.randint(0, 2, (6, n), generator=g) * 2 - 1
            scores = torch.where(huge, sign * big * (1 + torch.rand(6, n, generator=g, dtype=torch.float64)), scores)
            assert_matches_oracle(scores, labels, k, tau, 0.5, dtype, f"n={n} k={k} tau={tau} big={big}")


@pytest.mark.parametrize("n", [9, 10, 11])
def test_float32_ties_at_large_scale_have_finite_gradients(n):
    """Issue (found by the long fuzz profile): float32 scores in {0, 1e4, 2e4} with tau = 0.01 (scores / tau ~ 1e6,
    many ties) gave NaN gradients in difftopk's cancellation-prone backward series. Against the float64 recursion
    on the same scores (its log-space sums of magnitude ~1e6 are exact to ~1e-10, far below float32's tolerance)."""
    k, tau = 5, 0.01
    g = torch.Generator().manual_seed(n)
    scores = (torch.randint(0, 3, (40, n), generator=g) * 1e4).float()
    labels = torch.randint(0, n, (40,), generator=g)
    exact_loss, exact_grad = value_and_grad(lambda s: recursion(s, labels, k, tau), scores.double())
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, hard_threshold=None, reduction="none"), scores
    )
    assert torch.isfinite(grad).all()
    assert_close(loss.double(), exact_loss, torch.float32)
    assert_close(grad.double(), exact_grad, torch.float32, scale=exact_grad.abs().max().item())


def limit_with_infinite_others(scores, labels, k, tau, alpha):
    """The module note's limit for ``a < k`` other classes at +inf (finite true score): the loss over the finite
    others ``z_f`` with ``log e_{k-a}(z_f) - log e_{k-1-a}(z_f)``, by enumeration."""
    out = []
    for row, y in zip(scores.tolist(), labels.tolist()):
        finite = [v for c, v in enumerate(row) if c != y and math.isfinite(v)]
        a = len(row) - 1 - len(finite)

        log_e = [
            torch.logsumexp(
                torch.tensor([sum(sub) / (k * tau) for sub in itertools.combinations(finite, j)], dtype=torch.float64),
                0,
            ).item()
            for j in (k - a, k - 1 - a)
        ]
        u = alpha / tau + log_e[0] - log_e[1] - row[y] / (k * tau)
        out.append(tau * math.log1p(math.exp(u)))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("threshold", [None, 1000.0])
def test_infinite_score_of_another_class_gives_the_limit(threshold):
    """Issue: a +inf score of another class gave NaN. Now the limit (module note): a < k of them join every subset
    (finite loss, gradient 0 on them, the gradient of the limit elsewhere), a >= k give +inf."""
    inf = math.inf
    scores = torch.tensor(
        [[0.0, inf, 1.0, 2.0, 3.0, -1.0], [0.5, inf, inf, 2.0, -3.0, 1.0], [0.0, 4.0, inf, 1.0, 2.0, 3.0]],
        dtype=torch.float64,
    )
    labels = torch.tensor([0, 0, 1])
    k, tau, alpha = 3, 0.5, 0.7
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, alpha, threshold, reduction="none"), scores
    )
    assert_close(loss, limit_with_infinite_others(scores, labels, k, tau, alpha))
    # the same as replacing +inf by a score far above the rest (exact there: dominant scores)
    big = scores.masked_fill(scores.isinf(), 1e300)
    loss_big, grad_big = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, alpha, threshold, reduction="none"), big
    )
    assert_close(loss, loss_big)
    assert_close(grad, grad_big)
    assert (grad[scores.isinf()] == 0).all() and (grad.abs().sum(1) > 0).all()
    # a >= k: +inf, finite gradient
    for k_, row in [(1, [0.0, inf, 1.0, 2.0, 3.0]), (2, [0.0, inf, inf, 2.0, 3.0])]:
        s = torch.tensor([row], dtype=torch.float64, requires_grad=True)
        loss = smooth_topk_svm_loss(s, torch.tensor([0]), k_, tau, alpha, threshold, reduction="none")
        assert loss.item() == inf and torch.isfinite(torch.autograd.grad(loss.sum(), s)[0]).all()


@pytest.mark.parametrize("n,k", [(5, 1), (6, 2), (8, 3)])
def test_smooth_loss_tends_to_hard_loss(n, k):
    """tau LSE over a set lies in [max, max + tau log size]: L - l_k in [-tau log C(n-1, k-1), tau log C(n, k)]."""
    scores, labels = make_inputs(16, n, scale=2.0, seed=n)
    hard = hard_closed_form(scores, labels, k)
    for tau in (1.0, 0.1, 1e-3):
        diff = smooth_topk_svm_loss(scores, labels, k, tau, hard_threshold=None, reduction="none") - hard
        assert (diff >= -tau * math.log(math.comb(n - 1, k - 1)) - 1e-12).all()
        assert (diff <= tau * math.log(math.comb(n, k)) + 1e-12).all()


@pytest.mark.parametrize("n,k,alpha", [(5, 1, 1.0), (7, 3, 1.0), (9, 5, 0.3), (20, 2, 4.0)])
def test_hard_loss_equals_closed_form(n, k, alpha):
    """hard_threshold=1 puts every sample on the hard branch (the threshold k tau ln 1 = 0)."""
    scores, labels = make_inputs(12, n, scale=1.0, seed=n)
    rows = torch.arange(0, 12, 3)
    scores[rows, labels[rows]] += 3.0 + alpha * k  # true class far ahead: loss 0
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, 0.5, alpha, hard_threshold=1.0, reduction="none"), scores
    )
    # max(0, max_{Y not holding y}(alpha + mean s_Y) - max_{Y holding y} mean s_Y), by enumeration
    subsets = torch.tensor(list(itertools.combinations(range(n), k)))
    means = scores[:, subsets].mean(-1)
    holds_y = (subsets[None] == labels[:, None, None]).any(-1)
    by_subsets = torch.clamp(
        (means + alpha).masked_fill(holds_y, -math.inf).amax(1) - means.masked_fill(~holds_y, -math.inf).amax(1), min=0
    )
    torch.testing.assert_close(loss, by_subsets, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss, hard_closed_form(scores, labels, k, alpha), rtol=1e-12, atol=1e-12)
    assert (loss > 0).any() and (loss == 0).any()
    # gradient: +1/k on the k-th largest other class, -1/k on the true class, where the loss is positive
    others, _ = others_and_true(scores, labels)
    kth_value = others.sort(dim=1, descending=True).values[:, k - 1 : k]
    expected = ((scores == kth_value).double() - torch.nn.functional.one_hot(labels, n).double()) / k
    torch.testing.assert_close(grad, expected * (loss > 0).double()[:, None], rtol=0, atol=1e-15)


@pytest.mark.parametrize("threshold", [None, 1000.0])
def test_equivariant_under_class_permutation(threshold):
    scores, labels = make_mixed(6, 11, 3, 0.5, seed=7)
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(1))
    inverse = perm.argsort()
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, 3, 0.5, hard_threshold=threshold, reduction="none"), scores
    )
    loss_p, grad_p = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, inverse[labels], 3, 0.5, hard_threshold=threshold, reduction="none"),
        scores[:, perm],
    )
    assert_close(loss_p, loss)
    assert_close(grad_p, grad[:, perm])


# ---------------------------------------------------------------------------------------------------------------
# against difftopk


def check_against_difftopk(ours_fn, theirs_fn, scores64, exact_loss, exact_grad, dtype, what, check_grad=True):
    scores = scores64.to(dtype)
    loss, grad = value_and_grad(ours_fn, scores)
    ref_loss, ref_grad = value_and_grad(theirs_fn, scores)
    assert loss.dtype == ref_loss.dtype == dtype
    scale = 1.0 + exact_loss.abs().item()
    assert_close(loss, ref_loss, dtype, scale=scale, msg=f"loss {what}")
    assert_close(loss, exact_loss, dtype, scale=scale, msg=f"loss vs float64 {what}")
    if check_grad:
        # both are the same algorithm in the same precision; near the series/expansion switch the cancelled
        # digits differ, so: close to difftopk, or at most twice as far from float64 as difftopk is.
        assert_as_accurate_as_reference(grad, ref_grad, exact_grad, dtype, msg=f"grad {what}")
    return grad, ref_grad


@needs_difftopk
@pytest.mark.parametrize("n,k,tau", CASES)
@pytest.mark.parametrize("scale", [1.0, 100.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_smooth_topk_loss_agrees_with_difftopk(n, k, tau, scale, dtype):
    B = 8
    scores, labels = make_inputs(B, n, scale=scale, seed=n + 10 * k)
    exact_loss, exact_grad = value_and_grad(lambda s: recursion(s, labels, k, tau).sum() / B, scores)
    theirs = difftopk_st.SmoothTopKLoss(n, k, tau)
    ours = SmoothTopKLoss(n, k, tau)
    # difftopk's k = 1 gradient is wrong (test_difftopk_k1_gradient_quirk): compare values only there
    check_against_difftopk(
        lambda s: ours(s, labels),
        lambda s: theirs(s, labels),
        scores,
        exact_loss,
        exact_grad,
        dtype,
        f"n={n} k={k} tau={tau} x{scale} {dtype}",
        check_grad=k > 1,
    )


@needs_difftopk
@pytest.mark.parametrize("n,k,tau", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_smooth_hard_topk_loss_agrees_with_difftopk(n, k, tau, dtype):
    B = 10
    scores, labels = make_mixed(B, n, k, tau, seed=n + 10 * k)
    hard = is_hard(scores, k, tau)
    assert hard.any() and (~hard).any()

    def exact_fn(s):
        per_sample = torch.where(hard, hard_closed_form(s, labels, k), recursion(s, labels, k, tau))
        return per_sample.sum() / B

    exact_loss, exact_grad = value_and_grad(exact_fn, scores)
    theirs = difftopk_st.SmoothHardTopKLoss(n, k, tau)
    ours = SmoothHardTopKLoss(n, k, tau)
    grad, ref_grad = check_against_difftopk(
        lambda s: ours(s, labels),
        lambda s: theirs(s, labels),
        scores,
        exact_loss,
        exact_grad,
        dtype,
        f"n={n} k={k} tau={tau} {dtype}",
        check_grad=k > 1,
    )
    # hard rows: exactly the hard gradient (+-1/(k B) or 0), in both
    assert_close(grad[hard], ref_grad[hard], dtype)


@needs_difftopk
@pytest.mark.parametrize("n,tau", [(5, 1.0), (9, 0.5)])
def test_difftopk_k1_gradient_quirk(n, tau):
    """For k = 1, difftopk's backward takes d log e_0 / d log z_c (e_0 = 1) from its expansion branch, which
    gives 1 instead of 0. Its gradient is then ours plus d loss / d log e_0 * 1/(k tau) on every other class:
    -sigmoid(u) / B with u the softplus argument, sigmoid(u) = 1 - exp(-loss / tau). Ours is the exact one."""
    B = 6
    scores, labels = make_inputs(B, n, seed=n)
    _, exact = value_and_grad(lambda s: brute_force(s, labels, 1, tau).sum() / B, scores)
    _, grad = value_and_grad(lambda s: SmoothTopKLoss(n, 1, tau)(s, labels), scores)
    _, theirs = value_and_grad(lambda s: difftopk_st.SmoothTopKLoss(n, 1, tau)(s, labels), scores)
    assert_close(grad, exact)
    per_sample = smooth_topk_svm_loss(scores, labels, 1, tau, hard_threshold=None, reduction="none")
    spurious = -(1 - torch.exp(-per_sample / tau))[:, None] / B * (1 - torch.nn.functional.one_hot(labels, n))
    assert_close(theirs, grad + spurious)
    assert (theirs - exact).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# devices, reductions, modules


@pytest.mark.parametrize("device", [pytest.param(d, marks=[pytest.mark.gpu] if d == "cuda" else []) for d in DEVICES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_devices(device, dtype):
    n, k, tau = 37, 5, 0.5
    scores, labels = make_mixed(12, n, k, tau, seed=5)
    scores[1::4] *= 100.0  # expansion branch
    hard = is_hard(scores, k, tau)
    exact_loss, exact_grad = value_and_grad(
        lambda s: torch.where(hard, hard_closed_form(s, labels, k), recursion(s, labels, k, tau)), scores
    )
    loss, grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels.to(device), k, tau, reduction="none"),
        scores.to(device=device, dtype=dtype),
    )
    cpu_loss, cpu_grad = value_and_grad(
        lambda s: smooth_topk_svm_loss(s, labels, k, tau, reduction="none"), scores.to(dtype)
    )
    assert loss.device.type == grad.device.type == device
    assert_close(loss.cpu(), exact_loss, dtype, scale=100.0)
    # the same algorithm on another device: as accurate as on the CPU (rounding differs in the cancelled digits)
    assert_as_accurate_as_reference(grad.cpu(), cpu_grad, exact_grad, dtype, msg=device)


@pytest.mark.parametrize("threshold", [None, 1000.0])
def test_reductions_and_modules(threshold):
    n, k, tau = 10, 2, 0.5
    scores, labels = make_mixed(6, n, k, tau, seed=2)
    per_sample = smooth_topk_svm_loss(scores, labels, k, tau, hard_threshold=threshold, reduction="none")
    assert per_sample.shape == (6,)
    total = smooth_topk_svm_loss(scores, labels, k, tau, hard_threshold=threshold, reduction="sum")
    mean = smooth_topk_svm_loss(scores, labels, k, tau, hard_threshold=threshold)
    assert total.shape == mean.shape == ()
    assert_close(total, per_sample.sum())
    assert_close(mean, per_sample.sum() / 6)
    module = (SmoothTopKLoss if threshold is None else SmoothHardTopKLoss)(n, k, tau, reduction="none")
    assert_close(module(scores, labels), per_sample)
    assert "k=2" in repr(module)
    # int32 labels, empty batch
    assert_close(smooth_topk_svm_loss(scores, labels.int(), k, tau, hard_threshold=threshold), mean)
    empty = smooth_topk_svm_loss(scores[:0], labels[:0], k, tau, hard_threshold=threshold, reduction="sum")
    assert empty.item() == 0.0


def test_gradient_flows_to_scores_only():
    scores, labels = make_mixed(4, 8, 2, 1.0, seed=4)
    scores.requires_grad_(True)
    SmoothHardTopKLoss(8, 2)(scores, labels).backward()
    assert scores.grad is not None and torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0
    # the row sums of the gradient vanish: the loss is invariant to adding a constant to a row
    assert_close(scores.grad.sum(1), torch.zeros(4, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------------
# errors

ERRORS = [
    (dict(scores=[[0.0] * 5]), TypeError, "scores must be a torch.Tensor"),
    (dict(scores=torch.zeros(2, 5, dtype=torch.int64)), TypeError, "scores must be float32 or float64"),
    (dict(scores=torch.zeros(2, 5, dtype=torch.float16)), TypeError, "scores must be float32 or float64"),
    (dict(scores=torch.zeros(5)), ValueError, r"scores must have shape \[B, n\]"),
    (dict(labels=[0, 1]), TypeError, "labels must be a torch.Tensor"),
    (dict(labels=torch.zeros(2)), TypeError, "labels must be an integer tensor"),
    (dict(labels=torch.zeros(2, dtype=torch.bool)), TypeError, "labels must be an integer tensor"),
    (dict(labels=torch.zeros(3, dtype=torch.long)), ValueError, r"labels must have shape \[B\] = \(2,\)"),
    (dict(labels=torch.tensor([0, 5])), ValueError, r"labels must lie in \[0, n\) = \[0, 5\)"),
    (dict(labels=torch.tensor([-1, 0])), ValueError, r"labels must lie in \[0, n\)"),
    (dict(k=0), ValueError, "k must be an integer >= 1"),
    (dict(k=2.0), ValueError, "k must be an integer >= 1"),
    (dict(k=5), ValueError, r"k=5 is too large for 5 classes: .* = 6 <= n - 1 = 4"),
    (dict(tau=0.0), ValueError, "tau must be a finite number > 0"),
    (dict(tau=-1.0), ValueError, "tau must be a finite number > 0"),
    (dict(alpha=math.nan), ValueError, "alpha must be a finite number"),
    (dict(hard_threshold=0.0), ValueError, "hard_threshold must be a finite number > 0"),
    (dict(reduction="avg"), ValueError, r"reduction must be one of \('mean', 'sum', 'none'\)"),
]


@pytest.mark.parametrize("kwargs,exc,match", ERRORS)
def test_errors(kwargs, exc, match):
    args = dict(
        scores=torch.zeros(2, 5),
        labels=torch.tensor([0, 4]),
        k=2,
        tau=1.0,
        alpha=1.0,
        hard_threshold=1000.0,
        reduction="mean",
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        smooth_topk_svm_loss(**args)


def test_k_limit_is_exact():
    """k + floor(1 + 0.2 k) - 1 <= n - 1: k = 5 needs n >= 7, k = 4 needs n >= 5."""
    smooth_topk_svm_loss(torch.zeros(1, 7), torch.tensor([0]), 5)
    smooth_topk_svm_loss(torch.zeros(1, 5), torch.tensor([0]), 4)
    with pytest.raises(ValueError, match="k=5 is too large for 6 classes"):
        smooth_topk_svm_loss(torch.zeros(1, 6), torch.tensor([0]), 5)
    with pytest.raises(ValueError, match="k=5 is too large for 6 classes"):
        SmoothTopKLoss(6, 5)


@pytest.mark.parametrize("cls", [SmoothTopKLoss, SmoothHardTopKLoss])
def test_module_errors(cls):
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        cls(1, 1)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        cls(10, 2, tau=0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        cls(10, 2, reduction="batchmean")
    with pytest.raises(ValueError, match="scores must have num_classes = 10 columns"):
        cls(10, 2)(torch.zeros(3, 9), torch.zeros(3, dtype=torch.long))
