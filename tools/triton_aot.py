"""Compile relaxops' Triton kernels for GPUs ahead of time, on a machine without one.

Triton compiles a kernel at its first launch, for the launch's argument types, constexprs and options; the
interpreter (TRITON_INTERPRET=1), which the CPU tests use, accepts code the GPU compiler rejects. This tool:

    python tools/triton_aot.py record [--out tools/triton_launches.json]
        runs the cases of `python -m relaxops selftest` for every Triton family through the interpreter, with the
        launchers planning as on a GPU (relaxops._triton.PLAN_FOR_GPU), then launches those of `--full` (the
        benchmark sizes) without running them, and records each distinct launch configuration (kernel, argument
        types, constexprs, num_warps, num_stages);
    python tools/triton_aot.py compile [--launches FILE] [--arch 80 90] [--jobs N] [--table FILE]
        compiles every recorded configuration with Triton's compiler and ptxas for each architecture (no GPU
        needed; a compile error, or more shared memory than the architecture has, exits 1) and prints, or writes as
        a Markdown table, the registers, stack (spills) and shared memory of each kernel, the most of any of its
        configurations.

The configurations are committed (tools/triton_launches.json) so that CI compiles them without recording; a
test checks that every Triton kernel of relaxops is among them.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHES = os.path.join(ROOT, "tools", "triton_launches.json")
OPTIONS = ("num_warps", "num_stages")
SIZE_CONSTEXPRS = {"BC", "BI", "BJ", "BK", "BLOCK", "BP", "BQ", "BR", "BS", "N_PAD", "R", "TILE"}  # block sizes
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}  # bytes of shared memory a block may use
TRITON_FAMILIES = (
    "sortnet",
    "baselines",
    "logic",
    "logic_act",
    "logic_conv",
    "logic_lut",
    "fastsort",
    "otsort",
    "edit_distance",
    "bubble_sort",
    "shortest_path",
)


def _arg_type(value) -> str | None:
    """Triton's signature type of a runtime argument (None: not a runtime argument)."""
    import torch

    if isinstance(value, torch.Tensor):
        names = {
            torch.float64: "fp64",
            torch.float32: "fp32",
            torch.float16: "fp16",
            torch.bfloat16: "bf16",
            torch.int64: "i64",
            torch.int32: "i32",
            torch.int16: "i16",
            torch.int8: "i8",
            torch.uint8: "u8",
            torch.bool: "i1",
        }
        return "*" + names[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def _record_launch(seen: dict, fn, args, kwargs) -> None:
    params = list(inspect.signature(fn).parameters.values())
    bound = dict(zip([p.name for p in params], args))
    bound.update({k: v for k, v in kwargs.items() if k not in OPTIONS})
    signature, constexprs = {}, {}
    for p in params:
        value = bound.get(p.name, p.default)
        if "constexpr" in str(p.annotation):
            signature[p.name] = "constexpr"
            constexprs[p.name] = value
        else:
            signature[p.name] = _arg_type(value)
    entry = {
        "module": fn.__module__,
        "kernel": fn.__name__,
        "signature": signature,
        "constexprs": constexprs,
        "options": {k: kwargs[k] for k in OPTIONS if k in kwargs},
    }
    seen.setdefault(json.dumps(entry, sort_keys=True), entry)


def _launch_only(failures, what, fn, inputs, backend, device, dtype):
    """selftest's case runner for the benchmark sizes: the Triton forward and backward, without the references (the
    kernels do not run: their launches are recorded, their outputs stay uninitialized)."""
    import torch

    xs = [x.to(device, dtype).requires_grad_(x.is_floating_point()) for x in inputs]
    try:
        outs = fn(*xs, backend)
        outs = [o for o in (outs if isinstance(outs, (tuple, list)) else [outs]) if o is not None]
        loss = sum(o.sum() for o in outs if o.is_floating_point())
        if isinstance(loss, torch.Tensor) and loss.requires_grad:
            torch.autograd.grad(loss, [x for x in xs if x.requires_grad], allow_unused=True)
    except Exception as e:  # noqa: BLE001  (uninitialized outputs may fail the host code that follows)
        failures.append(f"{what}: {type(e).__name__}")


def record(out: str, families: list[str], run_kernels: bool, append: bool) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "TRITON_INTERPRET": "1"})
    from relaxops import _triton, selftest
    from triton.runtime import interpreter

    _triton.PLAN_FOR_GPU = True  # the launchers choose blocks and warps as on a GPU
    seen: dict = {}
    if append and os.path.exists(out):
        with open(out) as f:
            for entry in json.load(f):
                seen[json.dumps(entry, sort_keys=True)] = entry
    run = interpreter.InterpretedFunction.run
    execute = run_kernels
    if not run_kernels:
        selftest._check_fn = _launch_only

    def recording_run(self, *args, grid, warmup, **kwargs):
        _record_launch(seen, self.fn, args, kwargs)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs) if execute else None

    interpreter.InterpretedFunction.run = recording_run
    for family in families:  # the selftest's cases, run and compared (unless run_kernels is False)
        start = time.monotonic()
        failures = selftest.check(family, "triton", "cpu")
        print(
            f"{family}: {len(seen)} configurations so far ({time.monotonic() - start:.0f} s)"
            f"{'; FAILURES: ' + '; '.join(failures[:3]) if failures else ''}",
            flush=True,
        )
    execute, selftest._check_fn = False, _launch_only
    for family in families:  # and the benchmark sizes of --full, launched only
        start = time.monotonic()
        failures = selftest.check(family, "triton", "cpu", full=True)
        print(
            f"{family} --full: {len(seen)} configurations so far ({time.monotonic() - start:.0f} s)"
            f"{'; not recorded past: ' + '; '.join(failures[:3]) if failures else ''}",
            flush=True,
        )
    entries = sorted(seen.values(), key=lambda e: (e["module"], e["kernel"], json.dumps(e, sort_keys=True)))
    with open(out, "w") as f:
        json.dump(entries, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(entries)} launch configurations to {out}")
    return 0


