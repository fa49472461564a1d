"""The elastic order: the shard order over canonical partitions in place of the ranks
(:func:`lmdbio.shuffle.elastic_order`), one order at any rank count."""

from __future__ import annotations

from .. import shuffle as sh
from .window import WindowOrder

__all__ = ["ELASTIC", "ElasticOrder"]


class ElasticOrder(WindowOrder):
    """The same global batches at every rank count dividing the batch."""

    name = "elastic"
    state_keys = ("seed", "block", "window", "partitions")

    def order(self, n, epoch, batch, nprocs, plan):
        return sh.elastic_order(n, plan.block, plan.window, plan.seed, epoch, batch,
                                plan.partitions, plan.last_batch)


ELASTIC = ElasticOrder()
