"""The Reader under real MPI: a failing rank ends the job (issue #5). The records of every
variant and topology, bad arguments, non-readers and the optimizations' counters are checked
inside the ranks: tests/mpi_ranks/ (test_records, test_arguments, test_mechanisms)."""

import subprocess
import time

import pytest

from conftest import run_mpi

pytestmark = pytest.mark.mpi


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
