"""Shared fixtures: small datasets made once per session, and an MPI job launcher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lmdbio.lab.cluster import mpiexec
import storage_helpers

#: ``--durations-file``: the slowest tests and the idle CPU share of a run (tests/durations.py).
pytest_plugins = ["durations"]

ROOT = Path(__file__).resolve().parents[1]
#: Tests that run inside each MPI rank, started by tests/test_mpi_sessions.py, never directly.
collect_ignore = ["mpi_ranks"]
#: The device-setting tests' check that a test leaves no loop device, mount, cgroup or rule.
nothing_left = storage_helpers.nothing_left

# Tests never write the user's cache (lmdbio.verified's stamps): from import on, module and
# session fixtures too use a private one; each test gets its own (``_private_cache``).
# The torch test keeps its own place (XDG_CACHE_HOME), so its wheel is reused.
_SESSION_CACHE = tempfile.mkdtemp(prefix="lmdbio-test-cache-")
os.environ["LMDBIO_CACHE"] = _SESSION_CACHE
MPI_SCRIPTS = ROOT / "tests" / "mpi"

def run_mpi(script: str | Path, n: int, *args, timeout: float = 240, env: dict | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python script args`` under ``mpiexec -n n``; fail the test on non-zero exit."""
    script = Path(script)
    if not script.is_absolute():
        script = MPI_SCRIPTS / script
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(script), *map(str, args)]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=ROOT)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                    f"\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


def run_bounded(script, n, *args, env=None, timeout=60):
    """run_mpi without the exit-status check; a job that outlives ``timeout`` fails the test."""
    try:
        return run_mpi(script, n, *args, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script} {args} did not end within {timeout} s (a rank hangs)")


def run_verdict(script, n, *args, env=None, timeout=60) -> tuple[subprocess.CompletedProcess,
                                                                 dict | None]:
    """run_bounded with ``$MPI_VERDICT`` set (tests/mpi/verdict.py): the job and the verdict its
    rank 0 wrote, or None if none was written (the job ended before)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "verdict.json"
        proc = run_bounded(script, n, *args, env={**(env or {}), "MPI_VERDICT": str(path)},
                           timeout=timeout)
        verdict = json.loads(path.read_text()) if path.exists() else None
    return proc, verdict


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """Small databases of every shape the readers must handle (made once per session)."""
    from lmdbio.datasets import make_dataset

    root = tmp_path_factory.mktemp("datasets")
    out = {
        "cifar10": make_dataset(root / "cifar10", "cifar10", 700, commit_every=100, seed=1),
        "imagenet": make_dataset(root / "imagenet", "imagenet", 40, commit_every=16, seed=2),
        "jpeg": make_dataset(root / "jpeg", "imagenet", 60, encoded=True, commit_every=25, seed=3),
        "lmdb10": make_dataset(root / "lmdb10", "cifar10", 500, commit_every=100, seed=4,
                               lmdb_format="1.0"),
    }
    # One write transaction: values lie back to back, as after `mdb_copy -c`.
    out["one_txn"] = make_dataset(root / "one_txn", "cifar10", 600, commit_every=10**6, seed=6)
    out["reused"] = make_reused_pages_db(root / "reused")
    return out


def make_reused_pages_db(path: Path, n: int = 400, seed: int = 5) -> Path:
    """A database whose values are not in key order in the file (deletes, re-puts, page reuse)."""
    import random

    import lmdb

    rng = random.Random(seed)
    env = lmdb.open(str(path), map_size=1 << 28)
    keys = [f"{i:08d}_rec".encode() for i in range(n)]
    order = keys[:]
    rng.shuffle(order)
    for start in range(0, n, 50):
        with env.begin(write=True) as txn:
            for k in order[start:start + 50]:
                txn.put(k, bytes([rng.randrange(256)]) * rng.choice([90, 3000, 9000, 20000]))
    for _ in range(3):
        with env.begin(write=True) as txn:
            for k in rng.sample(keys, 60):
                txn.delete(k)
        with env.begin(write=True) as txn:
            for k in keys:
                if txn.get(k) is None:
                    txn.put(k, bytes([rng.randrange(256)]) * rng.randrange(1, 30000))
    env.close()
    return path


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path_factory):
    """Each test has an empty ``LMDBIO_CACHE`` of its own (MPI jobs inherit it)."""
    monkeypatch.setenv("LMDBIO_CACHE", str(tmp_path_factory.mktemp("lmdbio-cache")))


@pytest.fixture(scope="session", autouse=True)
def _session_cache():
    yield
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_mpich_segments():
    """Remove the ``/dev/shm/mpich_shm_*`` segments and the ``hydra_hwloc_xmlfile_*`` topology
    files in the temporary folder that this run's MPI jobs left behind.

    Tests that kill or abandon ranks on purpose (lost peers, aborts, killed
    clients, timeouts) end processes without ``MPI_Finalize``, and MPICH
    leaves their shared-memory segments; a killed proxy leaves its topology
    file. Only files new since the session started and mapped or held open by
    no live process are removed.
    """
    from lmdbio.lab.cluster import mpich_segments, remove_orphan_segments

    before = mpich_segments()
    yield
    remove_orphan_segments(before)
