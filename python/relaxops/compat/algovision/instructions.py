"""``algovision.instructions``: ``Let``, ``LetInt``, ``Print``. AlgoVision's module also holds ``core``'s names (it
imports them with ``from algovision.core import *``), such as ``Algorithm`` and ``VARIABLE_REGEX``: import them from
:mod:`relaxops.compat.algovision.core`."""

from ...algorithms.framework import Let, LetInt, Print

__all__ = ["Let", "LetInt", "Print"]
