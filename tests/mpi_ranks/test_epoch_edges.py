"""The records at the edges of epochs: a Caffe-made file without a sidecar, prefetch with node
groups, read_batch() between epochs, ranks that part ways, two live epochs.

Each scenario checks every record a rank is handed, and every batch it holds until its second
following read, against py-lmdb by position.
"""

import time

import pytest

import lmdbio
from conftest import ranks_per_node, sizes, stored_values

pytestmark = pytest.mark.mpi


def edge_dbs(made) -> dict:
    """The scenarios' databases, made once per session. Every scenario runs in the gate only
    (21 of them); make test's option matrix sample covers A-C."""
    return {
        # N = 1,056, B = 64, P = 4: gcd(N, B) = 32 exceeds the 16 records of a rank's share.
        "caffe": made("edges_caffe", "cifar10", 1056, commit_every=100, seed=1,
                      provenance=False),
        "cifar": made("edges_cifar", "cifar10", 1056, commit_every=100, seed=1),
        "imagenet": made("edges_imagenet", "imagenet", 300, commit_every=100, seed=2),
    }


class Held:
    """This rank's check of the records it is handed, each batch checked again two reads on."""

    def __init__(self, db):
        self.values = stored_values(db)
        self.checked = self.wrong = 0
        self.held: list = []
        self.seen: list[int] = []

    def __call__(self, b, keep: bool = True, record: bool = False) -> None:
        for i, idx in enumerate(b.indices):
            self.checked += 1
            self.wrong += bytes(b[i]) != self.values[int(idx)]
        if record:
            self.seen += [int(i) for i in b.indices]
        if keep:
            self.held.append(b)
            if len(self.held) == 2:
                self(self.held.pop(0), keep=False)


def scenario(comm, r, check: Held, name: str, sleep: float) -> None:
    """One scenario on this rank's Reader ``r``."""
    if name == "epoch":            # one file-order epoch: every record once across the ranks
        for b in r.epoch(0):
            check(b, record=True)
    elif name == "epochs3":        # three epochs, ranks > 0 computing ``sleep`` s a batch
        for e in range(3):
            for b in r.epoch(e):
                if comm.rank:
                    time.sleep(sleep)
                check(b)
    elif name == "between":        # read_batch() after an epoch and after one broken early
        for b in r.epoch(0):
            check(b)
        for _ in range(3):
            check(r.read_batch())
        for i, b in enumerate(r.epoch(1)):
            check(b)
            if i == 2:
                break
        for _ in range(3):
            check(r.read_batch())
        for b in r.epoch(2):
            check(b, record=True)
    elif name == "uneven":         # rank 0 breaks epoch 0 after 4 batches, the others after 2
        stop = 4 if comm.rank == 0 else 2
        for i, b in enumerate(r.epoch(0)):
            check(b)
            if i + 1 == stop:
                break
        for b in r.epoch(1):
            check(b)
    elif name == "overlap":        # epoch 1 started while epoch 0's iterator is alive
        g0 = r.epoch(0)
        for _ in range(3):
            check(next(g0))
        try:
            for b in r.epoch(1):
                check(b)
        finally:
            del g0


def run(comm, db, variant: str, name: str, batch: int, prefetch: int = 0, rpn: str = "None",
        sleep: float = 0.0) -> dict:
    """Every rank's scenario: ``checked``, ``wrong``, ``error`` (``TYPE:message``, empty when
    none) of this rank, ``total`` records checked on all ranks, ``once``: the recorded epoch
    delivered every record once across the ranks (None when none was recorded)."""
    check, error = Held(db), ""
    try:
        with lmdbio.Reader(db, batch, comm, variant=variant, prefetch=prefetch,
                           ranks_per_node=ranks_per_node(rpn), on_error="raise") as r:
            scenario(comm, r, check, name, sleep)
    except Exception as exc:   # asserted by the tests, once every rank has taken every step
        error = f"{type(exc).__name__}:{exc}".replace("\n", " ")
    seen = sorted(i for part in comm.allgather(check.seen) for i in part)
    return {"checked": check.checked, "wrong": check.wrong, "error": error,
            "total": sum(comm.allgather(check.checked)),
            "once": seen == list(range(len(check.values))) if seen else None}


@pytest.mark.parametrize("variant", ["auto", "lmdbio-direct", "lmdbio-lmm-dio"])
@sizes(gate=(4,))
def test_a_caffe_made_file_without_a_sidecar_reads_a_whole_epoch(comm, made, nprocs, variant):
    got = run(comm, edge_dbs(made)["caffe"], variant, "epoch", batch=64)
    assert (got["error"], got["wrong"], got["once"]) == ("", 0, True), got
    assert got["total"] >= 1056, got


@pytest.mark.parametrize("variant,rpn", [("lmdbio-lmm", "None"), ("lmdbio-lmm-dio", "None"),
                                         ("lmdbio-lmm-dm", "2"),
                                         ("lmdbio-lmm-dio-prov-coal-stag", "2")])
@pytest.mark.parametrize("db", ["cifar", "imagenet"])
@sizes(gate=(4,))
def test_b_prefetch_with_node_groups_serves_the_right_records(comm, made, nprocs, variant, rpn,
                                                              db):
    # Members 3 ms a batch behind their reader: the reader's thread and the members' threads
    # ask ahead; no slot may be refilled while a batch views it (small CIFAR chunks give the
    # reader 16 slots to run ahead in; ImageNet-size records give it few, large ones).
    got = run(comm, edge_dbs(made)[db], variant, "epochs3", batch=32, prefetch=2, rpn=rpn,
              sleep=0.003)
    assert (got["error"], got["wrong"]) == ("", 0), got


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-direct", 0),
                                              ("lmdbio-lmm-dio-prov-coal", 0),
                                              ("lmdbio-lmm-dio-prov-coal-stag", 2),
                                              ("lmdbio-lmm-dm", 2), ("auto", 3)])
@pytest.mark.filterwarnings(r"ignore:prefetch=\d reads ahead in an epoch's iterator only")
@sizes(gate=(4,))
def test_c_read_batch_between_and_after_epochs(comm, made, nprocs, variant, prefetch):
    got = run(comm, edge_dbs(made)["cifar"], variant, "between", batch=32, prefetch=prefetch,
              rpn="2")
    assert (got["error"], got["wrong"], got["once"]) == ("", 0, True), got


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-lmm", 0), ("lmdbio-direct", 0),
                                              ("lmdbio-lmm-dio", 2)])
@sizes(gate=(4,))
def test_d_ranks_that_part_ways_are_named_not_served_wrong_records(comm, made, nprocs, variant,
                                                                   prefetch):
    got = run(comm, edge_dbs(made)["cifar"], variant, "uneven", batch=32, prefetch=prefetch)
    assert got["wrong"] == 0, got
    assert got["error"].startswith("PeerError") and "parted ways" in got["error"], got
    assert "rank 0: epoch 1 after taking 4 batches" in got["error"], got


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-direct", 2), ("lmdbio-lmm-dio", 0)])
@sizes(gate=(4,))
def test_e_a_second_live_epoch_is_refused_on_every_rank(comm, made, nprocs, variant, prefetch):
    got = run(comm, edge_dbs(made)["cifar"], variant, "overlap", batch=32, prefetch=prefetch)
    assert got["wrong"] == 0, got
    assert got["error"].startswith("ConfigurationError"), got
    assert "epoch 0 is still in progress" in got["error"], got
