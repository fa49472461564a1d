"""The one timed loop of the lab: W warm-up batches, the page cache prepared, N timed batches.

:func:`time_batches` times any :class:`Source`: a :class:`lmdbio.Reader` of
any variant (through :class:`ReaderSource`, also for one epoch's batches),
the raw limit (:class:`~lmdbio.lab.bench.limit.RawReader`) and DALI's reader
(:class:`~lmdbio.lab.bench.dali.DaliCaffe`). The bench's points, the
notebooks' read timelines and the experiments beyond the papers all measure
with it, so a batch, a warm-up and a warm or cold cache mean the same thing
in every table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from collections.abc import Callable

from lmdbio import metrics
from lmdbio.waiting import polite_barrier

from .cache import PageCache

__all__ = ["Source", "ReaderSource", "Timing", "time_batches", "sleep_step"]


@runtime_checkable
class Source(Protocol):
    """What the timed loop needs from anything that yields batches.

    ``read_batch()`` reads this rank's next batch and returns ``(records,
    bytes)``, or None when the source has no more. ``coalesce`` is the
    number of batches one read fetches (the timed window starts on a
    multiple of it). ``is_reader`` says whether this rank reads the file
    itself. ``stats()`` gives the source's own rows: ``phase="setup"`` rows,
    and per-batch rows numbered from 0 (``batch``, ``phase``, ``wall_s``, ...).
    """

    coalesce: int
    is_reader: bool

    def read_batch(self) -> tuple[int, int] | None: ...

    def stats(self) -> list[dict]: ...


class ReaderSource:
    """A :class:`lmdbio.Reader` as a :class:`Source`; the Reader stays the caller's to close.

    Args:
        reader: an open Reader (any variant).
        epoch: read the batches of this epoch (:meth:`lmdbio.Reader.epoch`,
            started at the first read; None when it ends) instead of
            ``read_batch()``.
        decode: decode each batch (:meth:`lmdbio.batch.Batch.as_datum_array`);
            the bytes are then the images'.
    """

    def __init__(self, reader, epoch: int | None = None, decode: bool = False):
        self.reader, self.epoch, self.decode = reader, epoch, decode
        self._it = None

    @property
    def coalesce(self) -> int:
        return int(self.reader.coalesce or 1)

    @property
    def is_reader(self) -> bool:
        return bool(self.reader.is_reader)

    @property
    def variant(self) -> str:
        return str(self.reader.variant)

    @property
    def auto_reason(self) -> str:
        return str(self.reader.auto_reason or "")

    def read_batch(self) -> tuple[int, int] | None:
        if self.epoch is None:
            b = self.reader.read_batch()
        else:
            if self._it is None:
                self._it = self.reader.epoch(self.epoch)
            b = next(self._it, None)
            if b is None:
                return None
        if self.decode:
            images, labels = b.as_datum_array()
            return len(labels), int(images.nbytes)
        return len(b), int(b.nbytes)

    def stats(self) -> list[dict]:
        return self.reader.stats()

    def close(self) -> None:
        """End the epoch's iterator (collective, like leaving the epoch)."""
        if self._it is not None:
            it, self._it = self._it, None
            it.close()

    def __enter__(self) -> ReaderSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sleep_step(seconds: float) -> Callable[[int], tuple[float, float]]:
    """A ``train`` step for :func:`time_batches` that sleeps ``seconds`` per batch (no comm)."""
    def step(_records: int) -> tuple[float, float]:
        t = time.monotonic()
        time.sleep(seconds)
        return time.monotonic() - t, 0.0
    return step


