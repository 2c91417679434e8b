"""What the Triton launchers of every family share."""

from __future__ import annotations

import torch

# tools/triton_aot.py sets this to plan launches on CPU tensors as on a GPU: it records a GPU's launch
# configurations while the interpreter runs them.
PLAN_FOR_GPU = False


def interpreted(device: torch.device) -> bool:
    """Whether launches on ``device`` are planned for Triton's interpreter (CPU tensors: large blocks and few
    programs, since it runs the programs one after the other) rather than for a GPU."""
    return device.type == "cpu" and not PLAN_FOR_GPU
