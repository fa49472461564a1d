"""The shared storage target (lmdbio.lab.storage.shared): one budget on S, private node caches, nothing left.

The device tests (marked ``throttled``, so ``make test-fast`` leaves them out)
skip, saying why, where a target cannot be made (not root, no loop devices,
no blkio/io controller, no mkfs.ext4). The one timing check compares two
reads of the same bytes on the same device, one node against two at once,
in a wide band: it asserts that the budget is shared, not how fast S is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmdbio.errors import ConfigurationError
from lmdbio.lab.storage import devices as dv
from lmdbio.lab.storage import shared as sh

from storage_helpers import bench_sweep, everything, kill_holder, parts, present

OK, WHY = sh.shared_available()
needs_device = pytest.mark.skipif(not OK, reason=f"no shared storage target here: {WHY}")
#: Fixed budget of the timing check: 16 MiB of file per node read in about 0.8 s alone.
BPS, IOPS = 20_000_000, 100_000
FILE_BYTES = 16 << 20


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A folder with one incompressible file (the storage is under test, not LMDB)."""
    d = tmp_path_factory.mktemp("shared_src") / "ds"
    d.mkdir()
    (d / "blob.bin").write_bytes(os.urandom(FILE_BYTES))
    return d


def _read(paths: list[str]) -> float:
    """Seconds for one process per path to read its whole file at once (buffered, 1 MiB reads)."""
    code = ("import sys\nf = open(sys.argv[1], 'rb')\n"
            "while f.read(1 << 20):\n    pass\n")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", code, p]) for p in paths]
    assert [p.wait(timeout=60) for p in procs] == [0] * len(paths)
    return time.monotonic() - t0


# --- without a device -------------------------------------------------------------------------

def test_profiles_are_sourced_ranged_and_scale_with_the_run():
    for name in sh.SHARED_PROFILES:
        p = sh.load_shared_profile(name)
        for key in ("fs_bw", "fs_iops", "clients", "ranks_per_client", "read_ahead_kb",
                    "time_scale"):
            kind = p.sources[key].split(":")[0].split()[0]
            assert kind in ("source", "estimate", "choice"), (name, key)
            if kind == "estimate" or key in p.ranges:
                low, high = p.ranges[key]        # every estimate carries a range
                assert low <= getattr(p, key) <= high, (name, key)
    p = sh.load_shared_profile("gpfs-2017", time_scale=1.0)
    one = p.limits(36 * 256)                        # the whole file system
    assert one == (int(p.fs_bw), int(p.fs_iops))
    four, sixteen = p.limits(4), p.limits(16)
    assert sixteen[0] == pytest.approx(4 * four[0], rel=1e-6)   # the run's nodes' share
    fast = sh.load_shared_profile("gpfs-2017", time_scale=0.5).limits(16)
    assert fast[0] == pytest.approx(2 * sixteen[0], rel=1e-6)
    assert fast[0] / fast[1] == pytest.approx(sixteen[0] / sixteen[1], rel=1e-2)  # k keeps the ratio
    with pytest.raises(ConfigurationError, match="unknown shared-storage profile"):
        sh.load_shared_profile("nfs")


def test_time_scale_from_the_environment(monkeypatch):
    monkeypatch.setenv(sh.SHARED_TIME_SCALE_ENV, "2")
    assert sh.load_shared_profile("gpfs-2017").time_scale == 2.0
    monkeypatch.setenv(sh.SHARED_TIME_SCALE_ENV, "fast")
    with pytest.raises(ConfigurationError, match=sh.SHARED_TIME_SCALE_ENV):
        sh.load_shared_profile("gpfs-2017")


@pytest.mark.parametrize("version", [1, 2])
def test_s_rule_is_one_rule_in_either_cgroup_version(tmp_path, version):
    """S's rule as each backend writes it (folders stand in for the root and S's cgroup): v1, the
    two blkio.throttle rules in the root; v2, one io.max in S's cgroup."""
    cg = tmp_path / "cg"
    cg.mkdir()
    st = {"state_file": str(tmp_path / "state.json"), "s_majmin": "7:3",
          "rule": {"version": version, "root": str(tmp_path),
                   "cgroup": str(cg) if version == 2 else None, "enabled": []},
          "limits": {}}
    sh.set_budget(st, 5_000_000, 300)
    if version == 1:
        assert sh.v1_rules(str(tmp_path)) == {"7:3": (5_000_000, 300)}
        assert list(cg.iterdir()) == []
    else:
        assert (cg / "io.max").read_text() == "7:3 rbps=5000000 riops=300"
        assert sh.v1_rules(str(tmp_path)) == {}
    assert json.loads(Path(st["state_file"]).read_text())["limits"]["read_iops"] == 300
    with pytest.raises(ValueError, match="positive"):
        sh.set_budget(st, 0, 300)


