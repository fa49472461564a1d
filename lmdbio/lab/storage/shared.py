"""A shared storage target: one throttled loop device S, a direct-I/O node device per virtual node.

``shared(src, nodes=K, profile=...)`` builds an ext4 *node image* holding the
dataset folder(s), puts it on a second ext4 image attached read-only as loop
device **S** and mounted ``ro,noload``, and gives S **one** read budget
(bytes/s and requests/s) from a profile: cgroup v1 ``blkio.throttle.read_bps_device``
and ``read_iops_device`` on S's ``MAJ:MIN`` in the root cgroup, or cgroup v2
``io.max`` in one cgroup every rank joins. Each of the K virtual nodes gets a
read-only loop device over the node image with ``--direct-io=on``, mounted
``ro,noload`` at ``MNT/node{k}``: a node keeps its own page cache, and each
miss in it becomes an O_DIRECT read of S, so all nodes draw on one budget.
This is the papers' problem 5 (many nodes contending for one storage system)
with no model of ours in the path; it has no seek cost: S serves interleaved
streams as fast as one.

Nothing stays behind: every loop device, mount and rule is recorded in a
state file as it is made, and removed in ``finally``, at exit, on SIGTERM and,
when the holder is killed outright, by a janitor that waits for the holder's
end on a pipe (as :mod:`lmdbio.lab.storage.throttle`).
"""

from __future__ import annotations

import atexit
import contextlib
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
from .throttle import (V1_ROOT, ThrottleUnavailable, _backing_file, _datasets, _link_or_copy,
                       _majmin, _mount_points, _on_sigterm, _read_state, _run, _save, _sysblock,
                       _sysfs, _tree_bytes, _v2_root, _write, device_counters, evict_file,
                       flush_device, throttle_available)

__all__ = ["SharedProfile", "SHARED_PROFILES", "load_shared_profile", "shared_available", "shared",
           "Shared", "start", "cleanup", "s_counters", "join_shared", "set_budget", "enter_point",
           "evict_node_file", "v1_rules", "SHARED_STATE_ENV", "SHARED_TIME_SCALE_ENV"]

#: Set inside ``with shared(...)``: the state file :func:`join_shared` and the bench read.
SHARED_STATE_ENV = "LMDBIO_SHARED_STATE"
#: Overrides the profile's time_scale for a target made without one.
SHARED_TIME_SCALE_ENV = "LMDBIO_SHARED_TIME_SCALE"
_PROFILES_FILE = Path(__file__).resolve().parents[1] / "pfs" / "shared_profiles.toml"
_PREFIX = "lmdbio-shared-"


# --- profiles -----------------------------------------------------------------------------

def _load_raw() -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(_PROFILES_FILE, "rb") as f:
        return tomllib.load(f)


_RAW = _load_raw()
#: Profile names in shared_profiles.toml.
SHARED_PROFILES = tuple(_RAW)


@dataclass(frozen=True)
class SharedProfile:
    """One file system's read budget; ``limits(P)`` is the share of a run of P ranks."""

    name: str
    fs_bw: float
    fs_iops: float
    clients: int
    ranks_per_client: int
    read_ahead_kb: int
    time_scale: float
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple] = field(default_factory=dict)

    def limits(self, ranks: int) -> tuple[int, int]:
        """(read bytes/s, read requests/s) of S for a run of ``ranks`` ranks."""
        if not (isinstance(ranks, int) and ranks >= 1):
            raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
        share = ranks / (self.ranks_per_client * self.clients)
        bps = int(self.fs_bw * share / self.time_scale)
        iops = int(round(self.fs_iops * share / self.time_scale))
        return max(4096, bps), max(1, iops)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "description", "fs_bw", "fs_iops", "clients",
                                           "ranks_per_client", "read_ahead_kb", "time_scale")}
        d["sources"] = dict(self.sources)
        d["ranges"] = {k: list(v) for k, v in self.ranges.items()}
        return d


