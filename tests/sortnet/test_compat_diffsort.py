"""relaxops.compat.diffsort against diffsort: dense networks, outputs, gradients, module, errors."""

import importlib
import warnings

import numpy as np
import pytest
import torch

diffsort = pytest.importorskip("diffsort")

from relaxops.compat import diffsort as compat  # noqa: E402
from relaxops.sortnet import networks  # noqa: E402

DISTRIBUTIONS = ("logistic", "logistic_phi", "gaussian", "reciprocal", "cauchy", "optimal")
SIZES = (2, 3, 5, 7, 8, 16, 22, 33)
# 1/s exact in float32 for 0.5 and 32, not for 10 (see _tolerated_float64_gaussian)
STEEPNESS = (0.5, 10.0, 32.0)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The problems here are tiny: intra-op threads only add overhead (seconds on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _quiet_wiring_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="the original .diffsort. bitonic", category=RuntimeWarning)
        yield


def sort_and_grad_for(module, net, x, steepness, distribution, gs, gX):
    """Outputs and the input gradient of a random linear functional of both outputs."""
    x = x.detach().clone().requires_grad_(True)
    s, X = module.sort(net, x, steepness=steepness, distribution=distribution)
    loss = (s * gs.to(s.dtype)).sum() + (X * gX.to(X.dtype)).sum()
    (g,) = torch.autograd.grad(loss, x)
    return s, X, g


def close(actual, expected, tol, what):
    scale = 1.0 + expected.abs().max().item() if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale, msg=lambda m: f"{what}\n{m}")


def _tolerated_float64_gaussian(steepness):
    """diffsort's NormalCDF saves sigma = 1/steepness as a float32 tensor and uses it in backward, so its
    float64 gaussian gradients carry that rounding (~1e-8 relative) unless 1/steepness is exact in float32."""
    sigma = 1.0 / steepness
    return float(np.float32(sigma)) != sigma


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("network", ["bitonic", "odd_even"])
def test_agrees_with_diffsort(network, distribution, n):
    g = torch.Generator().manual_seed(n * 100 + DISTRIBUTIONS.index(distribution))
    B = 3
    x64 = torch.randn(B, n, generator=g, dtype=torch.float64)
    gs = torch.randn(B, n, generator=g, dtype=torch.float64)
    gX = torch.randn(B, n, n, generator=g, dtype=torch.float64)
    ref_net = diffsort.get_sorting_network(network, n, "cpu")
    our_net = compat.get_sorting_network(network, n, "cpu")
    for steepness in STEEPNESS:
        what = f"{network} n={n} {distribution} s={steepness}"
        # float64: outputs and gradients to 1e-12
        exact = sort_and_grad_for(diffsort, ref_net, x64, steepness, distribution, gs, gX)
        ours = sort_and_grad_for(compat, our_net, x64, steepness, distribution, gs, gX)
        for name, a, e in zip("sXg", ours, exact):
            assert a.dtype == torch.float64
            quirk = name == "g" and distribution == "gaussian" and _tolerated_float64_gaussian(steepness)
            tol = 1e-6 if quirk else 1e-12
            close(a, e, tol, f"float64 {name}: {what}")
        # float32: outputs to 1e-5. Gradients: to 1e-5, or as accurate (vs float64) as diffsort in float32 up
        # to the suite's float32 tolerance (1e-4, tests/testing.py): both are float32 rounding amplified by
        # the conditioning (logistic_phi's slope near ties), and diffsort itself is up to ~1e-4 off there.
        x32 = x64.float()
        ref32 = sort_and_grad_for(diffsort, ref_net, x32, steepness, distribution, gs, gX)
        ours32 = sort_and_grad_for(compat, our_net, x32, steepness, distribution, gs, gX)
        for name, a, r, e in zip("sXg", ours32, ref32, exact):
            assert a.dtype == torch.float32
            if name != "g":
                close(a, r, 1e-5, f"float32 {name}: {what}")
                continue
            scale = 1.0 + e.abs().max().item()
            diff = (a - r).abs().max().item() / scale
            err = (a.double() - e).abs().max().item() / scale
            ref_err = (r.double() - e).abs().max().item() / scale
            assert diff <= 1e-5 or err <= 2 * ref_err + 1e-4, (
                f"float32 gradient: {what}: differs from diffsort by {diff:.2e}; error vs float64 {err:.2e}, "
                f"diffsort's {ref_err:.2e}"
            )


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 13, 16, 22, 33, 100])
def test_bitonic_network_dense_matrices_equal_diffsort(n):
    ref, ours = diffsort.bitonic_network(n), compat.bitonic_network(n)
    assert len(ours) == len(ref)
    for layer_ref, layer in zip(ref, ours):
        assert len(layer) == 4
        for m_ref, m in zip(layer_ref, layer):
            assert isinstance(m, np.ndarray) and m.dtype == m_ref.dtype and np.array_equal(m, m_ref)


