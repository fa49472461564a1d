"""Every epoch delivers every record once across the ranks, in lmdbio.shuffle's order: file order,
shuffled and sharded, each last-batch policy, every variant that can, with and without prefetch.

Each rank reads two epochs, checks each record's bytes against py-lmdb and its shares against
``lmdbio.shuffle.rank_batches`` of the epoch's order (``epoch_order``, or ``shard_order`` for
``shuffle="shard"``); every rank checks the gathered shares' multiset (short: each record once;
pad: the order's head repeated; drop: the last partial batch missing) and the count of records.
"""

from collections import Counter

import numpy as np
import pytest

import lmdbio
from conftest import Checker, ranks_per_node, sizes
from lmdbio import shuffle as sh
from lmdbio.options import parse_variant
from lmdbio.pipeline import shuffles

pytestmark = pytest.mark.mpi

ALL = [v for v in lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS if v != "auto"]
SHUFFLING = [v for v in ALL if shuffles(parse_variant(v))]
WALKING = [v for v in ALL if v not in SHUFFLING]
POLICIES = ["short", "pad", "drop"]
# Ranks per node : readers per node; at P = 4, node readers on two virtual nodes.
NODES = {2: ["None:1", "1:1"], 3: ["None:1", "1:1"], 4: ["None:1", "2:1", "2:2"]}
SEED, CHUNK, WINDOW, EPOCHS = 3, 7, 3, 2
DB = "cifar10_203"   # 203 records: no batch size here divides it


def read_epochs(comm, db, B: int, variant: str, topology: str, policy: str, shuffle,
                prefetch: int) -> tuple[list[list[list[int]]], Checker]:
    """This rank's shares of each epoch's batches, and their check against py-lmdb."""
    check = Checker(db)
    rpn, rpr = topology.split(":")
    with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=ranks_per_node(rpn),
                       readers_per_node=int(rpr), build_provenance=True, shuffle=shuffle,
                       seed=SEED, shuffle_block=CHUNK, shuffle_window=WINDOW,
                       last_batch=policy, prefetch=prefetch) as r:
        seen = []
        for e in range(EPOCHS):
            r.set_epoch(e)
            seen.append([check(b) for b in r])
        r.read_batch()   # the endless stream still reads after the epochs
    return seen, check


def delivered(order: np.ndarray, B: int, policy: str) -> list[int]:
    """The records one epoch of ``order`` delivers in batches of ``B`` under ``policy``."""
    n = len(order)
    full, rest = divmod(n, B)
    if policy == "drop":
        return order[:full * B].tolist()
    return list(range(n)) + (order[:(B - rest) % B].tolist() if policy == "pad" else [])


def check_epochs(comm, db, variant: str, topology: str, policy: str, shuffle=False,
                 prefetch: int = 0, per_rank: int = 5) -> None:
    """Read the epochs on every rank, then assert them (the module's docstring says what)."""
    P, me = comm.size, comm.rank
    B = per_rank * P
    seen, check = read_epochs(comm, db, B, variant, topology, policy, shuffle, prefetch)
    everyone = comm.allgather(seen)
    total = sum(comm.allgather(check.count))
    n = len(check.expected)
    orders = [sh.shard_order(n, CHUNK, WINDOW, SEED, e, B, P, policy) if shuffle == "shard"
              else sh.epoch_order(n, CHUNK, WINDOW, SEED, e) if shuffle else np.arange(n)
              for e in range(EPOCHS)]
    assert not check.wrong, check.wrong[:3]
    for e, order in enumerate(orders):
        want = [w.tolist() for w in sh.rank_batches(order, B, P, me, policy)]
        assert seen[e] == want, f"epoch {e}: this rank's shares differ from lmdbio.shuffle's"
        got = Counter(i for shares in everyone for batch in shares[e] for i in batch)
        assert got == Counter(delivered(order, B, policy)), \
            f"epoch {e}: the ranks' records are not those of the {policy} policy"
    assert total == sum(len(delivered(order, B, policy)) for order in orders)
    if shuffle:
        assert not np.array_equal(orders[0], orders[1]), "epochs 0 and 1 in the same order"
        assert not np.array_equal(orders[0], np.arange(n)), "the shuffled epoch is in file order"


def cases(variants, fast=(2, 4), gate=(3,), topologies=NODES):
    """(nprocs, variant, topology) at each size: ``variants(P)`` on ``topologies[P]``, the
    ``gate`` sizes marked gate."""
    return [pytest.param(p, v, t, id=f"P{p}-{v}-{t}", marks=[pytest.mark.gate] if p in gate else [])
            for p in (*fast, *gate) for v in variants(p) for t in topologies[p]]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("nprocs,variant,topology", cases(lambda p: ALL))
def test_file_order_every_variant(comm, datasets, nprocs, variant, topology, policy):
    check_epochs(comm, datasets[DB], variant, topology, policy)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("nprocs,variant,topology", cases(lambda p: SHUFFLING))
def test_shuffled_epochs(comm, datasets, nprocs, variant, topology, policy):
    check_epochs(comm, datasets[DB], variant, topology, policy, shuffle=True)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("nprocs,variant,topology", cases(
    lambda p: SHUFFLING if p == 4 else ["lmdbio-direct", "lmdbio-lmm-dio-prov-coal"]))
def test_shard_epochs(comm, datasets, nprocs, variant, topology, policy):
    """The same records at one P whatever the variant or the readers per node."""
    check_epochs(comm, datasets[DB], variant, topology, policy, shuffle="shard")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("shuffle,variant", [
    (False, "lmdbio-lmm-dio-prov-coal"), (False, "lmdbio-direct"), (False, "lmdbio-lmm"),
    (True, "lmdbio-lmm-dio-prov-coal"), (True, "lmdbio-direct"),
    ("shard", "lmdbio-lmm-dio-prov-coal"), ("shard", "lmdbio-direct")])
@sizes(gate=(16,))
def test_sixteen_ranks_on_virtual_nodes(comm, datasets, nprocs, shuffle, variant, policy):
    check_epochs(comm, datasets[DB], variant, "4:1", policy, shuffle=shuffle, per_rank=2)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("nprocs,variant,topology", cases(
    lambda p: ["lmdbio-direct", "lmdb-get", "lmdbio-lmm-dio-prov-coal"], fast=(4,), gate=(),
    topologies={4: ["None:1", "2:1"]}))
@pytest.mark.filterwarnings("ignore:prefetch=2 reads ahead in an epoch's iterator only")
def test_prefetched_shuffled_epochs(comm, datasets, nprocs, variant, topology, policy):
    check_epochs(comm, datasets[DB], variant, topology, policy, shuffle=True, prefetch=2)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("nprocs,variant,topology", cases(
    lambda p: WALKING, fast=(2,), topologies={p: ["None:1", f"{p}:1"] for p in (2, 3)}))
@pytest.mark.filterwarnings("ignore:prefetch=1 reads ahead in an epoch's iterator only")
def test_prefetched_epochs_in_file_order(comm, datasets, nprocs, variant, topology, policy):
    """The walking variants with all ranks on one node, one reader."""
    check_epochs(comm, datasets[DB], variant, topology, policy, prefetch=1)