@dataclass
class Timing:
    """One rank's timed loop (:func:`time_batches`).

    ``first`` batches were read before the timed window (the warm-up,
    rounded up to whole chunks of ``coalesce`` batches, the largest of any
    rank). ``total`` is :func:`lmdbio.metrics.totals_row` over the timed
    batches (from just after the opening barrier to the end of the last
    batch), its ``bytes`` and ``rank_records`` this rank's records.
    ``start_resident``: the timed records' and the file's resident
    fractions as the timed batches start (worst over nodes; NaN without a
    cache). ``counters``: rank 0's storage counters before and after the
    timed batches ({} elsewhere and without a storage).
    """

    first: int
    coalesce: int
    warmup_s: float
    first_read_s: float
    total: dict
    barrier_s: float
    start_resident: tuple[float, float]
    counters: tuple[dict, dict]
    _log: list = field(repr=False, default_factory=list)

    @property
    def batches(self) -> list[dict]:
        """One row per timed batch: ``batch`` (counted from the source's first), ``t_start``,
        ``t_end``, ``read_s`` (in ``read_batch()``), ``records``, ``bytes``, ``compute_s``,
        ``comm_s`` (the ``train`` step's)."""
        return [{"batch": self.first + i, "t_start": a, "t_end": b, "read_s": b - a,
                 "records": n, "bytes": nb, "compute_s": c, "comm_s": m}
                for i, (a, b, n, nb, c, m) in enumerate(self._log)]

    @property
    def count(self) -> int:
        """Timed batches read (fewer than asked where the source ended)."""
        return len(self._log)

    @property
    def wall(self) -> float:
        return self.total["wall_s"]

    @property
    def records(self) -> int:
        return self.total["rank_records"]

    @property
    def nbytes(self) -> int:
        return self.total["bytes"]

    @property
    def read_s(self) -> float:
        """Seconds in ``read_batch()`` over the timed batches."""
        return sum(b - a for a, b, *_ in self._log)

    @property
    def compute_s(self) -> float:
        return sum(row[4] for row in self._log)

    @property
    def comm_s(self) -> float:
        return sum(row[5] for row in self._log)

    def training_window(self, exclude: int = 1) -> dict:
        """The training-loop metrics' window, DLIO style: the timed steps after the first few.

        A step is one batch: its read, then its ``train`` step. The window
        runs from the start of step ``exclude`` (the timed loop's start when
        ``exclude`` is 0) to the end of the last step, so the excluded steps'
        reads and compute are outside it. From the recorded timings: ``metric_wall_s``,
        ``metric_compute_s``, ``metric_records``, ``metric_bytes`` of the steps in it
        (NaN wall and zeros where no step is left), and ``metric_exclude_steps``.
        """
        if exclude < 0:
            raise ValueError(f"exclude must be >= 0 steps, got {exclude}")
        kept = self._log[exclude:]
        start = self.total["t_start"] if exclude == 0 else (kept[0][0] if kept else math.nan)
        return {"metric_exclude_steps": exclude,
                "metric_wall_s": self.total["t_end"] - start if kept else math.nan,
                "metric_compute_s": sum(row[4] for row in kept),
                "metric_records": sum(row[2] for row in kept),
                "metric_bytes": sum(row[3] for row in kept)}

    def window(self, rows: list[dict]) -> list[dict]:
        """The source's per-batch rows (``stats()``) of the timed batches; no setup rows."""
        end = self.first + self.count
        return [r for r in rows if r.get("phase") != "setup"
                and self.first <= int(r.get("batch", -1)) < end]


def time_batches(comm, source: Source, iters: int, warmup: int = 0, *,
                 cache: PageCache | None = None, storage=None,
                 train: Callable[[int], tuple[float, float]] | None = None) -> Timing:
    """Time ``iters`` batches of ``source`` after ``warmup`` untimed ones. Collective.

    The warm-up is rounded up to whole chunks (the largest ``coalesce`` of
    any rank), so no timed batch comes from a chunk read before. Then
    ``cache`` (a :class:`~lmdbio.lab.bench.cache.PageCache`) makes the timed
    batches' records warm or cold (:meth:`~lmdbio.lab.bench.cache.PageCache.before_timing`),
    the ranks leave a barrier together and each reads its batches, calling
    ``train(records) -> (compute_s, comm_s)`` after each (the training
    emulation's step, :meth:`lmdbio.lab.emulation.TrainingEmulator.step`).
    The loop ends at the last batch (or where the source ends); a closing
    barrier follows, outside the timed wall. With ``storage``, rank 0 takes
    its counters (:meth:`~lmdbio.lab.bench.settings.Storage.counters`) just
    inside the barriers.
    """
    from mpi4py import MPI

    k = comm.allreduce(int(source.coalesce or 1), op=MPI.MAX)
    first = -(-warmup // k) * k if warmup else 0
    first_read_s = math.nan
    t_w = time.monotonic()
    for i in range(first):
        a = time.monotonic()
        source.read_batch()
        if i == 0:
            first_read_s = time.monotonic() - a
    warmup_s = time.monotonic() - t_w
    start = cache.before_timing(first, iters) if cache is not None else (math.nan, math.nan)

    counters0 = counters1 = {}
    log = []
    polite_barrier(comm)
    if storage is not None and comm.rank == 0:
        counters0 = storage.counters()
    since = metrics.totals_snapshot()
    records = nbytes = 0
    for _ in range(iters):
        a = time.monotonic()
        got = source.read_batch()
        b = time.monotonic()
        if got is None:
            break
        n, nb = got
        records += n
        nbytes += nb
        c, m = train(n) if train is not None else (0.0, 0.0)
        log.append((a, b, n, nb, c, m))
    total = metrics.totals_row(since, comm.rank)
    polite_barrier(comm)
    barrier_s = time.monotonic() - total["t_end"]
    if storage is not None and comm.rank == 0:
        counters1 = storage.counters()
    total.update(bytes=nbytes, rank_records=records)
    if first == 0 and log:   # no warm-up: the first batch is timed
        first_read_s = log[0][1] - log[0][0]
    return Timing(first, k, warmup_s, first_read_s, total, barrier_s, start,
                  (counters0, counters1), log)