@pytest.mark.parametrize("n", range(1, 11))
def test_odd_even_network_dense_matrices_equal_diffsort(n):
    ref, ours = diffsort.odd_even_network(n), compat.odd_even_network(n)
    assert len(ours) == len(ref) == n
    for layer_ref, layer in zip(ref, ours):
        for m_ref, m in zip(layer_ref, layer):
            assert m.dtype == m_ref.dtype and np.array_equal(m, m_ref)


def test_bitonic_network_n1_is_empty_like_diffsort():
    assert compat.bitonic_network(1) == diffsort.bitonic_network(1) == []


@pytest.mark.parametrize("network,n", [("bitonic", 1), ("bitonic", 6), ("odd_even", 1), ("odd_even", 7)])
def test_get_sorting_network_equals_diffsort(network, n):
    ref, ours = diffsort.get_sorting_network(network, n, "cpu"), compat.get_sorting_network(network, n, "cpu")
    assert type(ours) is type(ref) and len(ours) == len(ref)
    for layer_ref, layer in zip(ref, ours):
        assert type(layer) is type(layer_ref)
        for m_ref, m in zip(layer_ref, layer):
            assert m.dtype == torch.float32 and m.device == m_ref.device and torch.equal(m, m_ref)


def test_get_sorting_network_unknown_type():
    with pytest.raises(NotImplementedError, match="Sorting network `bubble` unknown"):
        compat.get_sorting_network("bubble", 4, "cpu")
    with pytest.raises(ValueError, match="'bitonic' and 'odd_even'"):
        compat.get_sorting_network("bubble", 4, "cpu")


# --- dense networks built by the user -----------------------------------------------------------------------


def _to_torch(dense):
    return [[torch.from_numpy(m.copy()) for m in layer] for layer in dense]


