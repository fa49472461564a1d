"""Writing a new database's records, ``commit_every`` per write transaction (Caffe's way)."""

from __future__ import annotations

from typing import Any

from ..errors import DatasetError

__all__ = ["RecordWriter"]


class RecordWriter:
    """Writes a new database's records, ``commit_every`` per write transaction (as Caffe's
    ``convert_imageset`` does). A full map is a :class:`~lmdbio.errors.DatasetError`.

    Args:
        path: the LMDB directory (created by LMDB if missing).
        map_size: the map's size in bytes (the largest the file may grow to).
        commit_every: records per write transaction.
        lmdb_format: ``"0.9"`` (Caffe's) or ``"1.0"`` (LMDB 1.0's on-disk format).
    """

    def __init__(self, path, map_size: int, commit_every: int, lmdb_format: str = "0.9"):
        import lmdb

        self._full = lmdb.MapFullError
        self.path = str(path)
        self.commit_every = commit_every
        self.env = lmdb.open(self.path, map_size=map_size, subdir=True, meminit=True,
                             lib_version=1 if lmdb_format == "1.0" else 0)
        self.txn: Any = None   # the open write transaction (py-lmdb, untyped)
        self.in_txn = 0

    def put(self, key: bytes, value: bytes) -> None:
        try:
            if self.txn is None:
                self.txn = self.env.begin(write=True)
            self.txn.put(key, value)
            self.in_txn += 1
            if self.in_txn == self.commit_every:
                self.commit()
        except self._full:
            raise self._map_full() from None

    def commit(self) -> None:
        txn, self.txn, self.in_txn = self.txn, None, 0
        if txn is not None:
            try:
                txn.commit()
            except self._full:
                raise self._map_full() from None

    def _map_full(self) -> DatasetError:
        return DatasetError(f"LMDB map full while writing {self.path}: the size estimate was "
                            "too small")

    def close(self) -> None:
        """Commit what is pending and close the environment."""
        try:
            self.commit()
        finally:
            self.env.close()

    def abort(self) -> None:
        """Drop what is pending (not committed) and close the environment."""
        txn, self.txn = self.txn, None
        try:
            if txn is not None:
                txn.abort()
        finally:
            self.env.close()