def load_shared_profile(name: str, time_scale: float | None = None) -> SharedProfile:
    """Profile ``name`` at its own time scale, ``time_scale``, or ``$LMDBIO_SHARED_TIME_SCALE``."""
    if name not in _RAW:
        raise ConfigurationError(f"unknown shared-storage profile {name!r}; choose one of "
                                 f"{', '.join(SHARED_PROFILES)} ({_PROFILES_FILE})")
    raw = _RAW[name]
    if time_scale is None and os.environ.get(SHARED_TIME_SCALE_ENV):
        try:
            time_scale = float(os.environ[SHARED_TIME_SCALE_ENV])
        except ValueError:
            raise ConfigurationError(f"{SHARED_TIME_SCALE_ENV}={os.environ[SHARED_TIME_SCALE_ENV]!r}"
                                     " is not a number; give a positive time scale such as 0.5"
                                     ) from None
    try:
        p = SharedProfile(
            name=name, fs_bw=float(raw["fs_bw"]), fs_iops=float(raw["fs_iops"]),
            clients=int(raw["clients"]), ranks_per_client=int(raw["ranks_per_client"]),
            read_ahead_kb=int(raw["read_ahead_kb"]),
            time_scale=float(raw["time_scale"] if time_scale is None else time_scale),
            description=str(raw.get("description", "")),
            sources=MappingProxyType(dict(raw.get("sources", {}))),
            ranges=MappingProxyType({k: tuple(v) for k, v in raw.get("ranges", {}).items()}))
    except KeyError as exc:
        raise ConfigurationError(f"shared-storage profile {name!r} lacks {exc.args[0]!r} "
                                 f"({_PROFILES_FILE})") from None
    if not (p.fs_bw > 0 and p.fs_iops > 0 and p.clients >= 1 and p.ranks_per_client >= 1
            and p.read_ahead_kb >= 0 and p.time_scale > 0):
        raise ConfigurationError(f"shared-storage profile {name!r}: bandwidth, IOPS, clients, "
                                 "ranks and time_scale must be positive, read_ahead_kb >= 0")
    return p


# --- the one rule on S --------------------------------------------------------------------

def _rule_lines(path: str, majmin: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.split()[:1] == [majmin]]


def _v1_rule(root: str, majmin: str) -> tuple[int, int]:
    """(bps, iops) of the rule on ``majmin`` in the v1 root; 0 where there is none."""
    out = []
    for name in ("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device"):
        lines = _rule_lines(os.path.join(root, name), majmin)
        out.append(int(lines[0].split()[1]) if lines else 0)
    return out[0], out[1]


def _v2_io_available() -> str | None:
    root = _v2_root()
    if root and "io" in Path(root, "cgroup.controllers").read_text().split():
        return root
    return None


def _backend() -> tuple[int, str] | None:
    """(cgroup version, root) of the controller S's rule goes into; None without one."""
    if os.path.exists(os.path.join(V1_ROOT, "blkio.throttle.read_bps_device")):
        return 1, V1_ROOT
    root = _v2_io_available()
    return (2, root) if root else None


def set_budget(state, bps: int, iops: int) -> None:
    """Write S's one read rule (bytes/s, requests/s) and record it in the state file."""
    st = _read_state(state)
    if not st:
        raise LmdbioError(f"no shared storage target: its state file ({state}) is gone")
    if not (int(bps) >= 1 and int(iops) >= 1):
        raise ValueError(f"a budget needs positive bytes/s and requests/s, got {bps}, {iops}")
    rule, majmin = st["rule"], st["s_majmin"]
    if rule["version"] == 1:
        _write(os.path.join(rule["root"], "blkio.throttle.read_bps_device"), f"{majmin} {int(bps)}")
        _write(os.path.join(rule["root"], "blkio.throttle.read_iops_device"), f"{majmin} {int(iops)}")
    else:
        _write(os.path.join(rule["cgroup"], "io.max"), f"{majmin} rbps={int(bps)} riops={int(iops)}")
    rule["bps"], rule["iops"] = int(bps), int(iops)
    st["limits"]["read_bps"], st["limits"]["read_iops"] = int(bps), int(iops)
    _save(st)


