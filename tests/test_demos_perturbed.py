"""`python -m relaxops demo perturbed`: a short run trains the three ways and returns sane test metrics."""

from relaxops.demos import perturbed


def test_short_run_returns_sane_metrics(capsys, monkeypatch):
    monkeypatch.setattr(perturbed, "D", 6)  # a smaller problem keeps the run to a few seconds
    monkeypatch.setattr(perturbed, "REPS", 4)
    results = perturbed.main(steps=25, seed=1)
    out = capsys.readouterr().out
    assert set(results) == set(perturbed.METHODS)
    for method, r in results.items():
        assert method in out
        assert 0.0 <= r["exact"] <= 100.0 and 0.0 <= r["wrong_mean"] <= 100.0 and r["seconds"] > 0
        # chance for 6 numbers: 1/720 sorted, 5/6 misplaced; 25 steps already sort most test sequences
        assert r["exact"] > 50.0 and r["wrong_mean"] < 20.0, (method, r)
    assert results["sigma = 0"]["sigma"] == 0.0 and results["fixed sigma = 1"]["sigma"] == 1.0
    assert 0.0 < results["learned sigma"]["sigma"] < 10.0


def test_metrics_of_known_matchings():
    import torch

    Y = torch.eye(3).expand(1, 2, 3, 3).clone()
    P = Y.clone()
    P[0, 1] = torch.eye(3)[[1, 0, 2]]  # second sequence: two elements swapped
    exact, wrong = perturbed.metrics(P, Y)
    assert exact == 50.0
    torch.testing.assert_close(wrong, torch.tensor([(0 + 2 / 3) / 2]))
