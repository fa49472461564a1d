"""The window order: blocks permuted, each window of blocks shuffled whole
(:func:`lmdbio.shuffle.epoch_order`)."""

from __future__ import annotations

from typing import ClassVar

from .. import shuffle as sh
from .base import Order

__all__ = ["WINDOW", "WindowOrder"]


class WindowOrder(Order):
    """The most random order: a node reader whose ranks' records lie close together reads
    every window whole."""

    name = "window"
    state_keys: ClassVar[tuple[str, ...]] = ("seed", "block", "window")

    def order(self, n, epoch, batch, nprocs, plan):
        return sh.epoch_order(n, plan.block, plan.window, plan.seed, epoch)

    def windows(self, n, epoch, plan):
        return sh.record_windows(n, plan.block, plan.window, plan.seed, epoch)


WINDOW = WindowOrder()
