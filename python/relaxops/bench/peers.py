"""The other packages the harness compares with (the originals and the peers a user might pick instead): how to
install each, as the skip reason of its provider when it is missing."""

from __future__ import annotations

import importlib.util

INSTALL = {
    # allRank 1.4.3 pins torch <= 1.8 and torchvision <= 0.9; its losses need none of its dependencies but torch
    "allrank": "pip install --no-deps allRank==1.4.3 (its pins would replace torch by 1.8)",
    "algovision": "pip install algovision==0.1.2",
    "scipy": "pip install scipy",
    "diffsort": "pip install diffsort",
    "difftopk": "pip install difftopk",
    "gendr": "pip install --no-build-isolation gendr (builds CUDA kernels: needs a CUDA torch and nvcc)",
    "ott": "pip install ott-jax",
    "torchsort": "pip install --no-build-isolation torchsort (its build fails when nvcc is on PATH without a CUDA "
    "torch: hide nvcc)",
    # torchlogix imports only torch and numpy, but declares torchvision and torch-geometric: pip then replaces
    # a CPU torch by PyPI's newest (CUDA) torch to satisfy the newest torchvision
    "torchlogix": "pip install --no-deps torchlogix==0.2.2 numpy (without --no-deps pip may replace a CPU torch "
    "by the CUDA torch that the newest torchvision pins)",
    # its setup.py builds CUDA only with a CUDA torch; v0.7.4 passes -std=c++14 after any CXXFLAGS
    "pytorch3d": "it is not on PyPI: pip install --no-build-isolation "
    '"git+https://github.com/facebookresearch/pytorch3d.git@v0.7.9" (a C++ build of many minutes; '
    "v0.7.4 compiles with -std=c++14, which torch >= 2.5 refuses)",
}


def missing(module: str) -> str | None:
    """The skip reason of a provider that needs ``module`` when it is not installed (how to install it), or None."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed: {INSTALL[module]}"
    return None
