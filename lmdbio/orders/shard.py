"""The shard order: shard each window among the ranks, then shuffle each shard
(:func:`lmdbio.shuffle.shard_order`)."""

from __future__ import annotations

from .. import shuffle as sh
from .window import WindowOrder

__all__ = ["SHARD", "ShardOrder"]


class ShardOrder(WindowOrder):
    """A node reader reads one run of each window (a file-order epoch's bytes); the order
    depends on the rank count."""

    name = "shard"
    depends_on_nprocs = True

    def order(self, n, epoch, batch, nprocs, plan):
        return sh.shard_order(n, plan.block, plan.window, plan.seed, epoch, batch, nprocs,
                              plan.last_batch)


SHARD = ShardOrder()
