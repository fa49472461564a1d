"""A job stopped in an epoch and resumed on a fresh Reader continues the uninterrupted run: every
shuffle mode, node readers and prefetch; ``shuffle="elastic"`` also on fewer ranks; ranks that
load different states all raise."""

import json

import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from conftest import Checker, on_rank_0, ranks_per_node, sizes
from lmdbio import shuffle as sh
from lmdbio.errors import ConfigurationError
from lmdbio.pipeline import EpochPlan

pytestmark = pytest.mark.mpi

PER_RANK = 3
DB = "cifar10_203"   # 203 records: no batch size here divides it
# 64 KiB requests: several batches per chunk, so a stop falls inside a chunk.
COMMON = dict(seed=3, shuffle_block=7, shuffle_window=3, shuffle_partitions=8,
              coalesce_bytes=1 << 16, build_provenance=True)
# VARIANT@RANKS_PER_NODE:READERS_PER_NODE:PREFETCH
CONFIGS = ["lmdbio-direct@None:1:2", "lmdbio-lmm-dio-prov-coal@2:1:0",
           "lmdbio-lmm-dio-prov-coal@2:1:2"]


def shares(state: dict, n: int, epoch: int, B: int, comm) -> list[list[int]]:
    """This rank's share of each batch of ``epoch`` in the order ``state`` is of."""
    plan = EpochPlan(shuffle=state["shuffle"] or False, seed=state["seed"],
                     block=state["block"], window=state["window"],
                     last_batch=state["last_batch"], partitions=state["partitions"])
    order = plan.order(n, state["block"], epoch, B, comm.size)
    return [s.tolist() for s in sh.rank_batches(order, B, comm.size, comm.rank,
                                                state["last_batch"])]


@pytest.mark.parametrize("stop", [7, 99])   # inside a chunk; past the last batch: after it
@pytest.mark.parametrize("mode", ["file", "window", "shard", "elastic"])
@pytest.mark.parametrize("config", CONFIGS)
@sizes(gate=(4,))
def test_resume_every_mode(comm, datasets, nprocs, config, mode, stop):
    """Take ``stop`` batches of epoch 1, save ``state_dict()`` through JSON, load it into a fresh
    Reader: epoch 1's stopped and resumed batches are this rank's shares of the uninterrupted
    order, every record once across the ranks; epoch 2 follows; the states agree."""
    db = datasets[DB]
    check = Checker(db)
    n, B = len(check.expected), PER_RANK * comm.size
    variant, topology = config.split("@")
    rpn, rpr, prefetch = topology.split(":")
    kw = dict(variant=variant, ranks_per_node=ranks_per_node(rpn), readers_per_node=int(rpr),
              prefetch=int(prefetch), shuffle=False if mode == "file" else mode, **COMMON)
    first = []
    with lmdbio.Reader(db, B, comm, **kw) as r:
        for b in r.epoch(1):
            first.append(check(b))
            if len(first) == stop:
                break
        state = json.loads(json.dumps(r.state_dict()))
    with lmdbio.Reader(db, B, comm, **kw) as r:
        r.load_state_dict(state)
        rest = [check(b) for b in r.epoch(1)]
        second = [check(b) for b in r.epoch(2)]
    states = comm.allgather(state)
    epoch1 = comm.allgather(first + rest)
    total = sum(comm.allgather(check.count))
    assert not check.wrong, check.wrong[:3]
    assert states == [state] * comm.size, "the ranks' states differ"
    assert (state["epoch"], state["batches"]) == (1, len(first))
    assert first + rest == shares(state, n, 1, B, comm), \
        f"epoch 1 stopped after {len(first)} and resumed differs from the uninterrupted order"
    assert second == shares(state, n, 2, B, comm), "epoch 2 after the resumed one differs"
    assert sorted(i for mine in epoch1 for batch in mine for i in batch) == list(range(n))
    assert total == 2 * n


@pytest.mark.parametrize("case", ["different batches", "another batch size"])
@sizes(gate=(4,))
def test_ranks_that_load_different_states_all_raise(comm, datasets, nprocs, case):
    """Rank 0 and the others load states of different batches, or the last rank a state of
    another batch size: every rank raises ConfigurationError naming the mismatch, none hangs."""
    db, P, me = datasets[DB], comm.size, comm.rank
    B = PER_RANK * P
    kw = dict(variant="lmdbio-direct", shuffle="elastic", **COMMON)
    with lmdbio.Reader(db, B, comm, **kw) as r:
        state = r.state_dict()
    if case == "different batches":
        state["batches"] = 1 if me == 0 else 2
    elif me == P - 1:
        state["batch_size"] = B + P
    with pytest.raises(ConfigurationError) as raised:
        with lmdbio.Reader(db, B, comm, **kw) as r:
            r.load_state_dict(state)
    if case == "different batches":
        assert "loaded different states" in str(raised.value)
    else:
        assert f"batch_size {B + P} in the state, {B} here" in str(raised.value)
        if me != P - 1:
            assert f"rank {P - 1}: the state does not match" in str(raised.value)


