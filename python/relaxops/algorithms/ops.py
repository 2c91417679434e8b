"""Registered ops (``relaxops::<op>``) of the fused relaxed algorithms: argument checks, fake kernels for
torch.compile, autograd through separate forward and backward kernels."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend, _checks, _ext  # noqa: F401

# --- shortest path ------------------------------------------------------------------------------------------------



# --- edit distance ------------------------------------------------------------------------------------------------



# --- bubble sort --------------------------------------------------------------------------------------------------

