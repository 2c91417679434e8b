"""The benchmark's case sets and providers: every provider of every default CPU case builds and runs (at a reduced
size), default cases are plottable and their goals measurable, peers that are missing are skipped with how to
install them, and installed peers compute what ours computes (torchsort's ranks on separated input, torchlogix's
layer and circuit, pytorch3d's silhouette)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys

import pytest
import relaxops
import relaxops.bench.algorithms_dp  # noqa: F401
import relaxops.bench.framework  # noqa: F401
import relaxops.bench.ranking  # noqa: F401
import torch
from relaxops.bench import algorithms, fastsort, logic, operators, otsort, peers, registry, render, sortnet, topk  # noqa: F401

DEFAULT_CPU = [c for c in registry.CASES if c.default and c.device == "cpu"]
# Sizes every default case is run at here (only the keys a case has are replaced); packed cases use TINY_SHAPE.
REDUCED = {
    "sortnet": dict(n=8, batch=2),
    "topk": dict(n=32, batch=2),
    "logic": dict(n=64, batch=128),
    "render": dict(size=8),
    "fastsort": dict(n=9, batch=2),
    "otsort": dict(n=8, batch=2),
    "ranking": dict(n=9, batch=2),
    "operators": dict(n=9, batch=2),
    "algorithms_dp": dict(n=4, batch=2),
    "algorithms": dict(size=4, batch=2, n_iter=5),
}
TINY_SHAPE = (40, [80, 80], 10)


def reduced(case, **params):
    small = {k: v for k, v in REDUCED[case.family].items() if k in case.params}
    return dataclasses.replace(case, params={**case.params, **small, **params})


def provider(family, name):
    return next(p for p in registry.PROVIDERS[family] if p.name == name)


def case_of(family, op, **params):
    return next(
        c
        for c in registry.CASES
        if c.family == family
        and c.op == op
        and c.device == "cpu"
        and all(c.params.get(k) == v for k, v in params.items())
    )


@pytest.fixture
def tiny_packed(monkeypatch):
    """The packed MNIST cases run a network of TINY_SHAPE (its C libraries compiled afresh)."""
    monkeypatch.setitem(logic.SHAPES, "mnist_small", TINY_SHAPE)
    logic._compiled.cache_clear()
    yield
    logic._compiled.cache_clear()


# the framework's rows have their own test below (its traced provider compiles for seconds to minutes)
@pytest.mark.parametrize("case", [c for c in DEFAULT_CPU if c.family != "framework"], ids=lambda c: c.name)
def test_every_provider_of_a_default_case_runs(case, tiny_packed):
    small = reduced(case)
    ran = []
    for p in registry.PROVIDERS[case.family]:
        reason = p.skip(small)
        if reason is not None:
            assert isinstance(reason, str) and reason, p.name
            continue
        out = registry.closure(small.mode, *p.make(small))()
        tensors = [t for t in out if isinstance(t, torch.Tensor)]
        assert tensors if small.mode != "fwd" else out, p.name
        for t in tensors:
            assert t.isfinite().all(), p.name
        ran.append(p.name)
    ours = set(operators.OPERATORS) if case.family == "operators" else {"cpu", "packed"}
    assert ours & set(ran), ran  # ours runs
    assert len(ran) >= 2, ran  # against at least one other provider


def test_every_case_names_its_sweep_and_goal_provider():
    for case in registry.CASES:
        assert case.sweep in case.params, case.name
        if case.goal is not None:
            ref = provider(case.family, case.goal[0])
            assert ref.reference, case.name


@pytest.mark.parametrize(
    "family", ["sortnet", "topk", "logic", "render", "fastsort", "otsort", "ranking", "algorithms_dp", "algorithms"]
)
def test_default_set_has_a_size_sweep_per_family(family):
    """Some default CPU op of the family has >= 2 sizes with everything else equal: a line on the plot."""
    groups = {}
    for c in DEFAULT_CPU:
        if c.family == family:
            rest = tuple(sorted((k, repr(v)) for k, v in c.params.items() if k != c.sweep))
            groups.setdefault((c.op, c.mode, rest), set()).add(c.params[c.sweep])
    assert max(len(sizes) for sizes in groups.values()) >= 2, groups


@pytest.mark.parametrize("case", [c for c in DEFAULT_CPU if c.goal], ids=lambda c: c.name)
def test_default_goals_are_measured(case):
    """The goal's reference runs on the default case itself (not skipped as too slow), unless not installed."""
    reason = provider(case.family, case.goal[0]).skip(case)
    assert reason is None or "is not installed" in reason or "not available" in reason, reason


