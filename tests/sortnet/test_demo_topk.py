"""`python -m relaxops demo topk`: a few training steps, the accuracy report, the CLI options."""

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("tqdm")

from relaxops.__main__ import main as cli  # noqa: E402
from relaxops.demos import topk  # noqa: E402

ROWS = ("chance", "untrained model", "softmax cross-entropy", "top-k loss")


def test_demo_topk_reports_accuracies(capsys):
    results = topk.main(steps=3, seed=1)
    assert tuple(results) == ROWS
    for top1, top5 in results.values():
        assert 0.0 <= top1 <= top5 <= 1.0
    assert results["chance"] == (0.01, 0.05)
    out = capsys.readouterr().out
    for row in ROWS:
        assert f"  {row} " in out
        line = next(line for line in out.splitlines() if line.startswith(f"  {row} "))
        assert "top-1" in line and "top-5" in line
    assert "test top-5 along training, at steps 1 2 3:" in out


def test_demo_topk_cli_options(capsys):
    assert cli(["demo", "topk", "--steps", "2", "--seed", "3", "--method", "softsort"]) == 0
    out = capsys.readouterr().out
    assert "seed 3" in out and "softsort" in out and "top-k loss" in out


def test_demo_options_only_for_topk(capsys):
    with pytest.raises(SystemExit):
        cli(["demo", "sort", "--method", "bitonic"])
    assert "not an option of the sort demo" in capsys.readouterr().err
    with pytest.raises(ValueError, match="method must be one of"):
        topk.main(steps=1, method="bogus")
