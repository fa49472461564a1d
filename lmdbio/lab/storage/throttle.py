"""A throttled real block device: the dataset on ext4, one read-only loop device per virtual node.

``throttled(src, nodes=K, profile=...)`` builds an ext4 image of the dataset
folder(s), attaches it K times read-only (``losetup -r --direct-io=on``),
mounts each device ``ro,noload`` at ``MNT/node{k}`` (node-private page
caches: two loop devices of one image cache apart) and makes one cgroup per
node whose device read budget (bytes/s and requests/s) comes from a profile.
A rank joins its node's cgroup (``Throttled.join``, or :func:`join_node`
from a process started inside the block); its reads of node k's device are
then throttled by the kernel. Readahead, the page cache, page locks and the
wake-ups of sleeping faulters are the kernel's own.

Nothing stays behind: every loop device, mount and cgroup is recorded in a
state file as it is made, and removed in ``finally``, at exit, on SIGTERM
(the handler raises ``SystemExit`` when the holder left SIGTERM at its
default) and, when the holder is killed outright, by a janitor process that
waits for the holder's end on a pipe.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from lmdbio.errors import ConfigurationError, LmdbioError
from ..paths import REPO

__all__ = ["ThrottleUnavailable", "ThrottleProfile", "THROTTLE_PROFILES", "load_throttle_profile",
           "throttle_available", "throttled", "Throttled", "join_node", "evict_file", "flush_device",
           "device_counters", "leave_node", "cleanup", "STATE_ENV", "TIME_SCALE_ENV"]

#: Set inside ``with throttled(...)``: the state file that :func:`join_node` reads.
STATE_ENV = "LMDBIO_THROTTLE_STATE"
#: Overrides the profile's time_scale for devices made without one.
TIME_SCALE_ENV = "LMDBIO_THROTTLE_TIME_SCALE"
V1_ROOT = "/sys/fs/cgroup/blkio"
_BLKFLSBUF = 0x1261          # <linux/fs.h>: flush a block device's buffer cache
_PROFILES_FILE = Path(__file__).resolve().parents[1] / "pfs" / "throttle_profiles.toml"
_TOOLS = {"losetup": "util-linux", "mount": "util-linux", "umount": "util-linux",
          "mkfs.ext4": "e2fsprogs"}


class ThrottleUnavailable(LmdbioError):
    """A throttled device cannot be made here (not root, no loop devices, no controller, no mkfs)."""


# --- profiles -----------------------------------------------------------------------------

def _load_raw() -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(_PROFILES_FILE, "rb") as f:
        return tomllib.load(f)


_RAW = _load_raw()
#: Profile names in throttle_profiles.toml.
THROTTLE_PROFILES = tuple(_RAW)


@dataclass(frozen=True)
class ThrottleProfile:
    """A storage client's read budget; ``node_limits`` makes one virtual node's share of it."""

    name: str
    client_bw: float
    targets: int
    target_iops: float
    ranks_per_client: int
    read_ahead_kb: int
    time_scale: float
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def node_limits(self, ranks_per_node: int) -> tuple[int, int]:
        """(read bytes/s, read requests/s) of a virtual node of ``ranks_per_node`` ranks."""
        if not (isinstance(ranks_per_node, int) and ranks_per_node >= 1):
            raise ValueError(f"ranks_per_node must be a positive integer, got {ranks_per_node!r}")
        share = ranks_per_node / self.ranks_per_client
        bps = int(self.client_bw * share / self.time_scale)
        iops = int(round(self.targets * self.target_iops * share / self.time_scale))
        return max(4096, bps), max(1, iops)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "description", "client_bw", "targets",
                                           "target_iops", "ranks_per_client", "read_ahead_kb",
                                           "time_scale")}
        d["sources"] = dict(self.sources)
        return d


def load_throttle_profile(name: str, time_scale: float | None = None) -> ThrottleProfile:
    """Profile ``name`` at its own time scale, ``time_scale``, or ``$LMDBIO_THROTTLE_TIME_SCALE``."""
    if name not in _RAW:
        raise ConfigurationError(f"unknown throttle profile {name!r}; choose one of "
                                 f"{', '.join(THROTTLE_PROFILES)} ({_PROFILES_FILE})")
    raw = _RAW[name]
    if time_scale is None and os.environ.get(TIME_SCALE_ENV):
        try:
            time_scale = float(os.environ[TIME_SCALE_ENV])
        except ValueError:
            raise ValueError(f"{TIME_SCALE_ENV}={os.environ[TIME_SCALE_ENV]!r} is not a number") from None
    try:
        p = ThrottleProfile(
            name=name, client_bw=float(raw["client_bw"]), targets=int(raw["targets"]),
            target_iops=float(raw["target_iops"]), ranks_per_client=int(raw["ranks_per_client"]),
            read_ahead_kb=int(raw["read_ahead_kb"]),
            time_scale=float(raw["time_scale"] if time_scale is None else time_scale),
            description=str(raw.get("description", "")),
            sources=MappingProxyType(dict(raw.get("sources", {}))))
    except KeyError as exc:
        raise ConfigurationError(f"throttle profile {name!r} lacks {exc.args[0]!r}") from None
    if not (p.client_bw > 0 and p.targets >= 1 and p.target_iops > 0 and p.ranks_per_client >= 1
            and p.read_ahead_kb >= 0 and p.time_scale > 0):
        raise ConfigurationError(f"throttle profile {name!r}: bandwidth, targets, IOPS, ranks and "
                                 "time_scale must be positive, read_ahead_kb >= 0")
    return p


# --- the cgroup controller ------------------------------------------------------------------

def _write(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class _CgroupV1:
    """blkio: blkio.throttle.read_{bps,iops}_device per (cgroup, device); flat limits."""

    version = 1

    def __init__(self, root: str = V1_ROOT):
        self.root = root

    def prepare(self, base: str) -> None:
        pass

    def limit(self, cg: str, majmin: str, bps: int, iops: int) -> None:
        _write(os.path.join(cg, "blkio.throttle.read_bps_device"), f"{majmin} {bps}")
        _write(os.path.join(cg, "blkio.throttle.read_iops_device"), f"{majmin} {iops}")

    def served(self, cg: str, majmin: str) -> tuple[int, int]:
        """(bytes, requests) this cgroup has read from the device."""
        def read(name):
            try:
                text = Path(cg, name).read_text()
            except OSError:
                return 0
            m = re.search(rf"^{re.escape(majmin)} Read (\d+)$", text, re.M)
            return int(m.group(1)) if m else 0
        return read("blkio.throttle.io_service_bytes"), read("blkio.throttle.io_serviced")


class _CgroupV2(_CgroupV1):
    """io: io.max ``MAJ:MIN rbps=.. riops=..``; the io controller enabled for the subtree."""

    version = 2

    def prepare(self, base: str) -> None:
        for d in (self.root, base):
            ctl = os.path.join(d, "cgroup.subtree_control")
            if "io" not in Path(ctl).read_text().split():
                _write(ctl, "+io")

    def limit(self, cg: str, majmin: str, bps: int, iops: int) -> None:
        _write(os.path.join(cg, "io.max"), f"{majmin} rbps={bps} riops={iops}")

    def served(self, cg: str, majmin: str) -> tuple[int, int]:
        try:
            text = Path(cg, "io.stat").read_text()
        except OSError:
            return 0, 0
        for line in text.splitlines():
            if line.startswith(majmin + " "):
                kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
                return int(kv.get("rbytes", 0)), int(kv.get("rios", 0))
        return 0, 0


def _v2_root() -> str | None:
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return _unescape(parts[1])
    return None


def _controller() -> tuple[_CgroupV1 | None, str]:
    """The cgroup backend, or None and why not."""
    if os.path.exists(os.path.join(V1_ROOT, "blkio.throttle.read_bps_device")):
        return _CgroupV1(V1_ROOT), f"cgroup v1 blkio at {V1_ROOT}"
    root = _v2_root()
    if root and "io" in Path(root, "cgroup.controllers").read_text().split():
        return _CgroupV2(root), f"cgroup v2 io controller at {root}"
    return None, ("no throttling controller: neither cgroup v1 blkio (with blkio.throttle.*) at "
                  f"{V1_ROOT} nor a cgroup v2 hierarchy offering the io controller is mounted")


def throttle_available() -> tuple[bool, str]:
    """(True, what will be used) or (False, one line saying why a throttled device cannot be made)."""
    if not sys.platform.startswith("linux"):
        return False, f"throttled devices need Linux (loop devices and cgroups), not {sys.platform}"
    if os.geteuid() != 0:
        return False, "throttled devices need root (loop devices, mounts and cgroups); run as root"
    if not os.path.exists("/dev/loop-control"):
        return False, "no loop devices: /dev/loop-control is absent (modprobe loop)"
    for tool, pkg in _TOOLS.items():
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed (apt-get install {pkg})"
    ctl, why = _controller()
    if ctl is None:
        return False, why
    return True, why


# --- small helpers ----------------------------------------------------------------------------

def _unescape(text: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mount_points() -> list[str]:
    with open("/proc/mounts") as f:
        return [_unescape(line.split()[1]) for line in f if len(line.split()) > 1]


def _run(cmd: list[str], what: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LmdbioError(f"{what} failed ({' '.join(cmd)}): {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def _majmin(dev: str) -> str:
    rdev = os.stat(dev).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _sysblock(dev: str) -> Path:
    return Path("/sys/block") / os.path.basename(dev)


def _backing_file(dev: str) -> str:
    try:
        return (_sysblock(dev) / "loop" / "backing_file").read_text().strip()
    except OSError:
        return ""


def device_counters(dev: str) -> dict:
    """Block-layer reads the device has completed: requests, bytes and busy seconds (``/sys/block``)."""
    f = (_sysblock(dev) / "stat").read_text().split()
    return {"read_ios": int(f[0]), "read_merges": int(f[1]), "read_bytes": int(f[2]) * 512,
            "read_ticks_s": int(f[3]) / 1000.0}


def evict_file(path: str | os.PathLike, device: str | None = None) -> None:
    """Drop ``path``'s pages from its node's page cache, and the node device's buffer cache.

    posix_fadvise(DONTNEED) empties the file's pages (not those another
    process keeps mapped); BLKFLSBUF on ``device`` drops the file system's
    cached metadata (inode and extent blocks), so the next open reads them
    from the device too. Needs CAP_SYS_ADMIN for the device; without it only
    the file is evicted.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if device:
        flush_device(device)