def _random_network(n, num_layers, rng):
    """Dense random comparator network: random directions and slot order, 'a' above 'b' sometimes."""
    layers = []
    for _ in range(num_layers):
        perm = rng.permutation(n)
        k = rng.integers(0, n // 2 + 1)
        slots = [(int(perm[2 * q]), int(perm[2 * q + 1])) for q in range(k)]
        slots += [(int(w), int(w)) for w in perm[2 * k :]]
        rng.shuffle(slots)
        c = len(slots)
        sa, sb, cmin, cmax = np.zeros((c, n)), np.zeros((c, n)), np.zeros((n, c)), np.zeros((n, c))
        for t, (a, b) in enumerate(slots):
            sa[t, a], sb[t, b] = 1, 1
            if a == b:
                wm = rng.choice([0.5, 1.0, 0.0, 0.25])
                cmin[a, t], cmax[a, t] = wm, 1 - wm
            else:
                i, j = (a, b) if rng.random() < 0.5 else (b, a)
                cmin[i, t], cmax[j, t] = 1, 1
        layers.append((sa, sb, cmin, cmax))
    return layers


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_random_user_network_agrees_with_diffsort(distribution):
    rng = np.random.default_rng(DISTRIBUTIONS.index(distribution))
    g = torch.Generator().manual_seed(1)
    for n in (2, 5, 9):
        net = _to_torch(_random_network(n, 6, rng))
        x = torch.randn(4, n, generator=g, dtype=torch.float64)
        gs = torch.randn(4, n, generator=g, dtype=torch.float64)
        gX = torch.randn(4, n, n, generator=g, dtype=torch.float64)
        exact = sort_and_grad_for(diffsort, net, x, 2.0, distribution, gs, gX)
        ours = sort_and_grad_for(compat, net, x, 2.0, distribution, gs, gX)
        for name, a, e in zip("sXg", ours, exact):
            close(a, e, 1e-12, f"random network n={n} {distribution} {name}")
        key = compat.functional._network_key(net, x)
        assert key.startswith("custom:")


def test_dense_network_from_numpy_or_tensors_is_recognised_and_cached(monkeypatch):
    x = torch.randn(3, 13, dtype=torch.float64)
    net = _to_torch(diffsort.bitonic_network(13))  # not built by compat.get_sorting_network: converted
    assert compat.functional._network_key(net, x) == "bitonic_original"
    assert compat.functional._network_key(_to_torch(diffsort.odd_even_network(13)), x) == "odd_even"
    assert compat.functional._network_key(diffsort.odd_even_network(13), x) == "odd_even"  # numpy layers

    def boom(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(compat.functional, "_convert", boom)
    assert compat.functional._network_key(net, x) == "bitonic_original"  # cached
    seeded = compat.get_sorting_network("odd_even", 5, "cpu")  # remembered when built
    assert compat.functional._network_key(seeded, x[:, :5]) == "odd_even"
    s, X = compat.sort(net, x)
    s_ref, X_ref = diffsort.sort(net, x)
    close(s, s_ref, 1e-12, "sorted")
    close(X, X_ref, 1e-12, "X")


def test_in_place_change_of_the_network_is_noticed():
    n = 6
    net = compat.get_sorting_network("odd_even", n, "cpu")
    x = torch.randn(2, n, dtype=torch.float64)
    before = compat.sort(net, x)
    # make comparator slot 0 of layer 0 descending: the min goes to wire 1, the max to wire 0
    _, _, cmin, cmax = net[0]
    cmin[:, 0], cmax[:, 0] = 0, 0
    cmin[1, 0], cmax[0, 0] = 1, 1
    after, ref = compat.sort(net, x), diffsort.sort(net, x)
    assert compat.functional._network_key(net, x).startswith("custom:")
    assert not torch.allclose(after[0], before[0])
    close(after[0], ref[0], 1e-12, "sorted after an in-place change")
    close(after[1], ref[1], 1e-12, "X after an in-place change")


def _bad(net, layer, slot_fn):
    net = [list(m.clone() for m in lay) for lay in net]
    slot_fn(*net[layer])
    return net


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda sa, sb, cm, cx: sa.__setitem__((0, 3), 1.0), r"layer 1, slot 0: split_a must select exactly one"),
        (lambda sa, sb, cm, cx: sb.__setitem__((1,), sb[1] * 0.5), r"slot 1: split_b must select exactly"),
        (
            lambda sa, sb, cm, cx: (cm.__setitem__((slice(None), 0), 0), cm.__setitem__((5, 0), 1)),
            r"layer 1, slot 0: it reads wires 1 and 2 but writes wires 5 \(min\) and 2 \(max\)",
        ),
        (lambda sa, sb, cm, cx: cx.__setitem__((slice(None), 0), 0), r"layer 1, slot 0: combine_max of a"),
        (lambda sa, sb, cm, cx: cm.__setitem__((0, 2), 1.0), r"layer 1, slot 2: a slot reading wire 0 twice"),
        (lambda sa, sb, cm, cx: cm.__setitem__((0, 2), 0.25), r"weights summing to 1"),
    ],
)
def test_dense_matrices_that_are_not_comparator_layers_are_rejected(mutate, match):
    net = _bad(compat.get_sorting_network("odd_even", 6, "cpu"), 1, mutate)
    with pytest.raises(ValueError, match=match):
        compat.sort(net, torch.randn(2, 6))


