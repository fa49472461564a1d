"""WINDOW: a shuffled epoch reads each shuffle window once, as large extents, and serves its
batches from memory.

A shuffled epoch (:func:`lmdbio.shuffle.epoch_order`) permutes blocks of
consecutive records and then shuffles records within windows of ``W``
blocks, so one pipeline chunk of ``k`` batches holds records from all over
its window: read chunk by chunk, its records turn into many small requests.
:class:`Window` instead reads, when a chunk first needs a window, every
record of that window this reader still needs in the epoch (sorted, planned
into the fewest extents: the window's ``W`` whole blocks of consecutive
records, the same large requests a file-order epoch makes), and gathers
each chunk's records from memory by position.

Windows are the order's own (:func:`lmdbio.shuffle.record_windows`), not
runs of rows: where the dataset's short block comes earlier in the order,
the windows no longer start on a row, and a batch straddles two windows;
the short or padded last batch and the padding rows reach back into the
first window. A chunk's records may therefore lie in two (rarely three)
windows: those are kept in memory together, and a window left behind is
dropped when a chunk no longer needs it.

Memory per reader: at most two windows at once (three only where a padded
last batch reaches back to the first), each the extents of the reader's
records in ``W`` blocks of ``C`` records (``C``:
:func:`~lmdbio.pipeline.epoch.default_block` unless ``shuffle_block`` is
given), holes included. A reader that reads part of each batch (several
readers) still reads its window whole where its records lie less than
64 KiB apart (the extents' gap): ``W * C`` records' pages either way. The
``"shard"`` order (:func:`lmdbio.shuffle.shard_order`) makes a node
reader's records of a window one contiguous run (its ranks are
consecutive): the same planning then reads ``1/R`` of the window (R node
readers), ``W * C / R`` records' pages. cifar10 (a 3.1 KB Datum takes one
4 KiB overflow page), ``B = 256`` (``C = 1,024``), ``W = 4``: 16.8 MB per
window (34 MB at most) at any P in the window mode, 4.2 MB (8.4 MB) per
node reader in the shard mode at 4 node readers, on top of the
distributor's slots. The gather is one ``memcpy`` per record.
"""

from __future__ import annotations

import numpy as np

from ..plan import EpochSchedule
from .epoch import EpochRows

__all__ = ["Window", "NoWindow"]


