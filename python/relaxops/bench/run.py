"""The benchmark harness: times the cases of relaxops/bench/<family>.py for every provider that can run them.

A job is a (case, provider) pair. Each job builds its inputs, is called once to warm up (lazy initialisation,
compilation, allocator), then timed in runs of back-to-back calls (each run at least 10 ms, with
``time.perf_counter`` on CPU and CUDA events on GPU) until about ``--budget`` seconds of runs (at least one run)
or in exactly ``--repeat`` runs. A row gives the median and the 20th/80th percentiles of the per-call time over
the runs, peak memory (GPU) and the speed-up against each reference provider timed in the same results file.
Rows are printed and saved as they are measured; the results file is JSON: the machine, commit and versions,
the options, the rows, the skipped jobs with their reasons, the goals, ``complete``, the run's wall time
(``elapsed_s``, all segments of a resumed run) and the harness process's peak resident memory (``peak_rss_mib``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import importlib
import importlib.metadata
import json
import math
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import textwrap
import time

import torch

from . import registry

FAMILIES = (
    "sortnet",
    "topk",
    "logic",
    "render",
    "fastsort",
    "otsort",
    "ranking",
    "framework",
    "algorithms_dp",
    "algorithms",
    "operators",
    "training",
)

MIN_RUN_S = 0.01  # calls per timed run are chosen so that a run lasts at least this long
DEFAULT_BUDGET = 0.5  # seconds of timed runs per job
BANDWIDTH_BYTES = 1 << 30  # the device-to-device copy that measures the memory bandwidth
# The options that choose and time the jobs: saved in the results file, and taken from it by --resume unless
# given again.
SELECTION = {
    "family": None,
    "device": None,
    "full": False,
    "filter": "",
    "exclude": None,
    "budget": DEFAULT_BUDGET,
    "repeat": None,
    "contention": None,
    "threads": None,
}
CONTENTION_BUDGET = 4.0  # seconds of timed runs per job under --contention (the timings of a loaded machine vary)

DESCRIPTION = """\
Times relaxops' ops against the original libraries (diffsort, difftopk, difflogic, gendr) and the peers a user
would pick instead (when installed), on the same inputs, in the same run.

A run lists its jobs (case, provider) and the jobs it skips with the reason, then times each job: one warm-up
call, then runs of back-to-back calls for about --budget seconds. Each row is printed as soon as it is measured
(a progress line with an ETA goes to stderr) and saved at once; the run ends with a table (median and p20/p80 ms
per call, speed-up against each reference provider) and the goals of the issues (e.g. >= 50x diffsort).

The default set is the headline case of each family, against each original: about 3 minutes on a 2-core CPU.
--full runs every case of the grid (much longer: `--list --full` shows its jobs).

--contention N times the kernels of every family on 1 thread and on --threads T threads while N other processes
keep the cores busy (the contention set; about 2 minutes at N = 4 on 2 cores): the ratio T-thread / 1-thread
time shows whether a kernel holds on a shared CPU (goal: at most 1.5). --contention 0 gives the idle speed-up."""


def _epilog(prog: str, results: str) -> str:
    examples = [
        ("", "the default set on this machine's device"),
        ("--family sortnet --full", "every sortnet case"),
        ("--list --full", "the jobs of the full set, without timing anything"),
        ("--contention 4", "every family's kernels on 1 and 2 threads beside 4 busy processes"),
        ("--resume FILE.json", "continue an interrupted run, with its options"),
        ("--compare MAIN.json BRANCH.json", "speed-ups of BRANCH over MAIN, row by row (no timing)"),
        ("--plot-from FILE.json", "PNG plots of saved results (needs matplotlib)"),
    ]
    width = max(len(f"{prog} {e}") for e, _ in examples)
    return f"""\
where the results go:
  {results}/<device>/<date>-<time>.json (or --out DIR), rewritten after every row: an interrupted
  run keeps what it measured. Ctrl-C stops the run, prints the table of what was measured and the command that
  resumes it (exit status 130).

