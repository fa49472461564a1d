"""Fetchers: how a reader gets its located records' bytes into a buffer.

:class:`MmapCopy` copies values out of LMDB's map (where an mmap reader
takes its page faults); :class:`Preadv` reads planned extents with one
``os.preadv`` each (DIO). ``fetch(located, alloc, row)`` fills
``alloc(nbytes)`` and returns the records' ``(offsets, sizes)`` in it.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import LmdbioError
from .stage import Extents, Fetcher, Views

__all__ = ["MmapCopy", "Preadv", "copy_values", "read_extents"]


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
        done = 0
        while done < length:
            got = os.preadv(fd, [mv[pos + done:pos + length]], off + done)
            calls += 1
            if got <= 0:
                raise LmdbioError(
                    f"{path}: short read at byte {off + done} ({length - done} bytes missing); "
                    "the file was truncated or replaced while reading - rebuild the index/provenance "
                    "and restart")
            done += got
        pos += length
    return pos, calls


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


class MmapCopy(Fetcher):
    """Copy values out of LMDB's map, one at a time, as Caffe does (its page faults happen here)."""

    name = "mmap-copy"

    def fetch(self, located: Views, alloc, row: dict) -> tuple[np.ndarray, np.ndarray]:
        values = located.take()
        _, offsets, sizes = copy_values(values, alloc)
        row["bytes"], row["calls"] = int(sizes.sum()), len(values)
        return offsets, sizes


class Preadv(Fetcher):
    """DIO: read planned extents straight into the buffer, one ``os.preadv`` per extent."""

    name = "preadv"

    def __init__(self):
        self.fd = -1
        self.path = ""

    def open(self, path) -> None:
        self.path = str(path)
        self.fd = os.open(path, os.O_RDONLY)

    def fetch(self, located: Extents, alloc, row: dict) -> tuple[np.ndarray, np.ndarray]:
        buf = alloc(int(located.length.sum()))
        row["bytes"], row["calls"] = read_extents(self.fd, buf, located.start, located.length,
                                                  self.path)
        return located.buf_off, located.sizes

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
