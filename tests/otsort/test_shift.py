"""Shift and scale of the optimal-transport ops. Offset rows (17 standard normal values + 100 in float32, + 1e6 in
float64: once a top-k mask of 1.8 and sorted values of 245 for inputs in [97.7, 101.5]) against the unshifted
computation on every backend, with their gradients and the outputs' ranges; squashing="none" under a scaling."""

import pytest
import torch
from relaxops import ot_quantile, ot_rank, ot_sort, ot_topk
from testing import BACKEND_DEVICE, assert_as_accurate_as_reference, assert_close

INTERPRETED = ("triton", "cpu")
NOT_INTERPRETED = [p for p in BACKEND_DEVICE if p.values != INTERPRETED]
K = 3
Q = [0.2, 0.5, 0.9]
# each op's outputs, and whether each moves with a shift of x (values) or not (ranks, masks)
OPS = {
    "sort": (lambda x, **kw: (ot_sort(x, **kw),), (True,)),
    "rank": (lambda x, **kw: (ot_rank(x, **kw),), (False,)),
    "quantile": (lambda x, **kw: (ot_quantile(x, Q, **kw),), (True,)),
    "topk": (lambda x, **kw: tuple(ot_topk(x, K, **kw)), (True, False)),
}


# the settings (epsilon 1e-3 annealed from 0.1, tolerance 1e-2: outputs only, their gradients are those of a
# nearly hard transport, which float rounding moves by O(1) even without a shift), and converged solves at a moderate
# epsilon for the gradients of both backward modes (float32 reaches a tolerance of about 1e-5; the Triton interpreter
# runs every iteration in Python: a larger epsilon converges in fewer)
SETTINGS = {
    "defaults": dict(),
    "implicit": dict(epsilon=0.1, tolerance=1e-11, max_iterations=5000),
    "unrolled": dict(epsilon=0.1, tolerance=1e-11, max_iterations=5000, backward="unrolled"),
}


def settings(name, dtype, backend):
    kw = dict(SETTINGS[name])
    if name != "defaults":
        if backend == "triton":
            kw.update(epsilon=0.3, tolerance=1e-9)
        if dtype == torch.float32:
            kw["tolerance"] = 1e-5
    return kw


def shifted_outputs_and_grad(op, x, backend, setting, shift=0.0, like=None, **kw):
    """The outputs of ``op`` in float64 on the CPU, ``shift`` taken off those that move with x, and (except at the
    defaults) the input gradient of a fixed random linear functional of them; the settings of backend ``like``."""
    fn, moves = OPS[op]
    grad = setting != "defaults"
    x = x.detach().requires_grad_(grad)
    outs = fn(x, backend=backend, **settings(setting, x.dtype, like or backend), **kw)
    res = [o.detach().cpu().double() - (shift if m else 0.0) for o, m in zip(outs, moves)]
    if grad:
        g = torch.Generator().manual_seed(5)
        loss = sum(
            (o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device, o.dtype)).sum() for o in outs
        )
        res.append(torch.autograd.grad(loss, x)[0].cpu().double())
    return res


def cases():
    """(backend, device, op, squashing, setting): the gradients of the logistic squashing (shift invariant itself)
    in the implicit mode only; the Triton interpreter (every iteration in Python, seconds per call) runs the top-k
    (values and mask) with squashing="none", the issue's first case, in the implicit mode."""
    for p in BACKEND_DEVICE:
        for op in OPS:
            for sq in ("none", "logistic"):
                for st in SETTINGS:
                    if (sq, st) == ("logistic", "unrolled"):
                        continue
                    if p.values != INTERPRETED or (op == "topk" and sq == "none" and st != "unrolled"):
                        yield pytest.param(*p.values, op, sq, st, id=f"{p.id}-{op}-{sq}-{st}", marks=p.marks)


