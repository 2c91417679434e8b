"""tools/triton_aot.py: the recorded launch configurations cover every Triton kernel of relaxops, and a recorded
configuration compiles for a GPU (Triton's compiler and ptxas need no GPU)."""

import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("triton_aot", os.path.join(ROOT, "tools", "triton_aot.py"))
triton_aot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(triton_aot)


def _kernels() -> set[tuple[str, str]]:
    """(module, name) of every launched Triton kernel: by convention, the @triton.jit functions named *_kernel."""
    found = set()
    for path in glob.glob(os.path.join(ROOT, "python", "relaxops", "*", "triton.py")):
        module = "relaxops." + os.path.basename(os.path.dirname(path)) + ".triton"
        text = open(path).read()
        found |= {(module, name) for name in re.findall(r"@triton\.jit\s+def (\w+_kernel)\(", text)}
    return found


def test_every_triton_kernel_has_recorded_launch_configurations():
    with open(triton_aot.LAUNCHES) as f:
        recorded = {(e["module"], e["kernel"]) for e in json.load(f)}
    kernels = _kernels()
    assert len(kernels) >= 30
    missing = sorted(kernels - recorded)
    assert not missing, f"no recorded launch of {missing}: run `python tools/triton_aot.py record`"


def test_compile_reports_registers_and_fails_on_a_broken_configuration(tmp_path):
    """`compile` in a fresh interpreter (without TRITON_INTERPRET): one configuration compiles for sm_90 and its
    row shows registers; the same kernel with block sizes that are not powers of two fails, and the exit is 1."""
    pytest.importorskip("triton")
    with open(triton_aot.LAUNCHES) as f:
        good = next(e for e in json.load(f) if e["kernel"] == "_coef_grad_kernel")
    broken = {**good, "constexprs": {k: 3 for k in good["constexprs"]}}
    launches = tmp_path / "launches.json"
    launches.write_text(json.dumps([good, broken]))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "triton_aot.py"),
            "compile",
            "--launches",
            str(launches),
            "--arch",
            "90",
            "--jobs",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("FAILED sm_90 relaxops.logic.triton._coef_grad_kernel") == 1
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| logic | _coef_grad_kernel | sm_90"))
    assert int(row.split("|")[5]) > 0  # registers
