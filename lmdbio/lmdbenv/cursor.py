"""A cursor walk the way Caffe's goes: ``next()`` from the first record, wrapping at the end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import LmdbFormatError, LmdbioError
from .env import entries, lmdb_error

__all__ = ["CursorWalker"]


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
        # py-lmdb objects (untyped); None once closed.
        self.txn: Any = None
        self.cursor: Any = None
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
        out: list = []
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

    def step_back(self, count: int) -> None:
        """Walk ``count`` records back with ``prev()`` (wrapping at the start)."""
        self.check_size()
        prev, last = self.cursor.prev, self.cursor.last
        try:
            for _ in range(count):
                if not prev():
                    last()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"stepping back from record {self.pos}") from exc
        self.pos = (self.pos - count) % self.n
        self.walked += count

    def take_runs(self, runs) -> list:
        """Each (first, count) run's values, walking the cursor to it: forward with ``next()``,
        or back with ``prev()`` when the run starts a little behind (an epoch's last batch,
        the next epoch's start), never around the whole file for that."""
        values = []
        for first, count in runs:
            back = (self.pos - first) % self.n
            if 0 < back < self.n // 2:
                self.step_back(back)
            else:
                self.skip_to(first)
            values += self.take(count)
        return values

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

    def map_address(self, psize: int, header_size: int) -> int | None:
        """Where LMDB mapped page 0: ``env.info()`` when it knows (a fixed map), else :meth:`map_base`."""
        return self.env.info()["map_addr"] or self.map_base(psize, header_size)

    def advise(self, offset: int, length: int) -> None:
        """Ask the kernel to read ``length`` bytes at ``offset`` of data.mdb ahead (WILLNEED)."""
        os.posix_fadvise(self.fd, offset, length, os.POSIX_FADV_WILLNEED)

    def snapshot_id(self) -> tuple[int, int]:
        """``(txnid, entries)`` of this walker's read transaction."""
        return self.txn.id(), entries(self.env, self.txn)

    def txnid(self) -> int:
        return self.txn.id()

    def getter(self):
        """``txn.get`` of this walker's snapshot (values are memoryviews into the map)."""
        return self.txn.get

    def keys_where(self, want: np.ndarray) -> list[bytes]:
        """Keys of the records ``i`` with ``want[i]``, listed by a cursor over every key.

        A cursor listing keys still reads the first page of every overflow
        value (LMDB returns the value with the key): on cold storage that is
        the whole file, so it is a fallback only.
        """
        cur = self.txn.cursor()
        try:
            return [bytes(k) for i, k in enumerate(cur.iternext(keys=True, values=False)) if want[i]]
        finally:
            cur.close()

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
