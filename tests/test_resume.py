"""Exact mid-epoch resume (``Reader.state_dict`` / ``load_state_dict``) and the ``"elastic"``
shuffle mode, whose global order does not depend on the rank count. Resumes on 4 ranks and
on fewer: tests/mpi_ranks/test_resume_orders.py."""

import json
import shutil
from collections import Counter

import lmdb
import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio import shuffle as sh
from lmdbio.errors import ConfigurationError, SnapshotError
from lmdbio.pipeline import EpochPlan, epoch_rows

N, B = 203, 12   # 16 full batches and a short one of 11; 12 divides among 1, 2, 3 and 4 ranks
MODES = [False, "window", "shard", "elastic"]
# 256 KiB requests: 4 batches per chunk at one rank, so a stop falls inside a chunk.
SETTINGS = dict(seed=3, shuffle_block=7, shuffle_window=3, coalesce_bytes=1 << 18,
                build_provenance=True)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("resume") / "c", "cifar10", N,
                        commit_every=50, seed=1)


def _global(er, nprocs: int) -> list[list[int]]:
    """The global batches of :func:`epoch_rows`' rows: each rank's kept share, in rank order."""
    share = B // nprocs
    return [sum((er.rows[i, r * share:r * share + er.kept(i, r, share)].tolist()
                 for r in range(nprocs)), []) for i in range(er.batches)]


# ---------------------------------------------------------------- the elastic order
@pytest.mark.parametrize("policy", sh.POLICIES)
def test_elastic_is_the_shard_order_over_the_partitions(policy):
    for c in (1, 3, 4, 12):
        for epoch in (0, 1):
            assert np.array_equal(sh.elastic_order(N, 7, 3, 5, epoch, B, c, policy),
                                  sh.shard_order(N, 7, 3, 5, epoch, B, c, policy))
    # More partitions than positions in a batch: each position its own, the batch size's order.
    assert np.array_equal(sh.elastic_order(N, 7, 3, 5, 1, B, 64, policy),
                          sh.elastic_order(N, 7, 3, 5, 1, B, B, policy))


@pytest.mark.parametrize("policy", sh.POLICIES)
@pytest.mark.parametrize("partitions", [5, 8, 64])
def test_elastic_order_every_record_once_in_the_window_orders_windows(policy, partitions):
    order = sh.elastic_order(N, 7, 3, 5, 1, B, partitions, policy)
    assert sorted(order.tolist()) == list(range(N))
    win = sh.record_windows(N, 7, 3, 5, 1)
    assert np.array_equal(win[order], win[sh.epoch_order(N, 7, 3, 5, 1)])
    owner = sh.partition_owners(N, B, partitions, policy)
    # Each full batch, and the short one, is cut into runs whose sizes differ by one at most.
    last = N if policy == "short" else N - N % B
    for first in range(0, last, B):
        runs = owner[first:first + B]
        sizes = np.bincount(runs, minlength=partitions)[:min(partitions, len(runs))]
        assert sizes.max() - sizes.min() <= 1 and (np.diff(runs) >= 0).all()
    if policy != "short":   # pad: the last batch's records as a full batch's; drop: nobody's
        assert (owner[last:] == (partitions if policy == "drop" else owner[:N % B])).all()


def test_elastic_rows_give_one_global_order_on_any_rank_count():
    for policy in sh.POLICIES:
        plan = EpochPlan(shuffle="elastic", seed=5, block=7, window=3, last_batch=policy,
                         partitions=8)
        want = sh.global_batches(sh.elastic_order(N, 7, 3, 5, 2, B, 8, policy), B, policy)
        for nprocs, k in [(1, 1), (2, 3), (3, 2), (4, 4), (6, 1), (12, 2)]:
            got = _global(epoch_rows(plan, N, B, nprocs, k, 2), nprocs)
            assert got == [w.tolist() for w in want], (policy, nprocs)
    # The shard order is the check's counterpart: it does change with the rank count.
    shard = EpochPlan(shuffle="shard", seed=5, block=7, window=3)
    assert _global(epoch_rows(shard, N, B, 2, 1, 2), 2) != \
        _global(epoch_rows(shard, N, B, 4, 1, 2), 4)


def _one_run_per_rank(nprocs: int, partitions: int) -> bool:
    """Whether rank r's records of each window of the elastic order are one run of the window's
    records in file order, rank after rank (what the node reader of consecutive ranks reads).
    The window that holds the short last batch is left out: the ranks split that batch by the
    rank count, the partitions without it."""
    order = sh.elastic_order(N, 7, 3, 5, 1, B, partitions)
    owner = sh.position_ranks(N, B, nprocs)
    win = sh.record_windows(N, 7, 3, 5, 1)[order]
    for w in np.setdiff1d(win, win[N - N % B:]):
        pos = np.flatnonzero(win == w)
        mine = [np.sort(order[pos[owner[pos] == r]]) for r in range(nprocs)]
        if not np.array_equal(np.concatenate(mine), np.sort(order[pos])):
            return False
    return True


