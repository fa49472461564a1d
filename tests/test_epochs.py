"""Epochs as a pipeline stage: every record once per epoch, shuffled or in file order, each
last-batch policy, every variant (shuffled: the variants that read any record position).
Under MPI, on 2 to 16 ranks: tests/mpi_ranks/test_epoch_orders.py."""

import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError
from lmdbio.pipeline import EpochPlan, epoch_rows, shuffles
from lmdbio.options import parse_variant
from lmdbio.orders import ORDERS, Order

ALL = [v for v in lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS if v != "auto"]
SHUFFLING = [v for v in ALL if shuffles(parse_variant(v))]
WALKING = [v for v in ALL if v not in SHUFFLING]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    # 203 records: no batch size used here divides it, so every policy has a last batch to cut.
    return make_dataset(tmp_path_factory.mktemp("epochs") / "c", "cifar10", 203,
                        commit_every=50, seed=1)


def test_variants_split_as_expected():
    assert set(WALKING) == {"lmdb", "lmdbio-lmm", "lmdbio-lmm-dm"}
    assert "lmdbio-direct" in SHUFFLING and "lmdb-get" in SHUFFLING


@pytest.mark.parametrize("policy", ["short", "pad", "drop"])
@pytest.mark.parametrize("nprocs,k", [(1, 1), (3, 2), (4, 4)])
def test_rows_match_lmdbio_shuffle(policy, nprocs, k):
    n, B = 203, 12
    plan = EpochPlan(shuffle=True, seed=5, block=9, window=2, last_batch=policy)
    er = epoch_rows(plan, n, B, nprocs, k, 3)
    order = lmdbio.shuffle.epoch_order(n, 9, 2, 5, 3)
    assert len(er.rows) % k == 0 and er.batches == lmdbio.shuffle.num_batches(n, B, policy)
    share = B // nprocs
    for r in range(nprocs):
        want = lmdbio.shuffle.rank_batches(order, B, nprocs, r, policy)
        got = [er.rows[i, r * share:r * share + er.kept(i, r, share)] for i in range(er.batches)]
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


@pytest.mark.parametrize("mode", ["window", "shard"])
def test_every_shuffling_variant_gives_one_order_with_the_default_chunk(tmp_path_factory, mode):
    """No shuffle_block given: the chunk comes from the dataset and the batch, never from the
    variant's own COAL chunk (lmdb-get reads 1 batch per request, the COAL stack 4 here: they
    gave different orders of the same epoch before)."""
    from lmdbio.datasets import make_dataset
    from lmdbio.pipeline.epoch import default_block

    db = make_dataset(tmp_path_factory.mktemp("chunk") / "c", "cifar10", 2000, seed=3)
    orders, ks = {}, {}
    for variant in SHUFFLING:
        with lmdbio.Reader(db, 64, MPI.COMM_SELF, variant=variant, build_provenance=True,
                           shuffle=mode, seed=2, coalesce_bytes=1 << 20) as r:
            orders[variant] = np.concatenate([b.indices for b in r.epoch(1)])
            ks[variant] = r.coalesce
        assert sorted(orders[variant].tolist()) == list(range(2000)), variant
    assert ks["lmdb-get"] == 1 and ks["lmdbio-lmm-dio-prov-coal"] > 1, ks
    first = orders[SHUFFLING[0]]
    assert all(np.array_equal(o, first) for o in orders.values()), \
        {v: o[:8].tolist() for v, o in orders.items()}
    # One process, last batch short: the delivered order is the plan's whole order.
    mean = (db / "data.mdb").stat().st_size / 2000
    plan = EpochPlan(shuffle=mode, seed=2)
    assert np.array_equal(first, plan.order(2000, default_block(2000, 64, mean), 1, 64, 1))


def test_one_process_every_variant_every_policy(db):
    for variant in ALL:
        for policy in ("short", "pad", "drop"):
            with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant=variant, build_provenance=True,
                               last_batch=policy) as r:
                for e in range(2):
                    got = np.concatenate([b.indices for b in r.epoch(e)])
                    want = np.arange(203)
                    if policy == "drop":
                        want = want[:200]
                    elif policy == "pad":
                        want = np.concatenate([want, np.arange(5)])
                    assert np.array_equal(got, want), (variant, policy, e)


def test_shuffled_epochs_differ_and_cover(db):
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", shuffle=True, seed=1,
                       shuffle_block=16) as r:
        e0 = np.concatenate([b.indices for b in r.epoch(0)])
        r.set_epoch(1)
        e1 = np.concatenate([b.indices for b in r])
    assert sorted(e0.tolist()) == sorted(e1.tolist()) == list(range(203))
    assert not np.array_equal(e0, e1) and not np.array_equal(e0, np.arange(203))


def test_walking_variants_refuse_to_shuffle(db):
    for variant in WALKING:
        with pytest.raises(ConfigurationError, match="lmdbio-direct"):
            lmdbio.Reader(db, 8, MPI.COMM_SELF, variant=variant, shuffle=True)


