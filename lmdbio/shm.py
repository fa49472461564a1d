"""MPI-3 shared-memory slots through which a reader hands records to its group."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .waiting import wait_word, wake_word, word_address

__all__ = ["GroupBuffer"]

_GROW, _NREC, _SEQ, _CTL_LEN = 0, 1, 2, 3


class GroupBuffer:
    """Rotating shared-memory slots of one reader group (rank 0 of ``comm`` is the reader).

    The reader fills the slot of chunk ``c`` (slot ``c % 3``) and publishes the
    records' (offset, size) pairs in a shared header; the group's ranks get
    zero-copy views. Hand-offs are sequence numbers in shared memory, not MPI
    barriers: each rank stores the chunk it asks for (its *ack*), the reader
    stores the chunk it has published, and either side waits politely
    (:mod:`lmdbio.waiting`), so waiting ranks do not steal the reader's CPU.

    Lifetime: with S slots, the reader refills a slot (chunk ``c``) only once
    every rank has asked for chunk ``c - S + 2``. A batch from chunk ``c - S``
    is then at least two ``read_batch()`` calls old, which is the documented
    lifetime: valid until the rank's second following ``read_batch()``. With
    S slots the reader can run S - 2 chunks ahead of the slowest rank, so a
    rank the scheduler is late to wake does not stall the reader (S >= 4;
    the Reader picks more slots for small chunks).

    A slot grows when a chunk needs more room: the reader announces the size
    in the header and the group allocates the bigger window together (MPI
    window allocation is collective). Outgrown windows are kept until
    ``close()`` because earlier batches may still view them.
    """

    MIN_SLOTS = 4

    def __init__(self, comm: MPI.Comm, max_records: int, capacity: int, nslots: int = MIN_SLOTS):
        if nslots < self.MIN_SLOTS:
            raise ValueError(f"nslots must be at least {self.MIN_SLOTS}, got {nslots}")
        self.nslots = int(nslots)
        self.comm = comm
        self.is_reader = comm.rank == 0
        self.max_records = int(max_records)
        self._hdr_len = _CTL_LEN + 2 * self.max_records
        n_hdr = self.nslots * self._hdr_len + 2 * comm.size
        self._hdr_win = self._allocate(n_hdr * 8)
        flat = self._view(self._hdr_win, np.int64)
        self.header = flat[:self.nslots * self._hdr_len].reshape(self.nslots, self._hdr_len)
        self.acks = flat[self.nslots * self._hdr_len:][:comm.size]
        # asleep[r] is 1 while rank r may sleep in a futex: wake-ups cost a
        # system call, so they are made only for someone who sleeps.
        self.asleep = flat[self.nslots * self._hdr_len + comm.size:]
        # Futex word addresses, looked up once (numpy's .ctypes is slow).
        self._seq_addr = [word_address(flat, k * self._hdr_len + _SEQ) for k in range(self.nslots)]
        self._ack_addr = [word_address(self.acks, r) for r in range(comm.size)]
        if self.is_reader:
            flat[:] = 0
            self.acks[:] = -1
        self._wins = [self._allocate(max(int(capacity), 1)) for _ in range(self.nslots)]
        self._data = [self._view(w, np.uint8) for w in self._wins]
        self._old: list = []
        self.comm.Barrier()

    # -- window plumbing -------------------------------------------------
    def _allocate(self, nbytes: int):
        if self.comm.size == 1:
            # A reader alone in its group shares with nobody: private memory is
            # faster to read into (transparent huge pages, no shm page faults).
            return np.empty(nbytes, dtype=np.uint8)
        win = MPI.Win.Allocate_shared(nbytes if self.is_reader else 0, 1, comm=self.comm)
        win.Lock_all(MPI.MODE_NOCHECK)
        return win

    @staticmethod
    def _view(win, dtype) -> np.ndarray:
        if isinstance(win, np.ndarray):
            return win.view(dtype)
        buf, _ = win.Shared_query(0)
        return np.frombuffer(buf, dtype=np.uint8).view(dtype)

    def capacity(self, slot: int) -> int:
        return self._data[slot].nbytes

    def _grow(self, slot: int, nbytes: int) -> None:
        self._old.append(self._wins[slot])
        self._wins[slot] = self._allocate(nbytes)
        self._data[slot] = self._view(self._wins[slot], np.uint8)

    def _fence(self) -> None:
        # MPI_Win_sync is a memory barrier for the shared windows (MPI-3
        # separate model): stores before it are visible before the flag.
        if self.comm.size > 1:
            self._hdr_win.Sync()

    # -- reader side -----------------------------------------------------
    def reserve(self, chunk: int, nbytes: int) -> np.ndarray:
        """Reader: a writable array of at least ``nbytes`` for ``chunk``'s slot.

        Waits until the slot's previous chunk is out of use; collective with
        the group if the slot has to grow.
        """
        slot = chunk % self.nslots
        if chunk >= self.nslots and self.comm.size > 1:
            need = chunk - self.nslots + 2
            for m in range(1, self.comm.size):
                wait_word(self.acks, m, lambda v: v >= need, (self.asleep, 0), self._fence,
                          self._ack_addr[m])
        if nbytes > self.capacity(slot):
            new = max(int(nbytes), 2 * self.capacity(slot))
            self.header[slot, _GROW] = new
            self._fence()
            self.header[slot, _SEQ] = 2 * chunk + 1
            self._wake_members(slot)
            self._grow(slot, new)
        return self._data[slot]

    def publish(self, chunk: int, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Reader: announce the records now in ``chunk``'s slot."""
        slot = chunk % self.nslots
        n = len(offsets)
        if n > self.max_records:
            raise ValueError(f"{n} records do not fit a header of {self.max_records}")
        h = self.header[slot]
        m = self.max_records
        h[_NREC] = n
        h[_CTL_LEN:_CTL_LEN + n] = offsets
        h[_CTL_LEN + m:_CTL_LEN + m + n] = sizes
        self._fence()
        h[_SEQ] = 2 * chunk + 2
        self._wake_members(slot)

    def _wake_members(self, slot: int) -> None:
        self._fence()
        if self.asleep[1:].any():
            wake_word(self.header[slot], _SEQ, self._seq_addr[slot])

    # -- group side ------------------------------------------------------
    def receive(self, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every rank but the reader: ask for ``chunk`` and wait until it is there."""
        slot = chunk % self.nslots
        me = self.comm.rank
        self.acks[me] = chunk
        self._fence()
        if self.asleep[0]:
            wake_word(self.acks, me, self._ack_addr[me])
        h = self.header[slot]
        mine = (self.asleep, me)
        addr = self._seq_addr[slot]
        seq = wait_word(h, _SEQ, lambda v: v >= 2 * chunk + 1, mine, self._fence, addr)
        self._fence()
        if seq == 2 * chunk + 1:
            self._grow(slot, int(h[_GROW]))
            wait_word(h, _SEQ, lambda v: v >= 2 * chunk + 2, mine, self._fence, addr)
            self._fence()
        return self.current(chunk)

    def current(self, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, offsets, sizes) of what ``chunk``'s slot holds now (no synchronization)."""
        slot = chunk % self.nslots
        h = self.header[slot]
        n = int(h[_NREC])
        m = self.max_records
        return self._data[slot], h[_CTL_LEN:_CTL_LEN + n], h[_CTL_LEN + m:_CTL_LEN + m + n]

    def close(self) -> None:
        """Free every window. Collective over the group."""
        self.comm.Barrier()
        for w in [self._hdr_win, *self._wins, *self._old]:
            if isinstance(w, MPI.Win):
                w.Unlock_all()
                w.Free()
        self._wins, self._old, self._data = [], [], []