@pytest.mark.parametrize("nprocs,partitions", [(2, 4), (4, 4), (3, 6), (4, 12), (3, 64),
                                               (4, 64)])
def test_elastic_ranks_records_of_a_window_are_one_run(nprocs, partitions):
    """Where each rank's positions are whole partitions (C at least B, or C dividing B and P
    dividing C), every window gives each rank one run."""
    assert _one_run_per_rank(nprocs, partitions)


@pytest.mark.parametrize("nprocs,partitions", [(2, 1), (4, 2), (3, 4), (4, 8)])
def test_elastic_ranks_that_share_a_partition_do_not_get_runs(nprocs, partitions):
    """Fewer partitions than ranks, or partitions cut across rank shares (8 partitions of 2
    or 1 of a 12-record batch, 3 records per rank): the check above fails."""
    assert not _one_run_per_rank(nprocs, partitions)


# ---------------------------------------------------------------- resume in one process
def _reader(db, **kw):
    return lmdbio.Reader(db, kw.pop("batch_size", B), MPI.COMM_SELF,
                         variant=kw.pop("variant", "lmdbio-direct"), **{**SETTINGS, **kw})


def _indices(batches) -> list[list[int]]:
    return [np.asarray(b.indices).tolist() for b in batches]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant,prefetch", [("lmdbio-direct", 2),
                                              ("lmdbio-lmm-dio-prov-coal", 0)])
def test_resume_after_any_batch_continues_the_uninterrupted_run(db, mode, variant, prefetch):
    """States saved after batch j of epoch 1 (0: between epochs 0 and 1; the first, one
    inside a chunk, the last but one, the last) resume on a fresh Reader with exactly the
    batches the run had not delivered, then epoch 2 as the run read it."""
    kw = dict(variant=variant, prefetch=prefetch, shuffle=mode)
    states = {}
    with _reader(db, **kw) as r:
        ref = {0: _indices(r.epoch(0))}
        states[0] = json.loads(json.dumps(r.state_dict()))
        ref[1] = []
        for b in r.epoch(1):
            ref[1].append(np.asarray(b.indices).tolist())
            states[len(ref[1])] = json.loads(json.dumps(r.state_dict()))
        ref[2] = _indices(r.epoch(2))
        k = r.coalesce
    nb = len(ref[1])
    assert nb == 17 and k == 4
    assert Counter(i for b in ref[1] for i in b) == Counter(range(N))
    for j in (0, 1, 5, nb - 1, nb):
        with _reader(db, **kw) as r:
            r.load_state_dict(states[j])
            if j == 0:
                assert _indices(r) == []   # the state's epoch 0 was read whole
                rest = _indices(r.epoch(1))
            else:
                rest = _indices(r)         # the state's epoch is what ``for b in r`` reads
            again = _indices(r.epoch(2))
        assert ref[1][:j] + rest == ref[1], (j, len(rest))
        assert again == ref[2], j


def test_state_is_plain_json_and_names_the_order(db):
    with _reader(db, shuffle="elastic", shuffle_partitions=8) as r:
        fresh = r.state_dict()
        it = r.epoch(1)
        next(it)
        next(it)
        live = r.state_dict()
        it.close()
        assert r.state_dict() == live   # after the iterator closed: where it was left
        txnid = r.txnid
    assert json.loads(json.dumps(live)) == live
    assert (fresh["epoch"], fresh["batches"], live["epoch"], live["batches"]) == (0, 0, 1, 2)
    assert {k: live[k] for k in ("batch_size", "shuffle", "seed", "block", "window",
                                 "partitions", "last_batch", "nprocs")} == \
        dict(batch_size=B, shuffle="elastic", seed=3, block=7, window=3, partitions=8,
             last_batch="short", nprocs=1)
    assert live["dataset"] == {"txnid": txnid, "records": N, "digest": live["dataset"]["digest"]}
    assert len(live["dataset"]["digest"]) == 16


def test_a_twin_files_state_is_refused(db, tmp_path):
    """F24: a file of the same record count and txnid with other content (the data set made
    with another seed) is another data set; a state saved without a digest is checked on
    txnid and record count only, as it was saved."""
    from lmdbio.datasets import make_dataset

    twin = make_dataset(tmp_path / "twin", "cifar10", N, commit_every=50, seed=2)
    with _reader(db, shuffle="window") as r:
        it = r.epoch(1)
        next(it)
        state = r.state_dict()
        it.close()
    with _reader(twin, shuffle="window") as r:
        assert (r.txnid, r.n) == (state["dataset"]["txnid"], state["dataset"]["records"])
        with pytest.raises(SnapshotError, match="content digest") as raised:
            r.load_state_dict(state)
        assert raised.value.found == state["dataset"]
        assert raised.value.expected == r.state_dict()["dataset"] != state["dataset"]
    old = dict(state, dataset={k: v for k, v in state["dataset"].items() if k != "digest"})
    with _reader(twin, shuffle="window") as r:
        r.load_state_dict(old)
        assert len(_indices(r.epoch(1))) == sh.num_batches(N, B) - 1


