"""relaxops.compat.torchlogix against torchlogix 0.2.2 itself: on small models built like torchlogix's own examples
(``torchlogix/models``: dense ``Dlgn`` and convolutional ``ClgnMnist`` stacks), torchlogix's state loads into the
compat model (and back), and the forward in train and eval mode and the gradients agree in float64, for every
parametrization, lut_rank and deterministic sampling mode this build has."""

import inspect

import pytest
import torch
from relaxops.bench.peers import missing

if missing("torchlogix"):
    pytest.skip(missing("torchlogix"), allow_module_level=True)

from relaxops import PackedLogicNet  # noqa: E402
from relaxops.bench.logic import _torchlogix_layers  # noqa: E402
from relaxops.compat import torchlogix as compat  # noqa: E402

TEMPERATURE = 0.8
tl = _torchlogix_layers()  # torchlogix.layers (its package __init__ needs Python >= 3.12)


CASES = [
    (p, k, s)
    for p, ranks in (("raw", (2,)), ("light", (2, 4, 6)), ("warp", (2, 4, 6)))
    for k in ranks
    for s in ("soft", "hard")
]


def test_signatures_equal_torchlogix():
    for ours, theirs in (
        (compat.LogicDense, tl.LogicDense),
        (compat.LogicConv2d, tl.LogicConv2d),
        (compat.GroupSum, tl.GroupSum),
        (compat.OrPooling2d, tl.OrPooling2d),
    ):
        got = [(p.name, p.default) for p in inspect.signature(ours.__init__).parameters.values()]
        want = [(p.name, p.default) for p in inspect.signature(theirs.__init__).parameters.values()]
        assert got == [w for w in want if w[0] != "export_mode"], ours.__name__


@pytest.mark.parametrize("init", ["residual", "random"])
@pytest.mark.parametrize("parametrization", sorted({p for p, k, s in CASES}))
def test_seed_gives_torchlogix_dense_layer(parametrization, init):
    kw = dict(parametrization=parametrization, parametrization_kwargs=dict(weight_init=init, temperature=0.7))
    torch.manual_seed(5)
    theirs, after_theirs = tl.LogicDense(11, 7, **kw), torch.rand(2)
    torch.manual_seed(5)
    ours, after_ours = compat.LogicDense(11, 7, **kw), torch.rand(2)
    assert torch.equal(ours.weight.detach(), theirs.weight.detach())
    assert torch.equal(ours.connections.indices, theirs.connections.indices)
    assert torch.equal(after_ours, after_theirs)  # the same random calls


def _dense_models(parametrization, lut_rank, sampling):
    """Dlgn's shape, small: Flatten, three LogicDense layers, GroupSum (torchlogix/models/dense.py)."""
    options = dict(forward_sampling=sampling, temperature=TEMPERATURE, weight_init="random")
    kw = dict(lut_rank=lut_rank, parametrization=parametrization, parametrization_kwargs=options)
    dims = [2 * 3 * 3, 24, 24, 12]

    def build(lib):
        layers = [lib.LogicDense(i, o, **kw) for i, o in zip(dims[:-1], dims[1:])]
        return torch.nn.Sequential(torch.nn.Flatten(), *layers, lib.GroupSum(3, tau=2.0, beta=0.5))

    return build(tl), build(compat), torch.rand(5, 2, 3, 3, dtype=torch.float64)