# (family, provider, module it needs, a case it applies to)
PEERS = [
    ("sortnet", "diffsort", "diffsort", dict(op="sort", network="bitonic", n=32, matrix=True)),
    ("sortnet", "torchsort", "torchsort", dict(op="rank", n=100)),
    ("topk", "difftopk", "difftopk", dict(op="topk", n=250)),
    ("logic", "torchlogix", "torchlogix", dict(op="layer", n=8000, batch=100)),
    ("render", "pytorch3d", "pytorch3d", dict(op="rasterize", size=32, setting="cauchy/yager")),
    ("render", "pytorch3d", "pytorch3d", dict(op="buffers", size=32, setting="soft")),
    ("algorithms", "algovision", "algovision", dict(op="shortest_path", size=12)),
    ("ranking", "torchsort-loop", "torchsort", dict(op="soft_rank", n=128)),
    ("ranking", "allRank", "allrank", dict(op="neural_ndcg", n=128)),
]


@pytest.mark.parametrize("family,name,module,where", PEERS, ids=[p[1] for p in PEERS])
def test_missing_peer_is_skipped_with_install_hint(monkeypatch, family, name, module, where):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == module else find_spec(m, *a))
    where = dict(where)
    op = where.pop("op")
    reason = provider(family, name).skip(case_of(family, op, **where))
    assert reason == f"{module} is not installed: {peers.INSTALL[module]}"
    assert "pip install" in reason


def test_torchsort_hint_says_to_hide_nvcc(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None)
    assert provider("sortnet", "torchsort").skip(case_of("sortnet", "rank", n=1000)) == (
        "torchsort is not installed: pip install --no-build-isolation torchsort (its build fails when nvcc is on "
        "PATH without a CUDA torch: hide nvcc)"
    )


def test_gendr_and_circuit_hints(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None)
    gpu = next(c for c in registry.CASES if c.family == "render" and c.device == "cuda")
    assert provider("render", "gendr").skip(gpu) == f"gendr is not installed: {peers.INSTALL['gendr']}"
    circuit = provider("logic", "torchlogix-circuit").skip(case_of("logic", "packed", shape="mnist_small"))
    assert "3.12" in circuit if sys.version_info < (3, 12) else "torchlogix is not installed" in circuit


def test_torchsort_ranks_equal_ours_and_the_hard_ranks():
    torchsort = pytest.importorskip("torchsort")
    x = torch.randperm(48, generator=torch.Generator().manual_seed(0)).view(3, 16).double() * 10
    hard = x.argsort(-1).argsort(-1).double() + 1
    torch.testing.assert_close(torchsort.soft_rank(x, regularization_strength=1e-3), hard)
    torch.testing.assert_close(relaxops.rank(x, steepness=1000.0), hard, atol=1e-3, rtol=0)  # cauchy: heavy tails
    case = reduced(case_of("sortnet", "rank", n=100))
    ours = provider("sortnet", "cpu").make(case)[0]()
    theirs = provider("sortnet", "torchsort").make(case)[0]()
    assert [t.shape for t in theirs] == [t.shape for t in ours] == [(2, 8)]
    torch.testing.assert_close(theirs[0].sum(-1), ours[0].sum(-1))  # both rank 1..n: sums n (n + 1) / 2


def test_torchlogix_layer_equals_ours():
    if peers.missing("torchlogix"):
        pytest.skip(peers.missing("torchlogix"))
    case = reduced(case_of("logic", "layer", n=8000, batch=100))
    (f1, in1, (g1,)), (f2, in2, (g2,)) = (provider("logic", n).make(case) for n in ("reference", "torchlogix"))
    out1, out2 = f1()[0], f2()[0]
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    grads1 = torch.autograd.grad((out1 * g1).sum(), in1)
    grads2 = torch.autograd.grad((out2 * g2).sum(), in2)
    for a, b in zip(grads2, grads1):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


PARAM_CASES = [c for c in registry.CASES if c.family == "logic" and c.op == "param" and c.device == "cpu"]


