"""Relaxed algorithms: AlgoVision's framework (relaxed if/else, loops, comparisons, indexing) built into a plan,
and fused kernels for the hot relaxed algorithms (shortest path on grids, edit distance, bubble sort)."""
