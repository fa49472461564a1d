"""The Reader under real MPI: records, topologies, errors and failures (issue #4, #5)."""

import re
import subprocess
import time

import pytest

import lmdbio
from conftest import run_mpi

pytestmark = pytest.mark.mpi

TOPOLOGIES = "None:1,1:1,2:1,None:2,2:2"
BUILT = ",".join(lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS)  # the papers' seven, lmdb-get, direct, auto


def _entries(db) -> int:
    import lmdb

    with lmdb.open(str(db), readonly=True, lock=False) as env:
        return env.stat()["entries"]


def assert_every_record_checked(stdout: str, dbs, nprocs: int, per_rank: int, extra: int,
                                topologies: str) -> None:
    """check_reader.py's summary line: no failure, and every batch of every case was checked."""
    found = re.findall(r"^checked (\d+) records on (\d+) ranks; (\d+) failures$", stdout, re.M)
    assert len(found) == 1, f"no summary line from check_reader.py:\n{stdout}"
    checked, ranks, failures = map(int, found[0])
    assert (failures, ranks) == (0, nprocs)
    B = per_rank * nprocs
    cases = len(BUILT.split(",")) * len(topologies.split(","))
    assert checked == cases * sum((-(-_entries(db) // B) + extra) * B for db in dbs)


@pytest.mark.parametrize("nprocs", [pytest.param(n, marks=pytest.mark.slow) if n != 2 else n
                                    for n in (1, 2, 3, 4)])
def test_every_variant_delivers_the_partition(datasets, nprocs):
    dbs = [datasets[k] for k in ("cifar10", "jpeg", "lmdb10", "reused")]
    out = run_mpi("check_reader.py", nprocs, "--variants", BUILT, "--topologies", TOPOLOGIES,
                  "--per-rank", 6, *dbs, timeout=400)
    assert_every_record_checked(out.stdout, dbs, nprocs, 6, 3, TOPOLOGIES)


@pytest.mark.slow
def test_imagenet_records_and_small_coalescing(datasets):
    # 196 KB records, coalescing across the epoch wrap, stagger groups of 1.
    out = run_mpi("check_reader.py", 4, "--variants", BUILT, "--topologies", "None:1,1:1",
                  "--per-rank", 2, "--extra", 9, "--coalesce-bytes", 1 << 20,
                  "--stagger-size", 1, datasets["imagenet"])
    assert_every_record_checked(out.stdout, [datasets["imagenet"]], 4, 2, 9, "None:1,1:1")


@pytest.mark.slow
def test_non_readers_never_open_the_database(datasets):
    out = run_mpi("check_nonreaders.py", 4, datasets["cifar10"])
    assert "ok" in out.stdout


def test_bad_arguments_raise_on_every_rank(datasets, tmp_path):
    import lmdb

    empty = tmp_path / "empty"
    lmdb.open(str(empty)).close()
    for variant in ("lmdb", "lmdbio-lmm-dio"):
        out = run_mpi("check_errors.py", 3, datasets["cifar10"], empty, variant, timeout=120)
        text = out.stdout
        assert "does not divide among 3 ranks" in text
        assert "must be positive" in text
        assert "does not exist" in text
        assert "holds no records" in text
        assert "PROV computes extents for direct reads" in text
        # The rank that lacked the path names itself; the others repeat its message.
        assert "rank 2:" in text


@pytest.mark.parametrize("mode,needle", [("truncate", "short read"),
                                         ("raise", "simulated failure")])
def test_a_failing_rank_ends_the_job(datasets, tmp_path, mode, needle):
    import shutil

    db = tmp_path / "db"
    shutil.copytree(datasets["cifar10"], db)
    t0 = time.monotonic()
    try:
        out = run_mpi("fail_midrun.py", 3, db, mode, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a failing rank left the job hanging")
    assert out.returncode != 0
    assert needle in out.stderr
    assert "finished without noticing" not in out.stdout
    assert time.monotonic() - t0 < 60


def test_optimization_counters(datasets):
    """DM walks only its own records, COAL divides read calls, STAG groups never overlap."""
    out = run_mpi("check_counters.py", 4, datasets["one_txn"], timeout=300)
    assert out.stdout.strip().endswith("ok")
    assert "DM walked per reader" in out.stdout
