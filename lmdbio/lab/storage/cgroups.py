"""cgroup read rules: v1 blkio throttle files or v2 ``io.max``, set, read back and removed."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

from .blockdev import mounts, write
from .statefile import save_state

__all__ = ["V1_ROOT", "CgroupV1", "CgroupV2", "v2_root", "controller", "controller_for",
           "v1_rules", "enable_io", "remove_cgroups", "disable_io"]

V1_ROOT = "/sys/fs/cgroup/blkio"


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
    for fields in mounts():
        if len(fields) > 2 and fields[2] == "cgroup2":
            return fields[1]
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
