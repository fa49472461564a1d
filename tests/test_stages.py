"""Each stage of lmdbio/pipeline on its own, in this process (no MPI job: ``MPI.COMM_SELF``
where a stage needs a communicator), against small fakes of its neighbours: a buffer handed
to a fetcher, a pread of located extents for a locator, a reader filling a distributor's
buffer, a read function for the prefetch thread, and, for STAG's turns (which need several
readers), a communicator whose readers are threads of this process.

The data are small LMDB files from :func:`lmdbio.make_dataset`; the expected record bytes
come from py-lmdb reading the same file, in key order.
"""

from __future__ import annotations

import os
import threading
import sys
import time
from collections import defaultdict, deque
from contextlib import contextmanager

import lmdb
import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError, LmdbFormatError, LmdbioError, PeerTimeoutError
from lmdbio.format import db_file, read_meta
from lmdbio.metrics import PhaseRecorder
from lmdbio.pipeline import EpochPlan, epoch_rows
from lmdbio.pipeline.coalesce import Coalesce
from lmdbio.pipeline.distribute import NodeGroup, Private, PrivateSlots
from lmdbio.pipeline import fetch
from lmdbio.pipeline.fetch import MmapCopy, Preadv
from lmdbio.pipeline.index import Index
from lmdbio.pipeline.key import Key
from lmdbio.pipeline.prefetch import Prefetch, check_prefetch
from lmdbio.pipeline.prov import Prov, ProvOrIndex
from lmdbio.pipeline.ring import Ring
from lmdbio.pipeline.stage import Extents, Views
from lmdbio.pipeline.stagger import NoStagger, Stagger
from lmdbio.pipeline.walk import Walk
from lmdbio.pipeline.window import Window
from lmdbio.plan import EpochSchedule, Stream, plan_extents
from lmdbio.recordindex import build_index
from lmdbio.shuffle import record_windows
from conftest import MPI_SCRIPTS
from lmdbio.topology import make_topology

sys.path.insert(0, str(MPI_SCRIPTS))
from stored import stored_values

N = 203          # records: no batch size below divides it, so the stream wraps mid-batch
B = 8            # global batch

