"""The records at the edges of epochs: a Caffe-made file without a sidecar, prefetch with
node groups, read_batch() between epochs, ranks that part ways, two live epochs.

Each case runs ``tests/mpi/epoch_edges.py`` under mpiexec; it checks every record it is
handed (and every batch it still holds) against py-lmdb by position.
"""

from __future__ import annotations

import re

import pytest

from lmdbio.datasets import make_dataset

from conftest import run_bounded

# Gate: 21 MPI jobs; make test's option matrix sample covers A-C.
pytestmark = [pytest.mark.mpi, pytest.mark.gate]

SCRIPT = "epoch_edges.py"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    return {
        # N = 1,056, B = 64, P = 4: gcd(N, B) = 32 exceeds the 16 records of a rank's share.
        "caffe": make_dataset(root / "caffe", "cifar10", 1056, commit_every=100, seed=1,
                              provenance=False),
        "cifar": make_dataset(root / "cifar", "cifar10", 1056, commit_every=100, seed=1),
        "imagenet": make_dataset(root / "imagenet", "imagenet", 300, commit_every=100, seed=2),
    }


def results(proc) -> list[dict]:
    rows = []
    for m in re.finditer(r"RESULT rank=(\d+) checked=(\d+) wrong=(\d+) error=(.*?)(?=RESULT rank=|\n|$)", proc.stdout):
        rows.append({"rank": int(m[1]), "checked": int(m[2]), "wrong": int(m[3]),
                     "error": m[4].strip()})
    return rows


def run(db, variant, scenario, n=4, **opts):
    args = [str(db), variant, scenario] + [f"--{k}={v}" for k, v in opts.items()]
    proc = run_bounded(SCRIPT, n, *args, timeout=120)
    rows = results(proc)
    assert len(rows) == n, f"not every rank reported:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, rows


@pytest.mark.parametrize("variant", ["auto", "lmdbio-direct", "lmdbio-lmm-dio"])
def test_a_caffe_made_file_without_a_sidecar_reads_a_whole_epoch(dbs, variant):
    proc, rows = run(dbs["caffe"], variant, "epoch", batch=64)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(r["error"] == "" and r["wrong"] == 0 for r in rows), rows
    assert sum(r["checked"] for r in rows) >= 1056


@pytest.mark.parametrize("variant,rpn", [("lmdbio-lmm", "None"), ("lmdbio-lmm-dio", "None"),
                                         ("lmdbio-lmm-dm", "2"),
                                         ("lmdbio-lmm-dio-prov-coal-stag", "2")])
@pytest.mark.parametrize("db", ["cifar", "imagenet"])
def test_b_prefetch_with_node_groups_serves_the_right_records(dbs, variant, rpn, db):
    # Members 3 ms a batch behind their reader: the reader's thread and the members' threads
    # ask ahead; no slot may be refilled while a batch views it (small CIFAR chunks give the
    # reader 16 slots to run ahead in; ImageNet-size records give it few, large ones).
    proc, rows = run(dbs[db], variant, "epochs3", batch=32, prefetch=2, rpn=rpn, sleep=0.003)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(r["error"] == "" and r["wrong"] == 0 for r in rows), rows


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-direct", 0), ("lmdbio-lmm-dio-prov-coal", 0),
                                              ("lmdbio-lmm-dio-prov-coal-stag", 2),
                                              ("lmdbio-lmm-dm", 2), ("auto", 3)])
def test_c_read_batch_between_and_after_epochs(dbs, variant, prefetch):
    proc, rows = run(dbs["cifar"], variant, "between", batch=32, prefetch=prefetch, rpn=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(r["error"] == "" and r["wrong"] == 0 for r in rows), rows


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-lmm", 0), ("lmdbio-direct", 0),
                                              ("lmdbio-lmm-dio", 2)])
def test_d_ranks_that_part_ways_are_named_not_served_wrong_records(dbs, variant, prefetch):
    proc, rows = run(dbs["cifar"], variant, "uneven", batch=32, prefetch=prefetch)
    assert all(r["wrong"] == 0 for r in rows), rows
    for r in rows:
        assert r["error"].startswith("PeerError") and "parted ways" in r["error"], r
        assert "rank 0: epoch 1 after taking 4 batches" in r["error"], r


@pytest.mark.parametrize("variant,prefetch", [("lmdbio-direct", 2), ("lmdbio-lmm-dio", 0)])
def test_e_a_second_live_epoch_is_refused_on_every_rank(dbs, variant, prefetch):
    proc, rows = run(dbs["cifar"], variant, "overlap", batch=32, prefetch=prefetch)
    assert all(r["wrong"] == 0 for r in rows), rows
    for r in rows:
        assert r["error"].startswith("ConfigurationError"), r
        assert "epoch 0 is still in progress" in r["error"], r