examples:
""" + "\n".join(f"  {f'{prog} {e}'.ljust(width)}  {what}" for e, what in examples)


class UsageError(Exception):
    """Bad input: the message names the argument."""


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser(prog: str, results: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=_epilog(prog, results),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sel = p.add_argument_group("selection")
    sel.add_argument("--family", choices=FAMILIES, help="one family (default: all)")
    sel.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is available, else cpu")
    sel.add_argument("--full", action="store_true", default=None, help="every case (default: the headline cases)")
    sel.add_argument("--filter", metavar="SUBSTR", help="only jobs whose 'case provider' contains SUBSTR")
    sel.add_argument("--exclude", metavar="SUBSTR", help="leave out the jobs whose 'case provider' contains SUBSTR")
    timing = p.add_argument_group("timing")
    timing.add_argument(
        "--budget",
        type=_positive(float),
        metavar="S",
        help=f"seconds of timed runs per job (default {DEFAULT_BUDGET}; a slower call is timed once)",
    )
    timing.add_argument("--repeat", type=_positive(int), metavar="N", help="exactly N timed runs per job")
    timing.add_argument(
        "--contention",
        type=_non_negative_int,
        metavar="N",
        help="time the contention set on 1 and --threads threads, run for run, beside N busy "
        f"processes (budget default {CONTENTION_BUDGET:g} s)",
    )
    timing.add_argument(
        "--threads",
        type=_positive(int),
        metavar="T",
        help="the thread count --contention compares with one thread (default: torch's)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", metavar="DIR", help=f"directory of the results file (default {results}/<device>)")
    out.add_argument(
        "--resume",
        metavar="FILE",
        help="skip the jobs already measured in FILE (errors are retried) "
        "and add the new rows to it; the options saved in FILE apply unless given again",
    )
    out.add_argument("--plot", action="store_true", help="after the run, draw PNG plots beside the results file")
    out.add_argument("--plot-dir", metavar="DIR", help="where --plot and --plot-from put the PNG files")
    other = p.add_argument_group("without timing").add_mutually_exclusive_group()
    other.add_argument("--list", action="store_true", help="print the jobs and skips of the selection, time nothing")
    other.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json", "B.json"),
        help="for every job in both files: A's and B's median and the speed-up of B over A",
    )
    other.add_argument(
        "--plot-from",
        nargs="+",
        metavar="FILE",
        help="draw PNG plots of saved results (time against size per op, one line per provider)",
    )
    return p


# ---- the machine ----------------------------------------------------------------------------------------


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_output(*args) -> str | None:
    """The output of ``git ARGS`` in the current directory (None outside a git checkout)."""
    try:
        done = subprocess.run(["git", *args], cwd=os.getcwd(), capture_output=True, text=True, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(device: str) -> dict:
    from relaxops import _ext

    status = git_output("status", "--porcelain", "--untracked-files=no")
    return {
        "device": device,
        "device_name": device_name(device),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": git_output("rev-parse", "HEAD"),
        "dirty": None if status is None else bool(status),
        "versions": {
            "python": platform.python_version(),
            **{p: _version(p) for p in ("torch", "relaxops", "diffsort", "triton")},
        },
        "threads": {"torch": torch.get_num_threads(), "relaxops": _ext._C.num_threads() if _ext.has_cpu() else None},
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---- timing ---------------------------------------------------------------------------------------------


def _clock(fn, device: str):
    """clock(k): seconds per call of k back-to-back calls of fn."""
    if device == "cuda":

        def clock(k):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / k
    else:

        def clock(k):
            t = time.perf_counter()
            for _ in range(k):
                fn()
            return (time.perf_counter() - t) / k

    return clock


def measure(fn, device: str, budget: float, repeat: int | None) -> dict:
    """One warm-up call, then runs of back-to-back calls (each at least about MIN_RUN_S) until ``budget`` seconds
    of runs (at least one run), or exactly ``repeat`` runs."""
    clock = _clock(fn, device)
    clock(1)
    times, calls = [], 1
    while (len(times) < repeat) if repeat else (sum(times) * calls < budget):
        per_call = clock(calls)
        if not times and per_call * calls < MIN_RUN_S / 2:  # too short to time: it only sizes the runs
            calls = math.ceil(MIN_RUN_S / max(per_call, 1e-9))
        else:
            times.append(per_call)
    q = torch.tensor(times, dtype=torch.float64).quantile(torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
    ms = q.mul(1e3).tolist()
    return {"median_ms": ms[0], "p20_ms": ms[1], "p80_ms": ms[2], "runs": len(times), "calls_per_run": calls}


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _trim_heap() -> None:
    """Return the heap's free memory to the system after a job: freed blocks below glibc's (adaptive) mmap
    threshold otherwise stay with the process, and later jobs stacked on them (the default run on 2 cores peaked
    at 3.8 GiB without the trim, 3.1 GiB with it; its largest job, ott-jax's unrolled ot_rank, alone 2.6 GiB)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def peak_memory(fn) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def bandwidth(budget: float) -> float:
    """Device memory bandwidth in bytes/s: bytes read + written by cloning a 1 GiB tensor, over its time."""
    x = torch.empty(BANDWIDTH_BYTES // 4, device="cuda")
    return 2 * BANDWIDTH_BYTES / (measure(x.clone, "cuda", budget, None)["median_ms"] / 1e3)


def run_job(case, provider, budget, repeat, bw, threads=None) -> dict:
    """Time one job; ``threads``: under --contention, on 1 thread and on ``threads`` threads, run for run."""
    forward, inputs, cotangents = provider.make(case)
    fn = registry.closure(case.mode, forward, inputs, cotangents, direct=threads is not None)
    if threads is not None:
        from .contention import LOAD_RUN_S, measure_threads

        row = measure_threads(fn, threads, budget, repeat, LOAD_RUN_S)
    else:
        row = measure(fn, case.device, budget, repeat)
    if hasattr(forward, "setup_s"):  # one-off work of make() (e.g. compilation), not in the timed calls
        row["setup_s"] = forward.setup_s
    if case.error is not None:
        with torch.no_grad():
            row["output_error"] = case.error(case, inputs, forward())
    if case.device == "cuda":
        row["peak_mib"] = peak_memory(fn) / 2**20
        if case.out_bytes:
            row["peak_vs_out"] = row["peak_mib"] * 2**20 / case.out_bytes
        if case.out_bytes and bw:  # bw: the bandwidth measured when the results file was started
            row["time_vs_out_traffic"] = row["median_ms"] / 1e3 / (2 * case.out_bytes / bw)
    if case.items:
        row["ns_per_item"] = row["median_ms"] * 1e6 / case.items
        row["items_per_s"] = case.items / (row["median_ms"] / 1e3)
    return row


# ---- selection and the results file ---------------------------------------------------------------------


def select(args, done=frozenset()):
    """The jobs of the selection (reference providers first in each case, so that each row can be compared as
    soon as it is measured) and its skips {(provider, reason): [case names]}; ``done``: the (case, provider)
    names already measured."""
    if args.contention is not None:
        return _select_contention(args, done)
    for family in [args.family] if args.family else FAMILIES:
        importlib.import_module(f"relaxops.bench.{family}")
    cases = [
        c
        for c in registry.CASES
        if args.family in (None, c.family) and c.device == args.device and (c.default or args.full)
    ]
    jobs, skipped = [], {}
    for case in cases:
        providers = registry.PROVIDERS.get(case.family, [])
        for provider in sorted(providers, key=lambda p: not p.reference):
            _add_job(args, case, provider, done, jobs, skipped)
    return jobs, skipped


def _add_job(args, case, provider, done, jobs, skipped) -> None:
    """(case, provider) into ``jobs``, or its skip reason into ``skipped``, if --filter / --exclude keep it and it
    is not ``done``."""
    job = f"{case.name} {provider.name}"
    if args.filter not in job or (args.exclude and args.exclude in job) or (case.name, provider.name) in done:
        return
    reason = provider.skip(case) if args.full or not provider.full_only else f"{provider.full_only}: --full runs it"
    if reason is None:
        jobs.append((case, provider))
    else:
        skipped.setdefault((provider.name, reason), []).append(case.name)


def _select_contention(args, done):
    """The jobs of the contention set (``contention.JOBS``) that the selection options keep, and its skips."""
    from . import contention

    for family in contention.FAMILIES:
        importlib.import_module(f"relaxops.bench.{family}")
    cases = {c.name: c for c in registry.CASES if c.device == "cpu"}
    jobs, skipped = [], {}
    for name, provider_name in contention.JOBS:
        case = cases[name]
        if args.family in (None, case.family):
            provider = next(p for p in registry.PROVIDERS[case.family] if p.name == provider_name)
            _add_job(args, case, provider, done, jobs, skipped)
    return jobs, skipped


def load_results(path: str, option: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"{option} {path}: cannot read it ({e})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"case", "provider"} <= r.keys() for r in rows):
        raise UsageError(f"{option} {path}: not a results file of this harness (no list of rows)")
    return doc


def save(doc: dict, path: str) -> None:
    """Rewrite ``path`` atomically: an interrupted write leaves the previous version."""
    tmp = os.path.join(os.path.dirname(path), f"tmp-{os.path.basename(path)}")
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _new_path(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, time.strftime("%Y%m%d-%H%M%S"))
    path, k = f"{stem}.json", 1
    while os.path.exists(path):
        path, k = f"{stem}-{k}.json", k + 1
    return path


def _merge_skipped(old: list, new: dict, runs: set) -> list:
    """The skips of a resumed file and of this run, less the (case, provider) jobs that ``runs`` now."""
    merged: dict[tuple, list] = {}
    for (p, reason), names in [((s["provider"], s["reason"]), s["cases"]) for s in old] + list(new.items()):
        mine = merged.setdefault((p, reason), [])
        mine += [n for n in names if n not in mine and (n, p) not in runs]
    return [{"provider": p, "reason": r, "cases": n} for (p, r), n in merged.items() if n]


# ---- report ---------------------------------------------------------------------------------------------


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def add_speedups(rows, references) -> None:
    by_case: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["provider"] in references and "median_ms" in r:
            by_case.setdefault(r["case"], {})[r["provider"]] = r["median_ms"]
    for r in rows:
        if "median_ms" in r:
            r["speedup"] = {
                ref: t / r["median_ms"] for ref, t in by_case.get(r["case"], {}).items() if ref != r["provider"]
            }


def row_line(r) -> str:
    """The compact one-line form of a row, printed as soon as it is measured."""
    head = f"{r['case']} | {r['provider']}: "
    if "error" in r:
        return head + f"error: {r['error']}"
    line = head + f"{_num(r['median_ms'])} ms [{_num(r['p20_ms'])}, {_num(r['p80_ms'])}]"
    if "peak_mib" in r:
        line += f", peak {_num(r['peak_mib'])} MiB"
    if "ns_per_item" in r:
        line += f", {_num(r['ns_per_item'])} ns/sample"
    if "output_error" in r:
        line += f", output error {_num(r['output_error'])}"
    if "ratio" in r:
        line += f"; 1 thread {_num(r['t1_median_ms'])} ms, {r['threads']} / 1 threads: {r['ratio']:.2f}"
    return line + "".join(f", {_num(s)}x vs {ref}" for ref, s in r.get("speedup", {}).items())


def print_table(rows, references) -> None:
    gpu = any("peak_mib" in r for r in rows)
    out = any("peak_vs_out" in r for r in rows)
    per_item = any("ns_per_item" in r for r in rows)
    errors = any("output_error" in r for r in rows)
    head = ["case", "provider", "median ms", "p20", "p80", "runs", "peak MiB"]
    head += ["ns/sample", "samples/s"] if per_item else []
    head += ["output error"] if errors else []
    head += ["peak/P", "t/(P w+r)"] if out else []
    head += [f"x vs {ref}" for ref in references]
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append([r["case"], r["provider"], f"error: {r['error']}"])
            continue
        line = [
            r["case"],
            r["provider"],
            _num(r["median_ms"]),
            _num(r["p20_ms"]),
            _num(r["p80_ms"]),
            f"{r['runs']}x{r['calls_per_run']}",
            _num(r["peak_mib"]) if gpu else "-",
        ]
        if per_item:
            has = "ns_per_item" in r
            line += [_num(r["ns_per_item"]), f"{r['items_per_s']:.3g}"] if has else ["-", "-"]
        if errors:
            line += [_num(r["output_error"]) if "output_error" in r else "-"]
        if out:
            has = "peak_vs_out" in r
            line += [f"{r['peak_vs_out']:.2f}", f"{r['time_vs_out_traffic']:.2f}"] if has else ["-", "-"]
        line += [_num(r["speedup"][ref]) if ref in r["speedup"] else "-" for ref in references]
        lines.append(line)
    widths = [max(len(line[i]) for line in lines if len(line) > 3) for i in range(len(head))]
    for line in lines:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip())


def goals(cases, rows, references) -> list[dict]:
    found = []
    for case in cases:
        if case.goal is None:
            continue
        ref, factor = case.goal
        ours = [
            (r["speedup"][ref], r["provider"])
            for r in rows
            if r["case"] == case.name and r["provider"] not in references and ref in r.get("speedup", {})
        ]
        best = max(ours, default=None)
        found.append(
            {
                "case": case.name,
                "reference": ref,
                "goal": factor,
                "provider": best and best[1],
                "speedup": best and best[0],
                "met": bool(best and best[0] >= factor),
            }
        )
    return found


def print_goals(found) -> None:
    for g in found:
        verdict = (
            "not measured"
            if g["speedup"] is None
            else f"{g['provider']} is {g['speedup']:.1f}x faster: " + ("met" if g["met"] else "NOT met")
        )
        print(f"goal {g['case']}: >= {g['goal']:g}x faster than {g['reference']}; {verdict}")


def print_contention_table(rows) -> None:
    """Under --contention: each job's 1-thread and T-thread medians (p20-p80) and their ratio."""
    lines = [["case", "provider", "1 thread ms", "T threads ms", "T", "T / 1", "<= 1.5"]]
    for r in rows:
        if "error" in r:
            lines.append([r["case"], r["provider"], f"error: {r['error']}"])
            continue
        lines.append(
            [
                r["case"],
                r["provider"],
                f"{_num(r['t1_median_ms'])} [{_num(r['t1_p20_ms'])}, {_num(r['t1_p80_ms'])}]",
                f"{_num(r['tn_median_ms'])} [{_num(r['tn_p20_ms'])}, {_num(r['tn_p80_ms'])}]",
                str(r["threads"]),
                f"{r['ratio']:.2f}",
                "yes" if r["ratio"] <= 1.5 else "NO",
            ]
        )
    widths = [max(len(line[i]) for line in lines if len(line) > 3) for i in range(len(lines[0]))]
    for line in lines:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip())


def _header(doc: dict) -> str:
    threads = doc.get("threads") or {}
    load = doc.get("contention")
    return (
        f"{doc.get('device_name', '?')} ({doc.get('device', '?')}), torch threads {threads.get('torch')}, "
        f"relaxops threads {threads.get('relaxops')}, commit {(doc.get('commit') or '?')[:10]}"
        + (" (dirty)" if doc.get("dirty") else "")
        + (f", bandwidth {doc['bandwidth_gb_s']:.0f} GB/s" if "bandwidth_gb_s" in doc else "")
        + (f", load average {doc['loadavg'][0]:.1f}" if doc.get("loadavg") else "")
        + (f" (the highest of {doc['segments']} segments)" if doc.get("segments", 1) > 1 else "")
        + (f", {load['busy']} busy processes, 1 against {load['threads']} threads" if load else "")
        + (f", {_duration(doc['elapsed_s'])} in all" if "elapsed_s" in doc else "")
        + (f", peak memory {doc['peak_rss_mib'] / 1024:.1f} GiB" if "peak_rss_mib" in doc else "")
    )


def report(doc: dict, references) -> None:
    print(f"\n{_header(doc)}")
    if doc.get("contention"):
        print_contention_table(doc["rows"])
    else:
        print_table(doc["rows"], references)
    if "bandwidth_gb_s" in doc:
        print(
            "peak/P: peak memory over the size of P; "
            "t/(P w+r): time over that of writing and reading P once at the measured bandwidth"
        )
    for s in doc["skipped"]:
        print(f"skipped {s['provider']} on {len(s['cases'])} case(s): {s['reason']}")
    print_goals(doc["goals"])


# ---- compare --------------------------------------------------------------------------------------------


def compare(path_a: str, path_b: str) -> None:
    docs = [load_results(p, "--compare") for p in (path_a, path_b)]
    timed = [{(r["case"], r["provider"]): r["median_ms"] for r in d["rows"] if "median_ms" in r} for d in docs]
    for name, path, doc in zip("AB", (path_a, path_b), docs):
        print(
            f"{name}: {path}: {doc.get('device_name', '?')} ({doc.get('device', '?')}), commit "
            f"{(doc.get('commit') or '?')[:10]}{' (dirty)' if doc.get('dirty') else ''}, "
            f"{doc.get('date', 'no date')}"
        )
    common = sorted(timed[0].keys() & timed[1].keys())
    lines = [["case", "provider", "A ms", "B ms", "B vs A"]]
    ratios: dict[str, list[float]] = {}
    for key in common:
        a, b = timed[0][key], timed[1][key]
        ratios.setdefault(key[1], []).append(a / b)
        lines.append([*key, _num(a), _num(b), f"{a / b:.2f}x"])
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    for line in lines:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip())
    print("B vs A: A's median over B's (> 1: B is faster)")
    if ratios:
        means = [
            f"{p} {math.exp(sum(map(math.log, v)) / len(v)):.2f}x ({len(v)} row{'s' * (len(v) > 1)})"
            for p, v in ratios.items()
        ]
        print("geometric mean per provider: " + ", ".join(means))
    for name, mine, other in (("A", timed[0], timed[1]), ("B", timed[1], timed[0])):
        only = sorted(mine.keys() - other.keys())
        if only:
            shown = "; ".join(f"{c} | {p}" for c, p in only[:10]) + (
                f"; and {len(only) - 10} more" if len(only) > 10 else ""
            )
            print(f"only in {name} ({len(only)}): {shown}")


