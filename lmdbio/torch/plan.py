"""A rank's epochs as plain values (:class:`RankPlan`), agreed by every rank (:func:`make_plan`).

No torch and no MPI here: DataLoader workers unpickle a RankPlan and read by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigurationError
from ..pipeline.epoch import EpochPlan, EpochRows, epoch_rows, plan_of
from ..resume import resume_point, run_state
from ..shuffle import DEFAULT_PARTITIONS, num_batches
from ..snapshot import TRIES

__all__ = ["RankPlan", "make_plan", "check_dataset_state", "worker_batches"]


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
    digest: str | None = None   # the snapshot's content (lmdbio.snapshot.content_digest)
    mean_size: float = 1.0      # rank 0's mean record size (bytes): buffers are sized by it

    @property
    def batches(self) -> int:
        """Global batches per epoch (the last-batch policy's): the rank's share of each is one
        item, so this is also the rank's items per epoch."""
        return num_batches(self.records, self.batch_size, self.epochs.last_batch)

    @property
    def per_rank(self) -> int:
        """Records of each global batch this rank delivers (the last one may keep fewer)."""
        return self.batch_size // self.nprocs

    def worker_batches(self, worker: int, workers: int) -> int:
        """Items DataLoader worker ``worker`` of ``workers`` delivers of an epoch (the rank's
        when ``workers`` is 0)."""
        return len(worker_batches(self.batches, 0, worker, workers)) if workers else self.batches

    def rows(self, epoch: int) -> EpochRows:
        """Epoch ``epoch``'s global batches, as :meth:`lmdbio.Reader.epoch` reads them."""
        return epoch_rows(self.epochs, self.records, self.batch_size, self.nprocs, 1, epoch)

    def share(self, rows: EpochRows, i: int) -> np.ndarray:
        """The positions of this rank's records in batch ``i`` of ``rows``."""
        per = self.per_rank
        lo = self.rank * per
        return rows.rows[i, lo:lo + rows.kept(i, self.rank, per)]

    def readers(self, workers: int) -> int:
        """LMDB read transactions on this node: each rank's training process and workers."""
        return self.local_ranks * (workers + 1)

    def state(self, epoch: int, batches: int) -> dict:
        """:meth:`lmdbio.Reader.state_dict`'s dict after ``batches`` batches of ``epoch``."""
        return run_state(self.epochs, epoch, batches, self.batch_size, self.nprocs,
                         self.txnid, self.records, self.digest)

    def resume_point(self, state) -> tuple[int, int]:
        """``(epoch, batches delivered)`` of a Reader state, or the error saying why this plan
        cannot resume it (the checks of :meth:`lmdbio.Reader.load_state_dict`)."""
        return resume_point(state, self.state(0, 0), what="dataset",
                            opened=f"this dataset reads {self.path} at txnid {self.txnid} "
                                   f"with {self.records} records",
                            epoch_batches=self.batches)


def make_plan(comm, path, batch_size: int, *, shuffle=False, seed: int = 0,
              shuffle_block: int | None = None, shuffle_window: int = 4,
              last_batch: str = "short", shuffle_partitions: int = DEFAULT_PARTITIONS,
              order=None, ranks_per_node: int | None = None, tries: int = TRIES,
              **_reader_args) -> RankPlan:
    """This rank's :class:`RankPlan`, with the Reader's arguments. Collective over ``comm`` (an
    mpi4py communicator, a ``torch.distributed`` group or a :class:`lmdbio.comm.Comm`).

    Every rank reads its file's meta page (no LMDB environment is opened) and the ranks
    agree on one snapshot (:func:`lmdbio.snapshot.agree_snapshot`: txnid and record count,
    read again while a writer commits between their reads); rank 0's mean record size gives
    the default shuffle block, as in the Reader (:meth:`~lmdbio.pipeline.EpochPlan.with_block`),
    so the order is the one :meth:`lmdbio.Reader.epoch` delivers.
    """
    from ..comm import as_comm
    from ..format import db_file, read_meta
    from ..options import check_batch_size
    from ..snapshot import agree_snapshot, content_digest
    from ..topology import node_path

    c = as_comm(comm).dup()
    settled = False
    try:
        def settings():
            plan = plan_of(shuffle, seed, shuffle_block, shuffle_window, last_batch,
                           shuffle_partitions, order)
            return plan, check_batch_size(batch_size, c.size)

        order_plan, batch = c.collective(settings)
        f = c.collective(db_file, node_path(c, path, ranks_per_node))
        local = c.local_size()
        seen: list = []

        def look():
            seen[:] = [read_meta(f)]

        agree_snapshot(c, look, lambda: (seen[0].txnid, seen[0].entries), None, f, tries,
                       what="the snapshot of an LmdbDataset")
        m = seen[0]   # every rank's, the same version
        txnid, records = m.txnid, m.entries
        mean = c.bcast(max(1.0, m.file_size / max(1, m.entries)), root=0)
        digest = c.bcast(c.collective(lambda: content_digest(f, txnid) if c.rank == 0 else None),
                         root=0)
        plan = RankPlan(str(f), c.rank, c.size, batch, records, txnid,
                        order_plan.with_block(records, batch, mean), local, digest, mean)
        c.collective(lambda: plan.batches)   # a batch larger than the data set: every rank says so
        settled = True
        return plan
    finally:
        c.release(settled)
