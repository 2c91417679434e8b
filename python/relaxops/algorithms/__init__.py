"""Relaxed algorithms: AlgoVision's framework (relaxed if/else, loops, comparisons, indexing) built into a plan,
and fused kernels for the hot relaxed algorithms (shortest path on grids, edit distance, bubble sort)."""

from .framework import (
    GT,
    LT,
    Algorithm,
    And,
    ArgMax,
    ArgMin,
    CatProbEq,
    Condition,
    CosineSimilarity,
    Eq,
    For,
    GEq,
    If,
    Input,
    Instruction,
    IsFalse,
    IsTrue,
    LEq,
    Let,
    LetInt,
    Max,
    Min,
    NEq,
    Or,
    Output,
    Print,
    Var,
    Variable,
    VariableInt,
    VarInt,
    While,
)
from .functional import bubble_sort, edit_distance, shortest_path
from .indexing import cat_index, soft_index, soft_index_weights
from .programs import bubble_sort_program, edit_distance_program, shortest_path_program

__all__ = ["Algorithm", "Input", "Output", "Var", "Variable", "VarInt", "VariableInt", "Let", "LetInt", "Print",
           "If", "While", "For", "Instruction", "Condition", "Eq", "NEq", "LT", "LEq", "GT", "GEq", "CatProbEq",
           "CosineSimilarity", "IsTrue", "IsFalse", "And", "Or", "Min", "ArgMin", "Max", "ArgMax", "soft_index",
           "soft_index_weights", "cat_index", "bubble_sort_program", "edit_distance_program", "shortest_path_program",
           "bubble_sort", "edit_distance", "shortest_path"]
