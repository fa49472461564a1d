"""Which records a reader reads, and where: positions, chunk runs, coalescing sizes, extents.

Global batch t holds the records at positions ``(t*B + j) mod N``; a reader
reads ``count`` of them from offset ``lo`` in each batch, ``k`` batches per
chunk (COAL). Everything here is arithmetic on numpy arrays: no I/O, no MPI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Layout", "positions_touched", "positions_runs", "chunk_runs", "coalesce_batches",
           "plan_extents", "slot_bytes", "record_indices", "stream_block", "runs_of"]


def positions_touched(n: int, batch: int, lo: int, count: int) -> np.ndarray:
    """Every record position a reader of ``count`` records at batch offset ``lo`` touches over
    all batches: p with (p - lo) mod g < count. Batch t starts at t*B mod N, which takes every
    multiple of g = gcd(N, B)."""
    g = math.gcd(n, batch)
    p = np.arange(n, dtype=np.int64)
    return p if count >= g else p[((p - lo) % g) < count]


def coalesce_batches(batch_bytes: float, target_bytes: int, max_batches: int) -> int:
    """COAL's batches per request: the power of two k with ``k * batch_bytes`` nearest below
    ``target_bytes`` (at least 1, at most ``max_batches``); 1 when coalescing is off."""
    if target_bytes <= 0:
        return 1
    k = 2 ** max(0, int(math.floor(math.log2(max(1.0, target_bytes / max(1.0, batch_bytes))))))
    return int(max(1, min(k, max(1, max_batches))))


def positions_runs(start: int, count: int, n: int) -> list[tuple[int, int]]:
    """Split records ``start .. start+count-1`` (mod ``n``) into contiguous (first, length) runs."""
    runs = []
    pos = start % n
    while count > 0:
        m = min(count, n - pos)
        runs.append((pos, m))
        count -= m
        pos = 0
    return runs


def chunk_runs(chunk: int, k: int, batch: int, lo: int, count: int, n: int) -> list[tuple[int, int]]:
    """(first, count) runs of the records a reader of ``count`` records at batch offset ``lo``
    reads in chunk ``chunk`` (its ``k`` batches), in delivery order."""
    runs = []
    for t in range(chunk * k, chunk * k + k):
        runs += positions_runs(t * batch + lo, count, n)
    return runs


def record_indices(first: int, count: int, n: int) -> np.ndarray:
    """Record positions ``first .. first+count-1`` modulo ``n`` (int64)."""
    idx = np.arange(first, first + count, dtype=np.int64)
    if first % n + count > n or first >= n:
        idx %= n
    return idx


def stream_block(t: int, k: int, batch: int, lo: int, count: int, n: int) -> np.ndarray:
    """Row ``i`` of the result: :func:`record_indices` of batch ``t + i``'s ``count`` records
    from offset ``lo`` in the endless stream, for ``k`` batches: one numpy pass per chunk
    instead of one per batch (a few microseconds a batch where ranks read 16 records)."""
    first = (np.arange(t, t + k, dtype=np.int64) * batch + lo)[:, None]
    idx = first + np.arange(count, dtype=np.int64)
    if idx.size and idx[-1, -1] >= n:
        idx %= n
    return idx


def slot_bytes(records: int, mean_size: float) -> int:
    """Room for one chunk's records: their bytes at the mean record size, a quarter more
    (records vary), and 64 KiB (extents read the holes between records too)."""
    return int(records * mean_size * 1.25) + (64 << 10)


def runs_of(positions: np.ndarray) -> list[tuple[int, int]]:
    """Split ``positions`` (in order) into (first, length) runs of consecutive records."""
    p = np.asarray(positions, dtype=np.int64)
    if len(p) == 0:
        return []
    cut = np.flatnonzero(np.diff(p) != 1) + 1
    starts = np.concatenate(([0], cut))
    lens = np.diff(np.concatenate((starts, [len(p)])))
    return list(zip(p[starts].tolist(), lens.tolist()))


@dataclass(frozen=True)
class Layout:
    """One reader's share of every batch: ``count`` records from offset ``lo``, ``k`` batches
    per chunk, of a snapshot of ``n`` records read in global batches of ``batch``.

    Without ``rows`` the batches are the endless stream (batch t holds positions
    ``(t*B + j) mod n``). With ``rows`` (an epoch, :mod:`lmdbio.pipeline.epoch`) batch
    ``t`` holds ``rows[t - t0]``: any positions, so locators look them up rather than
    compute them.
    """

    n: int
    batch: int
    lo: int
    count: int
    k: int = 1
    rows: np.ndarray | None = field(default=None, compare=False, repr=False)
    t0: int = 0

    def positions(self, t: int) -> np.ndarray:
        """The positions this reader reads in batch ``t`` (int64, in delivery order)."""
        if self.rows is None:
            return record_indices(self.first(t), self.count, self.n)
        return self.rows[t - self.t0, self.lo:self.lo + self.count]

    def chunk_positions(self, chunk: int) -> np.ndarray:
        """The positions this reader reads in ``chunk`` (its ``k`` batches), in order."""
        if self.rows is None:
            return stream_block(chunk * self.k, self.k, self.batch, self.lo, self.count,
                                self.n).ravel()
        ts = range(chunk * self.k, chunk * self.k + self.k)
        return np.concatenate([self.positions(t) for t in ts])

    def first(self, t: int) -> int:
        """Position of the reader's first record in batch ``t`` (stream: not reduced mod n)."""
        if self.rows is None:
            return t * self.batch + self.lo
        return int(self.rows[t - self.t0, self.lo])

    def runs(self, chunk: int) -> list[tuple[int, int]]:
        if self.rows is None:
            return chunk_runs(chunk, self.k, self.batch, self.lo, self.count, self.n)
        return runs_of(self.chunk_positions(chunk))

    def touched(self) -> np.ndarray:
        """Every position this reader ever reads, ascending (an epoch's order can put any
        record anywhere, so: all of them)."""
        if self.rows is not None:
            return np.arange(self.n, dtype=np.int64)
        return positions_touched(self.n, self.batch, self.lo, self.count)


def plan_extents(offsets: np.ndarray, sizes: np.ndarray, max_gap: int = 64 << 10):
    """The fewest file extents that cover the records, and where each record lands.

    Records are sorted by file offset and merged into one extent while the
    hole to the next record is at most ``max_gap`` bytes (page headers, leaf
    pages: reading a little more beats another request). Extents are laid
    out back to back in the destination buffer, so a record at file offset
    ``o`` inside extent ``e`` lands at ``base[e] + o - start[e]``.

    Returns:
        ``(ext_start, ext_len, rec_buf_off)``: uint64 extent file offsets and
        lengths, and each record's int64 offset in the buffer (input order).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    n = len(offsets)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(offsets, kind="stable")
    s = offsets[order]
    e = s + sizes[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1] + max_gap
    first = np.flatnonzero(new)
    ext_id = np.cumsum(new) - 1
    ext_start = s[first]
    ext_end = np.maximum.reduceat(e, first)
    ext_len = ext_end - ext_start
    base = np.concatenate(([0], np.cumsum(ext_len)[:-1]))
    rec_buf_off = np.empty(n, dtype=np.int64)
    rec_buf_off[order] = base[ext_id] + (s - ext_start[ext_id])
    return ext_start, ext_len, rec_buf_off