@pytest.mark.parametrize("backend,device,op,squashing,setting", list(cases()))
def test_float32_offset_is_the_unshifted_computation(backend, device, op, squashing, setting):
    """float32 x + 100: outputs (and gradient) as accurate as the float32 reference on the same values unshifted
    (x - 100 is exact in float32), the values shifted by 100; masks in [0, 1] and sorted values within [min x,
    max x] up to float32 rounding and the column tolerance."""
    x = torch.randn(2, 17, generator=torch.Generator().manual_seed(0)) + 100
    x0 = x.double() - 100
    exact = shifted_outputs_and_grad(op, x0, "reference", setting, like=backend, squashing=squashing)
    low = shifted_outputs_and_grad(op, x0.float(), "reference", setting, like=backend, squashing=squashing)
    got = shifted_outputs_and_grad(op, x.to(device), backend, setting, shift=100.0, squashing=squashing)
    for a, r, e in zip(got, low, exact):
        assert a.shape == e.shape
        assert_as_accurate_as_reference(a, r, e, torch.float32, scale=10, msg=f"{op} {squashing} {setting}")
    lo, hi = x0.amin(-1, keepdim=True), x0.amax(-1, keepdim=True)
    for out, moves in zip(got, OPS[op][1]):
        if not moves and op == "topk":
            assert ((out >= 0) & (out <= 1 + 1e-3)).all(), "mask outside [0, 1]"
        if moves:  # the column tolerance 1e-2 lets a sorted value pass the extremes by about 1e-2 of the spread
            assert ((out >= lo - 2e-2 * (hi - lo)) & (out <= hi + 2e-2 * (hi - lo))).all(), "values outside the range"


@pytest.mark.parametrize("backend,device,op,squashing,setting", list(cases()))
def test_float64_offset_is_the_unshifted_computation(backend, device, op, squashing, setting):
    """float64 x + 1e6: the unshifted float64 reference, to the rounding of x + 1e6 (about 1e-10 per value: the
    values are read off x / max|x|) amplified by the plan's sensitivity 1 / epsilon."""
    x = torch.randn(2, 17, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 1e6
    x0 = x - 1e6
    exact = shifted_outputs_and_grad(op, x0, "reference", setting, like=backend, squashing=squashing)
    got = shifted_outputs_and_grad(op, x.to(device), backend, setting, shift=1e6, squashing=squashing)
    for a, e in zip(got, exact):
        assert a.shape == e.shape
        assert_close(a, e, torch.float64, scale=1e3, msg=f"{op} {squashing} {setting}")


@pytest.mark.parametrize("backend,device", NOT_INTERPRETED)
@pytest.mark.parametrize("s", [2.5, 0.3])
def test_none_squashing_scale_divides_epsilon(backend, device, s):
    """squashing="none": the plan depends on (x_i - mid) (y_j - mid) / epsilon only (mid: the midrange), so s x at
    (epsilon, epsilon0) is x at (epsilon / s, epsilon0 / s), values times s, to rounding at any tolerance (here the
    default 1e-2)."""
    x = torch.randn(3, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(device) + 7
    kw = dict(squashing="none", backend=backend)
    assert_close(
        ot_rank(s * x, 1e-2, epsilon0=0.2, **kw), ot_rank(x, 1e-2 / s, epsilon0=0.2 / s, **kw), torch.float64, scale=1e3
    )
    assert_close(
        ot_sort(s * x, 1e-2, epsilon0=0.2, **kw),
        s * ot_sort(x, 1e-2 / s, epsilon0=0.2 / s, **kw),
        torch.float64,
        scale=1e3,
    )
    top, top_s = ot_topk(s * x, 4, 1e-2, **kw), ot_topk(x, 4, 1e-2 / s, epsilon0=0.1 / s, **kw)
    assert_close(top.mask, top_s.mask, torch.float64, scale=1e3)
    assert_close(top.values, s * top_s.values, torch.float64, scale=1e3)