def test_bad_epoch_settings(db):
    with pytest.raises(ValueError, match="last_batch"):
        lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", last_batch="wrap")
    with pytest.raises(ValueError, match="window"):
        lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", shuffle_window=0)
    with lmdbio.Reader(db, 256, MPI.COMM_SELF, variant="lmdbio-direct") as r:
        with pytest.raises(ValueError, match="larger than the dataset"):
            next(r.epoch(0))


def test_a_shuffled_plan_without_its_block_is_refused():
    """One default block (the pipeline's default_block), not a second one inside epoch_rows."""
    with pytest.raises(ValueError, match="needs its block"):
        epoch_rows(EpochPlan(shuffle="shard"), 203, 12, 3, 2, 1)
    rows = epoch_rows(EpochPlan(), 203, 12, 3, 2, 1)   # file order has no blocks to size
    assert rows.rows[:16].ravel().tolist() == list(range(192))


def test_iteration_owns_where_the_reader_is():
    """One object: the next batch, the live epoch and its rows, and where the next epoch starts
    (the first chunk boundary at or after the next batch; after an epoch, past its last row
    however many of its batches were taken)."""
    from lmdbio.pipeline import Iteration
    from lmdbio.plan import Stream

    stream = Stream(n=100, batch=10, lo=0, count=10, k=4)
    it = Iteration(stream)
    assert it.schedule is stream and it.next_start() == 0
    it.took()
    it.took()   # two stream batches read
    assert it.t == 2 and it.next_start() == 4
    rows = epoch_rows(EpochPlan(), 100, 10, 1, 4, 0)   # 10 batches, padded to 12 rows
    token = object()
    sched = stream.epoch(rows.rows, 4)
    it.begin(token, 0, rows, sched, 4)
    assert it.is_live(token) and it.schedule is sched and it.t == 4
    assert sched.positions(4).tolist() == list(range(10))
    it.took()
    it.end()
    assert it.live is None and it.last == (0, 1) and it.schedule is stream
    assert it.t == 4 + len(rows.rows) == 16 and it.next_start() == 16


# ---------------------------------------------------------------- orders behind a registry
class _Reversed(Order):
    """A toy order: the records backwards, rotated by the epoch and the seed."""

    name = "reversed"
    state_keys = ("seed",)

    def order(self, n, epoch, batch, nprocs, plan):
        return np.roll(np.arange(n, dtype=np.int64)[::-1], plan.seed + epoch)


def test_orders_are_registered_by_name_and_shuffle_is_their_shorthand(db):
    assert list(ORDERS) == ["file", "window", "shard", "elastic"]
    assert [o.depends_on_nprocs for o in ORDERS.values()] == [False, False, True,
                                                                             False]
    kw = dict(variant="lmdbio-direct", seed=2, shuffle_block=7, build_provenance=True)
    for name, shorthand in [("file", False), ("window", True), ("shard", "shard"),
                            ("elastic", "elastic")]:
        with lmdbio.Reader(db, 8, MPI.COMM_SELF, order=name, **kw) as a, \
                lmdbio.Reader(db, 8, MPI.COMM_SELF, shuffle=shorthand, **kw) as b:
            got = [np.asarray(x.indices).tolist() for x in a.epoch(1)]
            assert got == [np.asarray(x.indices).tolist() for x in b.epoch(1)], name
            assert a.state_dict() == b.state_dict()
    with pytest.raises(ConfigurationError, match="both name the order"):
        lmdbio.Reader(db, 8, MPI.COMM_SELF, order="window", shuffle="shard", **kw)
    with pytest.raises(ConfigurationError, match="'file', 'window', 'shard', 'elastic'"):
        lmdbio.Reader(db, 8, MPI.COMM_SELF, order="random", **kw)


def test_an_order_object_is_read_and_resumed_on_its_own_keys(db):
    """An Order passed as ``order=`` is read (every record right) and a state of it compares
    its name and its state_keys only (seed here, not the window)."""
    import lmdb

    toy = _Reversed()
    kw = dict(variant="lmdbio-direct", build_provenance=True, order=toy)
    with lmdb.open(str(db), readonly=True, lock=False) as env, env.begin() as txn:
        values = [bytes(v) for _, v in txn.cursor()]
    want = toy.order(203, 1, 8, 1, EpochPlan(seed=3)).tolist()
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, seed=3, **kw) as r:
        it = r.epoch(1)
        first = next(it)
        state = r.state_dict()
        it.close()
        assert state["shuffle"] == "reversed"
    assert np.asarray(first.indices).tolist() == want[:8]
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, seed=3, shuffle_window=9, **kw) as r:
        r.load_state_dict(state)
        rest = list(r.epoch(1))
    assert sum((np.asarray(b.indices).tolist() for b in rest), []) == want[8:]
    assert [bytes(x) for b in rest for x in b] == [values[i] for i in want[8:]]
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, seed=4, **kw) as r:
        with pytest.raises(ConfigurationError, match="seed 3 in the state, 4 here"):
            r.load_state_dict(state)


def test_reader_epochs_is_deprecated_for_the_iterations_plan(db):
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", shuffle="window",
                       build_provenance=True) as r:
        with pytest.warns(DeprecationWarning, match=r"reader\.it\.plan"):
            plan = r.epochs
        assert plan is r.it.plan and plan.block is not None   # the resolved block
