"""`python -m relaxops selftest` and the verification cache, with the Triton interpreter standing in for a GPU:
what is recorded, what `auto`'s GPU choice then is, failing and crashing kernels, corrupt and foreign caches."""

import json
import sys
import warnings

import pytest
import relaxops
import torch
from relaxops import _backend, selftest

CPU = torch.device("cpu")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXOPS_CACHE_DIR", str(tmp_path))
    return tmp_path / "selftest.json"


def _fake_child(monkeypatch, code):
    monkeypatch.setattr(selftest, "_child_command", lambda *a: [sys.executable, "-c", code])


def test_passing_kernel_is_recorded_and_chosen(cache):
    assert _backend.gpu_choice("edit_distance", CPU) == "reference"
    results = selftest.run("cpu", ["edit_distance"], ["triton"], log=lambda *_: None)
    assert [(r["family"], r["backend"], r["status"]) for r in results] == [("edit_distance", "triton", "passed")]
    entry = json.loads(cache.read_text())["entries"][0]
    assert entry["device"] == _backend.device_identity(CPU)["device"] and entry["relaxops"] == relaxops.__version__
    assert _backend.verified("edit_distance", "triton", CPU).startswith("selftest on this device")
    assert _backend.gpu_choice("edit_distance", CPU) == "triton"
    assert _backend.gpu_choice("sortnet", CPU) == "reference"  # not tested here, so not chosen


def test_in_process_check_finds_wrong_results(monkeypatch):
    assert selftest.check("baselines", "triton", "cpu") == []
    real = relaxops.neuralsort
    monkeypatch.setattr(
        relaxops, "neuralsort", lambda x, **kw: real(x, **kw) * (1.001 if kw["backend"] == "triton" else 1.0)
    )
    failures = selftest.check("baselines", "triton", "cpu")
    assert failures and all("neuralsort" in f for f in failures)


@pytest.mark.parametrize(
    "code, detail",
    [
        ("print('[\"sort [3, 7] output 0: max error 1 > 1e-9\"]')", "max error 1"),
        ("import os; os.abort()", "crashed with signal"),
        ("raise SystemExit('kernel launch failed')", "kernel launch failed"),
    ],
)
def test_failing_or_crashing_kernel_is_recorded_as_failed(cache, monkeypatch, code, detail):
    _backend.record_selftest(
        [{**_backend.device_identity(CPU), "family": "sortnet", "backend": "triton", "status": "passed", "detail": ""}]
    )
    assert _backend.gpu_choice("sortnet", CPU) == "triton"
    _fake_child(monkeypatch, code)
    (r,) = selftest.run("cpu", ["sortnet"], ["triton"], log=lambda *_: None)
    assert r["status"] == "failed" and detail in r["detail"]
    assert len(json.loads(cache.read_text())["entries"]) == 1  # the new result replaced the old one
    assert _backend.gpu_choice("sortnet", CPU) == "reference"


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"format": 99, "entries": []}),
        json.dumps({"format": 1, "entries": [{"family": 3}, "x"]}),
    ],
)
def test_corrupt_cache_is_ignored_and_rewritten(cache, content):
    cache.write_text(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _backend.gpu_choice("edit_distance", CPU) == "reference"
    valid_format = content.startswith('{"format": 1')  # then only its malformed entries are dropped, silently
    assert any("ignoring the selftest cache" in str(w.message) for w in caught) != valid_format
    _backend.record_selftest(
        [
            {
                **_backend.device_identity(CPU),
                "family": "edit_distance",
                "backend": "triton",
                "status": "passed",
                "detail": "",
            }
        ]
    )
    assert json.loads(cache.read_text())["format"] == 1
    assert _backend.gpu_choice("edit_distance", CPU) == "triton"


@pytest.mark.parametrize(
    "field, value", [("device", "NVIDIA H100 80GB HBM3"), ("driver", "13000"), ("relaxops", "0.0.1")]
)
def test_foreign_entries_do_not_count(cache, field, value):
    _backend.record_selftest(
        [
            {
                **_backend.device_identity(CPU),
                field: value,
                "family": "edit_distance",
                "backend": "triton",
                "status": "passed",
                "detail": "",
            }
        ]
    )
    assert _backend.verified("edit_distance", "triton", CPU) is None
    assert _backend.gpu_choice("edit_distance", CPU) == "reference"


def test_cli_without_gpu_says_so(capsys, monkeypatch):
    from relaxops.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    assert main(["selftest"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_cli_family_accepts_every_family_the_selftest_runs(monkeypatch):
    """`--family` takes exactly the families of selftest.FAMILIES (what `run` walks by default), in its order."""
    from relaxops.__main__ import main

    calls = []
    monkeypatch.setattr(selftest, "run", lambda device, families, *a, **kw: calls.append(families) or [])
    argv = ["selftest", "--device", "cpu"]
    for family in selftest.FAMILIES:
        argv += ["--family", family]
    assert main(argv) == 0
    assert calls == [list(selftest.FAMILIES)]


def test_shards_split_the_cases_of_a_pair_between_parallel_children(cache, monkeypatch):
    """Every case runs in exactly one of the shards; the pair passes only when every shard passed, and a failing
    shard is named in the detail."""
    takes = [[selftest.Failures(i, 3) for i in range(3)]]
    picks = [[f.take(f"case {k}") for k in range(10)] for f in takes[0]]
    assert [sum(col) for col in zip(*picks)] == [1] * 10
    (r,) = selftest.run("cpu", ["logic"], ["triton"], log=lambda *_: None, jobs=2, shards=2)
    assert r["status"] == "passed"
    code = "import sys, json; print(json.dumps(['bad'] if sys.argv[-1] == '1/2' else []))"
    monkeypatch.setattr(
        selftest,
        "_child_command",
        lambda family, backend, device, full, shard: [sys.executable, "-c", code, f"{shard[0]}/2"],
    )
    (r,) = selftest.run("cpu", ["logic"], ["triton"], log=lambda *_: None, jobs=2, shards=2)
    assert r["status"] == "failed" and r["detail"] == "[shard 1/2] bad"


def test_a_child_stopped_at_its_timeout_names_its_case_and_its_threads_are_set():
    """A child past its timeout is reported with the case it was in (announced on stderr) and how many of its
    cases had finished; children run on the CPU threads they are given (OMP_NUM_THREADS)."""
    slow = "import sys, time; [print('case:', c, file=sys.stderr, flush=True) for c in 'ab']; time.sleep(60)"
    assert selftest._run_child([sys.executable, "-c", slow], 3, 1) == (
        "timed out after 3 s in b (1 case(s) of this shard finished)"
    )
    threads = "import os; print('[]' if os.environ['OMP_NUM_THREADS'] == '5' else '[\"threads\"]')"
    assert selftest._run_child([sys.executable, "-c", threads], 30, 5) == ""
    assert selftest._run_child([sys.executable, "-c", threads], 30, 4) == "threads"
