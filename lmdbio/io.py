"""Fetching: cursor walks over LMDB's map, direct reads of byte extents, staggering."""

from __future__ import annotations

import math

import os
from pathlib import Path

import numpy as np

from .errors import LmdbFormatError, LmdbioError
from .waiting import wait_request

__all__ = ["plan_extents", "read_extents", "copy_values", "CursorWalker", "positions_runs", "Stagger",
           "lmdb_error", "positions_touched", "coalesce_batches"]

# py-lmdb errors that mean the file's pages are not what LMDB expects.
_LMDB_FORMAT_ERRORS = ("CorruptedError", "PageNotFoundError", "BadValsizeError", "CursorFullError",
                       "InvalidError", "VersionMismatchError", "BadTxnError", "IncompatibleError",
                       "PanicError", "BadChecksumError", "ProblemError", "BadDbiError",
                       "PageFullError", "EnvEncryptionError")


def lmdb_error(exc: Exception, path, doing: str) -> LmdbioError:
    """An LmdbioError for a py-lmdb error met while ``doing`` something with ``path``.

    Damage (corrupted or missing pages, bad sizes, wrong version) becomes an
    :class:`LmdbFormatError`; anything else (reader table full, map resized,
    lock file trouble) a plain :class:`LmdbioError`. Both name the file and
    what to do.
    """
    import lmdb

    kinds = tuple(getattr(lmdb, n) for n in _LMDB_FORMAT_ERRORS if hasattr(lmdb, n))
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    if isinstance(exc, kinds):
        err = LmdbFormatError(f"{path}: LMDB reports a damaged file while {doing} ({what}); "
                              f"check it with `lmdbio info {path}` and restore or rebuild the "
                              "database")
    else:
        err = LmdbioError(f"{path}: LMDB failed while {doing} ({what}); check the file, its "
                          "directory's permissions and other processes using it, then retry")
    err.__cause__ = exc
    return err


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


def read_extents(fd: int, buf: np.ndarray, ext_start: np.ndarray, ext_len: np.ndarray,
                 path: str = "data.mdb") -> tuple[int, int]:
    """Read each extent with one ``os.preadv`` straight into ``buf``, back to back.

    Returns ``(bytes, calls)``. A short read (file truncated under us) is an
    LmdbioError, never a half-filled batch.
    """
    mv = memoryview(buf).cast("B")
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


