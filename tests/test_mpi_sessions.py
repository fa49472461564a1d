"""The MPI checks of tests/mpi_ranks: one ``mpiexec`` session per process count.

Each session runs pytest inside every rank (tests/mpi_ranks/conftest.py: outcomes agreed over
COMM_WORLD, rank 0 writes a JSON file); a test here reads that file, never the job's output,
and fails listing each failed inner test with its ranks and error. The inner session takes this
run's ``-m``, so an inner test marked ``gate`` runs in make check only, as one here would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from lmdbio.lab.cluster import mpiexec

RANKS = ROOT / "tests" / "mpi_ranks"
#: lmdbio's waits for peers end after this many seconds: a rank that stops fails its peers.
PEER_TIMEOUT = 20
#: Seconds a session may run before the driver kills it (a rank stuck outside lmdbio's waits).
LIMIT = {2: 300, 3: 400, 4: 400, 5: 300, 16: 600}


@pytest.fixture(scope="module")
def rank_datasets(datasets, tmp_path_factory) -> str:
    """The session's datasets and the epoch and resume checks' one, as the ranks read them."""
    from lmdbio.datasets import make_dataset

    # 203 records: no batch size used there divides it, so every policy has a last batch to cut.
    epochs = make_dataset(tmp_path_factory.mktemp("ranks") / "c", "cifar10", 203,
                          commit_every=50, seed=1)
    return json.dumps({**{k: str(v) for k, v in datasets.items()}, "cifar10_203": str(epochs)})


def run_session(nprocs: int, tests: Path, results: Path, env: dict, markexpr: str = "",
                limit: float = 300) -> tuple[int | None, str]:
    """``pytest tests`` under ``mpiexec -n nprocs``; (exit status or None if killed, output)."""
    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
           "--confcutdir", str(tests), str(tests), "-q", "-rfE", "--mpi-results", str(results)]
    if markexpr:
        cmd += ["-m", markexpr]
    # No entry-point plugins (hypothesis, anyio): each rank would import them, for nothing.
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "LMDBIO_TIMEOUT": str(PEER_TIMEOUT),
                "LMDBIO_ON_ERROR": "raise", **env}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output = proc.communicate(timeout=limit)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # mpiexec, its proxies and the ranks
        return None, proc.communicate()[0]
    return proc.returncode, output


def problems(results: Path, rc: int | None, limit: float) -> tuple[list[str], dict]:
    """What went wrong in a session, from its results file: each failed test with its ranks and
    errors, a test that never ended, no test run, or an exit status the results do not explain."""
    if not results.exists():
        return [f"no results file (exit status {rc})"], {}
    report = json.loads(results.read_text())
    out = [f"{t['nodeid']} ({t['phase']}) failed on rank(s) {t['ranks']}:\n    "
           + t["message"].replace("\n", "\n    ")
           for t in report["tests"] if t["outcome"] == "failed"]
    if rc is None:
        out.append(f"killed after {limit} s; the test running then: {report['running']}")
    elif not report["done"]:
        out.append(f"ended with exit status {rc} during {report['running']}")
    elif rc != 0 and not out:
        out.append(f"exit status {rc} (pytest's {report['exitstatus']}) with no test failed")
    if report["done"] and not any(t["outcome"] == "passed" for t in report["tests"]):
        out.append("no test ran at this size")
    return out, report


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 4, pytest.param(3, marks=pytest.mark.gate),
                                    pytest.param(5, marks=pytest.mark.gate),   # uneven groups
                                    pytest.param(16, marks=pytest.mark.gate)], ids="P{}".format)
def test_session(nprocs, rank_datasets, tmp_path, request):
    """Every test of tests/mpi_ranks at this size, in one session."""
    results, scratch = tmp_path / "results.json", tmp_path / "scratch"
    scratch.mkdir()
    rc, output = run_session(nprocs, RANKS, results, {"LMDBIO_TEST_DATASETS": rank_datasets,
                                                      "LMDBIO_TEST_SCRATCH": str(scratch)},
                             request.config.getoption("markexpr"), LIMIT[nprocs])
    found, _ = problems(results, rc, LIMIT[nprocs])
    if found:
        pytest.fail(f"mpiexec -n {nprocs} pytest tests/mpi_ranks: " + "\n".join(found)
                    + f"\n--- rank 0's output, its end:\n{output[-3000:]}", pytrace=False)


HARNESS_CHECK = '''
import pytest
from conftest import sizes


@pytest.fixture
def broken_on_rank_1(comm):
    if comm.rank == 1:
        raise RuntimeError("setup broke")
    return comm


@sizes(fast=(2,))
def test_setup_fails_on_one_rank(nprocs, broken_on_rank_1):
    broken_on_rank_1.barrier()   # rank 0 would wait here for ever


@sizes(fast=(2,))
def test_body_fails_on_one_rank(nprocs, comm):
    assert comm.rank != 1, "rank 1 disagrees"


@sizes(fast=(2,))
def test_skipped_on_one_rank(nprocs, comm):
    if comm.rank == 0:
        pytest.skip("rank 0 only")


@sizes(fast=(2,))
def test_passes(nprocs, comm):
    assert sum(comm.allgather(1)) == 2


@sizes(fast=(3,))
def test_at_another_size(nprocs):
    pass
'''


@pytest.mark.mpi
def test_a_phase_failed_on_one_rank_fails_on_every_rank_naming_it(tmp_path):
    """The plugin itself: a failed setup stops the test on every rank, a failed body or a skip on
    one rank fails the test naming that rank, a test of another size is left out."""
    shutil.copy(RANKS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_harness.py").write_text(HARNESS_CHECK)
    rc, output = run_session(2, tmp_path, tmp_path / "results.json", {}, limit=120)
    found, report = problems(tmp_path / "results.json", rc, 120)
    got = {t["nodeid"].split("::")[1]: (t["outcome"], t["phase"], t["ranks"], t["message"])
           for t in report.get("tests", [])}
    assert rc == 1 and report.get("done"), output[-3000:]
    assert got["test_setup_fails_on_one_rank[P2]"][:3] == ("failed", "setup", [1])
    assert got["test_setup_fails_on_one_rank[P2]"][3].endswith("RuntimeError: setup broke")
    assert got["test_body_fails_on_one_rank[P2]"][:3] == ("failed", "call", [1])
    assert "AssertionError: rank 1 disagrees" in got["test_body_fails_on_one_rank[P2]"][3]
    assert got["test_skipped_on_one_rank[P2]"] == (
        "failed", "call", [0], "rank(s) [0]: skipped on this rank alone")
    assert got["test_passes[P2]"][0] == "passed" and "test_at_another_size[P3]" not in got
    assert len(found) == 3
    assert "test_body_fails_on_one_rank[P2] (call) failed on rank(s) [1]" in found[1]
