"""Network construction: validity, layer/comparator counts, and hard-swap sorting (0-1 principle)."""

import itertools

import numpy as np
import pytest
import relaxops
import torch
from relaxops.sortnet import networks
from relaxops.sortnet.networks import ORIGINAL_BITONIC_BROKEN, comparator_count, get_network, network_layers

KINDS = ("bitonic", "odd_even", "bitonic_original")


def hard_network(layers, x: np.ndarray) -> np.ndarray:
    """Apply the network with hard comparators to the rows of x (vectorised per layer)."""
    x = x.copy()
    for layer in layers:
        if not layer:
            continue
        i = np.array([c[0] for c in layer])
        j = np.array([c[1] for c in layer])
        lo, hi = np.minimum(x[:, i], x[:, j]), np.maximum(x[:, i], x[:, j])
        x[:, i], x[:, j] = lo, hi
    return x


def sorts(layers, n, samples=2000, seed=0) -> bool:
    rng = np.random.default_rng(seed)
    if n <= 12:  # exhaustive 0-1 inputs: by the 0-1 principle this proves the network sorts
        x = np.array(list(itertools.product([0, 1], repeat=n)), dtype=np.int8)
    else:  # random 0-1 inputs of every density, and random permutations
        dens = rng.random((samples, 1))
        x = np.concatenate(
            [
                (rng.random((samples, n)) < dens).astype(np.int16),
                np.argsort(rng.random((samples, n)), axis=1).astype(np.int16),
            ]
        )
    return bool((np.diff(hard_network(layers, x), axis=1) >= 0).all())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", list(range(1, 40)) + [64, 100, 127, 128, 129])
def test_layers_are_valid(kind, n):
    for layer in network_layers(kind, n):
        wires = [w for c in layer for w in c]
        assert len(wires) == len(set(wires)), "a wire is used twice in one layer"
        assert all(0 <= w < n for w in wires)
        assert all(i != j for i, j in layer)


@pytest.mark.parametrize(
    "n,layers",
    [
        (1, 0),
        (2, 1),
        (4, 3),
        (8, 6),
        (16, 10),
        (32, 15),
        (64, 21),
        (128, 28),
        (256, 36),
        (512, 45),
        (1024, 55),
        (1000, 55),
        (100, 28),
        (5, 6),
    ],
)
def test_bitonic_layer_counts(n, layers):
    assert len(network_layers("bitonic", n)) == layers
    if n > 1:
        assert len(network_layers("bitonic_original", n)) == layers


@pytest.mark.parametrize("n", list(range(2, 70)) + [100, 129, 255, 256, 1000])
def test_bitonic_same_comparator_count_as_original(n):
    a, b = get_network("bitonic", n), get_network("bitonic_original", n)
    assert a.num_layers == b.num_layers and a.num_comparators == b.num_comparators


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 33])
def test_odd_even_counts(n):
    layers = network_layers("odd_even", n)
    assert len(layers) == n
    assert sum(map(len, layers)) == n * (n - 1) // 2
    assert all(i + 1 == j for layer in layers for i, j in layer)


def test_power_of_two_bitonic_comparators_fill_layers():
    net = get_network("bitonic_original", 64)
    assert all(len(layer) == 32 for layer in net.layers)


@pytest.mark.parametrize("n", range(1, 257))
def test_bitonic_sorts_every_n(n):
    assert sorts(network_layers("bitonic", n), n, samples=300, seed=n)


@pytest.mark.parametrize("n", list(range(1, 21)) + [33, 64, 65, 100])
def test_odd_even_sorts(n):
    assert sorts(network_layers("odd_even", n), n)


def test_original_bitonic_defect_list():
    """Re-derive the n <= 129 at which the original wiring fails to sort (docs/math/sortnet.md §2.4)."""
    broken = {n for n in range(2, 130) if not sorts(network_layers("bitonic_original", n), n, samples=3000, seed=n)}
    assert broken == set(ORIGINAL_BITONIC_BROKEN)


def test_original_bitonic_n22_counterexample():
    x = np.array([[21, 9, 10, 16, 0, 6, 7, 17, 15, 3, 2, 19, 18, 20, 13, 1, 11, 12, 14, 4, 5, 8]])
    out = hard_network(network_layers("bitonic_original", 22), x)[0]
    assert list(out[11:15]) == [12, 11, 14, 13]
    assert list(hard_network(network_layers("bitonic", 22), x)[0]) == list(range(22))


