"""Distributors: where a reader's chunk lands, and how each rank gets its share as a Batch.

:class:`Private` (per-rank variants): every rank reads its own records into
its own memory. :class:`NodeGroup` (LMM): one reader per group fills rotating
MPI-3 shared-memory slots (:class:`~lmdbio.shm.GroupBuffer`) and the group's
ranks view their records there. A distributor also says who reads what: the
offset and count of the records its reader reads in every batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..batch import Batch, ChunkRecords
from .stage import Abilities, Distributor

if TYPE_CHECKING:
    from ..shm import GroupBuffer

__all__ = ["Private", "PrivateSlots", "NodeGroup"]


class Private(Distributor):
    """Every rank reads its own ``per_rank`` records of each batch into private memory.

    Each chunk gets a fresh buffer (Caffe's baselines copy into new memory).
    """

    name = "private"
    abilities = Abilities(collective_free=True, extra_slots=True)

    SLOTS = 0

    def __init__(self, comm, topology, per_rank: int):
        self.readers = comm          # every rank reads
        self.lo, self.count = comm.rank * per_rank, per_rank
        self.nslots = self.SLOTS
        self._slots: list[np.ndarray] = []
        self._buf: np.ndarray | None = None   # the chunk's buffer, from reserve()
        self._records: ChunkRecords | None = None   # what publish() made of it

    def setup(self, stream, capacity: int) -> None:
        from ..shm import prefault

        self.k = stream.k
        if self.nslots:
            self.nslots += self.ahead
        self._slots = [np.empty(capacity, dtype=np.uint8) for _ in range(self.nslots)]
        for s in self._slots:
            prefault(s)   # now, not in the first batches

    def reserve(self, chunk: int, nbytes: int, t: int = -1) -> np.ndarray:
        if not self.nslots:
            buf = np.empty(nbytes, dtype=np.uint8)
        else:
            slot = chunk % self.nslots
            if nbytes > len(self._slots[slot]):
                self._slots[slot] = np.empty(int(nbytes * 1.25), dtype=np.uint8)
            buf = self._slots[slot]
        self._buf = buf
        return buf

    def publish(self, chunk: int, offsets: np.ndarray, sizes: np.ndarray, rec, t: int) -> None:
        assert self._buf is not None, "reserve() gives the chunk its buffer"
        self._records = ChunkRecords(self._buf, offsets, sizes)

    def batch(self, chunk: int, it: int, indices: np.ndarray) -> Batch:
        assert self._records is not None, "publish() hands the chunk's records over"
        return self._records.batch(it * self.count, self.count, indices)

    def close(self, limit: float, agree: bool) -> None:
        self._slots = []
        self._buf = self._records = None


class PrivateSlots(Private):
    """Private memory in rotating buffers, faulted in at setup (``lmdbio-direct``): three keep
    every batch valid until the rank's second following read; batches are views."""

    name = "private-slots"
    SLOTS = 3


class NodeGroup(Distributor):
    """LMM: the group's reader fills shared slots; every rank of the group views its records."""

    name = "node-group"
    abilities = Abilities(extra_slots=True)

    def __init__(self, comm, topology, per_rank: int):
        self.topology = topology
        self.is_reader = topology.is_reader
        self.readers = topology.readers_comm   # None on ranks that do not read
        self.lo = topology.group_ranks[0] * per_rank
        self.count = topology.group_comm.size * per_rank
        self.member_lo = topology.group_comm.rank * per_rank
        self.per_rank = per_rank
        self.gb: GroupBuffer | None = None   # the group's shared slots, from setup() to close()
        self._records: tuple = (-1, None)     # (hand-off, its records) the batches view

    def setup(self, stream, capacity: int) -> None:
        from ..shm import GroupBuffer

        # More slots for small chunks (a deeper pipeline), within about 64 MiB; ranks that
        # read ahead hold ``ahead`` more chunks, so the slots that keep them valid come on top.
        nslots = int(min(16, max(GroupBuffer.MIN_SLOTS, (64 << 20) // capacity))) + self.ahead
        topo = self.topology
        self.gb = GroupBuffer(topo.group_comm, stream.count * stream.k, capacity, nslots,
                              names=topo.group_ranks, batches_per_chunk=stream.k, lag=self.ahead)

    def slots(self) -> GroupBuffer:
        """The group's shared slots setup() made."""
        assert self.gb is not None, "the shared slots are made by setup()"
        return self.gb

    def reserve(self, chunk: int, nbytes: int, t: int = -1) -> np.ndarray:
        return self.slots().reserve(chunk, nbytes, t)

    def publish(self, chunk: int, offsets: np.ndarray, sizes: np.ndarray, rec, t: int) -> None:
        with rec.phase("distribute", t, chain=True):
            self.slots().publish(chunk, offsets, sizes, t)

    def receive(self, chunk: int, rec, t: int) -> None:
        with rec.phase("wait", t):
            self.slots().receive(chunk, t)

    def batch(self, chunk: int, it: int, indices: np.ndarray) -> Batch:
        if self._records[0] != chunk:
            # Copies: the header slot is rewritten when the slot comes round again.
            data, offs, sizes = self.slots().current(chunk)
            self._records = (chunk, ChunkRecords(data, offs.copy(), sizes.copy()))
        return self._records[1].batch(it * self.count + self.member_lo, self.per_rank, indices)

    def abandon(self) -> None:
        if self.gb is not None:
            self.gb.abandon()

    def close(self, limit: float, agree: bool) -> None:
        self._records = (-1, None)   # only the batches themselves may keep a slot mapped
        gb, self.gb = self.gb, None
        if gb is not None:
            gb.close(limit, agree=agree)
