"""Edges of "every variant delivers the right records" (issue 28, G-J and the exception tree).

- a /dev/shm too small for a node group's shared slots: a ResourceError on every rank of the
  group, never a bus error, and no segment left behind (G);
- data.mdb renamed over while Readers open it: LMDB's C code is only handed the file that was
  checked, so no SIGABRT and no wrong record (H);
- records in a named sub-database: refused, naming it, by every variant and ``lmdbio info`` (I);
- verified stamps planted where someone else can write: ignored, so a forged sidecar is caught (J);
- every bad Reader argument: an LmdbioError subclass (ConfigurationError, also a ValueError)
  that names the argument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

import lmdbio
from conftest import MPI_SCRIPTS, ROOT
from lmdbio import format as fmt
from lmdbio import verified
from lmdbio.cli import main
from lmdbio.lab.cluster import mpiexec
from lmdbio.datasets import make_dataset
from lmdbio.errors import (ConfigurationError, LmdbFormatError, LmdbioError,
                           StaleProvenanceError)
from lmdbio.provenance import load_provenance

sys.path.insert(0, str(MPI_SCRIPTS))
from stored import stored_values
from test_provenance_forged import swap, forge

ALL_VARIANTS = lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{MPI_SCRIPTS}", "PYTHONUNBUFFERED": "1"}


# ------------------------------------------------------------------------ G: /dev/shm full

def _small_shm_works() -> bool:
    """Whether this process may mount a tmpfs of its own over /dev/shm (a private mount
    namespace: root, and unshare(1))."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True)
    return probe.returncode == 0


needs_small_shm = pytest.mark.skipif(not _small_shm_works(),
                                     reason="needs root and unshare(1) to mount a small /dev/shm")


def run_in_small_shm(size: str, *args) -> tuple[subprocess.CompletedProcess, list[str], list]:
    """Run ``edge_shm.py args`` at P = 2 with a ``size`` tmpfs on /dev/shm.

    The tmpfs lives in a mount namespace of this job alone: the machine's /dev/shm and other
    jobs are untouched, and it vanishes with the job. Returns the job, what it left in its
    /dev/shm and each rank's outcome (its verdict, tests/mpi/verdict.py).
    """
    job = (f"mount -t tmpfs -o size={size} tmpfs /dev/shm || exit 99; "
           f"{mpiexec()} -n 2 {sys.executable} {MPI_SCRIPTS / 'edge_shm.py'} "
           f"{' '.join(map(str, args))}; rc=$?; echo LEFT:$(ls -A /dev/shm); exit $rc")
    with tempfile.TemporaryDirectory() as folder:
        verdict = Path(folder) / "verdict.json"
        proc = subprocess.run(["unshare", "-m", "sh", "-c", job], capture_output=True, text=True,
                              timeout=180, env={**ENV, "MPI_VERDICT": str(verdict)}, cwd=ROOT)
        outcomes = json.loads(verdict.read_text())["outcomes"] if verdict.exists() else None
    left = [line[5:].split() for line in proc.stdout.splitlines() if line.startswith("LEFT:")]
    assert left and outcomes is not None, proc.stdout + proc.stderr
    return proc, left[0], outcomes


@pytest.fixture(scope="module")
def imagenet_db(tmp_path_factory):
    """120 ImageNet-size records (about 200 KB each, 24 MB): at B = 32, P = 2, LMM's group
    slots need about 62 MiB."""
    return make_dataset(tmp_path_factory.mktemp("edges") / "im", "imagenet", 120,
                        commit_every=100, seed=2, provenance=False)


@pytest.fixture(scope="module")
def growing_db(tmp_path_factory):
    """Eight 8 MiB records, then 2,000 of 1 KB: the slots are sized by the mean record (small),
    and the first chunk (8 big records, 64 MiB) makes the group grow a slot."""
    import lmdb

    path = tmp_path_factory.mktemp("edges") / "grow"
    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i in range(8):
            txn.put(b"%08d" % i, bytes([i]) * (8 << 20))
        for i in range(8, 2008):
            txn.put(b"%08d" % i, bytes([i % 256]) * 1000)
    env.close()
    return path


