"""A PyTorch ``IterableDataset`` over a Reader's epochs (torch is imported only when used).

    ds = lmdbio.torch.LmdbDataset("cifar10", batch_size=256, shuffle=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4,
                                         persistent_workers=True)   # the dataset batches
    for epoch in range(epochs):
        ds.set_epoch(epoch)                                         # as DistributedSampler
        for images, labels in loader: ...

Each item is this rank's share of one global batch: ``(images, labels)``
tensors made with ``torch.from_numpy`` from the decoded batch (no copy), or
the raw :class:`~lmdbio.batch.Batch` with ``decode=False``. The ranks are
MPI's (launched with ``mpiexec``: when ``torch.distributed`` is initialized its
rank and world size must be MPI's, so DistributedDataParallel's ranks read
their own shares) or, under ``torchrun`` with no MPI launcher,
``torch.distributed``'s default group (a per-rank variant: the default
``lmdbio-direct``, ``lmdb``, ``lmdb-get`` or ``auto``; mpi4py is not
imported). Making the dataset is collective: the ranks agree on the
snapshot (its LMDB transaction id and record count) and the order
(:class:`RankPlan`, plain values).

``num_workers = 0``: a :class:`lmdbio.Reader` in the training process reads
each epoch (any variant; ``prefetch=d`` reads ahead in a thread).
``num_workers = W > 0``: worker ``w`` delivers the rank's batches
``w, w + W, w + 2W, ...`` of the epoch (:func:`worker_batches`), in the order
DataLoader takes its workers' items, so the loader yields the same records in
the same order as with ``W = 0``. A worker reads with no MPI and no messages
(:class:`WorkerReader`): it opens LMDB itself, read-only, when it reads its
first batch, holds its own read transaction on the plan's snapshot, walks the
record index once and reads each batch's records with ``preadv``. Nothing
unpicklable travels to the workers (``fork``, ``spawn`` or ``forkserver``). A
fork-started worker cannot open a file its training process holds open
(py-lmdb allows one environment per file per process): close a Reader or an
``LmdbDataset`` iterated with ``num_workers=0`` on the same file first, or
use ``multiprocessing_context="spawn"``. LMDB's reader table is sized for
``ranks on the node x (W + 1)`` transactions (at least 126, LMDB's default),
or ``max_readers``; a table too small for the workers raises
ConfigurationError naming ``max_readers`` and the numbers.

``set_epoch(e)`` reaches workers that were started before it
(``persistent_workers=True``): the training process writes its epoch and a
loaded state to a small file (:class:`Position`) that each worker reads when
an iteration starts.

``ds.state_dict()`` / ``ds.load_state_dict(state)`` are what torchdata's
``StatefulDataLoader`` calls on an iterable dataset: in the training process
with ``num_workers=0``, in each worker with ``W > 0`` (a worker's state says
which of the rank's batches it delivers next, and the loader keeps one per
worker). A job stopped mid-epoch and restarted with the same arguments gets
that epoch's remaining batches (:meth:`lmdbio.Reader.load_state_dict`), then
the next epochs. A plain ``DataLoader`` with workers does not show the
training process its workers' batches: there ``ds.state_dict(batches=k)``
gives the state after the epoch's first ``k`` batches.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import weakref
from dataclasses import dataclass, replace

import numpy as np

from .batch import Batch
from .errors import ConfigurationError, LmdbioError, SnapshotError
from .pipeline.epoch import EpochPlan, EpochRows, default_block, epoch_rows
from .resume import STATE_VERSION, resume_point, run_state
from .shuffle import DEFAULT_PARTITIONS, check_count, num_batches

__all__ = ["LmdbDataset", "check_dataset_state", "RankPlan", "make_plan", "WorkerReader",
           "Position", "worker_batches", "STATE_VERSION"]

#: LMDB's reader table when nothing asks for more.
LMDB_READERS = 126

_CLASS = None


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise ImportError("lmdbio.torch needs PyTorch: pip install torch "
                          "(CPU only: --index-url set to the PyTorch CPU wheel index from pytorch.org's install page)") from exc
    return torch


def check_dataset_state(state) -> tuple[int, dict | None]:
    """``(epoch, reader state)`` of an :meth:`LmdbDataset.state_dict` dict, or
    ConfigurationError saying what is wrong with it (no torch needed)."""
    if not isinstance(state, dict) or not {"epoch", "reader"} <= state.keys():
        raise ConfigurationError(f"an LmdbDataset state is a dict with 'epoch' and 'reader' "
                                 f"(LmdbDataset.state_dict()), got {state!r:.200}")
    epoch, reader = state["epoch"], state["reader"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigurationError(f"the state's epoch must be an int >= 0, got {epoch!r}")
    if reader is not None and not isinstance(reader, dict):
        raise ConfigurationError(f"the state's 'reader' must be None or a dict from "
                                 f"Reader.state_dict(), got a {type(reader).__name__}")
    return epoch, reader


def worker_batches(total: int, start: int, worker: int, workers: int) -> range:
    """The rank's batches ``start .. total - 1`` that DataLoader worker ``worker`` of
    ``workers`` delivers: ``start + worker``, then every ``workers``-th. DataLoader takes
    an iterable dataset's workers' items in turn, worker 0 first, so together they come in
    order."""
    return range(start + worker, total, workers)


@dataclass(frozen=True)
class RankPlan:
    """One rank's epochs as plain values: the snapshot every rank agreed on and the order
    (:class:`~lmdbio.pipeline.EpochPlan`, its block set). All a DataLoader worker needs to
    know which records each of the rank's batches holds; :func:`make_plan` makes it."""

    path: str            # the data.mdb this rank reads
    rank: int
    nprocs: int
    batch_size: int      # the global batch
    records: int         # the snapshot's record count
    txnid: int           # the snapshot's LMDB transaction id
    epochs: EpochPlan
    local_ranks: int = 1   # ranks on this rank's node (they share LMDB's reader table)

    @property
    def batches(self) -> int:
        """Global batches per epoch."""
        return num_batches(self.records, self.batch_size, self.epochs.last_batch)

    def rows(self, epoch: int) -> EpochRows:
        """Epoch ``epoch``'s global batches, as :meth:`lmdbio.Reader.epoch` reads them."""
        return epoch_rows(self.epochs, self.records, self.batch_size, self.nprocs, 1, epoch)

    def share(self, rows: EpochRows, i: int) -> np.ndarray:
        """The positions of this rank's records in batch ``i`` of ``rows``."""
        per = self.batch_size // self.nprocs
        lo = self.rank * per
        return rows.rows[i, lo:lo + rows.kept(i, self.rank, per)]

    def readers(self, workers: int) -> int:
        """LMDB read transactions on this node: each rank's training process and workers."""
        return self.local_ranks * (workers + 1)

    def state(self, epoch: int, batches: int) -> dict:
        """:meth:`lmdbio.Reader.state_dict`'s dict after ``batches`` batches of ``epoch``."""
        return run_state(self.epochs, epoch, batches, self.batch_size, self.nprocs,
                         self.txnid, self.records)

    def resume_point(self, state) -> tuple[int, int]:
        """``(epoch, batches delivered)`` of a Reader state, or the error saying why this
        plan cannot resume it (the checks of :meth:`lmdbio.Reader.load_state_dict`)."""
        return resume_point(state, self.state(0, 0), what="dataset",
                            opened=f"this dataset reads {self.path} at txnid {self.txnid} "
                                   f"with {self.records} records",
                            epoch_batches=self.batches)


