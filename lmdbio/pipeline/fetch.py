"""Fetchers: how a reader gets its located records' bytes into a buffer.

:class:`MmapCopy` copies values out of LMDB's map (where an mmap reader
takes its page faults); :class:`Preadv` reads planned extents with one
``preadv`` each (DIO), placing same-size records at one stride in their
batch order (:class:`Scatter`): the kernel's copy is the only one, and the
batch's Datum images are a view of the buffer. ``fetch(located, alloc, row)`` fills ``alloc(nbytes)`` and
returns the records' ``(offsets, sizes)`` in it.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import LmdbioError
from ..plan import plan_extents
from .stage import Extents, Fetcher, Views

__all__ = ["MmapCopy", "Preadv", "Scatter", "copy_values", "read_extents"]


def read_extents(fd: int, buf: np.ndarray, ext_start: np.ndarray, ext_len: np.ndarray,
                 path: str = "data.mdb") -> tuple[int, int]:
    """Read each extent with one ``os.preadv`` straight into ``buf``, back to back.

    Returns ``(bytes, calls)``. A short read (file truncated under us) is an
    LmdbioError, never a half-filled batch.
    """
    mv = buf.data.cast("B")
    pos = 0
    calls = 0
    for off, length in zip(ext_start.tolist(), ext_len.tolist()):
        calls += _read_into(fd, mv[pos:pos + length], off, path)
        pos += length
    return pos, calls


def _read_into(fd: int, mv: memoryview, off: int, path: str) -> int:
    """Fill ``mv`` from file offset ``off`` (``os.preadv`` until full); returns the calls made.
    A short read (file truncated under us) is an LmdbioError, never a half-filled batch."""
    done, length, calls = 0, len(mv), 0
    while done < length:
        got = os.preadv(fd, [mv[done:]], off + done)
        calls += 1
        if got <= 0:
            raise LmdbioError(
                f"{path}: short read at byte {off + done} ({length - done} bytes missing); "
                "the file was truncated or replaced while reading - rebuild the index/provenance "
                "and restart")
        done += got
    return calls


def copy_values(values: list, alloc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copy values (memoryviews into LMDB's map) back to back into ``alloc(total_bytes)``.

    This is where an mmap reader takes its page faults, one value at a time,
    as Caffe does. Returns ``(buffer, offsets, sizes)``.
    """
    sizes = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    buf = alloc(int(sizes.sum()))
    for v, off, size in zip(values, offsets.tolist(), sizes.tolist()):
        buf[off:off + size] = v
    return buf, offsets, sizes


def _libc_preadv():
    """libc's ``preadv`` through ctypes (one call takes a whole iovec array built with numpy,
    where ``os.preadv`` would need a Python memoryview per piece), or None."""
    try:
        f = ctypes.CDLL(None, use_errno=True).preadv
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    f.restype = ctypes.c_ssize_t
    return f


_PREADV = _libc_preadv()
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024)


def _calls(heads: list[int], length: np.ndarray, at) -> list[tuple[int, int, int, int]]:
    """``(first piece, end piece, file offset, bytes)`` of each ``preadv``: one per extent
    (``heads``: each extent's first piece), another every ``_IOV_MAX`` pieces; ``length``,
    ``at``: each piece's bytes and file offset. Plain ints, so that reading a chunk does
    no numpy scalar arithmetic per call."""
    ends = [0, *np.cumsum(length).tolist()]
    starts = [c for a, b in zip(heads, [*heads[1:], len(length)]) for c in range(a, b, _IOV_MAX)]
    stops = [*starts[1:], len(length)]
    return [(c, e, int(at[c]), ends[e] - ends[c]) for c, e in zip(starts, stops)]


