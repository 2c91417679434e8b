"""``python -m relaxops reproduce``: every experiment at smoke scale, its results file, and the pieces whose
mistakes would not show in a smoke run (the sorting loss's permutation convention, the metrics)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from relaxops.__main__ import main
from relaxops.bench import peers
from relaxops.experiments import EXPERIMENTS, SCALES, reproduce, runner

pytest.importorskip("mlxtend")

COUNTS = {  # rows a smoke run writes: configurations x seeds
    "sorting": 10,
    "topk": 3,
    "topk-sweep": 3,
    "steepness": 4,
    "newton": 6,
    "newton-mnist": 16,
    "resgro": 2,
    "art": 4,
    "sorting-large": 4,
    "sorting-svhn": 5,
    "logic": 1,
    "gendr": 4,
    "pose": 2,
    "logic-mnist": 1,
    "logic-tabular": 1,
    "logic-cifar": 2,
    "matching": 4,
    "quantile": 2,
    "knn": 9,
    "logic-regression": 3,
    # 3 parametrizations x 2 sampling modes, in relaxops and (where it is installed) torchlogix
    "logic-torchlogix": 6 * (1 if peers.missing("torchlogix") else 2),
}


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_smoke_run(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    assert main(["reproduce", name, "--scale", "smoke", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / f"{name}-smoke.json").read_text())
    assert result["experiment"] == name and result["scale"] == "smoke" and result["complete"]
    assert len(result["rows"]) == COUNTS[name]
    for entry in result["summary"]:
        metrics = [k for k in entry if k + "_std" in entry]
        assert metrics
        for m in metrics:
            low = -1.0 if m == "spearman" else 0.0  # a rank correlation (quantile) lies in [-1, 1]
            low = -math.inf if m.endswith("r2") else low  # R² (logic-regression) is negative below the mean's
            assert low <= entry[m] <= 1.0 and math.isfinite(entry[m + "_std"])
    assert result["environment"]["torch"] == torch.__version__
    out = capsys.readouterr().out
    assert f"{name} (smoke scale" in out
    assert ("paper" in out) == (name not in ("gendr", "pose"))  # the thesis prints no cell values of GenDR's figures
    module = __import__(f"relaxops.experiments.{EXPERIMENTS[name].module}", fromlist=["SCALES"])
    assert set(module.SCALES) <= set(SCALES) and "small" in module.SCALES
    if hasattr(module, "plot"):
        assert (tmp_path / f"{name}-smoke.png").stat().st_size > 1000


def test_seeds_option(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    result = reproduce("logic", "smoke", seeds=2, out=tmp_path, plot=False)
    assert [r["seed"] for r in result["rows"]] == [0, 1]
    assert result["summary"][0]["seeds"] == 2 and result["config"]["seeds"] == 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="nope"), "name: unknown experiment 'nope'"),
        (dict(name="logic", scale="huge"), "scale: must be one of smoke, small, paper"),
        (dict(name="logic", seeds=0), "seeds: must be a positive int"),
    ],
)
def test_bad_arguments(kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        reproduce(out=tmp_path, **kwargs)


def test_cli_rejects_unknown_experiment(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "nope"])
    assert "invalid choice" in capsys.readouterr().err


def test_paper_scale_needs_real_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="MNIST"):
        reproduce("sorting", "paper", out=tmp_path)


def test_record_saves_every_row(tmp_path):
    rec = runner.Record("x", "small", {"a": 1}, tmp_path)
    rec.add({"k": "a", "seed": 0, "m": 0.5})
    saved = json.loads((tmp_path / "x-small.json").read_text())
    assert saved["rows"] == [{"k": "a", "seed": 0, "m": 0.5}] and not saved["complete"]
    rec.add({"k": "a", "seed": 1, "m": 0.7})
    rec.add({"k": "b", "seed": 0, "m": 0.1})
    summary = runner.summarize(rec.rows, ("k",), ("m",), paper=lambda e: {"m": 60} if e["k"] == "a" else None)
    assert summary[0]["m"] == pytest.approx(0.6) and summary[0]["m_std"] == pytest.approx(0.1414213562)
    assert summary[1] == {"k": "b", "seeds": 1, "m": 0.1, "m_std": 0.0, "paper": None}
    rec.finish(summary)
    assert json.loads((tmp_path / "x-small.json").read_text())["complete"]
    table = runner.format_table(summary, ("k",), ("m",))
    assert "60.00 ± 14.14" in table and "m 60" in table and " 10.00 ±  0.00" in table


@pytest.mark.parametrize("method", ["logistic", "logistic_art", "reciprocal", "cauchy", "optimal", "neuralsort",
                                    "softsort", "ot_sort", "fast_rank", "bubble"])  # fmt: skip
def test_sorting_losses(method):
    """Every method's loss is lower for the perfect scorer (score = value) than for the reversed one, and its
    gradient reaches the scores (the permutation conventions of the losses)."""
    from relaxops.experiments import sorting

    assert method in sorting.METHODS
    gen = torch.Generator().manual_seed(0)
    values = torch.stack([torch.randperm(7, generator=gen) * 100 + 3 for _ in range(32)])
    param = sorting.param_for(method, 7)
    good = sorting.loss_fn(values.double() / 100, values, method, param)
    bad = sorting.loss_fn(-values.double() / 100, values, method, param)
    assert good < 0.7 and bad > 0.9 and good < bad / 5
    s = (torch.randn(32, 7, generator=gen, dtype=torch.float64)).requires_grad_()
    sorting.loss_fn(s, values, method, param).backward()
    assert s.grad.abs().sum() > 0 and torch.isfinite(s.grad).all()


def test_sorting_evaluation():
    from relaxops.experiments import sorting

    assert sorting.param_for("cauchy", 7) == pytest.approx(71 * math.pi)
    assert sorting.param_for("optimal", 8) == 29.0  # the nearest tabulated n (7)
    assert sorting.param_for("bubble", 7) == 8.0

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x.flatten(1)[:, :1]

    values = torch.stack([torch.randperm(7) * 100 + 3 for _ in range(64)])
    images = values.double().view(64, 7, 1, 1, 1)
    assert sorting.evaluate(Identity(), images, values) == (1.0, 1.0)
    assert sorting.evaluate(Identity(), -images, values)[0] == 0.0
    images[:, 0], images[:, 1] = images[:, 1].clone(), images[:, 0].clone()  # two wrong positions in every set
    em, ew = sorting.evaluate(Identity(), images, values)
    assert em == 0.0 and ew == pytest.approx(5 / 7)


def test_topk_accuracy():
    from relaxops.experiments import topk

    scores = torch.tensor([[0.0, 5, 4, 3, 2, 1, 6], [9.0, 1, 2, 3, 4, 5, 0]])
    assert topk.accuracy(lambda x: x, scores, torch.tensor([6, 0])) == (1.0, 1.0)
    assert topk.accuracy(lambda x: x, scores, torch.tensor([1, 5])) == (0.0, 1.0)
    assert topk.accuracy(lambda x: x, scores, torch.tensor([0, 6])) == (0.0, 0.0)


def test_topk_paper_path_on_fake_cifar100(tmp_path, monkeypatch):
    """The paper scale's code path (CIFAR-100 files, ResNet-18, augmentation) on a few fake images."""
    import pickle

    import numpy as np
    from relaxops.experiments import topk

    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 6)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        with open(folder / split, "wb") as f:
            pickle.dump({b"data": data, b"fine_labels": list(range(n)), b"coarse_labels": [0] * n}, f)
    cfg = dict(topk.SCALES["paper"], losses=["softmax", "ot_sort [.2]*5"], batch=4, steps=2, seeds=1)
    record = runner.Record("topk", "fake", cfg, tmp_path / "out")
    summary = topk.run(cfg, tmp_path, [0], record)
    assert [e["loss"] for e in summary] == ["softmax", "ot_sort [.2]*5"]
    assert all(0 <= e["top5"] <= 1 for e in summary)


