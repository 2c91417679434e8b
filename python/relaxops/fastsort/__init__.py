"""Fast soft sort and soft rank (Blondel et al. 2020): permutahedron projections by isotonic regression (PAV)."""

from .functional import soft_rank, soft_sort  # noqa: F401  (public API)