class NoWindow:
    """Each chunk located and fetched on its own (file order, the endless stream, and locators
    that do not plan extents).

    A chunk goes :meth:`locate` (what to read now: ``(located, alloc)`` pairs) -> the
    pipeline fetches each pair in one turn of the reader (one ``read`` phase, STAG's turns
    stay in step: every reader takes one turn per chunk) -> :meth:`serve`.
    """

    name = ""

    def locate(self, chunk: int, locator, schedule, alloc, rec) -> list[tuple]:
        return [(locator.locate(chunk, schedule, rec), alloc)]

    def serve(self, chunk: int, fetched: list[tuple], alloc, rec) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's records' ``(offsets, sizes)`` in ``alloc``'s buffer; ``fetched``: the
        ``(offsets, sizes)`` of each pair :meth:`locate` returned."""
        return fetched[0]

    def close(self) -> None:
        pass


class Window(NoWindow):
    """Reads each shuffle window's records once per reader; serves chunks from memory.

    Args:
        schedule: the epoch's schedule (its ``rows``, ``t0``, and the reader's ``lo``, ``count``).
        epoch: the epoch's rows (which records are delivered).
        share: records per rank in a full batch.
        windows: each record's window (:func:`lmdbio.shuffle.record_windows`).
    """

    name = "window"

    def __init__(self, schedule: EpochSchedule, epoch: EpochRows, share: int, windows: np.ndarray):
        self.schedule = schedule
        self._first = schedule.t0 // schedule.k          # the epoch's first chunk
        # Every position this reader reads in the epoch, in order, and each one's window.
        cols = np.arange(schedule.lo, schedule.lo + schedule.count)
        self._all = np.ascontiguousarray(schedule.rows[:, cols]).ravel()
        self._win = windows[self._all]
        # Records no rank delivers (padding rows, the rest of a short last batch's blocks) are
        # not read: they would reach back into the first window for nothing.
        used = np.zeros(schedule.rows.shape[0:1] + cols.shape, dtype=bool)
        used[:epoch.batches] = True
        used[epoch.batches - 1] = cols % share < epoch.keep[cols // share]
        self._used = used.ravel()
        self._held: dict[int, tuple] = {}            # window -> (positions, offsets, sizes, buffer)
        self._spare: list[np.ndarray] = []           # buffers of dropped windows, for reuse
        self._loading: list[tuple] = []              # (window, positions, buffer) being read

    def _span(self, chunk: int) -> slice:
        per = self.schedule.k * self.schedule.count
        lo = (chunk - self._first) * per
        return slice(lo, lo + per)

    def locate(self, chunk: int, locator, schedule, alloc, rec) -> list[tuple]:
        """Drop the windows ``chunk`` does not need; locate those it needs and are not held:
        each one's records this reader still needs from this chunk on."""
        span = self._span(chunk)
        wins, used = self._win[span], self._used[span]
        need = np.unique(wins[used]).tolist()
        for w in [w for w in self._held if w not in need]:
            self._spare.append(self._held.pop(w)[3])
        rest = slice(span.start, None)
        self._loading = []
        out = []
        for w in need:
            if w in self._held:
                continue
            pos = np.unique(self._all[rest][(self._win[rest] == w) & self._used[rest]])
            buf = [self._spare.pop() if self._spare else np.empty(0, dtype=np.uint8)]

            def reserve(nbytes: int, buf=buf) -> np.ndarray:
                if nbytes > len(buf[0]):
                    buf[0] = np.empty(nbytes, dtype=np.uint8)
                return buf[0]

            self._loading.append((w, pos, buf))
            out.append((locator.locate_positions(pos, chunk * self.schedule.k, rec), reserve))
        return out

    def serve(self, chunk: int, fetched: list[tuple], alloc, rec) -> tuple[np.ndarray, np.ndarray]:
        """Gather ``chunk``'s records from the windows held (those just read first)."""
        for (w, pos, buf), (off, size) in zip(self._loading, fetched):
            self._held[w] = (pos, off, size, buf[0])
        self._loading = []
        span = self._span(chunk)
        want, wins, used = self._all[span], self._win[span], self._used[span]
        with rec.phase("gather", chunk * self.schedule.k, chain=True):
            need = sorted(self._held)
            src = np.zeros(len(want), dtype=np.int64)
            sizes = np.zeros(len(want), dtype=np.int64)   # records not delivered: empty
            bufs = []
            for w in need:
                pos, off, size, buf = self._held[w]
                m = used & (wins == w)
                i = np.searchsorted(pos, want[m])
                src[m], sizes[m] = off[i], size[i]
                bufs.append(memoryview(buf).cast("B"))
            which = np.minimum(np.searchsorted(np.asarray(need), wins), max(0, len(need) - 1))
            offsets = np.zeros(len(sizes), dtype=np.int64)
            np.cumsum(sizes[:-1], out=offsets[1:])
            dst = memoryview(alloc(int(sizes.sum()))).cast("B")
            # One memcpy per record: numpy's byte-index gather (np.repeat + take) is ~30x
            # slower here (7.1 vs 0.24 ms for 512 records of 3.1 KB).
            for b, s, d, z in zip(which.tolist(), src.tolist(), offsets.tolist(), sizes.tolist()):
                if z:
                    dst[d:d + z] = bufs[b][s:s + z]
        return offsets, sizes

    def close(self) -> None:
        self._held.clear()
        self._spare.clear()
        self._loading = []
