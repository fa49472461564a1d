"""COAL: read several batches per request, so each request is about ``target_bytes`` long."""

from __future__ import annotations

from ..collective import allgather
from ..plan import coalesce_batches

__all__ = ["Coalesce"]


class Coalesce:
    """Chooses ``k``, the batches per chunk: one locate, one fetch, one hand-off for ``k`` batches.

    ``k`` is the power of two that brings a chunk nearest below ``target_bytes``
    (:func:`lmdbio.plan.coalesce_batches`); a target of 0 turns COAL off (k = 1).
    """

    def __init__(self, target_bytes: int):
        self.target_bytes = int(target_bytes)

    def batches(self, batch_bytes: float, max_batches: int) -> int:
        return coalesce_batches(batch_bytes, self.target_bytes, max_batches)

    def agreed(self, comm, batch_bytes: float, max_batches: int) -> int:
        """One ``k`` for every rank of ``comm``: the smallest of the readers' own (a bounded
        allgather; ``batch_bytes``: this rank's reader's bytes per batch). Collective.

        Reader groups may serve different numbers of ranks (``ranks_per_node`` not dividing
        the ranks, ``readers_per_node`` not dividing a node), so their own ``k`` differ; the
        chunk boundaries are where epochs start, STAG's turns pass and DM's cursor goes
        round, so every reader must cut the batches at the same ones. The widest group's
        ``k`` keeps every request at or below the target.
        """
        if self.target_bytes <= 0:
            return 1
        own = self.batches(batch_bytes, max_batches)
        return min(allgather(comm, own, what="the batches per chunk (COAL)"))