def test_original_bitonic_reproduces_diffsort_directions():
    """n = 4 reference wiring: block 0 alternates direction, block 1 is ascending."""
    assert network_layers("bitonic_original", 4) == [[(0, 1), (3, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]


def test_network_layers_errors():
    with pytest.raises(ValueError, match="network must be one of"):
        network_layers("bubble", 4)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        network_layers("bitonic", 0)
    with pytest.raises(ValueError, match="k is not used"):
        network_layers("bitonic", 8, k=2)
    for k in (0, 9, None, 2.0):
        with pytest.raises(ValueError, match=r"k must be an integer in \[1, n\] = \[1, 8\]"):
            network_layers("splitter_selection", 8, k)


def test_public_network_layers():
    assert relaxops.network_layers("odd_even", 3) == [[(0, 1)], [(1, 2)], [(0, 1)]]


# (n, k): (layers, comparators) of the splitter selection network, as difftopk builds it (docs/math/sortnet.md §2.5).
SSN_COUNTS = {
    (16, 1): (4, 32),
    (16, 5): (10, 50),
    (16, 10): (17, 72),
    (32, 5): (14, 111),
    (50, 5): (15, 181),
    (64, 10): (25, 330),
    (100, 5): (17, 385),
    (128, 1): (7, 448),
    (256, 5): (18, 1118),
    (512, 10): (32, 2769),
    (1000, 5): (22, 5085),
    (1000, 10): (34, 5589),
    (1024, 5): (22, 5273),
    (10450, 5): (27, 68085),
}


@pytest.mark.parametrize("n,k", sorted(SSN_COUNTS))
def test_splitter_selection_counts(n, k):
    net = get_network("splitter_selection", n, k)
    assert (net.num_layers, net.num_comparators) == SSN_COUNTS[(n, k)]


def test_splitter_selection_worked_example():
    assert network_layers("splitter_selection", 8, 2) == [
        [(3, 7), (2, 6), (1, 5), (0, 4)],
        [(5, 7), (4, 6), (1, 3), (0, 2)],
        [(6, 7), (4, 5), (2, 3), (0, 1)],
        [(3, 6)],
        [(5, 6)],
    ]


@pytest.mark.parametrize(
    "n,k", [(1, 1), (2, 1), (2, 2), (3, 2), (5, 3), (7, 7), (16, 5), (33, 4), (100, 5), (100, 1), (50, 50), (129, 10)]
)
def test_splitter_selection_selects_top_k(n, k):
    layers = network_layers("splitter_selection", n, k)
    for layer in layers:
        wires = [w for c in layer for w in c]
        assert len(wires) == len(set(wires)) and all(0 <= w < n for w in wires)
        assert all(i < j for i, j in layer), "all comparators ascending"
    rng = np.random.default_rng(n * 100 + k)
    x = np.concatenate(
        [np.argsort(rng.random((500, n)), axis=1), (rng.random((500, n)) < rng.random((500, 1))).astype(np.int64)]
    )
    out = hard_network(layers, x)
    assert (out[:, n - k :] == np.sort(x, axis=1)[:, n - k :]).all()


@pytest.mark.parametrize("kind", KINDS)
def test_comparator_count_without_building(kind):
    """The closed forms equal the built networks' comparator counts."""
    for n in list(range(1, 70)) + [127, 128, 129, 1000, 1023, 1025]:
        assert comparator_count(kind, n) == get_network(kind, n).num_comparators, n


def test_splitter_selection_count_without_building():
    """The count on group sizes alone equals the built network's, and stops above its limit."""
    cases = [(n, k) for n in range(1, 34) for k in range(1, n + 1)] + sorted(SSN_COUNTS) + [(300, 77), (256, 256)]
    for n, k in cases:
        assert comparator_count("splitter_selection", n, k) == get_network("splitter_selection", n, k).num_comparators
    assert (
        1000
        < comparator_count("splitter_selection", 256, 256, limit=1000)
        < comparator_count("splitter_selection", 256, 256)
    )


def test_size_limit(monkeypatch):
    """get_network (and the public functions) refuse a network of more than MAX_COMPARATORS comparators before
    building it, with n (and k), and build one at the limit."""
    get_network.cache_clear()  # networks built by other tests under the real limit
    monkeypatch.setattr(networks, "MAX_COMPARATORS", comparator_count("odd_even", 40))
    assert get_network("odd_even", 40).num_comparators == networks.MAX_COMPARATORS == 780
    with pytest.raises(
        ValueError,
        match=r"odd_even network for n = 41 has 820 comparators, more than the 780 "
        r"relaxops builds.*network='bitonic' \(\d+ comparators\)",
    ):
        get_network("odd_even", 41)
    assert comparator_count("splitter_selection", 64, 64) > 780
    with pytest.raises(ValueError, match="splitter_selection network for the top k = 64 of n = 64 has more than 780"):
        network_layers("splitter_selection", 64, 64)
    with pytest.raises(ValueError, match="odd_even network for n = 41"):
        relaxops.sort(torch.zeros(2, 41), "odd_even")
    with pytest.raises(ValueError, match="odd_even network for n = 41"):
        relaxops.rank(torch.zeros(2, 41), "odd_even")