@pytest.mark.parametrize("num_candidates", [-1, 3])
@pytest.mark.parametrize("gumbel", [False, True])
@pytest.mark.parametrize("lut_rank,parametrization", [(2, "raw"), (4, "warp")])
def test_learnable_connections_equal_torchlogix(num_candidates, gumbel, lut_rank, parametrization):
    """Dlgn's "Learn1" models: the first layer's connections learnable (torchlogix's straight-through estimator)."""
    learn = dict(connections="learnable", connections_kwargs=dict(num_candidates=num_candidates, temperature=0.5,
                                                                  gumbel=gumbel))  # fmt: skip
    kw = dict(lut_rank=lut_rank, parametrization=parametrization)

    def build(lib):
        return torch.nn.Sequential(lib.LogicDense(12, 12, **kw, **learn), lib.LogicDense(12, 12), lib.GroupSum(3, 2.0))

    torch.manual_seed(1)
    theirs, after_theirs = build(tl), torch.rand(2)
    torch.manual_seed(1)
    ours = build(compat)
    assert torch.equal(torch.rand(2), after_theirs)  # the same random calls: the same network from the seed
    for name, t in theirs.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[name], t, msg=name)
    if gumbel:  # the noise draws differ in order; the deterministic parts are checked with gumbel=False
        theirs[0].connections.gumbel = False
        ours[0].wiring.gumbel = False
    _compare(theirs, ours, torch.rand(4, 12, dtype=torch.float64), atol=1e-12)
    ours.eval()
    assert torch.equal(ours[0].connections.resolve_connections(), theirs[0].connections.resolve_connections())


def _conv_models(parametrization, lut_rank, sampling):
    """ClgnMnist's shape, small: LogicConv2d + OrPooling2d twice, Flatten, two LogicDense, GroupSum
    (torchlogix/models/conv.py)."""
    options = dict(forward_sampling=sampling, temperature=TEMPERATURE, weight_init="random")
    kw = dict(parametrization=parametrization, parametrization_kwargs=options)

    def build(lib):
        return torch.nn.Sequential(
            lib.LogicConv2d(in_dim=7, channels=2, num_kernels=4, tree_depth=2, receptive_field_size=3, padding=1, **kw),
            lib.OrPooling2d(kernel_size=2, stride=2, padding=0),
            lib.LogicConv2d(in_dim=3, channels=4, num_kernels=6, tree_depth=3, receptive_field_size=2, **kw),
            lib.OrPooling2d(kernel_size=2, stride=2, padding=1),
            torch.nn.Flatten(),
            lib.LogicDense(6 * 2 * 2, 20, **kw),
            lib.LogicDense(20, 10, **kw),
            lib.GroupSum(5, tau=3.0),
        )

    return build(tl), build(compat), torch.rand(3, 2, 7, 7, dtype=torch.float64)


def _compare(theirs, ours, x, atol):
    theirs, ours = theirs.double(), ours.double()
    ours.load_state_dict(theirs.state_dict())
    for training in (True, False):
        theirs.train(training), ours.train(training)
        # eval mode on bits: the discrete networks (torchlogix's warp eval thresholds its relaxed polynomial, ours
        # interpolates the discrete table: the two agree on Boolean inputs only)
        xt, xo = ((x if training else x.round()).clone().requires_grad_(training) for _ in range(2))
        yt, yo = theirs(xt), ours(xo)
        torch.testing.assert_close(yo, yt.to(yo.dtype), atol=atol, rtol=0)
        if training:
            g = torch.randn_like(yt)
            yt.backward(g), yo.backward(g)
            torch.testing.assert_close(xo.grad, xt.grad, atol=atol, rtol=0)
            for i, (t, o) in enumerate(zip(theirs, ours)):
                if getattr(o, "wiring", None) is not None:
                    torch.testing.assert_close(o.wiring.weights.grad, t.connections.weights.grad, atol=atol, rtol=0)
                if isinstance(o, compat.LogicConv2d):  # its tree levels are slices of our weights
                    want = torch.cat([w.grad.transpose(0, 1) for w in t.tree_weights], 1)
                    torch.testing.assert_close(o.weights.grad, want, atol=atol, rtol=0, msg=f"layer {i}")
                elif isinstance(o, (compat.LogicDense, compat.LogicDenseLUT)):
                    torch.testing.assert_close(o.weight.grad, t.weight.grad, atol=atol, rtol=0, msg=f"layer {i}")
    # and back: our state loads into torchlogix's model and gives its outputs
    fresh = type(theirs)(*theirs)
    fresh.load_state_dict(ours.state_dict())
    ours.eval(), fresh.eval()
    torch.testing.assert_close(ours(x.round()), fresh(x.round()).to(x.dtype), atol=atol, rtol=0)


