"""The Reader's bounded end: close, leaving a ``with`` block, an interrupted setup.

Every rank lets go of its resources whatever the others do: the ranks agree within a time
limit (:func:`lmdbio.collective.agree`) whether every rank came and which failed, and only
then free what the others could still touch (shared windows, communicators).

Waits for peers are bounded by ``LMDBIO_TIMEOUT`` seconds (default 120): a rank that stops
calling ``read_batch`` (or exits) makes its peers raise
:class:`~lmdbio.errors.PeerTimeoutError` naming it, and a rank that fails tells its reader
group at once (:class:`~lmdbio.errors.PeerError` there). When an exception (including
KeyboardInterrupt) leaves a ``with Reader(...)`` block, the ranks agree, without blocking,
for up to ``LMDBIO_EXIT_TIMEOUT`` seconds (default 10) whether every rank is leaving too:
if so the Reader closes cleanly and the exception propagates on every rank (ranks that left
without an error get PeerError from close()). Only a rank that fails *alone* (the others do
not come) acts on ``on_error``: ``"abort"`` calls ``MPI_Abort`` so no rank waits for ever;
``"raise"`` raises on that rank only and the others are released by their own timeouts.
Batches stay readable after close: shared memory that a batch still views is kept mapped
until the process ends.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .collective import EXIT_TIMEOUT, exit_timeout, release_comms
from .errors import LmdbioError, PeerError, PeerTimeoutError
from .waiting import timeout

__all__ = ["Closing"]


class Closing:
    """The close protocol of :class:`lmdbio.Reader` (its ``comm``, ``pipe``, ``topology``,
    ``it`` and ``_on_error``): :meth:`close`, the context manager, and the error paths."""

    # Set by the Reader.
    comm: Any
    pipe: Any
    topology: Any
    it: Any
    rank: int
    nprocs: int
    _on_error: str
    _missing: list[int]
    _closed = True
    _in_with = False

    def _interrupted_setup(self, exc: BaseException) -> None:
        """Ctrl-C (or another BaseException) hit this rank between two collective setup steps.

        The other ranks may be inside a blocking MPI call (a window allocation,
        a communicator split) that no timeout can end. If they do not all come
        to a bounded agreement, end the job (whatever ``on_error`` says): it
        is the only way not to leave them spinning for ever.
        """
        try:
            limit = exit_timeout()
        except LmdbioError:
            limit = EXIT_TIMEOUT
        present, _ = self._agree(True, limit)
        if not present:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__} while the Reader was being "
                  f"set up; rank(s) {self._missing} are inside a setup step that cannot time out: "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            self.comm.abort(exc)

    def _abandon(self) -> None:
        pipe = getattr(self, "pipe", None)   # unset when the Reader's setup failed early
        if pipe is not None:
            with contextlib.suppress(Exception):   # best effort on an error path
                pipe.abandon()

    def _fail(self, exc: BaseException) -> None:
        if self._on_error == "abort" and self.nprocs > 1:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__}: {exc}; "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            self.comm.abort(exc)

    def close(self) -> None:
        """Release shared memory, maps and files. Collective, with bounded waits.

        Waits at most ``2 * LMDBIO_TIMEOUT`` seconds for the other ranks: if one
        does not come, this rank lets go of its own resources and raises
        PeerTimeoutError. Raises PeerError when another rank failed inside
        its ``with`` block. Batches read before stay valid.
        """
        present, failed, problem = self._close(False, 2 * timeout())
        if problem is not None:
            raise problem
        if not present:
            exc = PeerTimeoutError(
                f"rank {self.rank}: rank(s) {self._missing} did not reach close() within "
                f"{2 * timeout():g} s (twice LMDBIO_TIMEOUT): they stopped answering (stopped, "
                "in a debugger, swapped out), exited, or read a different number of batches. "
                "Every rank must call read_batch() the same number of times, then close()",
                missing=self._missing, limit=2 * timeout())
            # MPI_Finalize would wait for those ranks for ever: under on_error="abort" end the job.
            self._fail(exc)
            raise exc
        others = [r for r in failed if r != self.rank]
        if others:
            raise PeerError(f"rank {self.rank}: rank(s) {others} left their with-block with an "
                            "error (see their messages); this rank closed cleanly", ranks=others)

    def _close(self, failed: bool, limit: float):
        """Close; returns (every rank came, ranks that failed, first local problem)."""
        if self._closed:
            return True, [], None
        self._closed = True
        it, pipe = getattr(self, "it", None), getattr(self, "pipe", None)   # unset: setup failed
        problem = None
        try:
            if it is not None:
                it.live = None   # an epoch iterator dropped later must not touch the closed pipeline
                it.stop_prefetch()
            if pipe is not None:
                pipe.finish(failed, it.t if it is not None else 0)
        except Exception as exc:
            problem, failed = exc, True
        present, failed_ranks = self._agree(failed, limit)
        try:
            self._release(agree=present)
        except Exception as exc:
            problem = problem or exc
        return present, failed_ranks, problem

    def _agree(self, failed: bool, limit: float) -> tuple[bool, list[int]]:
        """Find out within ``limit`` seconds whether every rank came and which failed (see
        :func:`lmdbio.collective.agree`); the ranks that did not come are :attr:`_missing`."""
        present, failed_ranks, self._missing = self.comm.agree(failed, limit)
        # A rank that failed or did not come may have left messages in flight (a cursor, a
        # turn, a report): then the communicators are parked at release, not freed.
        self._settled = present and (not failed_ranks or self.nprocs == 1)
        return present, failed_ranks

    def _release(self, agree: bool = True) -> None:
        settled = agree and getattr(self, "_settled", True)
        try:
            pipe = getattr(self, "pipe", None)   # unset when the Reader's setup failed early
            if pipe is not None:
                pipe.release(timeout(), agree)
        except BaseException:
            settled = False   # a wait given up: its request may still be pending
            raise
        finally:
            topo, self.topology = self.topology, None
            comms = [] if topo is None else [topo.readers_comm, topo.group_comm, topo.node_comm]
            # Freed only when nothing can be left in flight: MPI gives a freed communicator's
            # context to the next one, where a late message would be taken as new.
            if comms:
                release_comms(comms, settled)
            self.comm.release(settled)

    def __enter__(self):
        self._in_with = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._in_with = False
        if exc_type is None:
            self.close()
            return
        if self._closed or self.nprocs == 1:
            self._close(True, 0.0)
            return
        # Leaving with an error (KeyboardInterrupt too): tell the group, then
        # find out, without blocking for ever, whether every rank is leaving.
        self._abandon()
        present, _, _ = self._close(True, exit_timeout())
        if not present and self._on_error == "abort":
            # Alone: the others are stuck or gone; end the job so none waits for ever.
            self._fail(exc)
        # Every rank came (or on_error="raise"): the exception propagates.

