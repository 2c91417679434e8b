"""``python -m relaxops selftest``: verify the GPU kernels on this machine against the float64 reference.

Each (family, backend) pair runs in its own child interpreter (a faulting kernel cannot take the caller down)
on a fixed set of cases: small, odd and large shapes (``--full`` adds the benchmark sizes), float64 and float32,
outputs and gradients, compared with the PyTorch reference computed in float64 on the CPU. The outcome of each
pair is recorded in the cache of ``relaxops._backend`` (``~/.cache/relaxops/selftest.json``, directory
overridable with ``RELAXOPS_CACHE_DIR``) for this device name, driver and relaxops version; ``backend="auto"``
then picks the kernels that passed here, as it does those in ``_backend.VERIFIED_GPU``.

Tolerances (against the float64 reference, relative to the largest reference magnitude of each compared
tensor): float64 1e-9 (a few ulps times the network or layer depth; GPU code may contract to fused
multiply-adds), float32 2e-4 (eps 1.2e-7 times depths up to ~100 and the accumulation lengths of the cases,
on inputs with gaps of >= 0.05) or, where the problem itself is ill-conditioned in float32 (steep relaxations
through ~100 layers amplify rounding), at most twice the error of the reference run in float32 plus that
tolerance: the rule of the test suite (docs/math/sortnet.md §9.4). Packed logic counts must be equal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from . import _backend

TOLERANCE = {torch.float64: 1e-9, torch.float32: 2e-4}


class Failures(list):
    """The failures of one child, which runs shard ``index`` of ``count``: every ``count``-th case from
    ``index`` on (cases are numbered in the order the family runs them), so that the cases of a family can be
    split between parallel children (on a GPU each child compiles its own Triton kernels)."""

    def __init__(self, index: int = 0, count: int = 1):
        super().__init__()
        self.index, self.count, self._seen = index, count, -1

    def take(self, what: str) -> bool:
        """Whether this shard runs the next case, ``what``; a case it runs is announced on stderr first (a parent
        that stops a slow child names the case it was in)."""
        self._seen += 1
        taken = self._seen % self.count == self.index
        if taken:
            print(f"case: {what}", file=sys.stderr, flush=True)
        return taken


def _gapped(B: int, n: int, seed: int) -> torch.Tensor:
    """Rows of distinct values >= 0.05 apart (no near-ties), float64."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randperm(n, generator=g).double() * 0.1 + torch.rand(n, generator=g, dtype=torch.float64) * 0.05
    return torch.stack([base[torch.randperm(n, generator=g)] for _ in range(B)]) - 0.05 * n


