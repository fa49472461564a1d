"""Where the lab finds the repository it reproduces: results, figures and notebooks live there."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO"]

#: The repository root (the lab reads and writes ``data/``, ``figures/`` and ``notebooks/`` under it).
REPO = Path(__file__).resolve().parents[2]
