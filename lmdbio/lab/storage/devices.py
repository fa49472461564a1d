"""Loop devices, mounts and cgroup read rules, and their removal: what the device settings share.

Both real-kernel settings (:mod:`~lmdbio.lab.storage.throttle`, a throttled
device per virtual node, and :mod:`~lmdbio.lab.storage.shared`, one throttled
target under direct-I/O node devices) build ext4 images of the dataset,
attach them read-only as loop devices, mount them ``ro,noload`` at
``MNT/node{k}`` and put a read budget on a device: cgroup v1
``blkio.throttle.read_{bps,iops}_device`` or cgroup v2 ``io.max``
(:class:`CgroupV1`, :class:`CgroupV2`).

Each setting records what it makes in a JSON state file as it makes it, and
its ``cleanup(state)`` removes only what the state lists, with the steps
here (:func:`umount`, :func:`detach`, :func:`remove_cgroups`,
:func:`disable_io`, :func:`remove_workdir`). :func:`building` removes a
half-made setting on any error; :class:`Holder` removes a made one in
``close()``, at exit and (inside :func:`held`) on SIGTERM; and a janitor
process (:func:`start_janitor`) waits for the holder's end on a pipe and
removes it when the holder is killed outright.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Callable

from lmdbio.errors import ConfigurationError, LmdbioError
from ..paths import REPO

__all__ = ["ThrottleUnavailable", "V1_ROOT", "TOOLS", "Profile", "CgroupV1", "CgroupV2",
           "controller", "controller_for", "v2_root", "v1_rules", "load_toml", "env_time_scale",
           "write", "mount_points", "run", "majmin", "sysblock", "sysfs", "backing_file",
           "device_counters", "evict_file", "flush_device", "save_state", "read_state",
           "need_state", "datasets", "stage_datasets", "mkfs", "add_node", "mount_ro",
           "enable_io", "umount", "detach", "remove_cgroups", "disable_io", "remove_workdir",
           "start_janitor", "building", "Holder", "held", "on_sigterm"]

V1_ROOT = "/sys/fs/cgroup/blkio"
_BLKFLSBUF = 0x1261          # <linux/fs.h>: flush a block device's buffer cache
#: The programs a device setting runs, and the package that has each.
TOOLS = {"losetup": "util-linux", "mount": "util-linux", "umount": "util-linux",
         "mkfs.ext4": "e2fsprogs"}


class ThrottleUnavailable(LmdbioError):
    """A throttled device cannot be made here (not root, no loop devices, no controller, no mkfs)."""


# --- profiles ---------------------------------------------------------------------------------

def load_toml(path: str | os.PathLike) -> dict:
    """A profile file's tables."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def env_time_scale(var: str) -> float | None:
    """The time scale in environment variable ``var``; None where it is unset or empty."""
    text = os.environ.get(var)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{var}={text!r} is not a number; give a positive time scale "
                                 "such as 0.5") from None


_NUMBERS = {"float": float, "int": int}


class Profile:
    """A dataclass of a profile file's table: numbers (``float``/``int`` fields), ``name``,
    ``description``, ``sources`` and optionally ``ranges`` (an estimate's low and high)."""

    @classmethod
    def _numbers(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.type in _NUMBERS]

    @classmethod
    def load(cls, tables: dict, name: str, time_scale: float | None, env: str, what: str, path):
        """Table ``name`` of ``tables`` (read from ``path``) at its own time scale, ``time_scale``,
        or ``$env``; ``what`` names the kind of profile in messages."""
        if name not in tables:
            raise ConfigurationError(f"unknown {what} {name!r}; choose one of "
                                     f"{', '.join(tables)} ({path})")
        raw = tables[name]
        if time_scale is None:
            time_scale = env_time_scale(env)
        kw = {"name": name, "description": str(raw.get("description", "")),
              "sources": MappingProxyType(dict(raw.get("sources", {})))}
        if "ranges" in {f.name for f in dataclasses.fields(cls)}:
            kw["ranges"] = MappingProxyType({k: tuple(v) for k, v in raw.get("ranges", {}).items()})
        try:
            for f in cls._numbers():
                value = time_scale if f.name == "time_scale" and time_scale is not None \
                    else raw[f.name]
                kw[f.name] = _NUMBERS[f.type](value)
        except KeyError as exc:
            raise ConfigurationError(f"{what} {name!r} lacks {exc.args[0]!r} ({path})") from None
        p = cls(**kw)
        bad = [f.name for f in cls._numbers() if getattr(p, f.name) < 0
               or (getattr(p, f.name) == 0 and f.name != "read_ahead_kb")]
        if bad:
            raise ConfigurationError(f"{what} {name!r}: {', '.join(bad)} must be positive "
                                     f"(read_ahead_kb may be 0) ({path})")
        return p

    def as_dict(self) -> dict:
        d = {"name": self.name, "description": self.description,
             **{f.name: getattr(self, f.name) for f in self._numbers()}}
        d["sources"] = dict(self.sources)
        if hasattr(self, "ranges"):
            d["ranges"] = {k: list(v) for k, v in self.ranges.items()}
        return d