class CursorWalker:
    """An LMDB cursor that moves the way Caffe's does: ``next()``, wrapping at the end.

    It knows its record position so a caller can ask to walk to a target
    position; every step is counted. Values are memoryviews into LMDB's map
    (valid while the read transaction lives), so copying them is where the
    page faults happen.
    """

    def __init__(self, env, n: int, path=None):
        import lmdb

        self.env = env
        self.n = n
        if path is None:
            where = Path(env.path())
            path = where / "data.mdb" if where.is_dir() else where
        self.path = path
        self._lmdb_error = lmdb.Error
        self.txn = self.cursor = None
        self.fd = -1   # data.mdb: the size check, DM's read-ahead advice
        try:
            self.txn = env.begin(buffers=True)
            self.cursor = self.txn.cursor()
            found = self.cursor.first()
        except lmdb.Error as exc:
            self.close()
            raise lmdb_error(exc, self.path, "opening a cursor") from exc
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
            self.need = self._snapshot_bytes()
        except BaseException:
            self.close()
            raise
        if not found:
            self.close()
            raise LmdbioError(f"{self.path}: the database has no records")
        self.pos = 0
        self.walked = 0

    def _snapshot_bytes(self) -> int:
        """Bytes of data.mdb this read transaction's pages lie in: (its meta's last page + 1) pages."""
        from . import format as fmt

        tid = self.txn.id()
        metas = [m for m in fmt.meta_candidates(self.fd, name=str(self.path)) if m.txnid == tid]
        if metas:
            return (metas[0].last_pgno + 1) * metas[0].psize
        # A writer committed twice since begin(): the newest meta's pages include ours.
        m = fmt.read_meta(self.fd, name=str(self.path))
        return (m.last_pgno + 1) * m.psize

    def check_size(self) -> None:
        """Raise LmdbFormatError if data.mdb shrank below this snapshot's pages.

        Touching a mapped page past the end of a file kills the process with
        SIGBUS, so the mmap readers look before each walk and each copy. A
        truncation between this check and the copy is still fatal (a race
        no user-space check can close); it needs someone truncating a live
        database, which LMDB itself never does.
        """
        size = os.fstat(self.fd).st_size
        if size < self.need:
            raise LmdbFormatError(
                f"{self.path}: the file shrank to {size} bytes while being read; this reader's "
                f"snapshot needs {self.need} bytes. Another process truncated or replaced it: "
                "restore the database, then start the job again")

    def skip_to(self, target: int) -> None:
        """Walk ``next()`` until the cursor is on record ``target`` (mod n)."""
        self.check_size()
        steps = (target - self.pos) % self.n
        nxt, first = self.cursor.next, self.cursor.first
        try:
            for _ in range(steps):
                if not nxt():
                    first()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"walking the cursor to record {target % self.n}") from exc
        self.pos = target % self.n
        self.walked += steps

    def seek_key(self, key: bytes, pos: int) -> None:
        """Position on ``key`` (record ``pos``): a B-tree descent, DM's portable cursor."""
        self.check_size()
        try:
            found = self.cursor.set_key(key)
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"seeking key {key!r}") from exc
        if not found:
            raise LmdbioError(f"{self.path}: portable cursor key {key!r} is not in the database "
                              "(the file changed or is damaged)")
        self.pos = pos % self.n

    def take(self, count: int) -> list:
        """The next ``count`` values (walking over them); the cursor ends after the last."""
        self.check_size()
        out = []
        cur = self.cursor
        append, value, nxt, first = out.append, cur.value, cur.next, cur.first
        try:
            for _ in range(count):
                append(value())
                if not nxt():
                    first()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"reading record {(self.pos + len(out)) % self.n}") from exc
        self.pos = (self.pos + count) % self.n
        self.walked += count
        return out

    def map_base(self, psize: int, header_size: int) -> int | None:
        """The address at which LMDB mapped page 0 of the file, or None if it cannot be told.

        ``env.info()["map_addr"]`` is 0 unless the map is fixed (MDB_FIXEDMAP), so
        take a pointer known to lie in the map: the current key, which lives
        in its leaf page. That page starts at the key's address rounded down
        to the page size (the map is page-aligned) and begins with its own
        page number, so page 0 is ``psize * pgno`` below it.
        """
        import ctypes

        key = self.cursor.key()
        if not len(key):
            return None
        addr = np.frombuffer(key, dtype=np.uint8).ctypes.data
        page = addr - addr % psize
        pgno = int.from_bytes(ctypes.string_at(page, 8), "little")
        flags = int.from_bytes(ctypes.string_at(page + header_size - 6, 2), "little")
        if pgno <= 1 or pgno * psize >= self.need or not flags & 0x02:   # not a leaf page: give up
            return None
        return page - pgno * psize

    def key(self) -> bytes:
        try:
            return bytes(self.cursor.key())
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, "reading the cursor's key") from exc

    def close(self) -> None:
        if self.cursor is not None:
            self.cursor.close()
            self.cursor = None
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Stagger:
    """STAG: readers in groups of ``size``; at most one group reads at a time.

    Group g starts its reads only after every reader of group g-1 has finished:
    the readers of group g-1 report to their group's first reader, which
    releases them; each then sends a message to the reader at the same
    position in group g. Group 0 does not wait. Every wait is bounded by
    ``LMDBIO_TIMEOUT`` and names the rank (world rank, from ``names``) it waited for.
    """

    TAG = 7331
    DONE, GO = 7332, 7333

    def __init__(self, readers_comm, size: int, names: tuple[int, ...] | None = None):
        self.comm = readers_comm
        self.size = max(1, int(size))
        self.names = tuple(names) if names is not None else tuple(range(readers_comm.size))
        k = readers_comm.rank
        self.group = k // self.size
        self.first = self.group * self.size
        self.last = min(self.first + self.size, readers_comm.size) - 1
        self.prev = k - self.size if k - self.size >= 0 else None
        self.next = k + self.size if k + self.size < readers_comm.size else None
        self._pending = []
        self._turn = 0

    def _who(self, k: int) -> str:
        return f"rank {self.names[k]}"

    def wait_turn(self) -> None:
        if self.prev is not None:
            me = self.names[self.comm.rank]
            wait_request(self.comm.irecv(source=self.prev, tag=self.TAG), what=(
                f"rank {me}: {self._who(self.prev)}, a reader of the previous stagger group, did "
                f"not pass its turn {self._turn} (it stopped answering or stopped reading)"))
        self._turn += 1

    def pass_turn(self) -> None:
        """Every reader of this group has read: then each tells its partner in the next group."""
        k, me = self.comm.rank, self.names[self.comm.rank]
        if k == self.first:
            for j in range(self.first + 1, self.last + 1):
                wait_request(self.comm.irecv(source=j, tag=self.DONE), what=(
                    f"rank {me}: {self._who(j)}, a reader of its stagger group, did not finish its "
                    f"turn {self._turn - 1} (it stopped answering or stopped reading)"))
            for j in range(self.first + 1, self.last + 1):
                self._pending.append(self.comm.isend(None, dest=j, tag=self.GO))
        else:
            self._pending.append(self.comm.isend(None, dest=self.first, tag=self.DONE))
            wait_request(self.comm.irecv(source=self.first, tag=self.GO), what=(
                f"rank {me}: {self._who(self.first)}, the first reader of its stagger group, did "
                f"not confirm turn {self._turn - 1} (it stopped answering or stopped reading)"))
        if self.next is not None:
            self._pending.append(self.comm.isend(None, dest=self.next, tag=self.TAG))
        while len(self._pending) > 4 * (self.size + 2):
            self._pending.pop(0).wait()

    def close(self) -> None:
        for r in self._pending:
            r.wait()
        self._pending.clear()