def _clear_rule(st: dict) -> list[str]:
    """Remove S's rule (v1: write 0; v2: the cgroup goes). Only a rule that is ours."""
    rule = st.get("rule") or {}
    majmin = st.get("s_majmin")
    problems = []
    if not rule or not majmin:
        return problems
    if rule.get("version") == 1:
        ours = _backing_file(st["s_device"]).startswith(st["workdir"]) if st.get("s_device") else False
        if ours or _v1_rule(rule["root"], majmin) == (rule.get("bps"), rule.get("iops")):
            for name in ("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device"):
                try:
                    _write(os.path.join(rule["root"], name), f"{majmin} 0")
                except OSError as exc:
                    problems.append(f"clear {name} {majmin}: {exc.strerror}")
        return problems
    cg, root = rule.get("cgroup"), rule.get("root")
    if cg:
        deadline = time.monotonic() + 10
        while os.path.isdir(cg):
            with contextlib.suppress(OSError):
                for pid in Path(cg, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        _write(os.path.join(root, "cgroup.procs"), pid)
            try:
                os.rmdir(cg)
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    problems.append(f"rmdir {cg}: {exc.strerror}")
                    break
                time.sleep(0.05)
    for path in rule.get("enabled", []):
        with contextlib.suppress(OSError):
            _write(path, "-io")
    return problems


def s_counters(state) -> dict:
    """S's read counters: the rule's bios (io_serviced) and bytes, and S's completed requests.

    ``ios`` and ``bytes`` are what the blkio/io controller charged on S's
    ``MAJ:MIN`` (v1: the root's ``blkio.throttle.io_serviced_recursive`` and
    ``io_service_bytes_recursive``; v2: ``io.stat``'s rios and rbytes);
    ``dev_requests``, ``dev_merges``, ``dev_bytes`` and ``dev_busy_s`` are
    ``/sys/block/S/stat``'s reads after the block layer merged them.
    """
    st = _read_state(state)
    if not st:
        raise LmdbioError(f"no shared storage target: its state file ({state}) is gone")
    rule, majmin = st["rule"], st["s_majmin"]
    ios = nbytes = 0
    if rule["version"] == 1:
        def read(name):
            for ln in _rule_lines(os.path.join(rule["root"], name), majmin):
                parts = ln.split()
                if len(parts) == 3 and parts[1] == "Read":
                    return int(parts[2])
            return 0
        ios = read("blkio.throttle.io_serviced_recursive")
        nbytes = read("blkio.throttle.io_service_bytes_recursive")
    else:
        for ln in _rule_lines(os.path.join(rule["cgroup"], "io.stat"), majmin):
            kv = dict(t.split("=", 1) for t in ln.split()[1:] if "=" in t)
            ios, nbytes = int(kv.get("rios", 0)), int(kv.get("rbytes", 0))
    dev = device_counters(st["s_device"])
    return {"ios": ios, "bytes": nbytes, "dev_requests": dev["read_ios"],
            "dev_merges": dev["read_merges"], "dev_bytes": dev["read_bytes"],
            "dev_busy_s": dev["read_ticks_s"]}


def join_shared(state=None, pid: int | None = None) -> str | None:
    """cgroup v2: put ``pid`` (default: this process) in the cgroup carrying S's rule.

    On cgroup v1 the rule sits in the root cgroup and every process is
    already under it: nothing to do (returns None).
    """
    path = state or os.environ.get(SHARED_STATE_ENV)
    st = _read_state(path) if path else None
    if not st:
        raise LmdbioError(f"no shared storage target to join: {SHARED_STATE_ENV} is not set or its "
                          f"state file ({path}) is gone; join from inside "
                          "'with lmdbio.lab.storage.shared(...)'")
    if st["rule"]["version"] == 1:
        return None
    _write(os.path.join(st["rule"]["cgroup"], "cgroup.procs"), str(pid or os.getpid()))
    return st["rule"]["cgroup"]


def enter_point(comm, state) -> None:
    """Collective, at a point's start: S's budget for ``comm.size`` ranks; v2: every rank joins.

    Rank 0 writes the profile's budget for a run of ``comm.size`` ranks (a
    target made with a fixed budget keeps it); no rank goes on before it is
    in force.
    """
    st = _read_state(state)
    err = None
    if comm.rank == 0:
        try:
            if not st:
                raise LmdbioError(f"no shared storage target: its state file ({state}) is gone")
            if not st["limits"].get("fixed"):
                prof = load_shared_profile(st["profile"], st["time_scale"])
                bps, iops = prof.limits(int(comm.size))
                if (bps, iops) != (st["rule"].get("bps"), st["rule"].get("iops")):
                    set_budget(st, bps, iops)
                    st["limits"]["ranks"] = int(comm.size)
                    _save(st)
        except Exception as exc:   # every rank must leave the barrier below with the same outcome
            err = f"{type(exc).__name__}: {exc}"
    err = comm.bcast(err, root=0)
    if err:
        raise LmdbioError(f"setting the shared target's budget failed on rank 0: {err}")
    if st and st["rule"]["version"] == 2:
        join_shared(st)


def evict_node_file(path: str | os.PathLike, state) -> None:
    """Make one node's file cold: its pages, its node device's buffer cache, and S's caches.

    ``path`` is a file under ``MNT/node{k}``. Node k's page cache drops the
    file (posix_fadvise DONTNEED) and node k's device its buffers
    (BLKFLSBUF). On S, the node image's cached pages (a node device reads it
    with O_DIRECT, so there should be none) and S's buffer cache (the ext4
    metadata of S: the node image's extent blocks) go too. Only these
    devices' caches are touched, never the whole machine's.
    """
    st = _read_state(state)
    if not st:
        raise LmdbioError(f"no shared storage target: its state file ({state}) is gone")
    path = os.path.abspath(path)
    node = None
    for k, mnt in enumerate(st["mounts"]):
        if path == mnt or path.startswith(mnt + "/"):
            node = k
    if node is None:
        raise ValueError(f"{path} is under no node of the shared target at {st['mnt']}")
    evict_file(path, st["devices"][node])
    _evict_s(st)


def _evict_s(st: dict) -> None:
    fd = os.open(st["node_image"], os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    flush_device(st["s_device"])


# --- cleanup ------------------------------------------------------------------------------

def _umount(mnt: str, problems: list[str]) -> None:
    if mnt not in set(_mount_points()):
        return
    r = subprocess.run(["umount", mnt], capture_output=True, text=True)
    if r.returncode != 0:   # busy (a process still holds a file): detach lazily
        r = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"umount {mnt}: {r.stderr.strip()}")


def _detach(dev: str, backing_prefix: str, problems: list[str]) -> None:
    if backing_prefix and _backing_file(dev).startswith(backing_prefix):
        r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
        if r.returncode != 0 and _backing_file(dev).startswith(backing_prefix):
            problems.append(f"losetup -d {dev}: {r.stderr.strip()}")


def _wait_detached(devs: list[str], prefix: str, timeout: float = 10.0) -> None:
    """Detaching is asynchronous while a device is still open (autoclear): wait for it."""
    deadline = time.monotonic() + timeout
    while any(_backing_file(d).startswith(prefix) for d in devs) and time.monotonic() < deadline:
        time.sleep(0.05)


def cleanup(state) -> list[str]:
    """Remove S's rule, the node mounts and devices, S's mount and device, the files; idempotent.

    Only what the state lists is touched, and a loop device only while its
    backing file lies in the recorded work folder. Returns problems.
    """
    st = _read_state(state)
    if not st:
        return []
    problems = _clear_rule(st)   # first: a rule left on a free loop minor would bind its next user
    work = st.get("workdir", "")
    for mnt in reversed(st.get("mounts", [])):
        _umount(mnt, problems)
    for dev in reversed(st.get("devices", [])):
        _detach(dev, work, problems)
    _wait_detached(st.get("devices", []), work)
    if st.get("s_mnt"):
        _umount(st["s_mnt"], problems)
    if st.get("s_device"):
        _detach(st["s_device"], work, problems)
        _wait_detached([st["s_device"]], work)
    if work and os.path.isdir(work):
        if any(m == work or m.startswith(work + "/") for m in _mount_points()):
            problems.append(f"{work} still holds a mount; not removed")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return problems


def _start_janitor(state_file: str) -> tuple[subprocess.Popen, int]:
    r, w = os.pipe()    # not inheritable: only the janitor holds the read end, only we the write end
    code = "import sys; from lmdbio.lab.storage.shared import janitor_main; sys.exit(janitor_main(sys.argv[1]))"
    try:
        proc = subprocess.Popen([sys.executable, "-c", code, state_file],
                                stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(REPO)]
                                    + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    finally:
        os.close(r)
    return proc, w


def janitor_main(state_file: str) -> int:
    """The janitor: wait for EOF on stdin (the holder's end), then clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    cleanup(state_file)
    return 0


# --- the target ---------------------------------------------------------------------------

def shared_available() -> tuple[bool, str]:
    """(True, what will be used) or (False, one line saying why a shared target cannot be made)."""
    ok, why = throttle_available()
    if not ok:
        return ok, why
    be = _backend()
    if be is None:
        return False, ("no controller for S's rule: neither cgroup v1 blkio (with blkio.throttle.*) "
                       f"at {V1_ROOT} nor a cgroup v2 hierarchy offering the io controller")
    return True, (f"one rule on S in the cgroup v1 blkio root {be[1]}" if be[0] == 1
                  else f"one io.max rule on S in a cgroup under the cgroup v2 root {be[1]}")


def _mkfs(stage: Path, image: str, label: str) -> int:
    need = _tree_bytes(stage)
    size = -(-(int(need * 1.1) + (16 << 20)) // (1 << 20)) * (1 << 20)
    with open(image, "wb") as f:
        f.truncate(size)            # sparse: mkfs writes only what it uses
    _run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal", "-L", label,
          "-d", str(stage), image], "mkfs.ext4 -d")
    return size


class Shared:
    """A dataset on a shared target: ``path``, ``evict``, ``counters``, ``set_budget``, ``close``."""

    def __init__(self, state: dict, profile: SharedProfile, janitor: subprocess.Popen | None,
                 pipe_w: int | None):
        self._state = state
        self.profile = profile
        self.mnt: str = state["mnt"]
        self.nodes: int = state["nodes"]
        self.devices: list[str] = list(state["devices"])
        self.s_device: str = state["s_device"]
        self.s_majmin: str = state["s_majmin"]
        self.state_file: str = state["state_file"]
        self.node_image: str = state["node_image"]
        self._janitor = janitor
        self._pipe_w = pipe_w
        self._closed = False
        self._old_env = None
        self._old_term = None

    @property
    def read_bps(self) -> int:
        return int(self._state["limits"]["read_bps"])

    @property
    def read_iops(self) -> int:
        return int(self._state["limits"]["read_iops"])

    def path(self, node: int | str = 0, relpath: str = "") -> str:
        """``MNT/node{node}[/relpath]``; ``node='{node}'`` gives a Reader path template."""
        base = os.path.join(self.mnt, f"node{node}")
        return os.path.join(base, relpath) if relpath else base

    def set_budget(self, bps: int, iops: int) -> None:
        """S's one read budget, in bytes/s and requests/s."""
        set_budget(self._state, bps, iops)

    def budget_for(self, ranks: int) -> tuple[int, int]:
        """The profile's budget for a run of ``ranks`` ranks, written to S's rule."""
        bps, iops = self.profile.limits(ranks)
        self.set_budget(bps, iops)
        self._state["limits"]["ranks"] = ranks
        _save(self._state)
        return bps, iops

    def join(self, pid: int | None = None) -> str | None:
        """cgroup v2: ``pid`` into the cgroup carrying S's rule (v1: nothing to do)."""
        return join_shared(self._state, pid)

    def evict(self, node: int | None = None, relpath: str = "") -> int:
        """Make node ``node`` (every node if None) cold for ``relpath``, and S; the file count."""
        count = 0
        for k in (range(self.nodes) if node is None else [int(node)]):
            p = Path(self.path(k, relpath))
            files = [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.is_file()]
            for f in files:
                evict_file(f)
            flush_device(self.devices[k])
            count += len(files)
        _evict_s(self._state)
        return count

    def counters(self) -> dict:
        """S's counters (:func:`s_counters`) and each node device's completed reads."""
        s = s_counters(self._state)
        return {"s": s, "total": {"requests": s["ios"], "bytes": s["bytes"]},
                "nodes": [{**device_counters(d), "device": d} for d in self.devices]}

    def stats(self) -> dict:
        """What the target is (profile, budget, kernel settings) and its counters (JSON-able)."""
        st = self._state
        rule = st["rule"]
        return {"kind": "shared", "profile": {**self.profile.as_dict(), **st["limits"]},
                "kernel": {"read_ahead_kb": self.profile.read_ahead_kb, "devices": self.devices,
                           "s_device": self.s_device, "s_majmin": self.s_majmin,
                           "direct_io": [_sysfs(d, "loop/dio") for d in self.devices],
                           "s_direct_io": _sysfs(self.s_device, "loop/dio"),
                           "rule": (f"cgroup v1 {rule['root']}: blkio.throttle.read_bps_device "
                                    f"and read_iops_device on {self.s_majmin}" if rule["version"] == 1
                                    else f"cgroup v2 {rule['cgroup']}/io.max on {self.s_majmin}"),
                           "node_image_bytes": st["node_image_bytes"],
                           "s_image_bytes": st["s_image_bytes"],
                           "fs": "ext4, no journal, 4 KiB blocks (node image inside S's image)"},
                "nodes": self.nodes, "counters": self.counters()}

    def close(self) -> None:
        """Remove the rule, unmount, detach, delete the images; the janitor then ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_env is not None:
            os.environ.pop(SHARED_STATE_ENV, None)
            if self._old_env:
                os.environ[SHARED_STATE_ENV] = self._old_env
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
            raise LmdbioError("shared storage target not fully removed: " + "; ".join(problems))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Shared({self.mnt!r}, nodes={self.nodes}, s={self.s_device}, devices={self.devices})"


def start(src, nodes: int = 1, profile: str = "gpfs-2017", ranks_per_node: int = 4,
          time_scale: float | None = None, workdir: str | os.PathLike | None = None,
          read_bps: int | None = None, read_iops: int | None = None) -> Shared:
    """Make the target (see :func:`shared`) and return it; the caller must ``close()`` it."""
    ok, why = shared_available()
    if not ok:
        raise ThrottleUnavailable(why)
    if not (isinstance(nodes, int) and nodes >= 1):
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    if not (isinstance(ranks_per_node, int) and ranks_per_node >= 1):
        raise ValueError(f"ranks_per_node must be a positive integer, got {ranks_per_node!r}")
    prof = load_shared_profile(profile, time_scale)
    bps, iops = prof.limits(nodes * ranks_per_node)
    bps = bps if read_bps is None else int(read_bps)
    iops = iops if read_iops is None else int(read_iops)
    if not (bps >= 1 and iops >= 1):
        raise ValueError(f"read_bps and read_iops must be positive, got {bps}, {iops}")
    dirs = _datasets(src)
    version, root = _backend()
    work = tempfile.mkdtemp(prefix=_PREFIX, dir=workdir)
    state = {"kind": "shared", "pid": os.getpid(), "workdir": work,
             "state_file": os.path.join(work, "state.json"),
             "s_image": os.path.join(work, "s.img"), "s_mnt": os.path.join(work, "s"),
             "s_device": None, "s_majmin": None,
             "node_image": os.path.join(work, "s", "node.img"), "mnt": os.path.join(work, "mnt"),
             "nodes": nodes, "datasets": [d.name for d in dirs], "devices": [], "mounts": [],
             "rule": {"version": version, "root": root, "cgroup": None, "enabled": [],
                      "bps": None, "iops": None},
             "limits": {"read_bps": bps, "read_iops": iops, "ranks": nodes * ranks_per_node,
                        "ranks_per_node": ranks_per_node,
                        "fixed": read_bps is not None or read_iops is not None},
             "profile": prof.name, "time_scale": prof.time_scale,
             "node_image_bytes": 0, "s_image_bytes": 0}
    _save(state)
    janitor, pipe_w = _start_janitor(state["state_file"])
    t = None
    try:
        stage = Path(work, "stage")
        stage.mkdir()
        for d in dirs:
            shutil.copytree(d, stage / d.name, copy_function=_link_or_copy, symlinks=False)
        s_stage = Path(work, "s_stage")
        s_stage.mkdir()
        state["node_image_bytes"] = _mkfs(stage, str(s_stage / "node.img"), "lmdbio-node")
        shutil.rmtree(stage)
        state["s_image_bytes"] = _mkfs(s_stage, state["s_image"], "lmdbio-s")
        shutil.rmtree(s_stage)
        _save(state)
        # S reads its image through the host's page cache: S's speed is its budget alone.
        s_dev = _run(["losetup", "-r", "--find", "--show", state["s_image"]], "losetup (S)")
        state["s_device"], state["s_majmin"] = s_dev, _majmin(s_dev)
        os.makedirs(state["s_mnt"])
        _save(state)
        _run(["mount", "-t", "ext4", "-o", "ro,noload", s_dev, state["s_mnt"]], "mount (S)")
        if version == 2:
            cg = os.path.join(root, f"{_PREFIX}{os.getpid()}-{os.path.basename(work)[-8:]}")
            if "io" not in Path(root, "cgroup.subtree_control").read_text().split():
                state["rule"]["enabled"].append(os.path.join(root, "cgroup.subtree_control"))
                _save(state)
                _write(os.path.join(root, "cgroup.subtree_control"), "+io")
            os.mkdir(cg)
            state["rule"]["cgroup"] = cg
        _save(state)
        set_budget(state, bps, iops)   # records the rule before it can bind anyone
        for k in range(nodes):
            dev = _run(["losetup", "-r", "--direct-io=on", "--find", "--show", state["node_image"]],
                       "losetup (node)")
            state["devices"].append(dev)
            _save(state)
            if _sysfs(dev, "loop/dio") != "1":
                raise LmdbioError(f"node device {dev} did not take direct I/O over "
                                  f"{state['node_image']}: its misses would be cached on S and "
                                  "the nodes would not share S's budget; the file system under "
                                  f"{work} must support O_DIRECT (give workdir= elsewhere)")
            # Before the mount: a file's readahead window is set from the device when it is opened.
            with contextlib.suppress(OSError):
                _write(_sysblock(dev) / "queue" / "read_ahead_kb", str(prof.read_ahead_kb))
            target = os.path.join(state["mnt"], f"node{k}")
            os.makedirs(target)
            state["mounts"].append(target)
            _save(state)
            _run(["mount", "-t", "ext4", "-o", "ro,noload", dev, target], "mount (node)")
        t = Shared(state, prof, janitor, pipe_w)
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
def shared(src, nodes: int = 1, profile: str = "gpfs-2017", ranks_per_node: int = 4,
           time_scale: float | None = None, workdir: str | os.PathLike | None = None,
           read_bps: int | None = None, read_iops: int | None = None):
    """``with shared(dataset_dir, nodes=K, profile=...) as s:`` K node views over one budget.

    ``s.path(k, name)`` is ``MNT/node{k}/<dataset>`` (``s.path('{node}', name)``
    a Reader path template); ``s.evict(k, name)`` makes node k cold (and S);
    ``s.counters()["s"]`` are S's request counters; ``s.budget_for(P)`` sets
    the profile's budget for a run of P ranks.

    Args:
        src: a dataset folder (or several, with distinct names); each becomes
            ``<name>/`` at the node image's root.
        nodes: virtual nodes: direct-I/O loop devices and mounts over the node image.
        profile: a name from ``lmdbio/lab/pfs/shared_profiles.toml``.
        ranks_per_node: ranks a virtual node stands for; the first budget is
            the profile's for ``nodes * ranks_per_node`` ranks.
        time_scale: overrides the profile's (and ``$LMDBIO_SHARED_TIME_SCALE``).
        workdir: where the temporary folder (images, mount points) is made.
        read_bps, read_iops: a fixed budget instead of the profile's.
    Raises:
        ThrottleUnavailable: not root, no loop devices, no controller or no mkfs.ext4.
    """
    t = start(src, nodes, profile, ranks_per_node, time_scale, workdir, read_bps, read_iops)
    t._old_env = os.environ.get(SHARED_STATE_ENV, "")
    os.environ[SHARED_STATE_ENV] = t.state_file
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        t._old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield t
    finally:
        t.close()


def _leftovers() -> dict:
    """Loop devices, mounts, rules and cgroups of any shared target on this machine (for checks)."""
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    loops = [ln for ln in r.stdout.splitlines() if _PREFIX in ln]
    mounts = [m for m in _mount_points() if _PREFIX in m]
    cgroups = []
    root = _v2_root()
    if root and os.path.isdir(root):
        cgroups = [p.name for p in Path(root).iterdir() if p.name.startswith(_PREFIX)]
    return {"loops": loops, "mounts": mounts, "cgroups": cgroups}


def v1_rules(root: str = V1_ROOT) -> dict[str, tuple[int, int]]:
    """Every read rule in the v1 blkio root: ``{MAJ:MIN: (bps, iops)}``."""
    out: dict[str, list[int]] = {}
    for i, name in enumerate(("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device")):
        try:
            text = Path(root, name).read_text()
        except OSError:
            continue
        for ln in text.splitlines():
            m = re.match(r"^(\d+:\d+)\s+(\d+)$", ln.strip())
            if m:
                out.setdefault(m.group(1), [0, 0])[i] = int(m.group(2))
    return {k: (v[0], v[1]) for k, v in out.items()}
