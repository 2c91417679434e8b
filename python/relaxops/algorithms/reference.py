"""Pure-PyTorch references of the fused relaxed algorithms (the test oracles; written for clarity, float64-correct).

Each follows the AlgoVision program it replaces (``../shared/spec/algorithms.md`` section 4) exactly, except that
no branch is skipped for a small probability (AlgoVision's batch-wide ``epsilon`` skip of ``If``): the fused ops
compute the relaxation itself, which the framework computes too when ``epsilon=0``.
"""

from __future__ import annotations

import torch

# --- shortest path (relaxed Bellman-Ford on grids, spec 4.2) ------------------------------------------------------



# --- edit distance (relaxed Levenshtein, spec 4.4) -----------------------------------------------------------------



# --- bubble sort (relaxed bubble sort with the While mixture, spec 4.1) ---------------------------------------------

