"""Key (``lmdb-get``): the PyTorch-Dataset pattern. Each rank lists its keys once at setup
and calls ``txn.get(key)`` per record, with LMDB's reader lock on."""

from __future__ import annotations

import numpy as np

from ..collective import collective
from ..errors import LmdbioError, SnapshotError
from ..recordindex import build_index
from .stage import Abilities, Views
from .walk import Walk

__all__ = ["Key"]


class Key(Walk):
    """Locate by key: this rank's keys, listed from the leaf pages of its snapshot."""

    name = "key"
    abilities = Abilities(random_access=True)

    def __init__(self):
        super().__init__()
        self.keys_from = ""
        self._path = None
        self._keys: list[bytes] = []   # this rank's keys, listed at setup

    def open(self, path, meta, nprocs: int) -> None:
        self._path = path
        super().open(path, meta, nprocs)   # the walker's read transaction is the snapshot

    def setup(self, comm, readers, schedule, row: dict) -> None:
        super().setup(comm, readers, schedule, row)
        collective(comm, self._list_keys, schedule, row)

    def _list_keys(self, schedule, row: dict) -> None:
        # As a Dataset does in __init__: list the keys (here only this rank's).
        n = schedule.n
        self._pos = schedule.touched()
        keys = self._keys_from_leaves(n)
        self.keys_from = "leaf pages" if keys is not None else "cursor"
        if keys is None:
            want = np.zeros(n, dtype=bool)
            want[self._pos] = True
            keys = self.cursor().keys_where(want)
        self._keys = keys
        if len(self._keys) != len(self._pos):
            raise SnapshotError(f"{self._path}: found {len(self._keys)} of this rank's "
                                f"{len(self._pos)} keys in the snapshot; the database changed",
                                expected=len(self._pos), found=len(self._keys))
        self._get = self.cursor().getter()
        row["keys_listed"] = len(self._keys)

    def _keys_from_leaves(self, n: int) -> list[bytes] | None:
        """This rank's keys from the leaf pages of its own snapshot (the stored key list a
        Dataset would load), or None when that snapshot is not the current tree (a writer
        committed since): the cursor lists them then."""
        try:
            idx = build_index(self._path)
            if idx.txnid != self.cursor().txnid() or len(idx) != n:
                return None
            # Our read transaction pins this version's pages, so the walk was safe.
            keys = idx.keys(0, n)
        except LmdbioError:
            return None
        return [keys[i] for i in self._pos.tolist()]

    def locate(self, chunk: int, schedule, rec) -> Views:
        t = chunk * schedule.k
        with rec.phase("locate", t):
            idx = np.searchsorted(self._pos, schedule.chunk_positions(chunk)).tolist()
            keys = [self._keys[i] for i in idx]
        get = self._get
        return Views(self.cursor().check_size, lookup=lambda: [get(k) for k in keys])