@pytest.mark.parametrize("case", PARAM_CASES, ids=lambda c: c.label)
def test_torchlogix_param_cases_equal_ours(case):
    """Each parametrization x layer row: torchlogix's layer (our state loaded) computes what ours does."""
    if peers.missing("torchlogix"):
        pytest.skip(peers.missing("torchlogix"))
    small = dict(n=24, batch=5) if case.params["kind"] != "conv" else dict(c_in=3, c_out=4, size=5, batch=2)
    case = reduced(case, **small)
    (f1, in1, (g1,)), (f2, in2, (g2,)) = (provider("logic", n).make(case) for n in ("cpu", "torchlogix"))
    out1, out2 = f1()[0], f2()[0]
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    grad1 = torch.autograd.grad((out1 * g1).sum(), in1[0])[0]
    grad2 = torch.autograd.grad((out2 * g2).sum(), in2[0])[0]
    torch.testing.assert_close(grad2, grad1, atol=1e-5, rtol=1e-5)


def test_torchlogix_circuit_counts_equal_ours(tiny_packed):
    case = reduced(case_of("logic", "packed", shape="mnist_small"))
    circuit = provider("logic", "torchlogix-circuit")
    reason = circuit.skip(case)
    if sys.version_info < (3, 12):
        assert reason == "torchlogix 0.2.2's Circuit needs Python >= 3.12 (its circuit.py uses 3.12 f-strings)"
        return
    if reason:
        pytest.skip(reason)
    counts = torch.from_numpy(circuit.make(case)[0]()[0].astype("int64"))
    model = logic._packed_model("mnist_small")
    expected = (model(logic._packed_batch(case).float()) * model[-1].tau).round().long()
    assert torch.equal(counts, expected)


@pytest.mark.parametrize("setting", list(render.SETTINGS))
def test_pytorch3d_image_matches_ours(monkeypatch, setting):
    """An off-centre sphere (a mirrored image would not match): pytorch3d's RGBA and ours agree up to the edges."""
    if peers.missing("pytorch3d"):
        pytest.skip(peers.missing("pytorch3d"))
    v, f = relaxops.render.icosphere(2)
    monkeypatch.setitem(render.MESHES, "offset", lambda: (v * 0.3 + torch.tensor([0.4, 0.1, 0.0]), f))
    case = dataclasses.replace(
        case_of("render", "rasterize", size=32, setting=setting),
        params=dict(mesh="offset", size=32, batch=2, setting=setting, dtype="float32"),
    )
    ours = provider("render", "cpu").make(case)[0]()[0]
    theirs = provider("render", "pytorch3d").make(case)[0]()[0]
    assert theirs.shape == ours.shape == (2, 4, 32, 32)
    assert 0.05 < ours[:, 3].mean() < 0.5
    assert (theirs[:, 3] - ours[:, 3]).abs().mean() < 0.05
    torch.testing.assert_close(theirs[:, :3], ours[:, :3], atol=1e-4, rtol=0)


