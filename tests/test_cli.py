"""`python -m relaxops`: every --help explains itself (the demos: what each shows, its duration, its files),
`info` runs, and bad arguments get an error naming the argument."""

from __future__ import annotations

import subprocess
import sys

import pytest
from relaxops.__main__ import main
from relaxops.demos import DEMOS, depth, render, run_demo

COMMANDS = ("info", "demo", "bench", "selftest")


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # words, whatever the wrapping


def error_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_main_help_lists_the_commands(capsys):
    out = help_text(capsys)
    for command in COMMANDS:
        assert f" {command} " in out
    assert "python -m relaxops COMMAND --help" in out


@pytest.mark.parametrize(
    "command, facts",
    [
        ("info", ["backend", "threads", "CUDA", "Triton", "selftest cache"]),
        ("selftest", ["float64 reference", "--device", "--family", "--full", "Exit status"]),
        ("demo", ["DEMO", "--steps", "--seed", "--method", "--task", "--compare"]),
    ],
)
def test_command_help(capsys, command, facts):
    out = help_text(capsys, command)
    assert out.startswith(f"usage: python -m relaxops {command}")
    for fact in facts:
        assert fact in out


def test_bench_help_is_the_harness(capsys):
    assert main(["bench", "--help"]) == 0  # the harness returns its exit code instead of raising SystemExit
    out = " ".join(capsys.readouterr().out.split())
    assert "--device" in out and "--family" in out and "original libraries" in out


def test_demo_help_lists_every_demo_with_its_facts(capsys):
    out = help_text(capsys, "demo")
    assert set(DEMOS) == {
        "sort",
        "topk",
        "logic",
        "render",
        "depth",
        "rank",
        "algorithms",
        "perturbed",
        "newton",
        "convlogic",
    }
    for name, demo in DEMOS.items():
        assert f" {name} " in out
        for fact in demo:
            assert " ".join(fact.split()) in out
        assert demo.duration.startswith("about ") and any(unit in demo.duration for unit in (" s", " min"))
    assert out.count("Duration: about ") == len(DEMOS)
    assert out.count("Writes: ") == len(DEMOS)
    for name, module in (("render", render), ("depth", depth)):
        for image in module.IMAGES:  # the files the demo writes, by name
            assert image in DEMOS[name].writes


def test_info_runs():
    proc = subprocess.run([sys.executable, "-m", "relaxops", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("relaxops ") and "torch" in lines[0]
    # the wheel variant, as the build recorded it (an installed wheel or an in-place CMake build has one)
    from relaxops import _ext

    variant = _ext.build_info()["variant"]
    assert lines[1].split()[:2] == ["variant:", variant or "source"], lines[1]
    for backend in ("reference", "cpu", "cuda", "triton"):
        assert any(line.split()[:1] == [backend] for line in lines), f"no line for the {backend} backend"


def test_info_without_a_gpu_says_what_a_gpu_user_would_get(capsys, monkeypatch):
    """No per-kernel list on a CPU-only machine: one line on what `auto` does on a GPU, with the verified count."""
    import torch
    from relaxops import _backend
    from relaxops.__main__ import info

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info()
    out = capsys.readouterr().out
    pairs = sum(len(b) for b in _backend.GPU_PREFERENCE.values())
    assert f"{len(_backend.VERIFIED_GPU)} of {pairs} family/backend pairs" in out
    assert "no CUDA GPU here" in out and "unverified GPU kernels" not in out and "No module named" not in out


def test_wrong_demo_name(capsys):
    err = error_text(capsys, "demo", "sorting")
    assert "argument DEMO: invalid choice: 'sorting'" in err
    assert all(name in err for name in DEMOS)
    with pytest.raises(ValueError, match="unknown demo 'sorting'; available: sort, topk, logic, render"):
        run_demo("sorting")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--steps", "0"], "argument --steps: must be a positive integer, got '0'"),
        (["demo", "logic", "--steps", "ten"], "argument --steps: must be a positive integer, got 'ten'"),
        (["demo", "render", "--method", "bitonic"], "--method: not an option of the render demo"),
        (["demo", "depth", "--task", "sort"], "--task: not an option of the depth demo"),
        (["demo", "logic", "--compare", "torchlogix"], "--compare: not an option of the logic demo"),
        (["demo", "convlogic", "--compare", "difflogic"], "argument --compare: invalid choice: 'difflogic'"),
        (["demo", "sort", "--task", "sort"], "--task: not an option of the sort demo"),
        (["demo", "convlogic", "--sampling", "hard"], "--sampling: not an option of the convlogic demo"),
        (["demo", "logic", "--parametrization", "raw"], "argument --parametrization: invalid choice: 'raw'"),
        (["demo", "algorithms", "--task", "knapsack"], "argument --task: invalid choice: 'knapsack'"),
        (["demo", "algorithms", "--method", "bitonic"], "--method: not an option of the algorithms demo"),
        (["selftest", "--device", "gpu"], "argument --device: must be cuda, cuda:N or cpu, got 'gpu'"),
        (["selftest", "--family", "sort"], "argument --family: invalid choice: 'sort'"),
        (["serve"], "argument COMMAND: invalid choice: 'serve'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_name_the_argument(capsys, argv, message):
    assert message in error_text(capsys, *argv)