# ---- plots ----------------------------------------------------------------------------------------------


def _is_size(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def plot(doc: dict, stem: str) -> list[str]:
    """Time against size per op: rows grouped by (family, op, mode, every param but the sweep); a group with two
    sizes or more is a line plot with one line per provider, the other rows go into a bar chart per family.
    Returns the paths written. ``stem``: the path of the PNG files without ``-<group>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    groups: dict[tuple, list[dict]] = {}
    tradeoffs: dict[tuple, list[dict]] = {}
    for r in doc["rows"]:
        if "median_ms" in r and "output_error" in r:
            fixed = {k: v for k, v in r["params"].items() if k != "tau"}
            tradeoffs.setdefault((r["family"], r["op"], r["mode"], json.dumps(fixed)), []).append(r)
        elif "median_ms" in r:
            sweep = r.get("sweep")
            fixed = {k: v for k, v in r["params"].items() if k != sweep}
            groups.setdefault((r["family"], r["op"], r["mode"], sweep, json.dumps(fixed)), []).append(r)
    device, written, bars = doc.get("device_name", "?"), [], []
    for (family, op, mode, sweep, fixed), members in groups.items():
        sizes = {r["params"].get(sweep) for r in members}
        if sweep is None or len(sizes) < 2 or not all(_is_size(s) for s in sizes):
            bars += members
            continue
        fixed = json.loads(fixed)
        fig, ax = plt.subplots(figsize=(6, 4))
        for provider in dict.fromkeys(r["provider"] for r in members):
            mine = sorted((r for r in members if r["provider"] == provider), key=lambda r: r["params"][sweep])
            xs = [r["params"][sweep] for r in mine]
            (line,) = ax.plot(xs, [r["median_ms"] for r in mine], marker="o", label=provider)
            ax.fill_between(
                xs, [r["p20_ms"] for r in mine], [r["p80_ms"] for r in mine], color=line.get_color(), alpha=0.2
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sorted(sizes))
        ax.set_xticklabels([str(s) for s in sorted(sizes)])
        ax.minorticks_off()
        ax.set_xlabel(sweep)
        ax.set_ylabel("median ms per call (band: p20-p80)")
        title = ", ".join([f"{family}.{op} {mode}"] + [f"{k}={v}" for k, v in fixed.items()])
        ax.set_title("\n".join(textwrap.wrap(title, 70) + [device]), fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        name = re.sub(r"[^A-Za-z0-9=.+_-]+", "_", "-".join([family, op, mode] + [f"{k}={v}" for k, v in fixed.items()]))
        written.append(f"{stem}-{name}.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    for (family, op, mode, fixed), members in tradeoffs.items():
        # error against time: one marker per provider and temperature (the point labels)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for provider in dict.fromkeys(r["provider"] for r in members):
            mine = sorted((r for r in members if r["provider"] == provider), key=lambda r: r["params"].get("tau", 0))
            (line,) = ax.plot(
                [r["median_ms"] for r in mine], [r["output_error"] for r in mine], marker="o", label=provider
            )
            for r in mine:
                if "tau" in r["params"]:
                    ax.annotate(
                        f"{r['params']['tau']:g}",
                        (r["median_ms"], r["output_error"]),
                        fontsize=6,
                        color=line.get_color(),
                        xytext=(3, 3),
                        textcoords="offset points",
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("median ms per call")
        ax.set_ylabel("output error (point labels: tau)")
        title = ", ".join([f"{family}.{op} {mode}"] + [f"{k}={v}" for k, v in json.loads(fixed).items()])
        ax.set_title("\n".join(textwrap.wrap(title, 70) + [device]), fontsize=9)
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=7)
        ax.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        name = re.sub(
            r"[^A-Za-z0-9=.+_-]+",
            "_",
            "-".join([family, op, mode] + [f"{k}={v}" for k, v in json.loads(fixed).items()]),
        )
        written.append(f"{stem}-{name}.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    for family in dict.fromkeys(r["family"] for r in bars):
        timed = [r for r in bars if r["family"] == family]
        cases = list(dict.fromkeys(r["case"] for r in timed))
        providers = list(dict.fromkeys(r["provider"] for r in timed))
        h = 0.8 / len(providers)
        fig, ax = plt.subplots(figsize=(8, 1.5 + 0.4 * len(cases) * len(providers) ** 0.5))
        for k, prov in enumerate(providers):
            mine = [r for r in timed if r["provider"] == prov]
            err = [[r["median_ms"] - r["p20_ms"] for r in mine], [r["p80_ms"] - r["median_ms"] for r in mine]]
            ax.barh(
                [cases.index(r["case"]) + k * h for r in mine],
                [r["median_ms"] for r in mine],
                height=h,
                xerr=err,
                label=prov,
            )
        ax.set_yticks([i + h * (len(providers) - 1) / 2 for i in range(len(cases))])
        ax.set_yticklabels(cases, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("median ms per call (bars: p20-p80)")
        ax.set_title(f"{family}, {device}", fontsize=9)
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
        fig.tight_layout()
        written.append(f"{stem}-{family}.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written


def plot_files(docs_and_paths, plot_dir: str | None, option: str) -> bool:
    """Plot each (doc, results path) beside it or into ``plot_dir``; False (with a message) without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{option}: matplotlib is not installed (pip install matplotlib); no plots drawn", file=sys.stderr)
        return False
    for doc, path in docs_and_paths:
        stem = os.path.splitext(path)[0]
        if plot_dir:
            os.makedirs(plot_dir, exist_ok=True)
            stem = os.path.join(plot_dir, os.path.basename(stem))
        for written in plot(doc, stem):
            print(f"wrote {written}")
    return True


# ---- progress -------------------------------------------------------------------------------------------


class Progress:
    """A progress bar with an ETA on stderr (tqdm when installed and stderr is a terminal), else a line per job
    with the elapsed time and an ETA from the jobs done so far. ``row(line)`` prints a measured row to stdout."""

    def __init__(self, total: int):
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, unit="job", file=sys.stderr, dynamic_ncols=True)

    def begin(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(name, refresh=True)
            return
        elapsed = time.monotonic() - self.start
        eta = f", about {_duration(elapsed / self.done * (self.total - self.done))} left" if self.done else ""
        print(f"[{self.done + 1}/{self.total}] {_duration(elapsed)} elapsed{eta}: {name}", file=sys.stderr, flush=True)

    def row(self, line: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
            self.bar.update(1)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---- main -----------------------------------------------------------------------------------------------


def _references(rows) -> list[str]:
    """The reference providers among the rows, in registry order."""
    names = {r["provider"] for r in rows}
    return list(
        dict.fromkeys(p.name for ps in registry.PROVIDERS.values() for p in ps if p.reference and p.name in names)
    )


def _list(args, jobs, skipped) -> None:
    which = "the contention set" if args.contention is not None else "every case" if args.full else "the default cases"
    print(
        f"{len(jobs)} job(s): {which} of {args.family or 'every family'} on {args.device}"
        + (f" matching {args.filter!r}" if args.filter else "")
        + (f" except {args.exclude!r}" if args.exclude else "")
    )
    width = max((len(p.name) for _, p in jobs), default=0)
    for case, provider in jobs:
        print(f"  {provider.name.ljust(width)}  {case.name}")
    for (provider, reason), names in skipped.items():
        print(f"skipped {provider} on {len(names)} case(s): {reason}")
        for name in names:
            print(f"  {name}")


def _run(args, prog: str, results_root: str) -> int:
    doc, done = None, set()
    if args.resume:
        doc = load_results(args.resume, "--resume")
        for key, value in doc.get("args", {}).items():
            if key in SELECTION and getattr(args, key) is None:
                setattr(args, key, value)
    for key, value in SELECTION.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.contention is not None:
        if args.device == "cuda" or args.full:
            raise UsageError("--contention: times the CPU kernels' contention set (not with --device cuda or --full)")
        args.device = "cpu"
        args.threads = args.threads or torch.get_num_threads()
        if args.budget == DEFAULT_BUDGET:
            args.budget = CONTENTION_BUDGET
    elif args.threads is not None:
        raise UsageError("--threads: only with --contention")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device == "cuda" and not torch.cuda.is_available() and not args.list:
        raise UsageError("--device cuda: no CUDA device is available")
    if args.out and args.resume:
        raise UsageError("--out: not with --resume (the new rows go to the resumed file)")
    if args.plot_dir and not args.plot:
        raise UsageError("--plot-dir: only with --plot or --plot-from")
    if doc is not None:
        if doc.get("device", args.device) != args.device:
            raise UsageError(f"--resume {args.resume}: measured on {doc['device']}, not --device {args.device}")
        if not args.list and doc.get("device_name") != device_name(args.device):
            raise UsageError(
                f"--resume {args.resume}: measured on {doc.get('device_name')!r}, this is {device_name(args.device)!r}"
            )
        done = {(r["case"], r["provider"]) for r in doc["rows"] if "error" not in r}
    jobs, skipped = select(args, done)
    if args.list:
        _list(args, jobs, skipped)
        return 0

    info = machine_info(args.device)
    if doc is None:
        if args.device == "cuda":
            info["bandwidth_gb_s"] = bandwidth(args.budget) / 1e9
        path = _new_path(args.out or os.path.join(results_root, _slug(info["device_name"])))
        doc = {**info, "rows": [], "skipped": []}
        if args.contention is not None:
            doc["contention"] = {"busy": args.contention, "threads": args.threads}
    else:
        path = args.resume
        # a resumed run adds its time, keeps the highest load average and the highest peak memory of its segments
        doc["segments"] = doc.get("segments", 1) + 1
        if info.get("loadavg") and (not doc.get("loadavg") or info["loadavg"][0] > doc["loadavg"][0]):
            doc["loadavg"] = info["loadavg"]
        if (doc.get("commit"), doc.get("dirty")) != (info["commit"], info["dirty"]):
            print(
                f"note: {path} was measured at commit {(doc.get('commit') or '?')[:10]}"
                f"{' (dirty)' if doc.get('dirty') else ''}; this is {(info['commit'] or '?')[:10]}"
                f"{' (dirty)' if info['dirty'] else ''}"
            )
        for family in {r.get("family") for r in doc["rows"]} & set(FAMILIES):
            importlib.import_module(f"relaxops.bench.{family}")
    doc["args"] = {k: getattr(args, k) for k in SELECTION}
    doc["skipped"] = _merge_skipped(doc.get("skipped", []), skipped, done | {(c.name, p.name) for c, p in jobs})
    # the goals of the cases that have a job, a skip or a row
    named = (
        {c.name for c, _ in jobs} | {n for names in skipped.values() for n in names} | {r["case"] for r in doc["rows"]}
    )
    cases = [c for c in registry.CASES if c.name in named and c.device == args.device]
    references = _references(doc["rows"] + [{"provider": p.name} for _, p in jobs])

    elapsed_before, segment_start = doc.get("elapsed_s", 0.0), time.monotonic()

    def update(complete: bool) -> None:
        doc["elapsed_s"] = elapsed_before + time.monotonic() - segment_start
        # this process's peak resident memory (Linux: KiB; macOS: bytes)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
        doc["peak_rss_mib"] = max(doc.get("peak_rss_mib", 0.0), rss)
        add_speedups(doc["rows"], references)
        doc["goals"] = [] if doc.get("contention") else goals(cases, doc["rows"], references)
        doc["complete"] = complete
        save(doc, path)

    print(f"{len(jobs)} job(s) on {info['device_name']} ({args.device}); rows go to {path}", flush=True)
    update(False)
    progress = Progress(len(jobs))
    interrupted = False
    gc.freeze()  # the collection after each job then skips the objects of the imports (0.1-0.2 s a job)
    load = contextlib.nullcontext()
    if args.contention is not None:
        from .contention import Load

        load = Load(args.contention)
    try:
        with load:
            for case, provider in jobs:
                progress.begin(f"{case.name} | {provider.name}")
                row = {
                    "case": case.name,
                    "family": case.family,
                    "op": case.op,
                    "mode": case.mode,
                    "params": case.params,
                    "sweep": case.sweep,
                    "provider": provider.name,
                }
                try:
                    row.update(
                        run_job(
                            case, provider, args.budget, args.repeat, doc.get("bandwidth_gb_s", 0) * 1e9, args.threads
                        )
                    )
                except Exception as e:  # one failing provider must not stop the run
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
                doc["rows"] = [r for r in doc["rows"] if (r["case"], r["provider"]) != (case.name, provider.name)]
                doc["rows"].append(row)
                update(False)
                progress.row(row_line(row))
                gc.collect()
                _trim_heap()
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        gc.unfreeze()
        progress.close()
    update(not interrupted)
    report(doc, references)
    print(f"wrote {path}")
    if args.plot:
        plot_files([(doc, path)], args.plot_dir, "--plot")
    if interrupted:
        print(
            f"interrupted after {progress.done} of {len(jobs)} job(s); resume with: {prog} --resume {shlex.quote(path)}"
        )
        return 130
    return 0


def main(argv=None, results_root: str | None = None, prog: str = "python -m relaxops bench") -> int:
    """Run the harness on ``argv`` (default ``sys.argv[1:]``) and return the exit status. ``results_root``:
    where ``<device>/<date>-<time>.json`` goes without ``--out`` (default ``./bench-results``)."""
    shown = os.path.relpath(results_root) if results_root else "./bench-results"
    parser = build_parser(prog, results_root if shown.startswith("..") else shown)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a bad argument (argparse printed the message)
        return e.code or 0
    try:
        if args.compare:
            compare(*args.compare)
            return 0
        if args.plot_from:
            docs = [(load_results(path, "--plot-from"), path) for path in args.plot_from]
            return 0 if plot_files(docs, args.plot_dir, "--plot-from") else 1
        return _run(args, prog, results_root or os.path.join(os.getcwd(), "bench-results"))
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