def _assert_every_rank_refused(proc, left, outcomes, what: str):
    out = proc.stdout + proc.stderr
    assert "Bus error" not in out and "signal 7" not in out, out[-3000:]
    assert len(outcomes) == 2, outcomes
    for line in (f"rank {r}: {outcome}" for r, outcome in enumerate(outcomes)):
        assert "ResourceError" in line and what in line and "/dev/shm" in line, line
        assert "Free room in /dev/shm" in line, line   # and what to do
        assert not re.search(r"rank (\d+)\b[^:]*: rank \1\b", line), f"rank named twice: {line}"
    assert proc.returncode not in (0, 99), out[-3000:]
    assert left == [], f"left in /dev/shm: {left}"


@needs_small_shm
@pytest.mark.gate
@pytest.mark.mpi
@pytest.mark.parametrize("variant", ["lmdbio-lmm-dio", "lmdbio-lmm"])
def test_slots_that_do_not_fit_dev_shm_are_refused_on_every_rank(imagenet_db, variant):
    proc, left, outcomes = run_in_small_shm("50m", imagenet_db, variant, 32, "plain")
    _assert_every_rank_refused(proc, left, outcomes, "needs 61.8 MiB of shared memory")
    assert any("only " in o and "is free there" in o for o in outcomes), outcomes


@needs_small_shm
@pytest.mark.gate
@pytest.mark.mpi
def test_dev_shm_filled_after_the_check_is_still_no_bus_error(imagenet_db):
    """Every rank's free-space check is fooled (another job fills /dev/shm right after it):
    the reader faults the pages in where the kernel answers "no room" instead of SIGBUS."""
    proc, left, outcomes = run_in_small_shm("50m", imagenet_db, "lmdbio-lmm-dio", 32, "stale")
    _assert_every_rank_refused(proc, left, outcomes, "could not fault in its 61.8 MiB")


@needs_small_shm
@pytest.mark.gate
@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["plain", "stale"])
def test_a_slot_that_cannot_grow_is_refused_on_every_rank(growing_db, mode):
    proc, left, outcomes = run_in_small_shm("50m", growing_db, "lmdbio-lmm-dio", 8, mode)
    _assert_every_rank_refused(proc, left, outcomes, "64.0 MiB")
    # The member's words.
    assert any("could not grow the reader group's shared slot" in o for o in outcomes), outcomes


@needs_small_shm
@pytest.mark.mpi
def test_slots_that_fit_are_read(imagenet_db):
    proc, left, outcomes = run_in_small_shm("200m", imagenet_db, "lmdbio-lmm-dio", 32, "plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes == ["ok", "ok"] and left == []


# ------------------------------------------------------------ H: data.mdb renamed over

@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("edges") / "c300", "cifar10", 300,
                        commit_every=100, seed=5)


@pytest.mark.gate
@pytest.mark.parametrize("variant,seconds", [("lmdb", 6), ("lmdbio-lmm-dio", 3), ("acquire", 4)])
def test_readers_opened_while_data_mdb_is_renamed_over(small_db, tmp_path, variant, seconds):
    """A thread renames fresh honest and same-size damaged copies into place while Readers open
    and read every record; each open reads right or raises an LmdbioError, never a crash.
    ``acquire``: the checked open and a cursor walk alone, many more opens in the time."""
    db = shutil.copytree(small_db, tmp_path / "db")
    proc = subprocess.run([sys.executable, str(MPI_SCRIPTS / "edge_replace.py"), str(db), variant,
                           "100000", str(seconds)], capture_output=True, text=True, timeout=120,
                          env=ENV, cwd=ROOT)
    out = proc.stdout + proc.stderr
    # A signal (SIGABRT from mdb.c's IS_LEAF assertion) is a negative return code.
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-3000:]}"
    lines = proc.stdout.splitlines()
    assert {line.split()[0] for line in lines} <= {"ok", "refused"}, out   # no "wrong"
    assert any(line.startswith("ok ") for line in lines), out            # the honest copy read
    for line in lines:
        if line.startswith("refused"):
            assert line.split()[1] in ("LmdbFormatError", "LmdbioError"), line


# -------------------------------------------------------------- I: named sub-databases

