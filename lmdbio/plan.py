"""Which records a reader reads, and where: positions, chunk runs, coalescing sizes, extents.

Global batch t holds the records at positions ``(t*B + j) mod N``; a reader
reads ``count`` of them from offset ``lo`` in each batch, ``k`` batches per
chunk (COAL). Everything here is arithmetic on numpy arrays: no I/O, no MPI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Stream", "EpochSchedule", "Schedule", "positions_touched", "positions_runs", "chunk_runs", "coalesce_batches",
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
    cap = 1 << (max(1, max_batches).bit_length() - 1)   # the largest power of two <= max_batches
    return int(min(k, cap))


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
class Stream:
    """The endless stream's schedule for one reader: batch t holds positions ``(t*B + j) mod n``
    of a snapshot of ``n`` records read in global batches of ``batch``; this reader reads
    ``count`` of them from offset ``lo`` in each batch, ``k`` batches per pipeline chunk."""

    n: int
    batch: int
    lo: int
    count: int
    k: int = 1
    # [the last chunk_block() as (chunk, block), the offsets of a chunk's positions from its
    # first]: the locator and the batches of a chunk share one computation.
    _last: list = field(default_factory=lambda: [None, None], init=False, repr=False,
                        compare=False)

    def positions(self, t: int) -> np.ndarray:
        """The positions this reader reads in batch ``t`` (int64, in delivery order)."""
        return record_indices(t * self.batch + self.lo, self.count, self.n)

    def chunk_block(self, chunk: int) -> np.ndarray:
        """The positions this reader reads in ``chunk``, one row per batch: ``(k, count)``.
        The last chunk's is kept, so locating a chunk and handing out its batches compute
        it once; treat it as read-only."""
        last, grid = self._last
        if last is not None and last[0] == chunk:
            return last[1]
        if grid is None:   # batch i, record j of any chunk: i*batch + j past the chunk's first
            grid = self._last[1] = np.add.outer(np.arange(self.k, dtype=np.int64) * self.batch,
                                                np.arange(self.count, dtype=np.int64))
        first = (chunk * self.k * self.batch + self.lo) % self.n
        block = grid + first
        top = first + int(grid[-1, -1]) if grid.size else 0
        if top >= 2 * self.n:
            block %= self.n
        elif top >= self.n:   # wraps once: the block ascends, so subtract n from a tail
            flat = block.reshape(-1)
            flat[int(flat.searchsorted(self.n)):] -= self.n
        self._last[0] = (chunk, block)
        return block

    def chunk_positions(self, chunk: int) -> np.ndarray:
        """The positions this reader reads in ``chunk`` (its ``k`` batches), in order."""
        return self.chunk_block(chunk).ravel()

    def runs(self, chunk: int) -> list[tuple[int, int]]:
        """``chunk``'s positions as (first, length) runs of consecutive records."""
        return chunk_runs(chunk, self.k, self.batch, self.lo, self.count, self.n)

    def touched(self) -> np.ndarray:
        """Every position this reader ever reads, ascending."""
        return positions_touched(self.n, self.batch, self.lo, self.count)

    def epoch(self, rows: np.ndarray, t0: int) -> EpochSchedule:
        """The schedule of an epoch whose batch ``t`` holds ``rows[t - t0]``."""
        return EpochSchedule(self, rows, t0)


@dataclass(frozen=True, eq=False)
class EpochSchedule:
    """An epoch's schedule for one reader: batch ``t`` holds ``rows[t - t0]`` (any positions,
    :mod:`lmdbio.pipeline.epoch`), of which this reader reads the stream's ``count`` from
    ``lo``; ``k`` batches per chunk as in the stream it interrupts."""

    stream: Stream
    rows: np.ndarray = field(repr=False)
    t0: int = 0

    n = property(lambda self: self.stream.n)
    batch = property(lambda self: self.stream.batch)
    lo = property(lambda self: self.stream.lo)
    count = property(lambda self: self.stream.count)
    k = property(lambda self: self.stream.k)

    def positions(self, t: int) -> np.ndarray:
        """The positions this reader reads in batch ``t`` (int64, in delivery order)."""
        return self.rows[t - self.t0, self.lo:self.lo + self.count]

    def chunk_block(self, chunk: int) -> np.ndarray:
        """The positions this reader reads in ``chunk``, one row per batch: ``(k, count)``,
        a view of :attr:`rows`."""
        i = chunk * self.k - self.t0
        return self.rows[i:i + self.k, self.lo:self.lo + self.count]

    def chunk_positions(self, chunk: int) -> np.ndarray:
        """The positions this reader reads in ``chunk`` (its ``k`` batches), in order."""
        return np.ascontiguousarray(self.chunk_block(chunk)).ravel()

    def runs(self, chunk: int) -> list[tuple[int, int]]:
        """``chunk``'s positions as (first, length) runs of consecutive records."""
        return runs_of(self.chunk_positions(chunk))

    def touched(self) -> np.ndarray:
        """Every position an epoch may read: its order can put any record anywhere."""
        return np.arange(self.n, dtype=np.int64)


#: What a locator reads from: the endless stream or an epoch.
Schedule = Stream | EpochSchedule


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
