"""pytest inside every MPI rank, with collective outcomes: a phase failed on one rank fails on all.

tests/test_mpi_sessions.py runs this folder once per process count P, as mpi4py runs its own
suite: ``mpiexec -n P python -m pytest --confcutdir tests/mpi_ranks tests/mpi_ranks
--mpi-results FILE``. Every rank collects the same tests; after each phase (setup, call,
teardown) the ranks allgather their outcomes over COMM_WORLD, and if any rank failed, every
rank's report fails naming the failing ranks and their errors. So a setup that failed on one
rank stops the test on all (pytest runs the body only after a passed setup), and no rank enters
a body whose collectives the others never join. A test parametrized with ``nprocs`` runs in the
session of that size and is skipped in the others (:func:`sizes`). Rank 0 writes the JSON
results as each test's body starts and at the end, so a session that the driver kills still
says which tests failed and which one was running. Tests take every collective step first and
assert after, so a rank whose assertion fails leaves no peer waiting. What a test makes beyond
the driver's datasets (a database, a folder, a damaged copy) rank 0 makes under the driver's
scratch folder and hands to every rank (:func:`on_rank_0`, ``made``, ``shared_tmp``).
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path

import lmdb
import numpy as np
import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD
#: The driver's datasets: JSON ``{name: path}`` (tests/test_mpi_sessions.py).
DATASETS_ENV = "LMDBIO_TEST_DATASETS"
#: A folder of the driver's that every rank sees: what the tests make goes there.
SCRATCH_ENV = "LMDBIO_TEST_SCRATCH"
#: Characters of a rank's error kept in the results and in the other ranks' reports.
MESSAGE_CHARS = 1500


def sizes(fast=(), gate=()):
    """Parametrize ``nprocs``: the test runs in the sessions of these sizes, ``gate`` ones in the
    gate only (make check), since the session takes the outer run's ``-m``."""
    return pytest.mark.parametrize("nprocs", [*fast, *(pytest.param(p, marks=pytest.mark.gate)
                                                      for p in gate)], ids="P{}".format)


def ranks_per_node(spec: str) -> int | None:
    """A topology's ranks per node: ``"None"`` (the machine's nodes) or a number."""
    return None if spec == "None" else int(spec)


@cache
def stored_values(db) -> list[bytes]:
    """Every value of ``db`` in key order, read by py-lmdb: what every reader is compared with."""
    with lmdb.open(str(db), readonly=True, lock=False) as env, env.begin() as txn:
        return [bytes(v) for _, v in txn.cursor()]


class Checker:
    """One rank's comparison of the batches it is handed with py-lmdb's values: a call checks a
    batch and returns its indices; ``wrong`` says which differed, ``count`` how many records."""

    def __init__(self, db):
        self.expected = stored_values(db)
        self.wrong: list[str] = []
        self.count = 0

    def __call__(self, batch) -> list[int]:
        idx = np.asarray(batch.indices).tolist()
        self.count += len(idx)
        if [bytes(x) for x in batch] != [self.expected[i] for i in idx]:
            self.wrong.append(f"records {idx} differ from py-lmdb's")
        return idx


def pytest_addoption(parser):
    parser.addoption("--mpi-results", default=None,
                     help="rank 0 writes each test's collective outcome to this JSON file")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if COMM.rank:   # rank 0 speaks for all: its reports carry every rank's errors
        config.pluginmanager.unregister(name="terminalreporter")
    config.pluginmanager.register(_Results(config.getoption("--mpi-results")), "mpi-results")


def pytest_collection_finish(session):
    ids = [item.nodeid for item in session.items]
    if COMM.allgather(ids) != [ids] * COMM.size:
        raise pytest.UsageError("the ranks collected different tests: they would wait for each "
                                "other in different tests")


@pytest.fixture(scope="session")
def comm():
    return COMM


@pytest.fixture(scope="session")
def datasets() -> dict[str, Path]:
    """The databases the driver made (the outer suite's ``datasets`` and its own)."""
    raw = os.environ.get(DATASETS_ENV)
    if not raw:
        pytest.fail(f"{DATASETS_ENV} is not set: run these tests by tests/test_mpi_sessions.py")
    return {name: Path(path) for name, path in json.loads(raw).items()}


def on_rank_0(comm, make):
    """``make()`` on rank 0 and its result on every rank; if it raised, every rank raises, so no
    rank waits in a collective that rank 0 never reaches."""
    result = error = None
    if comm.rank == 0:
        try:
            result = make()
        except Exception as exc:   # every rank raises it below
            error = f"{type(exc).__name__}: {exc}"
    result, error = comm.bcast((result, error), root=0)
    if error is not None:
        raise RuntimeError(f"on rank 0: {error}")
    return result


