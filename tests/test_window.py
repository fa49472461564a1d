"""The window stage: a shuffled epoch reads each shuffle window once, as large extents, and
serves its batches from memory (lmdbio/pipeline/window.py). Request counts come from the
reader's own stats rows (``calls``: preadv calls of the ``read`` phases). Node readers under MPI:
tests/mpi_ranks/test_window_bytes.py."""

import lmdb
import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio import shuffle as sh
from lmdbio.pipeline import EpochPlan, epoch_rows

N, B = 4000, 32
# COAL at 512 KiB: k = 2 batches (64 records, ~200 KB) per chunk; shuffled chunks of as many
# records. A window of 32 chunks spreads a chunk's 64 records over 2,048 (~100 KB apart): read
# chunk by chunk, one request each.
SETTINGS = dict(coalesce_bytes=1 << 19, shuffle_window=32, shuffle_block=64, seed=7)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("window") / "c", "cifar10", N, seed=2)


def _epoch(db, variant, shuffle, policy="short"):
    """(indices, record bytes, read requests, bytes read) of epoch 1 at P = 1."""
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant=variant, shuffle=shuffle,
                       build_provenance=True, last_batch=policy, **SETTINGS) as r:
        for _ in r.epoch(0):
            pass
        before = len([x for x in r.stats() if x["phase"] == "read"])
        got, values = [], []
        for b in r.epoch(1):
            got.append(b.indices.copy())
            values += [bytes(v) for v in b]
        reads = [x for x in r.stats() if x["phase"] == "read"][before:]
        k = r.coalesce
    return np.concatenate(got), values, sum(x["calls"] for x in reads), \
        sum(x["bytes"] for x in reads), k


@pytest.mark.parametrize("variant", ["lmdbio-direct", "lmdbio-lmm-dio-prov-coal"])
def test_shuffled_epoch_reads_about_as_few_requests_as_file_order(db, variant):
    _, _, file_calls, file_bytes, k = _epoch(db, variant, False)
    idx, _, calls, nbytes, _ = _epoch(db, variant, True)
    assert k == 2
    assert sorted(idx.tolist()) == list(range(N))
    # Read chunk by chunk, the shuffled epoch makes about one request per record (~4,000).
    assert calls <= 2 * file_calls, (calls, file_calls)
    # Whole windows are read once: no record's bytes twice, no more than file order reads.
    assert nbytes <= file_bytes


@pytest.mark.parametrize("policy", ["short", "pad", "drop"])
def test_window_serves_the_same_batches_and_bytes(db, policy):
    idx, values, _, _, k = _epoch(db, "lmdbio-direct", True, policy)
    plan = EpochPlan(shuffle=True, seed=7, window=32, block=64, last_batch=policy)
    rows = epoch_rows(plan, N, B, 1, k, 1)
    want = rows.rows[:rows.batches].ravel()
    if policy == "short":
        want = want[:len(want) - B + int(rows.keep[0])]
    assert np.array_equal(idx, want)
    env = lmdb.open(str(db), readonly=True, lock=False)
    with env.begin() as txn:
        stored = [bytes(v) for _, v in txn.cursor()]
    env.close()
    assert values == [stored[i] for i in idx.tolist()]


def test_record_windows_follow_the_order():
    for n, chunk, window in [(203, 9, 2), (4000, 64, 32), (6000, 500, 3), (7, 100, 3)]:
        order = sh.epoch_order(n, chunk, window, 3, 1)
        win = sh.record_windows(n, chunk, window, 3, 1)[order]
        assert (np.diff(win) >= 0).all()            # windows come one after another
        sizes = np.bincount(win)
        # Every window holds `window` whole chunks (the one with the short chunk fewer records).
        assert (sizes[:-1] >= (window - 1) * chunk).all() and sizes.sum() == n
