"""Relaxed indexing (docs/math/algorithms.md §1.9, §2.9, §5.3): hard limit, normalisation, the stop-gradient normaliser,
both kernels."""

from __future__ import annotations

import pytest
import torch
from relaxops.algorithms import framework as F
from relaxops.algorithms.indexing import cat_index, soft_index, soft_index_weights

f64 = torch.float64


@pytest.mark.parametrize("kernel", ["logistic", "gaussian"])
def test_hard_limit_and_normalisation(kernel):
    torch.manual_seed(0)
    A = torch.randn(3, 7, 5, dtype=f64)
    i = torch.tensor([[0.0], [3.0], [6.0]], dtype=f64)
    torch.testing.assert_close(soft_index(A, i, 200.0, kernel), A[torch.arange(3), i[:, 0].long()])
    c = soft_index_weights((7, 4), torch.rand(3, 2, dtype=f64) * 4, 1.3, kernel)
    torch.testing.assert_close(c.sum((1, 2)), torch.ones(3, dtype=f64))
    two = torch.tensor([[1.0, 3.0]], dtype=f64)
    torch.testing.assert_close(
        soft_index(two, torch.tensor([[0.5]], dtype=f64), 2.0, kernel), torch.tensor([2.0], dtype=f64)
    )


@pytest.mark.parametrize("kernel", ["logistic", "gaussian"])
def test_normaliser_is_constant_in_backward(kernel):
    torch.manual_seed(1)
    A = torch.randn(4, 6, 2, 3, dtype=f64)
    i = (torch.rand(4, 2, dtype=f64) * torch.tensor([5.0, 1.0], dtype=f64)).requires_grad_(True)
    out = soft_index(A, i, 1.7, kernel)

    def g(d):
        return (
            1.7 * torch.exp(-1.7 * d.abs()) / (1 + torch.exp(-1.7 * d.abs())) ** 2
            if kernel == "logistic"
            else (torch.exp(-0.5 * (1.7 * d) ** 2))
        )

    d0 = torch.arange(6, dtype=f64) - i[:, :1]
    d1 = torch.arange(2, dtype=f64) - i[:, 1:]
    w = g(d0).unsqueeze(-1) * g(d1).unsqueeze(1)
    expected = (w.unsqueeze(-1) * A).sum((1, 2)) / w.sum((1, 2)).detach().unsqueeze(-1)
    torch.testing.assert_close(out, expected)
    cot = torch.randn_like(out)
    torch.testing.assert_close(
        torch.autograd.grad((out * cot).sum(), i)[0], torch.autograd.grad((expected * cot).sum(), i)[0]
    )


def test_cat_index_and_relaxed_write():
    torch.manual_seed(2)
    A = torch.randn(3, 5, 2, dtype=f64)
    pi = torch.softmax(torch.randn(3, 5, dtype=f64), -1)
    torch.testing.assert_close(cat_index(A, pi), (pi.unsqueeze(-1) * A).sum(1))
    alg = F.Algorithm(
        F.Input("arr"),
        F.Input("i"),
        F.Let("arr", [lambda arr, i: soft_index_weights(arr.shape[1:], i, 3.0)], 10.0),
        F.Output("arr"),
    )
    arr, i = torch.zeros(2, 4, dtype=f64), torch.tensor([[1.0], [2.5]], dtype=f64)
    c = soft_index_weights((4,), i, 3.0)
    torch.testing.assert_close(alg(arr, i), 10.0 * c)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: soft_index(torch.zeros(2, 3), torch.zeros(2), 1.0), "i must be a floating tensor of shape"),
        (lambda: soft_index(torch.zeros(2, 3), torch.zeros(2, 1), 0.0), "beta must be a positive"),
        (lambda: soft_index(torch.zeros(2, 3), torch.zeros(2, 1), 1.0, "box"), "kernel must be one of"),
        (lambda: soft_index(torch.zeros(3, 3), torch.zeros(2, 1), 1.0), "A must have shape"),
        (lambda: cat_index(torch.zeros(2, 3), torch.zeros(2, 4)), "must agree"),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
