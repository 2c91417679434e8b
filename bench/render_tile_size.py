"""The CPU rasterizer's tile edge (``relaxops.render.ops.cpu_tile_size``, docs/math/render.md §9): fwd+bwd of
``rasterize`` and ``render_buffers`` on the benchmark's 5120-face icosphere (float32, one thread) with each tile
edge forced through ``ops.TILE_SIZE``, the edges interleaved call by call so that a shared machine's load moves
them alike; prints the median of N calls (default 11) per edge and the ratio first / last edge.

    PYTHONPATH=python python bench/render_tile_size.py [OP:SETTING:SIZE:B ...]

OP is ``buffers`` or ``rasterize``; SETTING ``hard`` (closed inside test, hard alpha, closest face) or ``soft``
(logistic tau 2e-3, probabilistic alpha, softmax over depth: the harness's settings); environment: TILES (default
4,8), N. Without cases: both ops and settings at 32^2 .. 256^2, B = 1 and 4.
"""

import itertools
import os
import statistics
import sys
import time

import torch
from relaxops.bench.render import BUFFER_SETTINGS, DIST_EPS, SETTINGS, _face_normals, _screen_faces
from relaxops.render import ops, rasterize, render_buffers

RASTER_SETTINGS = {
    "hard": dict(dist_func="hard", dist_scale=0.0, dist_eps=1.0, aggr_alpha_func="hard", aggr_rgb_func="hard"),
    "soft": dict(dist_eps=DIST_EPS, **SETTINGS["logistic/probabilistic"]),
}


def _call(op: str, setting: str, size: int, B: int):
    """One fwd+bwd call of the case, with the harness's inputs and random cotangents."""
    fv = _screen_faces("ico5120", B).clone().requires_grad_()
    g = torch.randn(B, 8, size, size, generator=torch.Generator().manual_seed(0))
    if op == "buffers":
        normals = _face_normals("ico5120").expand(B, -1, -1, -1).contiguous().requires_grad_()
        cotangents = (g[:, :1], g[:, 1:4], g[:, 4:7], None if setting == "hard" else g[:, 7:])

        def call():
            b = render_buffers(
                fv, normals, image_size=size, perspective_correct=True, backend="cpu", **BUFFER_SETTINGS[setting]
            )
            pairs = [
                (o, c) for o, c in zip((b.depth, b.barycentrics, b.attributes, b.alpha), cotangents) if c is not None
            ]
            torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])

        return call
    tex = torch.ones(B, fv.shape[1], 1, 3, requires_grad=True)

    def call():
        image = rasterize(fv, tex, image_size=size, backend="cpu", **RASTER_SETTINGS[setting])
        torch.autograd.backward([image], [g[:, :4]])

    return call


def main(cases: list[str]) -> None:
    torch.set_num_threads(1)
    ops.NUM_THREADS = 1
    tiles = [int(t) for t in os.environ.get("TILES", "4,8").split(",")]
    n = int(os.environ.get("N", "11"))
    if not cases:
        grid = itertools.product(("buffers", "rasterize"), ("hard", "soft"), (32, 64, 128, 256), (1, 4))
        cases = [f"{op}:{setting}:{size}:{b}" for op, setting, size, b in grid]
    for case in cases:
        op, setting, size, B = case.split(":")
        call = _call(op, setting, int(size), int(B))
        times = {t: [] for t in tiles}
        for t in tiles:  # warm-up
            ops.TILE_SIZE = t
            call()
        for _ in range(n):
            for t in tiles:
                ops.TILE_SIZE = t
                start = time.perf_counter()
                call()
                times[t].append(time.perf_counter() - start)
        med = {t: statistics.median(v) * 1e3 for t, v in times.items()}
        cells = ", ".join(f"tile {t}: {m:.2f} ms" for t, m in med.items())
        ratio = med[tiles[0]] / med[tiles[-1]]
        print(
            f"{op} {setting} {size}^2 B={B}: {cells}, {tiles[0]}/{tiles[-1]} {ratio:.3f}, load {os.getloadavg()[0]:.1f}"
        )
    ops.TILE_SIZE = None


if __name__ == "__main__":
    main(sys.argv[1:])
