"""MPI-3 shared-memory slots through which a reader hands records to its group."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

__all__ = ["GroupBuffer"]

_CTL_GROW, _CTL_NBYTES, _CTL_NREC, _CTL_LEN = 0, 1, 2, 3


class GroupBuffer:
    """Rotating shared-memory slots of one reader group (rank 0 of ``comm`` is the reader).

    The reader fills a slot and publishes the records' (offset, size) pairs
    in a shared header; the group's ranks get zero-copy views. There are
    three slots and one barrier per published slot: slot ``s`` is refilled
    only after every rank has passed the barrier of the slot published after
    it, i.e. has asked for the batch after next. That is what makes a Batch
    valid until its rank's second following ``read_batch()`` with a single
    synchronization per batch (two slots would need a second barrier).

    A slot grows when a publish needs more room: the reader announces the new
    size in the header, and the group allocates the bigger window together.
    Outgrown windows are kept until ``close()`` because earlier batches may
    still be views into them.
    """

    NSLOTS = 3

    def __init__(self, comm: MPI.Comm, max_records: int, capacity: int):
        self.comm = comm
        self.is_reader = comm.rank == 0
        self.max_records = int(max_records)
        hdr_len = _CTL_LEN + 2 * self.max_records
        self._hdr_win = self._allocate(self.NSLOTS * hdr_len * 8)
        self.header = self._view(self._hdr_win, np.int64).reshape(self.NSLOTS, hdr_len)
        if self.is_reader:
            self.header[:] = 0
        self._wins = [self._allocate(max(int(capacity), 1)) for _ in range(self.NSLOTS)]
        self._data = [self._view(w, np.uint8) for w in self._wins]
        self._old: list[MPI.Win] = []
        self.comm.Barrier()

    # -- window plumbing -------------------------------------------------
    def _allocate(self, nbytes: int) -> MPI.Win:
        win = MPI.Win.Allocate_shared(nbytes if self.is_reader else 0, 1, comm=self.comm)
        win.Lock_all(MPI.MODE_NOCHECK)
        return win

    @staticmethod
    def _view(win: MPI.Win, dtype) -> np.ndarray:
        buf, _ = win.Shared_query(0)
        return np.frombuffer(buf, dtype=np.uint8).view(dtype)

    def capacity(self, slot: int) -> int:
        return self._data[slot].nbytes

    def _grow(self, slot: int, nbytes: int) -> None:
        self._old.append(self._wins[slot])
        self._wins[slot] = self._allocate(nbytes)
        self._data[slot] = self._view(self._wins[slot], np.uint8)

    def _sync(self) -> None:
        # MPI_Win_sync orders this process's loads/stores on the shared windows
        # with respect to the barrier (the MPI-3 "separate" memory model).
        self._hdr_win.Sync()
        for w in self._wins:
            w.Sync()

    # -- reader side -----------------------------------------------------
    def reserve(self, slot: int, nbytes: int) -> np.ndarray:
        """Reader: a writable array of at least ``nbytes`` for ``slot``. Collective if it grows."""
        if nbytes > self.capacity(slot):
            new = max(int(nbytes), 2 * self.capacity(slot))
            self.header[slot, _CTL_GROW] = new
            self._sync()
            self.comm.Barrier()
            self._grow(slot, new)
        return self._data[slot]

    def publish(self, slot: int, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Reader: announce the records now in ``slot`` and release the group."""
        n = len(offsets)
        if n > self.max_records:
            raise ValueError(f"{n} records do not fit a header of {self.max_records}")
        h = self.header[slot]
        h[_CTL_GROW] = 0
        h[_CTL_NREC] = n
        h[_CTL_LEN:_CTL_LEN + n] = offsets
        h[_CTL_LEN + self.max_records:_CTL_LEN + self.max_records + n] = sizes
        self._sync()
        self.comm.Barrier()

    # -- group side ------------------------------------------------------
    def receive(self, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every rank but the reader: wait for ``slot`` and return (data, offsets, sizes)."""
        self.comm.Barrier()
        self._sync()
        grow = int(self.header[slot, _CTL_GROW])
        if grow:
            self._grow(slot, grow)
            self.comm.Barrier()
            self._sync()
        return self.current(slot)

    def current(self, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, offsets, sizes) of what ``slot`` holds now (no synchronization)."""
        h = self.header[slot]
        n = int(h[_CTL_NREC])
        offs = h[_CTL_LEN:_CTL_LEN + n]
        sizes = h[_CTL_LEN + self.max_records:_CTL_LEN + self.max_records + n]
        return self._data[slot], offs, sizes

    def close(self) -> None:
        """Free every window. Collective over the group."""
        for w in [self._hdr_win, *self._wins, *self._old]:
            try:
                w.Unlock_all()
            except MPI.Exception:
                pass
            w.Free()
        self._wins, self._old, self._data = [], [], []