def _resources(cubin: bytes) -> dict:
    """Registers and stack bytes per thread (where ptxas puts spilled registers; cuobjdump's LOCAL stays 0 for
    Triton's kernels) from cuobjdump's resource usage of a cubin."""
    from triton.backends.nvidia import compiler as nv

    tool = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(REG|STACK):(\d+)", text))
    return {"regs": int(fields.get("REG", 0)), "stack": int(fields.get("STACK", 0))}


def _compile_one(task) -> dict:
    entry, arch = task
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(entry["module"]), entry["kernel"])
    start = time.monotonic()
    try:
        src = ASTSource(fn, entry["signature"], constexprs=entry["constexprs"])
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=entry["options"])
    except Exception as e:  # noqa: BLE001  (reported with the configuration that failed)
        msg = str(e).strip().splitlines()
        return {"entry": entry, "arch": arch, "error": f"{type(e).__name__}: {msg[-1] if msg else ''}"}
    shared = k.metadata.shared
    if shared > SHARED_LIMIT.get(arch, min(SHARED_LIMIT.values())):  # the launch would fail: out of resources
        return {
            "entry": entry,
            "arch": arch,
            "error": f"needs {shared} B of shared memory, sm_{arch} has "
            f"{SHARED_LIMIT.get(arch, min(SHARED_LIMIT.values()))} B per block",
        }
    return {
        "entry": entry,
        "arch": arch,
        "seconds": time.monotonic() - start,
        "shared": shared,
        **_resources(k.asm["cubin"]),
    }


