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


@pytest.mark.parametrize("sidecar", [False, True], ids=["index", "provenance"])
def test_worker_reads_through_the_pipeline_as_py_lmdb_stores(tmp_path, sidecar):
    """A worker reads through lmdbio-direct's stages: with a current provenance sidecar its
    locator takes the extents from it, without one from the record index; either way every
    batch of a shuffled epoch (the short last one included) holds py-lmdb's values of the
    plan's positions."""
    import lmdb
    from mpi4py import MPI

    from lmdbio.datasets import make_dataset

    db = make_dataset(tmp_path / "p", "cifar10", 203, commit_every=50, seed=7,
                      provenance=sidecar)
    with lmdb.open(str(db), readonly=True, lock=False) as env, env.begin() as txn:
        stored = [bytes(v) for _, v in txn.cursor()]
    plan = replace(make_plan(MPI.COMM_SELF, db, 8, shuffle=True, **ORDER), nprocs=2, rank=1)
    reader = WorkerReader(plan, 2)
    rows = plan.rows(3)
    try:
        for i in range(rows.batches):
            want = plan.share(rows, i)
            got = reader.read(want)
            assert got.indices.tolist() == want.tolist()
            assert [bytes(x) for x in got] == [stored[p] for p in want], f"batch {i}"
        assert len(plan.share(rows, rows.batches - 1)) < plan.per_rank   # a short one was read
        assert reader.describe()["direct_locate"] == ("provenance" if sidecar else "index")
    finally:
        reader.close()


def test_worker_names_the_fork_when_its_file_is_open_here(db):
    """A worker whose process already holds the file open (what a forked worker inherits)
    raises ConfigurationError naming the fork and the fix; its cause is the AlreadyOpenError,
    which names the file in a field."""
    import lmdb
    from mpi4py import MPI

    from lmdbio.errors import AlreadyOpenError
    from lmdbio.format import db_file

    plan = make_plan(MPI.COMM_SELF, db, 8)
    with lmdb.open(str(db), readonly=True, lock=False), \
            pytest.raises(ConfigurationError, match="multiprocessing_context='spawn'") as info:
        WorkerReader(plan, 1).read(np.arange(3))
    assert info.value.option == "multiprocessing_context"
    cause = info.value.__cause__
    assert isinstance(cause, AlreadyOpenError) and cause.path == str(db_file(db))
