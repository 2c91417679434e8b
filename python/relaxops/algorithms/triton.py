"""Triton kernels of the fused relaxed algorithms (launched by ops.py; run on CPU tensors under
``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import triton
import triton.language as tl

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------



# --- bubble sort --------------------------------------------------------------------------------------------------