@pytest.fixture(scope="session")
def scratch() -> Path:
    """The driver's folder for this session, the same on every rank."""
    raw = os.environ.get(SCRATCH_ENV)
    if not raw:
        pytest.fail(f"{SCRATCH_ENV} is not set: run these tests by tests/test_mpi_sessions.py")
    return Path(raw)


@pytest.fixture
def shared_tmp(comm, scratch) -> Path:
    """An empty folder of this test's, the same on every rank (made by rank 0)."""
    return on_rank_0(comm, lambda: Path(tempfile.mkdtemp(dir=scratch)))


@pytest.fixture(scope="session")
def made(comm, scratch):
    """``made(name, kind, n, **kw)``: ``lmdbio.datasets.make_dataset`` run by rank 0 the first
    time a test asks for ``name``, its path on every rank; only the sessions that need a
    database pay for it."""
    from lmdbio.datasets import make_dataset

    paths: dict[str, Path] = {}

    def make(name: str, kind: str, n: int, **kw) -> Path:
        if name not in paths:
            paths[name] = on_rank_0(comm, lambda: make_dataset(scratch / name, kind, n, **kw))
        return paths[name]
    return make


def _nprocs(item) -> int | None:
    params = getattr(item, "callspec", None)
    return None if params is None else params.params.get("nprocs")


@pytest.fixture(autouse=True)
def _at_this_size(request):
    """Skip, on every rank alike, a test whose ``nprocs`` is not this session's size."""
    nprocs = _nprocs(request.node)
    if nprocs is None:
        pytest.fail("parametrize nprocs (conftest.sizes): it says in which sessions a test runs")
    if nprocs != COMM.size:
        pytest.skip(f"runs in the P = {nprocs} session")


def _mine(report, call) -> tuple[str, str]:
    """This rank's outcome of a phase and, if it failed, where and its short error."""
    if not report.failed:
        return report.outcome, ""
    if call.excinfo is None:
        return "failed", str(report.longrepr)[-MESSAGE_CHARS:]
    frames = call.excinfo.traceback
    where = (frames.filter(call.excinfo) or frames)[-1]   # past pytest.fail's own frames
    return "failed", f"{where.path}:{where.lineno + 1}: {call.excinfo.exconly()}"[:MESSAGE_CHARS]


def _says(failed: dict[int, str]) -> str:
    """The failing ranks' errors, one line per distinct error: ``rank(s) [1, 3]: ...``."""
    by_text: dict[str, list[int]] = {}
    for r, text in failed.items():
        by_text.setdefault(text, []).append(r)
    return "\n".join(f"rank(s) {ranks}: {text}" for text, ranks in by_text.items())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _nprocs(item) not in (None, COMM.size):
        report.mpi_elsewhere = True   # skipped by its size on every rank alike: no agreement
        return report
    everyone = COMM.allgather(_mine(report, call))
    failed = {r: text for r, (outcome, text) in enumerate(everyone) if outcome == "failed"}
    if not failed and len({outcome for outcome, _ in everyone}) > 1:
        failed = {r: f"{outcome} on this rank alone" for r, (outcome, _) in enumerate(everyone)
                  if outcome != "passed"}
    report.mpi_failed = sorted(failed), _says(failed)
    if failed and not report.failed:
        report.outcome = "failed"
        report.longrepr = f"failed on another rank:\n{report.mpi_failed[1]}"
    return report


class _Results:
    """Rank 0's JSON file: the outcome, failing ranks and their errors of each test run at this
    size, rewritten as each test's body starts (``running`` names it) and at the end."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path and COMM.rank == 0 else None
        self.tests: dict[str, dict] = {}
        self.running: str | None = None

    def _write(self, done: bool = False, exitstatus: int | None = None) -> None:
        if self.path is None:
            return
        data = {"size": COMM.size, "done": done, "exitstatus": exitstatus,
                "running": self.running, "tests": list(self.tests.values())}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=0))
        tmp.replace(self.path)

    def pytest_runtest_logreport(self, report):
        if getattr(report, "mpi_elsewhere", False):
            return
        row = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed",
                                                    "phase": None, "ranks": [], "message": "",
                                                    "seconds": 0.0})
        row["seconds"] = round(row["seconds"] + report.duration, 3)
        if report.when == "setup" and report.skipped:
            row["outcome"] = "skipped"
        if report.failed and row["outcome"] != "failed":
            ranks, message = getattr(report, "mpi_failed", ([], str(report.longrepr)))
            row.update(outcome="failed", phase=report.when, ranks=ranks, message=message)
        if report.when == "setup" and report.passed:   # the body starts, on every rank
            self.running = report.nodeid
            self._write()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.running = None

    def pytest_sessionfinish(self, session, exitstatus):
        self._write(done=True, exitstatus=int(exitstatus))