def flush_device(device: str) -> bool:
    """Drop a block device's buffer cache (BLKFLSBUF, as ``blockdev --flushbufs``); False without
    CAP_SYS_ADMIN."""
    try:
        dfd = os.open(device, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.ioctl(dfd, _BLKFLSBUF, 0)
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)


def _save(state: dict) -> None:
    tmp = state["state_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, state["state_file"])


def _read_state(state) -> dict | None:
    if isinstance(state, dict):
        return state
    try:
        return json.loads(Path(state).read_text())
    except (OSError, ValueError):
        return None


def join_node(node: int, state: str | os.PathLike | None = None, pid: int | None = None) -> str:
    """Put process ``pid`` (default: this one) in node ``node``'s cgroup; returns the cgroup.

    ``state`` defaults to ``$LMDBIO_THROTTLE_STATE``, which ``throttled()``
    sets, so a rank started inside the block (``mpiexec`` ...) calls
    ``join_node(rank // ranks_per_node)`` at start-up. Children started
    after joining inherit the cgroup.
    """
    path = state or os.environ.get(STATE_ENV)
    st = _read_state(path) if path else None
    if not st:
        raise LmdbioError(f"no throttled device to join: {STATE_ENV} is not set or its state file "
                          f"({path}) is gone; join from inside 'with lmdbio.lab.storage.throttled(...)'")
    cgs = st["cgroups"]["nodes"]
    if not (0 <= int(node) < len(cgs)):
        raise ValueError(f"node {node} is not one of the {len(cgs)} throttled nodes")
    _write(os.path.join(cgs[int(node)], "cgroup.procs"), str(pid or os.getpid()))
    return cgs[int(node)]


def leave_node(state: str | os.PathLike | None = None, pid: int | None = None) -> None:
    """Move ``pid`` (default: this process) out of its node's cgroup, back to the controller's root."""
    path = state or os.environ.get(STATE_ENV)
    st = _read_state(path) if path else None
    if not st:
        raise LmdbioError(f"no throttled device to leave: its state file ({path}) is gone")
    _write(os.path.join(st["cgroups"]["root"], "cgroup.procs"), str(pid or os.getpid()))


def cleanup(state, timeout: float = 10.0) -> list[str]:
    """Unmount, detach and remove everything a state file records; idempotent. Returns problems.

    Only what the state lists is touched, and a loop device only while its
    backing file is the recorded image.
    """
    st = _read_state(state)
    if not st:
        return []
    problems: list[str] = []
    mounted = set(_mount_points())
    for mnt in reversed(st.get("mounts", [])):
        if mnt not in mounted:
            continue
        r = subprocess.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode != 0:   # busy (a process still holds a file): detach lazily
            r = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"umount {mnt}: {r.stderr.strip()}")
    image = st.get("image", "")
    for dev in reversed(st.get("devices", [])):
        if image and _backing_file(dev).startswith(image):
            r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
            if r.returncode != 0 and _backing_file(dev).startswith(image):
                problems.append(f"losetup -d {dev}: {r.stderr.strip()}")
    cg = st.get("cgroups") or {}
    root = cg.get("root")
    for d in list(reversed(cg.get("nodes", []))) + ([cg["base"]] if cg.get("base") else []):
        deadline = time.monotonic() + timeout
        while os.path.isdir(d):
            with contextlib.suppress(OSError):
                for pid in Path(d, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):   # back to the root: the cgroup can go
                        _write(os.path.join(root, "cgroup.procs"), pid)
            try:
                os.rmdir(d)
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    problems.append(f"rmdir {d}: {exc.strerror}")
                    break
                time.sleep(0.05)
    for path in cg.get("enabled", []):   # cgroup v2: the +io this process turned on
        with contextlib.suppress(OSError):
            _write(path, "-io")
    work = st.get("workdir")
    if work and os.path.isdir(work):
        if any(m == work or m.startswith(work + "/") for m in _mount_points()):
            problems.append(f"{work} still holds a mount; not removed")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return problems


