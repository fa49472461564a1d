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
waits for the holder's end on a pipe (:mod:`lmdbio.lab.storage.devices`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping

from .devices import (TOOLS, Holder, Profile, ThrottleUnavailable, add_node, building, controller,
                      controller_for, datasets, detach, device_counters, disable_io, enable_io,
                      evict_file, flush_device, held, load_toml, majmin, mkfs, need_state,
                      read_state, remove_cgroups, remove_workdir, save_state, stage_datasets,
                      sysfs, umount, write)

__all__ = ["ThrottleUnavailable", "ThrottleProfile", "THROTTLE_PROFILES", "load_throttle_profile",
           "throttle_available", "throttled", "Throttled", "join_node", "evict_file", "flush_device",
           "device_counters", "leave_node", "cleanup", "STATE_ENV", "TIME_SCALE_ENV"]

#: Set inside ``with throttled(...)``: the state file that :func:`join_node` reads.
STATE_ENV = "LMDBIO_THROTTLE_STATE"
#: Overrides the profile's time_scale for devices made without one.
TIME_SCALE_ENV = "LMDBIO_THROTTLE_TIME_SCALE"
_PROFILES_FILE = Path(__file__).resolve().parents[1] / "pfs" / "throttle_profiles.toml"


# --- profiles -----------------------------------------------------------------------------

_RAW = load_toml(_PROFILES_FILE)
#: Profile names in throttle_profiles.toml.
THROTTLE_PROFILES = tuple(_RAW)


@dataclass(frozen=True)
class ThrottleProfile(Profile):
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


def load_throttle_profile(name: str, time_scale: float | None = None) -> ThrottleProfile:
    """Profile ``name`` at its own time scale, ``time_scale``, or ``$LMDBIO_THROTTLE_TIME_SCALE``."""
    return ThrottleProfile.load(_RAW, name, time_scale, TIME_SCALE_ENV, "throttle profile",
                                _PROFILES_FILE)


# --- availability, joining, cleanup -----------------------------------------------------------

def throttle_available() -> tuple[bool, str]:
    """(True, what will be used) or (False, one line saying why a throttled device cannot be made)."""
    if not sys.platform.startswith("linux"):
        return False, f"throttled devices need Linux (loop devices and cgroups), not {sys.platform}"
    if os.geteuid() != 0:
        return False, "throttled devices need root (loop devices, mounts and cgroups); run as root"
    if not os.path.exists("/dev/loop-control"):
        return False, "no loop devices: /dev/loop-control is absent (modprobe loop)"
    for tool, pkg in TOOLS.items():
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed (apt-get install {pkg})"
    ctl, why = controller()
    if ctl is None:
        return False, why
    return True, why


def join_node(node: int, state: str | os.PathLike | None = None, pid: int | None = None) -> str:
    """Put process ``pid`` (default: this one) in node ``node``'s cgroup; returns the cgroup.

    ``state`` defaults to ``$LMDBIO_THROTTLE_STATE``, which ``throttled()``
    sets, so a rank started inside the block (``mpiexec`` ...) calls
    ``join_node(rank // ranks_per_node)`` at start-up. Children started
    after joining inherit the cgroup.
    """
    st = need_state(state, f"no throttled device to join: {STATE_ENV} is not set or its state file "
                    "({path}) is gone; join from inside 'with lmdbio.lab.storage.throttled(...)'",
                    STATE_ENV)
    cgs = st["cgroups"]["nodes"]
    if not (0 <= int(node) < len(cgs)):
        raise ValueError(f"node {node} is not one of the {len(cgs)} throttled nodes")
    write(os.path.join(cgs[int(node)], "cgroup.procs"), str(pid or os.getpid()))
    return cgs[int(node)]


def leave_node(state: str | os.PathLike | None = None, pid: int | None = None) -> None:
    """Move ``pid`` (default: this process) out of its node's cgroup, back to the controller's root."""
    st = need_state(state, "no throttled device to leave: its state file ({path}) is gone",
                    STATE_ENV)
    write(os.path.join(st["cgroups"]["root"], "cgroup.procs"), str(pid or os.getpid()))


