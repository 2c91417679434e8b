"""The benchmark harness (relaxops.bench.run): selection, rows saved as they are measured, Ctrl-C, --resume,
--compare, --plot-from, --list. A tiny family ``fake`` of cheap jobs stands in for the real ones; the real
registry is only listed (nothing of it is timed here)."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
import types

import pytest
import torch
from relaxops.bench import registry, run
from relaxops.bench.registry import Case, Provider


class Fake:
    """The family ``fake``: cases ``fake.op n={10,100,1000} fwd+bwd`` (sweep n; n=10 is the default case, with a
    goal), providers ``ref`` (reference), ``ours`` and ``absent`` (skipped while ``absent_reason`` is set).
    ``made`` records the jobs built; ``interrupt_at``: the job (1-based) whose make raises KeyboardInterrupt;
    ``fail``: jobs that raise."""

    def __init__(self, results_root):
        self.made, self.rows_seen, self.interrupt_at, self.fail = [], [], None, set()
        self.absent_reason = "not installed"
        self.results_root = results_root

    def make(self, name):
        def make(case):
            self.made.append((case.name, name))
            files = glob.glob(os.path.join(self.results_root, "*", "*.json"))
            if files:
                with open(files[0]) as f:
                    self.rows_seen.append(len(json.load(f)["rows"]))
            if len(self.made) == self.interrupt_at:
                raise KeyboardInterrupt
            if (case.name, name) in self.fail:
                raise RuntimeError("broken on purpose")
            x = torch.ones(case.params["n"], requires_grad=True)
            return (lambda: (x * 2.0,)), [x], (torch.ones(case.params["n"]),)

        return make


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "CASES", [])
    monkeypatch.setattr(registry, "PROVIDERS", {})
    monkeypatch.setattr(run, "FAMILIES", ("fake",))
    monkeypatch.setitem(sys.modules, "relaxops.bench.fake", types.ModuleType("relaxops.bench.fake"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    f = Fake(str(tmp_path / "results"))
    for n in (10, 100, 1000):
        registry.add_case(
            Case(
                "fake",
                "op",
                f"n={n}",
                dict(n=n, batch=1),
                "fwd+bwd",
                "cpu",
                default=n == 10,
                goal=("ref", 1e-6) if n == 10 else None,
                sweep="n",
            )
        )
    registry.add_provider("fake", Provider("ours", f.make("ours")))
    registry.add_provider("fake", Provider("ref", f.make("ref"), reference=True))
    registry.add_provider("fake", Provider("absent", f.make("absent"), skip=lambda case: f.absent_reason))
    return f


def bench(fake, *argv):
    return run.main(["--budget", "0.01", *argv], results_root=fake.results_root, prog="bench")


def results_file(fake):
    (path,) = glob.glob(os.path.join(fake.results_root, "*", "*.json"))
    with open(path) as f:
        return path, json.load(f)


def jobs_of(listing: str) -> list[tuple[str, str]]:
    """The (case, provider) jobs of a --list output."""
    lines = listing.splitlines()
    assert "job(s)" in lines[0]
    jobs = []
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        provider, case = line.split(None, 1)
        jobs.append((case, provider))
    return jobs


def test_list_times_nothing(fake, capsys):
    assert bench(fake, "--list") == 0
    out = capsys.readouterr().out
    assert jobs_of(out) == [("fake.op n=10 fwd+bwd", "ref"), ("fake.op n=10 fwd+bwd", "ours")]
    assert "skipped absent on 1 case(s): not installed" in out
    assert bench(fake, "--list", "--full", "--filter", "ours") == 0
    assert jobs_of(capsys.readouterr().out) == [(f"fake.op n={n} fwd+bwd", "ours") for n in (10, 100, 1000)]
    assert bench(fake, "--list", "--full", "--exclude", "n=10 ") == 0
    assert jobs_of(capsys.readouterr().out) == [
        (f"fake.op n={n} fwd+bwd", p) for n in (100, 1000) for p in ("ref", "ours")
    ]
    assert fake.made == [] and not os.path.exists(fake.results_root)


def test_run_prints_and_saves_every_row(fake, capsys):
    assert bench(fake, "--full") == 0
    out, err = capsys.readouterr()
    path, doc = results_file(fake)
    # the file held the rows of the jobs before each job (and was written before the first one)
    assert fake.rows_seen == list(range(6))
    assert doc["complete"] is True and doc["device"] == "cpu" and doc["args"]["full"] is True
    assert [(r["case"], r["provider"]) for r in doc["rows"]] == fake.made
    assert [r["provider"] for r in doc["rows"]] == ["ref", "ours"] * 3  # references first in each case
    for r in doc["rows"]:
        assert r["sweep"] == "n" and r["median_ms"] > 0 and r["p20_ms"] <= r["median_ms"] <= r["p80_ms"]
        assert r["speedup"] == (
            {"ref": pytest.approx(by_case(doc, r["case"], "ref") / r["median_ms"])} if r["provider"] == "ours" else {}
        )
    assert doc["skipped"] == [
        {"provider": "absent", "reason": "not installed", "cases": [f"fake.op n={n} fwd+bwd" for n in (10, 100, 1000)]}
    ]
    (goal,) = doc["goals"]
    assert goal["case"] == "fake.op n=10 fwd+bwd" and goal["provider"] == "ours" and goal["met"]
    # a compact line per row as it is measured, a progress line per job with an ETA from the second one on
    assert out.count("fake.op n=100 fwd+bwd | ours: ") == 1 and "x vs ref" in out
    assert "[1/6] 0:00 elapsed: fake.op n=10 fwd+bwd | ref" in err and "[6/6]" in err and "left:" in err
    assert f"wrote {path}" in out and "goal fake.op n=10 fwd+bwd: >= 1e-06x faster than ref; ours is" in out


def by_case(doc, case, provider):
    (r,) = [r for r in doc["rows"] if (r["case"], r["provider"]) == (case, provider)]
    return r["median_ms"]


def test_tqdm_progress(fake, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert bench(fake, "--full") == 0
    out, err = capsys.readouterr()
    assert out.count(" | ref: ") == 3 and out.count(" | ours: ") == 3
    assert "6/6" in err and "[1/6]" not in err


def test_ctrl_c_keeps_the_rows_measured(fake, capsys):
    fake.interrupt_at = 3
    assert bench(fake, "--full") == 130
    out = capsys.readouterr().out
    path, doc = results_file(fake)
    assert doc["complete"] is False and len(doc["rows"]) == 2
    assert "interrupted after 2 of 6 job(s); resume with: bench --resume " + path in out
    assert "goal fake.op n=10 fwd+bwd" in out and "median ms" in out  # the table and goals of what was measured


def test_resume_skips_measured_rows_and_retries_errors(fake, capsys):
    fake.interrupt_at = 4
    fake.fail = {("fake.op n=10 fwd+bwd", "ours")}
    assert bench(fake, "--full") == 130
    path, doc = results_file(fake)
    assert [r["provider"] for r in doc["rows"]] == ["ref", "ours", "ref"] and "error" in doc["rows"][1]
    assert doc["skipped"][0]["provider"] == "absent"
    fake.made, fake.interrupt_at, fake.fail, fake.absent_reason = [], None, set(), None
    # the options come from the file (--full, the family, the budget)
    assert run.main(["--resume", path], prog="bench") == 0
    assert "note:" not in capsys.readouterr().out
    assert fake.made == [
        (f"fake.op n={n} fwd+bwd", p)
        for n, p in [
            (10, "ours"),
            (10, "absent"),
            (100, "ours"),
            (100, "absent"),
            (1000, "ref"),
            (1000, "ours"),
            (1000, "absent"),
        ]
    ]
    _, doc = results_file(fake)
    assert doc["complete"] is True and not any("error" in r for r in doc["rows"]) and doc["skipped"] == []
    assert sorted((r["case"], r["provider"]) for r in doc["rows"]) == sorted(
        (f"fake.op n={n} fwd+bwd", p) for n in (10, 100, 1000) for p in ("ref", "ours", "absent")
    )
    assert doc["goals"][0]["met"]
    fake.made = []
    assert run.main(["--resume", path, "--list"], prog="bench") == 0
    assert jobs_of(capsys.readouterr().out) == [] and fake.made == []


def test_resume_refuses_other_files(fake, capsys, tmp_path):
    assert bench(fake) == 0
    path, doc = results_file(fake)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**doc, "device_name": "Some Other CPU"}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    capsys.readouterr()
    for bad in (other, garbage, tmp_path / "missing.json"):
        assert run.main(["--resume", str(bad)], prog="bench") == 2
        assert f"bench: error: --resume {bad}: " in capsys.readouterr().err
    assert run.main(["--resume", path, "--out", str(tmp_path)], prog="bench") == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--budget", "0"], "--budget"),
        (["--repeat", "x"], "--repeat"),
        (["--family", "nope"], "--family"),
        (["--device", "cuda"], "--device"),
        (["--plot-dir", "d"], "--plot-dir"),
        (["--compare", "a.json"], "--compare"),
    ],
)
def test_bad_arguments_are_named(fake, capsys, argv, named):
    assert bench(fake, *argv) == 2
    assert named in capsys.readouterr().err
    assert fake.made == []


def write(path, rows, **info):
    path.write_text(
        json.dumps(
            {
                "device": "cpu",
                "device_name": "CPU X",
                "commit": "0123456789abcdef",
                "dirty": False,
                "date": "2026-01-02 03:04:05",
                **info,
                "rows": rows,
            }
        )
    )
    return str(path)


def timed(case, provider, ms, **extra):
    return {"case": case, "provider": provider, "median_ms": ms, "p20_ms": ms * 0.9, "p80_ms": ms * 1.1, **extra}


def test_compare(capsys, tmp_path):
    a = write(
        tmp_path / "a.json",
        [
            timed("c2", "p", 4.0),
            timed("c1", "p", 10.0),
            timed("c1", "q", 3.0),
            timed("c3", "p", 1.0),
            {"case": "c5", "provider": "p", "error": "E"},
        ],
    )
    b = write(
        tmp_path / "b.json",
        [
            timed("c1", "p", 5.0),
            timed("c2", "p", 8.0),
            timed("c1", "q", 1.0),
            timed("c4", "q", 2.0),
            timed("c5", "p", 1.0),
        ],
        device_name="GPU Y",
        commit="fedcba9876543210",
    )
    assert run.main(["--compare", a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"A: {a}: CPU X (cpu), commit 0123456789, 2026-01-02 03:04:05"
    assert lines[1].startswith(f"B: {b}: GPU Y (cpu), commit fedcba9876")
    table = [line.split() for line in lines[3:6]]
    assert table == [["c1", "p", "10.0", "5", "2.00x"], ["c1", "q", "3", "1", "3.00x"], ["c2", "p", "4", "8", "0.50x"]]
    assert "geometric mean per provider: p 1.00x (2 rows), q 3.00x (1 row)" in lines
    assert "only in A (1): c3 | p" in lines
    assert "only in B (2): c4 | q; c5 | p" in lines


def test_plot_from(capsys, tmp_path):
    image = pytest.importorskip("matplotlib.image")

    rows = [
        timed(f"f.op n={n}", prov, n * k, family="f", op="op", mode="fwd", params=dict(n=n, b=1), sweep="n")
        for n in (16, 256, 4096)
        for prov, k in (("ref", 1.0), ("ours", 0.1))
    ]
    rows += [
        timed("f.op n=16 b=2", "ours", 1.0, family="f", op="op", mode="fwd", params=dict(n=16, b=2), sweep="n"),
        timed("f.other", "ours", 2.0, family="f", op="other", mode="fwd", params=dict(m=3)),
        timed("f.op2 n=1", "ours", 1.0, family="f", op="op2", mode="fwd", params=dict(n=1), sweep="n"),
        timed("f.op2 n=2", "ours", 2.0, family="f", op="op2", mode="fwd", params=dict(n=2), sweep="n"),
        {"case": "f.op n=16 b=3", "provider": "ours", "family": "f", "error": "E"},
    ]
    path = write(tmp_path / "20260102-030405.json", rows)
    assert run.main(["--plot-from", path, "--plot-dir", str(tmp_path / "plots")]) == 0
    stem = str(tmp_path / "plots" / "20260102-030405")
    expected = [f"{stem}-f-op-fwd-b=1.png", f"{stem}-f-op2-fwd.png", f"{stem}-f.png"]  # line plots; single sizes: bars
    assert capsys.readouterr().out.split() == [w for p in expected for w in ("wrote", p)]
    assert sorted(glob.glob(str(tmp_path / "plots" / "*"))) == sorted(expected)
    assert image.imread(expected[0]).shape[:2] == (440, 660)  # 6 x 4 inches at 110 dpi
    assert run.main(["--plot-from", str(tmp_path / "nothing.json")]) == 2
    assert "--plot-from" in capsys.readouterr().err


def test_plot_after_a_run(fake, capsys):
    pytest.importorskip("matplotlib")
    assert bench(fake, "--full", "--plot") == 0
    path, _ = results_file(fake)
    assert glob.glob(path[:-5] + "*.png") == [path[:-5] + "-fake-op-fwd+bwd-batch=1.png"]


def test_measure_warms_up_once():
    calls = []

    def sleepy(s):
        def fn():
            calls.append(1)
            time.sleep(s)

        return fn

    row = run.measure(sleepy(0.002), "cpu", budget=1.0, repeat=3)
    # one warm-up call, one call that sizes the runs (of >= 10 ms), then exactly 3 runs
    assert row["runs"] == 3 and row["calls_per_run"] >= 4 and len(calls) == 2 + 3 * row["calls_per_run"]
    calls.clear()
    row = run.measure(sleepy(0.03), "cpu", budget=0.02, repeat=None)
    assert (row["runs"], row["calls_per_run"], len(calls)) == (1, 1, 2)  # slower than the budget: timed once
    assert row["median_ms"] >= 30
    calls.clear()
    row = run.measure(sleepy(0.011), "cpu", budget=0.05, repeat=None)
    # runs of one call (>= 10 ms) until the budget: no sizing call
    assert 1 <= row["runs"] <= 5 and row["calls_per_run"] == 1 and len(calls) == 1 + row["runs"]


@pytest.mark.parametrize("family", run.FAMILIES)
def test_real_default_set_is_part_of_the_full_set(family, capsys):
    assert run.main(["--list", "--device", "cpu", "--family", family]) == 0
    default = jobs_of(capsys.readouterr().out)
    assert run.main(["--list", "--device", "cpu", "--family", family, "--full"]) == 0
    full = jobs_of(capsys.readouterr().out)
    assert default and set(default) <= set(full) and len(set(full)) == len(full)
    assert {c for c, _ in default} <= {c.name for c in registry.CASES if c.default and c.family == family}


def test_goals_of_the_selected_cases_only(fake):
    assert bench(fake, "--full", "--filter", "n=100 ") == 0
    _, doc = results_file(fake)
    assert [r["case"] for r in doc["rows"]] == ["fake.op n=100 fwd+bwd"] * 2 and doc["goals"] == []


def test_output_error_is_reported_and_plotted_against_time(fake, capsys):
    """A case with an ``error`` function: each row carries the error of the provider's output (computed from
    its inputs and outputs), the table shows it, and --plot draws error against time, a point per temperature."""
    pytest.importorskip("matplotlib")
    registry.CASES.clear()
    for tau in (0.1, 1.0):
        registry.add_case(
            Case(
                "fake",
                "op",
                f"n=10 tau={tau}",
                dict(n=10, batch=1, tau=tau),
                "fwd",
                "cpu",
                default=True,
                error=lambda case, inputs, outputs: case.params["tau"] * 2,
            )
        )
    assert bench(fake, "--plot") == 0
    path, doc = results_file(fake)
    assert sorted((r["provider"], r["output_error"]) for r in doc["rows"]) == [
        ("ours", 0.2),
        ("ours", 2.0),
        ("ref", 0.2),
        ("ref", 2.0),
    ]
    out = capsys.readouterr().out
    assert "output error" in out and "output error 0.2" in out
    assert glob.glob(path[:-5] + "*.png") == [path[:-5] + "-fake-op-fwd-n=10-batch=1.png"]


def test_contention_set_lists_existing_jobs(capsys):
    """Every (case, provider) of the contention set exists in the real registry (listed, nothing timed)."""
    from relaxops.bench import contention

    assert run.main(["--contention", "4", "--list"]) == 0
    listed = jobs_of(capsys.readouterr().out)
    skipped = {c for c, p in contention.JOBS} - {c for c, _ in listed}
    assert set(listed) | {(c, p) for c, p in contention.JOBS if c in skipped} == set(contention.JOBS)


def test_contention_times_one_and_t_threads_beside_busy_processes(fake, capsys, monkeypatch):
    from relaxops.bench import contention

    monkeypatch.setattr(contention, "JOBS", [("fake.op n=100 fwd+bwd", "ours"), ("fake.op n=10 fwd+bwd", "ref")])
    monkeypatch.setattr(contention, "FAMILIES", ("fake",))
    loads = []
    real_load = contention.Load

    class Recorded(real_load):
        def __enter__(self):
            loads.append(super().__enter__())
            return loads[-1]

    monkeypatch.setattr(contention, "Load", Recorded)
    before = torch.get_num_threads()
    assert bench(fake, "--contention", "1", "--threads", "2", "--repeat", "2") == 0
    assert torch.get_num_threads() == before
    out = capsys.readouterr().out
    assert "1 busy processes, 1 against 2 threads" in out and "T / 1" in out
    _, doc = results_file(fake)
    assert doc["contention"] == {"busy": 1, "threads": 2}
    assert [(r["case"], r["provider"]) for r in doc["rows"]] == contention.JOBS
    for r in doc["rows"]:
        assert r["threads"] == 2 and r["runs"] == 2
        assert r["ratio"] == pytest.approx(r["tn_median_ms"] / r["t1_median_ms"])
    (load,) = loads
    assert len(load.procs) == 1 and all(p.poll() is not None for p in load.procs)  # ended with the run


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--threads", "2"], "--threads"),
        (["--contention", "1", "--full"], "--contention"),
        (["--contention", "-1"], "--contention"),
    ],
)
def test_contention_bad_arguments_are_named(fake, capsys, argv, named):
    assert bench(fake, *argv) == 2
    assert named in capsys.readouterr().err
    assert fake.made == []