# --- the cgroup controllers -------------------------------------------------------------------

def write(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class CgroupV1:
    """blkio: blkio.throttle.read_{bps,iops}_device per (cgroup, device); flat limits."""

    version = 1
    RULE_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device")

    def __init__(self, root: str = V1_ROOT):
        self.root = root

    def limit(self, cg: str, majmin: str, bps: int, iops: int) -> None:
        """Cap reads of device ``majmin`` by the processes in ``cg`` (v1: and its children)."""
        write(os.path.join(cg, self.RULE_FILES[0]), f"{majmin} {int(bps)}")
        write(os.path.join(cg, self.RULE_FILES[1]), f"{majmin} {int(iops)}")

    def served(self, cg: str, majmin: str, recursive: bool = False) -> tuple[int, int]:
        """(bytes, requests) ``cg`` has read from the device (``recursive``: with its children)."""
        tail = "_recursive" if recursive else ""

        def read(name):
            try:
                text = Path(cg, name + tail).read_text()
            except OSError:
                return 0
            m = re.search(rf"^{re.escape(majmin)} Read (\d+)$", text, re.M)
            return int(m.group(1)) if m else 0
        return read("blkio.throttle.io_service_bytes"), read("blkio.throttle.io_serviced")


class CgroupV2(CgroupV1):
    """io: io.max ``MAJ:MIN rbps=.. riops=..``; the io controller enabled for the subtree."""

    version = 2

    def limit(self, cg: str, majmin: str, bps: int, iops: int) -> None:
        write(os.path.join(cg, "io.max"), f"{majmin} rbps={int(bps)} riops={int(iops)}")

    def served(self, cg: str, majmin: str, recursive: bool = False) -> tuple[int, int]:
        """(bytes, requests) from ``io.stat``, which counts the children too either way."""
        try:
            text = Path(cg, "io.stat").read_text()
        except OSError:
            return 0, 0
        for line in text.splitlines():
            if line.startswith(majmin + " "):
                kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
                return int(kv.get("rbytes", 0)), int(kv.get("rios", 0))
        return 0, 0


def v2_root() -> str | None:
    """Where the cgroup v2 hierarchy is mounted; None where it is not."""
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return _unescape(parts[1])
    return None


def controller() -> tuple[CgroupV1 | None, str]:
    """The cgroup backend (v1 blkio where it is mounted, else v2 io), or None and why not."""
    if os.path.exists(os.path.join(V1_ROOT, CgroupV1.RULE_FILES[0])):
        return CgroupV1(V1_ROOT), f"cgroup v1 blkio at {V1_ROOT}"
    root = v2_root()
    if root and "io" in Path(root, "cgroup.controllers").read_text().split():
        return CgroupV2(root), f"cgroup v2 io controller at {root}"
    return None, ("no throttling controller: neither cgroup v1 blkio (with blkio.throttle.*) at "
                  f"{V1_ROOT} nor a cgroup v2 hierarchy offering the io controller is mounted")


def controller_for(version: int, root: str) -> CgroupV1:
    """The backend a state file records (``version``, ``root``)."""
    return (CgroupV2 if version == 2 else CgroupV1)(root)


def v1_rules(root: str = V1_ROOT) -> dict[str, tuple[int, int]]:
    """Every read rule in a v1 blkio cgroup: ``{MAJ:MIN: (bps, iops)}``."""
    out: dict[str, list[int]] = {}
    for i, name in enumerate(CgroupV1.RULE_FILES):
        try:
            text = Path(root, name).read_text()
        except OSError:
            continue
        for ln in text.splitlines():
            m = re.match(r"^(\d+:\d+)\s+(\d+)$", ln.strip())
            if m:
                out.setdefault(m.group(1), [0, 0])[i] = int(m.group(2))
    return {k: (v[0], v[1]) for k, v in out.items()}


def enable_io(state: dict, enabled: list[str], cg: str) -> None:
    """cgroup v2: turn the io controller on for ``cg``'s children, recorded in ``enabled`` first."""
    ctl = os.path.join(cg, "cgroup.subtree_control")
    if "io" not in Path(ctl).read_text().split():
        enabled.append(ctl)
        save_state(state)
        write(ctl, "+io")


# --- devices, files and mounts ----------------------------------------------------------------

def _unescape(text: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_points() -> list[str]:
    with open("/proc/mounts") as f:
        return [_unescape(line.split()[1]) for line in f if len(line.split()) > 1]


def run(cmd: list[str], what: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LmdbioError(f"{what} failed ({' '.join(cmd)}): {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def majmin(dev: str) -> str:
    rdev = os.stat(dev).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def sysblock(dev: str) -> Path:
    return Path("/sys/block") / os.path.basename(dev)


def sysfs(dev: str, name: str) -> str:
    try:
        return (sysblock(dev) / name).read_text().strip()
    except OSError:
        return ""


def backing_file(dev: str) -> str:
    return sysfs(dev, "loop/backing_file")


def device_counters(dev: str) -> dict:
    """Block-layer reads the device has completed: requests, bytes and busy seconds (``/sys/block``)."""
    return _read_counters(sysblock(dev) / "stat")


def file_device_counters(path: str | os.PathLike) -> dict | None:
    """:func:`device_counters` of the block device (or partition) that holds ``path``; None where
    it has none or its counters cannot be read."""
    st = os.stat(path)
    try:
        return _read_counters(Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"))
    except (OSError, IndexError, ValueError):
        return None


def _read_counters(stat: Path) -> dict:
    f = stat.read_text().split()
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


# --- the state file ---------------------------------------------------------------------------

def save_state(state: dict) -> None:
    tmp = state["state_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, state["state_file"])


def read_state(state) -> dict | None:
    """``state`` itself if it is a dict, else the state file it names; None where that is gone."""
    if isinstance(state, dict):
        return state
    try:
        return json.loads(Path(state).read_text())
    except (OSError, ValueError):
        return None


def need_state(state, message: str, env: str | None = None) -> dict:
    """The state ``state`` (or ``$env``) names; raises ``message`` (``{path}`` filled in) if it is
    gone."""
    path = state or (os.environ.get(env) if env else None)
    st = read_state(path) if path else None
    if not st:
        raise LmdbioError(message.format(path=path))
    return st


# --- building ---------------------------------------------------------------------------------

def datasets(src) -> list[Path]:
    """The dataset folder(s) ``src`` names, resolved; their names must differ."""
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


def stage_datasets(dirs: list[Path], stage: Path) -> None:
    """``stage/<name>/`` for each dataset folder: hard links where they can be made, else copies."""
    stage.mkdir()
    for d in dirs:
        shutil.copytree(d, stage / d.name, copy_function=_link_or_copy, symlinks=False)


def _tree_bytes(d: Path) -> int:
    total = 0
    for p in d.rglob("*"):
        total += (-(-p.stat().st_size // 4096) * 4096) if p.is_file() else 4096
    return total


def mkfs(stage: Path, image: str, label: str) -> int:
    """An ext4 image (no journal, 4 KiB blocks) holding ``stage``'s tree; returns its size."""
    need = _tree_bytes(stage)
    size = -(-(int(need * 1.1) + (16 << 20)) // (1 << 20)) * (1 << 20)
    with open(image, "wb") as f:
        f.truncate(size)            # sparse: mkfs writes only what it uses
    run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal", "-L", label,
         "-d", str(stage), image], "mkfs.ext4 -d")
    return size


def mount_ro(dev: str, target: str, what: str) -> None:
    run(["mount", "-t", "ext4", "-o", "ro,noload", dev, target], what)


def add_node(state: dict, image: str, k: int, read_ahead_kb: int,
             check: Callable[[str], None] | None = None) -> str:
    """Node ``k``: ``image`` attached read-only with direct I/O, mounted at ``MNT/node{k}``.

    The device and the mount point are recorded in ``state`` before they are
    made; ``check(dev)`` runs before the mount. Returns the device.
    """
    dev = run(["losetup", "-r", "--direct-io=on", "--find", "--show", image], "losetup (node)")
    state["devices"].append(dev)
    save_state(state)
    if check is not None:
        check(dev)
    # Before the mount: a file's readahead window is set from the device when it is opened.
    with contextlib.suppress(OSError):
        write(sysblock(dev) / "queue" / "read_ahead_kb", str(read_ahead_kb))
    target = os.path.join(state["mnt"], f"node{k}")
    os.makedirs(target)
    state["mounts"].append(target)
    save_state(state)
    mount_ro(dev, target, "mount (node)")
    return dev


# --- removal: the steps each setting's cleanup(state) takes -----------------------------------

def umount(mnt: str, problems: list[str]) -> None:
    """Unmount ``mnt`` if it is mounted; lazily where it is busy."""
    if mnt not in set(mount_points()):
        return
    r = subprocess.run(["umount", mnt], capture_output=True, text=True)
    if r.returncode != 0:   # busy (a process still holds a file): detach lazily
        r = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"umount {mnt}: {r.stderr.strip()}")


def detach(devs: list[str], prefix: str, problems: list[str], timeout: float = 10.0) -> None:
    """Detach the loop devices, last first, that still read a file under ``prefix``.

    Detaching is asynchronous while a device is still open (autoclear): wait
    up to ``timeout`` seconds for it.
    """
    if not prefix:
        return
    for dev in reversed(devs):
        if backing_file(dev).startswith(prefix):
            r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
            if r.returncode != 0 and backing_file(dev).startswith(prefix):
                problems.append(f"losetup -d {dev}: {r.stderr.strip()}")
    deadline = time.monotonic() + timeout
    while any(backing_file(d).startswith(prefix) for d in devs) and time.monotonic() < deadline:
        time.sleep(0.05)


def remove_cgroups(dirs: list[str], root: str | None, problems: list[str],
                   timeout: float = 10.0) -> None:
    """Remove each cgroup in ``dirs``, in order, moving its processes back to ``root`` first."""
    for d in dirs:
        deadline = time.monotonic() + timeout
        while os.path.isdir(d):
            with contextlib.suppress(OSError):
                for pid in Path(d, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):   # back to the root: the cgroup can go
                        write(os.path.join(root, "cgroup.procs"), pid)
            try:
                os.rmdir(d)
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    problems.append(f"rmdir {d}: {exc.strerror}")
                    break
                time.sleep(0.05)


def disable_io(enabled: list[str]) -> None:
    """cgroup v2: turn off the io controller where :func:`enable_io` turned it on."""
    for path in enabled:
        with contextlib.suppress(OSError):
            write(path, "-io")


def remove_workdir(work: str | None, problems: list[str]) -> None:
    """Delete the work folder (images, mount points, the state file) unless it holds a mount."""
    if work and os.path.isdir(work):
        if any(m == work or m.startswith(work + "/") for m in mount_points()):
            problems.append(f"{work} still holds a mount; not removed")
        else:
            shutil.rmtree(work, ignore_errors=True)


# --- the janitor and the holder ---------------------------------------------------------------

def start_janitor(state_file: str) -> tuple[subprocess.Popen, int]:
    """A process that cleans up after this one; returns it and the pipe end to close at the end.

    It runs ``python -m lmdbio.lab.storage janitor STATE``: it waits for EOF on
    the pipe (this process's end), then runs the cleanup of the state's kind.
    """
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


@contextlib.contextmanager
def building(state: dict, cleanup: Callable):
    """``with building(state, cleanup) as (janitor, pipe_w):`` make a setting.

    Saves the state and starts the janitor; on any error inside, removes what
    the state records, ends the janitor and re-raises.
    """
    save_state(state)
    janitor, pipe_w = start_janitor(state["state_file"])
    try:
        yield janitor, pipe_w
    except BaseException:
        cleanup(state)
        with contextlib.suppress(OSError):
            os.close(pipe_w)
        with contextlib.suppress(subprocess.TimeoutExpired):
            janitor.wait(timeout=15)
        raise


def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)   # so finally blocks (and the cleanup) run


class Holder:
    """A made setting: ``mnt``, ``path(node, relpath)``, ``evict``, ``close`` (a context manager).

    A subclass names ``state_env`` (the variable :func:`held` sets to the
    state file), ``what`` (for messages) and ``cleanup`` (its module's).
    """

    state_env: str
    what: str
    cleanup: Callable[[dict], list[str]]

    def __init__(self, state: dict, profile, janitor: subprocess.Popen | None, pipe_w: int | None):
        self._state = state
        self.profile = profile
        self.mnt: str = state["mnt"]
        self.nodes: int = state["nodes"]
        self.devices: list[str] = list(state["devices"])
        self.state_file: str = state["state_file"]
        self._janitor = janitor
        self._pipe_w = pipe_w
        self._closed = False
        self._old_env = None
        self._old_term = None
        atexit.register(self.close)

    def path(self, node: int | str = 0, relpath: str = "") -> str:
        """``MNT/node{node}[/relpath]``; ``node='{node}'`` gives a Reader path template."""
        base = os.path.join(self.mnt, f"node{node}")
        return os.path.join(base, relpath) if relpath else base

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

    def close(self) -> None:
        """Remove everything the state records; the janitor then ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_env is not None:
            os.environ.pop(self.state_env, None)
            if self._old_env:
                os.environ[self.state_env] = self._old_env
        if self._old_term is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._old_term)
        problems = self.cleanup(self._state)
        if self._pipe_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe_w)
        if self._janitor is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._janitor.wait(timeout=15)
        if problems:
            raise LmdbioError(f"{self.what} not fully removed: " + "; ".join(problems))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def held(holder: Holder):
    """Inside: ``$state_env`` names the holder's state file and SIGTERM raises; then ``close()``."""
    holder._old_env = os.environ.get(holder.state_env, "")
    os.environ[holder.state_env] = holder.state_file
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        holder._old_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield holder
    finally:
        holder.close()
