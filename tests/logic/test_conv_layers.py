"""Layers of convolutional logic gate networks other than the tree convolution: residual initialisation of
LogicLayer, OrPooling2d, GroupSum over maps, and the thermometer binarization layers."""

import math

import pytest
import torch
from relaxops.compat.difflogic import LogicLayer as DiffLogicLayer
from relaxops.logic import (
    GroupSum,
    LearnableThermometer,
    LogicLayer,
    OrPooling2d,
    PackedBits,
    Thermometer,
    connections,
    pack_bits,
)
from relaxops.logic.binarize import fit_thresholds
from relaxops.logic.gates import GATE_A
from testing import assert_close

# --- residual initialisation of LogicLayer ---------------------------------------------------------------------


def test_random_init_keeps_the_stream():
    torch.manual_seed(3)
    old = torch.randn(20, 16)  # what LogicLayer drew before the init argument existed
    torch.manual_seed(3)
    layer = LogicLayer(30, 20)
    assert torch.equal(layer.weights.detach(), old)
    torch.manual_seed(3)
    assert torch.equal(LogicLayer(30, 20, init="random").weights, layer.weights)
    torch.manual_seed(3)
    assert torch.equal(DiffLogicLayer(30, 20, device="cpu").weights, layer.weights)


@pytest.mark.parametrize("p", [0.9, 0.5, math.exp(5) / (math.exp(5) + 15)])
def test_residual_init_probability(p):
    torch.manual_seed(0)
    layer = LogicLayer(8, 6, init="residual", residual_probability=p, dtype=torch.float64)
    prob = torch.softmax(layer.weights.detach(), -1)
    assert_close(prob[:, GATE_A], torch.full((6,), p, dtype=torch.float64))
    others = torch.cat([prob[:, :GATE_A], prob[:, GATE_A + 1 :]], 1)
    assert_close(others, torch.full((6, 15), (1 - p) / 15, dtype=torch.float64))
    assert (layer.gate_ids() == GATE_A).all()
    # no random numbers for the weights: the connections are the first draw after the seed
    torch.manual_seed(0)
    a, b = connections.make_connections("random", 8, 6)
    assert torch.equal(a, layer.idx_a) and torch.equal(b, layer.idx_b)


def test_residual_default_and_torchlogix_logit():
    layer = LogicLayer(4, 4, init="residual")
    assert_close(
        torch.softmax(layer.weights.detach().double(), -1)[:, GATE_A],
        torch.full((4,), 0.9, dtype=torch.float64),
        torch.float32,
    )
    # torchlogix's residual_probability 0.951 (P[output = A]) is logit log(15 q - 7) - log(1 - q) ~ 5.0
    q = 0.951
    logit = math.log(15 * q - 7) - math.log(1 - q)
    p = math.exp(logit) / (math.exp(logit) + 15)
    assert abs(p - (15 * q - 7) / 8) < 1e-12 and abs(logit - 5.0) < 1e-3
    w = LogicLayer(4, 4, init="residual", residual_probability=p).weights.detach().double()
    assert abs(w[0, GATE_A].item() - logit) < 1e-5


def _deep(init, depth=12, width=64, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        *[LogicLayer(width, width, connections="unique", init=init, dtype=torch.float64) for _ in range(depth)]
    )


def _first_input_path(model, width):
    """Index of the input that neuron j of the last layer reaches by following first inputs (A) back."""
    path = torch.arange(width)
    for layer in reversed(list(model)):
        path = layer.idx_a[path]
    return path


