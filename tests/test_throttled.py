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
import time
from pathlib import Path

import pytest

from lmdbio import metrics
from lmdbio.lab.storage import throttle as th

from conftest import run_mpi

ROOT = Path(__file__).resolve().parents[1]
OK, WHY = th.throttle_available()
needs_device = pytest.mark.skipif(not OK, reason=f"no throttled device here: {WHY}")


def _loop_lines() -> set[str]:
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    return {line for line in r.stdout.splitlines() if "lmdbio-throttle-" in line}


def _our_cgroups() -> set[str]:
    ctl, _ = th._controller()
    if ctl is None:
        return set()
    return {p.name for p in Path(ctl.root).iterdir() if p.name.startswith("lmdbio-")}


def _our_mounts() -> set[str]:
    return {m for m in th._mount_points() if "lmdbio-throttle-" in m}


def leftovers() -> tuple[set, set, set]:
    return _loop_lines(), _our_mounts(), _our_cgroups()


@pytest.fixture
def nothing_left():
    """Every test leaves no loop device, mount or cgroup of its own."""
    before = leftovers()
    yield
    deadline = time.monotonic() + 20    # a janitor may still be at work
    while True:
        after = leftovers()
        new = [a - b for a, b in zip(after, before)]
        if not any(new) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not any(new), f"left behind (loop devices, mounts, cgroups): {new}"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    root = tmp_path_factory.mktemp("thr_src")
    return make_dataset(root / "ds", "cifar10", 300, commit_every=100, seed=3)


def _present(info: dict) -> list[str]:
    """What of a device (its info dict) exists."""
    left = []
    if any(info["image"] in line for line in _loop_lines()):
        left.append("loop device")
    if any(m.startswith(info["mnt"]) for m in th._mount_points()):
        left.append("mount")
    left += [c for c in info["cgroups"] if os.path.isdir(c)]
    if os.path.exists(info["workdir"]):
        left.append("workdir")
    return left


def _info(t) -> dict:
    return {"image": t.image, "mnt": t.mnt, "cgroups": t.cgroups + [str(Path(t.cgroups[0]).parent)],
            "workdir": str(Path(t.state_file).parent), "devices": t.devices}


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
@needs_device
def test_nodes_hold_the_same_bytes_and_cache_apart(src, nothing_left):
    data = (src / "data.mdb").read_bytes()
    with th.throttled(src, nodes=2, profile="gpfs-2017") as t:
        f0, f1 = t.path(0, "ds/data.mdb"), t.path(1, "ds/data.mdb")
        assert sorted(os.listdir(t.mnt)) == ["node0", "node1"]
        assert len(set(t.devices)) == 2
        assert metrics.residency(f0) == 0.0 and metrics.residency(f1) == 0.0
        d1 = th.device_counters(t.devices[1])
        assert Path(f0).read_bytes() == data
        # node 0's pages are cached on node 0 only: node 1's device read nothing
        assert metrics.residency(f0) == 1.0
        assert metrics.residency(f1) == 0.0
        assert th.device_counters(t.devices[1])["read_bytes"] == d1["read_bytes"]
        assert Path(f1).read_bytes() == data
        assert th.device_counters(t.devices[1])["read_bytes"] >= d1["read_bytes"] + len(data)
        # eviction makes one node cold and leaves the other warm
        assert t.evict(0, "ds") == len(os.listdir(src))
        assert metrics.residency(f0) == 0.0 and metrics.residency(f1) == 1.0
        d0 = th.device_counters(t.devices[0])
        assert Path(f0).read_bytes() == data
        assert th.device_counters(t.devices[0])["read_bytes"] >= d0["read_bytes"] + len(data)
        with pytest.raises(OSError):
            open(f0, "r+b")                     # read-only
        assert t.stats()["kernel"]["read_ahead_kb"] == \
            int(Path(f"/sys/block/{os.path.basename(t.devices[0])}/queue/read_ahead_kb").read_text())


@pytest.mark.throttled
@needs_device
def test_the_throttle_is_in_force(src, nothing_left):
    size = os.path.getsize(src / "data.mdb")
    with th.throttled(src, nodes=2, profile="gpfs-2017", ranks_per_node=2) as t:
        for dev, cg in zip(t.devices, t.cgroups):
            majmin = th._majmin(dev)
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
@needs_device
@pytest.mark.mpi
def test_reader_reads_the_source_records_through_node_devices(src, nothing_left):
    with th.throttled(src, nodes=2, profile="gpfs-2017", ranks_per_node=1) as t:
        before = [n["cgroup_read_bytes"] for n in t.counters()["nodes"]]
        out = run_mpi("check_throttled.py", 2, t.path("{node}", "ds"), src, 1,
                      "lmdb,lmdbio-lmm-dm,lmdbio-lmm-dio-prov-coal-stag", timeout=120)
        assert "0 failures" in out.stdout
        after = [n["cgroup_read_bytes"] for n in t.counters()["nodes"]]
        assert all(a > b for a, b in zip(after, before)), "each rank read through its own node"


@pytest.mark.throttled
@needs_device
def test_nothing_stays_after_an_exception(src, nothing_left):
    with pytest.raises(RuntimeError, match="inside"):
        with th.throttled(src, nodes=2) as t:
            info = _info(t)
            t.join(1)                      # even with this process in a node's cgroup
            assert len(_present(info)) == 3 + len(info["cgroups"])
            raise RuntimeError("inside the block")
    assert _present(info) == []
    assert th.STATE_ENV not in os.environ


@pytest.mark.throttled
@needs_device
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_nothing_stays_after_the_holder_is_killed(src, nothing_left, sig):
    """SIGTERM: the handler raises and finally cleans up; SIGKILL: the janitor does."""
    code = ("import json, time; from lmdbio.lab.storage import throttled\n"
            f"with throttled({str(src)!r}, nodes=2) as t:\n"
            "    t.join(0)\n"
            "    print(json.dumps(dict(image=t.image, mnt=t.mnt, workdir=t.state_file.rsplit('/', 1)[0],"
            " cgroups=t.cgroups + [t.cgroups[0].rsplit('/', 1)[0]])), flush=True)\n"
            "    time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    info = None
    try:
        info = json.loads(p.stdout.readline())
        assert len(_present(info)) == 3 + len(info["cgroups"])
        p.send_signal(sig)
        p.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _present(info) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _present(info) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if info is not None:
            th.cleanup(os.path.join(info["workdir"], "state.json"))


@pytest.mark.throttled
@needs_device
@pytest.mark.mpi
def test_bench_sweep_on_throttled_devices(src, tmp_path, nothing_left):
    from lmdbio.lab import bench

    pts = bench.make_points([str(src)], ["lmdbio-lmm-dio"], [2], ["cold"], 16, 3,
                            ranks_per_node=1, storage="throttle:gpfs-2017", baselines=False)
    s = bench.run_sweep(pts, tmp_path / "out", progress=False)
    assert (s["status"] == "ok").all(), s["error"].tolist()
    assert set(s["storage"]) == {"throttle:gpfs-2017"}
    assert (s["pfs_requests"] > 0).all() and (s["pfs_bytes"] > 0).all()
    assert (s["resident_fraction"] <= 0.05).all()
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["config"]["pfs"]["kind"] == "throttle"
    assert meta["config"]["pfs"]["profile"]["read_bps"] > 0