def _with_subdatabase(path: Path, main_records: int) -> Path:
    import lmdb

    env = lmdb.open(str(path), max_dbs=2, map_size=1 << 26)
    images = env.open_db(b"images")
    with env.begin(write=True) as txn:
        for i in range(100):
            txn.put(b"%08d" % i, bytes([i % 256]) * (100 + i), db=images)
        for i in range(main_records):
            txn.put(b"m%07d" % i, b"x" * 200)
    env.close()
    return path


@pytest.mark.parametrize("main_records", [0, 50], ids=["only-sub", "sub-and-main"])
def test_a_named_subdatabase_is_refused_by_every_variant(tmp_path, main_records):
    db = _with_subdatabase(tmp_path / "db", main_records)
    for variant in ALL_VARIANTS:
        with pytest.raises(LmdbFormatError) as err:
            with lmdbio.Reader(str(db), 1, MPI.COMM_SELF, variant=variant,
                               build_provenance=True) as r:
                r.read_batch()
        msg = str(err.value)
        assert "named sub-database(s) 'images'" in msg, (variant, msg)
        assert "main (unnamed) database only" in msg, (variant, msg)
        if main_records:
            assert f"also hold {main_records} plain record(s)" in msg, (variant, msg)
    assert not (db / "lmdbio-provenance.npz").exists()   # nothing was built from it


def test_info_names_the_subdatabase(tmp_path, capsys):
    db = _with_subdatabase(tmp_path / "db", 0)
    assert main(["info", str(db)]) == 1
    assert "named sub-database(s) 'images'" in capsys.readouterr().err


# -------------------------------------------------------------- J: planted stamps

def _plant(db: Path, how: str) -> Path:
    """Forge db's sidecar (two records' extents swapped, digest recomputed) and plant the
    stamp that says it was checked, in a cache folder set up ``how``."""
    forge(db, lambda idx: swap(idx, 101, 203))
    fd = os.open(db / "data.mdb", os.O_RDONLY)
    try:
        bound = verified.binding("prov", fd, fmt.read_meta(fd), load_provenance(db).digest)
    finally:
        os.close(fd)
    stamp = verified.stamp_path(bound)
    folder = stamp.parent
    if how == "symlinked-folder":
        real = folder.with_name("elsewhere")
        real.mkdir(mode=0o700, parents=True)
        folder.symlink_to(real)
    else:
        folder.mkdir(mode=0o700, parents=True)
    stamp.write_text(json.dumps(bound, sort_keys=True))
    stamp.chmod(0o600)
    if how == "folder-0777":
        folder.chmod(0o777)
    elif how == "file-0666":
        stamp.chmod(0o666)
    elif how == "folder-of-another-user":
        os.chown(folder, 65534, 65534)
    elif how == "file-of-another-user":
        os.chown(stamp, 65534, 65534)
    return stamp


