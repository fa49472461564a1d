"""DIO's locator: byte extents from a record index, walked once and scattered.

One rank of the readers walks the index of its snapshot (branch and leaf
pages only) and sends each reader the (offset, size) of only the records it
will ever read; each chunk's records are then looked up in that table and
planned into the fewest extents for the fetcher's preads.
"""

from __future__ import annotations

import numpy as np

from .. import tags
from ..collective import collective
from ..errors import LmdbioError, SnapshotError
from ..recordindex import open_snapshot
from ..plan import EpochSchedule, positions_touched
from .fetch import Scatter
from .stage import Abilities, Extents, Locator

__all__ = ["Index", "Table", "scatter_index"]


def scatter_index(comm, snapshot, n: int, batch: int, lo: int, count: int,
                  row: dict, every: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DIO's index pass, once: rank 0 of ``comm`` walks ``snapshot``'s index and sends each rank
    only the records it will read: :func:`positions_touched` of its ``lo``, ``count`` in the
    endless stream, or every record where ``every`` (an epoch's rows can put any record in
    any rank's share).

    Collective over ``comm``; a failed walk raises on every rank. Returns this rank's
    ``(positions, offsets, sizes)`` (int64), checked against its own snapshot.
    """
    wants = comm.gather((lo, count, every), root=0)
    idx = collective(comm, lambda: snapshot.build_index() if comm.rank == 0 else None)
    if comm.rank == 0:
        row["pages_read"] = idx.pages_read
        parts = []
        for w_lo, w_count, w_every in wants:
            pos = (np.arange(n, dtype=np.int64) if w_every
                   else positions_touched(n, batch, w_lo, w_count))
            parts.append((pos, idx.offsets[pos].astype(np.int64), idx.sizes[pos].astype(np.int64),
                          idx.txnid))
        for k in range(1, comm.size):
            comm.send(parts[k], dest=k, tag=tags.INDEX)
        mine = parts[0]
    else:
        mine = comm.recv(source=0, tag=tags.INDEX)
    pos, offsets, sizes, txnid = mine
    snapshot.check(txnid)
    return pos, offsets, sizes


class Table(Locator):
    """Locates through a table of (position, offset, size) of every record this reader reads.

    Holds a :class:`~lmdbio.recordindex.Snapshot` (an LMDB read transaction) so a
    writer cannot recycle the pages the offsets point to.
    """

    abilities = Abilities(random_access=True, windowed=True)

    def __init__(self):
        self.snapshot = None
        self.path = None
        self._pos = self._off = self._size = None

    def open(self, path, meta, nprocs: int) -> None:
        self.path = path
        self.snapshot = open_snapshot(path)
        self.locked = bool(self.snapshot.locked)

    def snapshot_id(self) -> tuple[int, int] | None:
        s = self.snapshot
        return (s.txnid, s.meta.entries) if s is not None else None

    def scatter(self, readers, schedule, row: dict) -> None:
        """Fill the table of ``schedule``'s positions from the record index (collective over
        ``readers``)."""
        s = schedule
        self._pos, self._off, self._size = scatter_index(readers, self.snapshot, s.n, s.batch,
                                                         s.lo, s.count, row,
                                                         every=isinstance(s, EpochSchedule))
        if len(self._pos) and int(self._pos[-1]) >= s.n:
            raise SnapshotError(f"{self.path}: index positions reach {int(self._pos[-1])} but the "
                                f"snapshot holds {s.n} records")

    def locate(self, chunk: int, schedule, rec) -> Extents:
        return self.locate_positions(schedule.chunk_positions(chunk), chunk * schedule.k, rec)

    def locate_positions(self, want: np.ndarray, t: int, rec) -> Extents:
        """Extents of the records at positions ``want`` (in that order), in the ``locate``
        phase of batch ``t``."""
        with rec.phase("locate", t) as row:
            pos = self._pos
            i = np.searchsorted(pos, want)
            ok = i < len(pos)
            if not ok.all() or not np.array_equal(pos[i], want):
                raise LmdbioError(f"{self.path}: the table has no entries for some records of "
                                  f"batch {t} on (internal error: please report)")
            offs, size = self._off[i], self._size[i]
            located = Scatter.locate(offs, size)
            row["extents"] = len(located.start)
        return located

    def close(self) -> None:
        if self.snapshot is not None:
            snap, self.snapshot = self.snapshot, None
            snap.close()


class Index(Table):
    """DIO: the table comes from one walk of the record index, scattered to the readers."""

    name = "index"

    def setup(self, comm, readers, schedule, row: dict) -> None:
        # Collective over the whole communicator: ranks that do not read learn of a failure too.
        collective(comm, lambda: self.scatter(readers, schedule, row) if readers is not None
                   else None)
