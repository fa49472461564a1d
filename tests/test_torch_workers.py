"""lmdbio.torch's parts for DataLoader workers that need no torch: the rank's plan against
the Reader, a worker's reading path in a spawned process, and LMDB's reader table. (The
split of a rank's batches among workers: tests/test_epoch_property.py.)

A spawned process imports this module: nothing here imports mpi4py at import time.
"""

import multiprocessing
import os
import pickle
from dataclasses import replace

import numpy as np
import pytest

from lmdbio.errors import ConfigurationError
from lmdbio.torch import WorkerReader, make_plan

ORDER = dict(seed=4, shuffle_block=6, shuffle_window=3)
#: (shuffle, shuffle_block): every mode, and the default block (from the mean record size)
PLANS = [(False, 6), (True, 6), ("shard", 6), ("elastic", 6), (False, None), ("elastic", None)]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("workers") / "c", "cifar10", 203,
                        commit_every=50, seed=3)


def _reader_epoch(db, shuffle, epoch, block=6):
    from mpi4py import MPI

    import lmdbio

    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", shuffle=shuffle,
                       **dict(ORDER, shuffle_block=block)) as r:
        got = [(np.asarray(b.indices).copy(), [bytes(x) for x in b]) for b in r.epoch(epoch)]
        states = r.state_dict()
    return got, states


@pytest.mark.parametrize("shuffle,block", PLANS)
def test_plan_is_the_readers_epoch_and_state(db, shuffle, block):
    """The rank's plan names the records of each batch the Reader delivers, and its state after
    an epoch is the Reader's state_dict(), key for key."""
    from mpi4py import MPI

    plan = make_plan(MPI.COMM_SELF, db, 8, shuffle=shuffle, **dict(ORDER, shuffle_block=block))
    want, state = _reader_epoch(db, shuffle, 2, block)
    rows = plan.rows(2)
    assert rows.batches == len(want)
    assert all(np.array_equal(plan.share(rows, i), w[0]) for i, w in enumerate(want))
    assert plan.state(2, len(want)) == state
    assert plan.resume_point(state) == (2, len(want))


def _read_in_child(blob: bytes, epoch: int, out) -> None:
    """In a spawned process: a worker's reading path, from its pickled form only; then leave
    as a fork-started DataLoader worker does (multiprocessing's exit function, os._exit: no
    interpreter shutdown closes LMDB)."""
    import sys
    from multiprocessing import util

    reader = pickle.loads(blob)
    rows = reader.plan.rows(epoch)
    got = [reader.read(reader.plan.share(rows, i)) for i in range(rows.batches)]
    out.put((os.getpid(), "mpi4py.MPI" in sys.modules,
             [(b.indices.copy(), [bytes(x) for x in b]) for b in got]))
    util._exit_function()
    os._exit(0)


def test_spawned_worker_reads_the_readers_bytes_and_frees_its_reader_slot(db):
    """A WorkerReader pickles to plain values; in a spawned process, without MPI, it reads the
    Reader's records byte for byte; its LMDB reader slot is freed when that process exits."""
    from mpi4py import MPI

    from lmdbio.lmdbenv import acquire

    plan = make_plan(MPI.COMM_SELF, db, 8, shuffle="shard", **ORDER)
    want, _ = _reader_epoch(db, "shard", 1)
    reader = WorkerReader(plan, 2)
    assert reader.read(plan.share(plan.rows(1), 0)).indices.tolist() == want[0][0].tolist()
    blob = pickle.dumps(reader)   # an open reader's handles stay behind
    reader.close()
    # Held open here, LMDB's lock file keeps its reader table as the child leaves it (the next
    # sole opener would clear it).
    holder = acquire(db)
    try:
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=_read_in_child, args=(blob, 1, out))
        child.start()
        pid, mpi, got = out.get(timeout=120)
        child.join(60)
        assert child.exitcode == 0
        table = holder.env.readers()
    finally:
        holder.release()
    assert not mpi, "the worker's reading path imported mpi4py.MPI"
    assert len(got) == len(want)
    for (gi, gv), (wi, wv) in zip(got, want):
        assert np.array_equal(gi, wi) and gv == wv
    slots = [line.split()[0] for line in table.splitlines()[1:] if line.strip()]
    assert str(pid) not in slots, f"the worker's exit left its reader slot: {table}"


def test_reader_table_too_small_names_max_readers(tmp_path):
    """Workers refuse a reader table smaller than ranks x (workers + 1): one asked for, or one
    another process opened first; the message names max_readers and the numbers."""
    from mpi4py import MPI

    from lmdbio.datasets import make_dataset
    from lmdbio.lmdbenv import acquire

    small = make_dataset(tmp_path / "s", "cifar10", 20, commit_every=50, seed=5)
    (small / "lock.mdb").unlink()   # LMDB only grows a lock file's table: start with none
    plan = replace(make_plan(MPI.COMM_SELF, small, 4), local_ranks=2)
    with pytest.raises(ConfigurationError, match=r"max_readers=5 is too small .* 2 rank\(s\) on "
                       r"this node x \(2 DataLoader workers \+ the training process\) need 6"):
        WorkerReader(plan, 2, max_readers=5).open()
    first = acquire(small, max_readers=4)   # this process opens LMDB first: a table of 4
    try:
        with pytest.raises(ConfigurationError, match=r"holds 4 readers \(max_readers\), and 2 "
                           r"rank\(s\) .* need 6 .* pass max_readers=6 or more"):
            WorkerReader(plan, 2).read(np.arange(3))
    finally:
        first.release()
    fine = WorkerReader(plan, 2)   # nobody holds it now: the workers size the table
    assert len(fine.read(np.arange(3))) == 3
    fine.close()
