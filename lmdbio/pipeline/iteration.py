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

The Iteration owns the epoch: :meth:`set_epoch`'s epoch, the resolved order
(:attr:`Iteration.plan`), an error to raise at the next call (:attr:`deferred`) and the
checks before an epoch starts or a state loads. Those checks are pure: each rank computes
its view (:meth:`start_view`, :meth:`load_view`), the Reader exchanges the views, and
:meth:`reconcile` / :meth:`reconcile_load` raise the error every rank agrees on or return
where to start. No message is sent here, so the Iteration runs without MPI.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigurationError, LmdbioError, PeerError
from ..plan import EpochSchedule, Stream
from ..resume import resume_point, run_state
from ..shuffle import num_batches
from .epoch import EpochPlan, EpochRows

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
    compare before the next epoch (the last epoch and how many of its batches were taken).

    Args:
        stream: the batches between epochs.
        plan: the resolved order (its ``block`` set).
        batch_size, rank, nprocs: the global batch and this rank of how many.
        dataset: the snapshot, as a state records it (``txnid``, ``records``, ``digest``).
    """

    def __init__(self, stream: Stream, plan: EpochPlan | None = None, batch_size: int = 0,
                 rank: int = 0, nprocs: int = 1, dataset: dict | None = None):
        self.stream = stream
        self.plan = plan if plan is not None else EpochPlan()
        self.batch_size = batch_size or stream.batch
        self.rank, self.nprocs = rank, nprocs
        self.dataset = dataset if dataset is not None else {"txnid": 0, "records": stream.n}
        self.t = 0
        self.epoch = 0   # set_epoch's: what ``for b in reader`` reads
        self.live: LiveEpoch | None = None
        self.prefetch = None   # the live epoch's Prefetch (None without read-ahead)
        self.last: tuple[int, int] | None = None   # (epoch, batches taken) of the last epoch
        #: (epoch, batches delivered) of a loaded state, until that epoch starts.
        self.resume: tuple[int, int] | None = None
        #: An error of an epoch's end, raised by the next call (:meth:`check`).
        self.deferred: LmdbioError | None = None
        self.told_no_prefetch = False   # read_batch() under prefetch: warned once

    @property
    def epoch_batches(self) -> int:
        """Global batches in an epoch (the order's last-batch policy)."""
        return num_batches(self.stream.n, self.batch_size, self.plan.last_batch)

    def check(self) -> None:
        """Raise the error an epoch's end left, once."""
        err, self.deferred = self.deferred, None
        if err is not None:
            raise err

    def idle(self, doing: str) -> None:
        """Raise ConfigurationError when an epoch is live (``doing``: what was asked)."""
        if self.live is not None:
            raise ConfigurationError(
                f"epoch {self.live.number} is in progress on this Reader: {doing}")

    # -- the start of an epoch: a view per rank, then one verdict
    def start_view(self, e) -> tuple:
        """This rank's view before epoch ``e``: (problem or None, epoch, first batch, last
        epoch and its batches taken, a loaded state's point)."""
        problem = None
        if self.live is not None:
            problem = (f"epoch {self.live.number} is still in progress on this Reader (its "
                       "iterator is alive): finish it or close it (it.close()) before starting "
                       f"epoch {e}")
        elif isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 0:
            problem = f"epoch must be an int >= 0, got {e!r}"
        elif self.resume is not None and self.resume[0] != e \
                and 0 < self.resume[1] < self.epoch_batches:
            saved, done = self.resume
            problem = (f"the state loaded (load_state_dict) stopped epoch {saved} after {done} "
                       f"of its {self.epoch_batches} batches, and epoch {e} was asked for: "
                       f"iterate epoch {saved} first (reader.epoch({saved}), or "
                       f"set_epoch({saved})) to deliver the rest of it, or load the state of "
                       "the epoch you mean to read")
        return (problem, e if problem else int(e), self.next_start(), self.last, self.resume)

    def reconcile(self, views: list) -> tuple[int, int]:
        """``(first batch, batches to skip)`` of the epoch every rank's view agrees on, or the
        error: the lowest rank's problem (ConfigurationError), or PeerError when the ranks
        took different epochs or batches before."""
        bad = [(r, v[0]) for r, v in enumerate(views) if v[0] is not None]
        if bad:
            r, msg = bad[0]
            raise ConfigurationError(msg if r == self.rank else f"rank {r}: {msg}")
        e = views[self.rank][1]
        if len({tuple(v[1:]) for v in views}) > 1:
            where = "; ".join(f"rank {r}: epoch {v[1]}" + (
                f" after taking {v[3][1]} batches of epoch {v[3][0]}" if v[3] else "")
                for r, v in enumerate(views))
            raise PeerError(
                f"rank {self.rank}: the ranks parted ways before epoch {e} ({where}): every "
                "rank must iterate the same epochs and take the same number of batches of "
                "each (break out of an epoch at the same batch on every rank)",
                ranks=[r for r, v in enumerate(views) if v[1:] != views[self.rank][1:]])
        t0 = views[self.rank][2]
        # A resumed epoch starts at its next batch, on the chunk that holds it.
        skip = self.resume[1] if self.resume is not None and self.resume[0] == e else 0
        return t0, skip

    # -- saving and loading where the epochs are
    def state_dict(self) -> dict:
        """Where the epochs are, as :func:`lmdbio.resume.run_state` writes it."""
        epoch, batches = self.position(self.epoch)
        d: dict = self.dataset
        return run_state(self.plan, epoch, batches, self.batch_size, self.nprocs,
                         d["txnid"], d["records"], d.get("digest"))

    def load_view(self, state, opened: str) -> tuple:
        """This rank's view of loading ``state``: (the error or None, the point)."""
        try:
            self.idle("load the state before starting an epoch, or close its iterator "
                      "(it.close()) first")
            point = resume_point(state, self.state_dict(), what="Reader", opened=opened,
                                 epoch_batches=self.epoch_batches, order=self.plan.kind)
        except LmdbioError as exc:
            return exc, None
        return None, point

    def reconcile_load(self, views: list) -> tuple[int, int]:
        """Resume where every rank's view agrees, or raise the lowest rank's error (or
        ConfigurationError when the ranks loaded different states)."""
        bad = [(r, v[0]) for r, v in enumerate(views) if v[0] is not None]
        if bad:
            r, exc = bad[0]
            if r != self.rank:   # the same error, its data kept, naming the rank
                exc = copy.copy(exc)
                exc.args = (f"rank {r}: {exc.args[0] if exc.args else ''}",) + exc.args[1:]
            raise exc
        if len({v[1] for v in views}) > 1:
            where = "; ".join(f"rank {r}: epoch {v[1][0]} after {v[1][1]} batches"
                              for r, v in enumerate(views))
            raise ConfigurationError(
                f"the ranks loaded different states ({where}): load the same state on every "
                "rank (state_dict() is the same on every rank; saving rank 0's is enough)")
        self.resume = point = views[self.rank][1]
        self.epoch = point[0]
        return point

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

    def end_deferred(self, after=None) -> None:
        """:meth:`end`, keeping its error for the next call (:meth:`check`); then ``after``
        (the pipeline's end of the epoch), whatever happened."""
        try:
            self.end(drain=True)
        except LmdbioError as exc:
            self.deferred = exc
        finally:
            if after is not None:
                after()

    def stop_prefetch(self, drain: bool = False) -> None:
        pf, self.prefetch = self.prefetch, None
        if pf is not None:
            # ``drain``: the thread reads on to its bound (the same on every rank that took
            # the same batches), so every reader reads the same chunks and the hand-offs
            # between ranks (shared slots, DM's ring, STAG's turns) stay in step.
            pf.close(drain=drain)
