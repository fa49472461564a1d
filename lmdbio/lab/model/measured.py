"""The model's measured tables: a committed CSV a microbenchmark wrote, found and checked once."""

from __future__ import annotations

from pathlib import Path

from lmdbio.errors import ConfigurationError
from ..paths import REPO

__all__ = ["read_measured"]


def read_measured(path, what: str, writer: str, columns):
    """The DataFrame in ``path`` (relative paths are the repository's).

    Raises ConfigurationError naming ``what`` and the command that writes it
    (``writer``) when the file is missing, and the columns it needs when it
    lacks any of ``columns`` or has no row.
    """
    import pandas as pd

    f = Path(path)
    if not f.is_absolute():
        f = REPO / f
    if not f.exists():
        raise ConfigurationError(f"{what} {f} not found ({writer} writes it)")
    d = pd.read_csv(f)
    if not set(columns) <= set(d.columns) or d.empty:
        raise ConfigurationError(f"{f}: needs rows with columns {', '.join(columns)}")
    return d
