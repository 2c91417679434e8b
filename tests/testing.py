"""Tolerances and comparison helpers shared by the test suites.

Kernels are compared with a float64 reference. The bounds, per compute dtype:
* float64: the kernels reorder a few additions (e.g. ``v + a (u - v)`` instead of ``a u + (1 - a) v``), so
  they agree with the reference to a few ulps times the network depth: rtol 1e-9, atol 1e-10.
* float32: same reasoning with eps = 1.2e-7 and depth <= ~100 layers: rtol 1e-4, atol 1e-5.
* float16/bfloat16: computed in float32 internally; the error against the float64 reference must be at most
  twice that of the reference run in the same low precision (``assert_low_precision_close``).
"""

from __future__ import annotations

import torch

TOLERANCES = {
    torch.float64: dict(rtol=1e-9, atol=1e-10),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None, scale=1.0, msg=""):
    """Compare with the tolerance of ``dtype`` (default: actual's); ``scale`` grows atol for large magnitudes."""
    tol = TOLERANCES[dtype or actual.dtype]
    torch.testing.assert_close(actual.to(expected.dtype), expected, rtol=tol["rtol"], atol=tol["atol"] * scale,
                               equal_nan=True, msg=(lambda m: f"{msg}\n{m}") if msg else None)


def assert_low_precision_close(actual: torch.Tensor, low_ref: torch.Tensor, exact: torch.Tensor, slack=1e-3):
    """Error of ``actual`` vs the float64 ``exact`` at most twice that of ``low_ref`` (the reference in low precision).

    ``slack`` is an absolute floor (half precision's unit roundoff is ~1e-3), so that a reference that happens
    to be exact on a tiny case does not demand exactness.
    """
    err = (actual.double() - exact).abs().max().item()
    ref_err = (low_ref.double() - exact).abs().max().item()
    assert err <= 2 * ref_err + slack, f"low-precision error {err:.3g} > 2 x reference error {ref_err:.3g} + {slack}"
