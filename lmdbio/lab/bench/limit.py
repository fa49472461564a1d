"""The limit (``raw``): every rank preads its own records, coalesced, into its own rotating buffers."""

from __future__ import annotations

import math
import os
import time

import numpy as np

from lmdbio.plan import coalesce_batches, plan_extents
from lmdbio.pipeline.fetch import read_extents

__all__ = ["RAW", "RawReader", "reader_ring_slots"]

RAW = "raw"


def reader_ring_slots(group_records: int, mean_size: float) -> tuple[int, int]:
    """``(slots, bytes per slot)`` of the Reader's shared ring for one uncoalesced group chunk.

    The same rule as :class:`lmdbio.Reader`: a slot holds a chunk with 25%
    slack, and small chunks get more slots, within about 64 MiB.
    """
    from lmdbio.shm import GroupBuffer

    cap = int(group_records * mean_size * 1.25) + (64 << 10)
    return int(min(16, max(GroupBuffer.MIN_SLOTS, (64 << 20) // cap))), cap


class RawReader:
    """The limit: each rank preads its own records, coalesced, into a private ring.

    This is the cheapest way to move the same record bytes into each rank's
    memory: no LMDB, no locating in the timed loop (extents are planned from
    the record index in setup), no hand-off and no synchronization. A rank
    reads ``coalesce`` of its own batches at a time (as many as fit the
    Reader's COAL request size, 4 MiB; at least one), merged into the fewest
    extents (:func:`lmdbio.plan.plan_extents`, holes up to 64 KiB read through),
    one ``preadv`` each. Its ring holds the same share of bytes as the
    Reader's shared ring holds per rank of a reader group (at least three
    chunks), so neither side gains from a buffer that stays in the CPU cache.
    Any reader that gives each rank its own records does at least this work,
    so on local storage no variant beats raw by more than noise.

    Args:
        comm: the point's communicator.
        path: the file this rank reads (its node's view on an emulated PFS).
        batch_size: global batch B; rank r reads positions ``t*B + r*B/P + j``.
        offsets, sizes: the record index (key order).
        nbatches: timed batches planned, after ``warmup`` batches rounded up to whole
            chunks (the bench starts timing on a chunk boundary).
        group_size: ranks per reader group of the Reader this stands for
            (sizes the ring).
        coalesce_bytes: bytes per request to aim for (the Reader's COAL default).
    """

    def __init__(self, comm, path, batch_size: int, offsets: np.ndarray, sizes: np.ndarray,
                 nbatches: int, group_size: int = 1, coalesce_bytes: int | None = None,
                 warmup: int = 0):
        from lmdbio.options import DEFAULT_COALESCE_BYTES

        t0 = time.monotonic()
        P, B, n = comm.size, batch_size, len(offsets)
        m = self.local_batch = B // P
        lo = comm.rank * m
        mean = max(1.0, os.path.getsize(path) / max(1, n))
        target = coalesce_bytes or DEFAULT_COALESCE_BYTES
        self.coalesce = k = coalesce_batches(m * mean, target, n // B)
        j = lo + np.arange(m, dtype=np.int64)
        dt = np.arange(k, dtype=np.int64)[:, None] * B
        self._plans = []
        self._bytes = []
        need = 1
        for c in range(-(-warmup // k) + -(-nbatches // k)):
            pos = ((c * k * B + dt) + j[None, :]) % n
            ext_start, ext_len, _ = plan_extents(offsets[pos.ravel()], sizes[pos.ravel()])
            self._plans.append((ext_start, ext_len))
            self._bytes.extend(sizes[pos].sum(axis=1).tolist())
            need = max(need, int(ext_len.sum()))
        nslots, cap = reader_ring_slots(group_size * m, mean)
        share = nslots * cap / max(1, group_size)   # the Reader's ring bytes per group rank
        nring = max(3, math.ceil(share / need))
        self._ring = [np.empty(need, dtype=np.uint8) for _ in range(nring)]
        for buf in self._ring:
            buf[::4096] = 0   # fault the pages in now, as the Reader's slots are
        self.ring_bytes = need * nring
        self._fd = os.open(path, os.O_RDONLY)
        self._path = str(path)
        self._t = 0
        self.is_reader = True
        self._reads: list[tuple[float, int, int]] = []   # (wall, bytes, calls) per chunk read
        self.setup_s = time.monotonic() - t0

    def read_batch(self) -> tuple[int, int]:
        """This rank's records of the next batch (a chunk is read at its first batch).

        Returns (records, record bytes).
        """
        t = self._t
        self._t += 1
        chunk, it = divmod(t, self.coalesce)
        if it == 0:
            ext_start, ext_len = self._plans[chunk]
            t0 = time.monotonic()
            got, calls = read_extents(self._fd, self._ring[chunk % len(self._ring)], ext_start,
                                      ext_len, self._path)
            self._reads.append((time.monotonic() - t0, got, calls))
        return self.local_batch, self._bytes[t]

    def stats(self) -> list[dict]:
        """A ``setup`` row, then one ``read`` row per batch read: a chunk's read at its first
        batch, nothing at the others (the rows of :class:`~lmdbio.lab.bench.timed.Source`)."""
        rows = [{"phase": "setup", "batch": -1, "wall_s": self.setup_s}]
        for t in range(self._t):
            chunk, it = divmod(t, self.coalesce)
            wall, got, calls = self._reads[chunk] if it == 0 else (0.0, 0, 0)
            rows.append({"phase": "read", "batch": t, "wall_s": wall, "bytes": got,
                         "calls": calls})
        return rows

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RawReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
