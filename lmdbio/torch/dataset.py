"""LmdbDataset: a PyTorch ``IterableDataset`` over a Reader's epochs (needs torch; see
:mod:`lmdbio.torch`)."""

from __future__ import annotations

import os

from ..errors import ConfigurationError
from ..shuffle import check_count
from .need import need_torch
from .plan import check_dataset_state, make_plan, worker_batches
from .position import Position
from .worker import WorkerReader

__all__ = ["dataset_class"]


def dataset_class(torch):
    """The LmdbDataset class, a subclass of ``torch.utils.data.IterableDataset``."""

    class LmdbDataset(_DatasetMethods, torch.utils.data.IterableDataset):
        __doc__ = _DatasetMethods.__doc__

        def __init__(self, path, batch_size: int, decode: bool = True, comm=None,
                     variant: str = "lmdbio-direct", max_readers: int | None = None,
                     **reader_args):
            super().__init__()
            self._torch = torch
            self._setup(path, batch_size, decode, comm, variant, max_readers, reader_args)

    return LmdbDataset


class _DatasetMethods:
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
        **reader_args: for :class:`lmdbio.Reader` (variant, shuffle or order, seed,
            shuffle_block, shuffle_window, shuffle_partitions, last_batch, prefetch,
            ...). Workers read in the order these give; variant and prefetch are the
            training process's (``num_workers=0``).

    ``len(ds)`` is the items one epoch's iteration of this copy yields: the rank's batches
    per epoch (:attr:`batches_per_epoch`, by the last-batch policy) in the training
    process, which is what a DataLoader with any number of workers yields in all, and a
    worker's share of them in a DataLoader worker.
    """

    def _setup(self, path, batch_size, decode, comm, variant, max_readers, reader_args):
        from ..comm import as_comm

        self.path, self.batch_size, self.decode = path, batch_size, decode
        self.comm = as_comm(comm)
        self.variant, self.reader_args, self.max_readers = variant, reader_args, max_readers
        self.epoch = 0
        self.reader = None
        self._resume = None   # a loaded Reader state, until an iteration applies it
        self._check_distributed()
        self.plan = make_plan(self.comm, path, batch_size, **reader_args)
        self.position = Position()
        # In a DataLoader worker: a state loaded there, the reader, the live iteration
        # (epoch, start, worker, workers, next batch) and this copy's iterations.
        self._local = None
        self._worker_reader = None
        self._at = None
        self._iters = (0, 0)

    def __getstate__(self) -> dict:
        """What a spawn-started worker gets: plain values and the shared position (no
        communicator, no Reader, no LMDB handle)."""
        state = self.__dict__.copy()
        state.update(comm=None, reader=None, _worker_reader=None, _torch=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._torch = need_torch()

    def _check_distributed(self) -> None:
        dist = self._torch.distributed
        if self.comm.mpi is not None and dist.is_available() and dist.is_initialized():
            got = (dist.get_rank(), dist.get_world_size())
            if got != (self.comm.rank, self.comm.size):
                raise ConfigurationError(
                    f"torch.distributed has rank {got[0]} of {got[1]} but MPI rank "
                    f"{self.comm.rank} of {self.comm.size}: launch with mpiexec (one MPI "
                    "rank per torch rank, in the same order)")

    def _worker_info(self):
        return self._torch.utils.data.get_worker_info()

    # ------------------------------------------------------------- sizes
    @property
    def batches_per_epoch(self) -> int:
        """The rank's batches (items) per epoch, by the last-batch policy: what a DataLoader
        over this dataset yields per epoch, with any number of workers."""
        return self.plan.batches

    def __len__(self) -> int:
        info = self._worker_info()
        if info is None:
            return self.plan.batches
        return self.plan.worker_batches(info.id, info.num_workers)

    # ------------------------------------------------------------- epoch and state
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self._worker_info() is None:
            self.position.write(epoch, self._pending())

    def _pending(self) -> dict | None:
        """The state loaded in this process, until an iteration (here or in the workers)
        has resumed it."""
        if self._resume is not None and (self.position.read() or {}).get("taken_by"):
            self._resume = None
        return self._resume

    def state_dict(self, batches: int | None = None) -> dict:
        """``{"epoch": set_epoch's epoch, "reader": Reader.state_dict()}`` (plain values,
        the same on every rank). In a DataLoader worker (StatefulDataLoader asks each
        one) a ``"worker"`` entry says which of the rank's batches it delivers next.

        ``batches``: the batches of the epoch delivered so far (counted from the epoch's
        start, a resumed epoch's included), for a plain DataLoader with workers, whose
        training process does not see them.
        """
        info = self._worker_info()
        if info is not None:
            return self._worker_state(info)
        if batches is not None:
            b = check_count("batches", batches, 0)
            if b > self.plan.batches:
                raise ConfigurationError(f"batches={b}, but an epoch has "
                                         f"{self.plan.batches} batches", option="batches")
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
        if self._worker_info() is not None:
            self._local = state
            return
        self._resume = reader
        self.position.write(self.epoch, reader, fresh=True)

    # ------------------------------------------------------------- iterating
    def __iter__(self):
        info = self._worker_info()
        if info is None:
            return self._epoch_here()
        return self._worker_epoch(info)

    def _item(self, batch):
        if not self.decode:
            return batch
        images, labels = batch.as_datum_array()
        return self._torch.from_numpy(images), self._torch.from_numpy(labels)

    def _epoch_here(self):
        """num_workers=0: the Reader, in this process."""
        if self.reader is None:
            from ..reader import Reader

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
            # Decoded items are copies; raw Batches travel to the loader after this
            # generator reads on, so they own their bytes.
            batch = reader.read(self.plan.share(rows, i), copy=not self.decode)
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
        if not self.position.take(me):   # another iteration took it meanwhile
            return epoch, 0, w
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
                "state (state_dict(batches=...)), which any number of workers resumes",
                option="num_workers")
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
