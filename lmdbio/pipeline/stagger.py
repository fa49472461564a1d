"""STAG: readers take turns in groups, so at most one group's requests hit storage at a time."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

from .. import tags
from ..errors import PeerTimeoutError
from ..waiting import completes_within, timeout, wait_request

__all__ = ["Stagger", "NoStagger"]


class Stagger:
    """STAG: readers in groups of ``size``; at most one group reads at a time.

    Group g starts its reads only after every reader of group g-1 has finished:
    the readers of group g-1 report to their group's first reader, which
    releases them; each then sends a message to the reader at the same
    position in group g. Group 0 does not wait. Every wait is bounded by
    ``LMDBIO_TIMEOUT`` and names the rank (world rank, from ``names``) it waited for:
    the turns it waits to receive, and the hand-offs it sent, which :meth:`close`
    completes (an MPI that does not buffer small messages completes a send only
    once the receiver takes it).
    """

    TAG = tags.STAGGER_TURN
    DONE, GO = tags.STAGGER_DONE, tags.STAGGER_GO

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
        self._pending: list = []   # (request, reader it went to, what it passed)
        self._turn = 0

    @classmethod
    def join(cls, topology, size: int | None) -> Stagger:
        """This reader's place in the readers' turns (collective over the readers);
        ``size`` readers per group, None or 0 for half the readers."""
        names = tuple(topology.readers_comm.allgather(topology.comm.rank))
        return cls(topology.readers_comm, size or max(1, topology.nreaders // 2), names=names)

    def _who(self, k: int) -> str:
        return f"rank {self.names[k]}"

    def wait_turn(self) -> None:
        if self.prev is not None:
            me = self.names[self.comm.rank]
            wait_request(self.comm.irecv(source=self.prev, tag=self.TAG), what=(
                f"rank {me}: {self._who(self.prev)}, a reader of the previous stagger group, did "
                f"not pass its turn {self._turn} (it stopped answering or stopped reading)"),
                who=[self.names[self.prev]])
        self._turn += 1

    def pass_turn(self) -> None:
        """Every reader of this group has read: then each tells its partner in the next group."""
        k, me = self.comm.rank, self.names[self.comm.rank]
        if k == self.first:
            for j in range(self.first + 1, self.last + 1):
                wait_request(self.comm.irecv(source=j, tag=self.DONE), what=(
                    f"rank {me}: {self._who(j)}, a reader of its stagger group, did not finish its "
                    f"turn {self._turn - 1} (it stopped answering or stopped reading)"),
                    who=[self.names[j]])
            for j in range(self.first + 1, self.last + 1):
                self._send(j, self.GO, "the release of its stagger group")
        else:
            self._send(self.first, self.DONE, "the end of its group's turn")
            wait_request(self.comm.irecv(source=self.first, tag=self.GO), what=(
                f"rank {me}: {self._who(self.first)}, the first reader of its stagger group, did "
                f"not confirm turn {self._turn - 1} (it stopped answering or stopped reading)"),
                who=[self.names[self.first]])
        if self.next is not None:
            self._send(self.next, self.TAG, "its turn")
        self._settle(4 * (self.size + 2))

    def _send(self, dest: int, tag: int, what: str) -> None:
        self._pending.append((self.comm.isend(None, dest=dest, tag=tag), dest,
                              f"{what} (turn {self._turn - 1})"))

    def _settle(self, keep: int) -> None:
        """Complete the hand-offs sent, all but the newest ``keep``, each within LMDBIO_TIMEOUT.

        A request stays listed until it completes (it holds the message).
        """
        while len(self._pending) > keep:
            req, dest, what = self._pending[0]
            if not completes_within(req, timeout()):
                me = self.names[self.comm.rank]
                raise PeerTimeoutError(
                    f"rank {me}: {self._who(dest)}, a reader of the "
                    f"{'next' if dest == self.next else 'same'} stagger group, did not take "
                    f"{what} within {timeout():g} s (LMDBIO_TIMEOUT): it stopped reading, is "
                    "stopped or exited", missing=[self.names[dest]], limit=timeout())
            self._pending.pop(0)

    def close(self) -> None:
        """Complete every hand-off this reader sent, each within LMDBIO_TIMEOUT (then
        PeerTimeoutError names the reader that did not take it)."""
        self._settle(0)

    @contextmanager
    def turn(self, rec, t: int):
        """Wait for this group's turn (phase ``stagger_wait``), run the block, pass the turn on.

        A block that raises does not pass the turn: the next group's wait ends
        at its timeout, naming this rank.
        """
        with rec.phase("stagger_wait", t, chain=True):
            self.wait_turn()
        yield
        self.pass_turn()

    def finish(self) -> None:
        self.close()


class NoStagger:
    """Every reader reads whenever it is ready."""

    def turn(self, rec, t: int):
        return nullcontext()

    def finish(self) -> None:
        pass
