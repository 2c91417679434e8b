"""Every code block of README.md, and of the documentation pages that took over its reference sections (DOCS), runs
as written: the ```python blocks of a file run in order in one namespace (a block may continue an earlier one) in a
child interpreter, and every pip/python/git/bash command of the ```bash blocks is one that .ci/run runs (or is in
ALLOWED below, with the reason)."""

from __future__ import annotations

import os
import re
import shlex

import pytest
from testing import run_isolated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
# The pages the README's usage, tests, benchmarks and wheels sections moved to: held to the same rules.
DOCS = [
    os.path.join(ROOT, "docs", f"{name}.md") for name in ("index", "usage", "design", "testing", "benchmarks", "wheels")
]
PYTHON_FILES = [README, os.path.join(ROOT, "docs", "usage.md")]  # the files with ```python blocks to run
CI = os.path.join(ROOT, ".ci", "run")
CHECKED = ("pip", "python", "git", "bash")  # the programs whose commands must be known
# README commands that .ci/run does not run (full match, after normalize()).
ALLOWED = [
    r"git clone .+",  # CI runs in the checkout that this clones
    r"python -m venv \S+",  # CI makes its own virtual environments (.ci/run: fresh_venv)
    r"pip install( --upgrade)? torch(==\S+)? --index-url https://download\.pytorch\.org/whl/cpu",  # CI installs
    # the same CPU torch from a local copy (no network to PyTorch's index there)
    r"pip install relaxops(\[[\w,-]+\])?",  # the published wheel; CI installs the wheel it built instead
    r"python (bench/run\.py|-m relaxops bench)( --device (cpu|cuda))?",  # the default harness run, ~3 min
    r"python -m relaxops demo( (sort|topk|logic|render|depth))?",  # CI runs each demo with --steps 30 (full: minutes)
    r"python -m relaxops selftest",  # needs a GPU; tests/test_selftest.py runs it through the Triton interpreter
]


def blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of every ```lang fenced block of ``text``, in order."""
    out, start, lines = [], None, text.splitlines()
    for i, line in enumerate(lines):
        fence = line.strip()
        if start is None and fence == f"```{lang}":
            start = i + 1
        elif start is not None and fence == "```":
            out.append((start + 1, "\n".join(lines[start:i]) + "\n"))
            start = None
    assert start is None, f"unterminated ```{lang} block from line {start}"
    return out


def normalize(words: list[str]) -> str:
    """One command's words joined: leading VAR=value assignments dropped, `python -m pip` and `python3` written
    as `pip` and `python`."""
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        words = words[1:]
    if words[:1] == ["python3"]:
        words = ["python"] + words[1:]
    if words[:3] == ["python", "-m", "pip"]:
        words = ["pip"] + words[3:]
    return shlex.join(words)


def commands(script: str) -> list[str]:
    """The normalized commands of a shell script: comments dropped, continuation lines joined, split at
    `&&`, `||`, `;`, `|` and `&`."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = []
        for token in list(lexer) + [";"]:
            if token in ("&&", "||", ";", "|", "&", ";;"):
                if normalize(words):
                    out.append(normalize(words))
                words = []
            else:
                words.append(token)
    return out


def test_command_parsing():
    line = 'A=1 B="x y" python -m pip install ".[demo]" && python3 -m relaxops info; echo ok  # note\n'
    assert commands(line) == ["pip install '.[demo]'", "python -m relaxops info", "echo ok"]
    assert commands("pip install \\\n  -q torch\n# pip install no") == ["pip install -q torch"]
    assert blocks("a\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = x\n```\n", "python") == [
        (3, "x = 1\n"),
        (9, "y = x\n"),
    ]


def _name(path: str) -> str:
    return os.path.relpath(path, ROOT)


@pytest.mark.parametrize("path", PYTHON_FILES, ids=_name)
def test_readme_python_blocks_run(tmp_path, path):
    with open(path) as f:
        code = blocks(f.read(), "python")
    assert code, f"{_name(path)} has no ```python block"
    # Each block is compiled with the file's line numbers, so a traceback names the line that failed.
    proc = run_isolated(
        f"""
        import os
        os.chdir({str(tmp_path)!r})  # files the blocks write land in a temporary directory
        namespace = {{"__name__": "__main__"}}
        for line, code in {code!r}:
            exec(compile("\\n" * (line - 1) + code, {path!r}, "exec"), namespace)
        """,
        timeout=600,
    )
    assert proc.returncode == 0, f"a {_name(path)} python block failed:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("path", [README] + DOCS, ids=_name)
def test_readme_bash_commands_are_known(path):
    with open(path) as f:
        readme = [c for _, block in blocks(f.read(), "bash") for c in commands(block)]
    with open(CI) as f:
        ci = set(commands(f.read()))
    unknown = [
        c
        for c in readme
        if c.split(" ", 1)[0] in CHECKED and c not in ci and not any(re.fullmatch(pattern, c) for pattern in ALLOWED)
    ]
    assert not unknown, f"{_name(path)} commands that .ci/run does not run (add them there, or to ALLOWED): {unknown}"


def test_benchmark_figures_are_those_of_the_results_file_named():
    """README's duration and memory of the default harness run come from the results file it names: a complete
    default run (no options) of today's default cases, whose wall time and peak memory round to the figures."""
    import importlib
    import json

    from relaxops.bench import registry, run

    text = " ".join(open(README).read().split())
    m = re.search(
        r"The default run takes about (\d+) minutes on 2 cores and peaks at ([\d.]+) GiB of memory "
        r"\(measured: `(bench/results/[^`]+\.json)`\)",
        text,
    )
    assert m, "README's Benchmarks section states the default run's duration, memory and results file"
    minutes, gigabytes, path = int(m.group(1)), float(m.group(2)), m.group(3)
    with open(os.path.join(ROOT, path)) as f:
        doc = json.load(f)
    assert doc["complete"] and doc["device"] == "cpu"
    assert doc["args"] == {**run.SELECTION, "device": "cpu"}, doc["args"]
    assert abs(doc["elapsed_s"] / 60 - minutes) <= 0.5, doc["elapsed_s"]
    assert abs(doc["peak_rss_mib"] / 1024 - gigabytes) <= 0.05 and gigabytes < 4, doc["peak_rss_mib"]
    # the cases it measured are today's default cases (providers vary with the peers installed)
    for family in run.FAMILIES:
        importlib.import_module(f"relaxops.bench.{family}")
    default = {c.name for c in registry.CASES if c.default and c.device == "cpu"}
    measured = {r["case"] for r in doc["rows"]} | {n for s in doc["skipped"] for n in s["cases"]}
    assert measured == default, sorted(measured ^ default)
