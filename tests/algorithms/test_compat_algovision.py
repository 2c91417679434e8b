"""relaxops.compat.algovision against AlgoVision 0.1.2's module layout and attributes (its programs' results are
compared in test_framework.py)."""

from __future__ import annotations

import importlib

import pytest
import torch
from relaxops.compat import algovision as compat
from testing import assert_mirrors, defined_names

av = pytest.importorskip("algovision")


def program(M):
    return M.Algorithm(
        M.Input("x"),
        M.Var("y", torch.tensor(0.0)),
        M.If(M.GT("x", 0.0), if_true=M.Let("y", lambda x: 2 * x), if_false=M.Let("y", 1.0)),
        M.Let("y", lambda y: y + 1),
        M.Output("y"),
        beta=4.0,
    )


def test_algo_modules():
    """``Algorithm.algo_modules``: the instructions in order (a tuple: the program is built from them)."""
    ours, theirs = program(compat), program(av)
    assert [type(m).__name__ for m in ours.algo_modules] == [type(m).__name__ for m in theirs.algo_modules]
    assert isinstance(ours.algo_modules, tuple) and ours.algo_modules == tuple(ours.instructions)
    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("name", ["core", "conditions", "control_structures", "functions", "instructions"])
def test_submodules_have_algovisions_names(name):
    """``from relaxops.compat.algovision.<module> import ...`` as from AlgoVision's modules (names left out are
    documented in the module's docstring)."""
    ours = importlib.import_module(f"relaxops.compat.algovision.{name}")
    assert_mirrors(ours, defined_names(importlib.import_module(f"algovision.{name}")))
    for attr in ours.__all__:
        if hasattr(compat, attr):
            assert getattr(ours, attr) is getattr(compat, attr)
    if name == "core":
        assert isinstance(compat.Let("y", 1.0), ours.AlgoModule) and isinstance(compat.GT("x", 0.0), ours.Condition)
        assert ours.VARIABLE_REGEX == importlib.import_module("algovision.core").VARIABLE_REGEX