class Scatter:
    """Where each byte of a batch's planned extents goes so that its records lie at one stride.

    The extents (:func:`lmdbio.plan.plan_extents`: records sorted by file
    offset, merged while the hole to the next is at most ``max_gap`` bytes)
    are read one ``preadv`` each. Records of one size go to ``offsets[i] = i *
    stride`` in their own order (a batch's order), ``stride`` the smallest
    distance at least a record long between two records next to each other in
    that order (a CIFAR Datum: its 4 KiB overflow page). Records that lie at
    that stride in the file too stay together in one piece, the bytes between
    them landing between them; where the file breaks the stride (a leaf page,
    records of another rank, a batch that wraps to the file's start) the bytes
    between go to one scratch area of ``gap`` bytes. A batch read in file
    order is then a few pieces, and its Datum images one strided view.
    ``length``, ``dest``: each piece's bytes and place (-1: the scratch), in
    file order; ``calls``: ``(first piece, end piece, file offset, bytes)``, one
    ``preadv`` each, within one extent and at most ``_IOV_MAX`` pieces;
    ``twins``: ``(from, to, size)`` of a record asked twice, copied from its
    first place after the reads; ``nbytes``: the buffer it needs.
    """

    __slots__ = ("offsets", "length", "dest", "calls", "gap", "twins", "nbytes")
    offsets: np.ndarray
    length: np.ndarray
    dest: np.ndarray
    calls: list[tuple[int, int, int, int]]
    gap: int
    twins: list[tuple[int, int, int]]
    nbytes: int

    @classmethod
    def locate(cls, offsets: np.ndarray, sizes: np.ndarray, max_gap: int = 64 << 10
               ) -> Extents:
        """The records' :class:`Extents` (:func:`~lmdbio.plan.plan_extents`'s) with their
        scatter (``Extents.scatter``): run by run for a chunk of a few runs
        (:meth:`_by_runs`), else vectorised (:meth:`_strided`). No scatter (the extents are
        read as they lie) for records of several sizes, two different records that overlap,
        or a stride over twice a record that would need more buffer than the extents."""
        n = len(offsets)
        size = int(sizes[0]) if n else 0
        uniform = n > 1 and sizes.min() == sizes.max()
        if uniform:
            step = np.diff(offsets)
            ahead = step[step >= size]
            stride = int(ahead.min()) if len(ahead) else size
            if stride <= min(2 * size, size + max_gap):
                got = cls._by_runs(offsets, sizes, step, stride, max_gap)
                if got is not None:
                    return got
        start, length, buf_off = plan_extents(offsets, sizes, max_gap)
        located = Extents(start, length, buf_off, sizes)
        if uniform:
            located.scatter = cls._strided(offsets, size, stride, located.start,
                                           int(located.length.sum()))
        return located

    @classmethod
    def _by_runs(cls, offsets, sizes, step, stride: int, max_gap: int) -> Extents | None:
        """:meth:`locate` of records of one size that lie in runs at ``stride`` in the file
        and in the batch (a chunk of the stream: a few runs, cut by leaf pages and by the
        file's jumps back where a later commit put its pages): the runs sorted by file
        offset, a few Python items each, instead of numpy passes over the records. None
        when two runs overlap (a record asked twice) or the runs are many and short (a
        shuffled batch): the general path takes those."""
        n, size = len(offsets), int(sizes[0])
        cut = np.flatnonzero(step != stride)
        if len(cut) > 8 + n // 16:   # many short runs (a shuffled batch): numpy does better
            return None
        heads = [0, *(cut + 1).tolist()]
        count = np.diff([*heads, n])
        runs = sorted(zip(offsets[heads].tolist(), (offsets[[*cut.tolist(), n - 1]] + size).tolist(),
                          heads, range(len(heads))))
        self = cls()
        self.offsets = np.arange(n, dtype=np.int64) * stride
        self.nbytes, self.twins = stride * (n - 1) + size, []
        length: list[int] = []
        dest: list[int] = []
        at: list[int] = []          # each piece's file offset
        heads_of_ext: list[int] = []   # each extent's first piece
        ext: list[list[int]] = []   # [file start, file end, buffer base]
        delta = [0] * len(heads)    # per run: its records' buffer offset - file offset
        end = -max_gap - 2
        for a, b, h, r in runs:
            hole = a - end
            if hole < 0:
                return None
            if hole > max_gap:   # a new extent: a new call
                base = ext[-1][2] + ext[-1][1] - ext[-1][0] if ext else 0
                ext.append([a, b, base])
                heads_of_ext.append(len(length))
            else:
                ext[-1][1] = b
                length.append(hole)
                dest.append(-1)
                at.append(end)
            delta[r] = ext[-1][2] - ext[-1][0]
            length.append(b - a)
            dest.append(h * stride)
            at.append(a)
            end = b
        self.length, self.dest = np.array(length, np.int64), np.array(dest, np.int64)
        self.gap = max((x for x, d in zip(length, dest) if d < 0), default=0)
        self.calls = _calls(heads_of_ext, self.length, at)
        located = Extents(np.array([e[0] for e in ext], np.int64),
                          np.array([e[1] - e[0] for e in ext], np.int64),
                          offsets + (np.repeat(delta, count) if len(heads) > 1 else delta[0]),
                          sizes)
        located.scatter = self
        return located

    @classmethod
    def _strided(cls, offsets, size: int, stride: int, start, most: int) -> Scatter | None:
        """The scatter of records of one ``size`` in any order (a shuffled batch, a record
        asked twice) into the extents starting at ``start``: vectorised, two pieces per run;
        None for records far apart (another reader's between) or overlapping."""
        n = len(offsets)
        if stride > 2 * size and stride * (n - 1) + size > most:
            return None
        order = np.argsort(offsets, kind="stable")
        s = offsets[order]
        twin = np.zeros(n, bool)   # a record asked again (a stream wrapping in one chunk)
        np.equal(s[1:], s[:-1], out=twin[1:])
        one = ~twin
        if (np.diff(s[one]) < size).any():   # two different records overlap
            return None
        self = cls()
        self.offsets = np.arange(n, dtype=np.int64) * stride
        self.nbytes = stride * (n - 1) + size
        self.twins = []
        if twin.any():
            src = order[np.maximum.accumulate(np.where(one, np.arange(n), 0))[twin]]
            self.twins = [(int(a) * stride, int(b) * stride, size)
                          for a, b in zip(src.tolist(), order[twin].tolist())]
            order, s = order[one], s[one]
        new = np.zeros(len(s), bool)   # the first record of each extent
        new[np.searchsorted(s, start)] = True
        # Runs: records next to each other in the file and in the batch, at the stride.
        cut = new.copy()
        cut[1:] |= (np.diff(s) != stride) | (np.diff(order) != 1)
        head = np.flatnonzero(cut)
        tail = np.append(head[1:], len(s)) - 1
        run_len = s[tail] + size - s[head]
        gap = np.zeros(len(head), np.int64)
        gap[1:] = s[head[1:]] - (s[tail[:-1]] + size)
        gap[new[head]] = 0
        # Two pieces per run, the bytes before it in its extent (to the scratch) then the run.
        length = np.stack((gap, run_len), axis=1).ravel()
        dest = np.stack((np.full(len(head), -1, np.int64), order[head] * stride), axis=1).ravel()
        at = np.stack((s[head] - gap, s[head]), axis=1).ravel()
        keep = length > 0
        keep[1::2] = True
        self.length, self.dest, self.gap = length[keep], dest[keep], int(gap.max())
        # An extent's first piece is its first run (nothing before it).
        piece = np.cumsum(keep) - 1
        self.calls = _calls(piece[2 * np.flatnonzero(new[head]) + 1].tolist(), self.length,
                            at[keep])
        return self

    def read(self, fd: int, buf: np.ndarray, scratch: np.ndarray, path: str) -> int:
        """Read every call into ``buf`` (and the scratch); returns the ``preadv`` calls made.
        A short read (a signal, the file cut under us) is finished piece by piece."""
        # The kernel writes where the iovecs point: never past either array.
        if buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous or \
                not buf.flags.writeable or len(buf) < self.nbytes or len(scratch) < self.gap:
            raise ValueError(f"Scatter.read needs a writable contiguous uint8 buffer of "
                             f"{self.nbytes} bytes and a scratch of {self.gap}; got "
                             f"{buf.dtype} {buf.shape} and {len(scratch)} bytes")
        iov = np.empty((len(self.length), 2), np.uint64)
        iov[:, 0] = np.where(self.dest < 0, scratch.ctypes.data, buf.ctypes.data + self.dest)
        iov[:, 1] = self.length
        ptr = iov.ctypes.data
        calls = 0
        for a, b, off, want in self.calls:
            got = _PREADV(fd, ptr + 16 * a, b - a, off)
            calls += 1
            if got != want:
                if got < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"{path}: preadv: {os.strerror(err)}")
                calls += self._finish(fd, buf, scratch, a, b, off, got, path)
        for src, dst, size in self.twins:
            buf[dst:dst + size] = buf[src:src + size]
        return calls

    def _finish(self, fd, buf, scratch, a, b, off, done, path) -> int:
        """After a short read of ``done`` bytes of call ``[a, b)``: the rest, piece by piece."""
        calls, at = 0, off
        for i in range(a, b):
            n, d = int(self.length[i]), int(self.dest[i])
            skip = min(done, n)
            done -= skip
            if skip < n:
                target = scratch[:n] if d < 0 else buf[d:d + n]
                calls += _read_into(fd, target.data.cast("B")[skip:], at + skip, path)
            at += n
        return calls


