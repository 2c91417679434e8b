"""Property-based (fuzz) tests of every public op of the sorting-network family.

``relaxops.sort``, ``rank``, ``topk``, ``DiffSortNet``, ``DiffTopkNet``, ``TopKCrossEntropyLoss`` and the compat
modules (``relaxops.compat.diffsort`` / ``difftopk``) on random shapes (empty batch, 1-D, n = 1, odd n), every
dtype, parameters at their extremes and every memory layout. On well-conditioned inputs the kernels (cpu; triton
through the interpreter on small cases) are compared with the float64 reference, outputs and gradients; on
extreme inputs (ties, huge values, tiny gaps, NaN/inf) every backend must keep the invariants: no crash, finite
outputs and gradients for finite input, doubly stochastic matrices, sorted values inside the row's range, rows
independent of each other, infinities at the ends (the documented rule, see ``relaxops.sort``).

Profiles: "ci" (default, derandomized) and HYPOTHESIS_PROFILE=long (fresh examples, many more) for local runs.
"""

import functools
import math

import relaxops
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from relaxops.compat import diffsort as compat_diffsort
from relaxops.compat import difftopk as compat_difftopk
from relaxops.sortnet.networks import _original_bitonic_broken
from strategies import BATCH, FLOAT_DTYPES, LAYOUTS, SIZES, extreme, layout, well_conditioned
from testing import BACKEND_DEVICE, assert_as_accurate_as_reference, assert_close, assert_low_precision_close

BACKENDS = {p.values[0] for p in BACKEND_DEVICE if p.values[1] == "cpu"}
KERNELS = sorted(BACKENDS - {"reference"})
SORTING = ("bitonic", "odd_even", "bitonic_original")
STEEPNESS = st.sampled_from([1e-2, 1.0, 3.0, 30.0, 1e4])
ART_LAMBDA = st.sampled_from([0.0, 0.25, 1.0])
RELAXATION = st.sampled_from(relaxops.RELAXATIONS)


def _examples(ci: int) -> int:
    """``ci`` examples under the "ci" profile (30 by default), proportionally more under "long"."""
    return max(1, ci * settings.default.max_examples // 30)


def _small(shape) -> bool:
    """Cases the Triton interpreter runs fast enough."""
    return shape[-1] <= 17 and math.prod(shape[:-1]) <= 4


def _kernels_for(shape):
    return [b for b in KERNELS if b != "triton" or _small(shape)]


def _run(f, x, seed=7):
    """Outputs of ``f(x)`` (a tensor or a tuple; None entries dropped) and the gradient of a random linear
    functional of all of them (finite outputs only: an infinite output has no meaningful weight)."""
    x = x.detach().clone().requires_grad_(True) if x.is_floating_point() else x
    out = f(x)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
    g = torch.Generator().manual_seed(seed)
    loss = sum(
        (o.where(o.isfinite(), 0) * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)).sum()
        for o in outs
    )
    grad = torch.autograd.grad(loss, x, allow_unused=True)[0] if loss.requires_grad else None
    return outs + [torch.zeros_like(x) if grad is None else grad]


def _compare(f_kernel, f_ref, x, scale=1.0):
    """Kernel vs float64 reference on ``x``; float32: at most twice as far from float64 as the float32 reference
    (plus the float32 tolerance); half types: the rule of docs/math/sortnet.md §9.4 (twice the reference run in
    the same precision plus half's unit roundoff)."""
    exact = _run(f_ref, x.double())
    got = _run(f_kernel, x)
    assert len(got) == len(exact)
    if x.dtype == torch.float64:
        for a, b in zip(got, exact):
            assert_close(a, b, torch.float64, scale=scale)
        return
    low = _run(f_ref, x)
    for a, lr, e in zip(got, low, exact):
        assert a.dtype == lr.dtype and a.shape == e.shape
        if x.dtype == torch.float32:
            assert_as_accurate_as_reference(a, lr, e, torch.float32, scale=scale, msg="kernel vs reference")
        elif e.numel():
            assert_low_precision_close(a, lr, e, slack=4e-3 * max(1.0, e.abs().max().item()))