def _compare(failures: list, what: str, got, want, low, dtype: torch.dtype) -> None:
    """``got`` (the kernel in ``dtype``) against ``want`` (the float64 reference); ``low``: the reference run in
    ``dtype`` (None for float64)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if got.shape != want.shape:
        failures.append(f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        return
    if want.numel() == 0:
        return
    allowed = TOLERANCE[dtype] * max(1.0, want.abs().max().item())
    if low is not None:
        allowed += 2 * (low.detach().double().cpu() - want).abs().max().item()
    err = (got - want).abs().max().item()
    if not err <= allowed:  # also catches NaN
        failures.append(f"{what}: max error {err:.3g} > {allowed:.3g}")


def _check_fn(failures, what, fn, inputs, backend, device, dtype):
    """Run ``fn(*inputs, backend)`` with ``backend`` on ``device`` in ``dtype``, and with the reference on the CPU
    in float64 (and in ``dtype``); compare the outputs and the gradients of ``sum(out * w)`` (fixed random w)."""
    if not failures.take(f"{what} {dtype}"):
        return
    cpu = torch.device("cpu")
    runs = [(backend, device, dtype), ("reference", cpu, torch.float64)]
    if dtype != torch.float64:
        runs.append(("reference", cpu, dtype))
    results = []
    for b, dev, dt in runs:
        xs = [x.to(dev, dt).requires_grad_(x.is_floating_point()) for x in inputs]
        outs = fn(*xs, b)
        outs = [o for o in (outs if isinstance(outs, (tuple, list)) else [outs]) if o is not None]
        g = torch.Generator().manual_seed(1)
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(dev, o.dtype)).sum() for o in outs)
        grads = (
            torch.autograd.grad(loss, [x for x in xs if x.requires_grad], allow_unused=True)
            if loss.requires_grad
            else []
        )
        results.append((outs, grads))
    (outs, grads), (ref_outs, ref_grads) = results[:2]
    low_outs, low_grads = results[2] if len(results) > 2 else ([None] * len(outs), [None] * len(grads))
    for i, (o, r, lo) in enumerate(zip(outs, ref_outs, low_outs)):
        _compare(failures, f"{what} {dtype} output {i}", o, r, lo, dtype)
    for i, (gr, r, lo) in enumerate(zip(grads, ref_grads, low_grads)):
        if gr is not None and r is not None:
            _compare(failures, f"{what} {dtype} gradient {i}", gr, r, lo, dtype)


def _sortnet(backend, device, full, failures):
    import relaxops

    shapes = [(1, 1), (3, 7), (2, 33), (4, 100)] + ([(128, 1024)] if full else [])
    if full:  # ranks of long rows: past the shared memory of a block (the kernels keep rows in global memory)
        x = _gapped(2, 20000, 1)
        for dtype in (torch.float64, torch.float32):
            _check_fn(
                failures, "rank [2, 20000]", lambda v, b: relaxops.rank(v, backend=b), [x], backend, device, dtype
            )
    for B, n in shapes:
        x = _gapped(B, n, n)
        for dtype in (torch.float64, torch.float32):
            for net, relax in (("bitonic", "cauchy"), ("odd_even", "logistic")):
                if n > 200 and net == "odd_even":
                    continue
                _check_fn(
                    failures,
                    f"sort {net}/{relax} [{B}, {n}]",
                    lambda v, b, net=net, relax=relax: relaxops.sort(v, net, relax, 10.0, backend=b),
                    [x],
                    backend,
                    device,
                    dtype,
                )
                _check_fn(
                    failures,
                    f"sort values {net}/{relax} [{B}, {n}]",
                    lambda v, b, net=net, relax=relax: relaxops.sort(
                        v, net, relax, 10.0, return_matrix=False, backend=b
                    )[0],
                    [x],
                    backend,
                    device,
                    dtype,
                )
            _check_fn(
                failures, f"rank [{B}, {n}]", lambda v, b: relaxops.rank(v, backend=b), [x], backend, device, dtype
            )
            # ranks without the matrix: another network and relaxation, descending
            _check_fn(
                failures,
                f"rank odd_even/logistic descending [{B}, {n}]",
                lambda v, b: relaxops.rank(v, "odd_even", "logistic", descending=True, backend=b),
                [x],
                backend,
                device,
                dtype,
            )
            k = min(5, n)
            _check_fn(
                failures,
                f"topk k={k} [{B}, {n}]",
                lambda v, b, k=k: relaxops.topk(v, k, backend=b),
                [x],
                backend,
                device,
                dtype,
            )
            # padded rows (a full row, an empty one, odd lengths; every row its own network) and a k per row: the
            # prefix networks and the per-length ones (splitter_selection, its reversed network in the top-k)
            L = torch.tensor([n, 0, n // 2 + 1, 1]).repeat((B + 3) // 4)[:B]
            ks = torch.clamp(torch.tensor([2, 1, 3, 1]).repeat((B + 3) // 4)[:B], max=n)
            _check_fn(
                failures,
                f"sort bitonic/cauchy lengths [{B}, {n}]",
                lambda v, b, L=L: relaxops.sort(v, "bitonic", "cauchy", 10.0, backend=b, lengths=L.to(v.device)),
                [x],
                backend,
                device,
                dtype,
            )
            _check_fn(
                failures,
                f"rank odd_even/logistic lengths [{B}, {n}]",
                lambda v, b, L=L: relaxops.rank(v, "odd_even", "logistic", backend=b, lengths=L.to(v.device)),
                [x],
                backend,
                device,
                dtype,
            )
            _check_fn(
                failures,
                f"topk splitter_selection k per row, lengths [{B}, {n}]",
                lambda v, b, L=L, ks=ks: relaxops.topk(v, ks.to(v.device), backend=b, lengths=L.to(v.device)),
                [x],
                backend,
                device,
                dtype,
            )


def _baselines(backend, device, full, failures):
    import relaxops

    for B, n in [(1, 1), (3, 7), (2, 33), (4, 100)] + ([(128, 1000)] if full else []):
        x = _gapped(B, n, n)
        for dtype in (torch.float64, torch.float32):
            for k in (None, min(3, n)):
                for op in ("neuralsort", "softsort"):
                    _check_fn(
                        failures,
                        f"{op} k={k} [{B}, {n}]",
                        lambda v, b, op=op, k=k: getattr(relaxops, op)(v, tau=0.5, k=k, backend=b),
                        [x],
                        backend,
                        device,
                        dtype,
                    )


def _logic(backend, device, full, failures):
    import relaxops

    for B, n_in, n_out in [(1, 1, 1), (7, 13, 9), (33, 64, 100)] + ([(100, 8000, 8000)] if full else []):
        torch.manual_seed(n_out)
        layer = relaxops.LogicLayer(n_in, n_out, dtype=torch.float64)
        x = torch.rand(B, n_in, dtype=torch.float64, generator=torch.Generator().manual_seed(B))
        w = layer.weights.detach()

        def fn(v, weights, b, layer=layer):
            return relaxops.logic.functional.logic_layer(
                v, layer.idx_a.to(v.device), layer.idx_b.to(v.device), weights, backend=b
            )

        for dtype in (torch.float64, torch.float32):
            _check_fn(failures, f"logic layer [{B}, {n_in}] -> {n_out}", fn, [x, w], backend, device, dtype)


# Parametrized configurations (docs/math/logic.md §10) run by the coefficient ops with an output activation:
# (parametrization, sampling, temperature, gates). Gumbel modes only for walsh: its noise is counter-based, so every
# device draws the same (the logits' noise of the other gumbel modes comes from the device's generator).
_LOGIC_CONFIGS = [
    ("softmax", "hard", 0.5, None),
    ("softmax", "soft", 0.7, ("and", "or", "xor", "not_a")),
    ("light", "soft", 1.0, None),
    ("light", "hard", 0.5, None),
    ("walsh", "soft", 1.0, None),
    ("walsh", "hard", 2.0, None),
    ("walsh", "gumbel_soft", 0.5, None),
    ("walsh", "gumbel_hard", 1.0, None),
]


def _logic_act(backend, device, full, failures):
    import relaxops

    for B, n_in, n_out in [(1, 1, 1), (7, 13, 9), (33, 64, 100)] + ([(100, 8000, 8000)] if full else []):
        for par, sampling, tau, gates in _LOGIC_CONFIGS:
            torch.manual_seed(n_out)
            layer = relaxops.LogicLayer(n_in, n_out, dtype=torch.float64, parametrization=par)
            x = torch.rand(B, n_in, dtype=torch.float64, generator=torch.Generator().manual_seed(B))

            def fn(v, weights, b, layer=layer, par=par, sampling=sampling, tau=tau, gates=gates):
                torch.manual_seed(0)  # the walsh noise seed
                return relaxops.logic.functional.logic_layer(
                    v, layer.idx_a.to(v.device), layer.idx_b.to(v.device), weights, backend=b, parametrization=par,
                    sampling=sampling, temperature=tau, gates=gates,
                )  # fmt: skip

            what = f"logic layer {par}/{sampling} tau={tau}{' gates' if gates else ''} [{B}, {n_in}] -> {n_out}"
            for dtype in (torch.float64, torch.float32):
                _check_fn(failures, what, fn, [x, layer.weights.detach()], backend, device, dtype)


def _logic_lut(backend, device, full, failures):
    from .logic.lut import logic_lut

    sizes = [(1, 2, 1, 2), (5, 11, 7, 3), (33, 64, 40, 6)] + ([(256, 4000, 4000, 4)] if full else [])
    for B, n_in, n_out, k in sizes:
        g = torch.Generator().manual_seed(n_out)
        idx = torch.randint(0, n_in, (k, n_out), generator=g)
        x = torch.rand(B, n_in, dtype=torch.float64, generator=g)
        q = torch.randn(n_out, 1 << k, dtype=torch.float64, generator=g)
        for act, seed in (("none", -1), ("sigmoid", 5), ("sigmoid_st", -1)):

            def fn(v, table, b, idx=idx, act=act, seed=seed):
                return logic_lut(v, idx.to(v.device), table, act, seed, 0.5, backend=b)

            for dtype in (torch.float64, torch.float32):
                what = f"logic lut [{B}, {n_in}] -> {n_out} k={k} {act} seed={seed}"
                _check_fn(failures, what, fn, [x, q], backend, device, dtype)


def _logic_conv(backend, device, full, failures):
    from .logic import LogicConv2d
    from .logic.functional import logic_conv2d

    # (C_in, C_out, H, W, kernel, stride, padding, depth, B): odd sizes, strides, padding, depths 1..5
    shapes = [
        (1, 1, 1, 1, 1, 1, 0, 1, 1),
        (3, 5, 7, 5, 3, 2, 1, 3, 3),
        (2, 4, 9, 8, 3, 1, 1, 2, 5),
        (4, 3, 6, 7, 2, 3, 0, 5, 2),
        (3, 2, 33, 17, 5, 1, 2, 4, 2),
    ]
    shapes += [(16, 64, 16, 16, 3, 1, 1, 3, 64), (8, 16, 12, 12, 3, 2, 1, 8, 4)] if full else []
    for C_in, C_out, H, W, k, s, p, d, B in shapes:
        layer = LogicConv2d(
            C_in, C_out, k, d, stride=s, padding=p, generator=torch.Generator().manual_seed(d), dtype=torch.float64
        )
        x = torch.rand(B, C_in, H, W, dtype=torch.float64, generator=torch.Generator().manual_seed(B))
        w = layer.weights.detach()
        for training in (True, False):

            def fn(v, weights, b, layer=layer, training=training):
                return logic_conv2d(
                    v,
                    layer.leaves.to(v.device),
                    weights,
                    layer.kernel_size,
                    layer.stride,
                    layer.padding,
                    training,
                    backend=b,
                )

            for dtype in (torch.float64, torch.float32):
                _check_fn(
                    failures,
                    f"logic conv [{B}, {C_in}, {H}, {W}] -> {C_out} k{k} s{s} p{p} d{d} "
                    f"{'train' if training else 'eval'}",
                    fn,
                    [x, w],
                    backend,
                    device,
                    dtype,
                )
        # the parametrized configurations (activation and noise at every node), on the shapes of depth <= 4
        for par, sampling, tau, gates in _LOGIC_CONFIGS if d <= 4 else []:
            torch.manual_seed(d)
            w = LogicConv2d(C_in, C_out, k, d, dtype=torch.float64, parametrization=par).weights.detach()

            def fn(v, weights, b, layer=layer, par=par, sampling=sampling, tau=tau, gates=gates):
                torch.manual_seed(0)
                return logic_conv2d(
                    v, layer.leaves.to(v.device), weights, layer.kernel_size, layer.stride, layer.padding, True,
                    backend=b, parametrization=par, sampling=sampling, temperature=tau, gates=gates,
                )  # fmt: skip

            for dtype in (torch.float64, torch.float32):
                what = f"logic conv {par}/{sampling} tau={tau} [{B}, {C_in}, {H}, {W}] -> {C_out} k{k} d{d}"
                _check_fn(failures, what, fn, [x, w], backend, device, dtype)


def _logic_packed(backend, device, full, failures):
    import relaxops

    for B, widths in [(1, (5, 3)), (65, (20, 40, 30)), (1000, (784, 800, 800))] + (
        [(65536, (784, 8000, 8000))] if full else []
    ):
        if not failures.take(f"packed logic widths {widths} B={B}"):
            continue
        torch.manual_seed(B)
        layers = [relaxops.LogicLayer(a, b) for a, b in zip(widths[:-1], widths[1:])]
        model = torch.nn.Sequential(*layers, relaxops.GroupSum(10 if widths[-1] % 10 == 0 else 1)).eval()
        x = torch.rand(B, widths[0], generator=torch.Generator().manual_seed(B)) < 0.5
        want = model(x.double()).round().long()
        got = relaxops.PackedLogicNet(model, device=device, backend=backend)(x.to(device)).long().cpu()
        if not torch.equal(got, want):
            failures.append(f"packed logic widths {widths} B={B}: {(got != want).sum().item()} counts differ")


def _render(backend, device, full, failures):
    from .render import icosphere, pack, rasterize

    v, f = icosphere(2 if not full else 4)
    # each face moved on its own by up to 1e-3: no two faces share a vertex, so no pixel sees an exact tie of the
    # max T-conorm (a tie's gradient may go to either face)
    g = torch.Generator().manual_seed(2)
    fv = (v[f] * 0.6).unsqueeze(0).double() + 1e-3 * torch.rand(1, f.shape[0], 3, 3, dtype=torch.float64, generator=g)
    fv[..., 2] += 3.0
    tex = torch.rand(1, f.shape[0], 1, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    settings = [
        dict(dist_func="uniform", aggr_alpha_func="probabilistic"),
        dict(dist_func="logistic", dist_scale=2e-3, aggr_alpha_func="yager", aggr_alpha_t_conorm_p=2.0),
        dict(dist_func="cauchy", dist_scale=1e-4, aggr_alpha_func="max", aggr_rgb_func="hard"),
    ]
    for size in (17, 64) + ((256,) if full else ()):
        for s in settings:
            for dtype in (torch.float64, torch.float32):
                _check_fn(
                    failures,
                    f"rasterize {s['dist_func']}/{s['aggr_alpha_func']} {size}px",
                    lambda a, t, b, s=s, size=size: rasterize(a, t, image_size=size, backend=b, **s),
                    [fv, tex],
                    backend,
                    device,
                    dtype,
                )
    # mixed meshes in one batch (docs/math/render.md "Mixed meshes in a batch"): part of the sphere (an odd face
    # count), an empty mesh and the whole sphere, packed; `average` divides by each mesh's own face count, hard RGB
    # records packed face indices
    F = f.shape[0]
    fv_p, offsets = pack([fv[0, : F // 4 + 1], fv[0, :0], fv[0]])
    tex_p, _ = pack([tex[0, : F // 4 + 1], tex[0, :0], tex[0]])
    for s in (dict(aggr_alpha_func="average"), dict(aggr_alpha_func="max", aggr_rgb_func="hard")):
        for dtype in (torch.float64, torch.float32):
            _check_fn(
                failures,
                f"rasterize packed {s['aggr_alpha_func']} 17px",
                lambda a, t, b, s=s: rasterize(
                    a,
                    t,
                    image_size=17,
                    dist_func="logistic",
                    dist_scale=2e-3,
                    backend=b,
                    mesh_offsets=offsets.to(a.device),
                    **s,
                ),
                [fv_p, tex_p],
                backend,
                device,
                dtype,
            )


def _render_buffers(backend, device, full, failures):
    from .render import icosphere, render_buffers

    v, f = icosphere(1 if not full else 3)  # the float64 reference on the CPU sets the pace
    g = torch.Generator().manual_seed(3)
    # faces moved apart by up to 1e-3 (no shared vertices, no exact depth ties); two meshes packed, 1 and 2 copies
    fv = (v[f] * 0.6).double() + 1e-3 * torch.rand(f.shape[0], 3, 3, dtype=torch.float64, generator=g)
    fv[..., 2] += 3.0
    fv = torch.cat([fv, fv[: f.shape[0] // 2] * 0.8 + 0.1])
    offsets = torch.tensor([0, f.shape[0], fv.shape[0]])
    attr = torch.randn(fv.shape[0], 3, 2, dtype=torch.float64, generator=g)
    uv = torch.rand(fv.shape[0], 3, 2, dtype=torch.float64, generator=g) * 1.5 - 0.25
    tex = torch.rand(2, 13, 10, 3, dtype=torch.float64, generator=g)
    settings = [
        dict(dist_func="uniform", aggr_func="softmax"),
        dict(
            dist_func="logistic", dist_scale=2e-3, aggr_func="softmax", perspective_correct=True, texture_wrap="clamp"
        ),
        dict(dist_func="cauchy", dist_scale=1e-4, aggr_func="hard", aggr_alpha_func="max", perspective_correct=True),
    ]
    for size in (17, 64) + ((256,) if full else ()):
        for s in settings:
            for dtype in (torch.float64, torch.float32):
                _check_fn(
                    failures,
                    f"render_buffers {s['dist_func']}/{s['aggr_func']} {size}px",
                    lambda a, c, u, t, b, s=s, size=size: render_buffers(
                        a, c, face_uvs=u, texture=t, mesh_offsets=offsets.to(a.device), image_size=size, backend=b, **s
                    )[:5],
                    [fv, attr, uv, tex],
                    backend,
                    device,
                    dtype,
                )


def _fastsort(backend, device, full, failures):
    import relaxops

    # the chunked PAV: n >= 128 in the CUDA kernels (fastsort.cu's kLongRow), n >= 1024 in Triton's (triton.LONG_ROW)
    for B, n in [(1, 1), (3, 7), (2, 33), (4, 100), (3, 300), (2, 1000), (2, 1024), (1, 3001)] + (
        [(128, 5000)] if full else []
    ):
        x = _gapped(B, n, n)
        for dtype in (torch.float64, torch.float32):
            for op in ("soft_rank", "soft_sort"):
                for reg, eps, desc in (("l2", 1.0, False), ("kl", 0.1, True), ("l2", 0.01, True)):
                    _check_fn(
                        failures,
                        f"{op} {reg} eps={eps} descending={desc} [{B}, {n}]",
                        lambda v, b, op=op, reg=reg, eps=eps, desc=desc: getattr(relaxops, op)(
                            v, reg, eps, desc, backend=b
                        ),
                        [x],
                        backend,
                        device,
                        dtype,
                    )


def _otsort(backend, device, full, failures):
    import relaxops

    for B, n in [(1, 1), (3, 7), (2, 33), (4, 100)] + ([(16, 1000)] if full else []):
        x = _gapped(B, n, n)
        k = min(3, n)
        for dtype in (torch.float64, torch.float32):
            for backward in ("implicit", "unrolled"):
                kw = dict(epsilon=0.05, tolerance=1e-9, backward=backward)
                _check_fn(
                    failures,
                    f"ot_rank/ot_sort {backward} [{B}, {n}]",
                    lambda v, b, kw=kw: (relaxops.ot_rank(v, backend=b, **kw), relaxops.ot_sort(v, backend=b, **kw)),
                    [x],
                    backend,
                    device,
                    dtype,
                )
                _check_fn(
                    failures,
                    f"ot_topk/ot_quantile {backward} [{B}, {n}]",
                    lambda v, b, kw=kw, k=k: (
                        *relaxops.ot_topk(v, k, backend=b, **kw),
                        relaxops.ot_quantile(v, [0.2, 0.7], backend=b, **kw),
                    ),
                    [x],
                    backend,
                    device,
                    dtype,
                )


def _edit_distance(backend, device, full, failures):
    from .algorithms.functional import edit_distance

    for B, n, m, K in [(1, 1, 1, 1), (3, 7, 5, 2), (2, 33, 40, 4), (4, 0, 3, 2)] + ([(16, 100, 90, 8)] if full else []):
        g = torch.Generator().manual_seed(n * 1000 + m)
        s = torch.softmax(torch.randn(B, n, K, generator=g, dtype=torch.float64) * 2, -1)
        t = torch.softmax(torch.randn(B, m, K, generator=g, dtype=torch.float64) * 2, -1)
        for dtype in (torch.float64, torch.float32):
            _check_fn(
                failures,
                f"edit_distance [{B}, {n}, {K}] x [{B}, {m}, {K}]",
                lambda a, c, b: edit_distance(a, c, 5.0, return_matrix=True, backend=b),
                [s, t],
                backend,
                device,
                dtype,
            )


def _bubble_sort(backend, device, full, failures):
    from .algorithms.functional import bubble_sort

    for B, n in [(1, 1), (3, 7), (4, 20), (2, 50)] + ([(64, 200)] if full else []):
        x = _gapped(B, n, n)
        for dtype in (torch.float64, torch.float32):
            for hard, epsilon in ((False, 1e-5), (False, 0.0), (True, 1e-5)):
                _check_fn(
                    failures,
                    f"bubble_sort hard={hard} epsilon={epsilon} [{B}, {n}]",
                    lambda v, b, hard=hard, epsilon=epsilon: tuple(
                        bubble_sort(v, 5.0, hard=hard, epsilon=epsilon, backend=b)
                    ),
                    [x],
                    backend,
                    device,
                    dtype,
                )


def _shortest_path(backend, device, full, failures):
    from .algorithms.functional import shortest_path

    g = torch.Generator().manual_seed(0)
    for B, H, W in [(1, 1, 1), (3, 3, 3), (2, 5, 7), (4, 12, 12), (2, 1, 9)] + (
        [(64, 20, 20), (2, 64, 48)] if full else []
    ):
        cost = torch.sigmoid(torch.randn(B, H, W, generator=g, dtype=torch.float64) * 4) + 0.2
        for dtype in (torch.float64, torch.float32):
            for loop, tc, p in (
                ("for", "probabilistic", None),
                ("while", "hamacher", 5.0),
                ("for", "yager_1", None),
                ("while", "yager_1", None),
            ):
                _check_fn(
                    failures,
                    f"shortest_path {loop}/{tc} [{B}, {H}, {W}]",
                    lambda c, b, loop=loop, tc=tc, p=p: shortest_path(
                        c, 10.0, loop=loop, t_conorm=tc, hamacher_p=p, backend=b
                    ),
                    [cost],
                    backend,
                    device,
                    dtype,
                )


def _assignment(backend, device, full, failures):
    """The kernel's matchings are permutations with the reference's objective (float64 sums) on every item; scores
    with ties (small integers) included, where the matchings may differ."""
    from .training.solvers import assignment

    g = torch.Generator().manual_seed(0)
    for B, d in [(1, 1), (3, 2), (5, 7), (4, 16), (2, 33), (0, 5), (3, 0)] + ([(256, 100), (8, 300)] if full else []):
        for kind in ("normal", "ties"):
            x = (
                torch.randn(B, d, d, generator=g, dtype=torch.float64)
                if kind == "normal"
                else torch.randint(0, 3, (B, d, d), generator=g).double()
            )
            for dtype in (torch.float64, torch.float32):
                if not failures.take(f"assignment {kind} [{B}, {d}, {d}] {dtype}"):
                    continue
                xd = x.to(dtype)
                try:
                    P = assignment(xd.to(device), backend=backend).cpu().double()
                except Exception as e:  # noqa: BLE001  (a failure to report, not to raise)
                    failures.append(f"assignment {kind} [{B}, {d}, {d}] {dtype}: {type(e).__name__}: {e}")
                    continue
                ok = bool(((P == 0) | (P == 1)).all()) and bool((P.sum(-1) == 1).all()) and bool((P.sum(-2) == 1).all())
                got = (P * xd.double()).sum((-2, -1))
                want_d = (assignment(xd, backend="reference").double() * xd.double()).sum((-2, -1))
                if not ok or not torch.allclose(got, want_d, rtol=1e-12, atol=1e-9):
                    failures.append(
                        f"assignment {kind} [{B}, {d}, {d}] {dtype}: not a maximum-weight permutation "
                        f"(objective error {(got - want_d).abs().max().item() if B * d else 0:.3g})"
                    )


FAMILIES = {
    "sortnet": _sortnet,
    "baselines": _baselines,
    "logic": _logic,
    "logic_act": _logic_act,
    "logic_conv": _logic_conv,
    "logic_lut": _logic_lut,
    "logic_packed": _logic_packed,
    "render": _render,
    "render_buffers": _render_buffers,
    "fastsort": _fastsort,
    "otsort": _otsort,
    "edit_distance": _edit_distance,
    "bubble_sort": _bubble_sort,
    "shortest_path": _shortest_path,
    "assignment": _assignment,
}


def check(family: str, backend: str, device: str, full: bool = False, shard: tuple[int, int] = (0, 1)) -> list[str]:
    """The failures of ``backend``'s kernels of ``family`` on ``device`` (in this process); [] if all agree.
    ``shard`` (index, count): only that share of the cases (see ``Failures``)."""
    failures = Failures(*shard)
    FAMILIES[family](backend, torch.device(device), full, failures)
    return list(failures)


def _child_command(family: str, backend: str, device: str, full: bool, shard: tuple[int, int]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "relaxops",
        "selftest",
        "--child",
        family,
        backend,
        device,
        "--shard",
        f"{shard[0]}/{shard[1]}",
    ] + (["--full"] if full else [])


def _run_child(command: list[str], timeout: float, threads: int) -> str:
    """Run one child on ``threads`` CPU threads; its failures joined ("" when it passed), or why it did not
    finish (a child stopped at its timeout names the case it was in and how many it had finished)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        cases = [line[len("case: ") :] for line in err.splitlines() if line.startswith("case: ")]
        where = f" in {cases[-1]} ({len(cases) - 1} case(s) of this shard finished)" if cases else ""
        return f"timed out after {timeout:.0f} s{where}"
    if proc.returncode < 0:
        return f"crashed with signal {-proc.returncode}: {proc.stderr.strip()[-300:]}"
    if proc.returncode != 0:
        return f"error: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '?'}"
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    return "; ".join(failures[:5]) + (f" (+{len(failures) - 5} more)" if len(failures) > 5 else "")