def test_dense_network_structure_errors():
    x = torch.randn(2, 4)
    net = compat.get_sorting_network("odd_even", 4, "cpu")
    with pytest.raises(ValueError, match="layer 2 must be \\(split_a, split_b, combine_min, combine_max\\)"):
        compat.sort(net[:2] + [net[2][:3]], x)
    with pytest.raises(TypeError, match="must be a list of layers"):
        compat.sort(net[0][0], x)
    with pytest.raises(TypeError, match="2-D torch tensors or numpy arrays"):
        compat.sort([[1, 2, 3, 4]], x)
    with pytest.raises(ValueError, match=r"layer 1: combine_min has shape \(3, 3\), expected \(4, 3\)"):
        compat.sort([net[0], [net[1][0], net[1][1], net[1][2][:3], net[1][3]]], x)
    # wire 3 written by two slots: duplicate a slot
    sa, sb, cm, cx = net[0]
    dup = [
        torch.cat([sa, sa[:1]]),
        torch.cat([sb, sb[:1]]),
        torch.cat([cm, cm[:, :1]], 1),
        torch.cat([cx, cx[:, :1]], 1),
    ]
    with pytest.raises(ValueError, match="layer 0: wire 0 is written by 2 slots"):
        compat.sort([dup], x)
    with pytest.raises(ValueError, match=r"network has 4 wires but the vectors have shape \(2, 5"):
        compat.sort(net, torch.randn(2, 5))


def test_device_mismatch_is_a_value_error():
    net = [[m.to("meta") for m in layer] for layer in diffsort.get_sorting_network("odd_even", 4, "cpu")]
    with pytest.raises(ValueError, match="sorting network is on device meta while the vectors are on device"):
        compat.sort(net, torch.randn(2, 4))
    m = compat.DiffSortNet("odd_even", 4, device="meta")
    with pytest.raises(ValueError, match="on device meta while the vectors are on device cpu"):
        m(torch.randn(2, 4))


# --- DiffSortNet ------------------------------------------------------------------------------------------

ATTRIBUTES = ("sorting_network_type", "size", "steepness", "art_lambda", "distribution")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(steepness=3.0, art_lambda=0.5, distribution="logistic_phi"),
        dict(interpolation_type="logistic"),
        dict(interpolation_type="gaussian", distribution="gaussian"),
        dict(interpolation_type="optimal", distribution=None),
        dict(distribution=None),
    ],
)
@pytest.mark.parametrize("network,n", [("bitonic", 6), ("odd_even", 5), ("bitonic", 8)])
def test_diffsortnet_attributes_and_forward_match_diffsort(network, n, kwargs):
    ref, ours = diffsort.DiffSortNet(network, n, **kwargs), compat.DiffSortNet(network, n, **kwargs)
    for a in ATTRIBUTES:
        assert getattr(ours, a) == getattr(ref, a), a
    if ref.distribution is None:  # diffsort fails at forward, with NotImplementedError
        with pytest.raises(NotImplementedError):
            ref(torch.randn(2, n))
        with pytest.raises(NotImplementedError, match="softmax method `None` unknown"):
            ours(torch.randn(2, n))
        return
    x = torch.randn(4, n, dtype=torch.float64)
    s, X = ours(x)  # fast path: the dense network was never built
    assert ours._dense is None
    s_ref, X_ref = ref(x)
    close(s, s_ref, 1e-12, "sorted")
    close(X, X_ref, 1e-12, "X")
    # the attribute holds diffsort's dense network; reading it switches forward to what it holds
    assert len(ours.sorting_network) == len(ref.sorting_network)
    for lo, lr in zip(ours.sorting_network, ref.sorting_network):
        assert all(torch.equal(a, b) for a, b in zip(lo, lr))
    s2, X2 = ours(x)
    assert torch.equal(s2, s) and torch.equal(X2, X)


def test_diffsortnet_replaced_network_is_used():
    m = compat.DiffSortNet("bitonic", 8)
    m.sorting_network = compat.get_sorting_network("odd_even", 8, "cpu")
    x = torch.randn(3, 8, dtype=torch.float64)
    close(m(x)[1], diffsort.DiffSortNet("odd_even", 8)(x)[1], 1e-12, "X with a replaced network")


def test_diffsortnet_conflicting_distributions():
    with pytest.raises(AssertionError):
        diffsort.DiffSortNet("bitonic", 4, interpolation_type="logistic", distribution="gaussian")
    with pytest.raises(ValueError, match="Two different distributions have been set"):
        compat.DiffSortNet("bitonic", 4, interpolation_type="logistic", distribution="gaussian")


