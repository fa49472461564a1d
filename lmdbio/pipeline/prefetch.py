"""Prefetch: a background thread reads batches t+1..t+d while the caller computes on batch t.

A thread, not a dedicated I/O rank: the work of the per-rank readers is
``os.preadv`` (and numpy copies), which release the GIL, so the thread's
reads overlap the caller's compute in the same process with no extra rank,
no extra copy between processes and no MPI in the thread (see
``benchmarks/bench_prefetch.py`` for the measurement). Only variants whose
reads need no messages between ranks (:attr:`Distributor.collective_free`)
run in a thread unless MPI was initialised with ``MPI_THREAD_MULTIPLE``.

Memory: at most ``d`` batches wait in the queue, one is being read and the
caller holds two (a batch stays valid until the rank's second following
read), so the distributor keeps ``d + 1`` more slots than it would.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError, LmdbioError

__all__ = ["Prefetch", "check_prefetch"]


def check_prefetch(depth, collective_free: bool, variant: str) -> int:
    """Validate a prefetch depth for a variant; returns it as an int."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ConfigurationError(f"prefetch must be an integer >= 0 (batches read ahead; 0: "
                                 f"none), got {depth!r}")
    if depth and not collective_free:
        from mpi4py import MPI

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise ConfigurationError(
                f"variant {variant!r} exchanges MPI messages while it reads, and MPI was not "
                "initialised with MPI_THREAD_MULTIPLE, so its reads cannot run in a background "
                "thread; use a per-rank variant (lmdbio-direct, lmdb-get, lmdb) or prefetch=0")
    return depth


class Prefetch:
    """Reads ``read(t)`` for t in ``range(start, stop)`` in order, in a background thread, at
    most ``depth`` batches ahead of the caller; :meth:`next` hands them out in order."""

    def __init__(self, read: Callable[[int], object], start: int, stop: int, depth: int,
                 rank: int):
        self.rank = rank
        self.next_t = start          # the first batch not yet handed out
        self.read_to = start         # the first batch the thread has not read
        self.depth, self.stop = depth, stop
        self._limit = stop           # the thread reads no batch from here on
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(read, start, stop),
                                        name=f"lmdbio-prefetch-rank{rank}", daemon=True)
        self._thread.start()

    def _run(self, read, start: int, stop: int) -> None:
        for t in range(start, stop):
            if self._stop.is_set() or t >= self._limit:
                return
            item: tuple[int, Any, BaseException | None]
            try:
                item = (t, read(t), None)
            except BaseException as exc:   # handed to the caller's thread
                item = (t, None, exc)
            self.read_to = t + 1
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return

    def next(self):
        """The next batch; a failure of the background read raises here, naming the rank."""
        while True:
            if self._stop.is_set():
                raise LmdbioError(f"rank {self.rank}: reading ahead was stopped (closed, or an "
                                  "earlier background read failed)")
            try:
                t, batch, exc = self._q.get(timeout=0.05)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    raise LmdbioError(f"rank {self.rank}: no batch {self.next_t} to read ahead "
                                      "(past the end of the range)") from None
        self.next_t = t + 1
        if exc is not None:
            self.close()
            raise LmdbioError(f"rank {self.rank}: the background read of batch {t} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        return batch

    @property
    def bound(self) -> int:
        """The first batch this thread can not have read: ``depth`` queued and one in flight
        past those handed out. The same on every rank that took the same batches, however far
        each rank's thread got, so the ranks agree where reading goes on without a message."""
        return min(self.stop, self.next_t + self.depth + 1)

    def close(self, drain: bool = False) -> None:
        """Stop reading ahead. Idempotent.

        Without ``drain`` the thread stops after the read in flight (one chunk). With
        ``drain`` it first reads on to :attr:`bound`, and what it reads is dropped: every rank
        that took the same batches then has read the same chunks, however far its own thread
        had got, so the hand-offs between ranks stay in step. A background read that failed
        while draining raises LmdbioError here (after the thread has ended).
        """
        failure = None
        if drain and not self._stop.is_set():
            self._limit = self.bound
            while self._thread.is_alive() or not self._q.empty():
                try:
                    t, _, exc = self._q.get(timeout=0.05)
                except queue.Empty:
                    continue
                if exc is not None and failure is None:
                    failure = (t, exc)
        self._stop.set()
        while True:
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
        if failure is not None:
            t, exc = failure
            raise LmdbioError(f"rank {self.rank}: the background read of batch {t}, read ahead "
                              f"past where the epoch was left, failed: {type(exc).__name__}: "
                              f"{exc}") from exc
