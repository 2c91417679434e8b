"""Optimal-transport sort cases: ``relaxops.ot_rank`` / ``relaxops.ot_sort`` per backend against ott-jax's
``soft_sort.ranks`` / ``soft_sort.sort``.

Every provider solves the same problem: ``x [B, n]`` float32, ott-jax's squashing ``sigmoid((x - mean) / (std +
1e-10))``, ``n`` uniform targets on [0, 1], ``epsilon = 1e-2`` (ott's default) without annealing. The stopping
rules differ (ours: relative column error ``max_j |c_j / b_j - 1| <= 1e-2`` every 5 iterations; ott: absolute L1
column error ``< 1e-3`` every 10 iterations, which is a mean relative error below 1e-3): at n = 1000 ours runs
15-30 iterations per row, ott 30. Loss ``(out * g).sum()``. Ours runs its default implicit backward (``cpu``) and the
unrolled replay (``cpu unrolled``).

ott-jax runs jitted (compiled and warmed up by the harness' first call) on CPU arrays copied from the torch inputs;
``forward()`` blocks until the result is ready. Its reverse mode, measured here (ott-jax 0.6.0, jax CPU):

* ``ranks`` with its default implicit differentiation and the case's random cotangent: at n = 100, B = 16 its
  linear solve fails ("A linear solver returned non-finite (NaN or inf) output", lineax); at n = 1000, B = 16 no
  result within 15 minutes. (With a constant cotangent the solve is trivial: the ranks sum to a constant.)
* ``sort`` (m = n): no reverse mode at all, implicit or unrolled: its ``SortingInitializer`` runs a ``while_loop``
  ("Reverse-mode differentiation does not work for lax.while_loop").

So the fwd+bwd ranks cases run ott's unrolled mode (``implicit_diff=None``, ``min_iterations = max_iterations =
30``: the iteration count its forward converges in at n = 1000), the configuration in which its gradient works: one
jitted call of the output and its vector-Jacobian product with the case's cotangent (what a JAX training step
compiles), wrapped in a ``torch.autograd.Function`` whose backward returns that gradient. The fwd+bwd sort cases
skip ott-jax with the reason.
"""

from __future__ import annotations

import torch

import relaxops
from relaxops._backend import unavailable_reason

from .peers import missing
from .registry import Case, Provider, add_case, add_provider

FAMILY = "otsort"
EPSILON = 1e-2
OTT_UNROLLED = 30  # ott-jax's fixed iteration count in fwd+bwd (its forward converges in 30 at n = 1000)


def ott_squash(x: torch.Tensor) -> torch.Tensor:
    """ott-jax's default squashing of ``transport_for_sort`` (population std)."""
    return torch.sigmoid((x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=False, keepdim=True) + 1e-10))


def _case(op, n, batch, mode, default=False, goal=None):
    params = dict(n=n, batch=batch, epsilon=EPSILON, dtype="float32")
    add_case(Case(FAMILY, op, f"n={n} B={batch}", params, mode, "cpu", default, None, goal, sweep="n"))


def _inputs(case):
    p = case.params
    gen = torch.Generator(case.device).manual_seed(0)
    kw = dict(generator=gen, device=case.device, dtype=getattr(torch, p["dtype"]))
    x = torch.randn(p["batch"], p["n"], **kw).requires_grad_()
    return x, (None if case.mode == "fwd" else torch.randn(p["batch"], p["n"], **kw),)


def _ours(backend, backward="implicit"):
    def make(case):
        x, cot = _inputs(case)
        fn = relaxops.ot_rank if case.op == "ot_rank" else relaxops.ot_sort
        opts = dict(
            epsilon=case.params["epsilon"], epsilon0=None, squashing=ott_squash, backward=backward, backend=backend
        )
        return (lambda: (fn(x, **opts),)), [x], cot

    def skip(case):
        if backward == "unrolled" and case.mode == "fwd":
            return "the backward mode does not change the forward"
        if backend == "triton" and torch.device(case.device).type == "cpu":
            return "the triton interpreter is too slow to time"
        if backend == "reference" and case.params["n"] > 100:
            return "the dense reference (an (n + m) x (n + m) solve per row in backward) is too slow to time at n > 100"
        return unavailable_reason(backend, torch.device(case.device))

    name = backend if backward == "implicit" else f"{backend}-unrolled"
    return Provider(name, make, reference=False, skip=skip)


class _JaxCall(torch.autograd.Function):
    """``out`` computed by JAX; the gradient ``grad`` was computed with it (for the case's fixed cotangent)."""

    @staticmethod
    def forward(ctx, x, out, grad):
        ctx.save_for_backward(grad)
        return out

    @staticmethod
    def backward(ctx, g_out):
        (grad,) = ctx.saved_tensors
        return grad, None, None


def _ott_make(case):
    import jax
    import jax.numpy as jnp
    from ott.tools import soft_sort

    x, (cot,) = _inputs(case)
    op = soft_sort.ranks if case.op == "ot_rank" else soft_sort.sort

    # the forward with its defaults; fwd+bwd in the unrolled mode (see the module docstring)
    unrolled = (
        {} if case.mode == "fwd" else dict(implicit_diff=None, min_iterations=OTT_UNROLLED, max_iterations=OTT_UNROLLED)
    )

    def fn(v):
        return op(v, axis=-1, epsilon=case.params["epsilon"], **unrolled)

    xj = jnp.asarray(x.detach().numpy())
    if case.mode == "fwd":
        f = jax.jit(fn)
        return (lambda: (torch.from_numpy(jax.device_get(f(xj).block_until_ready()).copy()),)), [x], (cot,)
    cj = jnp.asarray(cot.numpy())

    @jax.jit
    def value_and_vjp(v, c):
        out, pullback = jax.vjp(fn, v)
        return out, pullback(c)[0]

    def forward():
        out, grad = jax.device_get(jax.block_until_ready(value_and_vjp(xj, cj)))
        return (_JaxCall.apply(x, torch.from_numpy(out.copy()), torch.from_numpy(grad.copy())),)

    return forward, [x], (cot,)


def _ott_skip(case):
    reason = missing("ott")
    if reason:
        return reason
    if case.op == "ot_sort" and case.mode != "fwd":
        return (
            "ott-jax's soft_sort.sort has no reverse mode, implicit or unrolled (its SortingInitializer's "
            "while_loop: 'Reverse-mode differentiation does not work for lax.while_loop')"
        )
    return None


for _backend in ("reference", "cpu", "cuda", "triton"):
    add_provider(FAMILY, _ours(_backend))
add_provider(FAMILY, _ours("cpu", "unrolled"))
add_provider(FAMILY, Provider("ott-jax", _ott_make, reference=True, skip=_ott_skip))

# CPU, default run: ranks and sorted values at n = 1000, B = 16 (the target: >= 20x ott-jax), forward and
# fwd+bwd, and ranks at n = 100 (the plotted sweep). --full adds B = 100.
for _op in ("ot_rank", "ot_sort"):
    for _mode in ("fwd", "fwd+bwd"):
        _case(
            _op,
            1000,
            16,
            _mode,
            default=True,
            goal=None if (_op, _mode) == ("ot_sort", "fwd+bwd") else ("ott-jax", 20.0),
        )
        _case(_op, 1000, 100, _mode)
    _case(_op, 100, 16, "fwd+bwd", default=_op == "ot_rank")