@pytest.mark.parametrize("parametrization,lut_rank,sampling", CASES)
def test_dense_model_equals_torchlogix(parametrization, lut_rank, sampling):
    theirs, ours, x = _dense_models(parametrization, lut_rank, sampling)
    _compare(theirs, ours, x, atol=1e-12)


@pytest.mark.parametrize("parametrization,sampling", sorted({(p, s) for p, k, s in CASES if k == 2}))
def test_conv_model_equals_torchlogix(parametrization, sampling):
    theirs, ours, x = _conv_models(parametrization, 2, sampling)
    # torchlogix's OrPooling2d computes in float32 (x.float()), so its model is float32-exact after the pooling
    _compare(theirs, ours, x, atol=1e-5)


def test_conv_trees_are_ours_and_pack():
    """The conv tree weights are views of our weights, and a compat model packs exactly like its eval mode."""
    theirs, ours, x = _conv_models("raw", 2, "soft")
    conv = ours[0]
    assert conv.tree_weights[0].shape == theirs[0].tree_weights[0].shape
    assert conv.tree_weights[1].data_ptr() == conv.weights[:, 2:].data_ptr()
    ours.eval()
    x = x > 0.5
    net = PackedLogicNet(ours.float(), input_shape=(2, 7, 7))
    counts = net(x)
    torch.testing.assert_close(counts.float(), ours(x.float()) * ours[-1].tau)


@pytest.mark.parametrize("parametrization", sorted({p for p, k, s in CASES if k > 2}))
def test_lut_model_packs(parametrization):
    """lut_rank 4 and 6 give our LogicLUTLayer: a compat model of them packs exactly like its eval mode."""
    torch.manual_seed(2)
    kw = dict(parametrization=parametrization, parametrization_kwargs=dict(weight_init="random"))
    model = torch.nn.Sequential(
        compat.LogicDense(20, 16, lut_rank=4, **kw), compat.LogicDense(16, 12, lut_rank=6, **kw), compat.GroupSum(3)
    ).eval()
    assert isinstance(model[0], compat.LogicDenseLUT) and model[1].get_luts().shape == (12, 64)
    x = torch.rand(70, 20) > 0.5
    torch.testing.assert_close(PackedLogicNet(model)(x).float(), model(x.float()))


def test_groupsum_beta_is_torchlogix_offset():
    x = torch.rand(4, 12, dtype=torch.float64)
    for tau, beta in ((1.0, 0.0), (2.5, 0.75), (0.5, -3.0)):
        torch.testing.assert_close(compat.GroupSum(3, tau, beta)(x), tl.GroupSum(3, tau, beta)(x))
    with pytest.raises(ValueError, match="beta"):
        compat.GroupSum(3, beta=float("nan"))


def test_bad_arguments_and_state():
    with pytest.raises(ValueError, match="parametrization"):
        compat.LogicDense(4, 4, parametrization="walsh")
    with pytest.raises(ValueError, match="lut_rank"):
        compat.LogicDense(8, 4, lut_rank=3, parametrization="light")
    with pytest.raises(ValueError, match="unknown"):
        compat.LogicDense(4, 4, parametrization_kwargs=dict(tau=1.0))
    with pytest.raises(ValueError, match="out_dim"):
        compat.LogicDense(9, 4)
    with pytest.raises(ValueError, match="stride"):
        compat.LogicConv2d(in_dim=5, tree_depth=1, receptive_field_size=2, stride=3)
    torch.manual_seed(0)
    theirs = tl.LogicConv2d(in_dim=5, channels=2, num_kernels=3, tree_depth=2, receptive_field_size=3)
    ours = compat.LogicConv2d(in_dim=5, channels=2, num_kernels=3, tree_depth=2, receptive_field_size=3)
    state = theirs.state_dict()
    state["connections._indices_L0"][0, 1, 4, 0, 2] = 1 - state["connections._indices_L0"][0, 1, 4, 0, 2]
    with pytest.raises(ValueError, match="slid"):
        ours.load_state_dict(state)
