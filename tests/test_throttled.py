"""The throttled real block device (lmdbio.lab.storage): loop devices, mounts, cgroups, and nothing left.

The device tests skip, saying why, where one cannot be made (not root, no
loop devices, no blkio/io controller, no mkfs.ext4). No test asserts on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lmdbio.lab import pagecache
from lmdbio.lab.storage import devices as dv
from lmdbio.lab.storage import throttle as th

from conftest import run_mpi
from storage_helpers import bench_sweep, everything, kill_holder, parts, present

ROOT = Path(__file__).resolve().parents[1]
OK, WHY = th.throttle_available()
needs_device = pytest.mark.skipif(not OK, reason=f"no throttled device here: {WHY}")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    root = tmp_path_factory.mktemp("thr_src")
    return make_dataset(root / "ds", "cifar10", 300, commit_every=100, seed=3)


# --- without a device -------------------------------------------------------------------------

def test_profiles_are_sourced_and_scale_per_node():
    for name in th.THROTTLE_PROFILES:
        p = th.load_throttle_profile(name)
        for key in ("client_bw", "targets", "target_iops", "ranks_per_client", "read_ahead_kb",
                    "time_scale"):
            assert p.sources[key].split(":")[0].split()[0] in ("source", "estimate", "choice"), (name, key)
    p = th.load_throttle_profile("gpfs-2017", time_scale=1.0)
    assert p.node_limits(36) == (int(1.0e9), 8000)            # one whole client
    bps, iops = p.node_limits(4)
    assert bps == int(1.0e9 * 4 / 36) and iops == round(8000 * 4 / 36)
    slow = th.load_throttle_profile("gpfs-2017", time_scale=4.0).node_limits(4)
    assert slow == (int(bps / 4), round(8000 * 4 / 36 / 4))  # the scale keeps bps / iops
    with pytest.raises(ValueError, match="unknown throttle profile"):
        th.load_throttle_profile("nfs")


def test_unavailable_is_one_line_saying_why(monkeypatch, src):
    monkeypatch.setattr(th.os, "geteuid", lambda: 1000)
    ok, why = th.throttle_available()
    assert not ok and "root" in why and "\n" not in why
    with pytest.raises(th.ThrottleUnavailable, match="root"):
        with th.throttled(src):
            pass
    monkeypatch.setattr(th.os, "geteuid", lambda: 0)
    real_which = th.shutil.which
    monkeypatch.setattr(th.shutil, "which", lambda t: None if t == "mkfs.ext4" else real_which(t))
    if os.path.exists("/dev/loop-control"):
        ok, why = th.throttle_available()
        assert not ok and "mkfs.ext4" in why and "e2fsprogs" in why


def test_node_rules_and_counters_in_cgroup_v1_and_v2(tmp_path):
    """Each backend's per-node rule and served counters (a folder stands in for the node's cgroup):
    v1 blkio.throttle files, v2 io.max and io.stat."""
    cg = tmp_path / "node0"
    cg.mkdir()
    v1, v2 = dv.controller_for(1, str(tmp_path)), dv.controller_for(2, str(tmp_path))
    v1.limit(str(cg), "7:3", 5_000_000, 300)
    assert (cg / "blkio.throttle.read_bps_device").read_text() == "7:3 5000000"
    assert (cg / "blkio.throttle.read_iops_device").read_text() == "7:3 300"
    assert not (cg / "io.max").exists()
    (cg / "blkio.throttle.io_service_bytes").write_text("7:30 Read 1\n7:3 Read 8192\n7:3 Write 5\n")
    (cg / "blkio.throttle.io_serviced").write_text("7:3 Read 2\n7:3 Write 1\n")
    assert v1.served(str(cg), "7:3") == (8192, 2)
    v2.limit(str(cg), "7:3", 5_000_000, 300)
    assert (cg / "io.max").read_text() == "7:3 rbps=5000000 riops=300"
    (cg / "io.stat").write_text("7:30 rbytes=1 rios=1\n7:3 rbytes=4096 wbytes=5 rios=1 wios=1\n")
    assert v2.served(str(cg), "7:3") == (4096, 1)


def test_bench_parses_throttle_storage():
    from lmdbio.lab.bench.settings import Storage, parse_storage

    assert parse_storage("throttle:gpfs-2017") == ("throttle", "gpfs-2017")
    with pytest.raises(ValueError, match="throttle:PROFILE"):
        parse_storage("throttle")
    st = Storage.from_point({"storage": "throttle:gpfs-2017", "pfs_mount": "/m", "pfs_relpath": "ds",
                             "ranks_per_node": 2, "throttle_state": "/s.json"})
    assert st.is_throttle and st.node_of(3) == 1
    assert st.reader_path("/x/ds") == "/m/node{node}/ds"
    assert not Storage().is_throttle


# --- on a device ------------------------------------------------------------------------------

@pytest.mark.throttled
@pytest.mark.gate
@needs_device
def test_nodes_hold_the_same_bytes_and_cache_apart(src, nothing_left):
    data = (src / "data.mdb").read_bytes()
    with th.throttled(src, nodes=2, profile="gpfs-2017") as t:
        f0, f1 = t.path(0, "ds/data.mdb"), t.path(1, "ds/data.mdb")
        assert sorted(os.listdir(t.mnt)) == ["node0", "node1"]
        assert len(set(t.devices)) == 2
        assert pagecache.residency(f0) == 0.0 and pagecache.residency(f1) == 0.0
        d1 = th.device_counters(t.devices[1])
        assert Path(f0).read_bytes() == data
        # node 0's pages are cached on node 0 only: node 1's device read nothing
        assert pagecache.residency(f0) == 1.0
        assert pagecache.residency(f1) == 0.0
        assert th.device_counters(t.devices[1])["read_bytes"] == d1["read_bytes"]
        assert Path(f1).read_bytes() == data
        assert th.device_counters(t.devices[1])["read_bytes"] >= d1["read_bytes"] + len(data)
        # eviction makes one node cold and leaves the other warm
        assert t.evict(0, "ds") == len(os.listdir(src))
        assert pagecache.residency(f0) == 0.0 and pagecache.residency(f1) == 1.0
        d0 = th.device_counters(t.devices[0])
        assert Path(f0).read_bytes() == data
        assert th.device_counters(t.devices[0])["read_bytes"] >= d0["read_bytes"] + len(data)
        with pytest.raises(OSError):
            open(f0, "r+b")                     # read-only
        assert t.stats()["kernel"]["read_ahead_kb"] == \
            int(Path(f"/sys/block/{os.path.basename(t.devices[0])}/queue/read_ahead_kb").read_text())


@pytest.mark.throttled
@pytest.mark.gate
@needs_device
def test_the_throttle_is_in_force(src, nothing_left):
    size = os.path.getsize(src / "data.mdb")
    with th.throttled(src, nodes=2, profile="gpfs-2017", ranks_per_node=2) as t:
        for dev, cg in zip(t.devices, t.cgroups):
            majmin = dv.majmin(dev)
            if t._state["cgroups"]["version"] == 1:
                lim = Path(cg, "blkio.throttle.read_bps_device").read_text().split()
                assert lim == [majmin, str(t.read_bps)]
                lim = Path(cg, "blkio.throttle.read_iops_device").read_text().split()
                assert lim == [majmin, str(t.read_iops)]
            else:
                assert f"rbps={t.read_bps}" in Path(cg, "io.max").read_text()
        c0 = t.counters()["nodes"]
        # a process in node 0's cgroup reads node 0's cold file: its device and its cgroup count it
        code = ("import sys; from lmdbio.lab.storage import join_node; join_node(0); "
                "f = open(sys.argv[1], 'rb'); n = 0\n"
                "while (b := f.read(1 << 16)): n += len(b)\n"
                "print(n)")
        r = subprocess.run([sys.executable, "-c", code, t.path(0, "ds/data.mdb")], capture_output=True,
                           text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert r.returncode == 0, r.stderr
        assert int(r.stdout) == size
        c1 = t.counters()["nodes"]
        assert c1[0]["read_bytes"] - c0[0]["read_bytes"] >= size
        assert c1[0]["cgroup_read_bytes"] - c0[0]["cgroup_read_bytes"] >= size
        assert c1[1]["cgroup_read_bytes"] == c0[1]["cgroup_read_bytes"]
        # this process is in no node's cgroup: node 1's device reads, its cgroup serves nothing
        Path(t.path(1, "ds/data.mdb")).read_bytes()
        c2 = t.counters()["nodes"]
        assert c2[1]["read_bytes"] - c1[1]["read_bytes"] >= size
        assert c2[1]["cgroup_read_bytes"] == c1[1]["cgroup_read_bytes"]


@pytest.mark.throttled
@pytest.mark.gate
@needs_device
@pytest.mark.mpi
def test_reader_reads_the_source_records_through_node_devices(src, nothing_left, tmp_path):
    with th.throttled(src, nodes=2, profile="gpfs-2017", ranks_per_node=1) as t:
        before = [n["cgroup_read_bytes"] for n in t.counters()["nodes"]]
        run_mpi("check_throttled.py", 2, t.path("{node}", "ds"), src, 1,
                "lmdb,lmdbio-lmm-dm,lmdbio-lmm-dio-prov-coal-stag", tmp_path / "verdict.json",
                timeout=120)
        verdict = json.loads((tmp_path / "verdict.json").read_text())
        # 3 variants, each 2 batches of 16 past src's 300 records
        assert verdict == {"checked": 3 * (-(-300 // 16) + 2) * 16, "failures": []}
        after = [n["cgroup_read_bytes"] for n in t.counters()["nodes"]]
        assert all(a > b for a, b in zip(after, before)), "each rank read through its own node"


@pytest.mark.throttled
@pytest.mark.gate
@needs_device
def test_nothing_stays_after_an_exception(src, nothing_left):
    with pytest.raises(RuntimeError, match="inside"):
        with th.throttled(src, nodes=2) as t:
            info = parts(t._state)
            t.join(1)                      # even with this process in a node's cgroup
            assert present(info) == everything(info)
            assert len(info["cgroups"]) == 3
            raise RuntimeError("inside the block")
    assert present(info) == []
    assert th.STATE_ENV not in os.environ


@pytest.mark.throttled
@pytest.mark.gate
@needs_device
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_nothing_stays_after_the_holder_is_killed(src, nothing_left, sig):
    """SIGTERM: the handler raises and finally cleans up; SIGKILL: the janitor does."""
    code = ("import time; from lmdbio.lab.storage import throttled\n"
            f"with throttled({str(src)!r}, nodes=2) as t:\n"
            "    t.join(0)\n"
            "    print(t.state_file, flush=True)\n"
            "    time.sleep(120)\n")
    kill_holder(code, sig, th.cleanup)


@pytest.mark.throttled
@pytest.mark.gate
@needs_device
@pytest.mark.mpi
def test_bench_sweep_on_throttled_devices(src, tmp_path, nothing_left):
    _, meta = bench_sweep(src, "throttle:gpfs-2017", tmp_path / "out")
    assert meta["config"]["pfs"]["profile"]["read_bps"] > 0