def make_plan(comm, path, batch_size: int, *, shuffle: bool | str = False, seed: int = 0,
              shuffle_block: int | None = None, shuffle_window: int = 4,
              last_batch: str = "short", shuffle_partitions: int = DEFAULT_PARTITIONS,
              ranks_per_node: int | None = None, tries: int = 20, **_reader_args) -> RankPlan:
    """This rank's :class:`RankPlan`, with the Reader's arguments. Collective over ``comm`` (an
    mpi4py communicator, a ``torch.distributed`` group or a :class:`lmdbio.comm.Comm`).

    Every rank reads its file's meta page (no LMDB environment is opened); the ranks agree
    on one snapshot (txnid and record count, tried again while a writer commits between
    their reads), rank 0's mean record size gives the default shuffle block, as in the
    Reader, so the order is the one :meth:`lmdbio.Reader.epoch` delivers.
    """
    from .comm import as_comm
    from .format import db_file, read_meta
    from .options import check_batch_size

    c = as_comm(comm).dup()
    settled = False
    try:
        def settings():
            order = EpochPlan(shuffle, seed, shuffle_block, shuffle_window, last_batch,
                              shuffle_partitions)
            return order, check_batch_size(batch_size, c.size)

        order, batch = c.collective(settings)
        node = None
        if c.allreduce(1 if "{node}" in str(path) else 0, "max"):
            node = c.collective(c.node_number, ranks_per_node)
        f = c.collective(db_file, str(path).replace("{node}", str(node)))
        local = c.local_size()
        for _ in range(tries):
            m = c.collective(read_meta, f)
            views = c.allgather_within((m.txnid, m.entries), what="the snapshot of an LmdbDataset")
            if len(set(views)) == 1:
                break
        else:
            raise SnapshotError(f"{f}: the ranks could not read one snapshot in {tries} tries "
                                "(a writer commits too often); try again")
        if m.entries == 0:
            raise LmdbioError(f"{f} holds no records; nothing to read")
        mean = c.bcast(max(1.0, m.file_size / max(1, m.entries)), root=0)
        if order.block is None:
            order = replace(order, block=default_block(m.entries, batch, mean))
        plan = RankPlan(str(f), c.rank, c.size, batch, m.entries, m.txnid, order, local)
        c.collective(lambda: plan.batches)   # a batch larger than the data set: every rank says so
        settled = True
        return plan
    finally:
        c.release(settled)


