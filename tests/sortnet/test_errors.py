"""Bad input: clear errors that name the argument and the allowed values, before any kernel runs."""

import math

import pytest
import relaxops
import torch


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(network="bubble"), ValueError, r"network must be one of \['bitonic', 'odd_even', 'bitonic_original'\]"),
        (dict(relaxation="softmax"), ValueError, r"relaxation must be one of \['logistic', 'logistic_phi'"),
        (dict(steepness=0.0), ValueError, "steepness must be a finite number > 0"),
        (dict(steepness=-1.0), ValueError, "steepness must be a finite number > 0"),
        (dict(steepness=math.inf), ValueError, "steepness must be a finite number > 0"),
        (dict(steepness=math.nan), ValueError, "steepness must be a finite number > 0"),
        (dict(art_lambda=-0.1), ValueError, r"art_lambda must be a number in \[0.0, 1.0\]"),
        (dict(art_lambda=1.5), ValueError, r"art_lambda must be a number in \[0.0, 1.0\]"),
        (dict(backend="gpu"), ValueError, r"backend must be one of \['auto', 'reference', 'cpu', 'cuda', 'triton'\]"),
        (dict(backend="cuda"), RuntimeError, "backend 'cuda' cannot run"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        relaxops.sort(torch.randn(2, 5), **kwargs)


def test_bad_tensors():
    with pytest.raises(TypeError, match="x must be float16, bfloat16, float32 or float64, got torch.int64"):
        relaxops.sort(torch.arange(5))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        relaxops.sort([3.0, 1.0])
    with pytest.raises(ValueError, match=r"n >= 1"):
        relaxops.sort(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        relaxops.sort(torch.tensor(1.0))


def test_output_too_large_is_refused_with_its_size():
    x = torch.zeros(1, 4096).expand(10**6, 4096)  # P would need 62.5 TiB
    with pytest.raises(MemoryError, match=r"relaxed sort of x \[1000000, 4096\].*GiB.*or return_matrix=False"):
        relaxops.sort(x)


def test_env_override(monkeypatch):
    monkeypatch.setenv("RELAXOPS_BACKEND", "nonsense")
    with pytest.raises(ValueError, match="RELAXOPS_BACKEND must be one of"):
        relaxops.sort(torch.randn(2, 3))
    monkeypatch.setenv("RELAXOPS_BACKEND", "reference")
    s, _ = relaxops.sort(torch.randn(2, 3))
    assert s.shape == (2, 3)


def test_module_checks_size():
    m = relaxops.DiffSortNet("odd_even", 4)
    with pytest.raises(ValueError, match="size 4"):
        m(torch.randn(2, 5))
    with pytest.raises(ValueError, match="size 4"):  # a 0-d tensor has no last dimension (was an IndexError)
        m(torch.tensor(1.0))
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        relaxops.DiffSortNet("odd_even", 0)
    with pytest.raises(ValueError, match="relaxation must be one of"):
        relaxops.DiffSortNet("odd_even", 3, relaxation="nope")
