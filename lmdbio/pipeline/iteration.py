"""Where a Reader is in its batches: one object for the stream, the live epoch and read-ahead.

Between epochs a Reader reads the endless stream (:class:`~lmdbio.plan.Stream`: batch t
holds positions ``(t*B + j) mod n``). An epoch interrupts it: it starts on the first chunk
at or after the next batch (:meth:`Iteration.next_start`), reads its own rows
(:class:`~lmdbio.plan.EpochSchedule`), and however many of its batches were taken, the
stream goes on after its last row. The Iteration holds all of that; the Pipeline is told
which schedule each read is of, and keeps no epoch state of its own beyond its window.

A Reader's saved state (:meth:`lmdbio.Reader.state_dict`) is :meth:`Iteration.position`:
an epoch and how many of its batches were delivered. A state loaded into a new Reader is
:attr:`Iteration.resume` until that epoch starts; it then starts ``skip`` batches in
(:meth:`Iteration.begin`), on the chunk that holds its next batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan import EpochSchedule, Stream
from .epoch import EpochRows

__all__ = ["Iteration", "LiveEpoch"]


@dataclass
class LiveEpoch:
    """An epoch whose iterator is alive: its number, rows, schedule and first batch, and its
    batches delivered (those a resumed state had delivered included)."""

    token: object
    number: int
    rows: EpochRows
    schedule: EpochSchedule
    t0: int
    taken: int = 0


class Iteration:
    """The next batch ``t``, the live epoch (at most one), its prefetch, and what the ranks
    compare before the next epoch (the last epoch and how many of its batches were taken)."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self.t = 0
        self.live: LiveEpoch | None = None
        self.prefetch = None   # the live epoch's Prefetch (None without read-ahead)
        self.last: tuple[int, int] | None = None   # (epoch, batches taken) of the last epoch
        #: (epoch, batches delivered) of a loaded state, until that epoch starts.
        self.resume: tuple[int, int] | None = None

    @property
    def schedule(self) -> Stream | EpochSchedule:
        """What the next batch is read from: the live epoch's rows, else the stream."""
        return self.live.schedule if self.live is not None else self.stream

    def next_start(self) -> int:
        """The batch the next epoch starts at: the first chunk boundary at or after ``t``."""
        k = self.stream.k
        return -(-self.t // k) * k

    def begin(self, token, number: int, rows: EpochRows, schedule: EpochSchedule, t0: int,
              prefetch=None, skip: int = 0) -> None:
        """Epoch ``number`` is live from batch ``t0`` (a chunk boundary) on; its first ``skip``
        batches were delivered before (a resumed state), so reading starts at ``t0 + skip``."""
        self.live = LiveEpoch(token, int(number), rows, schedule, t0, int(skip))
        self.t = t0 + int(skip)
        self.prefetch = prefetch
        self.resume = None

    def position(self, epoch: int) -> tuple[int, int]:
        """``(epoch, batches delivered of it)`` where this Reader is: the live epoch's, else a
        loaded state's not resumed yet, else the last epoch's; ``(epoch, 0)`` before any."""
        if self.live is not None:
            return self.live.number, self.live.taken
        for point in (self.resume, self.last):
            if point is not None:
                return point
        return int(epoch), 0

    def is_live(self, token) -> bool:
        return self.live is not None and self.live.token is token

    def took(self) -> None:
        """A batch was delivered."""
        self.t += 1
        if self.live is not None:
            self.live.taken += 1

    def end(self, drain: bool = True) -> None:
        """The live epoch ends: stop reading ahead (``drain``: read on to the bound, as every
        rank that took the same batches does), go back to the stream after its last row. A
        prefetch error is raised after the state is back on the stream."""
        live, self.live = self.live, None
        if live is None:
            return
        self.last = (live.number, live.taken)
        try:
            self.stop_prefetch(drain)
        finally:
            self.t = max(self.t, live.t0 + len(live.rows.rows))

    def stop_prefetch(self, drain: bool = False) -> None:
        pf, self.prefetch = self.prefetch, None
        if pf is not None:
            # ``drain``: the thread reads on to its bound (the same on every rank that took
            # the same batches), so every reader reads the same chunks and the hand-offs
            # between ranks (shared slots, DM's ring, STAG's turns) stay in step.
            pf.close(drain=drain)
