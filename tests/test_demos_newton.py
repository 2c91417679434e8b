"""`python -m relaxops demo newton`: a short run trains every method of both experiments and returns sane
metrics (the full run's table is in the demo's docstring)."""

import math

import pytest

pytest.importorskip("sklearn")

from relaxops.demos import DEMOS, newton  # noqa: E402


def test_short_run_trains_every_method(capsys):
    results = newton.main(steps=40, seed=0)
    out = capsys.readouterr().out
    assert "newton" in DEMOS
    assert set(results["classification"]) == {(o, m) for o in newton.CLS_OPTIMIZERS for m in newton.CLS_METHODS}
    assert set(results["ranking"]) == set(newton.RANK_METHODS)
    for (optimizer, method), (first, final) in results["classification"].items():
        assert first is not None and 0 <= first <= 1
        # 40 steps of 32: Adam reaches ~70-85% on seed 0, SGD ~25-55%; chance is 10%
        assert final > (0.5 if optimizer == "adam" else 0.15), (optimizer, method, final)
    for method, (em, ew) in results["ranking"].items():
        # 40 steps of 100 sets: far above chance (EM 1/5! = 0.8%, EW 20%), consistent (EM <= EW)
        assert 3 / math.factorial(5) < em <= ew <= 1 and ew > 0.3, (method, em, ew)
    for label in ("regular", "NL e.w. H", "NL H", "NL F", "EM", "EW"):
        assert label in out
