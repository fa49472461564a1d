"""COAL: read several batches per request, so each request is about ``target_bytes`` long."""

from __future__ import annotations

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
