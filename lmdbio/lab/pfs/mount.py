"""Mount, inspect and unmount the emulated parallel file system; never leave a stale mount.

A mount is a daemon process (``lmdbio pfs mount ... --foreground``) that
serves ``SRC`` as ``MNT/node0 .. MNT/node{K-1}``. ``mounted()`` starts one
that dies with its parent (``PR_SET_PDEATHSIG``: SIGTERM, on which libfuse
unmounts), unmounts it in ``finally`` and at exit; ``start(detach=True)``
leaves it running for ``lmdbio pfs umount``. ``umount`` asks the daemon to
stop (SIGTERM) and falls back to a lazy ``fusermount3 -u -z``, which also
clears the mount of a crashed daemon.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes.util
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmdbio.errors import LmdbioError
from ..procs import pid_alive
from .model import PROFILES, load_profile

__all__ = ["FuseUnavailable", "check_fuse", "start", "Mount", "mounted", "umount", "stats", "evict",
           "is_mounted", "counters_delta"]

STATS_NAME = ".pfs-stats"
#: Environment variable that overrides the profile's time_scale for mounts made without one.
TIME_SCALE_ENV = "LMDBIO_PFS_TIME_SCALE"
_APT = "apt-get install -y fuse3 (as root; the package provides /dev/fuse support, fusermount3 and libfuse3)"


class FuseUnavailable(LmdbioError):
    """FUSE cannot be used here (no /dev/fuse, no fusermount3, no libfuse3 or no mfusepy)."""


def check_fuse() -> None:
    """Raise FuseUnavailable, saying what is missing and how to get it, unless a FUSE mount can work."""
    if not os.path.exists("/dev/fuse"):
        raise FuseUnavailable("FUSE is not available: /dev/fuse is absent (load the module with "
                              "'modprobe fuse'; in a container, start it with --device /dev/fuse "
                              "--cap-add SYS_ADMIN)")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise FuseUnavailable("FUSE is not available: /dev/fuse is not readable and writable by this user "
                              "(run as root or add the user to the group that owns /dev/fuse)")
    if shutil.which("fusermount3") is None:
        raise FuseUnavailable(f"FUSE is not available: fusermount3 is not installed; run: {_APT}")
    if ctypes.util.find_library("fuse3") is None:
        raise FuseUnavailable(f"FUSE is not available: libfuse3 is not installed; run: {_APT}")
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        raise FuseUnavailable("FUSE is not available: the Python package mfusepy is missing; run: "
                              "pip install mfusepy (or pip install 'lmdbio[lab]')") from None


def _unescape(text: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def is_mounted(mnt: str | os.PathLike) -> bool:
    """Whether ``mnt`` is a mount point in /proc/mounts (also a dead daemon's stale mount)."""
    target = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 1 and _unescape(parts[1]) == target:
                return True
    return False


def _state_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"lmdbio-pfs-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _state_file(mnt: str) -> Path:
    key = hashlib.sha1(os.path.realpath(mnt).encode()).hexdigest()[:16]
    return _state_dir() / f"{key}.json"


def _is_our_daemon(pid: int, mnt: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"--foreground" in argv and os.path.realpath(mnt).encode() in argv


def stats(mnt: str | os.PathLike) -> dict:
    """The daemon's JSON stats (profile, kernel settings, model counters) of the mount at ``mnt``."""
    path = Path(mnt) / STATS_NAME
    if not is_mounted(mnt):
        raise LmdbioError(f"{mnt} is not an lmdbio pfs mount (not in /proc/mounts); mount it with "
                          "'lmdbio pfs mount SRC MNT --profile NAME --nodes K'")
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise LmdbioError(f"cannot read {path}: {exc.strerror}; the daemon may have died - "
                          f"run 'lmdbio pfs umount {mnt}' and mount again") from None
    except ValueError:
        raise LmdbioError(f"{path} is not JSON: {mnt} is not an lmdbio pfs mount") from None


def evict(path: str | os.PathLike, node: int | None = None, relpath: str = "") -> int:
    """Drop a file's (or every file's under a directory) pages from the page cache; the file count.

    ``evict(path)`` or ``evict(MNT, node, relpath)`` (= ``MNT/node{node}/relpath``).
    Through a node view this empties that node's cache only; pages still
    mapped by a live process stay.
    """
    if node is not None:
        path = os.path.join(path, f"node{int(node)}", relpath) if relpath else os.path.join(path, f"node{int(node)}")
    path = Path(path)
    files = [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.is_file()]
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(files)


def _num_delta(a, b):
    if isinstance(b, dict):
        return {k: _num_delta(a.get(k, 0) if isinstance(a, dict) else 0, v) for k, v in b.items()}
    if isinstance(b, list):
        a = a if isinstance(a, list) else []
        return [_num_delta(a[i] if i < len(a) else 0, v) for i, v in enumerate(b)]
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        return b - (a if isinstance(a, (int, float)) else 0)
    return b


def counters_delta(before: dict, after: dict) -> dict:
    """``after - before`` for two ``counters()`` snapshots (or two of their node/target entries).

    Means are recomputed from the differences of bytes and requests.
    """
    d = _num_delta(before, after)
    for entry in [d, d.get("total", {})] + d.get("nodes", []) + d.get("targets", []):
        if "requests" in entry:
            entry["mean_request_bytes"] = entry["bytes"] / entry["requests"] if entry["requests"] else 0.0
    return d


class Mount:
    """A running mount: node views, stats, eviction, unmount (also a context manager)."""

    def __init__(self, mnt: str, src: str, nodes: int, pid: int, proc: subprocess.Popen | None = None,
                 cleanup_dir: bool = False):
        self.mnt = os.path.realpath(mnt)
        self.src = src
        self.nodes = nodes
        self.pid = pid
        self._proc = proc
        self._cleanup_dir = cleanup_dir
        self._closed = False

    def path(self, node: int | str = 0, relpath: str = "") -> str:
        """``MNT/node{node}[/relpath]``; ``node='{node}'`` gives a Reader path template."""
        base = os.path.join(self.mnt, f"node{node}")
        return os.path.join(base, relpath) if relpath else base

    def stats(self) -> dict:
        return stats(self.mnt)

    def counters(self) -> dict:
        """The storage model's counters (see ``StorageModel.counters``)."""
        return self.stats()["counters"]

    def evict(self, node: int | None = None, relpath: str = "") -> int:
        """Empty node ``node``'s page cache of ``relpath`` (a file or directory; all nodes if None)."""
        nodes = range(self.nodes) if node is None else [node]
        return sum(evict(self.path(k, relpath)) for k in nodes)

    def umount(self) -> None:
        if self._closed:
            return
        self._closed = True
        umount(self.mnt, _proc=self._proc)
        if self._cleanup_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self.mnt)

    close = umount

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.umount()

    def __repr__(self):
        return f"Mount({self.mnt!r}, src={self.src!r}, nodes={self.nodes}, pid={self.pid})"


def start(src: str | os.PathLike, mnt: str | os.PathLike | None = None, profile: str = "gpfs-2017",
          nodes: int = 1, time_scale: float | None = None, detach: bool = False,
          timeout: float = 30.0) -> Mount:
    """Start a mount daemon serving ``src`` at ``mnt`` and return once it is ready.

    Args:
        src: directory to serve (read-only).
        mnt: empty directory to mount on (made if missing, then removed at unmount); None
            makes a temporary one.
        profile: storage profile name (``lmdbio.lab.pfs.PROFILES``).
        nodes: number of node views (``MNT/node0 ..``).
        time_scale: override of the profile's time scale (default: the environment variable
            ``LMDBIO_PFS_TIME_SCALE`` if set, else the profile's own).
        detach: leave the daemon running after this process exits (``lmdbio pfs mount``);
            otherwise it unmounts when this process dies, and at exit.
        timeout: seconds to wait for the mount to be ready.
    """
    check_fuse()
    src = os.path.realpath(src)
    time_scale = _checked_arguments(src, profile, nodes, time_scale)
    mnt, cleanup = _mount_point(mnt)
    cmd = [sys.executable, "-m", "lmdbio", "pfs", "mount", src, mnt, "--profile", profile,
           "--nodes", str(nodes), "--foreground"]
    if time_scale is not None:
        cmd += ["--time-scale", repr(float(time_scale))]
    if not detach:
        cmd.append("--exit-with-parent")
    state = _state_file(mnt)
    log_path = state.with_suffix(".log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    try:
        _wait_ready(proc, mnt, log_path, timeout)
    except BaseException:
        umount(mnt, _proc=proc, _keep_log=True)
        if cleanup:
            with contextlib.suppress(OSError):
                os.rmdir(mnt)
        raise
    state.write_text(json.dumps({"pid": proc.pid, "src": src, "mnt": mnt, "profile": profile,
                                 "nodes": nodes, "log": str(log_path)}))
    m = Mount(mnt, src, nodes, proc.pid, proc=proc, cleanup_dir=cleanup)
    if not detach:
        atexit.register(m.umount)
    return m


def _checked_arguments(src: str, profile: str, nodes: int, time_scale: float | None) -> float | None:
    """Check :func:`start`'s arguments; returns the time scale (``$LMDBIO_PFS_TIME_SCALE`` where
    none is given)."""
    if time_scale is None and os.environ.get(TIME_SCALE_ENV):
        try:
            time_scale = float(os.environ[TIME_SCALE_ENV])
        except ValueError:
            raise ValueError(f"{TIME_SCALE_ENV}={os.environ[TIME_SCALE_ENV]!r} is not a number") from None
    if profile not in PROFILES:
        load_profile(profile)  # raises with the list of profiles
    if time_scale is not None:
        load_profile(profile, time_scale)  # validates
    if not (isinstance(nodes, int) and nodes >= 1):
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    if not os.path.isdir(src):
        raise LmdbioError(f"source {src} is not a directory; give the directory that holds the datasets")
    return time_scale


def _mount_point(mnt: str | os.PathLike | None) -> tuple[str, bool]:
    """The empty directory to mount on, and whether the unmount removes it (made here)."""
    cleanup = mnt is None
    mnt = tempfile.mkdtemp(prefix="lmdbio-pfs-mnt-") if mnt is None else os.path.realpath(mnt)
    if is_mounted(mnt):
        raise LmdbioError(f"{mnt} is already a mount point; run 'lmdbio pfs umount {mnt}' first")
    if not os.path.exists(mnt):
        os.makedirs(mnt)
        cleanup = True  # we made it, we remove it
    if not os.path.isdir(mnt):
        raise LmdbioError(f"mount point {mnt} is not a directory; give an empty directory")
    if os.listdir(mnt):
        raise LmdbioError(f"mount point {mnt} is not empty; give an empty directory")
    return mnt, cleanup


def _wait_ready(proc: subprocess.Popen, mnt: str, log_path: Path, timeout: float) -> None:
    """Wait until the daemon's mount says it is ready; raises if the daemon ends or ``timeout``
    passes first."""
    deadline = time.monotonic() + timeout
    while True:
        rc = proc.poll()
        if rc is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise LmdbioError(f"the pfs daemon for {mnt} exited with status {rc} before the mount "
                              f"was ready: {' | '.join(tail) or 'no output'}")
        if is_mounted(mnt):
            with contextlib.suppress(OSError, ValueError):
                if json.loads((Path(mnt) / STATS_NAME).read_bytes()).get("ready"):
                    return
        if time.monotonic() > deadline:
            raise LmdbioError(f"the pfs daemon for {mnt} was not ready after {timeout:.0f} s; "
                              f"see {log_path}")
        time.sleep(0.02)


@contextlib.contextmanager
def mounted(src: str | os.PathLike, profile: str = "gpfs-2017", nodes: int = 1,
            mnt: str | os.PathLike | None = None, time_scale: float | None = None, timeout: float = 30.0):
    """``with mounted(src, profile=..., nodes=K) as m:`` a mount that is gone after the block.

    ``m.path(node)`` is node ``node``'s view of ``src``; ``m.stats()`` the
    daemon's JSON; ``m.evict(node, relpath)`` empties one node's cache. The
    daemon also unmounts if this process dies (SIGTERM, SIGKILL) and at exit.
    """
    m = start(src, mnt, profile=profile, nodes=nodes, time_scale=time_scale, detach=False,
              timeout=timeout)
    try:
        yield m
    finally:
        m.umount()


def umount(mnt: str | os.PathLike, timeout: float = 10.0, _proc: subprocess.Popen | None = None,
           _keep_log: bool = False) -> bool:
    """Unmount ``mnt`` and stop its daemon; also clears a crashed daemon's stale mount.

    Returns whether anything was mounted there.
    """
    mnt = os.path.realpath(mnt)
    state = _state_file(mnt)
    pid = _proc.pid if _proc is not None else None
    if pid is None and state.exists():
        with contextlib.suppress(OSError, ValueError):
            pid = int(json.loads(state.read_text())["pid"])
    was = is_mounted(mnt)
    if pid is not None and pid_alive(pid) and (_proc is not None or _is_our_daemon(pid, mnt)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # libfuse unmounts and the daemon exits
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (pid_alive(pid) or is_mounted(mnt)):
            if _proc is not None:
                _proc.poll()
            time.sleep(0.02)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if _proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            _proc.wait(timeout=timeout)
    if is_mounted(mnt):
        # a dead daemon's mount ("Transport endpoint is not connected"): detach it lazily
        r = subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True, text=True)
        if r.returncode != 0 and is_mounted(mnt):
            r2 = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
            if r2.returncode != 0 and is_mounted(mnt):
                raise LmdbioError(f"cannot unmount {mnt}: {r.stderr.strip() or r2.stderr.strip()}; "
                                  f"try 'fusermount3 -u -z {mnt}' as the user who mounted it")
    with contextlib.suppress(OSError):
        state.unlink()
    if not _keep_log:
        with contextlib.suppress(OSError):
            state.with_suffix(".log").unlink()
    return was
