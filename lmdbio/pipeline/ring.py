"""DM: the readers pass a portable cursor (key, record number) around a ring.

Each reader seeks to the key the previous reader hands it (one B-tree
descent) and walks only its own records, instead of walking everyone's.
Speculation: while it waits for the cursor, a reader asks the kernel
(``POSIX_FADV_WILLNEED``) for the byte range its next records are predicted
to occupy, extrapolated from its last two ranges, and scores the prediction
against where the records really were (``missed_pages``, ``extra_pages``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .. import tags
from ..errors import PeerTimeoutError
from ..waiting import completes_within, timeout, wait_request
from .stage import Views
from .walk import Walk

__all__ = ["Ring"]

log = logging.getLogger("lmdbio")

_TAG = tags.RING


class Ring(Walk):
    """Locate by seeking to the key the previous reader passes, then walking this reader's records."""

    name = "ring"

    def __init__(self, speculative: bool):
        super().__init__()
        self.speculative = speculative
        self.readers: Any = None   # the readers' communicator, from setup()
        self.names: tuple[int, ...] = ()   # each reader's rank in the Reader's communicator
        self.rank = -1
        self._pending: list = []
        self._map_addr: int | None = None          # where LMDB mapped the file (speculation)
        self._pred: tuple[int, int] | None = None  # the byte range advised for the next records
        self._last_ranges: list[tuple[int, int]] = []
        self._psize = self._file_size = 0          # of the open snapshot
        self._located = 0   # chunks this reader located (reader 0 starts the ring at its first)

    @classmethod
    def from_options(cls, options, build_provenance: bool = False) -> Ring:
        return cls(options.speculative)

    def open(self, path, meta, nprocs: int) -> None:
        super().open(path, meta, nprocs)
        self._psize, self._file_size = meta.psize, meta.file_size
        if self.speculative:
            self._map_addr = self.cursor().map_address(meta.psize, meta.header_size)
            if self._map_addr is None:
                log.warning("lmdbio: %s: cannot tell where LMDB mapped the file; DM runs "
                            "without speculative reads", path)

    def setup(self, comm, readers, schedule, row: dict) -> None:
        super().setup(comm, readers, schedule, row)
        self.readers, self.rank = readers, comm.rank
        if readers is not None and not self.names:   # a timeout names the reader's rank
            self.names = tuple(readers.allgather(comm.rank))

    def locate(self, chunk: int, schedule, rec) -> Views:
        t = chunk * schedule.k
        w, rc = self.cursor(), self.readers
        k, R = rc.rank, rc.size
        if self.speculative:
            self._speculate(t, rec)
        with rec.phase("ring_wait", t):
            # Reader 0's first chunk starts the ring; from then on it waits for the last
            # reader's cursor of the chunk before (every reader reads the same chunks).
            if R > 1 and not (k == 0 and self._located == 0):
                key, pos = wait_request(
                    rc.irecv(source=(k - 1) % R, tag=_TAG), timeout(),
                    f"rank {self.rank}: the previous reader of the DM ring (reader "
                    f"{(k - 1) % R}) did not pass the cursor for batch {t}",
                    who=[self.names[(k - 1) % R]])
            else:
                key = pos = None
        with rec.phase("locate", t) as row:
            w0 = w.walked
            if key is not None:
                w.seek_key(key, pos)
            # The handed cursor ends the previous reader's records: ours start there, except
            # around an epoch's end (a few records back or on, walked to).
            values = w.take_runs(schedule.runs(chunk))
            row["records_walked"] = w.walked - w0
            self._located += 1
            if R > 1:
                self._pending.append(rc.isend((w.key(), w.pos), dest=(k + 1) % R, tag=_TAG))
                if len(self._pending) > 4:
                    self._settle(self._pending[0], (k + 1) % R)
                    self._pending.pop(0)   # kept until done: the request holds the message
        return Views(w.check_size, values)

    def fetched(self, located: Views, row: dict) -> None:
        if self.speculative:
            self._score(located.values or [], row)

    def _speculate(self, t: int, rec) -> None:
        with rec.phase("speculate", t) as row:
            self._pred = None
            if len(self._last_ranges) >= 2:
                (a0, a1), (b0, b1) = self._last_ranges[-2:]
                lo, hi = b0 + (b0 - a0), b1 + (b1 - a1)
                lo, hi = max(0, lo), min(self._file_size, hi)
                if hi > lo:
                    self.cursor().advise(lo, hi - lo)
                    self._pred = (lo, hi)
                    row["bytes"] = hi - lo
                    row["pages"] = -(-hi // self._psize) - lo // self._psize

    def _score(self, values: list, row: dict) -> None:
        """Where this batch's records really were (file offsets), against the prediction."""
        if not values or self._map_addr is None:
            return
        first = np.frombuffer(values[0], dtype=np.uint8)
        last = np.frombuffer(values[-1], dtype=np.uint8)
        lo = first.ctypes.data - self._map_addr
        hi = last.ctypes.data - self._map_addr + len(values[-1])
        page = self._psize
        if hi < lo:   # the group's records wrapped around the end of the file: no trend, no score
            self._last_ranges.clear()
            return
        self._last_ranges.append((lo, hi))
        del self._last_ranges[:-2]
        a0, a1 = lo // page, -(-hi // page)
        if self._pred is None:
            row["missed_pages"], row["extra_pages"] = a1 - a0, 0
            return
        p0, p1 = self._pred[0] // page, -(-self._pred[1] // page)
        overlap = max(0, min(a1, p1) - max(a0, p0))
        row["missed_pages"] = (a1 - a0) - overlap
        row["extra_pages"] = (p1 - p0) - overlap

    def finish(self, failed: bool, batches: int) -> None:
        rc = self.readers
        # The last reader's hand-off for the batch after the last one is still in flight.
        if rc is not None and not failed and rc.size > 1 and rc.rank == 0 and self._located > 0:
            wait_request(rc.irecv(source=rc.size - 1, tag=_TAG), timeout(),
                         f"rank {self.rank}: the last reader of the DM ring did not pass "
                         "its final cursor (it stopped early or exited)",
                         who=[self.names[rc.size - 1]])
        while self._pending:
            self._settle(self._pending[0], (rc.rank + 1) % rc.size)
            self._pending.pop(0)

    def _settle(self, req, dest: int) -> None:
        """Complete a cursor hand-off sent to reader ``dest``, within LMDBIO_TIMEOUT."""
        if not completes_within(req, timeout()):
            raise PeerTimeoutError(f"rank {self.rank}: a DM-ring hand-off to the next reader "
                                   f"(reader {dest}) was not received within {timeout():g} s "
                                   "(LMDBIO_TIMEOUT): it stopped reading or exited",
                                   missing=[self.names[dest]], limit=timeout())
