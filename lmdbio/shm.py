"""MPI-3 shared-memory slots through which a reader hands records to its group."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import PeerError, PeerTimeoutError, ResourceError
from .shmroom import SHM_ADVICE, SHM_DIR, SHM_MARGIN, populate, prefault, shm_free, size_text
from .waiting import completes_within, timeout, wait_word, wake_word, word_address

if TYPE_CHECKING:   # importing mpi4py initializes MPI: only the node-group buffers need it
    from mpi4py import MPI

__all__ = ["GroupBuffer", "prefault", "populate", "shm_free", "SHM_DIR"]

# Windows that close() could not free because a peer had left: kept mapped
# until the process ends, so a late view never faults.
_PARKED: list = []
# Windows a batch still viewed at close(), per set of processes: freed by a
# later close() of the same processes once no view is left.
_REUSABLE: dict[tuple, list] = {}

_GROW, _NREC, _SEQ, _CTL_LEN = 0, 1, 2, 3


class GroupBuffer:
    """Rotating shared-memory slots of one reader group (rank 0 of ``comm`` is the reader).

    Chunks are numbered by hand-off (0, 1, 2, ... in the order the group reads them; the
    Pipeline's numbering, so a jump in the batches read never skips a slot). The reader
    fills the slot of chunk ``c`` (slot ``c % S`` of S slots) and publishes the
    records' (offset, size) pairs in a shared header; the group's ranks get
    zero-copy views. Hand-offs are sequence numbers in shared memory, not MPI
    barriers: each rank stores the chunk it asks for (its *ack*), the reader
    stores the chunk it has published, and either side waits politely
    (:mod:`lmdbio.waiting`), so waiting ranks do not steal the reader's CPU.

    Lifetime: with S slots, the reader refills a slot (chunk ``c``) only once
    every rank has asked for chunk ``c - S + 2`` (plus ``lag`` where ranks read ahead).
    A batch from chunk ``c - S``
    is then at least two ``read_batch()`` calls old, which is the documented
    lifetime: valid until the rank's second following ``read_batch()``. With
    S slots the reader can run S - 2 chunks ahead of the slowest rank, so a
    rank the scheduler is late to wake does not stall the reader (S >= 4;
    the Reader picks more slots for small chunks).

    A slot grows when a chunk needs more room: the reader announces the size
    in the header and the group allocates the bigger window together (MPI
    window allocation is collective). Outgrown windows are kept until
    ``close()`` because earlier batches may still view them.

    Every wait is bounded by :func:`lmdbio.waiting.timeout`: a rank that
    stops asking (or a reader that stops publishing) becomes a
    :class:`~lmdbio.errors.PeerTimeoutError` naming that rank and the chunk.
    ``close()`` frees the windows only when the whole group agrees in time
    and no batch of any rank still views them; otherwise the windows stay
    mapped until the process ends (never a segfault, never a hang).
    """

    MIN_SLOTS = 4
    # Views of the shared header (numpy arrays), None once the group closed or gave up its
    # windows; the ``is None`` checks guard the paths that may run after that.
    header: Any
    acks: Any
    asleep: Any
    failed: Any
    waiting_on: Any

    def __init__(self, comm: MPI.Intracomm, max_records: int, capacity: int,
                 nslots: int = MIN_SLOTS, names: tuple[int, ...] | None = None,
                 batches_per_chunk: int = 1, lag: int = 0):
        if nslots < self.MIN_SLOTS + lag:
            raise ValueError(f"nslots must be at least {self.MIN_SLOTS} + lag ({lag}), got {nslots}")
        self.nslots = int(nslots)
        self._firsts: dict[int, int] = {}   # hand-off -> its first batch, for messages
        # Chunks a rank may still hold beyond the two the lifetime rule counts: a rank that
        # reads ahead (prefetch depth d) asks for chunks up to d + 1 past the batches its
        # caller still holds, so a slot is refilled only once every rank asked ``lag`` further.
        self.lag = int(lag)
        self.comm = comm
        # World ranks of the group's members, for error messages.
        self.names = tuple(names) if names is not None else tuple(range(comm.size))
        self.batches_per_chunk = max(1, int(batches_per_chunk))
        self.timeout = timeout()
        self.is_reader = comm.rank == 0
        self.max_records = int(max_records)
        self._hdr_len = _CTL_LEN + 2 * self.max_records
        n_hdr = self.nslots * self._hdr_len + 2 * comm.size + 2
        if comm.size > 1:
            # Window allocation is collective: the reader decides for its whole group.
            short = self._no_room(n_hdr * 8 + self.nslots * max(int(capacity), 1),
                                  f"{self.nslots} slots of {size_text(capacity)} and their header")
            short = comm.bcast(short if self.is_reader else None, root=0)
            if short:
                raise ResourceError(f"rank {self.names[comm.rank]}: {short}")
        self._hdr_win = self._allocate(n_hdr * 8)
        flat = self._view(self._hdr_win, np.int64)
        self.header = flat[:self.nslots * self._hdr_len].reshape(self.nslots, self._hdr_len)
        self.acks = flat[self.nslots * self._hdr_len:][:comm.size]
        # asleep[r] is 1 while rank r may sleep in a futex: wake-ups cost a
        # system call, so they are made only for someone who sleeps.
        self.asleep = flat[self.nslots * self._hdr_len + comm.size:][:comm.size]
        # failed[0] is 1 + the group rank of a member that gave up (0: none):
        # the others stop waiting for it at once instead of at the timeout.
        self.failed = flat[-1:]
        # waiting_on[0] is 1 + the group rank of the member whose ask the reader waits for
        # (0: none), so a member that times out, or wakes to a failure, names the rank that
        # stopped instead of blaming the reader.
        self.waiting_on = flat[-2:-1]
        # Futex word addresses, looked up once (numpy's .ctypes is slow).
        self._seq_addr = [word_address(flat, k * self._hdr_len + _SEQ) for k in range(self.nslots)]
        self._ack_addr = [word_address(self.acks, r) for r in range(comm.size)]
        self._wins = [self._allocate(max(int(capacity), 1)) for _ in range(self.nslots)]
        self._data = [self._view(w, np.uint8) for w in self._wins]
        self._old: list = []
        self._old_data: list = []
        self._prefault(flat)
        if self.is_reader:
            flat[:] = 0
            self.acks[:] = -1
        self.comm.Barrier()

    def _prefault(self, header: np.ndarray) -> None:
        """Fault every page of the windows in once, so the first batches do not pay the page
        faults (the reader writes, the members map the pages by reading them).

        The reader populates the pages first, where the kernel can say "no room" instead of
        killing the process with SIGBUS (another group or job filled /dev/shm since the free
        space was checked); the group learns the outcome, and every rank raises ResourceError.
        """
        if self.comm.size == 1:
            for d in self._data:
                prefault(d)
            return
        ok = True
        if self.is_reader:
            for d in [header.view(np.uint8), *self._data]:
                done = populate(d)
                if done is False:
                    ok = False
                    break
                if done is None:
                    prefault(d)
        if not self.comm.bcast(ok, root=0):
            wins = [self._hdr_win, *self._wins]
            total = sum(d.nbytes for d in self._data) + header.nbytes
            self._wins, self._data = [], []
            self.header = self.acks = self.asleep = self.failed = self.waiting_on = None
            del header
            _free(wins)
            raise ResourceError(
                f"rank {self.names[self.comm.rank]}: the reader group {list(self.names)} "
                f"(reader: rank {self.names[0]}) could not fault in its {size_text(total)} of shared "
                f"memory in {SHM_DIR}: it ran out of room ({size_text(shm_free() or 0)} free now; "
                f"other groups or jobs may be filling it). {SHM_ADVICE}")
        if not self.is_reader:
            for d in self._data:
                prefault(d, write=False)

    def _note(self, chunk: int, t: int) -> None:
        """Remember hand-off ``chunk``'s first batch ``t`` (for messages; -1: unknown)."""
        if t >= 0:
            self._firsts[chunk] = t
            self._firsts.pop(chunk - 4 * self.nslots, None)

    def _stopped_asking(self, m: int, need: int) -> str:
        """The reader's timeout message for member ``m``, which did not ask for chunk ``need``."""
        return (f"rank {self.names[0]} (reader): rank {self.names[m]} did not ask for "
                f"{self._batches(need)} (chunk {need}): it stopped answering; it last asked for "
                f"chunk {int(self.acks[m])}")

    def _batches(self, chunk: int) -> str:
        """The batches of hand-off ``chunk``, as the messages name them."""
        k = self.batches_per_chunk
        t = self._firsts.get(chunk)
        if t is None:
            if self._firsts:   # reading jumped: the hand-off number is all this rank knows
                return f"hand-off {chunk}"
            t = chunk * k
        return f"batch {t}" if k == 1 else f"batches {t}..{t + k - 1}"
    # -- window plumbing -------------------------------------------------
    def _allocate(self, nbytes: int):
        if self.comm.size == 1:
            # A reader alone in its group shares with nobody: private memory is
            # faster to read into (transparent huge pages, no shm page faults).
            return np.empty(nbytes, dtype=np.uint8)
        from mpi4py import MPI

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

    def _no_room(self, nbytes: int, what: str) -> str:
        """Reader: why ``nbytes`` more of shared memory do not fit in /dev/shm ("" when they do)."""
        free = shm_free()
        if free is None or nbytes + SHM_MARGIN <= free:
            return ""
        return (f"the reader group {list(self.names)} (reader: rank {self.names[0]}) needs "
                f"{size_text(nbytes)} of shared memory in {SHM_DIR} for {what} (plus "
                f"{size_text(SHM_MARGIN)} kept free), and only {size_text(free)} is free there. "
                f"{SHM_ADVICE}")

    def _grow(self, slot: int, nbytes: int) -> None:
        self._old.append(self._wins[slot])
        self._old_data.append(self._data[slot])
        self._wins[slot] = self._allocate(nbytes)
        self._data[slot] = self._view(self._wins[slot], np.uint8)

    def _fence(self) -> None:
        # MPI_Win_sync is a memory barrier for the shared windows (MPI-3
        # separate model): stores before it are visible before the flag.
        if self.comm.size > 1:
            self._hdr_win.Sync()

    # -- reader side -----------------------------------------------------
    def reserve(self, chunk: int, nbytes: int, t: int = -1) -> np.ndarray:
        """Reader: a writable array of at least ``nbytes`` for ``chunk``'s slot.

        Waits until the slot's previous chunk is out of use; collective with
        the group if the slot has to grow.
        """
        self._note(chunk, t)
        slot = chunk % self.nslots
        if chunk >= self.nslots and self.comm.size > 1:
            need = chunk - self.nslots + 2 + self.lag
            failed = self.failed
            for m in range(1, self.comm.size):
                if self.acks[m] >= need:
                    continue
                self.waiting_on[0] = m + 1
                self._fence()
                v = wait_word(self.acks, m, lambda v: v >= need or failed[0] != 0, (self.asleep, 0),
                              self._fence, self._ack_addr[m], limit=self.timeout,
                              what=functools.partial(self._stopped_asking, m, need))
                if v < need:
                    self._check_failed()
                self.waiting_on[0] = 0
        if nbytes > self.capacity(slot):
            new = max(int(nbytes), 2 * self.capacity(slot))
            short = ""
            if self.comm.size > 1 and self._no_room(new, "a slot"):
                new = int(nbytes)   # just what the chunk needs, if that fits
                short = self._no_room(new, f"slot {slot} grown to {size_text(new)} for chunk {chunk}")
            # A negative size tells the members the group cannot grow: they raise too.
            self.header[slot, _GROW] = -new if short else new
            self._fence()
            self.header[slot, _SEQ] = 2 * chunk + 1
            self._wake_members(slot)
            if short:
                raise ResourceError(f"rank {self.names[0]} (reader): {short}")
            self._grow(slot, new)
            if self.comm.size > 1:
                done = populate(self._data[slot])
                if done is None:
                    prefault(self._data[slot])
                elif not done:
                    # The members wait for this chunk: they find the negative size, and raise.
                    self.header[slot, _GROW] = -new
                    self.abandon()
                    raise ResourceError(
                        f"rank {self.names[0]} (reader): the reader group {list(self.names)} "
                        f"could not fault in slot {slot} grown to {size_text(new)} in {SHM_DIR}: it "
                        f"ran out of room ({size_text(shm_free() or 0)} free now). {SHM_ADVICE}")
        return self._data[slot]

    def publish(self, chunk: int, offsets: np.ndarray, sizes: np.ndarray, t: int = -1) -> None:
        """Reader: announce the records now in ``chunk``'s slot."""
        self._note(chunk, t)
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
    def receive(self, chunk: int, t: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every rank but the reader: ask for ``chunk`` and wait until it is there."""
        self._note(chunk, t)
        slot = chunk % self.nslots
        me = self.comm.rank
        self.acks[me] = chunk
        self._fence()
        if self.asleep[0]:
            wake_word(self.acks, me, self._ack_addr[me])
        h = self.header[slot]
        mine = (self.asleep, me)
        addr = self._seq_addr[slot]
        what = lambda: self._stalled_reader(chunk)
        failed = self.failed
        seq = wait_word(h, _SEQ, lambda v: v >= 2 * chunk + 1 or failed[0] != 0, mine, self._fence,
                        addr, limit=self.timeout, what=what)
        if seq < 2 * chunk + 1:
            self._fence()   # the reader may have announced, then given up: read the word again
            seq = int(h[_SEQ])
            if seq < 2 * chunk + 1:
                self._check_failed()
        if seq > 2 * chunk + 2:
            self._parted(chunk, seq)
        self._fence()
        if seq == 2 * chunk + 1:
            self._check_grown(slot, chunk)
            self._grow(slot, int(h[_GROW]))
            seq = wait_word(h, _SEQ, lambda v: v >= 2 * chunk + 2 or failed[0] != 0, mine,
                            self._fence, addr, limit=self.timeout, what=what)
            if seq < 2 * chunk + 2:
                self._fence()
                self._check_grown(slot, chunk)
                self._check_failed()
            if seq > 2 * chunk + 2:
                self._parted(chunk, seq)
            self._fence()
        return self.current(chunk)

    def _parted(self, chunk: int, seq: int) -> None:
        """The slot holds a later chunk than the one asked for: the reader read past it."""
        raise PeerError(
            f"rank {self.names[self.comm.rank]}: asked its reader, rank {self.names[0]}, for "
            f"{self._batches(chunk)} (chunk {chunk}), but the reader went on to chunk "
            f"{(seq - 1) // 2}: the ranks parted ways (they took different numbers of batches); "
            "every rank must call read_batch() or take epoch batches the same number of times",
            ranks=[self.names[0]])

    def _check_grown(self, slot: int, chunk: int) -> None:
        """Member: raise ResourceError if the reader announced it cannot grow ``slot``."""
        grow = int(self.header[slot, _GROW])
        if grow < 0:
            raise ResourceError(
                f"rank {self.names[self.comm.rank]}: its reader, rank {self.names[0]}, could not "
                f"grow the reader group's shared slot to {size_text(-grow)} for "
                f"{self._batches(chunk)}: {SHM_DIR} lacks the room ({size_text(shm_free() or 0)} "
                f"free; see the reader's error). {SHM_ADVICE}")

    def current(self, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, offsets, sizes) of what ``chunk``'s slot holds now (no synchronization)."""
        slot = chunk % self.nslots
        h = self.header[slot]
        n = int(h[_NREC])
        m = self.max_records
        return self._data[slot], h[_CTL_LEN:_CTL_LEN + n], h[_CTL_LEN + m:_CTL_LEN + m + n]

    def abandon(self) -> None:
        """Tell the group this rank gives up (it failed): their waits end with PeerError."""
        if self.comm.size == 1 or self.failed is None:
            return
        if self.failed[0] == 0:
            self.failed[0] = self.comm.rank + 1
        self._fence()
        for k in range(self.nslots):
            wake_word(self.header[k], _SEQ, self._seq_addr[k])
        for r in range(self.comm.size):
            wake_word(self.acks, r, self._ack_addr[r])

    def _stalled(self) -> int | None:
        """Group rank of the member the reader is waiting for, if it waits for one."""
        m = int(self.waiting_on[0]) - 1 if self.waiting_on is not None else -1
        return m if 0 < m < self.comm.size else None

    def _stalled_reader(self, chunk: int) -> str:
        me, m = self.comm.rank, self._stalled()
        if m is not None and m != me:
            return (f"rank {self.names[me]}: rank {self.names[m]} stopped answering: its reader, "
                    f"rank {self.names[0]}, is waiting for it to ask for its next batches (it last "
                    f"asked for chunk {int(self.acks[m])}), so {self._batches(chunk)} (chunk "
                    f"{chunk}) were not published")
        return (f"rank {self.names[me]}: its reader, rank {self.names[0]}, stopped answering: it "
                f"did not publish {self._batches(chunk)} (chunk {chunk})")

    def _check_failed(self) -> None:
        who = int(self.failed[0]) - 1
        me = self.comm.rank
        if who == me:
            raise PeerError(f"rank {self.names[who]}: this rank failed earlier and left its reader "
                            "group; make a new Reader", ranks=[self.names[who]])
        if who >= 0:
            m = self._stalled()
            cause = (f"; the hand-off was stuck on rank {self.names[m]}, which stopped asking for "
                     f"batches (last asked for chunk {int(self.acks[m])})"
                     if m is not None and m not in (who, me) else "")
            raise PeerError(f"rank {self.names[me]}: rank {self.names[who]} of its reader "
                            f"group gave up (see that rank's error), so the hand-off cannot go on"
                            f"{cause}", ranks=[self.names[who]])

    def _in_use(self) -> bool:
        """True if anything outside this object (a Batch, a view of one) still holds a slot."""
        return _viewed(self._data + self._old_data)

    def close(self, limit: float | None = None, agree: bool = True) -> None:
        """Free every window when the group agrees within ``limit`` seconds. Collective.

        If a batch on any rank still views a slot, the windows stay mapped
        and are freed at a later close() of the same ranks once no batch
        views them; if a rank does not come, they stay mapped until the
        process ends (freeing them would make those views fault). Raises
        PeerTimeoutError (after letting go of everything) when a rank did
        not come. With ``agree=False`` (the caller knows a rank is missing)
        it only lets go.
        """
        wins = [self._hdr_win, *self._wins, *self._old]
        arrays = self._data + self._old_data
        self._wins, self._old, self._data, self._old_data = [], [], [], []
        self.header = self.acks = self.asleep = self.failed = self.waiting_on = None
        in_use = _viewed(arrays)
        if self.comm.size == 1:
            return
        if not agree:   # the job's ranks did not all come to close(): no collective
            _PARKED.append((wins, arrays))
            return
        # Windows parked by earlier closes of these same processes, in the same order
        # on each of them (each was parked by a group-wide decision).
        key = _world_key(self.comm)
        parked = _REUSABLE.setdefault(key, [])
        flags = np.array([1 if in_use else 0] + [1 if _viewed(a) else 0 for _, a in parked],
                         dtype=np.int32)
        anyone = np.zeros_like(flags)
        from mpi4py import MPI

        req = self.comm.Iallreduce(flags, anyone, op=MPI.MAX)
        limit = self.timeout if limit is None else limit
        if not completes_within(req, limit):
            _PARKED.append((wins, arrays, req, flags, anyone))
            raise PeerTimeoutError(
                f"rank {self.names[self.comm.rank]}: a rank of the reader group "
                f"{list(self.names)} did not reach close() within {limit:g} s (LMDBIO_TIMEOUT); "
                "its shared memory stays mapped until this process ends", limit=limit)
        keep = []
        for (old_wins, old_arrays), viewed in zip(parked, anyone[1:].tolist()):
            if viewed:
                keep.append((old_wins, old_arrays))
            else:
                del old_arrays[:]
                _free(old_wins)
        if anyone[0]:
            keep.append((wins, arrays))   # a batch still views it: keep it mapped
        else:
            del arrays[:]
            _free(wins)
        parked[:] = keep


def _viewed(arrays: list) -> bool:
    """True if anything but ``arrays`` (a Batch, a numpy view, a memoryview) holds one of them."""
    # References: the list and getrefcount's argument; any view holds one more
    # (numpy views and memoryviews keep the array they came from as their base).
    return any(sys.getrefcount(arrays[i]) > 2 for i in range(len(arrays)))


def _world_key(comm: MPI.Comm) -> tuple:
    """The COMM_WORLD ranks of ``comm``'s processes: the same processes, the same key."""
    from mpi4py import MPI

    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(MPI.Group.Translate_ranks(group, list(range(comm.size)), world))
    finally:
        group.Free()
        world.Free()


def _free(wins: list) -> None:
    for w in wins:
        w.Unlock_all()
        w.Free()
