"""The emulated parallel file system through a real FUSE mount (skipped only without /dev/fuse)."""

from __future__ import annotations

import errno
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lmdbio.lab.pfs import mount as pm
from lmdbio.lab.procs import pid_alive

pytestmark = [pytest.mark.fuse, pytest.mark.gate]

ROOT = Path(__file__).resolve().parents[1]

if not os.path.exists("/dev/fuse"):
    pytest.skip("FUSE tests need /dev/fuse (absent here: load the fuse module or give the container "
                "--device /dev/fuse)", allow_module_level=True)


def run_cli(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "lmdbio", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def mounted_points() -> str:
    return Path("/proc/mounts").read_text()


@pytest.fixture
def no_stale_mount(tmp_path):
    """Every test leaves /proc/mounts without any mount under its tmp_path."""
    yield
    assert str(tmp_path) not in mounted_points(), "a FUSE mount was left behind"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A source tree: two small LMDBs and a file of known bytes."""
    from lmdbio.datasets import make_dataset

    root = tmp_path_factory.mktemp("pfs_src")
    make_dataset(root / "cifar10", "cifar10", 400, commit_every=100, seed=1)
    make_dataset(root / "imagenet", "imagenet", 12, commit_every=4, seed=2)
    (root / "blob.bin").write_bytes(os.urandom(3 << 20))
    return root


def node_counters(m, node):
    return m.counters()["nodes"][node]


def test_layout_bytes_and_readonly(src, tmp_path, no_stale_mount):
    with pm.mounted(src, profile="local", nodes=3, mnt=tmp_path / "mnt dir") as m:  # a space: \040
        assert sorted(os.listdir(m.mnt)) == [".pfs-stats", "node0", "node1", "node2"]
        assert sorted(os.listdir(m.path(2))) == sorted(os.listdir(src))
        for k in range(3):
            assert Path(m.path(k, "blob.bin")).read_bytes() == (src / "blob.bin").read_bytes()
        # each node view is a distinct inode (its own page cache)
        inos = {os.stat(m.path(k, "blob.bin")).st_ino for k in range(3)}
        assert len(inos) == 3
        with pytest.raises(OSError) as e:
            open(m.path(0, "blob.bin"), "r+b")
        assert e.value.errno in (errno.EROFS, errno.EACCES)
        with pytest.raises(OSError):
            (Path(m.path(0)) / "new").write_bytes(b"x")
        with pytest.raises(FileNotFoundError):
            os.stat(os.path.join(m.mnt, "node3"))
        st = m.stats()
        assert st["profile"]["name"] == "local" and st["nodes"] == 3
        assert st["counters"]["total"]["bytes"] >= 3 * (3 << 20)
        assert st["kernel"]["max_read"] == st["profile"]["read_size"]


def test_lmdb_dump_and_pylmdb_through_mount(src, tmp_path, no_stale_mount):
    import lmdb

    with pm.mounted(src, profile="gpfs-2017", nodes=2, mnt=tmp_path / "mnt", time_scale=0.05) as m:
        for name in ("cifar10", "imagenet"):
            direct = run_cli("dump", src / name)
            through = run_cli("dump", m.path(1, name))
            assert direct.returncode == 0, direct.stderr
            assert through.returncode == 0, through.stderr
            assert through.stdout == direct.stdout and len(direct.stdout) > 1000

            def records(path):
                env = lmdb.open(str(path), readonly=True, lock=False, readahead=True, subdir=True)
                try:
                    with env.begin() as txn:
                        return list(txn.cursor())
                finally:
                    env.close()

            assert records(m.path(0, name)) == records(src / name)
        c = m.counters()
        assert c["nodes"][0]["requests"] > 0 and c["nodes"][1]["requests"] > 0
        # gpfs-2017 readahead is 64 KiB: no request of a page-fault reader is larger than 128 KiB
        assert max(int(b) for b in c["nodes"][0]["hist"]) <= 128 << 10


def test_mmap_and_page_cache_per_node(src, tmp_path, no_stale_mount):
    data = (src / "blob.bin").read_bytes()
    with pm.mounted(src, profile="local", nodes=2, mnt=tmp_path / "mnt") as m:
        f0 = m.path(0, "blob.bin")
        with open(f0, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert mm[:] == data
            assert mm[12345:12345 + 100] == data[12345:12345 + 100]
        r0 = node_counters(m, 0)["requests"]
        assert r0 > 0 and node_counters(m, 0)["bytes"] >= len(data)
        # warm: a second read of node 0 is served by its page cache
        assert Path(f0).read_bytes() == data
        assert node_counters(m, 0)["requests"] == r0
        # node 1 has its own cache: cold
        assert node_counters(m, 1)["requests"] == 0
        assert Path(m.path(1, "blob.bin")).read_bytes() == data
        r1 = node_counters(m, 1)["requests"]
        assert r1 > 0
        # evicting node 1 empties node 1 only
        assert m.evict(1, "blob.bin") == 1
        assert Path(m.path(0, "blob.bin")).read_bytes() == data
        assert node_counters(m, 0)["requests"] == r0
        assert Path(m.path(1, "blob.bin")).read_bytes() == data
        assert node_counters(m, 1)["requests"] > r1
        # a directory evicts every file below it, on every node
        assert m.evict(None, "cifar10") == 2 * len(os.listdir(src / "cifar10"))


def test_reads_wait_for_the_model_and_queue(src, tmp_path, no_stale_mount):
    """Concurrent readers of one node queue at the targets: the model says so and the reads wait."""
    with pm.mounted(src, profile="gpfs-2017", nodes=4, mnt=tmp_path / "mnt", time_scale=1.0) as m:
        paths = [m.path(k, "blob.bin") for k in range(4)]
        errors = []

        def read(p):
            try:
                with open(p, "rb", buffering=0) as f:
                    while f.read(1 << 20):
                        pass
            except OSError as exc:  # pragma: no cover - reported below
                errors.append(exc)

        t0 = time.monotonic()
        threads = [threading.Thread(target=read, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        assert not errors
        st = m.stats()
        c = st["counters"]
        # all four node views read the whole file from the shared targets
        assert [n["bytes"] for n in c["nodes"]] == [3 << 20] * 4
        assert c["total"]["queue_wait_s"] > 0, "concurrent readers never waited for a target"
        assert st["served"]["inflight_max"] > 1, "the daemon never served two reads at once"
        # the model's busiest target bounds the wall time from below (each read slept until done)
        busiest = max(t["busy_s"] for t in c["targets"])
        assert wall >= busiest
        print(f"\n4 concurrent cold readers of 3 MiB on gpfs-2017 (scale 1): {wall * 1e3:.0f} ms wall, "
              f"busiest target {busiest * 1e3:.0f} ms, queue wait {c['total']['queue_wait_s'] * 1e3:.0f} ms, "
              f"{c['total']['requests']} requests, {c['total']['seeks']} seeks")


def test_eio_past_end_of_file(src, tmp_path, no_stale_mount):
    own = tmp_path / "src"
    own.mkdir()
    (own / "f.bin").write_bytes(os.urandom(1 << 20))
    with pm.mounted(own, profile="local", nodes=1, mnt=tmp_path / "mnt") as m:
        p = m.path(0, "f.bin")
        assert os.stat(p).st_size == 1 << 20  # the kernel caches this size
        os.truncate(own / "f.bin", 4096)      # the file shrinks under the mount
        fd = os.open(p, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                os.pread(fd, 4096, 512 << 10)
            assert e.value.errno == errno.EIO
        finally:
            os.close(fd)
        assert m.stats()["served"]["eio"] >= 1


def test_cli_mount_stats_umount(src, tmp_path, no_stale_mount):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run_cli("pfs", "mount", src, mnt, "--profile", "lustre", "--nodes", "2", "--time-scale", "0.1")
    try:
        assert r.returncode == 0, r.stderr
        assert str(mnt) in mounted_points()
        # the daemon outlives the command
        assert (mnt / "node1" / "blob.bin").read_bytes() == (src / "blob.bin").read_bytes()
        s = run_cli("pfs", "stats", mnt)
        assert s.returncode == 0, s.stderr
        st = json.loads(s.stdout)
        assert st["profile"]["name"] == "lustre" and st["profile"]["time_scale"] == 0.1
        assert st["counters"]["nodes"][1]["bytes"] >= 3 << 20
        assert st["kernel"]["read_ahead_kb"] in (None, st["profile"]["readahead"] // 1024)
        assert json.loads(run_cli("pfs", "stats", mnt, "--counters").stdout)["profile"] == "lustre"
        again = run_cli("pfs", "mount", src, mnt, "--profile", "local")
        assert again.returncode == 1 and "already a mount point" in again.stderr
    finally:
        u = run_cli("pfs", "umount", mnt)
    assert u.returncode == 0, u.stderr
    assert str(mnt) not in mounted_points()
    bad = run_cli("pfs", "stats", mnt)
    assert bad.returncode == 1 and bad.stderr.startswith("lmdbio: error:")


def test_umount_after_crashed_daemon(src, tmp_path, no_stale_mount):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = pm.start(src, mnt, profile="local", nodes=1, detach=True)
    try:
        os.kill(m.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(m.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert str(mnt) in mounted_points()  # the stale mount of a dead daemon
        with pytest.raises(OSError) as e:
            os.listdir(mnt)
        assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        r = run_cli("pfs", "umount", mnt)
        assert r.returncode == 0, r.stderr
        assert str(mnt) not in mounted_points()
        assert os.listdir(mnt) == []
    finally:
        pm.umount(mnt)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_mount_ends_with_its_holder(src, tmp_path, no_stale_mount, sig):
    """A process holding mounted() that is SIGKILLed (no finally, no atexit: the daemon dies
    with its parent) or SIGTERMed (the handler unmounts) leaves no mount."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = ("import time; from lmdbio.lab.pfs import mounted\n"
            f"with mounted({str(src)!r}, profile='local', nodes=1, mnt={str(mnt)!r}):\n"
            "    print('ready', flush=True); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().strip() == "ready"
        assert str(mnt) in mounted_points()
        p.send_signal(sig)
        p.wait(timeout=10)
        deadline = time.monotonic() + 15
        while str(mnt) in mounted_points() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert str(mnt) not in mounted_points()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        pm.umount(mnt)


def test_no_fuse_is_one_clear_error(src, tmp_path, monkeypatch):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # no fusermount3 on PATH: the command says what is missing and how to install it
    r = run_cli("pfs", "mount", src, mnt, env={"PATH": str(tmp_path)})
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lmdbio: error: FUSE is not available")
    assert "fusermount3" in lines[0] and "apt-get install" in lines[0]
    assert str(mnt) not in mounted_points()
    # no /dev/fuse
    real_exists = os.path.exists
    monkeypatch.setattr(pm.os.path, "exists", lambda p: False if p == "/dev/fuse" else real_exists(p))
    with pytest.raises(pm.FuseUnavailable, match="/dev/fuse is absent"):
        pm.check_fuse()


def test_bad_mount_points(src, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(pm.LmdbioError, match="not empty"):
        pm.start(src, full, profile="local")
    with pytest.raises(pm.LmdbioError, match="not a directory"):
        pm.start(tmp_path / "missing", tmp_path / "m", profile="local")
    with pytest.raises(pm.LmdbioError, match="not a directory"):
        pm.start(src, full / "x", profile="local")
    with pytest.raises(ValueError, match="unknown storage profile"):
        pm.start(src, tmp_path / "m", profile="nfs")


def test_temporary_mount_point_is_removed(src, no_stale_mount):
    with pm.mounted(src, profile="local") as m:
        mnt = m.mnt
        assert os.path.isdir(m.path(0, "cifar10"))
    assert not os.path.exists(mnt)
    assert mnt not in mounted_points()


def test_splice_and_copy_paths_serve_the_same_bytes(tmp_path, no_stale_mount):
    """local (spliced replies where the pipe allows) and lustre (1 MiB: copied) read byte for byte.

    Odd sizes and offsets, a file that ends mid-page, unbuffered reads
    bigger than one request, page-cache reads and mmap.
    """
    from lmdbio.lab.pfs.fs import splice_limit
    from lmdbio.lab.pfs.model import load_profile

    own = tmp_path / "src"
    own.mkdir()
    data = os.urandom((5 << 20) + 12345)
    (own / "odd.bin").write_bytes(data)
    rng = __import__("random").Random(7)
    for profile in ("local", "lustre"):
        read_size = load_profile(profile).read_size
        with pm.mounted(own, profile=profile, nodes=2, mnt=tmp_path / f"mnt-{profile}",
                        time_scale=0.01) as m:
            st = m.stats()
            assert st["kernel"]["splice"] == (read_size <= splice_limit()), st["kernel"]
            p = m.path(1, "odd.bin")
            fd = os.open(p, os.O_RDONLY)
            try:
                for _ in range(40):
                    off = rng.randrange(len(data) + 100)
                    n = rng.choice([1, 4095, 4096, 65537, 3 << 20])
                    assert os.pread(fd, n, off) == data[off:off + n], (profile, off, n)
            finally:
                os.close(fd)
            m.evict(1, "odd.bin")
            with open(p, "rb", buffering=0) as f:
                assert f.read() == data
            with open(m.path(0, "odd.bin"), "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                assert mm[:] == data
            c = m.counters()
            assert c["total"]["bytes"] >= 2 * len(data)
            assert max(int(b) for n in c["nodes"] for b in n["hist"]) <= 1 << (read_size - 1).bit_length()


def test_emulated_pfs_rewrites_points_and_unmounts(src, no_stale_mount):
    # The notebooks' (b) setting: the same points, each reading through its virtual node's view.
    from lmdbio.lab.experiments import emulated_pfs

    pts = [dict(nprocs=4, dataset=str(src / "cifar10"), variant="lmdb", ranks_per_node=None),
           dict(nprocs=3, dataset=str(src / "imagenet"), variant="lmdb", ranks_per_node=1)]
    with emulated_pfs(src, pts, "gpfs-2017", ranks_per_node=2) as on:
        st0, st1 = on[0]["storage"], on[1]["storage"]
        mnt = st0.mount
        assert (on[0]["ranks_per_node"], on[1]["ranks_per_node"]) == (2, 1)
        assert (st0.spec, st0.relpath, st1.relpath) == ("pfs:gpfs-2017", "cifar10", "imagenet")
        assert st0.node_of(3) == 1 and st1.node_of(2) == 2
        # As many node views as the widest point needs: max(4/2, 3/1) = 3.
        assert sorted(p.name for p in Path(mnt).iterdir() if p.name.startswith("node")) == \
            ["node0", "node1", "node2"]
        through = Path(st0.reader_path(pts[0]["dataset"]).replace("{node}", "1")) / "data.mdb"
        assert through.read_bytes() == (src / "cifar10" / "data.mdb").read_bytes()
        assert mnt in mounted_points()
    assert pts[0]["ranks_per_node"] is None and "storage" not in pts[0], "the caller's points are kept"
    assert mnt not in mounted_points()


def test_reader_timeline_reads_through_the_emulated_pfs(src, no_stale_mount):
    # 07/08's timelines on (b): the Reader opens the node view and the storage model sees the reads.
    code = f"""
import json
from mpi4py import MPI
from lmdbio.lab import pfs
from lmdbio.lab.experiments import emulated_pfs, reader_timeline
pts = [dict(nprocs=1, dataset={str(src / 'cifar10')!r}, ranks_per_node=1)]
with emulated_pfs({str(src)!r}, pts) as on:
    before = pfs.stats(on[0]["storage"].mount)["counters"]["total"]["bytes"]
    rows = reader_timeline(MPI.COMM_SELF, on[0]["dataset"], "lmdbio-lmm-dio", 20, 3, cache="cold",
                           ranks_per_node=1, storage=on[0]["storage"])
    after = pfs.stats(on[0]["storage"].mount)["counters"]["total"]["bytes"]
print(json.dumps(dict(storage=rows[0]["storage"], records=rows[0]["records"], read=after - before,
                      resident=rows[0]["resident_fraction"])))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["storage"] == "pfs:gpfs-2017" and got["records"] == 60
    assert got["read"] >= 60 * 3000, "the timed batches were read from the emulated storage"
    assert got["resident"] < 0.5, "cold: the node view was evicted before the timed batches"