@sizes(fast=(2,), gate=(3,))
def test_a_twin_files_state_is_refused_on_every_rank(comm, datasets, shared_tmp, nprocs):
    """F24: the data set made again with another seed has the same txnid and record count; a
    state of the one is refused on every rank of a Reader of the other, node readers too."""
    from lmdbio.datasets import make_dataset
    from lmdbio.errors import SnapshotError

    db, B = datasets[DB], PER_RANK * comm.size
    twin = on_rank_0(comm, lambda: make_dataset(shared_tmp / "twin", "cifar10", 203,
                                                commit_every=50, seed=2))
    kw = dict(variant="lmdbio-lmm-dio-prov-coal", ranks_per_node=2, shuffle="window", **COMMON)
    with lmdbio.Reader(db, B, comm, **kw) as r:
        it = r.epoch(1)
        next(it)
        state = json.loads(json.dumps(r.state_dict()))
        it.close()
    with lmdbio.Reader(twin, B, comm, **kw) as r:
        assert (r.txnid, r.n) == (state["dataset"]["txnid"], state["dataset"]["records"])
        with pytest.raises(SnapshotError, match="another version of the data set") as raised:
            r.load_state_dict(state)
        assert raised.value.found == state["dataset"]   # on every rank, rank 0's error or not


ELASTIC = dict(shuffle="elastic", seed=4, shuffle_block=7, shuffle_window=3,
               shuffle_partitions=4, coalesce_bytes=1 << 16, build_provenance=True)


def take(batches, group, check: Checker) -> list[list[int]]:
    """The global batches of this rank's ``batches`` (the group's shares in rank order)."""
    mine = [check(b) for b in batches]
    everyone = group.allgather(mine)
    return [sum((theirs[t] for theirs in everyone), []) for t in range(len(mine))]


@sizes(fast=(4,))
def test_elastic_order_is_one_on_any_rank_count_and_resumes_on_fewer(comm, datasets, nprocs):
    """Saved on 4 ranks (node readers, 2 per virtual node) after 5 batches of epoch 1, resumed on
    2 and on 3 of them (per-rank reads): every epoch's global batches are those of one process,
    and a "shard" state saved on 4 ranks is refused on the others."""
    db, B, stop = datasets[DB], 12, 5
    check = Checker(db)
    n = len(check.expected)
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="lmdbio-direct", **ELASTIC) as r:
        one = {e: [np.asarray(b.indices).tolist() for b in r.epoch(e)] for e in (0, 1, 2)}
    # The world's collectives come first: a group that fails then strands no rank of the world.
    groups = {p: comm.Split(0 if comm.rank < p else MPI.UNDEFINED, comm.rank) for p in (2, 3)}
    place = dict(variant="lmdbio-lmm-dio-prov-coal", ranks_per_node=2)
    with lmdbio.Reader(db, B, comm, **place, **ELASTIC) as r:
        epoch0 = take(r.epoch(0), comm, check)
        it = r.epoch(1)
        epoch1 = take((next(it) for _ in range(stop)), comm, check)
        it.close()
        state = json.loads(json.dumps(r.state_dict()))
    with lmdbio.Reader(db, B, comm, **place, **{**ELASTIC, "shuffle": "shard"}) as r:
        it = r.epoch(1)
        next(it)
        shard_state = json.loads(json.dumps(r.state_dict()))
        it.close()
    resumed, refused = {}, {}
    for p, group in groups.items():
        if group == MPI.COMM_NULL:
            continue
        with lmdbio.Reader(db, B, group, variant="lmdbio-direct", **ELASTIC) as r:
            r.load_state_dict(state)
            rest = take(r, group, check)   # load_state_dict set the epoch that ``r`` reads
            r.set_epoch(2)
            resumed[p] = rest, take(r, group, check)
        try:
            with lmdbio.Reader(db, B, group, variant="lmdbio-direct",
                               **{**ELASTIC, "shuffle": "shard"}) as r:
                r.load_state_dict(shard_state)
            refused[p] = "nothing raised"
        except ConfigurationError as exc:
            refused[p] = str(exc)
        group.Free()
    order = sh.elastic_order(n, 7, 3, 4, 1, B, 4)
    assert one[1] == [b.tolist() for b in sh.global_batches(order, B)]
    assert not check.wrong, check.wrong[:3]
    assert (epoch0, epoch1) == (one[0], one[1][:stop])
    for p, (rest, epoch2) in resumed.items():
        assert epoch1 + rest == one[1], f"epoch 1 resumed on {p} ranks"
        assert epoch2 == one[2], f"epoch 2 on {p} ranks"
        assert f"saved on 4 ranks and this Reader runs on {p}" in refused[p]