def test_pytorch3d_hard_buffers_match_ours(monkeypatch):
    """An off-centre sphere, perspective-correct: pytorch3d's zbuf, pix_to_face, bary_coords and interpolated normals
    equal our hard buffers at the pixels whose barycentrics are all >= 0.02 in both (away from the edges, where a
    rounding may pick the other face), and the two cover the same pixels up to a few on the silhouette."""
    if peers.missing("pytorch3d"):
        pytest.skip(peers.missing("pytorch3d"))
    v, f = relaxops.render.icosphere(2)
    monkeypatch.setitem(render.MESHES, "offset", lambda: (v * 0.3 + torch.tensor([0.4, 0.1, 0.0]), f))
    case = dataclasses.replace(
        case_of("render", "buffers", size=32, setting="hard"),
        params=dict(mesh="offset", size=32, batch=2, setting="hard", dtype="float32"),
    )
    ours = provider("render", "reference").make(case)[0]()
    theirs = provider("render", "pytorch3d").make(case)[0]()
    ours_face = relaxops.render.render_buffers(
        render._screen_faces("offset", 2),
        image_size=32,
        perspective_correct=True,
        backend="reference",
        **render.BUFFER_SETTINGS["hard"],
    ).face_index
    from pytorch3d.renderer import rasterize_meshes
    from pytorch3d.structures import Meshes

    fv = render._screen_faces("offset", 2) * torch.tensor([-1.0, 1.0, 1.0])
    faces = torch.arange(3 * fv.shape[1]).view(1, -1, 3).expand(2, -1, -1)
    theirs_face = rasterize_meshes(Meshes(verts=fv.reshape(2, -1, 3), faces=faces), image_size=32)[0]
    theirs_face = theirs_face.permute(0, 3, 1, 2)  # both packed indices: b * F + f
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.shape[0] == 2 and a.shape[2:] == (32, 32)
    covered, theirs_covered = ours[3][:, 0] > 0.5, theirs[3][:, 0] > 0.5
    assert 0.05 < covered.float().mean() < 0.5
    assert (covered != theirs_covered).sum() <= 8
    inner = covered & theirs_covered & (ours[1].amin(1) >= 0.02) & (theirs[1].amin(1) >= 0.02)
    assert inner.float().mean() > 0.5 * covered.float().mean()
    assert torch.equal(ours_face[:, 0][inner], theirs_face[:, 0][inner])
    for a, b in zip(ours[:3], theirs[:3]):  # depth, barycentrics, normals (float32, the same interpolation)
        a, b = a.permute(1, 0, 2, 3)[:, inner], b.permute(1, 0, 2, 3)[:, inner]
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_rank_operators_approach_the_hard_ranks():
    """Each operator's error against the hard ranks is small at a low matched temperature on well separated rows,
    and grows with the temperature (the error the operators case reports beside the time)."""
    x = (torch.randperm(9, generator=torch.Generator().manual_seed(0)).double() * 2.0).reshape(1, 9)
    low = dataclasses.replace(case_of("operators", "rank", n=1000, tau=0.1), params=dict(n=9, batch=1, tau=0.01))
    high = dataclasses.replace(low, params=dict(n=9, batch=1, tau=20.0))
    for name, fn in operators.OPERATORS.items():
        errors = [operators.rank_error(c, [x], [fn(x, c.params["tau"], 9)]) for c in (low, high)]
        assert errors[0] < 0.05 and errors[1] > 0.5, (name, errors)  # heavy tails (reciprocal): 0.02 at 0.01
    assert operators.hard_ranks(torch.tensor([[0.5, -1.0, 3.0, 0.0]])).tolist() == [[3.0, 1.0, 4.0, 2.0]]


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")  # AlgoVision indexes with lists
def test_algovision_shortest_path_equals_ours():
    """The AlgoVision program the shortest-path cases time computes what ours computes (float32, as timed)."""
    if peers.missing("algovision"):
        pytest.skip(peers.missing("algovision"))
    case = reduced(case_of("algorithms", "shortest_path", size=12), size=6)
    (f1, in1, (g1,)), (f2, in2, (g2,)) = (provider("algorithms", n).make(case) for n in ("reference", "algovision"))
    out1, out2 = f1()[0], f2()[0]
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-4)
    grads1 = torch.autograd.grad((out1 * g1).sum(), in1)
    grads2 = torch.autograd.grad((out2 * g2).sum(), in2)
    for a, b in zip(grads2, grads1):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_packed_conv_providers_equal_float_eval():
    """The packed conv-network case: our packed providers and torchlogix's eval-mode layers of the same network
    give the class counts of our float eval mode (the compiled C library is tested in tests/logic)."""
    case = dataclasses.replace(case_of("logic", "packed_conv"), params=dict(batch=70))
    model = logic._conv_net()[0]
    expected = (model(logic._conv_batch(case).float()) * model[-1].tau).round().long()
    names = ["packed-conv", "packed-1t-conv", "packed-words-conv", "packed-every-gate-conv", "torchlogix-eval-conv"]
    ran = []
    for name in names:
        p = provider("logic", name)
        if p.skip(case):
            assert name == "torchlogix-eval-conv", p.skip(case)
            continue
        out = p.make(case)[0]()[0]
        if name == "torchlogix-eval-conv":
            out = out * model[-1].tau
        assert torch.equal(out.round().long(), expected), name
        ran.append(name)
    assert len(ran) >= 3
    reason = provider("logic", "torchlogix-circuit-conv").skip(case)
    assert reason is not None and ("3.12" in reason if sys.version_info < (3, 12) else True)


@pytest.mark.parametrize("op", ["bubble_sort", "edit_distance", "shortest_path"])
def test_framework_rows_run_and_equal_algovision(op):
    """The generic-program rows (not in the default set): the eager plan, and AlgoVision where installed, run the
    same program at a reduced size with the same outputs (the traced provider's compile is tested in
    tests/algorithms/test_trace.py, not here: it takes seconds to minutes)."""
    case = dataclasses.replace(case_of("framework", op), params=dict(n=3, k=2, batch=2), mode="fwd+bwd")
    outs = {}
    for name in ("relaxops", "algovision"):
        p = provider("framework", name)
        if p.skip(case) is None:
            outs[name] = registry.closure(case.mode, *p.make(case))()
    assert "relaxops" in outs and all(t.isfinite().all() for t in outs["relaxops"] if isinstance(t, torch.Tensor))
    if "algovision" in outs:
        for a, b in zip(outs["relaxops"], outs["algovision"]):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # float32, the same ops up to rounding