# --- the device -------------------------------------------------------------------------------

def _datasets(src) -> list[Path]:
    items = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    dirs = [Path(s).resolve() for s in items]
    for d in dirs:
        if not d.is_dir():
            raise LmdbioError(f"{d} is not a directory; give the dataset folder (the one holding "
                              "data.mdb)")
    names = [d.name for d in dirs]
    if len(set(names)) != len(names):
        raise ValueError(f"datasets must have distinct folder names, got {names}")
    return dirs


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _tree_bytes(d: Path) -> int:
    total = 0
    for p in d.rglob("*"):
        total += (-(-p.stat().st_size // 4096) * 4096) if p.is_file() else 4096
    return total


class Throttled:
    """A throttled dataset: ``mnt``, ``path(node, relpath)``, ``evict``, ``join``, ``counters``."""

    def __init__(self, state: dict, profile: ThrottleProfile, janitor: subprocess.Popen | None,
                 pipe_w: int | None):
        self._state = state
        self.profile = profile
        self.mnt: str = state["mnt"]
        self.nodes: int = state["nodes"]
        self.devices: list[str] = list(state["devices"])
        self.cgroups: list[str] = list(state["cgroups"]["nodes"])
        self.state_file: str = state["state_file"]
        self.image: str = state["image"]
        self.read_bps, self.read_iops = state["limits"]["read_bps"], state["limits"]["read_iops"]
        self._janitor = janitor
        self._pipe_w = pipe_w
        self._closed = False
        self._old_env = None
        self._old_term = None

    def path(self, node: int | str = 0, relpath: str = "") -> str:
        """``MNT/node{node}[/relpath]``; ``node='{node}'`` gives a Reader path template."""
        base = os.path.join(self.mnt, f"node{node}")
        return os.path.join(base, relpath) if relpath else base

    def join(self, node: int, pid: int | None = None) -> str:
        """Put ``pid`` (default: this process) in node ``node``'s cgroup: its reads are throttled."""
        return join_node(node, self._state, pid)

    def leave(self, pid: int | None = None) -> None:
        """Move ``pid`` (default: this process) back to the controller's root cgroup."""
        leave_node(self.state_file, pid)

    def evict(self, node: int | None = None, relpath: str = "") -> int:
        """Make node ``node`` (every node if None) cold for ``relpath`` (file or folder); file count."""
        count = 0
        for k in (range(self.nodes) if node is None else [int(node)]):
            p = Path(self.path(k, relpath))
            files = [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.is_file()]
            for f in files:
                evict_file(f)
            flush_device(self.devices[k])
            count += len(files)
        return count

    def counters(self) -> dict:
        """Per node: the device's completed reads and the node cgroup's served bytes; and totals."""
        ctl = _CgroupV2 if self._state["cgroups"]["version"] == 2 else _CgroupV1
        ctl = ctl(self._state["cgroups"]["root"])
        nodes = []
        for dev, cg in zip(self.devices, self.cgroups):
            c = device_counters(dev)
            c["cgroup_read_bytes"], c["cgroup_read_ios"] = ctl.served(cg, _majmin(dev))
            c["device"] = dev
            nodes.append(c)
        total = {"requests": sum(n["read_ios"] for n in nodes),
                 "bytes": sum(n["read_bytes"] for n in nodes)}
        return {"nodes": nodes, "total": total}

    def stats(self) -> dict:
        """What the device is (profile, limits, kernel settings) and its counters (JSON-able)."""
        st = self._state
        return {"kind": "throttle", "profile": {**self.profile.as_dict(), **st["limits"]},
                "kernel": {"read_ahead_kb": self.profile.read_ahead_kb, "devices": self.devices,
                           "direct_io": [_sysfs(d, "loop/dio") for d in self.devices],
                           "cgroup": f"v{st['cgroups']['version']} {st['cgroups']['root']}",
                           "image_bytes": st["image_bytes"], "fs": "ext4, no journal, 4 KiB blocks"},
                "nodes": self.nodes, "counters": self.counters()}

    def close(self) -> None:
        """Unmount, detach, remove the cgroups and the image; the janitor then ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_env is not None:
            os.environ.pop(STATE_ENV, None)
            if self._old_env:
                os.environ[STATE_ENV] = self._old_env
        if self._old_term is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._old_term)
        problems = cleanup(self._state)
        if self._pipe_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe_w)
        if self._janitor is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._janitor.wait(timeout=15)
        if problems:
            raise LmdbioError("throttled device not fully removed: " + "; ".join(problems))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Throttled({self.mnt!r}, nodes={self.nodes}, devices={self.devices})"


def _sysfs(dev: str, name: str) -> str:
    try:
        return (_sysblock(dev) / name).read_text().strip()
    except OSError:
        return ""


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)   # so finally blocks (and the cleanup) run


def _start_janitor(state_file: str) -> tuple[subprocess.Popen, int]:
    r, w = os.pipe()    # not inheritable: only the janitor holds the read end, only we the write end
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lmdbio.lab.storage", "janitor", state_file],
                                stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(REPO)]
                                    + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    finally:
        os.close(r)
    return proc, w


def janitor_main(state_file: str) -> int:
    """``python -m lmdbio.lab.storage janitor STATE``: wait for EOF on stdin, then clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    cleanup(state_file)
    return 0


def start(src, nodes: int = 1, profile: str = "gpfs-2017", ranks_per_node: int = 4,
          time_scale: float | None = None, workdir: str | os.PathLike | None = None) -> Throttled:
    """Make the device (see :func:`throttled`) and return it; the caller must ``close()`` it."""
    ok, why = throttle_available()
    if not ok:
        raise ThrottleUnavailable(why)
    if not (isinstance(nodes, int) and nodes >= 1):
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    prof = load_throttle_profile(profile, time_scale)
    bps, iops = prof.node_limits(ranks_per_node)
    dirs = _datasets(src)
    ctl, _ = _controller()
    work = tempfile.mkdtemp(prefix="lmdbio-throttle-", dir=workdir)
    state = {"pid": os.getpid(), "workdir": work, "state_file": os.path.join(work, "state.json"),
             "image": os.path.join(work, "fs.img"), "mnt": os.path.join(work, "mnt"),
             "nodes": nodes, "datasets": [d.name for d in dirs], "devices": [], "mounts": [],
             "cgroups": {"version": ctl.version, "root": ctl.root, "base": None, "nodes": [],
                         "enabled": []},
             "limits": {"read_bps": bps, "read_iops": iops, "ranks_per_node": ranks_per_node},
             "profile": prof.name, "time_scale": prof.time_scale, "image_bytes": 0}
    _save(state)
    janitor, pipe_w = _start_janitor(state["state_file"])
    t = None
    try:
        stage = Path(work, "stage")
        stage.mkdir()
        for d in dirs:
            shutil.copytree(d, stage / d.name, copy_function=_link_or_copy, symlinks=False)
        need = _tree_bytes(stage)
        size = -(-(int(need * 1.1) + (16 << 20)) // (1 << 20)) * (1 << 20)
        with open(state["image"], "wb") as f:
            f.truncate(size)            # sparse: mkfs writes only what it uses
        _run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal",
              "-L", "lmdbio", "-d", str(stage), state["image"]], "mkfs.ext4 -d")
        shutil.rmtree(stage)
        state["image_bytes"] = size
        base = os.path.join(ctl.root, f"lmdbio-{os.getpid()}-{os.path.basename(work)[-8:]}")
        os.mkdir(base)
        state["cgroups"]["base"] = base
        _save(state)
        if ctl.version == 2:
            if "io" not in Path(ctl.root, "cgroup.subtree_control").read_text().split():
                state["cgroups"]["enabled"].append(os.path.join(ctl.root, "cgroup.subtree_control"))
            ctl.prepare(base)
        for k in range(nodes):
            dev = _run(["losetup", "-r", "--direct-io=on", "--find", "--show", state["image"]],
                       "losetup")
            state["devices"].append(dev)
            _save(state)
            # Before the mount: a file's readahead window is set from the device when it is opened.
            with contextlib.suppress(OSError):
                _write(_sysblock(dev) / "queue" / "read_ahead_kb", str(prof.read_ahead_kb))
            target = os.path.join(state["mnt"], f"node{k}")
            os.makedirs(target)
            state["mounts"].append(target)
            _save(state)
            _run(["mount", "-t", "ext4", "-o", "ro,noload", dev, target], "mount")
            cg = os.path.join(base, f"node{k}")
            os.mkdir(cg)
            state["cgroups"]["nodes"].append(cg)
            _save(state)
            ctl.limit(cg, _majmin(dev), bps, iops)
        t = Throttled(state, prof, janitor, pipe_w)
    except BaseException:
        cleanup(state)
        with contextlib.suppress(OSError):
            os.close(pipe_w)
        with contextlib.suppress(subprocess.TimeoutExpired):
            janitor.wait(timeout=15)
        raise
    atexit.register(t.close)
    return t


@contextlib.contextmanager
def throttled(src, nodes: int = 1, profile: str = "gpfs-2017", ranks_per_node: int = 4,
              time_scale: float | None = None, workdir: str | os.PathLike | None = None):
    """``with throttled(dataset_dir, nodes=K, profile=...) as t:`` K throttled node views.

    ``t.path(k, name)`` is ``MNT/node{k}/<dataset>`` (``t.path('{node}', name)``
    a Reader path template); ``t.join(k)`` puts a process in node k's cgroup
    (ranks started inside the block can call :func:`join_node`, which reads
    ``$LMDBIO_THROTTLE_STATE``); ``t.evict(k, name)`` makes node k cold;
    ``t.counters()`` the devices' and cgroups' read counters.

    Args:
        src: a dataset folder (or several, with distinct names); each becomes
            ``<name>/`` at the image's root.
        nodes: virtual nodes: loop devices, mounts and cgroups.
        profile: a name from ``lmdbio/lab/pfs/throttle_profiles.toml``.
        ranks_per_node: ranks a virtual node stands for; its share of the
            client's budget (see the profile file).
        time_scale: overrides the profile's (and ``$LMDBIO_THROTTLE_TIME_SCALE``).
        workdir: where the temporary folder (image, mount points) is made.
    Raises:
        ThrottleUnavailable: not root, no loop devices, no controller or no mkfs.ext4.
    """
    t = start(src, nodes, profile, ranks_per_node, time_scale, workdir)
    t._old_env = os.environ.get(STATE_ENV, "")
    os.environ[STATE_ENV] = t.state_file
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        t._old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield t
    finally:
        t.close()