class MmapCopy(Fetcher):
    """Copy values out of LMDB's map, one at a time, as Caffe does (its page faults happen here)."""

    name = "mmap-copy"

    def fetch(self, located: Views, alloc, row: dict) -> tuple[np.ndarray, np.ndarray]:
        values = located.take()
        _, offsets, sizes = copy_values(values, alloc)
        row["bytes"], row["calls"] = int(sizes.sum()), len(values)
        return offsets, sizes


class Preadv(Fetcher):
    """DIO: read planned extents, one ``preadv`` per extent (at most ``_IOV_MAX`` pieces).
    Records of one size land at one stride in batch order (:class:`Scatter`: the bytes the
    stride does not hold go to a scratch area); records of several sizes, or where the
    stride needs more buffer than the extents, are read back to back as they lie
    (:func:`read_extents`), as they are without libc's ``preadv``."""

    name = "preadv"

    def __init__(self):
        self.fd = -1
        self.path = ""
        self._scratch = np.empty(0, np.uint8)

    def open(self, path) -> None:
        self.path = str(path)
        self.fd = os.open(path, os.O_RDONLY)

    def fetch(self, located: Extents, alloc, row: dict) -> tuple[np.ndarray, np.ndarray]:
        plan = located.scatter if _PREADV is not None else None
        if plan is None:
            buf = alloc(int(located.length.sum()))
            row["bytes"], row["calls"] = read_extents(self.fd, buf, located.start,
                                                      located.length, self.path)
            return located.buf_off, located.sizes
        buf = alloc(plan.nbytes)
        if len(self._scratch) < plan.gap:
            self._scratch = np.empty(max(plan.gap, 4096), np.uint8)
        row["calls"] = plan.read(self.fd, buf, self._scratch, self.path)
        row["bytes"] = int(located.length.sum())
        return plan.offsets, located.sizes

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