def test_deep_residual_stack_passes_its_input():
    """12 layers in training mode on Boolean inputs. Residual init: each output is an (attenuated) copy of the input
    its chain of A connections leads back to (correlation 1 over the batch, thresholded at 0.5 it equals that
    input), and the gradient reaching the input stays ~0.26 per output. Random init: the outputs carry no trace of
    those inputs (correlation ~0) and the input gradient vanishes (~1e-9)."""
    width = 64
    x = (torch.rand(512, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) > 0.5).double()
    stats = {}
    for init in ("random", "residual"):
        model = _deep(init, width=width).train()
        xx = x.clone().requires_grad_(True)
        y = model(xx)
        target = x[:, _first_input_path(model, width)]
        yc, tc = y.detach() - y.detach().mean(0), target - target.mean(0)
        corr = ((yc * tc).sum(0) / (yc.norm(dim=0) * tc.norm(dim=0))).mean().item()
        decided = ((y.detach() > 0.5).double() == target).double().mean().item()
        (g,) = torch.autograd.grad(y.sum(), xx)
        stats[init] = corr, decided, g.abs().mean().item()
    assert stats["residual"][0] > 0.99 and stats["residual"][1] == 1.0, stats
    assert abs(stats["random"][0]) < 0.2 and stats["random"][1] < 0.6, stats
    assert stats["residual"][2] > 0.1 and stats["residual"][2] > 1e4 * stats["random"][2], stats


def test_fresh_residual_layer_in_eval_is_its_first_inputs():
    torch.manual_seed(2)
    layer = LogicLayer(10, 7, init="residual").eval()
    x = (torch.rand(33, 10) > 0.5).float()
    assert torch.equal(layer(x), x[:, layer.idx_a])
    torch.manual_seed(2)
    layer64 = LogicLayer(10, 7, init="residual", dtype=torch.float64).eval()
    xr = torch.rand(5, 10, dtype=torch.float64)  # any values: the discrete gate a is the identity on A
    assert torch.equal(layer64(xr), xr[:, layer64.idx_a])
    packed = layer(pack_bits(x.bool()))
    assert torch.equal(packed.unpack(), x[:, layer.idx_a].bool())


def test_init_bad_arguments():
    with pytest.raises(ValueError, match="init"):
        LogicLayer(4, 4, init="identity")
    for p in (0.0, 1 / 16, 1.0, 1.5, True, "0.9"):
        with pytest.raises(ValueError, match="residual_probability"):
            LogicLayer(4, 4, init="residual", residual_probability=p)


# --- OrPooling2d ---------------------------------------------------------------------------------------------


def _pool_reference(x, k, s, p):
    """float64 loops: window maximum over the real cells; gradient to the first maximum in row-major order."""
    B, C, H, W = x.shape
    oh, ow = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    y = torch.empty(B, C, oh, ow, dtype=torch.float64)
    arg = torch.empty(B, C, oh, ow, 2, dtype=torch.long)
    for b in range(B):
        for c in range(C):
            for i in range(oh):
                for j in range(ow):
                    best, where = -math.inf, None
                    for u in range(i * s[0] - p[0], i * s[0] - p[0] + k[0]):
                        for v in range(j * s[1] - p[1], j * s[1] - p[1] + k[1]):
                            if 0 <= u < H and 0 <= v < W and x[b, c, u, v] > best:
                                best, where = x[b, c, u, v].item(), (u, v)
                    y[b, c, i, j] = best
                    arg[b, c, i, j] = torch.tensor(where)
    return y, arg


@pytest.mark.parametrize(
    "k,s,p,shape",
    [
        ((2, 2), (2, 2), (0, 0), (2, 3, 6, 5)),
        ((3, 3), (2, 2), (1, 1), (1, 2, 7, 5)),
        ((3, 2), (1, 2), (1, 0), (2, 1, 5, 4)),
        ((1, 1), (1, 1), (0, 0), (1, 1, 3, 3)),
    ],
)
def test_or_pooling_matches_reference(k, s, p, shape):
    g = torch.Generator().manual_seed(5)
    # coarse values: many ties (the tie rule matters), Boolean and fractional entries
    x = (torch.randint(0, 3, shape, generator=g) / 2).double().requires_grad_(True)
    pool = OrPooling2d(k, s, p)
    y = pool(x)
    want, arg = _pool_reference(x.detach(), k, s, p)
    assert torch.equal(y.detach(), want)
    G = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (gx,) = torch.autograd.grad((y * G).sum(), x)
    gref = torch.zeros(shape, dtype=torch.float64)
    B, C, oh, ow = y.shape
    for b in range(B):
        for c in range(C):
            for i in range(oh):
                for j in range(ow):
                    u, v = arg[b, c, i, j].tolist()
                    gref[b, c, u, v] += G[b, c, i, j]
    assert_close(gx, gref)
    # twice the same: deterministic
    (gx2,) = torch.autograd.grad((pool(x) * G).sum(), x)
    assert torch.equal(gx, gx2)


