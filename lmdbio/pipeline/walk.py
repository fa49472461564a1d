"""Walk (``lmdb``, LMM): a cursor moves with ``next()`` to the reader's records, as Caffe's does.

The reader skips the records of the ranks before it in each batch (LMM's
reader skips those of the other groups), so every reader walks every
record: the cost DM's ring removes.
"""

from __future__ import annotations

from ..recordindex import check_tree
from ..lmdbenv import CursorWalker, acquire
from .stage import Locator, Views

__all__ = ["Walk", "walk_runs"]


def walk_runs(w: CursorWalker, runs) -> list:
    """Take each (first, count) run's values, walking the cursor to it: forward with
    ``next()``, or back with ``prev()`` when the run starts a little behind (an epoch's
    last batch, the next epoch's start), never around the whole file for that."""
    values = []
    for first, count in runs:
        back = (w.pos - first) % w.n
        if 0 < back < w.n // 2:
            w.check_size()
            prev, last = w.cursor.prev, w.cursor.last
            for _ in range(back):
                if not prev():
                    last()
            w.pos = first % w.n
            w.walked += back
        else:
            w.skip_to(first)
        values += w.take(count)
    return values


class Walk(Locator):
    """Locate by walking an LMDB cursor; the cursor's read transaction is the snapshot."""

    name = "walk"

    def __init__(self):
        self.walker: CursorWalker | None = None
        self._handle = None
        self.layout = None

    def open(self, path, meta, nprocs: int) -> None:
        # Caffe's settings: read-only map with readahead, and a slot in the lock
        # file's reader table next to the real file, so a writer cannot recycle
        # the pages of our snapshot; no lock only on read-only media. check: LMDB's C
        # code asserts on (or reads past) trees our walk rejects, so the file it mapped
        # is walked first.
        self._handle = acquire(path, max_readers=max(126, 2 * nprocs + 16), check=check_tree)
        self.locked = self._handle.locked
        self.walker = CursorWalker(self._handle.env, meta.entries)

    def snapshot_id(self) -> tuple[int, int] | None:
        return self.walker.snapshot_id() if self.walker is not None else None

    def setup(self, comm, readers, layout, row: dict) -> None:
        self.layout = layout
        if self.walker is not None:
            self.walker.n = layout.n   # the agreed snapshot's entries

    def locate(self, chunk: int, rec) -> Views:
        t = chunk * self.layout.k
        w = self.walker
        with rec.phase("locate", t) as row:
            w0 = w.walked
            values = walk_runs(w, self.layout.runs(chunk))
            row["records_walked"] = w.walked - w0
        return Views(w.check_size, values)

    def close(self) -> None:
        if self.walker is not None:
            self.walker.close()
            self.walker = None
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.release()
