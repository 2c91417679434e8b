"""The thesis' Tables 3.4-3.6 experiments (``art``, ``sorting-large``, ``sorting-svhn``): the pieces whose mistakes a
smoke run would not show (the ART exponent reaching the op, the inverse-temperature rule, Table 3.5's columns and
its batch rule, the SVHN house-number composition and crops, the published numbers' lookup)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from relaxops.experiments import art, reproduce, runner, sorting, sorting_large, sorting_svhn

pytest.importorskip("mlxtend")


def test_art_lambda_reaches_the_op(monkeypatch, tmp_path):
    """``loss_fn``'s network and art_lambda, and the ``art_lambda`` entry of ``sorting.run``, go to relaxops.sort."""
    calls = []
    real = sorting.relaxops.sort

    def spy(x, network, relaxation, steepness, art_lambda):
        calls.append((network, relaxation, steepness, art_lambda))
        return real(x, network, relaxation, steepness=steepness, art_lambda=art_lambda)

    monkeypatch.setattr(sorting.relaxops, "sort", spy)
    values = torch.tensor([[3, 1, 2, 0]])
    sorting.loss_fn(torch.randn(1, 4), values, "logistic_art", 6.0, network="bitonic", art_lambda=0.4)
    assert calls == [("bitonic", "logistic_phi", 6.0, 0.4)]
    calls.clear()
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    cfg = dict(sorting.SCALES["smoke"], methods=["logistic_art"], steps=1, art_lambda=0.1)
    sorting.run(cfg, None, [0], runner.Record("sorting", "spy", cfg, tmp_path))
    assert calls and all(c[0] == "odd_even" and c[3] == 0.1 for c in calls)


def test_art_lambda_zero_is_the_plain_logistic():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(16, 8, generator=gen, dtype=torch.float64)
    values = torch.stack([torch.randperm(8, generator=gen) for _ in range(16)])
    plain = sorting.loss_fn(s, values, "logistic", 12.0, network="bitonic")
    no_art = sorting.loss_fn(s, values, "logistic_art", 12.0, network="bitonic", art_lambda=0.0)
    with_art = sorting.loss_fn(s, values, "logistic_art", 12.0, network="bitonic", art_lambda=0.25)
    assert no_art.item() == pytest.approx(plain.item(), rel=1e-6)
    assert abs(with_art.item() - plain.item()) > 1e-3


def test_beta_is_twice_the_layers():
    assert [art.beta("odd_even", n) for n in (2, 4, 32)] == [4.0, 8.0, 64.0]
    # bitonic with 2^k inputs: k (k + 1) / 2 layers
    assert [art.beta("bitonic", n) for n in (2, 4, 8, 16, 32, 1024)] == [2.0, 6.0, 12.0, 20.0, 30.0, 110.0]
    assert art.beta("bitonic", 5) == 12.0  # as the 8-input network
    with pytest.raises(ValueError, match="network: must be one of"):
        art.beta("bubble", 4)
    with pytest.raises(ValueError, match="n: a network needs at least 2"):
        art.beta("odd_even", 1)


def test_art_paper_lookup():
    assert art.paper(dict(network="odd_even", n=32, art_lambda=0.25)) == {"EM": 1.7, "EW": 69.1, "EM5": 86.7}
    assert art.paper(dict(network="bitonic", n=32, art_lambda=0.0)) == {"EW": 62.8}
    assert art.paper(dict(network="odd_even", n=8, art_lambda=0.0)) is None
    assert art.paper(dict(network="bitonic", n=8, art_lambda=0.4)) is None
    # Table 3.6's lambda = 0.25 columns are Table 3.3's EW
    for network, n, ew in (("odd_even", 4, 94.9), ("bitonic", 4, 95.3), ("odd_even", 32, 69.1), ("bitonic", 32, 67.3)):
        assert art.PAPER_ART[network][n][1] == ew