def test_or_pooling_eval_is_boolean_or():
    g = torch.Generator().manual_seed(6)
    xb = torch.rand(3, 4, 8, 9, generator=g) > 0.7
    pool = OrPooling2d(3, stride=2, padding=1).eval()
    ob = pool(xb)
    assert ob.dtype == torch.bool
    # explicit OR over the windows (padding False)
    padded = torch.nn.functional.pad(xb, (1, 1, 1, 1))
    want = torch.zeros_like(ob)
    for i in range(ob.shape[2]):
        for j in range(ob.shape[3]):
            want[:, :, i, j] = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].flatten(2).any(-1)
    assert torch.equal(ob, want)
    for mode in (True, False):
        assert torch.equal(pool.train(mode)(xb.float()), want.float())  # max on {0, 1} = OR, either mode


def test_or_pooling_ties_send_the_gradient_to_the_first_maximum():
    x = torch.ones(1, 1, 4, 4, requires_grad=True)
    OrPooling2d(2)(x).sum().backward()
    want = torch.zeros(4, 4)
    want[0::2, 0::2] = 1  # the top-left cell of each window
    assert torch.equal(x.grad[0, 0], want)


def test_or_pooling_shapes_and_bad_arguments():
    assert OrPooling2d(2)(torch.rand(0, 3, 4, 4)).shape == (0, 3, 2, 2)
    assert OrPooling2d(2)(torch.rand(2, 0, 4, 4)).shape == (2, 0, 2, 2)
    assert OrPooling2d((2, 3), stride=1)(torch.rand(1, 1, 5, 5)).shape == (1, 1, 4, 3)
    for bad in (0, -1, (2,), (2, 0), 2.0, True, "2"):
        with pytest.raises(ValueError, match="kernel_size"):
            OrPooling2d(bad)
    with pytest.raises(ValueError, match="stride"):
        OrPooling2d(2, stride=0)
    with pytest.raises(ValueError, match="padding"):
        OrPooling2d(2, padding=2)
    with pytest.raises(ValueError, match="B, C, H, W"):
        OrPooling2d(2)(torch.rand(3, 4, 4))
    with pytest.raises(ValueError, match="smaller"):
        OrPooling2d(3)(torch.rand(1, 1, 2, 5))
    with pytest.raises(TypeError):
        OrPooling2d(2)(torch.ones(1, 1, 4, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match="PackedBits"):
        OrPooling2d(2).eval()(PackedBits(torch.zeros(4, 1, dtype=torch.int64), 3))


def test_or_pooling_nan_propagates():
    x = torch.zeros(1, 1, 2, 2)
    x[0, 0, 1, 1] = math.nan
    assert OrPooling2d(2)(x).isnan().all()


# --- GroupSum over maps ----------------------------------------------------------------------------------------


def test_group_sum_over_maps_is_channel_major():
    x = torch.rand(3, 4, 2, 5, dtype=torch.float64, requires_grad=True)
    head = GroupSum(2, tau=3.0, start_dim=1)
    y = head(x)
    want = torch.stack([x[:, :2].sum((1, 2, 3)), x[:, 2:].sum((1, 2, 3))], 1) / 3.0  # class i: channels 2i, 2i+1
    assert_close(y, want)
    assert torch.equal(y, GroupSum(2, tau=3.0)(torch.nn.Flatten()(x)))
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(g, torch.full_like(x, 1 / 3.0))
    # [B, N] and the default start_dim keep the old behaviour ([..., n] -> [..., k])
    x2 = torch.rand(5, 6)
    assert torch.equal(GroupSum(3, start_dim=1)(x2), GroupSum(3)(x2))
    assert GroupSum(3)(torch.rand(2, 4, 6)).shape == (2, 4, 3)
    assert "start_dim=1" in repr(head)


def test_group_sum_start_dim_errors():
    with pytest.raises(TypeError, match="start_dim"):
        GroupSum(2, start_dim=1.0)
    with pytest.raises(ValueError, match="start_dim"):
        GroupSum(2, start_dim=4)(torch.rand(2, 4, 2, 2))
    with pytest.raises(ValueError, match="divide"):
        GroupSum(3, start_dim=1)(torch.rand(2, 4, 2, 2))


# --- thermometer binarization ------------------------------------------------------------------------------------


def test_thermometer_hand_computed():
    x = torch.tensor([[[0.1, 0.5]], [[0.8, 0.25]]])  # [B=2, C=1, 2]
    t = Thermometer(3)  # 0.25, 0.5, 0.75
    assert torch.equal(t.thresholds, torch.tensor([0.25, 0.5, 0.75]))
    y = t(x)
    assert y.shape == (2, 3, 2) and y.dtype == torch.float32
    want = torch.tensor(
        [
            [[0, 1], [0, 0], [0, 0]],  # 0.1 > nothing; 0.5 > 0.25 only (strict)
            [[1, 0], [1, 0], [1, 0]],
        ],
        dtype=torch.float32,
    )  # 0.8 > all; 0.25 > nothing
    assert torch.equal(y, want)


def test_thermometer_layouts_and_per_channel():
    x = torch.tensor([[0.3, 2.0]])  # [B=1, C=2]
    thr = torch.tensor([[0.1, 0.2, 0.5], [1.0, 3.0, 4.0]])
    cm = Thermometer(thresholds=thr)(x)
    tm = Thermometer(thresholds=thr, layout="threshold_major")(x)
    # channel-major: c K + k; threshold-major: k C + c
    assert torch.equal(cm, torch.tensor([[1.0, 1, 0, 1, 0, 0]]))
    assert torch.equal(tm, torch.tensor([[1.0, 1, 1, 0, 0, 0]]))
    imgs = torch.rand(2, 3, 4, 5, dtype=torch.float64)
    y = Thermometer(31, layout="threshold_major")(imgs)
    assert y.shape == (2, 93, 4, 5) and y.dtype == torch.float64
    # difflogic's cifar-10-31-thresholds: torch.cat([x > (i + 1) / 32 for i in range(31)], dim=channels)
    assert torch.equal(y, torch.cat([(imgs > (i + 1) / 32).double() for i in range(31)], 1))
    yc = Thermometer(31)(imgs)
    assert torch.equal(yc.reshape(2, 3, 31, 4, 5), y.reshape(2, 31, 3, 4, 5).transpose(1, 2))


def test_thermometer_fit():
    x = torch.arange(10, dtype=torch.float64).reshape(10, 1).expand(10, 2).clone()
    x[:, 1] *= 2  # channel 1: 0, 2, ..., 18
    t = Thermometer(4).fit(x, "uniform")
    assert_close(
        t.thresholds.double(),
        torch.tensor([[1.8, 3.6, 5.4, 7.2], [3.6, 7.2, 10.8, 14.4]], dtype=torch.float64),
        torch.float32,
    )
    q = fit_thresholds(x, 4, "quantile")  # positions i (n - 1) / 5 = 1.8, 3.6, 5.4, 7.2 between order stats
    assert_close(q, torch.tensor([[1.8, 3.6, 5.4, 7.2], [3.6, 7.2, 10.8, 14.4]], dtype=torch.float64))
    q1 = fit_thresholds(torch.tensor([[3.0], [1.0], [2.0], [0.0]]), 1, "quantile", per_channel=False)
    assert q1.shape == (1,) and q1.item() == 1.5
    g = fit_thresholds(x, 3, "uniform", per_channel=False)
    assert_close(g, torch.tensor([4.5, 9.0, 13.5], dtype=torch.float64))
    # quantiles split data into (nearly) equal parts
    data = torch.rand(4000, 1, 3, 3, generator=torch.Generator().manual_seed(0)) ** 3
    fitted = Thermometer(3).fit(data)
    frac = fitted(data).mean((0, 2, 3))
    assert_close(frac, torch.tensor([0.75, 0.5, 0.25]), torch.float32, scale=1e3)


def test_thermometer_state_dict_and_bad_arguments():
    fitted = Thermometer(3).fit(torch.rand(20, 4))
    fresh = Thermometer(3)
    fresh.load_state_dict(fitted.state_dict())
    assert torch.equal(fresh.thresholds, fitted.thresholds) and fresh.thresholds.shape == (4, 3)
    x = torch.rand(6, 4)
    assert torch.equal(fresh(x), fitted(x))
    with pytest.raises(ValueError, match="thresholds per channel"):
        Thermometer(2).load_state_dict(fitted.state_dict())
    with pytest.raises(ValueError, match="num_bits"):
        Thermometer()
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="num_bits"):
            Thermometer(bad)
    with pytest.raises(ValueError, match="non-decreasing"):
        Thermometer(thresholds=[0.5, 0.2])
    with pytest.raises(ValueError, match="finite"):
        Thermometer(thresholds=[0.5, math.nan])
    with pytest.raises(ValueError, match="shape"):
        Thermometer(thresholds=torch.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="num_bits is 3"):
        Thermometer(3, thresholds=[0.1, 0.2])
    with pytest.raises(ValueError, match="low"):
        Thermometer(3, low=1.0, high=0.0)
    with pytest.raises(ValueError, match="layout"):
        Thermometer(3, layout="pixel")
    with pytest.raises(ValueError, match="channels"):
        Thermometer(3, channels=0)
    with pytest.raises(ValueError, match="channels"):
        Thermometer(thresholds=torch.zeros(2, 3), channels=2)
    with pytest.raises(ValueError, match="channels"):
        Thermometer(3, channels=2)(torch.rand(4, 3))
    with pytest.raises(ValueError, match="dimension"):
        Thermometer(3)(torch.rand(4))
    with pytest.raises(TypeError):
        Thermometer(3)(torch.ones(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="method"):
        Thermometer(3).fit(torch.rand(4, 2), "median")
    with pytest.raises(ValueError, match="finite"):
        Thermometer(3).fit(torch.tensor([[math.nan]]))
    with pytest.raises(ValueError, match="data"):
        Thermometer(3).fit(torch.rand(0, 2))


def test_thermometer_nan_and_inf():
    y = Thermometer(2)(torch.tensor([[math.nan, math.inf, -math.inf]]))
    assert torch.equal(y, torch.tensor([[0.0, 0, 1, 1, 0, 0]]))


def test_learnable_eval_is_hard_and_matches_thermometer():
    torch.manual_seed(0)
    x = torch.rand(7, 3, 4, 4)
    lt = LearnableThermometer(5, channels=3)
    with torch.no_grad():
        lt.thresholds.add_(0.05 * torch.randn(3, 5))
    lt.eval()
    y = lt(x)
    hard = (x.unsqueeze(2) > lt.thresholds.detach().reshape(1, 3, 5, 1, 1)).float()
    assert torch.equal(y, hard.reshape(7, 15, 4, 4))
    assert set(y.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(LearnableThermometer(3).eval()(x), Thermometer(3)(x))


@pytest.mark.parametrize("layout", ["channel_major", "threshold_major"])
def test_learnable_sigmoid_values_and_finite_differences(layout):
    g = torch.Generator().manual_seed(4)
    x = torch.rand(5, 2, 3, generator=g, dtype=torch.float64)
    lt = LearnableThermometer(
        thresholds=[[0.2, 0.6, 0.4], [0.1, 0.5, 0.9]], temperature=0.2, layout=layout, dtype=torch.float64
    )
    y = lt(x)
    t = lt.thresholds.detach()
    want = torch.sigmoid((x.unsqueeze(2) - t.reshape(1, 2, 3, 1)) / 0.2)
    want = want.reshape(5, 6, 3) if layout == "channel_major" else want.transpose(1, 2).reshape(5, 6, 3)
    assert_close(y, want)
    G = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (gt,) = torch.autograd.grad((y * G).sum(), lt.thresholds)
    # central differences of the relaxed form, threshold by threshold
    fd = torch.zeros_like(t)
    h = 1e-6
    for c in range(2):
        for k in range(3):
            for sign in (1, -1):
                with torch.no_grad():
                    lt.thresholds[c, k] += sign * h
                    fd[c, k] += sign * (lt(x) * G).sum() / (2 * h)
                    lt.thresholds[c, k] -= sign * h
    torch.testing.assert_close(gt, fd, rtol=1e-6, atol=1e-8)
    xx = x.clone().requires_grad_(True)
    tt = t.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, t: torch.func.functional_call(lt, {"thresholds": t}, (x,)), (xx, tt))


def test_learnable_straight_through():
    x = torch.tensor([[0.1, 0.3, 0.6]], dtype=torch.float64)  # [B=1, C=3]
    lt = LearnableThermometer(
        thresholds=[0.25, 0.5], temperature=0.1, relaxation="straight_through", dtype=torch.float64
    )
    y = lt(x)
    assert torch.equal(y, torch.tensor([[0.0, 0, 1, 0, 1, 1]], dtype=torch.float64))  # hard values in training
    (gt,) = torch.autograd.grad(y.sum(), lt.thresholds)
    z = (x.reshape(3, 1) - torch.tensor([0.25, 0.5], dtype=torch.float64)) / 0.1
    s = torch.sigmoid(z)
    assert_close(gt, (-(s * (1 - s)) / 0.1).sum(0))  # the sigmoid's derivative, summed over the inputs
    lt_soft = LearnableThermometer(thresholds=[0.25, 0.5], temperature=0.1, dtype=torch.float64)
    (gs,) = torch.autograd.grad(lt_soft(x).sum(), lt_soft.thresholds)
    assert_close(gt, gs)


def test_learnable_trains_thresholds():
    """Gradient descent moves a threshold to where the bit separates two classes."""
    torch.manual_seed(0)
    x = torch.rand(256, 1, dtype=torch.float64)
    target = (x > 0.7).double()
    lt = LearnableThermometer(thresholds=[0.3], temperature=0.05, dtype=torch.float64)
    opt = torch.optim.Adam(lt.parameters(), lr=0.02)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy(lt(x).clamp(1e-9, 1 - 1e-9), target).backward()
        opt.step()
    assert abs(lt.thresholds.item() - 0.7) < 0.05, lt.thresholds
    assert (lt.eval()(x) == target).double().mean() > 0.97


def test_learnable_state_dict_fit_and_bad_arguments():
    lt = LearnableThermometer(4).fit(torch.rand(50, 3, 2), "quantile")
    assert isinstance(lt.thresholds, torch.nn.Parameter) and lt.thresholds.shape == (3, 4)
    assert [n for n, _ in lt.named_parameters()] == ["thresholds"]
    fresh = LearnableThermometer(4)
    fresh.load_state_dict(lt.state_dict())
    assert torch.equal(fresh.thresholds, lt.thresholds)
    x = torch.rand(2, 3, 2)
    assert torch.equal(fresh(x), lt(x))
    # unordered thresholds are allowed for the learnable layer
    LearnableThermometer(thresholds=[0.5, 0.2])
    for kw in (dict(temperature=0.0), dict(temperature=-1.0), dict(temperature=math.inf)):
        with pytest.raises(ValueError, match="temperature"):
            LearnableThermometer(3, **kw)
    with pytest.raises(ValueError, match="relaxation"):
        LearnableThermometer(3, relaxation="gumbel")
    with pytest.raises(ValueError, match="finite"):
        LearnableThermometer(thresholds=[math.inf])
    with pytest.raises(ValueError, match="channels"):
        LearnableThermometer(2, channels=4)(torch.rand(2, 3))


def test_top_level_exports():
    """The convolutional network layers are part of the top-level API, as LogicConv2d."""
    import relaxops
    import relaxops.logic

    for name in ("LogicConv2d", "OrPooling2d", "Thermometer", "LearnableThermometer"):
        assert getattr(relaxops, name) is getattr(relaxops.logic, name) and name in relaxops.__all__, name
