"""``algovision.conditions``: the relaxed conditions. AlgoVision's module also holds ``core``'s names (it imports
them with ``from algovision.core import *``), such as ``Algorithm`` and ``VARIABLE_REGEX``: import them from
:mod:`relaxops.compat.algovision.core`."""

from ...algorithms.framework import GT, LT, CatProbEq, CosineSimilarity, Eq, GEq, IsFalse, IsTrue, LEq, NEq

__all__ = ["Eq", "NEq", "LT", "LEq", "GT", "GEq", "CatProbEq", "CosineSimilarity", "IsTrue", "IsFalse"]
