"""The Reader under real MPI: errors and failures (issue #4, #5); the records of every variant
and topology are checked in tests/mpi_ranks/test_records.py."""

import subprocess
import time

import pytest

from conftest import run_mpi

pytestmark = pytest.mark.mpi


@pytest.mark.gate
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