def _assert_finite_grad(f, x, grad):
    """A finite gradient, or (half dtypes) one whose float32 value is too large for the dtype (e.g. ART's slope
    s / (1e-10)^lambda at ties): the op computes in float32 and the cast to the input's dtype overflows."""
    bad = ~grad.isfinite()
    if bad.any() and x.dtype in (torch.float16, torch.bfloat16):
        g32 = _run(f, x.float())[-1]
        assert g32.isfinite().all() and (g32[bad].abs() > torch.finfo(x.dtype).max).all()
    else:
        assert not bad.any(), "finite gradient"


@st.composite
def inputs(draw, max_n=None, min_n=1):
    """(x in one of the layouts, as float64 values for the reference) of a random batch shape and dtype."""
    n = draw(SIZES.filter(lambda v: min_n <= v <= (max_n or v)))
    shape = draw(BATCH) + (n,)
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    base = draw(well_conditioned(shape, torch.float64))
    return layout(base.to(dtype), draw(LAYOUTS))


# --- well-conditioned inputs: kernels against the float64 reference ----------------------------------------------


@settings(max_examples=_examples(25))
@given(
    x=inputs(max_n=65),
    network=st.sampled_from(SORTING),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
    art_lambda=ART_LAMBDA,
    return_matrix=st.booleans(),
    descending=st.booleans(),
)
def test_sort_matches_reference(x, network, relaxation, steepness, art_lambda, return_matrix, descending):
    kw = dict(
        network=network,
        relaxation=relaxation,
        steepness=steepness,
        art_lambda=art_lambda,
        return_matrix=return_matrix,
        descending=descending,
    )
    for backend in _kernels_for(x.shape):
        _compare(
            lambda v, b=backend: relaxops.sort(v, backend=b, **kw),
            lambda v: relaxops.sort(v, backend="reference", **kw),
            x,
            scale=max(1.0, x.shape[-1] / 10),
        )


@settings(max_examples=_examples(20))
@given(
    x=inputs(max_n=33),
    network=st.sampled_from(SORTING),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
    descending=st.booleans(),
)
def test_rank_matches_reference(x, network, relaxation, steepness, descending):
    kw = dict(network=network, relaxation=relaxation, steepness=steepness, descending=descending)
    n = x.shape[-1]
    for backend in _kernels_for(x.shape):
        _compare(
            lambda v, b=backend: relaxops.rank(v, backend=b, **kw),
            lambda v: relaxops.rank(v, backend="reference", **kw),
            x,
            scale=n,
        )
    r = relaxops.rank(x, **kw).double()
    torch.testing.assert_close(
        r.sum(-1),
        torch.full(r.shape[:-1], n * (n + 1) / 2, dtype=torch.float64),
        rtol=0,
        atol=4 * torch.finfo(x.dtype).eps * n * n,
    )


def _matrix_rank(x, **kw):
    """Ranks by their definition: the reference's relaxed permutation matrix times the positions 1..n (with
    ``descending``, the columns of X are reversed, so this is n + 1 - rank)."""
    X = relaxops.sort(x, backend="reference", **kw)[1]
    return X @ torch.arange(1, x.shape[-1] + 1, dtype=X.dtype)


@settings(max_examples=_examples(15))
@given(
    x=inputs(max_n=33),
    network=st.sampled_from(SORTING),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
    art_lambda=ART_LAMBDA,
    descending=st.booleans(),
)
def test_rank_is_the_matrix_definition(x, network, relaxation, steepness, art_lambda, descending):
    """Ranks without the matrix (docs/math/sortnet.md §5), on every backend and the reference's reverse pass, equal
    ``X @ (1..n)``: outputs and gradients."""
    kw = dict(network=network, relaxation=relaxation, steepness=steepness, art_lambda=art_lambda, descending=descending)
    for backend in sorted(b for b in BACKENDS if b != "triton" or _small(x.shape)):
        _compare(
            lambda v, b=backend: relaxops.rank(v, backend=b, **kw),
            lambda v: _matrix_rank(v, **kw),
            x,
            scale=x.shape[-1],
        )


