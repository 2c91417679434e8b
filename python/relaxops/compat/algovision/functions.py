"""``algovision.functions``: the soft ``Min``, ``ArgMin``, ``Max``, ``ArgMax``. AlgoVision's module also holds
``core``'s names (it imports them with ``from algovision.core import *``), such as ``Algorithm`` and
``VARIABLE_REGEX``: import them from :mod:`relaxops.compat.algovision.core`."""

from ...algorithms.framework import ArgMax, ArgMin, Max, Min

__all__ = ["Min", "ArgMin", "Max", "ArgMax"]
