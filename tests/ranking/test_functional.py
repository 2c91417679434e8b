"""Soft quantiles, medians and quantile normalisation: torch.quantile / torch.median / exact quantile normalisation in
the hard limit, any dim, padded rows equal to per-row unpadded calls (values and gradients), bad arguments."""

import math

import pytest
import torch
from relaxops import neuralsort, ranking, soft_sort, sort
from relaxops.ranking import functional as F
from testing import gapped

SHARP = dict(regularization_strength=1e-3)  # exact sorted values and ranks for gaps of 0.05 (L2 soft sort)


def _seed(s):
    return torch.Generator().manual_seed(s)


@pytest.mark.parametrize("interpolation", F.INTERPOLATIONS)
def test_quantile_equals_torch_quantile(interpolation):
    x = gapped((3, 2, 7))  # distinct along the last dim only: dims 0 and 1 may hold ties (equal values: same result)
    q = torch.tensor([0.0, 0.1, 0.25, 0.5, 0.9, 1.0], dtype=torch.float64)
    for dim in (1, -1, 0):
        ours = ranking.soft_quantile(x, q, dim, interpolation=interpolation, **SHARP)
        assert torch.allclose(ours, torch.quantile(x, q, dim, interpolation=interpolation), atol=1e-12, rtol=0)
    ours = ranking.soft_quantile(x, 0.3, 1, keepdim=True, interpolation=interpolation, **SHARP)
    assert torch.allclose(ours, torch.quantile(x, 0.3, 1, keepdim=True, interpolation=interpolation), atol=1e-12)


def test_median_equals_torch_median_lower():
    x = gapped((4, 8))  # even n: the lower of the two middle values
    assert torch.allclose(ranking.soft_median(x, **SHARP), torch.median(x, -1).values, atol=1e-12, rtol=0)
    x = gapped((5, 3, 4))
    ours = ranking.soft_median(x, dim=0, keepdim=True, **SHARP)
    assert torch.allclose(ours, torch.median(x, 0, keepdim=True).values, atol=1e-12, rtol=0)


@pytest.mark.parametrize("m", [7, 4, 1])
def test_quantile_normalize_is_exact_in_the_hard_limit(m):
    x = gapped((3, 7))
    reference = torch.randn(m, dtype=torch.float64, generator=_seed(1))
    out = ranking.quantile_normalize(x, reference, **SHARP)
    ranks = x.argsort(-1).argsort(-1).to(x.dtype)  # 0-based exact ranks
    expected = torch.quantile(reference, (ranks / 6).reshape(-1)).reshape(3, 7)
    assert torch.allclose(out, expected, atol=1e-12, rtol=0)
    if m == 7:  # classic quantile normalisation: rank r takes the r-th smallest reference value
        assert torch.allclose(out, reference.sort().values[ranks.long()], atol=1e-12, rtol=0)


def test_quantile_normalize_batched_reference_and_dim():
    x = gapped((2, 3, 5)).transpose(1, 2)  # distinct values along dim 1
    reference = torch.randn(2, 3, 4, dtype=torch.float64, generator=_seed(2))  # one per row of x along dim 1
    out = ranking.quantile_normalize(x, reference, dim=1, **SHARP)
    for i in range(2):
        for j in range(3):
            ranks = x[i, :, j].argsort().argsort().to(x.dtype)
            assert torch.allclose(out[i, :, j], torch.quantile(reference[i, j], ranks / 4), atol=1e-12)


def _pads(x, valid):
    """NaN and inf in the pads: they must never be read."""
    fill = torch.where(torch.rand(x.shape, generator=_seed(9)) < 0.5, math.nan, math.inf).to(x.dtype)
    return torch.where(valid, x, fill)


CALLS = [
    ("quantile", lambda x, **kw: ranking.soft_quantile(x, torch.tensor([0.2, 0.5, 1.0], dtype=x.dtype), **kw)),
    ("median", lambda x, **kw: ranking.soft_median(x, **kw)),
    ("quantile sort", lambda x, **kw: ranking.soft_quantile(x, 0.3, method="sort", steepness=3.0, **kw)),
    ("normalize", lambda x, **kw: ranking.quantile_normalize(x, torch.linspace(-1, 2, 5, dtype=x.dtype), **kw)),
    (
        "normalize pairwise",
        lambda x, **kw: ranking.quantile_normalize(
            x, torch.arange(3.0, dtype=x.dtype), method="pairwise", temperature=0.3, **kw
        ),
    ),  # noqa: E501
]


