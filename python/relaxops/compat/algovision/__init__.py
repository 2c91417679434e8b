"""``relaxops.compat.algovision``: AlgoVision 0.1.2's classes and signatures (Petersen et al., relaxed algorithms),
backed by relaxops' framework, which builds each program once into a plan.

Switch with one import: ``from relaxops.compat.algovision import Algorithm, Input, Output, Var, ...``. Programs
give AlgoVision's results (float64, 1e-9; values and gradients). AlgoVision's submodules are here too:
``relaxops.compat.algovision.core`` (``Algorithm``, the declarations and the base classes), ``.conditions``,
``.control_structures``, ``.functions`` and ``.instructions``; each module's docstring lists what it leaves out.

Deliberate differences (see ``relaxops.algorithms.framework``): hyper-parameters are read at call time (changing
``algorithm.beta`` takes effect; AlgoVision freezes them at construction), ``c1 & c2`` / ``c1 | c2`` need no explicit
``beta``, a left-hand index may be a ``slice``, and bad programs raise ``SyntaxError``/``TypeError``/``ValueError``/
``NameError`` naming the part instead of ``AssertionError``. ``Algorithm.algo_modules`` is a tuple: the program is
built from the instructions at construction, so editing it afterwards would change nothing. For the hot algorithms,
the fused kernels (``relaxops.algorithms.bubble_sort``, ``shortest_path``, ``edit_distance``) are much faster than
any program.
"""

from .conditions import GT, LT, CatProbEq, CosineSimilarity, Eq, GEq, IsFalse, IsTrue, LEq, NEq
from .control_structures import For, If, While
from .core import Algorithm, Input, Output, Var, Variable, VariableInt, VarInt
from .functions import ArgMax, ArgMin, Max, Min
from .instructions import Let, LetInt, Print

__all__ = [
    "Algorithm",
    "Input",
    "Output",
    "Variable",
    "Var",
    "VariableInt",
    "VarInt",
    "Eq",
    "NEq",
    "LT",
    "LEq",
    "GT",
    "GEq",
    "CatProbEq",
    "CosineSimilarity",
    "IsTrue",
    "IsFalse",
    "If",
    "While",
    "For",
    "Let",
    "LetInt",
    "Print",
    "Min",
    "ArgMin",
    "Max",
    "ArgMax",
]