def test_unavailable_is_one_line_saying_why(monkeypatch, src):
    from lmdbio.lab.storage import throttle as th

    monkeypatch.setattr(th.os, "geteuid", lambda: 1000)
    ok, why = sh.shared_available()
    assert not ok and "root" in why and "\n" not in why
    with pytest.raises(sh.ThrottleUnavailable, match="root"):
        with sh.shared(src):
            pass


def test_bench_parses_shared_storage():
    from lmdbio.lab.bench.settings import Storage, parse_storage

    assert parse_storage("shared:gpfs-2017") == ("shared", "gpfs-2017")
    with pytest.raises(ValueError, match="shared:PROFILE"):
        parse_storage("shared")
    st = Storage.from_point({"storage": "shared:gpfs-2017", "pfs_mount": "/m", "pfs_relpath": "ds",
                             "ranks_per_node": 4, "shared_state": "/s.json"})
    assert st.is_shared and not st.is_throttle and st.node_of(5) == 1
    assert st.reader_path("/x/ds") == "/m/node{node}/ds"


# --- on a device ------------------------------------------------------------------------------

@needs_device
@pytest.mark.throttled
@pytest.mark.gate
def test_two_nodes_share_one_budget_and_cache_apart(src, nothing_left):
    with sh.shared(src, nodes=2, read_bps=BPS, read_iops=IOPS) as s:
        rule = s._state["rule"]
        if rule["version"] == 1:
            assert sh.v1_rules()[s.s_majmin] == (BPS, IOPS)
            for dev in s.devices:                      # the nodes carry no rule of their own
                assert dv.majmin(dev) not in sh.v1_rules()
        else:
            assert Path(rule["cgroup"], "io.max").read_text().split()[:1] == [s.s_majmin]
            s.join()
        f0, f1 = s.path(0, "ds/blob.bin"), s.path(1, "ds/blob.bin")
        assert Path(f0).read_bytes()[:4096] == (src / "blob.bin").read_bytes()[:4096]
        s.evict()
        c0 = s.counters()["s"]
        alone = _read([f0])
        c1 = s.counters()["s"]
        assert c1["bytes"] - c0["bytes"] >= FILE_BYTES           # node 0's misses were reads of S
        # a warm re-read is node 0's own cache: S is not asked
        _read([f0])
        assert s.counters()["s"]["bytes"] == c1["bytes"]
        assert s.counters()["s"]["ios"] == c1["ios"]
        # node 1 does not see node 0's cache: its read goes to S
        _read([f1])
        c2 = s.counters()["s"]
        assert c2["bytes"] - c1["bytes"] >= FILE_BYTES
        # both cold, both at once: one budget, so about twice as long as one alone
        s.evict()
        both = _read([f0, f1])
        c3 = s.counters()["s"]
        assert c3["bytes"] - c2["bytes"] >= 2 * FILE_BYTES
        ratio = both / alone
        assert 1.6 <= ratio <= 2.6, (f"two nodes at once took {both:.2f} s, one alone {alone:.2f} s "
                                     f"(ratio {ratio:.2f}); a shared budget gives about 2")


@needs_device
@pytest.mark.throttled
@pytest.mark.gate
def test_nothing_stays_after_an_exception(src, nothing_left):
    with pytest.raises(RuntimeError, match="inside"):
        with sh.shared(src, nodes=2) as s:
            info = parts(s._state)
            assert present(info) == everything(info)
            assert info["rule"] or len(info["cgroups"]) == 1    # v1: S's rule; v2: its cgroup
            raise RuntimeError("inside the block")
    assert present(info) == []
    assert sh.SHARED_STATE_ENV not in os.environ


@needs_device
@pytest.mark.throttled
@pytest.mark.gate
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_nothing_stays_after_the_holder_is_killed(src, nothing_left, sig):
    """SIGTERM: the handler raises and finally cleans up; SIGKILL: the janitor does."""
    code = ("import time; from lmdbio.lab.storage.shared import shared\n"
            f"with shared({str(src)!r}, nodes=2) as s:\n"
            "    print(s.state_file, flush=True)\n"
            "    time.sleep(120)\n")
    kill_holder(code, sig, sh.cleanup)


@needs_device
@pytest.mark.throttled
@pytest.mark.gate
@pytest.mark.mpi
def test_bench_sweep_on_the_shared_target(tmp_path, nothing_left):
    """``lmdbio bench --storage shared:PROFILE``: 2 virtual nodes, S's budget and counters per point."""
    from lmdbio.lab.bench.settings import s_counter_table
    from lmdbio.datasets import make_dataset

    ds = make_dataset(tmp_path / "ds", "cifar10", 300, commit_every=100, seed=3)
    bench_sweep(ds, "shared:gpfs-2017", tmp_path / "out")
    t = s_counter_table(tmp_path / "out" / "points.csv")
    assert (t["point_s_bytes"] >= t["timed_s_bytes"]).all() and (t["timed_s_bytes"] > 0).all()
    # the point set S's budget for its own 2 ranks
    assert (t["s_budget_bps"] == sh.load_shared_profile("gpfs-2017").limits(2)[0]).all()