def test_diffsortnet_unknown_type_and_bad_size():
    with pytest.raises(NotImplementedError, match="Sorting network `bubble` unknown"):
        compat.DiffSortNet("bubble", 4)
    with pytest.raises(ValueError, match="size|n must be an integer >= 1"):
        compat.DiffSortNet("odd_even", 0)


@pytest.mark.parametrize("network", ["bitonic", "odd_even"])
def test_n1_is_the_identity(network):
    x = torch.randn(5, 1, dtype=torch.float64, requires_grad=True)
    s, X = compat.DiffSortNet(network, 1)(x)
    assert torch.equal(s, x) and torch.equal(X, torch.ones(5, 1, 1, dtype=torch.float64))
    s.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    s, X = compat.sort(compat.get_sorting_network(network, 1, "cpu"), x)
    assert torch.equal(s, x) and torch.equal(X, torch.ones(5, 1, 1, dtype=torch.float64))
    if network == "bitonic":  # diffsort crashes here (docs/math/sortnet.md §2.4)
        with pytest.raises(IndexError):
            diffsort.DiffSortNet(network, 1)(x)


def test_empty_network_is_the_identity():
    x = torch.randn(2, 3)
    s, X = compat.sort([], x)
    assert torch.equal(s, x) and torch.equal(X, torch.eye(3).expand(2, 3, 3))