class WorkerReader:
    """A DataLoader worker's reading path: no MPI, no messages.

    :meth:`open` (called by the first :meth:`read`) opens LMDB read-only in this process
    with a reader table for ``plan.readers(workers)`` transactions (or ``max_readers``),
    holds a read transaction on the plan's snapshot (a writer cannot recycle its pages),
    and walks its record index once; :meth:`read` reads records by position with one
    ``preadv`` per extent into one buffer. It closes at the worker's exit.
    """

    def __init__(self, plan: RankPlan, workers: int, max_readers: int | None = None):
        self.plan, self.workers, self.max_readers = plan, int(workers), max_readers
        self._handle = self._snap = self._index = None

    def open(self) -> None:
        from multiprocessing import util

        from .lmdbenv import acquire
        from .recordindex import Snapshot

        plan, need = self.plan, self.plan.readers(self.workers)
        ask = self.max_readers if self.max_readers is not None else max(LMDB_READERS, need)
        what = (f"{plan.local_ranks} rank(s) on this node x ({self.workers} DataLoader workers "
                f"+ the training process) need {need} LMDB readers")
        if ask < need:
            raise ConfigurationError(f"max_readers={ask} is too small for {plan.path}: {what}; "
                                     f"pass max_readers={need} or more, or leave it unset")
        try:
            handle = acquire(plan.path, max_readers=ask)
        except LmdbioError as exc:
            if "already open in this process" in str(exc.__cause__ or ""):
                raise ConfigurationError(
                    f"{plan.path} was open in the training process when this DataLoader worker "
                    "was forked (a Reader, a Snapshot, or an LmdbDataset iterated with "
                    "num_workers=0): close it before iterating with workers, or use "
                    "multiprocessing_context='spawn'") from exc
            raise
        try:
            table = handle.env.max_readers()
            if handle.locked and table < need:
                raise ConfigurationError(
                    f"LMDB's reader table of {plan.path} holds {table} readers (max_readers), "
                    f"and {what}: another process opened it with a smaller table. Close the "
                    f"other users of the file and pass max_readers={need} or more")
            snap = Snapshot(plan.path)   # the environment opened above
        except BaseException:
            handle.release()
            raise
        try:
            if (snap.txnid, snap.meta.entries) != (plan.txnid, plan.records):
                raise SnapshotError(
                    f"{plan.path}: a writer committed since the LmdbDataset was made (txnid "
                    f"{plan.txnid}, {plan.records} records); this DataLoader worker sees txnid "
                    f"{snap.txnid} with {snap.meta.entries} records. Make the dataset again to "
                    "read the new version")
            self._index = snap.build_index()
        except BaseException:
            snap.close()
            handle.release()
            raise
        self._handle, self._snap = handle, snap
        # Workers leave through multiprocessing's exit path, which runs these finalizers: the
        # read transaction's slot in LMDB's table is freed, never left to a dead process.
        util.Finalize(self, WorkerReader.close, args=(self,), exitpriority=10)

    def read(self, positions: np.ndarray) -> Batch:
        """The records at ``positions`` (in that order) as one Batch."""
        from .pipeline.fetch import read_extents
        from .plan import plan_extents

        if self._index is None:
            self.open()
        positions = np.asarray(positions, dtype=np.int64)
        sizes = self._index.sizes[positions].astype(np.int64)
        start, length, where = plan_extents(self._index.offsets[positions], sizes)
        buf = np.empty(int(length.sum()), dtype=np.uint8)
        read_extents(self._snap.fd, buf, start, length, self.plan.path)
        return Batch(buf, where, sizes, positions)

    def close(self) -> None:
        snap, handle = self._snap, self._handle
        self._snap = self._handle = self._index = None
        try:
            if snap is not None:
                snap.close()
        finally:
            if handle is not None:
                handle.release()

    def __getstate__(self) -> dict:
        return {"plan": self.plan, "workers": self.workers, "max_readers": self.max_readers,
                "_handle": None, "_snap": None, "_index": None}


