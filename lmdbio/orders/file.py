"""The file order: every epoch reads the records in key order."""

from __future__ import annotations

import numpy as np

from .base import Order

__all__ = ["FILE", "FileOrder"]


class FileOrder(Order):
    """Positions in key order; depends on no setting."""

    name = "file"
    state_keys = ()
    shuffled = False

    def order(self, n, epoch, batch, nprocs, plan):
        return np.arange(n, dtype=np.int64)


FILE = FileOrder()