@settings(max_examples=_examples(25))
@given(
    x=inputs(max_n=65),
    data=st.data(),
    network=st.sampled_from(SORTING + ("splitter_selection",)),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
    art_lambda=ART_LAMBDA,
)
def test_topk_matches_reference(x, data, network, relaxation, steepness, art_lambda):
    n = x.shape[-1]
    k = data.draw(st.sampled_from(sorted({1, n, max(1, n // 2), min(n, 3)})), label="k")
    kw = dict(network=network, relaxation=relaxation, steepness=steepness, art_lambda=art_lambda)
    for backend in _kernels_for(x.shape):
        _compare(
            lambda v, b=backend: relaxops.topk(v, k, backend=b, **kw),
            lambda v: relaxops.topk(v, k, backend="reference", **kw),
            x,
            scale=max(1.0, n / 10),
        )


@settings(max_examples=_examples(15))
@given(
    x=inputs(max_n=33),
    data=st.data(),
    method=st.sampled_from(SORTING + ("splitter_selection",)),
    relaxation=RELAXATION,
    inverse_temperature=STEEPNESS,
    top1_mode=st.sampled_from(["sm", "smce", "sort"]),
    reduction=st.sampled_from(["mean", "sum", "none"]),
)
def test_topk_loss_matches_reference(x, data, method, relaxation, inverse_temperature, top1_mode, reduction):
    n = x.shape[-1]
    x = x.reshape(-1, n)
    assume(x.shape[0] >= 1)
    K = data.draw(st.integers(1, n), label="K")
    p_k = torch.rand(K, dtype=torch.float64, generator=torch.Generator().manual_seed(K)) + 0.1
    m = data.draw(st.sampled_from([None] + ([n - 1] if K < n - 1 else [])), label="m")
    target = torch.randint(0, n, (x.shape[0],), generator=torch.Generator().manual_seed(n))
    target[1:2] = -100  # ignored (the second sample, if any: the mean over no sample is NaN, as torch's)
    kw = dict(
        p_k=(p_k / p_k.sum()).tolist(),
        method=method,
        relaxation=relaxation,
        inverse_temperature=inverse_temperature,
        m=m,
        top1_mode=top1_mode,
        reduction=reduction,
    )
    ref = relaxops.TopKCrossEntropyLoss(**kw, backend="reference")
    for backend in _kernels_for(x.shape):
        loss = relaxops.TopKCrossEntropyLoss(**kw, backend=backend)
        _compare(lambda v, f=loss: f(v, target), lambda v: ref(v, target), x, scale=n)


@settings(max_examples=_examples(15))
@given(x=inputs(max_n=33), network=st.sampled_from(SORTING), relaxation=RELAXATION, steepness=STEEPNESS, data=st.data())
def test_modules_equal_the_functions(x, network, relaxation, steepness, data):
    """DiffSortNet / DiffTopkNet and the compat modules are the functional ops (the same call, bit for bit)."""
    n = x.shape[-1]
    k = data.draw(st.integers(1, n), label="k")
    s, X = relaxops.sort(x, network, relaxation, steepness)
    s2, X2 = relaxops.DiffSortNet(network, n, relaxation, steepness)(x)
    assert torch.equal(s, s2) and torch.equal(X, X2)
    P = relaxops.topk(x, k, network, relaxation, steepness)
    assert torch.equal(relaxops.DiffTopkNet(network, n, k, steepness=steepness, distribution=relaxation)(x)[1], P)
    x2 = x.reshape(-1, n)
    if network != "bitonic":  # the compat names: diffsort's 'bitonic' is relaxops' 'bitonic_original'
        name = "bitonic" if network == "bitonic_original" else network
        s3, X3 = compat_diffsort.DiffSortNet(name, n, steepness=steepness, distribution=relaxation)(x2)
        s4, X4 = relaxops.sort(x2, network, relaxation, steepness)
        assert torch.equal(s3, s4) and torch.equal(X3, X4)
        _, P3 = compat_difftopk.DiffTopkNet(name, n, k, steepness=steepness, distribution=relaxation)(x2)
        assert torch.equal(P3, relaxops.topk(x2, k, network, relaxation, steepness))


# --- extreme inputs: invariants on every backend ----------------------------------------------------------------


@st.composite
def extreme_inputs(draw, max_n=33, allow_nonfinite=True):
    n = draw(SIZES.filter(lambda v: v <= max_n))
    shape = draw(BATCH) + (n,)
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    return layout(draw(extreme(shape, dtype, allow_nonfinite=allow_nonfinite)), draw(LAYOUTS))


def _sorts(network, n) -> bool:
    return network != "bitonic_original" or not _original_bitonic_broken(n)


def _slack(x, finite):
    """Rounding slack of mixing values of magnitude up to max|finite| in x's compute dtype."""
    eps = 1e-3 if x.dtype in (torch.float16, torch.bfloat16) else 1e-5
    return eps * (1.0 + (finite.abs().max().item() if finite.numel() else 0.0))


def _check_rows(x, s, X, network, descending=False):
    """Invariants of a relaxed sort of the rows of x (any batch shape), row by row."""
    n = x.shape[-1]
    xs, ss = x.reshape(-1, n).double(), s.reshape(-1, n).double()
    Xs = X.reshape(-1, n, n).double()
    if descending:
        ss, Xs = ss.flip(-1), Xs.flip(-1)
    tol = (1e-3 if x.dtype in (torch.float16, torch.bfloat16) else 1e-5) * n
    ones = torch.ones(n, dtype=torch.float64)
    for r in range(xs.shape[0]):
        row = xs[r]
        if row.isnan().any():
            assert ss[r].isnan().any(), "NaN propagates"
            continue
        assert Xs[r].isfinite().all(), "finite matrix"
        torch.testing.assert_close(Xs[r].sum(0), ones, rtol=0, atol=tol)
        torch.testing.assert_close(Xs[r].sum(1), ones, rtol=0, atol=tol)
        assert (Xs[r] >= -tol).all()
        ninf, pinf = int((row == -math.inf).sum()), int((row == math.inf).sum())
        if _sorts(network, n):
            assert (ss[r, :ninf] == -math.inf).all() and (ss[r, n - pinf :] == math.inf).all(), "infinities at the ends"
            mid, finite = ss[r, ninf : n - pinf], row[row.isfinite()]
            assert mid.isfinite().all()
            if mid.numel():
                slack = _slack(x, finite)
                assert (mid >= finite.min() - slack).all() and (mid <= finite.max() + slack).all(), "convex mixtures"


@settings(max_examples=_examples(30))
@given(
    x=extreme_inputs(),
    network=st.sampled_from(SORTING),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
    art_lambda=ART_LAMBDA,
    descending=st.booleans(),
)
def test_sort_invariants_on_extreme_inputs(x, network, relaxation, steepness, art_lambda, descending):
    kw = dict(network=network, relaxation=relaxation, steepness=steepness, art_lambda=art_lambda, descending=descending)
    for backend in sorted(b for b in BACKENDS if b != "triton" or _small(x.shape)):
        f = functools.partial(relaxops.sort, backend=backend, **kw)
        s, X, grad = _run(f, x)
        assert s.shape == x.shape and X.shape == x.shape + x.shape[-1:] and s.dtype == x.dtype
        _check_rows(x, s, X, network, descending)
        if not x.isnan().any():  # NaN propagates within its row (rows are independent, checked below)
            _assert_finite_grad(f, x, grad)
        if x.dim() > 1 and x.shape[0] > 1:  # rows are independent: the first rows alone give the same result
            s1, X1 = relaxops.sort(x[:1], backend=backend, **kw)
            torch.testing.assert_close(s1, s[:1], equal_nan=True)
            torch.testing.assert_close(X1, X[:1], equal_nan=True)


@settings(max_examples=_examples(25))
@given(
    x=extreme_inputs(),
    data=st.data(),
    network=st.sampled_from(SORTING + ("splitter_selection",)),
    relaxation=RELAXATION,
    steepness=STEEPNESS,
)
def test_topk_and_rank_invariants_on_extreme_inputs(x, data, network, relaxation, steepness):
    n = x.shape[-1]
    k = data.draw(st.integers(1, n), label="k")
    rows = x.reshape(-1, n).double()
    keep = ~rows.isnan().any(-1)  # NaN propagates within its row; the other rows are checked
    rows = rows[keep]
    tol = (1e-3 if x.dtype in (torch.float16, torch.bfloat16) else 1e-5) * n
    for backend in sorted(b for b in BACKENDS if b != "triton" or _small(x.shape)):
        f = functools.partial(
            relaxops.topk, k=k, network=network, relaxation=relaxation, steepness=steepness, backend=backend
        )
        P, grad = _run(f, x)
        assert P.shape == x.shape + (k,) and P.dtype == x.dtype
        if keep.all():
            _assert_finite_grad(f, x, grad)
        P = P.reshape(-1, n, k).double()[keep]
        assert P.isfinite().all()
        torch.testing.assert_close(P.sum(1), torch.ones(P.shape[0], k, dtype=torch.float64), rtol=0, atol=tol)
        if _sorts(network, n):
            # rank 1 (column k - 1) belongs to the +inf entries if any; -inf entries are never in the top k
            # while there are k larger entries
            pinf = (rows == math.inf).any(-1)
            top_on_inf = (P[:, :, k - 1] * (rows == math.inf)).sum(-1)
            torch.testing.assert_close(top_on_inf[pinf], torch.ones_like(top_on_inf[pinf]), rtol=0, atol=tol)
            enough = (rows > -math.inf).sum(-1) >= k
            assert (P[enough] * (rows[enough] == -math.inf).unsqueeze(-1)).abs().le(tol).all()
        if network != "splitter_selection":
            f = functools.partial(
                relaxops.rank, network=network, relaxation=relaxation, steepness=steepness, backend=backend
            )
            r, grad_r = _run(f, x)
            if keep.all():
                _assert_finite_grad(f, x, grad_r)
            r = r.reshape(-1, n).double()[keep]
            assert r.isfinite().all()
            assert ((r >= 1 - tol) & (r <= n + tol)).all()


@settings(max_examples=_examples(15))
@given(
    x=extreme_inputs(allow_nonfinite=False),
    data=st.data(),
    method=st.sampled_from(SORTING + ("splitter_selection",)),
    top1_mode=st.sampled_from(["sm", "smce", "sort"]),
)
def test_topk_loss_is_finite_on_extreme_finite_inputs(x, data, method, top1_mode):
    n = x.shape[-1]
    x = x.reshape(-1, n)
    assume(x.shape[0] >= 1)
    K = data.draw(st.integers(1, n), label="K")
    target = torch.randint(0, n, (x.shape[0],), generator=torch.Generator().manual_seed(n))
    for backend in sorted(b for b in BACKENDS if b != "triton" or _small(x.shape)):
        loss = relaxops.TopKCrossEntropyLoss([1 / K] * K, method=method, top1_mode=top1_mode, backend=backend)
        f = functools.partial(loss, target=target)
        value, grad = _run(f, x)
        assert value.isfinite().all()
        _assert_finite_grad(f, x, grad)
