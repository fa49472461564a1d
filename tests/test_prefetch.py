"""Prefetch: the same records with and without reading ahead, background errors surface at
the next read naming the rank, closing with reads in flight is clean. Prefetched epochs under
MPI: tests/mpi_ranks/test_epoch_orders.py."""

import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError, LmdbioError

PER_RANK = ["lmdbio-direct", "lmdb-get", "lmdb"]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("prefetch") / "c", "cifar10", 203,
                        commit_every=50, seed=1)


def _epochs(db, variant, depth, shuffle):
    """Two epochs' (indices, records); checks each batch is still intact after the next read
    (a batch stays valid until the rank's second following read)."""
    import lmdb

    env = lmdb.open(str(db), readonly=True, lock=False)
    with env.begin() as txn:
        expected = [bytes(v) for _, v in txn.cursor()]
    env.close()
    out = []
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant=variant, prefetch=depth, shuffle=shuffle,
                       shuffle_block=16, coalesce_bytes=1) as r:
        for e in range(2):
            prev = None
            for b in r.epoch(e):
                time.sleep(0.003)   # the caller computes; the thread runs ahead
                if prev is not None:
                    assert [bytes(x) for x in prev] == [expected[i] for i in prev.indices]
                out.append((b.indices.tolist(), [bytes(x) for x in b]))
                prev = b
    assert all(recs == [expected[i] for i in idx] for idx, recs in out)
    return out


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("lmdbio-prefetch")]


@pytest.mark.parametrize("variant", PER_RANK)
def test_same_records_with_and_without_prefetch(db, variant):
    shuffle = variant != "lmdb"
    want = _epochs(db, variant, 0, shuffle)
    for depth in (1, 2, 5):
        assert _epochs(db, variant, depth, shuffle) == want, depth
    assert not _prefetch_threads()


def _failing_fetch(reader, after: int, delay: float = 0.0):
    fetch = reader.pipe.fetcher.fetch
    calls = [0]

    def wrapped(*a, **kw):
        calls[0] += 1
        time.sleep(delay)
        if calls[0] > after:
            raise OSError(5, "simulated EIO")
        return fetch(*a, **kw)
    reader.pipe.fetcher.fetch = wrapped


def test_background_error_surfaces_at_the_next_read(db):
    r = lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=2,
                      coalesce_bytes=1)   # one batch per fetch
    assert r.coalesce == 1
    _failing_fetch(r, after=3)
    it = r.epoch(0)
    got = [next(it) for _ in range(3)]   # batches read before the failure are delivered
    assert [len(b) for b in got] == [8, 8, 8]
    with pytest.raises(LmdbioError, match=r"rank 0: the background read of batch 3 failed: "
                                          r"OSError.*simulated EIO"):
        next(it)
    assert not _prefetch_threads()
    r.close()


def test_a_failed_read_ahead_past_an_epoch_left_early_raises_at_the_next_read_batch(db):
    """The epoch's end keeps its error; the next read_batch() raises it, once."""
    r = lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=2,
                      coalesce_bytes=1)   # one batch per fetch
    with pytest.warns(UserWarning, match="reads ahead in an epoch's iterator only"):
        r.read_batch()                    # said once: later calls take the short path
    fetch = r.pipe.fetcher.fetch
    _failing_fetch(r, after=1)            # the epoch's first batch is read, the next fails
    it = r.epoch(0)
    assert len(next(it)) == 8
    it.close()                            # left early: the thread drains, its error is kept
    r.pipe.fetcher.fetch = fetch
    with pytest.raises(LmdbioError, match=r"rank 0: the background read of batch 2, read ahead "
                                          r"past where the epoch was left, failed: OSError"):
        r.read_batch()
    assert len(r.read_batch()) == 8       # raised once; reading goes on
    r.close()


def test_close_with_reads_in_flight(db):
    r = lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=3,
                      coalesce_bytes=1)
    _failing_fetch(r, after=10**9, delay=0.2)   # slow reads: some are in flight at close
    it = r.epoch(0)
    first = next(it)
    assert _prefetch_threads()
    r.close()
    assert not _prefetch_threads()
    assert len(bytes(first[0])) > 0   # batches read before close stay readable
    with pytest.raises(LmdbioError, match="closed"):
        r.read_batch()


def test_refused_without_thread_multiple(db, monkeypatch):
    monkeypatch.setattr(MPI, "Query_thread", lambda: MPI.THREAD_SERIALIZED)
    with pytest.raises(ConfigurationError, match="MPI_THREAD_MULTIPLE"):
        lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-lmm-dio", prefetch=2)
    # Per-rank variants exchange no messages while reading: allowed.
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=2) as r:
        assert len(np.concatenate([b.indices for b in r.epoch(0)])) == 203


def test_bad_depth(db):
    for bad in (-1, 1.5, True):
        with pytest.raises((ValueError, TypeError), match="prefetch"):
            lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=bad)


def test_where_reading_goes_on_is_the_same_however_far_each_thread_got():
    """After a prefetching epoch ends early, every rank resumes at the same batch (CI once hung
    120 s: rank 0's thread had read further than rank 1's, so their next epochs began apart)."""
    import threading
    import time as _time

    from lmdbio.pipeline.prefetch import Prefetch

    gate = threading.Event()

    def slow(t):   # this rank's storage is slow past batch 0
        if t >= 1:
            gate.wait(10)
        return t

    ends = {}
    for name, read in (("fast", lambda t: t), ("slow", slow)):
        pf = Prefetch(read, 0, 100, 2, 0)
        assert pf.next() == 0
        deadline = _time.monotonic() + 5
        while name == "fast" and pf.read_to < 4 and _time.monotonic() < deadline:
            _time.sleep(0.01)
        ends[name] = (pf.read_to, pf.bound)
        if name == "slow":
            gate.set()   # let its read in flight end, so close() can join the thread
        pf.close()
    # The fast thread filled its queue (2) and read one more; the slow one read only batch 0.
    assert ends["fast"] == (4, 4) and ends["slow"][0] == 1
    assert ends["slow"][1] == ends["fast"][1] == 4


def test_read_batch_says_once_that_it_does_not_read_ahead(db):
    import warnings

    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", prefetch=2) as r:
        with pytest.warns(UserWarning, match=r"prefetch=2 reads ahead in an epoch's iterator only"):
            first = r.read_batch()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            second = r.read_batch()          # said once only
            assert len(next(iter(r.epoch(0)))) == 8
    assert len(first) == len(second) == 8
    with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct") as r:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            r.read_batch()                   # nothing to say without prefetch