def test_large_columns_keep_n_times_batch():
    cols = sorting_large.columns(sorting_large.SCALES["paper"])
    left = [c for c in cols if c[0] == "images"]
    assert [(c[1], c[2], c[3]) for c in left] == [(0.25, 32, 128), (0.4, 32, 128), (0.4, 64, 64), (0.4, 128, 32),
                                                   (0.4, 256, 16), (0.4, 512, 8), (0.4, 1024, 4)]  # fmt: skip
    assert all(n * batch == 4096 for _, _, n, batch in left)
    right = [c for c in cols if c[0] == "batch"]
    assert [(c[2], c[3]) for c in right] == [(32, 4), (64, 4), (128, 4), (256, 4), (512, 4)]  # 1024: trained once
    small = sorting_large.columns(dict(sorting_large.SCALES["small"], images=100, fixed_batch=0))
    assert [(c[2], c[3]) for c in small] == [(32, 3), (32, 3), (64, 1)]
    with pytest.raises(ValueError, match="images: 16 is less than n = 32"):
        sorting_large.columns(dict(sorting_large.SCALES["small"], images=16))
    with pytest.raises(ValueError, match="fixed_batch: must be >= 0"):
        sorting_large.columns(dict(sorting_large.SCALES["small"], fixed_batch=-1))


def test_large_paper_numbers():
    entry = dict(half="images", art_lambda=0.4, n=1024, batch=4, beta=37.5)
    assert sorting_large.paper(entry) == {"EM5": 80.07, "batch": 4}
    assert sorting_large.paper(dict(entry, half="batch", n=32, beta=32.5)) == {"EM5": 72.31, "batch": 4}
    assert sorting_large.paper(dict(entry, art_lambda=0.25, n=32, batch=16, beta=30.0)) == {"EM5": 78.2, "batch": 128}
    assert sorting_large.paper(dict(entry, beta=31.0)) is None
    assert sorting_large.paper(dict(entry, art_lambda=0.25)) is None
    # the transcription against the thesis' own mean / best / worst rows
    published = {  # (lambda, n, half): (mean, best, worst)
        (0.25, 32, "images"): (77.35, 78.20, 76.40),
        (0.4, 128, "images"): (81.28, 82.50, 80.15),
        (0.4, 1024, "images"): (81.36, 82.80, 80.07),
        (0.4, 32, "batch"): (71.09, 72.31, 70.20),
        (0.4, 512, "batch"): (82.47, 82.99, 81.39),
    }
    for (lam, n, half), (mean, best, worst) in published.items():
        summary = [dict(half=half, art_lambda=lam, n=n, batch=4, beta=b, em5=0.5) for b in sorting_large.BETAS]
        (column,) = sorting_large.over_beta(summary)
        assert column["paper"]["mean"] == pytest.approx(mean, abs=0.011)
        assert (column["paper"]["best"], column["paper"]["worst"]) == (best, worst)


def _constant_digits(channels=3, side=4):
    """One image per class, every pixel of class d equal to d / 9."""
    labels = torch.arange(10)
    images = (labels.double() / 9).view(10, 1, 1, 1).expand(10, channels, side, side).float().contiguous()
    return images, labels