def _refused(db, state, error, match, **kw):
    with _reader(db, **kw) as r:
        with pytest.raises(error, match=match):
            r.load_state_dict(state)
        # Refused: nothing changed; the Reader reads its epochs from the start.
        whole = sh.num_batches(N, r.batch_size, kw.get("last_batch", "short"))
        assert len(_indices(r.epoch(1))) == whole


def test_mismatched_states_are_refused(db, tmp_path):
    kw = dict(shuffle="elastic", shuffle_partitions=8)
    with _reader(db, **kw) as r:
        it = r.epoch(1)
        for _ in range(3):
            next(it)
        state = r.state_dict()
        it.close()
    for change, match in [
            (dict(batch_size=6), "batch_size 12 in the state, 6 here"),
            (dict(seed=4), "seed 3 in the state, 4 here"),
            (dict(shuffle="window"), "shuffle 'elastic' in the state, 'window' here"),
            (dict(shuffle_block=8), "shuffle_block 7 in the state, 8 here"),
            (dict(shuffle_window=2), "shuffle_window 3 in the state, 2 here"),
            (dict(shuffle_partitions=4), "shuffle_partitions 8 in the state, 4 here"),
            (dict(last_batch="pad"), "last_batch 'short' in the state, 'pad' here")]:
        _refused(db, state, ConfigurationError, match, **{**kw, **change})
    # Another version of the data set: a copy with one record rewritten in a new transaction.
    other = tmp_path / "other"
    shutil.copytree(db, other)
    env = lmdb.open(str(other))
    with env.begin(write=True) as txn:
        key, value = next(iter(txn.cursor()))
        txn.put(key, value[::-1])
    env.close()
    _refused(other, state, SnapshotError, "another version of the data set", **kw)
    # Malformed states, each named.
    for bad, match in [(dict(state, version=2), "version 2"),
                       ({k: v for k, v in state.items() if k != "block"}, "has no block"),
                       (dict(state, batches=18), "18 batches of epoch 1 were delivered"),
                       (dict(state, epoch=-1), "the state's epoch must be >= 0"),
                       ([state], "must be a dict")]:
        _refused(db, bad, ConfigurationError, match, **kw)
    # The shard order depends on the rank count; the other orders do not.
    with _reader(db, shuffle="shard") as r:
        shard = dict(r.state_dict(), nprocs=4)
    _refused(db, shard, ConfigurationError, "saved on 4 ranks and this Reader runs on 1",
             shuffle="shard")
    with _reader(db, **kw) as r:
        r.load_state_dict(dict(state, nprocs=4))
        assert len(_indices(r)) == 14
    # Settings that are no part of an order are not compared: file order has no seed.
    with _reader(db, shuffle=False) as r:
        plain = r.state_dict()
    with _reader(db, shuffle=False, seed=9, shuffle_block=3) as r:
        r.load_state_dict(plain)


def test_a_resumed_epoch_comes_first(db):
    with _reader(db, shuffle="window") as r:
        it = r.epoch(1)
        next(it)
        with pytest.raises(ConfigurationError, match="epoch 1 is in progress"):
            r.load_state_dict(r.state_dict())
        state = r.state_dict()
        it.close()
    with _reader(db, shuffle="window") as r:
        r.load_state_dict(state)
        with pytest.raises(ConfigurationError, match=r"stopped epoch 1 after 1 of its 17 batches"):
            next(r.epoch(2))
        assert len(_indices(r.epoch(1))) == 16
        assert len(_indices(r.epoch(2))) == 17


# ---------------------------------------------------------------- the PyTorch adapter's state
def test_dataset_state_is_checked_without_torch():
    """lmdbio.torch.LmdbDataset's state: ``{"epoch", "reader"}`` (the adapter's own test with
    torch, tests/mpi/torch_resume.py, resumes a DataLoader with it)."""
    from lmdbio.torch import check_dataset_state

    reader = {"epoch": 3, "batches": 5}
    assert check_dataset_state({"epoch": 3, "reader": reader}) == (3, reader)
    assert check_dataset_state({"epoch": 0, "reader": None}) == (0, None)
    for bad, match in [({"epoch": 1}, "'epoch' and 'reader'"), ([1], "'epoch' and 'reader'"),
                       ({"epoch": -1, "reader": None}, "epoch must be an int >= 0"),
                       ({"epoch": True, "reader": None}, "epoch must be an int >= 0"),
                       ({"epoch": 1, "reader": [reader]}, "must be None or a dict")]:
        with pytest.raises(ConfigurationError, match=match):
            check_dataset_state(bad)