def run(
    device: str = "cuda",
    families=None,
    backends=None,
    full: bool = False,
    record: bool = True,
    timeout: float = 1800,
    log=print,
    jobs: int = 1,
    shards: int = 1,
    deadline: float | None = None,
) -> list[dict]:
    """Verify every available GPU backend of each family on ``device`` in child interpreters, ``jobs`` at a time,
    each pair's cases split between ``shards`` children (``timeout`` seconds each, and none past ``deadline``
    seconds after the start); record the outcomes in the cache (``record``); returns the cache entries written,
    one per pair."""
    dev = torch.device(device)
    ident = _backend.device_identity(dev)
    pairs = []
    for family in families or list(FAMILIES):
        for backend in backends or _backend.GPU_PREFERENCE.get(family, ()):
            if backend not in _backend.GPU_PREFERENCE.get(family, ()):
                continue
            reason = _backend.unavailable_reason(backend, dev)
            if reason is None:
                pairs.append((family, backend))
            else:
                log(f"  {family}/{backend}: skipped ({reason})")
    start = time.monotonic()
    # the children share the cores: a child's CPU reference on every core of an oversubscribed machine crawls
    threads = int(os.environ.get("OMP_NUM_THREADS", 0)) or max(1, (os.cpu_count() or 1) // max(1, jobs))

    def pair_shard(task):
        (family, backend), i = task
        left = timeout if deadline is None else min(timeout, deadline - (time.monotonic() - start))
        detail = (
            _run_child(_child_command(family, backend, device, full, (i, shards)), left, threads)
            if left > 0
            else "not run: the deadline had passed"
        )
        return detail, time.monotonic() - start

    # the CUDA pairs first: they take seconds; the Triton children compile their kernels and share what is left
    tasks = sorted(((pair, i) for pair in pairs for i in range(shards)), key=lambda task: task[0][1] == "triton")
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        done = dict(zip(tasks, pool.map(pair_shard, tasks)))
    results = []
    for pair in pairs:
        family, backend = pair
        parts = [done[(pair, i)] for i in range(shards)]
        details = [f"[shard {i}/{shards}] {d}" if shards > 1 else d for i, (d, _) in enumerate(parts) if d]
        status = "passed" if not details else "failed"
        results.append(
            {
                **ident,
                "family": family,
                "backend": backend,
                "status": status,
                "detail": "; ".join(details),
                "full": full,
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        log(
            f"  {family}/{backend}: {status} (done {max(t for _, t in parts):.1f} s after the start)"
            f"{': ' + results[-1]['detail'] if details else ''}"
        )
    if record and results:
        log(f"recorded in {_backend.record_selftest(results)}")
    return results


def main(args) -> int:
    if args.child:
        family, backend, device = args.child
        index, count = (int(v) for v in args.shard.split("/"))
        print(json.dumps(check(family, backend, device, args.full, (index, count))))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "selftest: no CUDA device is visible to torch; nothing to verify (--device cpu with "
            "TRITON_INTERPRET=1 runs the Triton kernels through the interpreter)",
            file=sys.stderr,
        )
        return 2
    print(f"relaxops selftest on {_backend.device_identity(torch.device(args.device))}")
    results = run(
        args.device,
        args.family,
        args.backend,
        args.full,
        record=not args.no_record,
        timeout=args.timeout,
        jobs=args.jobs,
        shards=args.shards,
        deadline=args.deadline,
    )
    return 1 if any(r["status"] != "passed" for r in results) else 0