def sample(entries: list[dict]) -> list[dict]:
    """One configuration per kernel and code path (what CI compiles): configurations that differ only in block
    sizes (``SIZE_CONSTEXPRS``), argument types and num_warps/num_stages share a code path; of each, the one with
    the smallest blocks (the fastest to compile: 94 compile in 31 s on 2 cores, the largest in minutes; the
    shared-memory limit, which the largest blocks reach, is checked by the full compile of docs/gpu.md's table),
    float32 where both dtypes were launched."""
    groups: dict = {}
    for e in entries:
        path = {k: v for k, v in e["constexprs"].items() if k not in SIZE_CONSTEXPRS}
        groups.setdefault(json.dumps([e["module"], e["kernel"], path], sort_keys=True), []).append(e)

    def weight(e):
        blocks = math.prod(v for k, v in e["constexprs"].items() if k in SIZE_CONSTEXPRS and isinstance(v, int))
        return blocks, "*fp64" in e["signature"].values()

    return [min(group, key=weight) for group in groups.values()]


def compile_all(launches: str, archs: list[int], jobs: int, table: str | None, sampled: bool) -> int:
    import triton

    with open(launches) as f:
        entries = json.load(f)
    if sampled:
        entries = sample(entries)
    tasks = [(e, a) for e in entries for a in archs]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="relaxops-triton-aot-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache  # compile everything: nothing from an earlier run's cache
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_compile_one, tasks))
    errors = [r for r in results if "error" in r]
    for r in errors:
        e = r["entry"]
        print(
            f"FAILED sm_{r['arch']} {e['module']}.{e['kernel']} constexprs={e['constexprs']} "
            f"options={e['options']}: {r['error']}"
        )
    worst: dict = {}
    for r in results:
        if "error" in r:
            continue
        key = (r["entry"]["module"].split(".")[1], r["entry"]["kernel"], r["arch"])
        w = worst.setdefault(key, {"configs": 0, "regs": 0, "stack": 0, "shared": 0, "seconds": 0.0})
        w["configs"] += 1
        for field in ("regs", "stack", "shared", "seconds"):
            w[field] = max(w[field], r[field])
    lines = [
        f"Triton {triton.__version__}: {len(tasks)} compilations ({len(entries)} launch configurations"
        f"{' sampled' if sampled else ''} x "
        f"sm_{', sm_'.join(map(str, archs))}) in {time.monotonic() - start:.0f} s on {jobs} processes, "
        f"{len(errors)} failed.",
        "",
        "| family | kernel | arch | configurations | registers | stack B/thread (spills) | shared memory B | "
        "slowest compile s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (family, kernel, arch), w in sorted(worst.items()):
        lines.append(
            f"| {family} | {kernel} | sm_{arch} | {w['configs']} | {w['regs']} | {w['stack']} | "
            f"{w['shared']} | {w['seconds']:.1f} |"
        )
    text = "\n".join(lines)
    print(text)
    if table:
        with open(table, "w") as f:
            f.write(text + "\n")
    return 1 if errors else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the launch configurations of the selftest cases")
    rec.add_argument("--out", default=LAUNCHES)
    rec.add_argument("--families", nargs="+", choices=TRITON_FAMILIES, default=list(TRITON_FAMILIES))
    rec.add_argument(
        "--no-run",
        action="store_true",
        help="launch the kernels without running them (the solvers "
        "that iterate to a tolerance are slow in the interpreter; their launches then follow "
        "uninitialized data)",
    )
    rec.add_argument("--append", action="store_true", help="keep the configurations already in --out")
    com = sub.add_parser("compile", help="compile the recorded configurations for GPUs")
    com.add_argument("--launches", default=LAUNCHES)
    com.add_argument("--arch", type=int, nargs="+", default=[80, 90], help="compute capabilities (default 80 90)")
    com.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    com.add_argument("--table", help="also write the table to this Markdown file")
    com.add_argument(
        "--sample",
        action="store_true",
        help="one configuration per kernel and code path, the largest blocks (see sample(); what CI compiles)",
    )
    args = p.parse_args(argv)
    if args.command == "record":
        return record(args.out, args.families, not args.no_run, args.append)
    os.environ.pop("TRITON_INTERPRET", None)
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")  # triton 3.9's notice of a new default
    return compile_all(args.launches, args.arch, args.jobs, args.table, args.sample)


if __name__ == "__main__":
    sys.exit(main())
