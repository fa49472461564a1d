"""Reader reliability under real MPI (issue 13; ``{node}`` paths from issue 10).

A live writer, setup failures, use after close, errors inside ``with``, lost
peers and bounded waits. Each case runs its own ``mpiexec`` with a timeout,
so a hang or a crash fails the test instead of stopping pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import lmdbio
from conftest import run_bounded, run_verdict

pytestmark = pytest.mark.mpi

# Small bounds so lost peers show up quickly; the defaults are 120 s and 10 s.
FAST = {"LMDBIO_TIMEOUT": "2", "LMDBIO_EXIT_TIMEOUT": "1"}
SEVEN = ",".join(lmdbio.VARIANTS)


def run_peers(tmp_path, script, n, *args, env=None, timeout=60):
    """Run a script that writes each rank's lines to REL_OUT/rank<R>.txt; returns (proc, lines)."""
    out_dir = tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    proc = run_bounded(script, n, *args, env={**(env or {}), "REL_OUT": str(out_dir)},
                       timeout=timeout)
    got = {}
    for f in sorted(out_dir.glob("rank*.txt")):
        got[int(f.stem[4:])] = f.read_text().splitlines()
    return proc, got


@pytest.mark.gate
@pytest.mark.parametrize("fmt", ["0.9", "1.0"])
def test_every_variant_reads_its_snapshot_beside_a_writer(tmp_path, fmt):
    from lmdbio.datasets import make_dataset

    db = make_dataset(tmp_path / "db", "cifar10", 600, commit_every=100, seed=11, lmdb_format=fmt)
    out, verdict = run_verdict("rel_writer.py", 2, db, SEVEN, env={"LMDBIO_TIMEOUT": "10"},
                               timeout=120)
    assert "Assertion" not in out.stderr
    assert out.returncode == 0 and verdict is not None, out.stdout + out.stderr[-3000:]
    assert verdict["outcomes"] == [{v: "ok" for v in lmdbio.VARIANTS}] * 2, verdict