def cleanup(state, timeout: float = 10.0) -> list[str]:
    """Unmount, detach and remove everything a state file records; idempotent. Returns problems.

    Only what the state lists is touched, and a loop device only while its
    backing file is the recorded image.
    """
    st = read_state(state)
    if not st:
        return []
    problems: list[str] = []
    for mnt in reversed(st.get("mounts", [])):
        umount(mnt, problems)
    detach(st.get("devices", []), st.get("image", ""), problems, timeout)
    cg = st.get("cgroups") or {}
    remove_cgroups(list(reversed(cg.get("nodes", []))) + ([cg["base"]] if cg.get("base") else []),
                   cg.get("root"), problems, timeout)
    disable_io(cg.get("enabled", []))   # cgroup v2: the +io this process turned on
    remove_workdir(st.get("workdir"), problems)
    return problems


# --- the device -------------------------------------------------------------------------------

class Throttled(Holder):
    """A throttled dataset: ``mnt``, ``path(node, relpath)``, ``evict``, ``join``, ``counters``."""

    state_env = STATE_ENV
    what = "throttled device"
    cleanup = staticmethod(cleanup)

    def __init__(self, state: dict, profile: ThrottleProfile, janitor: subprocess.Popen | None,
                 pipe_w: int | None):
        super().__init__(state, profile, janitor, pipe_w)
        self.cgroups: list[str] = list(state["cgroups"]["nodes"])
        self.image: str = state["image"]
        self.read_bps, self.read_iops = state["limits"]["read_bps"], state["limits"]["read_iops"]

    def join(self, node: int, pid: int | None = None) -> str:
        """Put ``pid`` (default: this process) in node ``node``'s cgroup: its reads are throttled."""
        return join_node(node, self._state, pid)

    def leave(self, pid: int | None = None) -> None:
        """Move ``pid`` (default: this process) back to the controller's root cgroup."""
        leave_node(self.state_file, pid)

    def counters(self) -> dict:
        """Per node: the device's completed reads and the node cgroup's served bytes; and totals."""
        ctl = controller_for(self._state["cgroups"]["version"], self._state["cgroups"]["root"])
        nodes = []
        for dev, cg in zip(self.devices, self.cgroups):
            c = device_counters(dev)
            c["cgroup_read_bytes"], c["cgroup_read_ios"] = ctl.served(cg, majmin(dev))
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
                           "direct_io": [sysfs(d, "loop/dio") for d in self.devices],
                           "cgroup": f"v{st['cgroups']['version']} {st['cgroups']['root']}",
                           "image_bytes": st["image_bytes"], "fs": "ext4, no journal, 4 KiB blocks"},
                "nodes": self.nodes, "counters": self.counters()}

    def __repr__(self):
        return f"Throttled({self.mnt!r}, nodes={self.nodes}, devices={self.devices})"


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
    dirs = datasets(src)
    ctl, _ = controller()
    work = tempfile.mkdtemp(prefix="lmdbio-throttle-", dir=workdir)
    state = {"kind": "throttle", "pid": os.getpid(), "workdir": work,
             "state_file": os.path.join(work, "state.json"),
             "image": os.path.join(work, "fs.img"), "mnt": os.path.join(work, "mnt"),
             "nodes": nodes, "datasets": [d.name for d in dirs], "devices": [], "mounts": [],
             "cgroups": {"version": ctl.version, "root": ctl.root, "base": None, "nodes": [],
                         "enabled": []},
             "limits": {"read_bps": bps, "read_iops": iops, "ranks_per_node": ranks_per_node},
             "profile": prof.name, "time_scale": prof.time_scale, "image_bytes": 0}
    with building(state, cleanup) as (janitor, pipe_w):
        stage = Path(work, "stage")
        stage_datasets(dirs, stage)
        state["image_bytes"] = mkfs(stage, state["image"], "lmdbio")
        shutil.rmtree(stage)
        base = os.path.join(ctl.root, f"lmdbio-{os.getpid()}-{os.path.basename(work)[-8:]}")
        os.mkdir(base)
        state["cgroups"]["base"] = base
        save_state(state)
        if ctl.version == 2:
            for d in (ctl.root, base):
                enable_io(state, state["cgroups"]["enabled"], d)
        for k in range(nodes):
            dev = add_node(state, state["image"], k, prof.read_ahead_kb)
            cg = os.path.join(base, f"node{k}")
            os.mkdir(cg)
            state["cgroups"]["nodes"].append(cg)
            save_state(state)
            ctl.limit(cg, majmin(dev), bps, iops)
        return Throttled(state, prof, janitor, pipe_w)


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
    with held(start(src, nodes, profile, ranks_per_node, time_scale, workdir)) as t:
        yield t
