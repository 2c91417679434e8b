"""Public fused relaxed algorithms: one call, one forward and one backward kernel each (argument checks here)."""

from __future__ import annotations

import torch
from torch import Tensor

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------



# --- bubble sort --------------------------------------------------------------------------------------------------