def _shared_dir() -> str:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:   # a forked copy of the finalizer is not the owner
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class Position:
    """The training process's epoch and loaded state, for its DataLoader workers.

    A JSON file, written whole (rename) by the training process at ``set_epoch`` and
    ``load_state_dict``, and read by each worker when an iteration starts: persistent
    workers keep the copy of the dataset they were started with, so what changed since
    reaches them here. Its name is a plain string, so it pickles. Fields: ``epoch``,
    ``resume`` (a Reader state, or None) and ``taken_by`` (the iteration that resumed
    it: a loaded state is used by one iteration, as with ``num_workers=0``).
    """

    def __init__(self, path: str | None = None):
        self.path = path or os.path.join(
            _shared_dir(), f"lmdbio-position-{os.getpid()}-{secrets.token_hex(6)}.json")

    def read(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def write(self, epoch: int, resume: dict | None, taken_by=None) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"epoch": int(epoch), "resume": resume, "taken_by": taken_by}, f)
        os.replace(tmp, self.path)

    def remove_at_exit(self, owner) -> weakref.finalize:
        """Remove the file when ``owner`` goes (or at exit), from this process only."""
        return weakref.finalize(owner, _remove, self.path, os.getpid())


def _dataset_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    torch = _torch()

    class LmdbDataset(torch.utils.data.IterableDataset):
        """This rank's batches of each epoch (see :mod:`lmdbio.torch`).

        Args:
            path: LMDB directory or data.mdb.
            batch_size: the global batch (a multiple of the number of ranks).
            decode: yield ``(images, labels)`` tensors (True) or Batches.
            comm: an mpi4py communicator or a ``torch.distributed`` process group (default:
                MPI's COMM_WORLD, or under ``torchrun`` torch.distributed's default group; see
                :class:`lmdbio.Reader`). Making the dataset is collective.
            max_readers: LMDB's reader table that DataLoader workers open the file with
                (default: ranks on the node x (workers + 1), at least 126).
            **reader_args: for :class:`lmdbio.Reader` (variant, shuffle, seed,
                shuffle_block, shuffle_window, shuffle_partitions, last_batch, prefetch,
                ...). Workers read in the order these give; variant and prefetch are the
                training process's (``num_workers=0``).
        """

        def __init__(self, path, batch_size: int, decode: bool = True, comm=None,
                     variant: str = "lmdbio-direct", max_readers: int | None = None,
                     **reader_args):
            super().__init__()
            from .comm import as_comm

            self.path, self.batch_size, self.decode = path, batch_size, decode
            self.comm = as_comm(comm)
            self.variant, self.reader_args, self.max_readers = variant, reader_args, max_readers
            self.epoch = 0
            self.reader = None
            self._resume = None   # a loaded Reader state, until an iteration applies it
            self._check_distributed()
            self.plan = make_plan(self.comm, path, batch_size, **reader_args)
            self.position = Position()
            self._cleanup = self.position.remove_at_exit(self)
            # In a DataLoader worker: a state loaded there, the reader, the live iteration
            # (epoch, start, worker, workers, next batch) and this copy's iterations.
            self._local = None
            self._worker_reader = None
            self._at = None
            self._iters = (0, 0)

        def __getstate__(self) -> dict:
            """What a spawn-started worker gets: plain values (no communicator, no Reader,
            no LMDB handle)."""
            state = self.__dict__.copy()
            state.update(comm=None, reader=None, _cleanup=None, _worker_reader=None)
            return state

        def _check_distributed(self) -> None:
            dist = torch.distributed
            if self.comm.mpi is not None and dist.is_available() and dist.is_initialized():
                got = (dist.get_rank(), dist.get_world_size())
                if got != (self.comm.rank, self.comm.size):
                    raise ConfigurationError(
                        f"torch.distributed has rank {got[0]} of {got[1]} but MPI rank "
                        f"{self.comm.rank} of {self.comm.size}: launch with mpiexec (one MPI "
                        "rank per torch rank, in the same order)")

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch
            if torch.utils.data.get_worker_info() is None:
                self.position.write(epoch, self._pending())

        def _pending(self) -> dict | None:
            """The state loaded in this process, until an iteration (here or in the workers)
            has resumed it."""
            if self._resume is not None and (self.position.read() or {}).get("taken_by"):
                self._resume = None
            return self._resume

        # ------------------------------------------------------------- state
        def state_dict(self, batches: int | None = None) -> dict:
            """``{"epoch": set_epoch's epoch, "reader": Reader.state_dict()}`` (plain values,
            the same on every rank). In a DataLoader worker (StatefulDataLoader asks each
            one) a ``"worker"`` entry says which of the rank's batches it delivers next.

            ``batches``: the batches of the epoch delivered so far (counted from the epoch's
            start, a resumed epoch's included), for a plain DataLoader with workers, whose
            training process does not see them.
            """
            info = torch.utils.data.get_worker_info()
            if info is not None:
                return self._worker_state(info)
            if batches is not None:
                b = check_count("batches", batches, 0)
                if b > self.plan.batches:
                    raise ConfigurationError(f"batches={b}, but an epoch has "
                                             f"{self.plan.batches} batches")
                return {"epoch": int(self.epoch), "reader": self.plan.state(self.epoch, b)}
            reader = self._pending()
            if reader is None and self.reader is not None:
                reader = self.reader.state_dict()
            if reader is None:
                reader = self.plan.state(self.epoch, 0)
            return {"epoch": int(self.epoch), "reader": reader}

        def load_state_dict(self, state: dict) -> None:
            """Resume from :meth:`state_dict`'s dict: the next iteration yields the batches of
            its epoch not delivered yet (loaded in the training process, every rank's, as
            StatefulDataLoader makes it; or in a worker, from that worker's own state). The
            state is checked when that iteration starts."""
            self.epoch, reader = check_dataset_state(state)
            if torch.utils.data.get_worker_info() is not None:
                self._local = state
                return
            self._resume = reader
            self.position.write(self.epoch, reader)

        # ------------------------------------------------------------- iterating
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            if info is None:
                return self._epoch_here()
            return self._worker_epoch(info)

        def _item(self, batch):
            if not self.decode:
                return batch
            images, labels = batch.as_datum_array()
            return torch.from_numpy(images), torch.from_numpy(labels)

        def _epoch_here(self):
            """num_workers=0: the Reader, in this process."""
            if self.reader is None:
                from .reader import Reader

                self._check_distributed()
                self.reader = Reader(self.path, self.batch_size, self.comm, variant=self.variant,
                                     **self.reader_args)
            resume, self._resume = self._resume, None
            if resume is not None:
                self.reader.load_state_dict(resume)
                self.position.write(self.epoch, None)
            for batch in self.reader.epoch(self.epoch):
                yield self._item(batch)

        def _worker_epoch(self, info):
            """One worker's share of an epoch: its start is worked out now (when DataLoader
            makes the worker's iterator), the records are read as they are asked for."""
            w, workers = info.id, info.num_workers
            epoch, start, nxt = self._worker_start(info)
            rows = self.plan.rows(epoch)
            self._at = [epoch, start, w, workers, nxt]
            if self._worker_reader is None:
                self._worker_reader = WorkerReader(self.plan, workers, self.max_readers)
            return self._worker_items(rows, worker_batches(rows.batches, nxt - w, w, workers))

        def _worker_items(self, rows, todo):
            reader = self._worker_reader
            for i in todo:
                batch = reader.read(self.plan.share(rows, i))
                self._at[4] = i + self._at[3]
                yield self._item(batch)

        def _worker_start(self, info) -> tuple[int, int, int]:
            """``(epoch, the rank's first batch this iteration, this worker's first)``."""
            w, workers = info.id, info.num_workers
            pid = os.getpid()
            count = self._iters[1] + 1 if self._iters[0] == pid else 1
            self._iters = (pid, count)
            local, self._local = self._local, None
            if local is not None:   # this worker's own state (StatefulDataLoader)
                return self._local_start(local, w, workers)
            pos = self.position.read() or {"epoch": self.epoch, "resume": None, "taken_by": None}
            epoch, resume = pos["epoch"], pos["resume"]
            me = [int(info.seed) - w, count]   # this iteration: the loader's seed, the count
            if resume is None or pos["taken_by"] not in (None, me):
                return epoch, 0, w
            saved, done = self.plan.resume_point(resume)
            if saved != epoch and 0 < done < self.plan.batches:
                raise ConfigurationError(
                    f"the state loaded (load_state_dict) stopped epoch {saved} after {done} of "
                    f"its {self.plan.batches} batches, and epoch {epoch} was asked for: iterate "
                    f"epoch {saved} first (set_epoch({saved})) to deliver the rest of it, or "
                    "load the state of the epoch you mean to read")
            if pos["taken_by"] is None:
                self.position.write(epoch, resume, me)
            return (epoch, done, done + w) if saved == epoch else (epoch, 0, w)

        def _local_start(self, state, w: int, workers: int) -> tuple[int, int, int]:
            epoch, reader = check_dataset_state(state)
            if reader is None:
                return epoch, 0, w
            saved, done = self.plan.resume_point(reader)
            mine = state.get("worker")
            if mine is None:
                return saved, done, done + w
            if (mine.get("id"), mine.get("workers")) != (w, workers):
                raise ConfigurationError(
                    f"the state was saved by DataLoader worker {mine.get('id')} of "
                    f"{mine.get('workers')}, and is loaded into worker {w} of {workers}: resume "
                    f"with num_workers={mine.get('workers')}, or from the training process's "
                    "state (state_dict(batches=...)), which any number of workers resumes")
            return saved, done, check_count("the state's next batch", mine.get("next"), done)

        def _worker_state(self, info) -> dict:
            w, workers = info.id, info.num_workers
            at = self._at
            if at is None or at[2:4] != [w, workers]:
                # Not iterating yet: a state loaded here, else the epoch's start.
                if self._local is not None:
                    return self._local
                at = [(self.position.read() or {}).get("epoch", self.epoch), 0, w, workers, w]
            epoch, start, _, _, nxt = at
            done = max(start, nxt - workers + 1)   # the rank's batches up to this worker's last
            return {"epoch": int(epoch),
                    "reader": self.plan.state(epoch, min(done, self.plan.batches)),
                    "worker": {"id": w, "workers": workers, "next": int(nxt)}}

        def close(self) -> None:
            """Close the Reader (collective over its ranks), or a worker's LMDB handles."""
            worker, self._worker_reader = self._worker_reader, None
            if worker is not None:
                worker.close()
            reader, self.reader = self.reader, None
            if reader is not None:
                reader.close()
            if self._cleanup is not None:
                self._cleanup()

    LmdbDataset.__module__, LmdbDataset.__qualname__ = __name__, "LmdbDataset"
    _CLASS = LmdbDataset
    return _CLASS


def __getattr__(name):
    if name == "LmdbDataset":
        return _dataset_class()
    raise AttributeError(f"module 'lmdbio.torch' has no attribute {name!r}")
