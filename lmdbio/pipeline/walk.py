"""Walk (``lmdb``, LMM): a cursor moves with ``next()`` to the reader's records, as Caffe's does.

The reader skips the records of the ranks before it in each batch (LMM's
reader skips those of the other groups), so every reader walks every
record: the cost DM's ring removes.
"""

from __future__ import annotations

from ..recordindex import check_tree
from ..lmdbenv import CursorWalker, EnvHandle, acquire
from .stage import Locator, Views

__all__ = ["Walk"]


class Walk(Locator):
    """Locate by walking an LMDB cursor; the cursor's read transaction is the snapshot."""

    name = "walk"

    def __init__(self) -> None:
        self.walker: CursorWalker | None = None
        self._handle: EnvHandle | None = None

    def open(self, path, meta, nprocs: int) -> None:
        # Caffe's settings: read-only map with readahead, and a slot in the lock
        # file's reader table next to the real file, so a writer cannot recycle
        # the pages of our snapshot; no lock only on read-only media. check: LMDB's C
        # code asserts on (or reads past) trees our walk rejects, so the file it mapped
        # is walked first.
        self._handle = acquire(path, max_readers=max(126, 2 * nprocs + 16), check=check_tree)
        self.locked = self._handle.locked
        self.walker = CursorWalker(self._handle.env, meta.entries)

    def cursor(self) -> CursorWalker:
        """The walker open() made."""
        assert self.walker is not None, "the walker is made by open()"
        return self.walker

    def snapshot_id(self) -> tuple[int, int] | None:
        return self.walker.snapshot_id() if self.walker is not None else None

    def setup(self, comm, readers, schedule, row: dict) -> None:
        if self.walker is not None:
            self.walker.n = schedule.n   # the agreed snapshot's entries

    def locate(self, chunk: int, schedule, rec) -> Views:
        t = chunk * schedule.k
        w = self.cursor()
        with rec.phase("locate", t) as row:
            w0 = w.walked
            values = w.take_runs(schedule.runs(chunk))
            row["records_walked"] = w.walked - w0
        return Views(w.check_size, values)

    def close(self) -> None:
        if self.walker is not None:
            self.walker.close()
            self.walker = None
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.release()
