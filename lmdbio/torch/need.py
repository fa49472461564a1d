"""PyTorch, imported when first needed, or an ImportError that says how to install it."""

from __future__ import annotations

__all__ = ["need_torch"]


def need_torch():
    """The ``torch`` module (lmdbio's core does not depend on it)."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError("lmdbio.torch needs PyTorch: pip install torch "
                          "(CPU only: --index-url set to the PyTorch CPU wheel index from "
                          "pytorch.org's install page)") from exc
    return torch
