"""The Reader in one process (COMM_WORLD of size 1): API, Batch, PROV checks, options."""

import shutil

import lmdb
import numpy as np
import pytest

import lmdbio
from lmdbio import ConfigurationError, Options, ProvenanceError, parse_variant


def values_of(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        out = [bytes(v) for _, v in txn.cursor()]
    env.close()
    return out


@pytest.mark.parametrize("variant", lmdbio.VARIANTS)
def test_single_rank_api(datasets, variant):
    from mpi4py import MPI

    db = datasets["cifar10"]
    expected = values_of(db)
    with lmdbio.Reader(db, batch_size=64, comm=MPI.COMM_SELF, variant=variant.upper()) as r:
        assert r.variant == variant
        for t in range(3):
            b = r.read_batch()
            assert len(b) == 64
            assert b.indices.dtype == np.int64
            assert list(b.indices) == [(t * 64 + j) % len(expected) for j in range(64)]
            assert bytes(b[0]) == expected[t * 64]
            assert [bytes(v) for v in b] == expected[t * 64:(t + 1) * 64]
        images, labels = b.as_datum_array()
        assert images.shape == (64, 3, 32, 32) and images.dtype == np.uint8
        assert labels.shape == (64,) and 0 <= labels.min() and labels.max() < 10
        rows = r.stats()
    phases = {x["phase"] for x in rows}
    assert {"setup", "read"} <= phases
    for x in rows:
        for key in ("wall_s", "user_s", "sys_s", "sleep_s", "vcsw", "ivcsw", "minflt", "majflt",
                    "bytes", "calls", "t_start", "t_end", "variant", "is_reader"):
            assert key in x, key
    assert sum(x["bytes"] for x in rows if x["phase"] == "read") >= 3 * 64 * 3072


def test_batch_views_stay_valid_until_second_following_read(datasets):
    from mpi4py import MPI

    db = datasets["cifar10"]
    expected = values_of(db)
    with lmdbio.Reader(db, 32, MPI.COMM_SELF, variant="lmdbio-lmm-dio") as r:
        b0 = r.read_batch()
        r.read_batch()
        assert [bytes(v) for v in b0] == expected[:32]


def test_prov_stale_sidecar_is_an_error_naming_the_fix(datasets, tmp_path):
    from mpi4py import MPI

    db = tmp_path / "db"
    shutil.copytree(datasets["cifar10"], db)
    env = lmdb.open(str(db))
    with env.begin(write=True) as txn:
        txn.put(b"99999999_new", b"x" * 3000)
    env.close()
    with pytest.raises(ProvenanceError, match="lmdbio index"):
        lmdbio.Reader(db, 16, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov")
    # Asked to, the reader rebuilds it and delivers the new record too.
    with lmdbio.Reader(db, 701, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov",
                       build_provenance=True) as r:
        assert bytes(r.read_batch()[700]) == b"x" * 3000


def _read_syscalls() -> int:
    """This process's read-family system calls so far (read, pread, preadv: /proc/self/io)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr"))


def test_prov_reads_no_more_than_dio_once_its_sidecar_is_checked(datasets):
    """The setup checks the whole sidecar (or finds that check stamped); per chunk PROV then
    reads what DIO reads. It re-read each chunk's first and last leaf page before: 2 preads
    more per chunk (64 read calls against DIO's 24 for these 20 one-batch chunks)."""
    from mpi4py import MPI

    calls = {}
    for variant in ("lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"):
        with lmdbio.Reader(datasets["cifar10"], 32, MPI.COMM_SELF, variant=variant,
                           build_provenance=True, coalesce_bytes=1 << 16) as r:
            r.read_batch()
            before = _read_syscalls()
            got = [r.read_batch().indices.copy() for _ in range(20)]
            calls[variant] = _read_syscalls() - before
        assert r.coalesce == 1 and np.array_equal(np.concatenate(got), np.arange(32, 32 * 21) % 700)
    assert calls["lmdbio-lmm-dio-prov"] <= calls["lmdbio-lmm-dio"], calls


def test_prov_tampered_sidecar_never_gives_wrong_data(datasets, tmp_path):
    from mpi4py import MPI

    from lmdbio.provenance import Provenance, sidecar_path

    db = tmp_path / "db"
    shutil.copytree(datasets["cifar10"], db)
    side = sidecar_path(db)
    prov = Provenance.from_file(side)
    prov.run_base = prov.run_base + 4096  # every extent one page off
    prov.save(side)
    # Caught by the setup's check of the whole sidecar (issue 23), before any record is read.
    with pytest.raises(ProvenanceError, match="does not match the file.*record 0"):
        with lmdbio.Reader(db, 16, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov") as r:
            r.read_batch()


def test_prov_edited_sidecar_bytes_are_refused(datasets, tmp_path):
    import zipfile

    from mpi4py import MPI

    from lmdbio.provenance import sidecar_path

    db = tmp_path / "db"
    shutil.copytree(datasets["cifar10"], db)
    side = sidecar_path(db)
    # Rewrite one array inside the npz without updating the digest.
    with zipfile.ZipFile(side) as z:
        members = {n: z.read(n) for n in z.namelist()}
    import io
    arr = np.load(io.BytesIO(members["run_base.npy"]))
    buf = io.BytesIO()
    np.save(buf, arr + 4096)
    members["run_base.npy"] = buf.getvalue()
    with zipfile.ZipFile(side, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(ProvenanceError, match="digest"):
        lmdbio.Reader(db, 16, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov")


def test_variant_names_parse_and_round_trip():
    for v in lmdbio.VARIANTS:
        assert parse_variant(v).name == v
        assert parse_variant(v.upper()) == parse_variant(v)
    o = Options(locate="index", fetch="pread", coalesce_bytes=1 << 20)
    assert o.name == "lmdbio-lmm-dio-coal"


@pytest.mark.parametrize("bad,match", [
    ("lmdbio-lmm-prov", "add 'dio'"),
    ("lmdbio-lmm-coal", "add 'dio'"),
    ("lmdbio-lmm-dm-dio", "drop 'dm'"),
    ("lmdbio-dio", "builds on LMM"),
    ("hdf5", "unknown variant"),
    ("lmdbio-lmm-lmm", "unknown variant"),
])
def test_impossible_variants_are_clear_errors(bad, match):
    with pytest.raises(ConfigurationError, match=match):
        parse_variant(bad)


def test_impossible_options_are_clear_errors():
    with pytest.raises(ConfigurationError, match="need byte extents"):
        Options(locate="walk", fetch="pread")
    with pytest.raises(ConfigurationError, match="COAL"):
        Options(coalesce_bytes=1 << 20)
    with pytest.raises(ConfigurationError, match="baseline"):
        Options(localized=False, stagger_size=2)


def test_plan_extents_covers_records_with_fewest_reads():
    from lmdbio.plan import plan_extents, positions_runs

    offs = np.array([100, 5000, 9000, 20, 200000])
    sizes = np.array([50, 3000, 3000, 10, 5])
    start, length, where = plan_extents(offs, sizes, max_gap=2000)
    assert list(start) == [20, 5000, 200000] and list(length) == [130, 7000, 5]
    assert list(where) == [80, 130, 4130, 0, 7130]
    assert positions_runs(8, 5, 10) == [(8, 2), (0, 3)]
    assert positions_runs(3, 25, 10) == [(3, 7), (0, 10), (0, 8)]


@pytest.mark.parametrize("t,k,batch,lo,count,n", [(0, 4, 12, 3, 3, 50), (3, 8, 12, 0, 12, 50),
                                                  (7, 2, 64, 48, 16, 700), (0, 1, 5, 0, 5, 5)])
def test_stream_block_is_record_indices_batch_by_batch(t, k, batch, lo, count, n):
    """One numpy pass per chunk gives each batch's positions as the per-batch rule does,
    across the end of the file too (the stream wraps modulo n)."""
    from lmdbio.plan import Stream, record_indices, stream_block

    block = stream_block(t, k, batch, lo, count, n)
    assert block.shape == (k, count) and block.dtype == np.int64
    for i in range(k):
        assert block[i].tolist() == record_indices((t + i) * batch + lo, count, n).tolist()
    stream = Stream(n, batch, lo, count, k)
    for c in range(3):
        want = np.concatenate([record_indices(u * batch + lo, count, n)
                               for u in range(c * k, c * k + k)])
        assert stream.chunk_positions(c).tolist() == want.tolist()
        assert [p for f, m in stream.runs(c) for p in range(f, f + m)] == (want % n).tolist()
        # The same rows as an epoch's schedule give the same chunk, as runs too.
        rows = np.stack([np.resize(record_indices(u * batch, batch, n), batch)
                         for u in range(3 * k)])
        epoch = stream.epoch(rows, 0)
        assert epoch.chunk_positions(c).tolist() == want.tolist()
        assert [p for f, m in epoch.runs(c) for p in range(f, f + m)] == want.tolist()


@pytest.mark.parametrize("n,batch,lo,count,k", [(50, 12, 3, 3, 4), (50, 12, 0, 12, 8),
                                                (700, 64, 48, 16, 2), (5, 5, 0, 5, 1),
                                                (7, 3, 1, 2, 9), (60000, 256, 16, 16, 32)])
def test_stream_chunk_block_is_stream_block_in_any_order(n, batch, lo, count, k):
    """The stream keeps its last chunk's block (the locator and the chunk's batches share it):
    every chunk asked, in any order and again, far into the stream, across the end of the
    file once or many times, is stream_block's."""
    from lmdbio.plan import Stream, stream_block

    stream = Stream(n, batch, lo, count, k)
    for c in [0, 1, 1, 0, 3, 2, 2, *range(4, 40), 10**6, 10**6 + 1, 5, 10**6 + 1]:
        got = stream.chunk_block(c)
        assert got.shape == (k, count) and got.dtype == np.int64
        assert got.tolist() == stream_block(c * k, k, batch, lo, count, n).tolist(), c
        assert stream.chunk_positions(c).tolist() == got.ravel().tolist()
    assert stream == Stream(n, batch, lo, count, k)   # what it keeps is not part of its value
