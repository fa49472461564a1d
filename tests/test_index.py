"""Record index vs py-lmdb: offsets, sizes, keys and values for many DB shapes; snapshots."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corrupt_helpers import lmdb_items, make_db
from lmdbio import format as fmt
from lmdbio.errors import LmdbFormatError, SnapshotError
from lmdbio.recordindex import build_index, open_snapshot

FORMATS = ["0.9", "1.0"]


def assert_matches(path, fmt_name="0.9"):
    truth = lmdb_items(path, fmt_name)
    idx = build_index(path)
    assert len(idx) == len(truth)
    assert idx.offsets.dtype == np.uint64 and idx.sizes.dtype == np.uint32
    assert idx.keys() == [k for k, _ in truth]
    assert idx.sizes.tolist() == [len(v) for _, v in truth]
    with open(idx.path, "rb") as f:
        data = f.read()
    for i, (_, v) in enumerate(truth):
        o = int(idx.offsets[i])
        assert data[o:o + len(v)] == v, f"record {i}"
    assert idx.meta.format_name == fmt_name
    assert idx.pages_read == idx.meta.branch_pages + idx.meta.leaf_pages
    return idx


def rnd(n, seed):
    return random.Random(seed).randbytes(n)


@pytest.mark.parametrize("fmt_name", FORMATS)
@pytest.mark.parametrize("shape", ["inline100", "cifar", "imagenet", "mixed", "random_order",
                                   "deletes", "long_keys", "empty_values"])
def test_index_matches_lmdb(tmp_path, fmt_name, shape):
    r = random.Random(hash(shape) & 0xFFFF)
    deletes = ()
    commit = None
    if shape == "inline100":
        items = [(b"%08d" % i, rnd(100, i)) for i in range(3000)]
    elif shape == "cifar":
        items = [(b"%08d_class%04d/img.png" % (i, i % 10), rnd(3087, i)) for i in range(1200)]
        commit = 500
    elif shape == "imagenet":
        items = [(b"%08d" % i, rnd(196_623, i)) for i in range(12)]
    elif shape == "mixed":
        items = [(b"k%06d" % i, rnd(r.choice([1, 50, 2000, 2100, 5000, 300_000]), i))
                 for i in range(150)]
        commit = 40
    elif shape == "random_order":
        items = [(rnd(r.randint(1, 40), i), rnd(r.randint(0, 6000), i + 7)) for i in range(1500)]
        commit = 300
    elif shape == "deletes":
        items = [(b"%06d" % i, rnd(r.randint(10, 5000), i)) for i in range(2000)]
        items += [(b"%06d" % i, rnd(r.randint(10, 9000), -i)) for i in range(0, 2000, 3)]  # re-puts
        deletes = [b"%06d" % i for i in range(0, 2000, 7)]
        commit = 250
    elif shape == "long_keys":
        items = [(b"x" * 450 + b"%08d" % i, rnd(r.randint(0, 300), i)) for i in range(2500)]
    else:
        items = [(b"%05d" % i, b"") for i in range(500)]
    path = make_db(tmp_path / "db", items, fmt=fmt_name, commit_every=commit, deletes=deletes)
    idx = assert_matches(path, fmt_name)
    if shape == "long_keys":
        assert idx.meta.depth >= 4
    if shape in ("cifar", "imagenet"):
        assert idx.overflow.all()
    if shape == "inline100":
        assert not idx.overflow.any()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_index_hypothesis(tmp_path_factory, data):
    fmt_name = data.draw(st.sampled_from(FORMATS))
    keys = data.draw(st.lists(st.binary(min_size=1, max_size=120), min_size=0, max_size=250,
                              unique=True))
    sizes = data.draw(st.lists(st.one_of(st.integers(0, 3000), st.integers(3000, 70_000)),
                               min_size=len(keys), max_size=len(keys)))
    commit = data.draw(st.sampled_from([None, 7, 50]))
    n_del = data.draw(st.integers(0, len(keys)))
    items = [(k, rnd(s, i)) for i, (k, s) in enumerate(zip(keys, sizes))]
    path = make_db(tmp_path_factory.mktemp("hyp") / "db", items, fmt=fmt_name,
                   commit_every=commit, deletes=keys[:n_del])
    assert_matches(path, fmt_name)


def test_keys_slices_and_read(tmp_path):
    items = [(b"%06d" % i, rnd(i % 300, i)) for i in range(2000)]
    path = make_db(tmp_path / "db", items)
    idx = build_index(path)
    assert idx.keys(5, 9) == [b"000005", b"000006", b"000007", b"000008"]
    assert idx.keys(1990) == [b"%06d" % i for i in range(1990, 2000)]
    assert idx.keys(10, 10) == []
    assert idx.read(123) == items[123][1]
    assert build_index(path / "data.mdb").offsets.tolist() == idx.offsets.tolist()


def test_empty_db(tmp_path):
    path = make_db(tmp_path / "db", [])
    idx = build_index(path)
    assert len(idx) == 0 and idx.keys() == [] and idx.meta.root is None


def test_read_meta_both_formats(tmp_path):
    for fmt_name, version, hdr in (("0.9", 1, 16), ("1.0", 3, 24)):
        path = make_db(tmp_path / fmt_name, [(b"a", b"b")] * 1, fmt=fmt_name)
        m = fmt.read_meta(path)
        assert (m.format_version, m.header_size, m.psize, m.entries) == (version, hdr, 4096, 1)
        with open(path / "data.mdb", "rb") as f:
            assert fmt.read_meta(f.fileno()).txnid == m.txnid


def test_db_file_errors(tmp_path):
    from lmdbio.errors import LmdbioError

    with pytest.raises(LmdbioError, match="does not exist"):
        fmt.db_file(tmp_path / "nope")
    with pytest.raises(LmdbioError, match="without data.mdb"):
        fmt.db_file(tmp_path)


# ------------------------------------------------------------------ snapshots

WRITER = textwrap.dedent("""
    import lmdb, os, random, sys, time
    path, seconds, lib = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    env = lmdb.open(path, map_size=1 << 30, lib_version=lib)
    r = random.Random(1)
    gen = 1
    end = time.time() + seconds
    while time.time() < end:
        with env.begin(write=True) as txn:
            for _ in range(40):
                k = b"%05d" % r.randrange(400)
                if r.random() < 0.3:
                    txn.delete(k)
                else:
                    v = k + b"|%08d|" % gen
                    txn.put(k, v + bytes([gen % 251]) * r.choice([50, 3000, 9000]))
        gen += 1
    env.close()
    print(gen)
