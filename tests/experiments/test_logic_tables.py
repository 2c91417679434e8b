"""The UCI Adult and Breast Cancer (Ljubljana) readers on fake files in the real formats, the in-kind binarisation
of the Wisconsin set, CIFAR's threshold inputs, and both logic-gate experiments' paper-scale code paths on fake
files (logic-tabular, logic-cifar)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from relaxops.experiments import data as D
from relaxops.experiments import logic_cifar, logic_regression, logic_tabular, runner

# --- Adult ---------------------------------------------------------------------------------------------------

ADULT_TRAIN = """\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
20, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, Black, Female, 0, 4999, 12, Holand-Netherlands, >50K
54, ?, 1, HS-grad, 9, Divorced, Sales, Unmarried, Black, Female, 0, 0, 12, Cuba, <=50K
60, Never-worked, 1, Preschool, 1, Married-AF-spouse, Armed-Forces, Wife, Other, Female, 5000, 5000, 60, Hong, >50K

"""  # noqa: E501  (a missing value in row 3, a blank line at the end, as in adult.data)
ADULT_TEST = """\
|1x3 Cross validator
21, Self-emp-inc, 1, Doctorate, 16, Widowed, Tech-support, Husband, Asian-Pac-Islander, Male, 4999, 1, 13, India, <=50K.
29, Local-gov, 1, Masters, 14, Separated, Craft-repair, Own-child, White, Male, 1, 0, 59, Peru, >50K.
"""  # noqa: E501


def bits(features, names) -> list[int]:
    return sorted(features.index(n) for n in names)


def write_adult(folder, train=ADULT_TRAIN, test=ADULT_TEST):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adult.data").write_text(train)
    (folder / "adult.test").write_text(test)


def test_adult_features():
    f = D.ADULT_FEATURES
    assert len(f) == 116 and len(set(f)) == 116
    assert f[:2] == ("workclass=Private", "workclass=Self-emp-not-inc") and f[8] == "education=Bachelors"
    assert f.index("native-country=United-States") == 58 and f[98] == "native-country=Holand-Netherlands"
    assert f[99:104] == tuple(f"age={b}" for b in ("minor", "very-young", "young", "middle-aged", "senior"))
    assert f[-1] == "hours-per-week=most-hours" and f[110] == "hours-per-week=no-hours"


@pytest.mark.parametrize("sub", ["adult", "."])
def test_adult(tmp_path, sub):
    write_adult(tmp_path / sub)
    x, y, x_test, y_test = D.adult(tmp_path)
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.shape == (3, 116) and x_test.shape == (2, 116)  # the row with "?" left out
    assert y.tolist() == [0, 1, 1] and y_test.tolist() == [0, 1]  # the test labels' trailing "." dropped
    common = ["workclass=State-gov", "education=Bachelors", "marital-status=Never-married",
              "occupation=Adm-clerical", "relationship=Not-in-family", "race=White", "sex=Male",
              "native-country=United-States"]  # fmt: skip
    want = bits(D.ADULT_FEATURES, [*common, "age=young", "capital-gain=small-gain", "capital-loss=no-loss"])
    assert x[0].nonzero().flatten().tolist() == want
    # bin edges: age 20 minor, 21 very-young, 29 very-young, 60 senior; gain and loss 0 / 1..4999 / 5000+
    for row, names in [
        (x[1], ["age=minor", "capital-gain=no-gain", "capital-loss=small-loss"]),
        (x[2], ["age=senior", "capital-gain=large-gain", "capital-loss=large-loss"]),
        (x_test[0], ["age=very-young", "capital-gain=small-gain", "capital-loss=small-loss"]),
        (x_test[1], ["age=very-young", "capital-gain=small-gain", "capital-loss=no-loss"]),
    ]:
        on = {D.ADULT_FEATURES[i] for i in row.nonzero().flatten().tolist()}
        assert set(names) <= on and len(on) == 11  # 8 categorical + 3 binned; the hours bits stay 0
    assert x[:, 110:].sum() == 0 and x_test[:, 110:].sum() == 0


def test_adult_hours_bins(tmp_path):
    write_adult(tmp_path)
    x, _, x_test, _ = D.adult(tmp_path, hours=True)
    hours = [D.ADULT_FEATURES[110 + i].split("=")[1] for i in torch.cat([x, x_test])[:, 110:].argmax(1).tolist()]
    # 40, 12, 60 (train); 13, 59 (test)
    assert hours == ["full-hours", "mini-hours", "most-hours", "half-hours", "more-hours"]
    assert (torch.cat([x, x_test]).sum(1) == 12).all()
    zero = ADULT_TRAIN.replace(", 40, United-States", ", 0, United-States").replace(", 12, Holand", ", 25, Holand")
    zero = zero.replace(", 60, Hong", ", 26, Hong")
    write_adult(tmp_path, train=zero)
    x, *_ = D.adult(tmp_path, hours=True)
    assert [D.ADULT_FEATURES[110 + i] for i in x[:, 110:].argmax(1).tolist()] == [
        "hours-per-week=no-hours", "hours-per-week=half-hours", "hours-per-week=full-hours"]  # fmt: skip


def test_adult_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no data directory was given"):
        D.adult(None)
    with pytest.raises(FileNotFoundError, match=r"adult \(train split\)[\s\S]*adult/adult.data[\s\S]*archive.ics"):
        D.adult(tmp_path)
    (tmp_path / "adult.data").write_text(ADULT_TRAIN)
    with pytest.raises(FileNotFoundError, match=r"adult \(test split\)[\s\S]*adult.test"):
        D.adult(tmp_path)
    write_adult(tmp_path, train=ADULT_TRAIN.replace("State-gov", "Space-gov"))
    with pytest.raises(ValueError, match=r"adult.data, line 1: attribute workclass has the unknown value 'Space-gov'"):
        D.adult(tmp_path)
    write_adult(tmp_path, test=ADULT_TEST.replace(">50K.", "maybe."))
    with pytest.raises(ValueError, match=r"adult.test, line 3: label has the unknown value 'maybe'"):
        D.adult(tmp_path)
    write_adult(tmp_path, train=ADULT_TRAIN.replace(", 13, Never", ", Never"))
    with pytest.raises(ValueError, match="line 1: 14 comma-separated fields, expected 15"):
        D.adult(tmp_path)
    write_adult(tmp_path, train=ADULT_TRAIN.replace("39, State", "3x, State"))
    with pytest.raises(ValueError, match="line 1: age '3x' is not an integer"):
        D.adult(tmp_path)


# --- Breast Cancer (Ljubljana) ---------------------------------------------------------------------------------

LJUBLJANA = {
    "age": [f"{a}-{a + 9}" for a in range(10, 100, 10)],
    "menopause": ["lt40", "ge40", "premeno"],
    "tumor-size": [f"{a}-{a + 4}" for a in range(0, 60, 5)],
    "inv-nodes": [f"{a}-{a + 2}" for a in range(0, 36, 3)] + ["36-39"],
    "node-caps": ["yes", "no"],
    "deg-malig": ["1", "2", "3"],
    "breast": ["left", "right"],
    "breast-quad": ["left_up", "left_low", "right_up", "right_low", "central"],
    "irradiat": ["yes", "no"],
}


def fake_ljubljana(n: int, seed: int, missing: int) -> tuple[str, np.ndarray, np.ndarray]:
    """A breast-cancer.data of n complete random rows and `missing` rows with a "?", and the complete rows'
    expected encoding and labels."""
    rng = np.random.default_rng(seed)
    lines, x, y = [], np.zeros((n, 51), dtype=np.float32), np.zeros(n, dtype=np.int64)
    row = 0
    for i in range(n + missing):
        label = int(rng.integers(2))
        values = [vals[int(rng.integers(len(vals)))] for vals in LJUBLJANA.values()]
        if i % 7 == 3 and i // 7 < missing:
            values[4 if i % 2 else 7] = "?"  # node-caps or breast-quad, as in the real file
        else:
            y[row] = label
            for name, value in zip(LJUBLJANA, values):
                x[row, D.LJUBLJANA_FEATURES.index(f"{name}={value}")] = 1
            row += 1
        lines.append(",".join([("no-recurrence-events", "recurrence-events")[label], *values]))
    return "\n".join(lines) + "\n", x, y


def test_ljubljana_features():
    f = D.LJUBLJANA_FEATURES
    assert len(f) == 51 and f == tuple(f"{k}={v}" for k, vals in LJUBLJANA.items() for v in vals)
    assert f.index("menopause=lt40") == 9 and f.index("tumor-size=0-4") == 12 and f.index("inv-nodes=36-39") == 36


@pytest.mark.parametrize("sub", ["breast-cancer", "breast_cancer", "."])
def test_ljubljana_split_is_the_reference_split(tmp_path, sub):
    """277 complete rows (286 with 9 "?" rows, as the real file): 207 / 70, the rows that scikit-learn's
    train_test_split(test_size=0.25, random_state=0) picks."""
    model_selection = pytest.importorskip("sklearn.model_selection")
    text, x, y = fake_ljubljana(277, seed=1, missing=9)
    (tmp_path / sub).mkdir(exist_ok=True)
    (tmp_path / sub / "breast-cancer.data").write_text(text)
    x_train, y_train, x_test, y_test = D.breast_cancer_ljubljana(tmp_path)
    assert x_train.shape == (207, 51) and x_test.shape == (70, 51) and y_train.dtype == torch.int64
    assert (x_train.sum(1) == 9).all() and (x_test.sum(1) == 9).all()
    want = model_selection.train_test_split(x, y, test_size=0.25, random_state=0)
    for got, w in zip((x_train, x_test, y_train, y_test), want):
        assert np.array_equal(got.numpy(), w)


def test_ljubljana_rows_and_errors(tmp_path):
    path = tmp_path / "breast-cancer.data"
    path.write_text("recurrence-events,40-49,premeno,15-19,0-2,yes,3,right,left_up,no\n" * 3 + "\n")
    x, y, x_test, y_test = D.breast_cancer_ljubljana(tmp_path)
    assert len(x_test) == 1 and len(x) == 2 and y.tolist() == [1, 1]
    on = [D.LJUBLJANA_FEATURES[i] for i in x[0].nonzero().flatten().tolist()]
    assert on == ["age=40-49", "menopause=premeno", "tumor-size=15-19", "inv-nodes=0-2", "node-caps=yes",
                  "deg-malig=3", "breast=right", "breast-quad=left_up", "irradiat=no"]  # fmt: skip
    path.write_text("recurrence-events,40-49,premeno,15-19,0-2,yes,4,right,left_up,no\n")
    with pytest.raises(ValueError, match="line 1: attribute deg-malig has the unknown value '4'"):
        D.breast_cancer_ljubljana(tmp_path)
    path.unlink()
    with pytest.raises(FileNotFoundError, match=r"breast-cancer/breast-cancer.data[\s\S]*dataset/14"):
        D.breast_cancer_ljubljana(tmp_path)


# --- encodings -----------------------------------------------------------------------------------------------


def test_quantile_bits():
    x_train = torch.tensor([[1.0, 10], [2, 10], [3, 10], [4, 10], [5, 20], [6, 20], [7, 20], [8, 20]])
    # column 0's quartiles 2.75, 4.5, 6.25; column 1's 10, 15, 20 (equal to an edge: above it)
    x_test = torch.tensor([[0.0, 10], [2.75, 14], [4.5, 15], [9, 20]])
    train, test = logic_tabular.quantile_bits(x_train, x_test, 4)
    assert train.shape == (8, 8) and test.dtype == torch.float32
    assert test.view(4, 2, 4).argmax(-1).tolist() == [[0, 1], [1, 1], [2, 2], [3, 3]]
    assert (test.view(4, 2, 4).sum(-1) == 1).all()
    assert train.view(8, 2, 4)[:, 0].argmax(-1).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="bins: must be at least 2"):
        logic_tabular.quantile_bits(x_train, x_test, 1)


def test_wisconsin_in_kind():
    pytest.importorskip("sklearn")
    x, y, x_test, y_test = logic_tabular.load("wisconsin", None, False)
    assert x.shape == (456, 120) and x_test.shape == (113, 120)
    assert (x.sum(1) == 30).all() and (x_test.sum(1) == 30).all()
    assert x.view(-1, 30, 4).mean(0).sub(0.25).abs().max() < 0.03  # quartile bins hold a quarter each
    with pytest.raises(ValueError, match="datasets: unknown data set 'iris'"):
        logic_tabular.load("iris", None, False)


def test_thresholds():
    images = torch.tensor([0.1, 0.25, 0.3, 0.6, 0.8, 1.0]).view(1, 2, 1, 3)  # C = 2, H = 1, W = 3
    out = logic_cifar.thresholds(images, 3)
    assert out.shape == (1, 18) and out.dtype == torch.float32
    # threshold-major: thresholds 0.25, 0.5, 0.75 (strict), then channel, row, column
    assert out.view(3, 6).tolist() == [[0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]]
    pixels = torch.arange(256, dtype=torch.float32).view(1, 1, 16, 16) / 255
    out = logic_cifar.thresholds(pixels, 31).view(31, 256)
    assert out.sum(0).tolist() == [sum(k / 255 > t / 32 for t in range(1, 32)) for k in range(256)]


def test_parse_run():
    assert logic_cifar.parse_run("large2/31") == ("large2", 31)
    for bad in ("tiny/3", "small", "small/0", "small/x"):
        with pytest.raises(ValueError, match="runs: .* is not MODEL/T"):
            logic_cifar.parse_run(bad)


# --- the experiments' paper-scale code paths on fake files ----------------------------------------------------


def test_logic_tabular_on_fake_uci_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    write_adult(tmp_path / "adult")
    (tmp_path / "breast-cancer.data").write_text(fake_ljubljana(20, seed=2, missing=1)[0])
    cfg = dict(logic_tabular.SCALES["paper"], steps=3, seeds=2)
    summary = logic_tabular.run(cfg, tmp_path, [0, 1], runner.Record("logic-tabular", "fake", cfg, tmp_path / "o"))
    assert [(e["dataset"], e["seeds"], e["paper"]) for e in summary] == [
        ("adult", 2, {"test": 84.8}), ("breast_cancer", 2, {"test": 76.1})]  # fmt: skip
    assert summary[0]["majority"] == 0.5 and all(0 <= e["test"] <= 1 for e in summary)
    assert "thesis, adult: logic network 84.8" in logic_tabular.report(summary)


def test_logic_cifar_on_fake_cifar10(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in [*((f"data_batch_{i}", 4) for i in range(1, 6)), ("test_batch", 6)]:
        with open(folder / name, "wb") as f:
            data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
            pickle.dump({b"data": data, b"labels": [int(v) for v in rng.integers(0, 10, n)]}, f)
    cfg = dict(logic_cifar.SCALES["paper"], runs=["small/3", "large/31"], layers=2, width=48_000, steps=2)
    record = runner.Record("logic-cifar", "fake", cfg, tmp_path / "out")
    summary = logic_cifar.run(cfg, tmp_path, [0], record)
    assert [(e["model"], e["paper"]) for e in summary] == [("small/3", {"test": 51.27}), ("large/31", {"test": 60.78})]
    assert len(summary[1]["gates"]) == 2 and sum(summary[1]["gates"][0]) == pytest.approx(1)
    text = logic_cifar.report(summary)
    assert "gate types of small/3" in text and "in kind" not in text
    with pytest.raises(ValueError, match="runs: 'huge/3'"):
        logic_cifar.run(dict(cfg, runs=["huge/3"]), tmp_path, [0], record)


def test_logic_cifar_in_kind_is_labelled(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    cfg = dict(logic_cifar.SCALES["smoke"], runs=["small/3"], steps=2)
    summary = logic_cifar.run(cfg, None, [0], runner.Record("logic-cifar", "fake", cfg, tmp_path))
    assert summary[0]["paper"] is None and summary[0]["dataset"] == "digits"
    assert "in kind on digits, not CIFAR-10" in logic_cifar.report(summary)


def test_logic_regression_pieces():
    x_train = torch.tensor([[0.0, 5.0], [1.0, 6.0], [2.0, 7.0], [3.0, 8.0]], dtype=torch.float64)
    bits, bits_test = logic_regression.thermometer(x_train, torch.tensor([[1.5, 9.0]], dtype=torch.float64), 4)
    assert bits.shape == (4, 6) and bits_test.tolist() == [[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]]  # 1.5 is not > 1.5
    assert bits[:, :3].sum(1).tolist() == [0.0, 1.0, 2.0, 3.0]  # a thermometer: one more bit per quartile
    y = torch.tensor([1.0, 2.0, 4.0])
    assert logic_regression.r2(y, y) == 1.0 and logic_regression.r2(torch.full((3,), y.mean().item()), y) == 0.0
    x, y, x_test, y_test = logic_regression.diabetes()
    assert x.shape == (354, 10) and x_test.shape == (88, 10) and y.shape == (354,)
    with pytest.raises(ValueError, match="connections"):
        logic_regression.make_model(10, logic_regression.SCALES["smoke"], "learned")
    with pytest.raises(ValueError, match="bins"):
        logic_regression.thermometer(x, x_test, 1)
    model = logic_regression.make_model(60, logic_regression.SCALES["smoke"], "learnable-4")
    assert model[0].wiring.candidates.shape == (4, 2, 128) and model[-1].beta.requires_grad
