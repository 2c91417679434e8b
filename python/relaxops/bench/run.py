"""The benchmark harness: times the cases of relaxops/bench/<family>.py for every provider that can run them.

    python -m relaxops bench [--family F] [--device cpu|cuda] [--quick] [--filter SUBSTR] [--repeat N]
                        [--budget S] [--plot] [--out DIR]

Each (case, provider) is warmed up, then timed in runs of back-to-back calls until about ``--budget``
seconds have passed (at least one run: a provider slower than the budget is timed once) or in ``--repeat``
runs. CPU timing uses ``torch.utils.benchmark.Timer.blocked_autorange`` with the process' thread count,
GPU timing CUDA events (runs of at least 10 ms). The table gives the median and the 20th/80th percentiles
of the per-call time over the runs, peak memory (GPU), and the speed-up against each reference provider
timed in the same run; a JSON file with the machine, commit and versions goes to
``bench/results/<device>/<timestamp>.json`` (or ``--out``), and ``--plot`` draws a PNG per family beside it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time

import torch
from torch.utils import benchmark

from . import registry

FAMILIES = ("sortnet", "topk", "logic", "render")

MIN_RUN_S = 0.01  # GPU: calls per timed run are chosen so that a run lasts at least this long
BANDWIDTH_BYTES = 1 << 30  # the device-to-device copy that measures the memory bandwidth


def parse_args(argv=None):
    families = list(FAMILIES)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=families, help="one family (default: all)")
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p.add_argument("--device", choices=["cpu", "cuda"], default=default_device)
    p.add_argument("--quick", action="store_true", help="only the headline cases, shorter budget")
    p.add_argument("--filter", default="", help="only (case, provider) pairs whose names contain SUBSTR")
    p.add_argument("--repeat", type=int, help="exactly N timed runs per measurement")
    p.add_argument("--budget", type=float, help="seconds of timing per measurement (default 0.5, quick 0.2)")
    p.add_argument("--plot", action="store_true", help="draw PNG plots (needs matplotlib)")
    p.add_argument("--out", help="directory for the JSON file (default bench/results/<device>)")
    args = p.parse_args(argv)
    if args.budget is None:
        args.budget = 0.2 if args.quick else 0.5
    return args, families


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


def _git(*args) -> str | None:
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

    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "device": device,
        "device_name": device_name(device),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": None if status is None else bool(status),
        "versions": {"python": platform.python_version(),
                     **{p: _version(p) for p in ("torch", "relaxops", "diffsort", "triton")}},
        "threads": {"torch": torch.get_num_threads(),
                    "relaxops": _ext._C.num_threads() if _ext.has_cpu() else None},
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


# ---- timing ---------------------------------------------------------------------------------------------


def _times_cpu(fn, budget: float, repeat: int | None):
    """Per-call seconds of each run, and calls per run. blocked_autorange warms up while it sizes its runs
    (so a call slower than the budget runs twice: once to warm up, once timed)."""
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    if repeat:
        runs = [timer.blocked_autorange(min_run_time=0) for _ in range(repeat)]
        return [t for m in runs for t in m.times], runs[-1].number_per_run
    m = timer.blocked_autorange(min_run_time=budget)
    return m.times, m.number_per_run


def _times_cuda(fn, budget: float, repeat: int | None):
    """As _times_cpu, with CUDA events, after a warm-up call (compilation) and a call to size the runs."""
    def timer(k):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(k):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / k

    first = timer(1)
    per_call = timer(1) if first < budget else first
    calls = max(1, int(MIN_RUN_S / per_call))
    runs = repeat or max(1, int(budget / (calls * per_call)))
    return [timer(calls) for _ in range(runs)], calls


def measure(fn, device: str, budget: float, repeat: int | None) -> dict:
    times, calls = (_times_cuda if device == "cuda" else _times_cpu)(fn, budget, repeat)
    q = torch.tensor(times, dtype=torch.float64).quantile(torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
    ms = q.mul(1e3).tolist()
    return {"median_ms": ms[0], "p20_ms": ms[1], "p80_ms": ms[2], "runs": len(times), "calls_per_run": calls}


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


def run_job(case, provider, budget, repeat, bw) -> dict:
    fn = registry.closure(case.mode, *provider.make(case))
    row = measure(fn, case.device, budget, repeat)
    if case.device == "cuda":
        row["peak_mib"] = peak_memory(fn) / 2**20
        if case.out_bytes:
            row["peak_vs_out"] = row["peak_mib"] * 2**20 / case.out_bytes
            row["time_vs_out_traffic"] = row["median_ms"] / 1e3 / (2 * case.out_bytes / bw)
    return row


# ---- report ---------------------------------------------------------------------------------------------


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def add_speedups(rows, references) -> None:
    by_case: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["provider"] in references and "median_ms" in r:
            by_case.setdefault(r["case"], {})[r["provider"]] = r["median_ms"]
    for r in rows:
        if "median_ms" in r:
            r["speedup"] = {ref: t / r["median_ms"] for ref, t in by_case.get(r["case"], {}).items()
                            if ref != r["provider"]}


def print_table(rows, references) -> None:
    gpu = any("peak_mib" in r for r in rows)
    out = any("peak_vs_out" in r for r in rows)
    per_item = any("ns_per_item" in r for r in rows)
    head = ["case", "provider", "median ms", "p20", "p80", "runs", "peak MiB"]
    head += ["ns/sample", "samples/s"] if per_item else []
    head += ["peak/P", "t/(P w+r)"] if out else []
    head += [f"x vs {ref}" for ref in references]
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append([r["case"], r["provider"], f"error: {r['error']}"])
            continue
        line = [r["case"], r["provider"], _num(r["median_ms"]), _num(r["p20_ms"]), _num(r["p80_ms"]),
                f"{r['runs']}x{r['calls_per_run']}", _num(r["peak_mib"]) if gpu else "-"]
        if per_item:
            has = "ns_per_item" in r
            line += [_num(r["ns_per_item"]), f"{r['items_per_s']:.3g}"] if has else ["-", "-"]
        if out:
            has = "peak_vs_out" in r
            line += [f"{r['peak_vs_out']:.2f}", f"{r['time_vs_out_traffic']:.2f}"] if has else ["-", "-"]
        line += [_num(r["speedup"][ref]) if ref in r["speedup"] else "-" for ref in references]
        lines.append(line)
    widths = [max(len(line[i]) for line in lines if len(line) > 3) for i in range(len(head))]
    for line in lines:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip())


def check_goals(cases, rows, references) -> list[dict]:
    goals = []
    for case in cases:
        if case.goal is None:
            continue
        ref, factor = case.goal
        ours = [(r["speedup"][ref], r["provider"]) for r in rows
                if r["case"] == case.name and r["provider"] not in references and ref in r.get("speedup", {})]
        best = max(ours, default=None)
        goals.append({"case": case.name, "reference": ref, "goal": factor, "provider": best and best[1],
                      "speedup": best and best[0], "met": bool(best and best[0] >= factor)})
        verdict = "not measured" if best is None else f"{best[1]} is {best[0]:.1f}x faster: " + (
            "met" if best[0] >= factor else "NOT met")
        print(f"goal {case.name}: >= {factor:g}x faster than {ref}; {verdict}")
    return goals


def plot(rows, stem: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no plots drawn")
        return
    for family in sorted({r["family"] for r in rows}):
        timed = [r for r in rows if r["family"] == family and "median_ms" in r]
        cases = list(dict.fromkeys(r["case"] for r in timed))
        providers = list(dict.fromkeys(r["provider"] for r in timed))
        if not timed:
            continue
        h = 0.8 / len(providers)
        fig, ax = plt.subplots(figsize=(10, 1.5 + 0.4 * len(cases) * len(providers) ** 0.5))
        for k, prov in enumerate(providers):
            mine = [r for r in timed if r["provider"] == prov]
            err = [[r["median_ms"] - r["p20_ms"] for r in mine], [r["p80_ms"] - r["median_ms"] for r in mine]]
            ax.barh([cases.index(r["case"]) + k * h for r in mine], [r["median_ms"] for r in mine], height=h,
                    xerr=err, label=prov)
        ax.set_yticks([i + h * (len(providers) - 1) / 2 for i in range(len(cases))])
        ax.set_yticklabels(cases)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("median ms per call (bars: p20-p80)")
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
        fig.tight_layout()
        path = f"{stem}-{family}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(f"wrote {path}")


# ---- main -----------------------------------------------------------------------------------------------


def _progress(jobs):
    try:
        from tqdm import tqdm
    except ImportError:
        for i, job in enumerate(jobs, 1):
            print(f"[{i}/{len(jobs)}] {job[0].name} {job[1].name}", file=sys.stderr, flush=True)
            yield job
        return
    bar = tqdm(jobs, unit="job", leave=False)
    for job in bar:
        bar.set_postfix_str(f"{job[0].name} {job[1].name}")
        yield job


def main(argv=None, results_root: str | None = None) -> int:
    """``results_root``: where ``<device>/<timestamp>.json`` goes without ``--out`` (default ``./bench-results``)."""
    args, families = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is available")
    for family in [args.family] if args.family else families:
        importlib.import_module(f"relaxops.bench.{family}")
    cases = [c for c in registry.CASES
             if (args.family in (None, c.family)) and c.device == args.device and (c.default or not args.quick)]
    jobs, skipped = [], {}
    for case in cases:
        for provider in registry.PROVIDERS.get(case.family, []):
            if args.filter not in f"{case.name} {provider.name}":
                continue
            reason = provider.skip(case)
            if reason is None:
                jobs.append((case, provider))
            else:
                skipped.setdefault((provider.name, reason), []).append(case.name)
    references = list(dict.fromkeys(p.name for _, p in jobs if p.reference))

    info = machine_info(args.device)
    if args.device == "cuda":
        info["bandwidth_gb_s"] = bandwidth(args.budget) / 1e9
    rows = []
    for case, provider in _progress(jobs):
        row = {"case": case.name, "family": case.family, "op": case.op, "mode": case.mode,
               "params": case.params, "provider": provider.name}
        try:
            row.update(run_job(case, provider, args.budget, args.repeat, info.get("bandwidth_gb_s", 0) * 1e9))
            if case.items:
                row["ns_per_item"] = row["median_ms"] * 1e6 / case.items
                row["items_per_s"] = case.items / (row["median_ms"] / 1e3)
        except Exception as e:  # one failing provider must not stop the run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        rows.append(row)
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()

    add_speedups(rows, references)
    threads = info["threads"]
    print(f"\n{info['device_name']} ({args.device}), torch threads {threads['torch']}, relaxops threads "
          f"{threads['relaxops']}, commit {(info['commit'] or '?')[:10]}{' (dirty)' if info['dirty'] else ''}"
          + (f", bandwidth {info['bandwidth_gb_s']:.0f} GB/s" if "bandwidth_gb_s" in info else "")
          + (f", load average {info['loadavg'][0]:.1f}" if info["loadavg"] else ""))
    print_table(rows, references)
    if "bandwidth_gb_s" in info:
        print("peak/P: peak memory over the size of P; "
              "t/(P w+r): time over that of writing and reading P once at the measured bandwidth")
    for (provider, reason), names in skipped.items():
        print(f"skipped {provider} on {len(names)} case(s): {reason}")
    goals = check_goals(cases, rows, references)

    slug = re.sub(r"[^a-z0-9]+", "-", info["device_name"].lower()).strip("-")
    out = args.out or os.path.join(results_root or os.path.join(os.getcwd(), "bench-results"), slug)
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, time.strftime("%Y%m%d-%H%M%S"))
    with open(stem + ".json", "w") as f:
        json.dump({**info, "args": vars(args), "goals": goals, "rows": rows,
                   "skipped": [{"provider": p, "reason": r, "cases": n} for (p, r), n in skipped.items()]},
                  f, indent=1)
    print(f"wrote {stem}.json")
    if args.plot:
        plot(rows, stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
