"""Loop devices, ext4 images and read-only mounts: made, measured, evicted and removed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from collections.abc import Callable

from lmdbio.errors import LmdbioError
from .statefile import save_state

__all__ = ["write", "mounts", "mount_points", "run", "majmin", "sysblock", "sysfs", "backing_file",
           "device_counters", "file_device_counters", "evict_file", "flush_device", "datasets",
           "stage_datasets", "mkfs", "mount_ro", "add_node", "umount", "detach"]

_BLKFLSBUF = 0x1261          # <linux/fs.h>: flush a block device's buffer cache


def write(path, text: str) -> None:
    """Write ``text`` to a sysfs or cgroup file."""
    with open(path, "w") as f:
        f.write(text)


def _unescape(text: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mounts() -> list[list[str]]:
    """The fields of each line of ``/proc/mounts`` (source, target, type, ...), unescaped."""
    with open("/proc/mounts") as f:
        return [[_unescape(p) for p in line.split()] for line in f]


def mount_points() -> list[str]:
    return [fields[1] for fields in mounts() if len(fields) > 1]


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
