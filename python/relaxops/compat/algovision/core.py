"""``algovision.core``: ``Algorithm``, the declarations ``Input``, ``Output``, ``Variable`` / ``Var``,
``VariableInt`` / ``VarInt``, the base classes ``AlgoModule`` (relaxops' ``Instruction``) and ``Condition``, and
``VARIABLE_REGEX`` (the pattern of a variable name).

A custom instruction or condition subclasses these with relaxops' protocol: ``Instruction.compile()`` returns the
closure ``run(state, hp) -> state`` and ``Condition.prob(state, hp)`` the probability, where ``state`` is a dict of
names to values; AlgoVision's ``__call__(state)`` on its ``State`` object is not used. Left out: ``State`` (the
state is a plain dict here).
"""

from ...algorithms.framework import _NAME, Algorithm, Condition, Input, Output, Var, Variable, VariableInt, VarInt
from ...algorithms.framework import Instruction as AlgoModule

__all__ = [
    "Algorithm",
    "Input",
    "Output",
    "Variable",
    "Var",
    "VariableInt",
    "VarInt",
    "AlgoModule",
    "Condition",
    "VARIABLE_REGEX",
]

VARIABLE_REGEX = _NAME.pattern
