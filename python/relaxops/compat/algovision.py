"""``relaxops.compat.algovision``: AlgoVision 0.1.2's classes and signatures (Petersen et al., relaxed algorithms),
backed by relaxops' framework, which builds each program once into a plan.

Switch with one import: ``from relaxops.compat.algovision import Algorithm, Input, Output, Var, ...``. Programs
give AlgoVision's results (float64, 1e-9; values and gradients). Deliberate differences (see
``relaxops.algorithms.framework``): hyper-parameters are read at call time (changing ``algorithm.beta`` takes
effect; AlgoVision freezes them at construction), ``c1 & c2`` / ``c1 | c2`` need no explicit ``beta``, a
left-hand index may be a ``slice``, and bad programs raise ``SyntaxError``/``TypeError``/``ValueError``/
``NameError`` naming the part instead of ``AssertionError``. For the hot algorithms, the fused kernels
(``relaxops.algorithms.bubble_sort``, ``shortest_path``, ``edit_distance``) are much faster than any program.
"""

from ..algorithms.framework import (  # noqa: F401
    GT,
    LT,
    Algorithm,
    ArgMax,
    ArgMin,
    CatProbEq,
    CosineSimilarity,
    Eq,
    For,
    GEq,
    If,
    Input,
    IsFalse,
    IsTrue,
    LEq,
    Let,
    LetInt,
    Max,
    Min,
    NEq,
    Output,
    Print,
    Var,
    Variable,
    VariableInt,
    VarInt,
    While,
)

__all__ = ["Algorithm", "Input", "Output", "Variable", "Var", "VariableInt", "VarInt", "Eq", "NEq", "LT", "LEq",
           "GT", "GEq", "CatProbEq", "CosineSimilarity", "IsTrue", "IsFalse", "If", "While", "For", "Let", "LetInt",
           "Print", "Min", "ArgMin", "Max", "ArgMax"]
