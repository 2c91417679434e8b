"""What every experiment shares: its results file, the summary table, seeds and progress bars.

A run writes ``<out>/<experiment>-<scale>.json`` after every finished unit of work (one configuration and seed), so
an interrupted run keeps what it finished: ``{"experiment", "scale", "config", "environment", "started",
"elapsed_s", "complete", "rows": [...], "summary": [...]}``. ``rows`` holds one dict per configuration and seed;
``summary`` the mean and standard deviation over seeds per configuration, beside the paper's number where there is
one.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from ..bench.run import device_name, git_output


def environment() -> dict:
    """Where the numbers come from: versions, CPU, threads, load."""
    from .. import __version__

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "relaxops": __version__,
        "commit": git_output("rev-parse", "--short", "HEAD"),  # of the current directory, as the benchmarks
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": device_name("cpu"),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": load,
    }


class Record:
    """The results of one run, saved as JSON after every row (written to a temporary file, then renamed)."""

    def __init__(self, experiment: str, scale: str, config: dict, out: str | os.PathLike):
        self.path = Path(out) / f"{experiment}-{scale}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        self.data = {
            "experiment": experiment,
            "scale": scale,
            "config": config,
            "environment": environment(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": 0.0,
            "complete": False,
            "rows": [],
            "summary": [],
        }
        self.save()

    @property
    def rows(self) -> list[dict]:
        return self.data["rows"]

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.save()

    def finish(self, summary: list[dict]) -> dict:
        self.data["summary"] = summary
        self.data["complete"] = True
        self.save()
        return self.data

    def save(self) -> None:
        self.data["elapsed_s"] = round(time.perf_counter() - self.start, 1)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    values = list(values)
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(rows: Iterable[dict], keys: Sequence[str], metrics: Sequence[str], paper=None) -> list[dict]:
    """One entry per distinct value of ``keys`` among ``rows``: the mean and std over its rows (seeds) of each
    metric, in first-seen order; ``paper(entry) -> dict or None`` adds the paper's numbers."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = []
    for key, group in groups.items():
        entry = dict(zip(keys, key))
        entry["seeds"] = len(group)
        for m in metrics:
            entry[m], entry[m + "_std"] = mean_std([r[m] for r in group])
        if paper is not None:
            entry["paper"] = paper(entry)
        out.append(entry)
    return out


def format_table(summary: list[dict], keys: Sequence[str], metrics: Sequence[str]) -> str:
    """The summary as an aligned text table: keys, then each metric (a fraction) as mean ± std in %, then the
    paper's numbers."""

    def cell(entry, m):
        return f"{100 * entry[m]:6.2f} ± {100 * entry[m + '_std']:5.2f}"

    header = [*keys, *metrics, "seeds", "paper"]
    lines = [
        [f"{e[k]:.4g}" if isinstance(e[k], float) else str(e[k]) for k in keys]
        + [cell(e, m) for m in metrics]
        + [str(e["seeds"]), _paper_text(e.get("paper"))]
        for e in summary
    ]
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*row) for row in [header, *lines])


def _paper_text(paper) -> str:
    if not paper:
        return "-"
    return ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in paper.items())


def step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimiser step on ``loss``."""
    opt.zero_grad()
    loss.backward()
    opt.step()


def progress(total: int, desc: str):
    """A tqdm bar (``RELAXOPS_PROGRESS=0`` or no tqdm: a silent stand-in with the same methods)."""
    if os.environ.get("RELAXOPS_PROGRESS", "1") != "0":
        try:
            from tqdm import tqdm

            return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)
        except ImportError:
            pass
    return _Silent()


class _Silent:
    def update(self, n=1):
        pass

    def set_postfix(self, **kwargs):
        pass

    def close(self):
        pass
