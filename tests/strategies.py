"""Hypothesis strategies shared by the fuzz tests of every family (``tests/<family>/test_fuzz.py``).

Inputs come in the shapes and layouts users pass: empty batches, 1-D, ``n = 1``, odd sizes, several batch
dims; contiguous, transposed, expanded (stride 0) and sliced (strided) views; every float dtype; values that
are well conditioned (for comparisons with the float64 reference), tied, huge, or non-finite (for invariants).
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# Odd sizes on purpose, plus the powers of two around which networks change shape.
SIZES = st.one_of(st.integers(1, 9), st.sampled_from([15, 16, 17, 31, 32, 33, 63, 64, 65, 100]))
BATCH = st.lists(st.integers(0, 4), min_size=0, max_size=2).map(tuple)  # () is 1-D input; 0 an empty batch
LAYOUTS = st.sampled_from(["contiguous", "transposed", "expanded", "sliced"])


def layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """``t`` in another memory layout (a view whose strides the kernels must handle); compare against the
    returned tensor's values: they are ``t``'s, except for "expanded", where every row is ``t``'s first row."""
    if kind == "contiguous" or t.dim() == 0:
        return t
    if kind == "transposed":  # last dim strided: a transpose of a contiguous tensor
        return t.transpose(-1, 0).contiguous().transpose(-1, 0) if t.dim() > 1 else t
    if kind == "expanded":  # a stride-0 batch dim (all rows the same)
        return t[..., :1, :].expand(t.shape) if t.dim() > 1 and t.shape[-2] > 0 else t
    if kind == "sliced":  # every other element of a twice-as-long buffer
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        big[..., ::2] = t
        return big[..., ::2]
    raise ValueError(kind)


@st.composite
def well_conditioned(draw, shape, dtype=torch.float64, gap=0.05):
    """Rows of distinct values at least ``gap`` apart (no near-ties: the reference comparison is meaningful)."""
    n = shape[-1]
    rows = math.prod(shape[:-1])
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    base = torch.randperm(n, generator=g).to(torch.float64) * 2 * gap
    scale = draw(st.sampled_from([1.0, 0.1, 10.0]))
    shift = draw(st.sampled_from([0.0, -3.0, 1e3]))
    out = torch.stack([base[torch.randperm(n, generator=g)] for _ in range(rows)]) if rows else base[:0].repeat(0, 1)
    return ((out - n * gap) * scale + shift).reshape(shape).to(dtype)


@st.composite
def extreme(draw, shape, dtype=torch.float64, allow_nonfinite=True):
    """Values users hit by accident: ties, huge magnitudes, tiny differences, NaN and infinities."""
    kinds = ["ties", "huge", "tiny_gaps", "mixed"] + (["nonfinite"] if allow_nonfinite else [])
    kind = draw(st.sampled_from(kinds))
    numel = math.prod(shape)
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    finfo = torch.finfo(dtype)
    if kind == "ties":
        t = torch.randint(0, 3, (numel,), generator=g).to(torch.float64)
    elif kind == "huge":
        t = (torch.rand(numel, generator=g, dtype=torch.float64) - 0.5) * min(finfo.max / 4, 1e30)
        t += draw(st.sampled_from([0.0, 1e5, 1e10])) if dtype == torch.float64 else 0.0
    elif kind == "tiny_gaps":
        t = 1.0 + torch.arange(numel, dtype=torch.float64) * finfo.eps * 4
    elif kind == "mixed":
        t = torch.randn(numel, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-3, 8, (numel,), generator=g)
    else:
        t = torch.randn(numel, generator=g, dtype=torch.float64)
        pick = torch.randint(0, 4, (numel,), generator=g)
        t[pick == 1] = math.inf
        t[pick == 2] = -math.inf
        t[(pick == 3) & (torch.rand(numel, generator=g) < 0.3)] = math.nan
    return t.clamp(-finfo.max, finfo.max).where(t.isfinite(), t).reshape(shape).to(dtype)