def test_svhn_composition_and_labels():
    cfg = dict(sorting_svhn.SCALES["smoke"], digits=2, size=8, crop=6)
    images, values = sorting_svhn.sets(_constant_digits(), cfg, 5, 3, torch.Generator().manual_seed(0), False)
    assert images.shape == (5, 3, 3, 6, 6) and values.shape == (5, 3)
    assert values.dtype == torch.int64 and 0 <= values.min() and values.max() < 100
    # composed 4 x 8 (tens left, ones right), resized to 8 x 8, the centre 6 x 6: columns 1..6 of the resized image
    tens, ones = (values // 10).float() / 9, (values % 10).float() / 9
    assert torch.allclose(images[..., :2], tens[..., None, None, None].expand(5, 3, 3, 6, 2), atol=1e-6)
    assert torch.allclose(images[..., 4:], ones[..., None, None, None].expand(5, 3, 3, 6, 2), atol=1e-6)


def test_svhn_random_crops_are_windows():
    cfg = dict(sorting_svhn.SCALES["smoke"], digits=1, size=10, crop=7)
    pool = (torch.rand(10, 3, 10, 10, generator=torch.Generator().manual_seed(1)), torch.arange(10))
    images, values = sorting_svhn.sets(pool, cfg, 8, 2, torch.Generator().manual_seed(2))
    full = pool[0]  # size = the digit's side: the resize keeps the image
    starts = set()
    for image, value in zip(images.flatten(0, 1), values.flatten()):
        hits = [
            (y, x) for y in range(4) for x in range(4) if torch.allclose(image, full[value, :, y : y + 7, x : x + 7])
        ]
        assert hits
        starts.update(hits)
    assert len(starts) > 3  # the windows move
    with pytest.raises(ValueError, match=r"crop: must lie in 1..size \(10\)"):
        sorting_svhn.sets(pool, dict(cfg, crop=11), 1, 2, torch.Generator())


def test_svhn_model_and_chunked_evaluation():
    cfg = dict(sorting_svhn.SCALES["paper"])
    model = sorting_svhn.make_model(cfg, 3)
    assert model(torch.zeros(2, 3, 54, 54)).shape == (2, 1)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in model) == 4
    with pytest.raises(ValueError, match="crop: 8 is too small for 4 poolings"):
        sorting_svhn.make_model(dict(cfg, crop=8), 3)
    small = dict(sorting_svhn.SCALES["smoke"], test_sets=7)
    torch.manual_seed(0)
    model = sorting_svhn.make_model(small, 3)
    pool = _constant_digits(side=28)
    pool = (pool[0] + 0.1 * torch.rand(pool[0].shape, generator=torch.Generator().manual_seed(3)), pool[1])
    for chunk in (500, 3, 2):  # the chunks' results weighted by their sizes: counts out of 7 sets, 28 positions
        em, ew = sorting_svhn.evaluate(model, pool, small, 4, chunk=chunk)
        assert em * 7 == pytest.approx(round(em * 7), abs=1e-6) and ew * 28 == pytest.approx(round(ew * 28), abs=1e-6)
        assert sorting_svhn.evaluate(model, pool, small, 4, chunk=chunk) == (em, ew)  # the same sets every time


def test_svhn_settings():
    cfg = dict(sorting_svhn.SCALES["smoke"], ns=[4, 32], methods=["bitonic", "neuralsort"], art_lambdas=[0.0, 0.25])
    per_n = (("bitonic", 0.0), ("bitonic", 0.25), ("neuralsort", None))
    assert sorting_svhn.settings(cfg) == [(n, m, a) for n in (4, 32) for m, a in per_n]
    with pytest.raises(ValueError, match="methods: unknown"):
        sorting_svhn.settings(dict(cfg, methods=["cauchy"]))
    assert sorting_svhn.paper(dict(n=32, method="bitonic", art_lambda=0.0)) == {"EW": 35.0}
    assert sorting_svhn.paper(dict(n=8, method="ot_sort", art_lambda=None)) == {"EM": 19.9, "EW": 64.5, "EM5": 51.7}


def _fake_svhn(folder):
    scipy_io = pytest.importorskip("scipy.io")
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("test", 20)):
        y = np.array([[10] + list(range(1, 10))] * (n // 10), dtype=np.uint8).reshape(-1, 1)
        x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
        scipy_io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})


def test_svhn_run_on_fake_files(tmp_path, monkeypatch):
    """The small and paper scales' data path: SVHN's .mat files from --data."""
    monkeypatch.setenv("RELAXOPS_PROGRESS", "0")
    with pytest.raises(FileNotFoundError, match="svhn"):
        reproduce("sorting-svhn", "small", out=tmp_path / "none")
    _fake_svhn(tmp_path)
    cfg = dict(sorting_svhn.SCALES["small"], ns=[2], methods=["bitonic", "neuralsort"], art_lambdas=[0.0, 0.25],
               channels=(2, 2, 2, 2), hidden=4, batch=2, steps=2, test_sets=6)  # fmt: skip
    summary = sorting_svhn.run(cfg, tmp_path, [0], runner.Record("sorting-svhn", "fake", cfg, tmp_path / "out"))
    assert [(e["method"], e["art_lambda"]) for e in summary] == [("bitonic", 0.0), ("bitonic", 0.25),
                                                                  ("neuralsort", None)]  # fmt: skip
    assert summary[1]["paper"] == {"EM": 93.8, "EW": 93.8, "EM5": 58.6} and summary[0]["paper"] is None
    assert all(0 <= e[m] <= 1 for e in summary for m in ("em", "ew", "em5"))