""")


def _value_ok(key: bytes, value: bytes) -> bool:
    head = key + b"|"
    if not value.startswith(head):
        return False
    gen = int(value[len(head):len(head) + 8])
    fill = value[len(head) + 9:]
    return fill == bytes([gen % 251]) * len(fill)


@pytest.mark.gate
@pytest.mark.parametrize("fmt_name", FORMATS)
def test_snapshot_under_concurrent_writer(tmp_path, fmt_name):
    """A writer deletes and re-puts while readers pread: every value equals the snapshot's."""
    items = [(b"%05d" % i, b"%05d|%08d|" % (i, 0) + bytes([0]) * 3000) for i in range(400)]
    path = make_db(tmp_path / "db", items, fmt=fmt_name)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "3", str(0 if fmt_name == "0.9" else 1)],
                              stdout=subprocess.PIPE, text=True)
    seen_txnids = set()
    try:
        fd = os.open(path / "data.mdb", os.O_RDONLY)
        deadline = time.time() + 2.5
        rounds = 0
        while time.time() < deadline:
            with open_snapshot(path) as snap:
                idx = snap.build_index()
                snap.check(idx)
                seen_txnids.add(snap.txnid)
                truth = [(bytes(k), bytes(v)) for k, v in snap.txn.cursor()]
                assert idx.keys() == [k for k, _ in truth]
                half = len(idx) // 2
                time.sleep(0.05)  # let the writer commit (and recycle freed pages) meanwhile
                for i in range(len(idx)):
                    if i == half:
                        time.sleep(0.05)
                    v = os.pread(fd, int(idx.sizes[i]), int(idx.offsets[i]))
                    assert v == truth[i][1], f"round {rounds} record {i}"
                    assert _value_ok(truth[i][0], v)
            rounds += 1
        os.close(fd)
    finally:
        out, _ = writer.communicate(timeout=30)
    assert writer.returncode == 0
    assert int(out) > 20, "writer committed too little for the test to mean anything"
    assert len(seen_txnids) > 3


def test_snapshot_check_refuses_other_snapshot(tmp_path):
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 100) for i in range(100)])
    with open_snapshot(path) as s1:
        idx = s1.build_index()
        s1.check(idx)
        # py-lmdb allows one Environment per file per process: write from another.
        subprocess.run([sys.executable, "-c", "import lmdb,sys; e=lmdb.open(sys.argv[1]); "
                        "t=e.begin(write=True); t.put(b'new', b'x'); t.commit()", str(path)],
                       check=True)
        with open_snapshot(path) as s2:
            assert s2.txnid > s1.txnid
            with pytest.raises(SnapshotError, match="rebuild"):
                s2.check(idx)
            with pytest.raises(SnapshotError):
                s2.check(s1.txnid)
            assert len(s2.build_index()) == 101
        # The old snapshot still sees its own tree.
        assert len(s1.build_index()) == 100
    with pytest.raises(SnapshotError, match="closed"):
        s1.check(idx)


# ------------------------------------------------------------------ check_tree

def test_check_tree_returns_the_current_meta(tmp_path):
    from lmdbio.recordindex import check_tree

    path = make_db(tmp_path / "db", [(b"%06d" % i, rnd(i % 5000, i)) for i in range(800)],
                   commit_every=200)
    assert check_tree(path) == fmt.read_meta(path)
    assert check_tree(path / "data.mdb").entries == 800