OFF = PhaseRecorder(0, enabled=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return lmdbio.make_dataset(tmp_path_factory.mktemp("stages") / "c", "cifar10", N,
                               commit_every=50, seed=3)


@pytest.fixture(scope="module")
def expected(db) -> list[bytes]:
    """Every record's value, by py-lmdb, in key order."""
    return stored_values(db)


@pytest.fixture(scope="module")
def index(db):
    """Where each record's value lies in data.mdb (file offsets, sizes), in key order."""
    return build_index(db)


class Alloc:
    """A distributor's ``reserve`` as a fetcher sees it: a buffer of at least ``nbytes``
    (``slack`` more, filled with 0xEE so bytes nobody wrote show), and what was asked."""

    def __init__(self, slack: int = 0):
        self.slack, self.asked, self.buf = slack, [], None

    def __call__(self, nbytes: int) -> np.ndarray:
        self.asked.append(nbytes)
        self.buf = np.full(nbytes + self.slack, 0xEE, dtype=np.uint8)
        return self.buf


def sliced(buf, offsets, sizes) -> list[bytes]:
    return [bytes(buf[o:o + s]) for o, s in zip(np.asarray(offsets).tolist(),
                                                np.asarray(sizes).tolist())]


# ------------------------------------------------------------------ locators
#: Locator tests read in global batches of 14: gcd(203, 14) = 7, so a reader of 3 records at
#: offset 2 of each batch touches 3 of every 7 records (its table holds only those).
LB = 14
READERS = [(0, LB), (2, 3)]   # (lo, count): a whole batch; part of each

LOCATORS = {
    "walk": Walk, "ring": lambda: Ring(False), "ring+speculate": lambda: Ring(True),
    "index": Index, "prov": Prov, "prov-or-index": ProvOrIndex, "key": Key,
}
RANDOM_ACCESS = ["index", "prov", "prov-or-index", "key"]


@contextmanager
def opened(name: str, db):
    """A locator over COMM_SELF with its snapshot of ``db`` open, as a Reader opens it."""
    path = db_file(db)
    loc = LOCATORS[name]()
    loc.prepare(MPI.COMM_SELF, path)
    loc.open(path, read_meta(path), 1)
    try:
        yield loc
    finally:
        loc.close()
        loc.close()   # twice is safe


def take(located, path) -> list[bytes]:
    """Play the fetcher: the located records' bytes (views taken; extents read by pread)."""
    if isinstance(located, Views):
        return [bytes(v) for v in located.take()]
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = b"".join(os.pread(fd, int(n), int(o))
                       for o, n in zip(located.start.tolist(), located.length.tolist()))
    finally:
        os.close(fd)
    assert len(buf) == int(located.length.sum())
    return sliced(np.frombuffer(buf, dtype=np.uint8), located.buf_off, located.sizes)


def stream_positions(chunk: int, k: int, lo: int, count: int) -> list[int]:
    """The endless stream's definition: batch t holds positions (t*B + j) mod N."""
    return [(t * LB + lo + j) % N for t in range(chunk * k, chunk * k + k) for j in range(count)]


@pytest.mark.parametrize("name", list(LOCATORS))
@pytest.mark.parametrize("lo,count", READERS)
def test_locator_names_the_streams_records(db, expected, name, lo, count):
    k = 3
    sched = Stream(N, LB, lo, count, k)
    rec = PhaseRecorder(0)
    with opened(name, db) as loc:
        assert loc.snapshot_id()[1] == N
        row = {}
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, sched, row)
        scored = []
        # Chunks in order (a cursor walks them forward), at least twice round the file.
        for chunk in range(2 * N // (k * count) + 2):
            located = loc.locate(chunk, sched, rec)
            got = take(located, db_file(db))
            part: dict = {}
            loc.fetched(located, part)
            want = stream_positions(chunk, k, lo, count)
            assert got == [expected[p] for p in want], (name, chunk)
            if part:   # DM scores its guess against where the records were (none if they wrap)
                scored.append(part["missed_pages"] >= 0 and part["extra_pages"] >= 0)
        loc.finish(False, chunk * k)   # one ring member: no hand-off left in flight
    assert (len(scored) > 2 and all(scored)) if name == "ring+speculate" else not scored
    phases = {r["phase"] for r in rec.rows}
    assert "locate" in phases and ("speculate" in phases) == (name == "ring+speculate")


@pytest.mark.parametrize("name", RANDOM_ACCESS)
def test_random_access_locator_reads_a_shuffled_epoch_in_any_chunk_order(db, expected, name):
    k, lo, count, t0 = 2, 4, 4, 6
    er = epoch_rows(EpochPlan(shuffle=True, seed=5, block=16, window=3), N, B, 2, k, 1)
    sched = EpochSchedule(Stream(N, B, lo, count, k), er.rows, t0)
    chunks = list(range(t0 // k, t0 // k + len(er.rows) // k))
    with opened(name, db) as loc:
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, sched, {})
        for chunk in chunks[::-1]:
            want = er.rows[chunk * k - t0:chunk * k - t0 + k, lo:lo + count].ravel().tolist()
            assert take(loc.locate(chunk, sched, OFF), db_file(db)) == \
                [expected[p] for p in want], (name, chunk)


@pytest.mark.parametrize("name", ["walk", "ring", "key", "index"])
def test_locator_goes_from_the_stream_to_a_file_order_epoch_and_back(db, expected, name):
    """Three stream chunks, a file-order epoch (its short last batch steps back over records),
    the stream again: what a Pipeline reads across an epoch, on one locator."""
    k, lo, count = 2, 0, B
    stream = Stream(N, B, lo, count, k)
    er = epoch_rows(EpochPlan(), N, B, 1, k, 0)
    epoch = EpochSchedule(stream, er.rows, 3 * k)
    reads = ([(stream, c) for c in range(3)]
             + [(epoch, c) for c in range(3, 3 + len(er.rows) // k)]
             + [(stream, c) for c in range(3 + len(er.rows) // k, 6 + len(er.rows) // k)])
    with opened(name, db) as loc:
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, stream, {})
        for sched, chunk in reads:
            if sched is epoch and chunk == 3:
                # The Pipeline's first epoch: the tables are rebuilt to cover every record.
                loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, epoch, {})
            if sched is stream:
                want = [(t * B + j) % N for t in range(chunk * k, chunk * k + k) for j in range(B)]
            else:
                want = er.rows[chunk * k - 3 * k:chunk * k - 2 * k].ravel().tolist()
            assert take(loc.locate(chunk, sched, OFF), db_file(db)) == \
                [expected[p] for p in want], (name, chunk)


def test_stage_abilities():
    got = {name: LOCATORS[name]().abilities for name in LOCATORS}
    assert [n for n, a in got.items() if a.random_access] == RANDOM_ACCESS
    assert [n for n, a in got.items() if a.windowed] == ["index", "prov", "prov-or-index"]
    assert not any(a.collective_free or a.extra_slots for a in got.values())
    # Per-rank buffers need no messages (a thread may read ahead); every distributor keeps
    # ``ahead`` more chunks valid when asked (test_distributor_keeps_ahead_more_chunks_valid).
    dist = {cls: cls.abilities for cls in (Private, PrivateSlots, NodeGroup)}
    assert {c for c, a in dist.items() if a.collective_free} == {Private, PrivateSlots}
    assert all(a.extra_slots and not (a.random_access or a.windowed) for a in dist.values())


def test_table_locator_refuses_positions_outside_its_table(db):
    sched = Stream(N, LB, 2, 3, 1)   # touches p with (p - 2) mod 7 < 3
    with opened("index", db) as loc:
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, sched, {})
        loc.locate_positions(np.array([2, 3, 4, 9]), 0, OFF)
        with pytest.raises(LmdbioError, match="no entries"):
            loc.locate_positions(np.array([2, 5]), 0, OFF)


def test_prov_or_index_reads_the_index_without_a_sidecar(tmp_path):
    bare = lmdbio.make_dataset(tmp_path / "bare", "cifar10", 40, commit_every=15, seed=9,
                               provenance=False)
    want = stored_values(bare)
    sched = Stream(40, 8, 0, 8, 2)
    with opened("prov-or-index", bare) as loc:
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, sched, {})
        assert loc.describe() == {"direct_locate": "index", "coalesce": 2}
        for chunk in range(4):
            assert take(loc.locate(chunk, sched, OFF), db_file(bare)) == \
                [want[(chunk * 16 + j) % 40] for j in range(16)]


def test_prov_or_index_uses_a_current_sidecar(db):
    with opened("prov-or-index", db) as loc:
        loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, Stream(N, B, 0, B, 4), {})
        assert loc.describe() == {"direct_locate": "provenance", "coalesce": 4}


# ------------------------------------------------------------------ fetchers
@pytest.fixture
def map_values(db):
    """Every record's value as a memoryview into LMDB's map (what a cursor locator hands
    over); valid while the fixture's read transaction lives."""
    env = lmdb.open(str(db), readonly=True, lock=False)
    txn = env.begin(buffers=True)
    try:
        yield [v for _, v in txn.cursor()]
    finally:
        txn.abort()
        env.close()


@pytest.mark.parametrize("by", ["values", "lookup"])
def test_mmap_copy_lays_values_back_to_back(map_values, expected, by):
    pos = [5, 6, 7, 200, 201, 202, 0, 1, 100, 100]   # a wrap, a jump, a repeat
    vals = [map_values[p] for p in pos]
    located = (Views(lambda: None, values=vals) if by == "values"
               else Views(lambda: None, lookup=lambda: vals))
    alloc, row = Alloc(slack=64), {}
    offsets, sizes = MmapCopy().fetch(located, alloc, row)
    assert sliced(alloc.buf, offsets, sizes) == [expected[p] for p in pos]
    total = sum(len(expected[p]) for p in pos)
    assert alloc.asked == [total]
    assert offsets.tolist() == np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
    assert row == {"bytes": total, "calls": len(pos)}
    assert (alloc.buf[total:] == 0xEE).all()


def test_mmap_copy_checks_the_snapshot_before_touching_the_map(map_values):
    def shrunk():
        raise LmdbFormatError("data.mdb shrank")

    alloc = Alloc()
    with pytest.raises(LmdbFormatError, match="shrank"):
        MmapCopy().fetch(Views(shrunk, values=map_values[:3]), alloc, {})
    assert alloc.asked == []


@pytest.mark.parametrize("gap", [64 << 10, 0])
def test_preadv_fills_the_buffer_so_offsets_slice_out_each_record(db, expected, index, gap):
    rng = np.random.default_rng(4)
    pos = np.concatenate([rng.permutation(N)[:40], [3, 3]])   # any order, a record twice
    sizes = index.sizes[pos].astype(np.int64)
    start, length, buf_off = plan_extents(index.offsets[pos], sizes, max_gap=gap)
    f = Preadv()
    f.open(db_file(db))
    try:
        alloc, row = Alloc(slack=16), {}
        offsets, got_sizes = f.fetch(Extents(start, length, buf_off, sizes), alloc, row)
    finally:
        f.close()
        f.close()   # twice is safe
    assert sliced(alloc.buf, offsets, got_sizes) == [expected[p] for p in pos]
    assert alloc.asked == [int(length.sum())]
    assert row["bytes"] == int(length.sum())
    assert row["calls"] == len(start)   # one preadv per extent (no short reads here)
    if gap == 0:
        assert len(start) > 10          # records this far apart: many extents


@pytest.mark.parametrize("order", ["file", "file twice", "wrapped", "shuffled", "shuffled twice"])
@pytest.mark.parametrize("gap,iov_max", [(64 << 10, 1024), (64 << 10, 1), (4096, 1024), (0, 1024)])
def test_preadv_lays_records_at_one_stride_in_batch_order(db, expected, index, gap, iov_max,
                                                          order, monkeypatch):
    """Each record lands at ``i * stride`` in the order asked (``stride``: the CIFAR Datum's
    overflow page), one preadv per extent (per ``_IOV_MAX`` pieces); a record asked again (a
    stream wrapping inside a chunk) is there again; records in file order are a few pieces."""
    monkeypatch.setattr(fetch, "_IOV_MAX", iov_max)
    pos = {"file": np.arange(60, 140), "wrapped": np.r_[150:200, 0:40]}.get(
        order.split()[0], np.random.default_rng(5).permutation(N)[:60])
    if order.endswith("twice"):
        pos = np.concatenate([pos[:30], [pos[0], 3, 3], pos[30:], pos[:2]])
    sizes = index.sizes[pos].astype(np.int64)
    located = fetch.Scatter.locate(index.offsets[pos].astype(np.int64), sizes, max_gap=gap)
    start, length, buf_off = plan_extents(index.offsets[pos], sizes, max_gap=gap)
    assert [located.start.tolist(), located.length.tolist(), located.buf_off.tolist()] == \
        [start.tolist(), length.tolist(), buf_off.tolist()]   # the extents plan_extents plans
    scatter = located.scatter
    f = Preadv()
    f.open(db_file(db))
    try:
        alloc, row = Alloc(slack=16), {}
        offsets, got_sizes = f.fetch(located, alloc, row)
    finally:
        f.close()
    assert scatter is not None and offsets is scatter.offsets
    assert offsets.tolist() == (np.arange(len(pos)) * 4096).tolist()
    assert sliced(alloc.buf, offsets, got_sizes) == [expected[p] for p in pos]
    assert alloc.asked == [scatter.nbytes] == [4096 * (len(pos) - 1) + 3083]
    assert bytes(alloc.buf[scatter.nbytes:]) == b"\xee" * 16   # nothing past the records
    assert row["bytes"] == int(length.sum()) == int(scatter.length.sum())   # each byte once
    assert row["calls"] == len(scatter.calls) >= len(start)   # no short reads here
    assert all(b - a <= iov_max for a, b, _, _ in scatter.calls)
    if order in ("file", "wrapped") and gap:   # a run per stretch between leaf pages
        assert len(scatter.length) < 10
        o = index.offsets[pos].astype(np.int64)   # planned run by run, not record by record
        assert fetch.Scatter._by_runs(o, sizes, np.diff(o), 4096, gap) is not None


def test_scatter_refuses_a_buffer_it_would_write_past(db, index):
    """The kernel writes where the iovecs point: a short, read-only or strided buffer, or a
    short scratch, is refused before any read, and the bytes around stay as they were."""
    pos = np.arange(0, 190)
    located = fetch.Scatter.locate(index.offsets[pos].astype(np.int64),
                                   index.sizes[pos].astype(np.int64))
    sc = located.scatter
    assert sc.gap > 0   # leaf pages between the records: the scratch is used
    fd = os.open(db_file(db), os.O_RDONLY)
    try:
        whole = np.full(sc.nbytes + 32, 0xEE, np.uint8)
        ro = whole[:sc.nbytes].copy()
        ro.flags.writeable = False
        for buf, scratch in ((whole[:sc.nbytes - 1], np.empty(sc.gap, np.uint8)), (ro, None),
                             (np.empty(2 * sc.nbytes, np.uint8)[::2], None),
                             (whole[:sc.nbytes], np.empty(sc.gap - 1, np.uint8))):
            with pytest.raises(ValueError, match="Scatter.read needs"):
                sc.read(fd, buf, np.empty(sc.gap, np.uint8) if scratch is None else scratch,
                        "data.mdb")
        assert (whole == 0xEE).all()
    finally:
        os.close(fd)


def test_preadv_reads_records_of_several_sizes_as_they_lie(db, expected, index):
    pos = np.arange(0, 40)
    sizes = index.sizes[pos].astype(np.int64)
    sizes[5] -= 1   # one record a byte short: not one size, no stride
    located = fetch.Scatter.locate(index.offsets[pos].astype(np.int64), sizes)
    assert located.scatter is None
    f = Preadv()
    f.open(db_file(db))
    try:
        alloc = Alloc()
        offsets, _ = f.fetch(located, alloc, {})
    finally:
        f.close()
    assert offsets is located.buf_off and alloc.asked == [int(located.length.sum())]
    assert sliced(alloc.buf, offsets, sizes) == [expected[p][:z] for p, z in zip(pos, sizes)]


def test_preadv_short_read_is_an_error_not_a_half_filled_buffer(db):
    size = os.path.getsize(db_file(db))
    f = Preadv()
    f.open(db_file(db))
    try:
        located = Extents(np.array([size - 100], np.int64), np.array([4096], np.int64),
                          np.zeros(1, np.int64), np.array([4096], np.int64))
        with pytest.raises(LmdbioError, match="short read"):
            f.fetch(located, Alloc(), {})
    finally:
        f.close()


# ------------------------------------------------------------------ distributors
def hand_off(d, seq: int, chunk: int, sched, expected, rec=OFF) -> list[tuple]:
    """Play a reader's locator and fetcher: put ``chunk``'s records into hand-off ``seq``,
    publish them; returns each batch's (indices, values) as published."""
    pos = sched.chunk_positions(chunk)
    vals = [expected[p] for p in pos.tolist()]
    sizes = np.array([len(v) for v in vals], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    buf = d.reserve(seq, int(sizes.sum()), chunk * sched.k)
    assert len(buf) >= sizes.sum()
    for v, o in zip(vals, offsets.tolist()):
        buf[o:o + len(v)] = np.frombuffer(v, dtype=np.uint8)
    d.publish(seq, offsets, sizes, rec, chunk * sched.k)
    c = sched.count
    return [(pos[i * c:(i + 1) * c], vals[i * c:(i + 1) * c]) for i in range(sched.k)]


def make_distributor(kind: str, per_rank: int):
    """A distributor over COMM_SELF; NodeGroup on a topology of one node, one group, one rank."""
    if kind == "node-group":
        topo = make_topology(MPI.COMM_SELF)
        assert (topo.nodes, topo.nreaders, topo.group_ranks) == (1, 1, (0,))
        return NodeGroup(MPI.COMM_SELF, topo, per_rank), topo
    cls = {"private": Private, "private-slots": PrivateSlots}[kind]
    return cls(MPI.COMM_SELF, None, per_rank), None


DISTRIBUTORS = ["private", "private-slots", "node-group"]


@pytest.mark.parametrize("kind", DISTRIBUTORS)
@pytest.mark.parametrize("capacity", [1 << 20, 1000])   # 1000 bytes: every chunk grows its slot
def test_distributor_hands_out_what_was_published(expected, kind, capacity):
    per_rank, k = B, 2
    d, topo = make_distributor(kind, per_rank)
    assert d.is_reader and (d.lo, d.count) == (0, per_rank)
    sched = Stream(N, B, d.lo, d.count, k)
    d.setup(sched, capacity)
    try:
        # Hand-offs 0, 1, 2 carry chunks 0, 12, 5: hand-off numbers, not chunk numbers, pick
        # the buffers (reading jumps at epoch boundaries).
        for seq, chunk in enumerate([0, 12, 5]):
            published = hand_off(d, seq, chunk, sched, expected)
            for it, (idx, vals) in enumerate(published):
                b = d.batch(seq, it, idx)
                assert b.indices.tolist() == idx.tolist()
                assert [bytes(x) for x in b] == vals == [expected[p] for p in b.indices.tolist()]
    finally:
        d.close(5.0, agree=True)
        if topo is not None:
            topo.free()


#: NodeGroup's slots at this size: the fewest (64 MiB // capacity < MIN_SLOTS), plus ``ahead``.
BIG_SLOT = (16 << 20) + 1


@pytest.mark.parametrize("kind", ["private-slots", "node-group"])
@pytest.mark.parametrize("ahead", [0, 3])
def test_distributor_keeps_ahead_more_chunks_valid(expected, kind, ahead):
    """A batch stays valid until the rank's second following read; a distributor told
    ``ahead`` keeps that many more chunks valid (a prefetch thread's reads)."""
    per_rank, k = B, 1
    d, topo = make_distributor(kind, per_rank)
    d.ahead = ahead
    sched = Stream(N, B, d.lo, d.count, k)
    d.setup(sched, BIG_SLOT if kind == "node-group" else 1 << 16)
    try:
        held = []
        for seq in range(12):
            (idx, vals), = hand_off(d, seq, seq, sched, expected)
            held.append((d.batch(seq, 0, idx), vals))
            # The batch just handed out, and those of the 1 + ahead hand-offs before it.
            for b, want in held[-(2 + ahead):]:
                assert [bytes(x) for x in b] == want, (seq, b.indices.tolist())
    finally:
        d.close(5.0, agree=True)
        if topo is not None:
            topo.free()


def test_private_gives_each_chunk_fresh_memory(expected):
    d, _ = make_distributor("private", B)
    sched = Stream(N, B, 0, B, 1)
    d.setup(sched, 1 << 16)
    (idx, vals), = hand_off(d, 0, 0, sched, expected)
    first = d.batch(0, 0, idx)
    for seq in range(1, 30):
        hand_off(d, seq, seq, sched, expected)
    assert [bytes(x) for x in first] == vals
    d.close(5.0, agree=True)


def test_private_slots_rotate_a_fixed_set_of_buffers(expected):
    d, _ = make_distributor("private-slots", B)
    d.ahead = 1
    sched = Stream(N, B, 0, B, 1)
    d.setup(sched, 1 << 16)
    bufs = [d.reserve(seq, 100) for seq in range(8)]
    assert d.nslots == PrivateSlots.SLOTS + 1
    assert len({id(b) for b in bufs}) == d.nslots   # no new memory per chunk
    d.close(5.0, agree=True)


# ------------------------------------------------------------------ coalesce
def _is_pow2(k: int) -> bool:
    return k >= 1 and k & (k - 1) == 0


def test_coalesce_picks_a_power_of_two_nearest_below_the_target():
    for batch_bytes in (1.0, 100.0, 3100.0, 25_000.0, 1e7):
        for target in (1, 4096, 1 << 19, 4 << 20, 1 << 30):
            for max_batches in (1, 2, 16, 1024):
                k = Coalesce(target).batches(batch_bytes, max_batches)
                case = (batch_bytes, target, max_batches, k)
                assert _is_pow2(k) and 1 <= k <= max_batches, case
                if k > 1:
                    assert k * batch_bytes <= target, case            # below the target ...
                if k < max_batches:
                    assert 2 * k * batch_bytes > target, case         # ... and the nearest


def test_coalesce_off_reads_one_batch_per_chunk():
    assert Coalesce(0).batches(1.0, 1024) == 1
    assert Coalesce(1 << 30).batches(10.0, 0) == 1   # fewer records than a batch


def test_coalesce_keeps_a_power_of_two_under_an_odd_cap():
    k = Coalesce(1 << 30).batches(100.0, 6)
    assert _is_pow2(k) and k <= 6


# ------------------------------------------------------------------ stagger
class _Request:
    def __init__(self, poll):
        self._poll, self._done = poll, None

    def test(self):
        if self._done is None:
            flag, msg = self._poll()
            if not flag:
                return False, None
            self._done = msg
        return True, self._done

    def Test(self):
        return self.test()[0]

    def Cancel(self):
        pass


class BoardComm:
    """The readers' communicator as Stagger uses it (isend, irecv), for ``size`` readers
    that are threads of this process; sends are buffered on a shared board."""

    def __init__(self, board: dict, lock, rank: int, size: int):
        self.board, self.lock, self.rank, self.size = board, lock, rank, size

    @classmethod
    def group(cls, size: int) -> list[BoardComm]:
        board, lock = defaultdict(deque), threading.Lock()
        return [cls(board, lock, r, size) for r in range(size)]

    def isend(self, obj, dest: int, tag: int):
        with self.lock:
            self.board[(self.rank, dest, tag)].append(obj)
        return _Request(lambda: (True, None))

    def irecv(self, source: int, tag: int):
        def poll():
            with self.lock:
                box = self.board[(source, self.rank, tag)]
                return (True, box.popleft()) if box else (False, None)
        return _Request(poll)


@pytest.mark.parametrize("readers,size", [(4, 2), (3, 1), (5, 2)])
def test_stagger_group_starts_only_after_the_whole_group_before_it_read(readers, size,
                                                                        monkeypatch):
    """Group g's turn t starts after every reader of group g-1 ended its turn t. The slow
    reader of each group is its first on even turns, its last on odd ones: a group released
    by partners alone, or by a first reader that does not wait for the others, shows."""
    monkeypatch.setenv("LMDBIO_TIMEOUT", "5")
    turns, log, errors = 4, [], []

    def reader(comm):
        try:
            st = Stagger(comm, size)
            group = range(st.first, st.last + 1)
            for t in range(turns):
                with st.turn(OFF, t):
                    log.append(("start", comm.rank, t))
                    time.sleep(0.03 if comm.rank == group[-(t % 2)] else 0.0)
                    log.append(("end", comm.rank, t))
            st.finish()
        except BaseException as exc:   # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(c,), daemon=True)
               for c in BoardComm.group(readers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads)
    at = {ev: i for i, ev in enumerate(log)}
    assert len(at) == 2 * readers * turns
    for t in range(turns):
        for r in range(size, readers):
            before = range((r // size - 1) * size, (r // size) * size)
            assert all(at[("end", p, t)] < at[("start", r, t)] for p in before), (r, t, log)


def test_stagger_waits_are_bounded_and_a_failed_turn_is_not_passed(monkeypatch):
    monkeypatch.setenv("LMDBIO_TIMEOUT", "0.2")
    first, second = (Stagger(c, 1, names=(10, 11)) for c in BoardComm.group(2))
    with pytest.raises(ValueError):
        with first.turn(OFF, 0):
            raise ValueError("the read failed")
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="a reader of the previous stagger group, did not "
                                               "pass its turn 0") as raised:
        with second.turn(OFF, 0):
            pytest.fail("the second group read without its turn")
    assert time.monotonic() - t0 < 5
    # Whom it waited for is a field: rank 10 (the first group's reader), never rank 11 itself.
    assert raised.value.missing == (10,) and raised.value.limit == 0.2


def test_stagger_alone_never_waits_and_no_stagger_is_no_turn():
    topo = make_topology(MPI.COMM_SELF)
    try:
        st = Stagger.join(topo, None)
        assert (st.size, st.prev, st.next, st.names) == (1, None, None, (0,))
        rec = PhaseRecorder(0)
        for t in range(3):
            with st.turn(rec, t):
                pass
        st.finish()
        assert [r["phase"] for r in rec.rows] == ["stagger_wait"] * 3
    finally:
        topo.free()
    ran = []
    with NoStagger().turn(OFF, 0):
        ran.append(1)
    with pytest.raises(KeyError):
        with NoStagger().turn(OFF, 1):
            raise KeyError("x")
    NoStagger().finish()
    assert ran == [1]


# ------------------------------------------------------------------ prefetch
def _until(cond, limit: float = 5.0) -> bool:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("lmdbio-prefetch")]


def test_prefetch_delivers_in_order_and_stops_at_its_bound():
    reads = []

    def read(t):
        reads.append(t)
        return ("batch", t)

    pf = Prefetch(read, 5, 30, depth=3, rank=7)
    try:
        # Nothing taken: ``depth`` batches queued and one read waiting to be queued.
        assert _until(lambda: len(reads) == 4)
        time.sleep(0.1)
        assert reads == [5, 6, 7, 8] and pf.bound == 9
        assert [pf.next(), pf.next()] == [("batch", 5), ("batch", 6)]
        assert _until(lambda: len(reads) == 6)
        time.sleep(0.1)
        assert reads == list(range(5, 11)) and pf.bound == 11
        assert [pf.next() for _ in range(7, 30)] == [("batch", t) for t in range(7, 30)]
        assert pf.bound == 30
        with pytest.raises(LmdbioError, match="rank 7: no batch 30 to read ahead"):
            pf.next()
        assert reads == list(range(5, 30))
    finally:
        pf.close()
    assert not _prefetch_threads()


def test_prefetch_drain_reads_exactly_to_its_bound():
    reads = []

    def read(t):
        time.sleep(0.01)
        reads.append(t)
        return t

    pf = Prefetch(read, 0, 100, depth=4, rank=0)
    assert pf.next() == 0
    bound = pf.bound
    pf.close(drain=True)
    # However far the thread had got: every rank that took the same batches read the same.
    assert bound == 6 and reads == list(range(bound))
    assert not _prefetch_threads()
    pf.close(drain=True)   # idempotent
    with pytest.raises(LmdbioError, match="stopped"):
        pf.next()


def test_prefetch_close_stops_after_the_read_in_flight():
    reads, gate = [], threading.Event()

    def read(t):
        reads.append(t)
        gate.wait(5)
        return t

    pf = Prefetch(read, 0, 100, depth=2, rank=0)
    assert _until(lambda: reads == [0])
    closer = threading.Thread(target=pf.close)
    closer.start()
    time.sleep(0.05)
    gate.set()
    closer.join(5)
    assert not closer.is_alive() and not _prefetch_threads()
    assert reads == [0]


def test_prefetch_errors_surface_in_order_naming_rank_and_batch():
    reads = []

    def read(t):
        reads.append(t)
        if t == 3:
            raise ValueError("simulated EIO")
        return t

    pf = Prefetch(read, 0, 10, depth=2, rank=5)
    assert [pf.next() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(LmdbioError, match=r"rank 5: the background read of batch 3 failed: "
                                          r"ValueError: simulated EIO") as err:
        pf.next()
    assert isinstance(err.value.__cause__, ValueError)
    with pytest.raises(LmdbioError, match="stopped"):
        pf.next()
    assert reads == [0, 1, 2, 3] and not _prefetch_threads()


def test_prefetch_error_read_while_draining_raises_at_close():
    def read(t):
        if t == 2:
            raise OSError(5, "simulated EIO")
        return t

    pf = Prefetch(read, 0, 10, depth=3, rank=1)
    assert pf.next() == 0
    with pytest.raises(LmdbioError, match="rank 1: the background read of batch 2, read ahead "
                                          "past where the epoch was left, failed"):
        pf.close(drain=True)
    assert not _prefetch_threads()


def test_check_prefetch():
    for bad in (-1, True, 1.5, "2"):
        with pytest.raises(ConfigurationError, match="prefetch must be an integer"):
            check_prefetch(bad, True, "lmdbio-direct")
    assert check_prefetch(0, False, "lmdb-lmm") == 0
    assert check_prefetch(3, True, "lmdbio-direct") == 3
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        with pytest.raises(ConfigurationError, match="MPI_THREAD_MULTIPLE"):
            check_prefetch(3, False, "lmdb-lmm")
    else:
        assert check_prefetch(3, False, "lmdb-lmm") == 3


# ------------------------------------------------------------------ epoch rows
@pytest.mark.parametrize("mode", [True, "shard"])
def test_epoch_rows_shuffled_differ_by_epoch(mode):
    """Each epoch its own order, not file order (every record once, the same rows on every
    rank: tests/test_epoch_property.py)."""
    plan = EpochPlan(shuffle=mode, seed=11, block=16, window=3)
    a = epoch_rows(plan, N, B, 2, 2, 1)
    assert not np.array_equal(a.rows, epoch_rows(plan, N, B, 2, 2, 2).rows)
    assert not np.array_equal(a.rows[:N // B], epoch_rows(EpochPlan(), N, B, 2, 2, 1).rows[:N // B])


def test_epoch_rows_refuse_what_they_cannot_order():
    with pytest.raises(ConfigurationError, match="needs its block"):
        epoch_rows(EpochPlan(shuffle=True), N, B, 1, 1, 0)
    with pytest.raises(ConfigurationError):
        epoch_rows(EpochPlan(), 5, B, 1, 1, 0)       # a batch larger than the file
    with pytest.raises(ConfigurationError):
        epoch_rows(EpochPlan(), N, B, 1, 1, -1)
    with pytest.raises(ConfigurationError, match="shuffle must be"):
        EpochPlan(shuffle="sideways")
    with pytest.raises(ConfigurationError, match="last_batch must be"):
        EpochPlan(last_batch="keep")
    with pytest.raises(ConfigurationError, match="shuffle_window"):
        EpochPlan(window=0)


# ------------------------------------------------------------------ window
def used_mask(er, lo: int, count: int, share: int) -> np.ndarray:
    """Which of a reader's records (rows x its columns) some rank delivers."""
    cols = np.arange(lo, lo + count)
    used = np.zeros((len(er.rows), count), dtype=bool)
    used[:er.batches] = True
    used[er.batches - 1] = cols % share < er.keep[cols // share]
    return used


class Asking:
    """The locator as Window sees it, noting the positions each window locate asks for."""

    def __init__(self, locator):
        self.locator, self.wants = locator, []

    def locate_positions(self, want, t: int, rec):
        self.wants.append(np.array(want))
        return self.locator.locate_positions(want, t, rec)


@pytest.mark.parametrize("policy", ["short", "pad", "drop"])
@pytest.mark.parametrize("rank", [0, 1])
def test_window_gathers_what_direct_locate_reads(db, expected, policy, rank):
    """A shuffled epoch through Window (each window located once, as extents; chunks gathered
    from memory) gives each chunk the records a direct locate of that chunk gives."""
    nprocs, k, t0, seed, epoch = 2, 2, 4, 5, 1
    share = B // nprocs
    lo, count = rank * share, share
    plan = EpochPlan(shuffle=True, seed=seed, block=16, window=3, last_batch=policy)
    er = epoch_rows(plan, N, B, nprocs, k, epoch)
    sched = EpochSchedule(Stream(N, B, lo, count, k), er.rows, t0)
    windows = record_windows(N, plan.block, plan.window, seed, epoch)
    used = used_mask(er, lo, count, share)
    path = db_file(db)
    fetcher = Preadv()
    fetcher.open(path)
    try:
        with opened("index", db) as loc:
            loc.setup(MPI.COMM_SELF, MPI.COMM_SELF, sched, {})
            win = Window(sched, er, share, windows)
            asked = Asking(loc)
            for chunk in range(t0 // k, t0 // k + len(er.rows) // k):
                alloc = Alloc(slack=8)
                todo = win.locate(chunk, asked, sched, alloc, OFF)
                fetched = [fetcher.fetch(located, into, {}) for located, into in todo]
                offsets, sizes = win.serve(chunk, fetched, alloc, OFF)
                got = sliced(alloc.buf, offsets, sizes)
                direct = take(loc.locate(chunk, sched, OFF), path)
                rows = slice(chunk * k - t0, chunk * k - t0 + k)
                mask = used[rows].ravel()
                pos = er.rows[rows, lo:lo + count].ravel()
                assert [g for g, m in zip(got, mask) if m] == \
                    [d for d, m in zip(direct, mask) if m] == \
                    [expected[p] for p, m in zip(pos.tolist(), mask) if m], (policy, chunk)
                assert all(s == 0 for s, m in zip(sizes.tolist(), mask) if not m)
            win.close()
    finally:
        fetcher.close()
    # Each locate asks for one window's records, ascending; without a short or padded last
    # batch reaching back to the first window, each window is read once, whole.
    read = [np.unique(windows[want]).tolist() for want in asked.wants]
    assert all(len(w) == 1 for w in read)
    assert all((np.diff(want) > 0).all() for want in asked.wants)
    if policy == "drop":
        flat = [w[0] for w in read]
        assert len(flat) == len(set(flat)) > 2
        mine = er.rows[:er.batches, lo:lo + count].ravel()
        assert sorted(np.concatenate(asked.wants).tolist()) == sorted(mine.tolist())