def test_topk_augment():
    from relaxops.experiments import topk

    images = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    out = topk.augment(images, torch.Generator().manual_seed(0))
    assert out.shape == images.shape
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    for b in range(2):  # each output is a 32x32 window of the padded image, possibly mirrored
        windows = [padded[b, :, y : y + 32, x : x + 32] for y in range(9) for x in range(9)]
        assert any(torch.equal(out[b], w) or torch.equal(out[b], w.flip(-1)) for w in windows)


def test_crop20():
    """The reference code's per-image crop: 8 empty rows and 8 empty columns removed, the ink kept in place."""
    from relaxops.experiments.logic_mnist import crop20

    images = torch.zeros(3, 1, 28, 28)
    images[0, 0, 4:24, 4:24] = 1  # centred: 4 + 4 empty rows and columns removed
    images[1, 0, 0:20, 8:28] = 1  # at the top right: rows 20..27 and columns 0..7 removed
    images[2, 0, 10:15, 3:9] = 1  # small: 10 empty rows above, 13 below
    out = crop20(images).view(3, 20, 20)
    assert torch.equal(out[0], torch.ones(20, 20)) and torch.equal(out[1], torch.ones(20, 20))
    want = torch.zeros(20, 20)
    # rows: 10 empty above, 13 below; both shrink by one until 3 + 6 = 9 < 10, then the top: crop from row 2.
    # columns: 3 left, 14 (capped) right; 0 + 9 after shrinking, then the right: crop from column 0.
    want[8:13, 3:9] = 1
    assert torch.equal(out[2], want), out[2].nonzero()
    with pytest.raises(ValueError, match="fewer than 8 empty"):
        crop20(torch.ones(1, 1, 28, 28))