@pytest.mark.gate
@pytest.mark.parametrize("fmt_name", FORMATS)
def test_check_tree_beside_a_writer(tmp_path, fmt_name, monkeypatch):
    """A live writer recycles pages under an unlocked walk: check_tree retries, never calls
    a healthy file damaged. (Every call walks: no stamp stands in for a version seen before.)"""
    from lmdbio.recordindex import check_tree

    monkeypatch.setenv("LMDBIO_TRUST_CHECKS", "0")

    items = [(b"%05d" % i, b"%05d|%08d|" % (i, 0) + bytes([0]) * 3000) for i in range(400)]
    path = make_db(tmp_path / "db", items, fmt=fmt_name)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "3",
                               str(0 if fmt_name == "0.9" else 1)], stdout=subprocess.PIPE, text=True)
    seen = set()
    try:
        for _ in range(400):
            try:
                seen.add(check_tree(path).txnid)
            except SnapshotError:
                pass   # the writer outran every retry: allowed, it is not a format error
    finally:
        out, _ = writer.communicate(timeout=30)
    assert writer.returncode == 0
    assert len(seen) > 3, "the writer committed too little during the checks"


def test_check_tree_walks_a_file_version_once(tmp_path, monkeypatch):
    """A passed walk is stamped (lmdbio.verified): the same file version skips it, a changed
    file (ctime moves) or a new commit is walked again, and LMDBIO_TRUST_CHECKS=0 always walks."""
    import lmdbio.recordindex as index
    from lmdbio import verified

    monkeypatch.setenv("LMDBIO_CACHE", str(tmp_path / "cache"))
    path = make_db(tmp_path / "db", [(b"%06d" % i, rnd(i % 5000, i)) for i in range(300)])
    walks = []
    real = index._walk
    monkeypatch.setattr(index, "_walk", lambda fd, meta: walks.append(meta.txnid) or real(fd, meta))
    index.check_tree(path)
    index.check_tree(path)
    assert len(walks) == 1
    assert len(list((tmp_path / "cache" / "tree-verified").iterdir())) == 1
    # Same bytes, new ctime: walked again.
    os.utime(path / "data.mdb")
    index.check_tree(path)
    assert len(walks) == 2
    # A garbled stamp is "not checked yet".
    for f in (tmp_path / "cache" / "tree-verified").iterdir():
        f.write_text("{not json")
    index.check_tree(path)
    assert len(walks) == 3
    monkeypatch.setenv(verified.TRUST_ENV, "0")
    index.check_tree(path)
    index.check_tree(path)
    assert len(walks) == 5


def test_a_file_damaged_after_its_walk_is_walked_again(tmp_path, monkeypatch):
    """The stamp of a good version does not cover the same file damaged later: the damage is
    an LmdbFormatError, not a crash in LMDB's C code."""
    from lmdbio.recordindex import check_tree

    monkeypatch.setenv("LMDBIO_CACHE", str(tmp_path / "cache"))
    path = make_db(tmp_path / "db", [(b"%06d" % i, rnd(i % 5000, i)) for i in range(300)])
    meta = check_tree(path)
    with open(path / "data.mdb", "r+b") as f:     # the root page's header: not a page any more
        f.seek(meta.root * meta.psize)
        f.write(b"\xff" * 16)
    with pytest.raises(LmdbFormatError):
        check_tree(path)


GROW = textwrap.dedent("""
    import lmdb, sys
    env = lmdb.open(sys.argv[1], map_size=1 << 27, lib_version=int(sys.argv[2]))
    with env.begin(write=True) as txn:
        for i in range(600):
            txn.put(b"g%05d" % i, bytes([i % 251]) * 40000)
    env.close()
""")


@pytest.mark.parametrize("fmt_name", ["0.9", "1.0"])
def test_a_reader_opened_before_a_writer_grew_the_map_adopts_it(tmp_path, fmt_name):
    """This process opens the file at its small size; another process opens it with a larger
    map_size and writes 24 MB past it. The next read transaction meets MDB_MAP_RESIZED: with the
    environment used once, it adopts the new size and sees the writer's records; with a second
    use holding it, it refuses with an error that says what to do (a remap would pull the map
    from under the other reader)."""
    from lmdbio.errors import LmdbioError
    from lmdbio.lmdbenv import acquire, begin_pinned

    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 100) for i in range(50)], fmt=fmt_name,
                   map_size=1 << 20)
    lib = str(0 if fmt_name == "0.9" else 1)
    one = acquire(path)
    other = acquire(path)          # a second use (another Reader or Snapshot of this file)
    try:
        subprocess.run([sys.executable, "-c", GROW, str(path), lib], check=True, timeout=60)
        with pytest.raises(LmdbioError, match="another reader here holds it open"):
            begin_pinned(one.env, one.path, fd=one.fd)
        other.release()
        txn, meta = begin_pinned(one.env, one.path, fd=one.fd)
        try:
            assert txn.stat()["entries"] == 650 and meta.txnid == txn.id()
        finally:
            txn.abort()
    finally:
        other.release()
        one.release()
