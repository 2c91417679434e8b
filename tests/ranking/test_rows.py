"""The shared front end of the sorting operators: dim, lengths, mask, k per row, exact orders."""

import pytest
import torch
from relaxops import _rows


def _x(*shape):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_dim_moves_last_and_back(dim):
    x = _x(4, 5, 3)
    r = _rows.rows(x, dim=dim)
    assert r.x.shape == (x.numel() // x.shape[dim], x.shape[dim])
    assert torch.equal(r.x, x.movedim(dim, -1).reshape(r.x.shape))
    assert torch.equal(r.elements(r.x), x)
    assert torch.equal(r.positions(r.x), x)


def test_mask_compacts_real_entries_first_in_order():
    x = _x(3, 7, 2)
    mask = torch.rand(3, 7, 2, generator=torch.Generator().manual_seed(1)) < 0.5
    r = _rows.rows(x, dim=1, mask=mask)
    xl, ml = x.movedim(1, -1).reshape(-1, 7), mask.movedim(1, -1).reshape(-1, 7)
    for b in range(r.x.shape[0]):
        L = int(r.lengths[b])
        assert L == int(ml[b].sum())
        assert torch.equal(r.x[b, :L], xl[b][ml[b]])
    assert torch.equal(r.elements(r.x), x)
    M = r.x.unsqueeze(-1).expand(-1, -1, 4).contiguous()  # rows of a matrix follow the elements back
    assert torch.equal(r.matrix(M)[..., 0], x.movedim(1, -1))


def test_exact_order_ranks_matrix_put_pads_last():
    x = torch.tensor([[3.0, 1.0, float("nan"), 2.0, 9.0], [2.0, 2.0, -1.0, 0.0, 0.0]], dtype=torch.float64)
    lengths = torch.tensor([3, 4])
    perm = _rows.exact_order(x, lengths)
    assert perm.tolist() == [[1, 0, 2, 3, 4], [2, 3, 0, 1, 4]]
    assert _rows.exact_ranks(perm, lengths, x.dtype).tolist() == [[2, 1, 3, 0, 0], [3, 4, 1, 2, 0]]
    P = _rows.exact_matrix(perm, lengths, x.dtype)
    assert P[1].tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert _rows.exact_order(x[1:], None, descending=True).tolist() == [[0, 1, 3, 4, 2]]


def test_per_row_k_widths_and_short_rows():
    x = _x(2, 6)
    assert _rows.per_row_k(3, _rows.rows(x)) == (3, None)
    K, kb = _rows.per_row_k(torch.tensor([2, 5]), _rows.rows(x))
    assert K == 5 and kb.tolist() == [2, 5]
    K, kb = _rows.per_row_k(4, _rows.rows(x, lengths=torch.tensor([6, 2])))
    assert K == 4 and kb.tolist() == [4, 2]


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(dim=2), IndexError, "dim"),
        (dict(dim=1.0), TypeError, "dim"),
        (dict(lengths=torch.tensor([1, 7])), ValueError, "lengths"),
        (dict(lengths=torch.tensor([1.0, 2.0])), TypeError, "lengths"),
        (dict(lengths=torch.tensor([1])), ValueError, "lengths"),
        (dict(mask=torch.ones(2, 6)), TypeError, "mask"),
        (dict(mask=torch.ones(2, 5, dtype=torch.bool)), ValueError, "mask"),
        (dict(mask=torch.ones(2, 6, dtype=torch.bool), lengths=torch.tensor([1, 2])), ValueError, "at most one"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, err, match):
    with pytest.raises(err, match=match):
        _rows.rows(_x(2, 6), **kwargs)


@pytest.mark.parametrize("k", [0, 7, 2.0, torch.tensor([1, 7]), torch.tensor([1.0, 2.0])])
def test_bad_k(k):
    with pytest.raises((ValueError, TypeError), match="k"):
        _rows.per_row_k(k, _rows.rows(_x(2, 6)))
