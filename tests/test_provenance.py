"""Provenance sidecars: extents equal the index, runs stay few, stale/missing/damaged are refused."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrupt_helpers import make_db
from lmdbio.datasets import make_dataset
from lmdbio.errors import ProvenanceError
from lmdbio.recordindex import build_index
from lmdbio.lab.prov_offsets import arithmetic_offsets
from lmdbio.provenance import (_decode_runs, encode_runs, load_provenance, provenance_status,
                               sidecar_path, write_provenance)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """A Caffe-pattern cifar10 DB (commit every 1000) with its sidecar from the dataset writer."""
    return make_dataset(tmp_path_factory.mktemp("prov") / "cifar", "cifar10", 20_000)


def test_dataset_writer_sidecar_matches_index(cifar):
    prov = load_provenance(cifar)
    idx = build_index(cifar)
    offs, sizes = prov.extents(0, prov.n)
    assert offs.dtype == np.uint64 and sizes.dtype == np.uint32
    assert np.array_equal(offs, idx.offsets) and np.array_equal(sizes, idx.sizes)
    # Caffe's pattern compresses to a few hundred runs per 20,000 records.
    assert prov.n_runs < 600, prov.n_runs
    assert os.path.getsize(sidecar_path(cifar)) < 64 * 1024
    r = random.Random(0)
    with open(idx.path, "rb") as f:
        fd = f.fileno()
        for _ in range(50):
            a = r.randrange(prov.n)
            c = r.randrange(1, prov.n - a + 1)
            o, s = prov.extents(a, c)
            assert np.array_equal(o, idx.offsets[a:a + c]) and np.array_equal(s, idx.sizes[a:a + c])
            prov.verify(fd, a, c)
    assert provenance_status(cifar) == "present"


@pytest.mark.parametrize("shape", ["inline", "mixed", "deletes"])
def test_write_provenance_any_db(tmp_path, shape):
    r = random.Random(1)
    if shape == "inline":
        items = [(b"%06d" % i, r.randbytes(100)) for i in range(3000)]
        deletes = ()
    elif shape == "mixed":
        items = [(b"%06d" % i, r.randbytes(r.choice([10, 3000, 70_000]))) for i in range(300)]
        deletes = ()
    else:
        items = [(r.randbytes(12), r.randbytes(r.randint(0, 9000))) for i in range(800)]
        deletes = [k for k, _ in items[::5]]
    path = make_db(tmp_path / "db", items, commit_every=97, deletes=deletes)
    side = write_provenance(path)
    assert side == sidecar_path(path) and side.is_file()
    prov = load_provenance(path / "data.mdb")
    idx = build_index(path)
    o, s = prov.extents(0, prov.n)
    assert np.array_equal(o, idx.offsets) and np.array_equal(s, idx.sizes)
    with open(idx.path, "rb") as f:
        prov.verify(f.fileno(), 0, prov.n)
        prov.verify(f.fileno(), prov.n // 3, 7)
    assert prov.extents(5, 0)[0].size == 0
    with pytest.raises(ValueError, match="do not wrap"):
        prov.extents(prov.n - 1, 2)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=80), st.data())
def test_runs_roundtrip(steps, data):
    v = np.cumsum(np.array([7] + steps, dtype=np.int64)) * 4096
    start, base, stride = encode_runs(v)
    assert start[0] == 0 and np.all(np.diff(start) > 0)
    lo = data.draw(st.integers(0, len(v)))
    hi = data.draw(st.integers(lo, len(v)))
    assert np.array_equal(_decode_runs(start, base, stride, len(v), lo, hi), v[lo:hi])


def test_missing_sidecar(tmp_path):
    path = make_db(tmp_path / "db", [(b"a", b"b")])
    assert provenance_status(path) == "missing"
    with pytest.raises(ProvenanceError, match="lmdbio index"):
        load_provenance(path)


def test_stale_sidecar_names_the_fix(tmp_path):
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 3000) for i in range(50)])
    write_provenance(path)
    subprocess.run([sys.executable, "-c", "import lmdb,sys; e=lmdb.open(sys.argv[1]); "
                    "t=e.begin(write=True); t.put(b'zzz', b'x'*5000); t.commit()", str(path)],
                   check=True)
    assert provenance_status(path) == "stale"
    with pytest.raises(ProvenanceError, match=r"stale.*txnid.*lmdbio index"):
        load_provenance(path)
    prov = load_provenance(path, check_stale=False)
    assert prov.n == 50
    write_provenance(path)
    assert load_provenance(path).n == 51


def test_damaged_sidecar(tmp_path):
    path = make_db(tmp_path / "db", [(b"a", b"b")])
    sidecar_path(path).write_bytes(b"not an npz file")
    assert provenance_status(path) == "stale"
    with pytest.raises(ProvenanceError, match="unreadable.*lmdbio index"):
        load_provenance(path)


def test_verify_detects_wrong_offsets(tmp_path):
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 3000) for i in range(300)])
    write_provenance(path)
    prov = load_provenance(path)
    prov.run_base = prov.run_base + 100  # as if the file were another
    with open(path / "data.mdb", "rb") as f:
        with pytest.raises(ProvenanceError, match="does not match"):
            prov.verify(f.fileno(), 0, 10)
    inline = make_db(tmp_path / "inl", [(b"%04d" % i, b"v" * 100) for i in range(300)])
    write_provenance(inline)
    prov = load_provenance(inline)
    prov.run_base = prov.run_base % prov.psize + prov.psize  # lands in meta page 1
    with open(inline / "data.mdb", "rb") as f:
        with pytest.raises(ProvenanceError, match="does not match"):
            prov.verify(f.fileno(), 0, 3)
        prov.run_base = prov.run_base + 10**9  # past the end
        with pytest.raises(ProvenanceError, match="sidecar says offset 10000"):
            prov.verify(f.fileno(), 0, 3)


def test_verify_detects_a_one_page_shift(tmp_path):
    # Shifted by exactly one page, every offset still lands on a well-formed
    # overflow page: only the leaf's node can tell.
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 3000) for i in range(300)])
    write_provenance(path)
    prov = load_provenance(path)
    with open(path / "data.mdb", "rb") as f:
        prov.verify(f.fileno(), 0, 300)
        prov.run_base = prov.run_base + prov.psize
        with pytest.raises(ProvenanceError, match="the leaf says"):
            prov.verify(f.fileno(), 10, 50)


@pytest.mark.parametrize("fmt_name,hdr", [("0.9", 16), ("1.0", 24)])
@pytest.mark.parametrize("key_bytes,value_bytes,n", [(8, 3087, 2000), (31, 10_000, 700),
                                                     (500, 3087, 3000), (8, 196_623, 150)])
def test_arithmetic_model_exact_for_one_transaction(tmp_path, fmt_name, hdr, key_bytes, value_bytes, n):
    items = [(b"%0*d" % (key_bytes, i), b"x" * value_bytes) for i in range(n)]
    path = make_db(tmp_path / "db", items, fmt=fmt_name, map_size=1 << 31)
    truth = build_index(path).offsets
    model = arithmetic_offsets(n, record_bytes=value_bytes, key_bytes=key_bytes, header_size=hdr)
    assert np.array_equal(model, truth)


def test_arithmetic_model_drifts_with_commits(tmp_path):
    n, every = 6000, 1000
    items = [(b"%030d" % i, b"x" * 3087) for i in range(n)]
    path = make_db(tmp_path / "db", items, commit_every=every)
    truth = build_index(path).offsets
    model = arithmetic_offsets(n, record_bytes=3087, key_bytes=30, commit_every=every)
    exact = model == truth
    # Commits (root/leaf copies, free-list pages) are modelled for the first
    # transactions; once LMDB reuses freed pages for values the model drifts.
    assert exact[:3 * every].all()
    assert not exact.all()


def test_arithmetic_model_rejects_inline_values():
    with pytest.raises(ValueError, match="inline"):
        arithmetic_offsets(10, record_bytes=100)