def test_overrides(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    result = reproduce("logic", "smoke", out=tmp_path, overrides={"problems": "2,3", "steps": "3"})
    assert result["config"]["problems"] == [2, 3] and result["config"]["steps"] == 3
    assert [r["problem"] for r in result["rows"]] == ["MONK-2", "MONK-3"]
    with pytest.raises(ValueError, match="overrides: 'nope' is not a configuration entry"):
        reproduce("logic", "smoke", out=tmp_path, overrides={"nope": "1"})
    with pytest.raises(ValueError, match="overrides: steps='x' is not a int"):
        reproduce("logic", "smoke", out=tmp_path, overrides={"steps": "x"})
    with pytest.raises(SystemExit):
        main(["reproduce", "logic", "--scale", "smoke", "--set", "steps"])
    assert "--set: expected KEY=VALUE" in capsys.readouterr().err


def test_gendr_reads_the_target_mesh(tmp_path, monkeypatch):
    """The paper scale's target comes from --data DIR/airplane.obj (here a box saved with save_obj)."""
    from relaxops.experiments import gendr
    from relaxops.render import cube, save_obj

    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    with pytest.raises(FileNotFoundError, match="airplane.obj"):
        reproduce("gendr", "paper", out=tmp_path)
    v, f = cube()
    save_obj(str(tmp_path / "airplane.obj"), v * 0.4, f)
    cfg = dict(gendr.SCALES["paper"], distributions=["logistic"], squared=[False, True], aggregations=["max"],
               taus=[0.01], views=2, size=16, steps=2)  # fmt: skip
    summary = gendr.run(cfg, tmp_path, [0, 1], runner.Record("gendr", "fake", cfg, tmp_path / "out"))
    assert [(e["distribution"], e["seeds"]) for e in summary] == [("logistic", 2), ("logistic_sq", 2)]
    assert all(0 <= e["iou_loss"] <= 1 for e in summary)