def _read_epoch(db: Path) -> int:
    """Wrong records of one epoch read with PROV at P = 1."""
    expected = stored_values(db)
    wrong = 0
    with lmdbio.Reader(str(db), 10, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov") as r:
        for b in r.epoch(0):
            wrong += sum(bytes(b[i]) != expected[int(j)] for i, j in enumerate(b.indices))
    return wrong


UNSAFE = ["folder-0777", "file-0666", "folder-of-another-user", "file-of-another-user",
          "symlinked-folder"]


@pytest.mark.parametrize("how", UNSAFE)
def test_a_stamp_others_could_have_planted_is_ignored(small_db, tmp_path, how):
    if "another-user" in how and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    db = Path(shutil.copytree(small_db, tmp_path / "db"))
    _plant(db, how)
    with pytest.raises(StaleProvenanceError, match="sidecar says|does not match"):
        _read_epoch(db)


def test_a_stamp_in_the_users_own_private_cache_is_trusted(small_db, tmp_path):
    """The control: the same plant in a private folder is believed (whoever can write there is
    this user), so the cases above are refused for their folder or file alone."""
    db = Path(shutil.copytree(small_db, tmp_path / "db"))
    _plant(db, "private")
    assert _read_epoch(db) == 2


def test_no_stamp_is_written_where_others_may_write(small_db, tmp_path, caplog):
    db = Path(shutil.copytree(small_db, tmp_path / "db"))
    folder = verified.cache_dir() / "prov-verified"
    folder.mkdir(mode=0o700, parents=True)
    folder.chmod(0o777)
    for _ in range(2):   # each open checks in full: nothing is stamped, nothing is trusted
        with lmdbio.Reader(str(db), 10, MPI.COMM_SELF, variant="lmdbio-lmm-dio-prov") as r:
            r.read_batch()
            row = next(row for row in r.stats() if row.get("phase") == "setup")
        assert row["prov_check_share"] == "0/1" and row["prov_stamp"] == "not written"
    assert not list(folder.iterdir())
    assert "ignoring the verified stamps" in caplog.text and "mode 0777" in caplog.text


# ------------------------------------------------------------ one exception tree

BAD_ARGUMENTS = [
    ("batch_size", 0), ("batch_size", -1), ("batch_size", 3.5), ("batch_size", "x"),
    ("prefetch", -1), ("prefetch", True), ("shuffle", "bogus"), ("last_batch", "x"),
    ("seed", -1), ("seed", 0.5), ("shuffle_window", 0), ("shuffle_block", 0),
    ("ranks_per_node", 0), ("ranks_per_node", True), ("readers_per_node", 0), ("variant", "nope"),
    ("variant", 3), ("coalesce_bytes", -1), ("coalesce_bytes", "4MB"), ("stagger_size", -1),
    ("on_error", "x"), ("options", "lmdb"),
]


@pytest.mark.parametrize("name,value", BAD_ARGUMENTS, ids=[f"{n}={v!r}" for n, v in BAD_ARGUMENTS])
def test_every_bad_reader_argument_is_a_configuration_error_naming_it(small_db, name, value):
    kwargs = {"batch_size": 8, name: value}
    batch = kwargs.pop("batch_size")
    with pytest.raises(LmdbioError) as err:
        lmdbio.Reader(str(small_db), batch, MPI.COMM_SELF, **kwargs).close()
    assert isinstance(err.value, ConfigurationError) and isinstance(err.value, ValueError)
    assert name in str(err.value), str(err.value)


def test_the_library_functions_raise_the_same_tree():
    from lmdbio import shuffle
    from lmdbio.lab import shuffle_quality
    from lmdbio.options import check_batch_size, parse_variant
    from lmdbio.pipeline import EpochPlan
    from lmdbio.pipeline.prefetch import check_prefetch
    from lmdbio.topology import make_topology, node_number

    calls = [
        (lambda: shuffle.epoch_order(10, 2, 1, 0.5, 0), "seed"),
        (lambda: shuffle.epoch_order(10, 0, 1, 0, 0), "block"),
        (lambda: shuffle.global_batches(list(range(10)), 5, "wrap"), "last_batch"),
        (lambda: shuffle.rank_batches(list(range(10)), 3, 3, 3), "rank"),
        (lambda: shuffle_quality.position_correlation([0, 1], [0]), "order_a"),
        (lambda: EpochPlan(window="4"), "shuffle_window"),
        (lambda: check_batch_size(None, 2), "batch_size"),
        (lambda: check_prefetch(1.5, True, "lmdb"), "prefetch"),
        (lambda: parse_variant("lmdb", stagger_size="half"), "stagger_size"),
        (lambda: lmdbio.Options(coalesce_bytes=None), "coalesce_bytes"),
        (lambda: make_topology(MPI.COMM_SELF, readers_per_node=1.0), "readers_per_node"),
        (lambda: node_number(MPI.COMM_SELF, -2), "ranks_per_node"),
        (lambda: make_dataset("/nonexistent/x", "mnist"), "preset"),
    ]
    for call, name in calls:
        with pytest.raises(ConfigurationError, match=name):
            call()


def test_no_builtin_argument_errors_in_user_facing_modules():
    """Code a user's arguments reach raises ConfigurationError, never a bare ValueError or
    TypeError (``except LmdbioError`` must catch every error of ours)."""
    modules = ["options.py", "shuffle.py", "topology.py", "pipeline/epoch.py",
               "pipeline/prefetch.py", "datasets.py", "recordindex.py", "verified.py", "format.py",
               "lmdbenv/env.py", "lmdbenv/cursor.py", "lmdbenv/writer.py"]
    for name in modules:
        text = (ROOT / "lmdbio" / name).read_text()
        assert "raise ValueError" not in text and "raise TypeError" not in text, name
