"""``algovision.control_structures``: ``If``, ``While``, ``For``. AlgoVision's module also holds ``core``'s names (it
imports them with ``from algovision.core import *``), such as ``Algorithm`` and ``VARIABLE_REGEX``: import them from
:mod:`relaxops.compat.algovision.core`."""

from ...algorithms.framework import For, If, While

__all__ = ["If", "While", "For"]