def test_a_damaged_leaf_fails_setup_on_every_rank(tmp_path):
    from corrupt_helpers import page_size, patch

    from lmdbio.datasets import make_dataset
    from lmdbio.recordindex import build_index
    from lmdbio.provenance import sidecar_path

    db = make_dataset(tmp_path / "db", "cifar10", 300, commit_every=100, seed=12)
    leaves = build_index(db).leaf_pgnos
    ps = page_size(db / "data.mdb")
    patch(db / "data.mdb", int(leaves[len(leaves) // 2]) * ps, bytes(ps))   # the meta stays valid
    sidecar_path(db).unlink()   # PROV must build it (build_provenance=True) and meet the damage
    out, verdict = run_verdict("rel_setup_error.py", 2, db, "lmdbio-lmm-dio",
                               "lmdbio-lmm-dio-prov", env=FAST, timeout=60)
    assert out.returncode == 0 and verdict is not None, out.stderr[-3000:]
    for rank, outcomes in enumerate(verdict["outcomes"]):
        assert list(outcomes) == ["lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"], outcomes
        for variant, got in outcomes.items():
            assert "LmdbFormatError" in got["error"], (rank, variant, got)
            assert "zeroed or misplaced page" in got["error"], (rank, variant, got)


@pytest.mark.parametrize("variant", ["lmdbio-lmm-dio", "lmdbio-lmm-dm"])
def test_batches_stay_readable_after_close(datasets, variant):
    out, verdict = run_verdict("rel_after_close.py", 2, datasets["cifar10"], variant, env=FAST,
                               timeout=60)
    assert verdict is not None, f"rc {out.returncode} (a segfault is -11/139)\n{out.stderr[-2000:]}"
    assert out.returncode == 0 and verdict["outcomes"] == ["ok", "ok"], verdict


@pytest.mark.parametrize("mode,error", [("all-same", "ValueError"), ("kbint", "KeyboardInterrupt")])
def test_the_same_error_on_every_rank_propagates(datasets, tmp_path, mode, error):
    out, got = run_peers(tmp_path, "rel_peers.py", 2, mode, datasets["cifar10"], "lmdbio-lmm-dio",
                         env=FAST)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "MPI_Abort" not in out.stderr
    for rank in (0, 1):
        assert f"caught {error}" in got[rank][0] and "closed=True" in got[rank][0], got
        assert "alive, sum=2" in got[rank][1], got


def test_a_lone_error_raises_and_releases_the_group(datasets, tmp_path):
    env = {**FAST, "LMDBIO_ON_ERROR": "raise"}
    out, got = run_peers(tmp_path, "rel_peers.py", 3, "lone", datasets["cifar10"], "lmdbio-lmm-dio",
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "caught RuntimeError: a mistake on one rank" in got[2][0], got
    for rank in (0, 1):
        assert "caught PeerError" in got[rank][0] and "rank 2" in got[rank][0], got


@pytest.mark.gate
@pytest.mark.parametrize("on_error", ["abort", "raise"])
def test_a_rank_failing_alone_while_others_are_busy(datasets, tmp_path, on_error):
    env = {**FAST, "LMDBIO_ON_ERROR": on_error}
    t0 = time.monotonic()
    out, got = run_peers(tmp_path, "rel_peers.py", 2, "lone-stuck", datasets["cifar10"],
                         "lmdbio-lmm-dio", env=env)
    if on_error == "abort":
        assert out.returncode != 0
        assert "aborting the job" in out.stderr and "a mistake on one rank" in out.stderr
        assert 0 not in got, got   # rank 0 was still busy: the abort ended it
        assert time.monotonic() - t0 < 40
    else:
        assert out.returncode == 0, out.stderr[-3000:]
        assert "caught RuntimeError" in got[1][0], got
        assert "caught PeerError" in got[0][0], got


@pytest.mark.gate
def test_a_member_that_stops_early_is_named_within_the_timeout(datasets, tmp_path):
    out, got = run_peers(tmp_path, "rel_peers.py", 2, "stop-early", datasets["cifar10"],
                         "lmdbio-lmm-dio", env=FAST)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "caught PeerTimeoutError" in got[0][0], got
    assert "rank 1 did not ask for batch 3" in got[0][0], got
    assert "caught PeerError" in got[1][0] and "[0]" in got[1][0], got


@pytest.mark.gate
@pytest.mark.parametrize("mode", ["exit-early", "close-missing"])
def test_close_does_not_wait_for_a_rank_that_left(datasets, tmp_path, mode):
    out, got = run_peers(tmp_path, "rel_peers.py", 2, mode, datasets["cifar10"], "lmdbio-lmm-dio",
                         env=FAST)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "leaving without close()" in got[1][0], got
    if mode == "exit-early":
        assert "read_batch raised PeerTimeoutError" in got[0][0] and "rank 1" in got[0][0], got
    assert "close raised PeerTimeoutError" in got[0][-1], got


@pytest.mark.gate
def test_a_ring_reader_that_stops_is_a_timeout(datasets, tmp_path):
    # Virtual nodes of one rank: two DM readers pass the cursor around a ring.
    out, got = run_peers(tmp_path, "rel_ring.py", 2, datasets["cifar10"], env=FAST)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PeerTimeoutError" in got[1][0] and "did not pass the cursor" in got[1][0], got
    assert "(missing=(0,))" in got[1][0], got   # the reader waited for, by its rank


@pytest.mark.gate
def test_node_in_the_path_reads_each_nodes_copy(datasets, tmp_path):
    root = tmp_path / "mnt"
    (root / "node0").mkdir(parents=True)
    (root / "node1").mkdir()
    shutil.copytree(datasets["cifar10"], root / "node0" / "ds")
    os.symlink(datasets["cifar10"], root / "node1" / "ds")
    out, verdict = run_verdict("rel_node.py", 2, root, "ds", env=FAST, timeout=120)
    assert verdict is not None, out.stderr[-3000:]
    assert out.returncode == 0 and verdict["outcomes"] == [[], []], verdict


def test_timeout_setting_is_checked(monkeypatch):
    from lmdbio.errors import ConfigurationError
    from lmdbio.waiting import DEFAULT_TIMEOUT, timeout

    monkeypatch.delenv("LMDBIO_TIMEOUT", raising=False)
    assert timeout() == DEFAULT_TIMEOUT
    monkeypatch.setenv("LMDBIO_TIMEOUT", "2.5")
    assert timeout() == 2.5
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv("LMDBIO_TIMEOUT", bad)
        with pytest.raises(ConfigurationError, match="LMDBIO_TIMEOUT"):
            timeout()


def test_single_rank_stats_report_the_lock_and_setup(datasets):
    for variant in lmdbio.VARIANTS:
        with lmdbio.Reader(datasets["cifar10"], 8, variant=variant) as r:
            r.read_batch()
            rows = r.stats()
        assert {row["lock"] for row in rows} == {True}, variant
        assert [row for row in rows if row["phase"] == "setup"], variant


def test_on_error_comes_from_the_environment(datasets, monkeypatch):
    monkeypatch.setenv("LMDBIO_ON_ERROR", "raise")
    with lmdbio.Reader(datasets["cifar10"], 8, variant="lmdb") as r:
        assert r._on_error == "raise"
    monkeypatch.setenv("LMDBIO_ON_ERROR", "explode")
    with pytest.raises(ValueError, match="on_error"):
        lmdbio.Reader(datasets["cifar10"], 8, variant="lmdb")


@pytest.fixture
def read_only_copy(datasets, tmp_path):
    """A copy of cifar10 (no lock.mdb) where no lock file can be made: a read-only bind mount
    as root, a mode-0555 directory otherwise."""
    src = tmp_path / "src"
    shutil.copytree(datasets["cifar10"], src)
    (src / "lock.mdb").unlink(missing_ok=True)
    if os.geteuid() != 0:
        src.chmod(0o555)
        yield src
        src.chmod(0o755)
        return
    mnt = tmp_path / "ro"
    mnt.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount: {r.stderr.strip()}")
    try:
        r = subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount read-only: {r.stderr.strip()}")
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    assert str(mnt) not in Path("/proc/mounts").read_text()


def test_no_lock_file_falls_back_once_and_says_so(read_only_copy, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="lmdbio")
    for variant in ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio"):
        with lmdbio.Reader(read_only_copy, 8, variant=variant) as r:
            assert len(r.read_batch()) == 8
            assert {row["lock"] for row in r.stats()} == {False}, variant
    warned = [rec for rec in caplog.records if "lock file" in rec.getMessage()]
    assert len(warned) == 1, [rec.getMessage() for rec in caplog.records]
