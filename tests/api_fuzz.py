"""An adversarial fuzzing campaign over relaxops' public API, independent of the per-family property tests.

Each case is a random call of a public op (sort, rank, topk, DiffSortNet, TopKCrossEntropyLoss, neuralsort,
softsort, the smooth top-k losses, LogicLayer, GroupSum, PackedLogicNet, rasterize, the registered rank ops,
soft_rank, soft_sort and their compat.torchsort forms, the optimal-transport sort ops, the training solvers and
strategies), drawn from a seed, with arguments that are valid, at their extremes, or wrong (bad shapes, dtypes,
layouts, option names, sizes, out-of-range indices, NaN/inf/huge values). Cases run in child interpreters, so a
crash is recorded instead of ending the campaign. What counts as a finding:

* ``crash``: the child died from a signal (segfault, abort) during the case;
* ``hang``: the case did not finish within the per-case time limit;
* ``nonfinite``: all tensor inputs and float parameters were finite and the call returned, but an output or a
  gradient of a floating input is NaN, or infinite in float32/float64 (float16's largest value is 65504: a
  gradient such as a steep relaxation's at a tie, ~1e7, is correctly infinite there);
* ``unclear``: the call raised an exception that no relaxops check raised (its innermost frame is not a
  ``raise`` statement of relaxops, and its message does not come from a relaxops C++ check).

Clean refusals (a relaxops ``raise``, or a C++ check's ``relaxops: ...`` message) are expected outcomes.

Run a campaign: ``python tests/api_fuzz.py --cases 2000 --seed 1`` (prints every finding and a summary;
exit status 1 if anything was found). ``tests/test_api_fuzz.py`` runs a bounded campaign in the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import traceback

CHILD_FLAG = "--child"


# --- argument pools ----------------------------------------------------------------------------------------


def _tensor(rng: random.Random, shape, dtype_pool=None, kinds=None, layout_pool=None):
    """A random float tensor: (tensor, finite) with ``finite`` telling whether every value is finite."""
    import torch

    dtype = rng.choice(dtype_pool or [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16])
    kind = rng.choice(kinds or ["normal", "normal", "normal", "ties", "huge", "shifted", "tiny", "nonfinite"])
    numel = math.prod(shape)
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    t = torch.randn(numel, generator=g, dtype=torch.float64)
    if kind == "ties":
        t = torch.randint(0, 3, (numel,), generator=g).double()
    elif kind == "huge":
        t = t * rng.choice([1e4, 1e10, 1e30])
    elif kind == "shifted":
        t = t + rng.choice([1e5, -1e8, 1e10])
    elif kind == "tiny":
        t = t * 1e-30
    elif kind == "nonfinite" and numel:
        for _ in range(rng.randint(1, 3)):
            t[rng.randrange(numel)] = rng.choice([math.inf, -math.inf, math.nan])
    t = t.reshape(shape)
    if dtype in (torch.float16, torch.bfloat16, torch.float32):  # values beyond the range are a user's inf
        t = t.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).where(t.isfinite(), t)
    t = t.to(dtype)
    layout = rng.choice(layout_pool or ["contiguous", "contiguous", "transposed", "sliced"])
    if layout == "transposed" and t.dim() >= 2:
        t = t.transpose(-1, 0).contiguous().transpose(-1, 0)
    elif layout == "sliced" and t.dim() >= 1:
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        big[..., ::2] = t
        t = big[..., ::2]
    return t, bool(t.isfinite().all())


def _maybe(rng, good, bad, p_bad=0.06):
    return rng.choice(bad) if bad and rng.random() < p_bad else rng.choice(good)


BACKENDS = ["auto", "auto", "cpu", "reference", "triton"]
SHAPES = [(5,), (3, 7), (2, 1), (1, 1), (0, 5), (2, 3, 4), (4, 33), (1, 2), (3, 16), (2, 9)]


def case_sortnet(rng):
    import relaxops

    op = rng.choice(["sort", "rank", "topk", "DiffSortNet"])
    x, finite = _tensor(rng, rng.choice(SHAPES + [(), (0,)]))
    n = x.shape[-1] if x.dim() else 1
    net_pool = ["bitonic", "odd_even", "bitonic_original"] + (["splitter_selection"] * 2 if op == "topk" else [])
    kw = dict(
        network=_maybe(rng, net_pool, ["bogus", 3]),
        relaxation=_maybe(rng, list(relaxops.RELAXATIONS), ["bogus", None]),
        steepness=_maybe(rng, [10.0, 1.0, 0.1, 1e3], [0.0, -1.0, math.nan, math.inf]),
        art_lambda=_maybe(rng, [0.25, 0.5], [-1.0, 2.0, math.nan]),
        backend=rng.choice(BACKENDS),
    )
    params_finite = all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    x.requires_grad_(x.is_floating_point() and rng.random() < 0.7)
    if op == "sort":
        out = relaxops.sort(x, return_matrix=rng.random() < 0.6, descending=rng.random() < 0.3, **kw)
    elif op == "rank":
        out = relaxops.rank(x, descending=rng.random() < 0.3, **kw)
    elif op == "topk":
        k = _maybe(rng, [1, 2, min(3, n), n], [0, -1, n + 1, 2.5])
        out = relaxops.topk(x, k, **kw)
    else:
        out = relaxops.DiffSortNet(kw.pop("network"), _maybe(rng, [n], [n + 1, 0]), **kw)(x)
    return [x], out, finite and params_finite


def case_topk_loss(rng):
    import relaxops
    import torch

    n = rng.choice([5, 10, 33, 100])
    B = rng.choice([0, 1, 4, 7])
    p_k = _maybe(rng, [[1.0], [0.5, 0, 0, 0, 0.5], [0.2, 0.3, 0.5]], [[], [0.5, 0.6], [-1.0, 2.0]])
    K = len(p_k)
    method = _maybe(rng, ["splitter_selection", "bitonic", "odd_even", "neuralsort", "softsort"], ["bogus"])
    m = _maybe(rng, [None, None, K + 1, 16], [K, 0, n + 1])
    inverse_temperature = _maybe(rng, [1.0, 0.1, 10.0], [0.0, math.nan])
    loss = relaxops.TopKCrossEntropyLoss(
        p_k,
        method=method,
        m=m,
        top1_mode=rng.choice(["sm", "smce", "sort"]),
        inverse_temperature=inverse_temperature,
        reduction=rng.choice(["mean", "sum", "none"]),
        backend=rng.choice(BACKENDS),
    )
    x, finite = _tensor(rng, (B, n), dtype_pool=[torch.float32, torch.float64])
    x.requires_grad_(True)
    target = torch.randint(0, n, (B,))
    if B and rng.random() < 0.15:
        target[0] = rng.choice([n, -5, -100])
    # The mean over no (kept) sample is 0/0 = NaN, as torch.nn.CrossEntropyLoss's (this loss is its drop-in).
    counted = bool((target != -100).any()) or loss.reduction != "mean"
    return [x], loss(x, target), finite and math.isfinite(inverse_temperature) and counted


def case_baselines(rng):
    import relaxops
    import torch

    op = rng.choice(["neuralsort", "softsort", "SmoothTopKLoss", "SmoothHardTopKLoss"])
    if op in ("neuralsort", "softsort"):
        x, finite = _tensor(rng, rng.choice(SHAPES + [(), (0,)]))
        n = x.shape[-1] if x.dim() else 1
        tau = _maybe(rng, [1.0, 1e-3, 1e-6, 100.0], [0.0, -1.0, math.nan])
        k = _maybe(rng, [None, 1, n], [0, n + 1, 1.5])
        kw = dict(tau=tau, k=k, hard=rng.random() < 0.3, backend=rng.choice(BACKENDS))
        if op == "softsort":
            kw["pow"] = _maybe(rng, [1.0, 2.0, 0.5], [0.0, -1.0])
        x.requires_grad_(x.is_floating_point())
        out = getattr(relaxops, op)(x, **kw)
        return [x], out, finite and all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    n = rng.choice([2, 5, 10, 100])
    B = rng.choice([0, 1, 6])
    loss = getattr(relaxops, op)(
        n,
        _maybe(rng, [1, min(5, n - 1)], [0, n + 1]),
        tau=_maybe(rng, [1.0, 0.1, 1e-3], [0.0]),
        alpha=rng.choice([1.0, 0.0, 2.0]),
    )
    x, finite = _tensor(rng, (B, n), dtype_pool=[torch.float32, torch.float64])
    x.requires_grad_(True)
    labels = torch.randint(0, n, (B,))
    if B and rng.random() < 0.15:
        labels[0] = n
    return [x], loss(x, labels), finite and (B > 0 or loss.reduction != "mean")  # an empty mean is NaN


def case_fastsort(rng):
    import relaxops

    op = rng.choice(["soft_rank", "soft_sort", "compat"])
    x, finite = _tensor(rng, rng.choice(SHAPES + [(), (0,), (2, 0)]))
    kw = dict(
        regularization=_maybe(rng, ["l2", "kl"], ["l1", None]),
        regularization_strength=_maybe(rng, [1.0, 1e-4, 1e-30, 1e4, 1e30], [0.0, -1.0, math.nan, math.inf]),
    )
    x.requires_grad_(x.is_floating_point())
    params_finite = all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    if op == "compat":
        from relaxops.compat import torchsort

        name = rng.choice(["soft_rank", "soft_sort"])
        out = getattr(torchsort, name)(x, **kw)
        sort_like = name == "soft_sort"
    else:
        out = getattr(relaxops, op)(
            x, descending=_maybe(rng, [False, True], [1, "yes"]), backend=rng.choice(BACKENDS), **kw
        )
        sort_like = op == "soft_sort"
    # documented: a NaN (soft_rank) or any non-finite value (soft_sort, compat's soft_sort) makes its row NaN
    return [x], out, finite and params_finite and not (sort_like and not finite)


def case_logic(rng):
    import relaxops
    import torch

    op = rng.choice(["LogicLayer", "LogicLayer", "GroupSum", "PackedLogicNet"])
    if op == "GroupSum":
        x, finite = _tensor(rng, rng.choice([(4, 12), (0, 6), (12,), (3, 5)]))
        m = relaxops.GroupSum(_maybe(rng, [1, 2, 3], [5, 0]), tau=_maybe(rng, [1.0, 10.0], [0.0]))
        x = x.sigmoid().detach().requires_grad_()  # gate outputs in [0, 1]: sums of huge values overflow any dtype
        return [x], m(x), finite
    in_dim, out_dim = rng.choice([(8, 8), (5, 3), (16, 40), (1, 1), (33, 17)])
    layer = relaxops.LogicLayer(
        in_dim, out_dim, connections=rng.choice(["random", "unique"]), backend=rng.choice(BACKENDS)
    )
    if rng.random() < 0.2:  # in-place edits of the connections, valid or not
        with torch.no_grad():
            getattr(layer, rng.choice(["idx_a", "idx_b"]))[0] = _maybe(rng, [in_dim - 1, 0], [in_dim, -1, 10**7])
    if op == "LogicLayer":
        if rng.random() < 0.3:
            layer.eval()
        x, finite = _tensor(rng, (rng.choice([0, 1, 7]), _maybe(rng, [in_dim], [in_dim + 1])))
        x = x.sigmoid()  # activations are probabilities in [0, 1], as between logic layers
        x = x.detach().requires_grad_(x.is_floating_point())
        return [x], layer(x), finite
    k = rng.choice([1, out_dim])
    model = torch.nn.Sequential(
        *([torch.nn.Flatten()] if rng.random() < 0.5 else []), layer, relaxops.GroupSum(k if out_dim % k == 0 else 1)
    )
    if rng.random() < 0.8:
        model.eval()
    net = relaxops.PackedLogicNet(model, backend=rng.choice(["auto", "cpu", "reference"]))
    B = rng.choice([0, 1, 65])
    x = torch.rand(B, _maybe(rng, [in_dim], [in_dim + 1])) < 0.5
    return [], net(x), True


def case_render(rng):
    import relaxops
    import torch
    from relaxops.render import DISTRIBUTIONS, T_CONORMS

    B, F = rng.choice([(1, 1), (1, 3), (2, 5), (0, 2), (1, 0)])
    fv, finite = _tensor(
        rng,
        (B, F, 3, 3),
        dtype_pool=[torch.float32, torch.float64],
        kinds=["normal", "normal", "huge", "nonfinite", "ties"],
    )
    with torch.no_grad():
        fv = fv.clone()
        fv[..., 2] = fv[..., 2].abs() + 1.5  # depth in front of the near plane, mostly
    fv.requires_grad_(True)
    texture_type = rng.choice(["surface", "vertex"])
    tex_shape = (B, F, rng.choice([1, 4]), 3) if texture_type == "surface" else (B, F, 3, 3)
    tex = torch.rand(tex_shape, dtype=fv.dtype, requires_grad=True) if rng.random() < 0.6 else None
    dist = _maybe(rng, list(DISTRIBUTIONS), ["bogus"])
    tconorm = _maybe(rng, list(T_CONORMS), ["bogus"])
    kw = dict(
        image_size=_maybe(rng, [8, (5, 7), 1, 16], [0, 1.5, -3, (4,), "8"]),
        dist_func=dist,
        dist_scale=_maybe(rng, [1e-2, 1e-4, 0.3], [0.0, -1.0, math.nan]),
        dist_squared=rng.random() < 0.3,
        aggr_alpha_func=tconorm,
        aggr_rgb_func=rng.choice(["softmax", "hard"]),
        aggr_rgb_gamma=_maybe(rng, [1e-3, 1e-5, 1e-8, 1.0], [0.0, -1.0]),
        texture_type=texture_type,
        backend=rng.choice(["auto", "cpu", "reference"]),
    )
    params_finite = all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    return [fv] + ([tex] if tex is not None else []), relaxops.rasterize(fv, tex, **kw), finite and params_finite


def case_sortnet_rank_ops(rng):
    """The registered rank ops (``torch.ops.relaxops.sortnet_rank_fwd`` / ``_bwd``), public like
    ``relaxops.rank``: valid, extreme and wrong tensors, networks, relaxation ids, parameters and backends."""
    import relaxops  # noqa: F401 - registers the ops
    import torch

    R = torch.ops.relaxops
    shape = _maybe(rng, [(3, 7), (2, 1), (1, 16), (0, 5), (4, 33)], [(5,), (2, 3, 4), (3, 0)])
    x, finite = _tensor(rng, shape, dtype_pool=[torch.float32, torch.float64, torch.float64, torch.float16])
    n = x.shape[-1]
    args = (
        _maybe(rng, ["bitonic", "odd_even", "bitonic_original"], ["bogus", "splitter_selection:2", "custom:1"]),
        _maybe(rng, list(range(6)), [6, -1]),
        _maybe(rng, [10.0, 1.0, 1e3], [0.0, math.nan, math.inf]),
        _maybe(rng, [0.25, 1.0], [-0.5, 2.0]),
        _maybe(rng, ["cpu", "cpu", "triton"], ["reference", "cuda", "auto"]),
    )
    params_finite = all(math.isfinite(v) for v in args[2:4])
    if rng.random() < 0.7:  # the forward, differentiated through its registered backward
        x.requires_grad_(x.is_floating_point() and rng.random() < 0.7)
        return [x], R.sortnet_rank_fwd(x, *args), finite and params_finite
    # the backward called directly, with a gradient of a valid or a wrong shape
    g, g_finite = _tensor(
        rng, _maybe(rng, [tuple(x.shape)], [(x.shape[0], n + 1), (1,)]), dtype_pool=[x.dtype, x.dtype, torch.float16]
    )
    return [], R.sortnet_rank_bwd(x, g, *args), finite and g_finite and params_finite


def case_otsort(rng):
    import relaxops

    op = rng.choice(["ot_sort", "ot_rank", "ot_quantile", "ot_topk", "OTSort"])
    x, finite = _tensor(rng, rng.choice([(5,), (3, 7), (2, 1), (1, 1), (0, 5), (2, 3, 4), (2, 9), (3, 16)]))
    n = x.shape[-1] if x.dim() else 1
    kw = dict(
        epsilon=_maybe(rng, [1e-2, 0.1, 1e-3], [0.0, -1.0, math.nan]),
        epsilon0=_maybe(rng, [0.1, None, 1.0], [0.0, math.inf]),
        annealing=_maybe(rng, [0.95, 0.5, 1.0], [0.0, 1.5]),
        tolerance=_maybe(rng, [1e-2, 1e-6, 0.0], [-1.0, math.nan]),
        max_iterations=_maybe(rng, [2000, 50, 1], [0, -3, 2.5]),
        squashing=_maybe(rng, ["logistic", "none"], ["bogus"]),
        backward=_maybe(rng, ["implicit", "unrolled"], ["bogus"]),
        backend=rng.choice(BACKENDS),
    )
    if op in ("ot_sort", "ot_rank", "OTSort"):
        kw["descending"] = rng.random() < 0.3
        kw["num_targets"] = _maybe(rng, [None, 1, 3, n], [0, -2])
    if rng.random() < 0.2 and x.dim() and op != "OTSort":  # OTSort takes target weights only
        w, wf = _tensor(rng, x.shape[-1:], kinds=["normal", "nonfinite"])
        kw["a"] = _maybe(rng, [w.abs() + 0.1], [w, -w.abs()])
        finite = finite and wf
    params_finite = all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    x.requires_grad_(x.is_floating_point() and rng.random() < 0.7)
    if op == "ot_quantile":
        kw.pop("backend")
        out = relaxops.ot_quantile(
            x,
            _maybe(rng, [0.5, [0.1, 0.9], [0.7, 0.3, 0.5]], [0.0, [0.5, 0.5], 1.5]),
            backend=rng.choice(BACKENDS),
            **kw,
        )
    elif op == "ot_topk":
        out = relaxops.ot_topk(x, _maybe(rng, [1, n], [0, n + 1, 2.5]), largest=rng.random() < 0.7, **kw)
    elif op == "OTSort":
        out = relaxops.OTSort(**kw)(x)
    else:
        out = getattr(relaxops, op)(x, return_plan=rng.random() < 0.2, **kw)
    return [x], out, finite and params_finite


def case_training_solvers(rng):
    from relaxops import training

    op = rng.choice(["argmax_onehot", "topk_khot", "sort_perm", "assignment", "assignment"])
    if op == "assignment":
        d = rng.choice([0, 1, 2, 3, 5, 7, 16, 33])
        shape = _maybe(rng, [(d, d), (2, d, d), (3, 2, d, d), (0, d, d)], [(d, d + 1), (d,)], p_bad=0.1)
        x, finite = _tensor(rng, shape)
        out = training.assignment(x, backend=rng.choice(BACKENDS))
    else:
        x, finite = _tensor(rng, rng.choice(SHAPES))
        if op == "argmax_onehot":
            out = training.argmax_onehot(x)
        elif op == "topk_khot":
            n = x.shape[-1]
            out = training.topk_khot(x, _maybe(rng, [0, 1, n], [n + 1, -1, 2.5]))
        else:
            out = training.sort_perm(x, descending=_maybe(rng, [True, False], ["yes"]))
    return [x], out, finite


def case_training(rng):
    """The training strategies (split_loss, NewtonLoss with the closed forms, newton_target,
    resgro_target / ResgroLoss, smoothing_grad_hess): valid, extreme and wrong tensors and options."""
    import torch
    from relaxops import training

    op = rng.choice(["newton", "newton", "target", "resgro", "split", "smoothing"])
    shape = _maybe(rng, [(4, 3), (1, 5), (6, 2), (2, 7), (3, 1), (9, 4)], [(5,), (0, 3), (2, 3, 4), ()])
    # no "huge" outputs where the value is a squared distance that can exceed the dtype's range (1e30^2 in float32:
    # the loss is then correctly inf); the Newton target and RESGRO get them
    kinds = None if op in ("target", "resgro") else ["normal", "normal", "ties", "shifted", "tiny", "nonfinite"]
    y, finite = _tensor(rng, shape, kinds=kinds)
    y.requires_grad_(y.is_floating_point() and rng.random() < 0.8)
    N, m = (tuple(shape) + (1, 1))[:2]
    variant = _maybe(rng, list(training.newton.VARIANTS), ["newton", None])
    lam = _maybe(rng, [1e-3, 0.1, 1.0, 0.0], [-1.0, math.nan, math.inf])
    params_finite = not isinstance(lam, float) or math.isfinite(lam)
    if op == "newton":
        name = _maybe(rng, ["smce", "bce", "sbce", "mse"], ["ce"])
        if name == "smce":
            target = _maybe(rng, [torch.randint(0, max(m, 1), (N,))], [torch.full((N,), m), torch.zeros(N + 1).long()])
        else:
            target, t_finite = _tensor(rng, (N, m), kinds=["normal", "ties", "shifted"])
            target = target.sigmoid() if name in ("bce", "sbce") else target
            finite = finite and t_finite
        x = y.sigmoid() if name == "bce" else y  # probabilities for bce
        loss = training.NewtonLoss(
            variant=variant,
            lam=lam,
            grad_hess_fn=name,
            singular=rng.choice(["raise", "pinv"]),
            lam_mode=_maybe(rng, ["absolute", "relative"], ["rel"]),
            reduction=_maybe(rng, ["mean", "sum", "none"], ["avg"]),
        )
        return [y], loss(x, target), finite and params_finite
    if op == "target":
        g, g_finite = _tensor(rng, _maybe(rng, [(N, m)], [(N, m + 1)]), kinds=["normal", "tiny", "huge"])
        H = torch.eye(m, dtype=torch.float64).expand(N, m, m) * rng.choice([1.0, 1e-8, 0.0])
        z = training.newton_target(
            y.detach(),
            g,
            H,
            variant,
            lam,
            singular=rng.choice(["raise", "pinv"]),
            eig_floor=_maybe(rng, [None, 0.1], [0.0, -1.0]),
        )
        return [y], z, finite and g_finite and params_finite
    if op == "resgro":
        kw = dict(
            K=_maybe(rng, [1, 3, 10], [0, 2.5]),
            noise=_maybe(rng, list(training.resgro.NOISES), ["normal"]),
            scale=_maybe(rng, [0.1, 1.0, 1e-8], [0.0, math.nan]),
            n_sets=_maybe(rng, [1, 4], [0]),
            generator=torch.Generator().manual_seed(rng.randrange(1000)),
        )
        kw["pool_size"] = rng.choice([None, None, kw["K"] if isinstance(kw["K"], int) else 3, 12])
        centre = torch.randn(N, m, dtype=torch.float64)
        loss = training.ResgroLoss(lambda c: (c.double() - centre).square().sum(-1), **kw)
        return [y], loss(y), finite and all(not isinstance(v, float) or math.isfinite(v) for v in kw.values())
    if op == "split":
        return [y], training.split_loss(y, lambda t: t * 0.5 - 1.0, _maybe(rng, ["mean", "sum", "none"], ["x"])), finite
    g, H = training.smoothing_grad_hess(
        lambda z: z.double().sin().sum(-1),
        y,
        _maybe(rng, [0.1, 1.0], [0.0]),
        _maybe(rng, [1, 10], [0]),
        _maybe(rng, ["gaussian", "logistic"], ["cauchy"]),
        rng.random() < 0.7,
        torch.Generator().manual_seed(1),
    )
    return [y], (g, H), finite


CASES = [
    case_sortnet,
    case_sortnet,
    case_topk_loss,
    case_baselines,
    case_baselines,
    case_logic,
    case_logic,
    case_render,
    case_sortnet_rank_ops,
    case_fastsort,
    case_fastsort,
    case_otsort,
    case_training_solvers,
    case_training,
]


# --- one case, in the child -------------------------------------------------------------------------------


def _flat_tensors(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat_tensors(o)]
    return []


def _bad(t) -> bool:
    """NaN anywhere, or an infinity in a dtype wider than float16 (see the module note)."""
    import torch

    t = t.detach()
    return bool(t.isnan().any()) or (t.dtype not in (torch.float16, torch.bfloat16) and bool(t.isinf().any()))


def _clean_refusal(e: BaseException) -> bool:
    """Raised by a relaxops check: a ``raise`` statement in relaxops' code, or a C++ check's message."""
    if str(e).startswith("relaxops"):
        return True
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    import linecache

    import relaxops

    fname = tb.tb_frame.f_code.co_filename
    line = linecache.getline(fname, tb.tb_lineno).strip()
    return fname.startswith(os.path.dirname(relaxops.__file__)) and line.startswith("raise")


def run_case(seed: int) -> dict:
    import warnings

    import torch

    rng = random.Random(seed)
    case = rng.choice(CASES)
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs, out, finite = case(rng)
            outs = [t for t in _flat_tensors(out) if t.is_floating_point()]
            if finite and any(_bad(t) for t in outs):
                return dict(kind="nonfinite", case=case.__name__, what="output")
            diff = [t for t in outs if t.requires_grad and t.numel()]
            if diff:
                g = torch.Generator().manual_seed(seed)
                total = sum((t.float() * torch.randn(t.shape, generator=g).to(t.device)).sum() for t in diff)
                total.backward()
                grads = [t.grad for t in inputs if t.grad is not None]
                if finite and any(_bad(gr) for gr in grads):
                    return dict(kind="nonfinite", case=case.__name__, what="gradient")
    except Exception as e:  # noqa: BLE001 - classifying every exception is the point
        if _clean_refusal(e):
            return dict(kind="refused", case=case.__name__, error=f"{type(e).__name__}")
        tb = traceback.format_exc(limit=-3)
        return dict(kind="unclear", case=case.__name__, error=f"{type(e).__name__}: {e}"[:300], where=tb[-800:])
    return dict(kind="ok", case=case.__name__)


def _child(seeds: list[int]) -> None:
    for s in seeds:
        print(json.dumps({"start": s}), flush=True)
        print(json.dumps({"seed": s, **run_case(s)}), flush=True)


# --- the campaign, in the parent ---------------------------------------------------------------------------


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def campaign(seed: int = 0, cases: int = 200, case_timeout: float = 120.0, chunk: int = 50, log=None) -> dict:
    """Run ``cases`` random cases from ``seed``; returns ``{"counts": {kind: n}, "findings": [...]}``."""
    pending = list(range(seed * 1_000_003, seed * 1_000_003 + cases))
    counts: dict[str, int] = {}
    findings: list[dict] = []
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "1")

    def _record(rec):
        findings.append(rec)
        if log:
            log(rec)

    while pending:
        batch, pending = pending[:chunk], pending[chunk:]
        err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(
            [sys.executable, __file__, CHILD_FLAG, *map(str, batch)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        started, done = None, set()
        while True:  # each case must report within case_timeout of its start
            try:
                line = lines.get(timeout=case_timeout)
            except queue.Empty:
                proc.kill()
                rec = {"seed": started, "kind": "hang"}
                break
            if line is None:
                rec = None
                break
            r = json.loads(line)
            if "start" in r:
                started = r["start"]
                continue
            done.add(r["seed"])
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
            if r["kind"] not in ("ok", "refused"):
                _record(r)
        proc.wait()
        err.seek(0)
        stderr = err.read()
        err.close()
        if rec is None and started is not None and started not in done:
            if proc.returncode >= 0:
                raise RuntimeError(f"fuzz child failed outside a case:\n{stderr[-2000:]}")
            rec = {"seed": started, "kind": "crash", "signal": -proc.returncode, "stderr": stderr[-500:]}
        if rec is not None:
            counts[rec["kind"]] = counts.get(rec["kind"], 0) + 1
            _record(rec)
        # Cases after a crash or hang in this chunk run in a fresh child.
        rest = [s for s in batch if s not in done and s != started]
        pending = rest + pending
    return {"counts": counts, "findings": findings}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case-timeout", type=float, default=120.0)
    p.add_argument("--replay", type=int, help="run one case in this process and print its outcome")
    a = p.parse_args(argv)
    if a.replay is not None:
        print(json.dumps(run_case(a.replay), indent=1))
        return 0
    res = campaign(a.seed, a.cases, a.case_timeout, log=lambda r: print(json.dumps(r), flush=True))
    print(json.dumps(res["counts"]))
    return 1 if res["findings"] else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        _child([int(s) for s in sys.argv[2:]])
    else:
        sys.exit(main())