def test_warning_for_sizes_the_bitonic_wiring_does_not_sort(monkeypatch):
    monkeypatch.setattr(networks, "_warned_broken", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compat.DiffSortNet("bitonic", 16)
        compat.DiffSortNet("odd_even", 22)
        compat.sort(compat.get_sorting_network("bitonic", 21, "cpu"), torch.randn(2, 21))
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    with pytest.warns(RuntimeWarning, match="not a sorting network for n = 22"):
        m = compat.DiffSortNet("bitonic", 22)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(torch.randn(2, 22))  # once per n
    monkeypatch.setattr(networks, "_warned_broken", set())
    with pytest.warns(RuntimeWarning, match="not a sorting network for n = 38"):
        compat.sort(_to_torch(diffsort.bitonic_network(38)), torch.randn(2, 38))


def test_half_precision_is_computed_in_float32():
    n = 16
    x = torch.randn(8, n, dtype=torch.float64)
    net = compat.get_sorting_network("bitonic", n, "cpu")
    s16, X16 = compat.sort(net, x.half())
    assert s16.dtype == X16.dtype == torch.float16
    s32, X32 = diffsort.sort(net, x.half().float())
    torch.testing.assert_close(s16, s32.half(), rtol=0, atol=2e-3)
    torch.testing.assert_close(X16, X32.half(), rtol=0, atol=1e-3)
    # at least as accurate as diffsort's own float16 mixing (vs float64)
    s64, X64 = diffsort.sort(net, x.half().double())
    ref16 = diffsort.sort(net, x.half())
    for ours, ref, exact in zip((s16, X16), ref16, (s64, X64)):
        assert (ours.double() - exact).abs().max() <= (ref.double() - exact).abs().max() + 1e-3


@pytest.mark.parametrize("call", ["sort", "module"])
def test_bad_inputs(call):
    net = compat.get_sorting_network("odd_even", 4, "cpu")
    module = compat.DiffSortNet("odd_even", 4)

    def f(v, **kw):
        if call == "sort":
            return compat.sort(net, v, **kw)
        for k, val in kw.items():
            setattr(module, k, val)
        return module(v)

    shape_msg = "2-D" if call == "sort" else r"sorts 2-D inputs \[batch, 4\]"
    with pytest.raises(ValueError, match=shape_msg):
        f(torch.randn(4))
    with pytest.raises(ValueError, match=shape_msg):
        f(torch.randn(2, 3, 4))
    if call == "module":
        with pytest.raises(ValueError, match=r"got shape \(2, 5\)"):
            f(torch.randn(2, 5))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        f([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        f(torch.arange(8).reshape(2, 4))
    with pytest.raises(NotImplementedError, match="softmax method `softmax` unknown"):
        f(torch.randn(2, 4), distribution="softmax")
    with pytest.raises(ValueError, match="distribution must be one of"):
        f(torch.randn(2, 4), distribution="softmax")
    with pytest.raises(ValueError, match="steepness must be a finite number > 0"):
        f(torch.randn(2, 4), distribution="cauchy", steepness=0.0)
    with pytest.raises(ValueError, match=r"art_lambda must be a number in \[0.0, 1.0\]"):
        f(torch.randn(2, 4), steepness=1.0, art_lambda=2.0, distribution="logistic_phi")
    with pytest.raises(ValueError, match=r"art_lambda must be a number in \[0.0, 1.0\], got None"):
        f(torch.randn(2, 4), art_lambda=None, distribution="logistic_phi")


def test_steepness_as_tensor_or_numpy_scalar():
    net = compat.get_sorting_network("odd_even", 5, "cpu")
    x = torch.randn(2, 5, dtype=torch.float64)
    ref = diffsort.sort(net, x, steepness=4.0)
    for s in (torch.tensor(4.0), np.float32(4.0), 4):
        close(compat.sort(net, x, steepness=s)[1], ref[1], 1e-12, f"steepness {s!r}")


# --- art_lambda=None, submodules -------------------------------------------------------------------------------


@pytest.mark.parametrize("distribution", [d for d in DISTRIBUTIONS if d != "logistic_phi"])
def test_art_lambda_is_read_only_by_logistic_phi(distribution):
    """diffsort ignores art_lambda unless distribution='logistic_phi' (its README passes art_lambda=None)."""
    x = torch.randn(3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    net = compat.get_sorting_network("odd_even", 6, "cpu")
    expected = diffsort.sort(net, x, 4.0, None, distribution)
    for art_lambda in (None, 2.0):
        close(compat.sort(net, x, 4.0, art_lambda, distribution)[1], expected[1], 1e-12, f"sort {art_lambda}")
        ours = compat.DiffSortNet("bitonic", 6, steepness=4.0, art_lambda=art_lambda, distribution=distribution)
        theirs = diffsort.DiffSortNet("bitonic", 6, steepness=4.0, art_lambda=art_lambda, distribution=distribution)
        close(ours(x)[1], theirs(x)[1], 1e-12, f"DiffSortNet {art_lambda}")
    with pytest.raises(TypeError):  # diffsort: None ** ... inside its relaxation
        diffsort.sort(net, x, 4.0, None, "logistic_phi")
    with pytest.raises(ValueError, match=r"art_lambda must be a number in \[0.0, 1.0\], got None"):
        compat.sort(net, x, 4.0, None, "logistic_phi")


@pytest.mark.parametrize("name", ["functional", "networks", "diffsort"])
def test_submodules_have_diffsorts_names(name):
    """``from relaxops.compat.diffsort.<module> import ...`` as from diffsort's modules: every name diffsort's
    module defines is there (or documented in its docstring as left out)."""
    from testing import assert_mirrors, defined_names

    ours = importlib.import_module(f"relaxops.compat.diffsort.{name}")
    assert_mirrors(ours, defined_names(importlib.import_module(f"diffsort.{name}")))
    for attr in ours.__all__:
        if hasattr(compat, attr):
            assert getattr(ours, attr) is getattr(compat, attr)


def test_functional_helpers_equal_diffsorts():
    from diffsort import functional as theirs
    from relaxops.compat.diffsort import functional as ours

    x = torch.linspace(-2, 2, 41, dtype=torch.float64)
    pairs = {
        "s_best": (ours.s_best, theirs.s_best, ()),  # sigma = 1/4: diffsort's float32 copy of it is exact
        "NormalCDF": (ours.NormalCDF.apply, theirs.NormalCDF.apply, (0.25,)),
    }
    for what, (fn, other, args) in pairs.items():
        a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ya, yb = fn(a, *args), other(b, *args)
        close(ya, yb, 1e-12, what)
        (ga,) = torch.autograd.grad(ya.sum(), a)
        (gb,) = torch.autograd.grad(yb.sum(), b)
        close(ga, gb, 1e-12, f"{what} gradient")
    net = compat.get_sorting_network("bitonic", 5, "cpu")
    v = torch.randn(2, 5, dtype=torch.float64)
    for got, want in zip(ours.execute_sort(net, v, 3.0), theirs.execute_sort(net, v, 3.0)):
        close(got, want, 1e-12, "execute_sort")
