"""Drop-in replacement for ``torchsort`` 0.1.10 (Blondel et al.'s fast soft sort and soft rank): ``soft_rank`` and
``soft_sort`` with its signatures, conventions and results, computed by relaxops' kernels.

Switch with one import: ``from relaxops.compat import torchsort`` (``from relaxops.compat.torchsort.ops import
soft_rank`` as torchsort's ``torchsort.ops``). Same arguments (``values`` a 2-D ``[B, n]`` tensor, ``regularization``
``"l2"`` or ``"kl"``, ``regularization_strength``), same errors for a tensor that is not 2-D or an unknown
regularization, same values (ascending, ranks 1-based) and gradients. Integer tensors are computed in the default
float dtype (``torch.get_default_dtype()``, float32 unless changed), which is what torchsort returns for them.
Deliberate differences:

* accurate in float32 at small strengths (torchsort's ``soft_sort`` forms ``rho / eps`` and loses ~0.1 at n = 1000,
  eps = 1e-4), and finite KL gradients where torchsort's overflow (it exponentiates ``x / eps`` unshifted);
* the backward uses the block structure recorded by the forward, not blocks recovered with a 1e-9 tolerance;
* bfloat16 works (computed in float32), and so does a CPU build next to nvcc without CUDA torch;
* integer inputs work for ``soft_sort(..., "kl")`` too (torchsort raises a dtype error there) and ``uint8`` values
  are sorted as the numbers they hold (torchsort negates them in ``uint8``, which wraps around); a ``bool`` tensor
  raises ``TypeError`` (torchsort: ``NotImplementedError``);
* a ``regularization_strength`` that is not a finite number > 0 raises ``ValueError`` (torchsort returns NaN/inf).

``relaxops.soft_rank`` / ``relaxops.soft_sort`` take any batch dimensions and a ``descending`` flag as well.
"""

from .ops import soft_rank, soft_sort

__all__ = ["soft_rank", "soft_sort"]
