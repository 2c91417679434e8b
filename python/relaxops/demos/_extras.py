"""What the demos need beyond relaxops."""

from __future__ import annotations


def require_extras(name: str) -> None:
    """Raises ImportError with the install command when the demo extra (scikit-learn, tqdm) is missing."""
    try:
        import sklearn.datasets  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f'the {name} demo needs scikit-learn and tqdm ({e}); install them with: pip install "relaxops[demo]"'
        ) from None