@pytest.mark.parametrize("name,call", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("how", ["lengths", "mask"])
def test_padded_rows_equal_unpadded_rows(name, call, how):
    n = 7
    lengths = torch.tensor([7, 0, 3, 1, 5])
    x0 = torch.randn(5, n, dtype=torch.float64, generator=_seed(3))
    if how == "lengths":
        valid = torch.arange(n) < lengths.unsqueeze(-1)
        kw = dict(lengths=lengths)
    else:
        valid = torch.rand(5, n, generator=_seed(4)) < 0.6
        valid[0], valid[1] = True, False
        kw = dict(mask=valid)
    x = _pads(x0, valid).requires_grad_()
    out = call(x, **kw)
    per_element = out.shape == x.shape
    w = torch.randn(out.shape, dtype=x.dtype, generator=_seed(5))
    (grad,) = torch.autograd.grad((out * w).sum(), x)
    assert not out.isnan().any() and not grad.isnan().any()
    assert (grad[~valid] == 0).all()
    for b in range(5):
        xb = x0[b][valid[b]].unsqueeze(0).requires_grad_()
        if xb.shape[-1] == 0:  # a row of no real entry: all zeros, no gradient
            assert (out[..., b, :] == 0).all() if per_element else (out[..., b] == 0).all()
            continue
        ob = call(xb)
        if per_element:
            got, wb = out[b][valid[b]].unsqueeze(0), w[b][valid[b]].unsqueeze(0)
            assert (out[b][~valid[b]] == 0).all()
        else:
            got, wb = out[..., b : b + 1], w[..., b : b + 1]
        assert torch.allclose(got, ob, atol=1e-12, rtol=0), (b, got, ob)
        (gb,) = torch.autograd.grad((ob * wb).sum(), xb)
        assert torch.allclose(grad[b][valid[b]], gb[0], atol=1e-12, rtol=0), b


@pytest.mark.parametrize(
    "method, options, op",
    [
        ("soft_sort", dict(regularization_strength=0.5), lambda x: soft_sort(x, regularization_strength=0.5)),
        ("sort", dict(steepness=5.0), lambda x: sort(x, steepness=5.0, return_matrix=False)[0]),
        ("neuralsort", dict(tau=0.7), lambda x: (x.unsqueeze(-2) @ neuralsort(x, tau=0.7)).squeeze(-2)),
    ],
)
def test_method_options_reach_the_operator(method, options, op):
    x = torch.randn(2, 5, dtype=torch.float64, generator=_seed(6))
    s = op(x)
    q = torch.tensor([0.0, 0.375, 1.0], dtype=x.dtype)  # positions 0, 1.5, 4
    expected = torch.stack([s[:, 0], (s[:, 1] + s[:, 2]) / 2, s[:, 4]])
    assert torch.allclose(ranking.soft_quantile(x, q, method=method, **options), expected, atol=1e-12)


def test_gradcheck():
    x = gapped((2, 6)).requires_grad_()
    torch.autograd.gradcheck(lambda t: ranking.soft_quantile(t, 0.3, regularization_strength=0.5), (x,))
    ref = torch.randn(4, dtype=torch.float64, generator=_seed(7)).requires_grad_()
    f = lambda t, r: ranking.quantile_normalize(t, r, method="pairwise", temperature=0.5)  # noqa: E731
    torch.autograd.gradcheck(f, (x, ref))


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda x: ranking.soft_quantile(x, 1.5), ValueError, "q"),
        (lambda x: ranking.soft_quantile(x[:, :0], 0.5), ValueError, "x must have at least one entry"),
        (lambda x: ranking.soft_quantile(x, "a"), TypeError, "q"),
        (lambda x: ranking.soft_quantile(x, 0.5, interpolation="cubic"), ValueError, "interpolation"),
        (lambda x: ranking.soft_quantile(x, 0.5, method="bogo"), ValueError, "method"),
        (lambda x: ranking.soft_quantile(x, 0.5, keepdim=1), TypeError, "keepdim"),
        (lambda x: ranking.soft_quantile(x, 0.5, dim=2), IndexError, "dim"),
        (lambda x: ranking.soft_median(x, lengths=torch.tensor([1, 9])), ValueError, "lengths"),
        (lambda x: ranking.quantile_normalize(x, torch.zeros(3, 4)), ValueError, "reference"),
        (lambda x: ranking.quantile_normalize(x, torch.zeros(0)), ValueError, "reference"),
        (lambda x: ranking.quantile_normalize(x, torch.zeros(3), method="sort"), ValueError, "method"),
        (lambda x: ranking.quantile_normalize(x, torch.zeros(3), method="pairwise", tau=1.0), TypeError, "pairwise"),
    ],
)
def test_bad_arguments_name_themselves(call, err, match):
    with pytest.raises(err, match=match):
        call(torch.randn(2, 6))


def test_hard_sort_gives_torch_quantile_and_a_gradient():
    x = gapped((3, 7)).requires_grad_()
    q = torch.tensor([0.1, 0.5, 0.8], dtype=x.dtype)
    for method, options in (("soft_sort", dict(regularization_strength=2.0)), ("neuralsort", dict(tau=2.0))):
        out = ranking.soft_quantile(x, q, method=method, hard=True, **options)
        assert torch.allclose(out, torch.quantile(x.detach(), q, -1), atol=1e-12)
        (g,) = torch.autograd.grad(out.sum(), x)
        assert g.isfinite().all() and g.abs().sum() > 0
