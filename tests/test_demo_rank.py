"""`python -m relaxops demo rank`: a Spearman loss trains the same model with every rank operator."""

import pytest

pytest.importorskip("sklearn")

from relaxops.bench.operators import OPERATORS  # noqa: E402
from relaxops.demos import rank  # noqa: E402


def test_every_rank_operator_learns_to_rank(capsys):
    results = rank.main(steps=120)
    out = capsys.readouterr().out
    assert set(results) == {"untrained", "mse", *OPERATORS}
    assert results["untrained"] < 0.3
    for name in ["mse", *OPERATORS]:
        assert results[name] > 0.55, (name, results[name])  # trained: 0.65-0.72 at 120 steps (seed 0)
        assert name in out or name == "mse"


def test_spearman_of_known_orders():
    import torch

    a = torch.tensor([3.0, 1.0, 2.0, 5.0])
    assert rank.spearman(a, a * 10) == pytest.approx(1.0)
    assert rank.spearman(a, -a) == pytest.approx(-1.0)
    assert rank.spearman(a, torch.tensor([1.0, 2.0, 3.0, 4.0])) == pytest.approx(0.4)
