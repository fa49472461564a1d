"""A DataLoader worker's reading: the per-rank ``lmdbio-direct`` pipeline on a one-process
communicator (no MPI, no messages).

A DataLoader worker delivers its rank's share of some of an epoch's batches. It reads
them through the :class:`~lmdbio.pipeline.Pipeline` stages a Reader rank of
``lmdbio-direct`` uses (``ProvOrIndex`` locates: the provenance sidecar where current,
else the record index; ``Preadv`` fetches; ``PrivateSlots`` holds the bytes), run on
:class:`~lmdbio.comm.LocalComm`, where every collective step is the call itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..batch import Batch
from ..comm import LocalComm
from ..errors import AlreadyOpenError, ConfigurationError, SnapshotError
from ..lmdbenv import LMDB_READERS
from ..pipeline.epoch import EpochRows
from .plan import RankPlan

__all__ = ["LocalComm", "WorkerReader", "LMDB_READERS"]

#: The stages a worker reads with: lmdbio-direct's, one batch per request (a worker reads
#: one of its batches when DataLoader asks for it).
WORKER_VARIANT = "lmdbio-direct"


class WorkerReader:
    """A DataLoader worker's reading path: no MPI, no messages.

    :meth:`open` (called by the first :meth:`read`) opens LMDB read-only in this process
    with a reader table for ``plan.readers(workers)`` transactions (or ``max_readers``),
    sets up the ``lmdbio-direct`` pipeline on :class:`~lmdbio.comm.LocalComm` (its locator holds a read
    transaction on the plan's snapshot, so a writer cannot recycle its pages, and builds
    its table of every record once); :meth:`read` reads records by position through it.
    It closes at the worker's exit.
    """

    def __init__(self, plan: RankPlan, workers: int, max_readers: int | None = None):
        self.plan, self.workers, self.max_readers = plan, int(workers), max_readers
        self._handle: Any = None
        self._pipe: Any = None     # the Pipeline, once open
        self._stream: Any = None   # its Stream: a read's schedule is an epoch of it
        self._rec: Any = None

    def open(self) -> None:
        from multiprocessing import util

        handle = self._acquire()
        try:
            self._pipe = self._pipeline()
        except BaseException:
            handle.release()
            raise
        self._handle = handle
        # Workers leave through multiprocessing's exit path, which runs these finalizers: the
        # read transaction's slot in LMDB's table is freed, never left to a dead process.
        util.Finalize(self, WorkerReader.close, args=(self,), exitpriority=10)

    def _acquire(self):
        """This process's LMDB environment of the plan's file, its reader table big enough."""
        from ..lmdbenv import acquire

        plan, need = self.plan, self.plan.readers(self.workers)
        ask = self.max_readers if self.max_readers is not None else max(LMDB_READERS, need)
        what = (f"{plan.local_ranks} rank(s) on this node x ({self.workers} DataLoader workers "
                f"+ the training process) need {need} LMDB readers")
        if ask < need:
            raise ConfigurationError(f"max_readers={ask} is too small for {plan.path}: {what}; "
                                     f"pass max_readers={need} or more, or leave it unset",
                                     option="max_readers")
        try:
            handle = acquire(plan.path, max_readers=ask)
        except AlreadyOpenError as exc:
            raise ConfigurationError(
                f"{plan.path} was open in the training process when this DataLoader worker "
                "was forked (a Reader, a Snapshot, or an LmdbDataset iterated with "
                "num_workers=0): close it before iterating with workers, or use "
                "multiprocessing_context='spawn'", option="multiprocessing_context") from exc
        table = handle.env.max_readers()
        if handle.locked and table < need:
            handle.release()
            raise ConfigurationError(
                f"LMDB's reader table of {plan.path} holds {table} readers (max_readers), "
                f"and {what}: another process opened it with a smaller table. Close the "
                f"other users of the file and pass max_readers={need} or more",
                option="max_readers")
        return handle

    def _pipeline(self):
        """The worker's pipeline, open on the plan's snapshot and set up (every record's
        extents known)."""
        from ..format import read_meta
        from ..metrics import PhaseRecorder
        from ..options import parse_variant
        from ..pipeline import Pipeline

        plan = self.plan
        pipe = Pipeline(parse_variant(WORKER_VARIANT, coalesce_bytes=1), LocalComm(), None,
                        plan.per_rank, epochs=plan.epochs)
        try:
            pipe.prepare(plan.path)
            pipe.open(plan.path, read_meta(plan.path))
            found = pipe.snapshot_id()
            if found != (plan.txnid, plan.records):
                raise SnapshotError(
                    f"{plan.path}: a writer committed since the LmdbDataset was made (txnid "
                    f"{plan.txnid}, {plan.records} records); this DataLoader worker sees txnid "
                    f"{found[0]} with {found[1]} records. Make the dataset again to read the "
                    "new version", expected=(plan.txnid, plan.records), found=found)
            self._rec = PhaseRecorder(plan.rank, enabled=False)
            with self._rec.phase("setup", -1) as row:
                # The rank's share is the whole batch of this one-process pipeline.
                pipe.setup(plan.records, plan.per_rank, plan.mean_size, row)
        except BaseException:
            pipe.release(0.0, False)
            raise
        self._stream = pipe.stream
        return pipe

    def read(self, positions: np.ndarray, copy: bool = True) -> Batch:
        """The records at ``positions`` (in that order) as one Batch, read through the
        pipeline. ``copy``: the Batch owns its bytes (False: it views the pipeline's buffer,
        valid until this reader's second following read)."""
        if self._pipe is None:
            self.open()
        positions = np.asarray(positions, dtype=np.int64)
        n, per = len(positions), self.plan.per_rank
        if n == 0:
            empty = np.zeros(0, np.int64)
            return Batch(np.zeros(0, np.uint8), empty, empty, empty)
        if n > per:
            raise ConfigurationError(f"{n} positions asked for; a worker of this plan reads at "
                                     f"most the rank's share of a batch, {per}")
        # One row of the rank's share; a short one is filled up with its last record (in the
        # same extent: no more bytes read) and the Batch keeps the first ``n``.
        row = np.concatenate([positions, np.repeat(positions[-1:], per - n)])[None]
        rows = EpochRows(row, 1, np.array([n], dtype=np.int64))
        batch = self._pipe.read(0, self._stream.epoch(row, 0), rows, self._rec)
        if not copy:
            return batch
        end = int((batch.offsets + batch.sizes).max())
        return Batch(batch.buffer[:end].copy(), batch.offsets, batch.sizes, batch.indices)

    def describe(self) -> dict:
        """The pipeline's choices once open (``direct_locate``: ``"provenance"`` where the
        sidecar is current and passed its check, else ``"index"``), as in
        :meth:`lmdbio.Reader.stats`; empty before the first read."""
        return self._pipe.describe() if self._pipe is not None else {}

    def close(self) -> None:
        pipe, handle = self._pipe, self._handle
        self._pipe = self._handle = self._stream = None
        try:
            if pipe is not None:
                pipe.release(0.0, False)
        finally:
            if handle is not None:
                handle.release()

    def __getstate__(self) -> dict:
        return {"plan": self.plan, "workers": self.workers, "max_readers": self.max_readers,
                "_handle": None, "_pipe": None, "_stream": None, "_rec": None}
