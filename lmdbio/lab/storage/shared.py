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
end on a pipe (:mod:`lmdbio.lab.storage.devices`, as for
:mod:`lmdbio.lab.storage.throttle`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping

from lmdbio.errors import LmdbioError
from .devices import (V1_ROOT, Holder, Profile, ThrottleUnavailable, add_node, backing_file,
                      building, controller, controller_for, datasets, detach, device_counters,
                      disable_io, enable_io, evict_file, held, load_toml, majmin, mkfs, mount_ro,
                      need_state, read_state, remove_cgroups, remove_workdir, run, save_state,
                      stage_datasets, sysfs, umount, v1_rules, write)
from .throttle import throttle_available

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

_RAW = load_toml(_PROFILES_FILE)
#: Profile names in shared_profiles.toml.
SHARED_PROFILES = tuple(_RAW)


@dataclass(frozen=True)
class SharedProfile(Profile):
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


def load_shared_profile(name: str, time_scale: float | None = None) -> SharedProfile:
    """Profile ``name`` at its own time scale, ``time_scale``, or ``$LMDBIO_SHARED_TIME_SCALE``."""
    return SharedProfile.load(_RAW, name, time_scale, SHARED_TIME_SCALE_ENV,
                              "shared-storage profile", _PROFILES_FILE)


# --- the one rule on S --------------------------------------------------------------------

_GONE = "no shared storage target: its state file ({path}) is gone"


def _rule_cgroup(rule: dict) -> str:
    """Where S's rule is written: v1, the blkio root (every process is under it); v2, its cgroup."""
    return rule["root"] if rule["version"] == 1 else rule["cgroup"]


def set_budget(state, bps: int, iops: int) -> None:
    """Write S's one read rule (bytes/s, requests/s) and record it in the state file."""
    st = need_state(state, _GONE)
    if not (int(bps) >= 1 and int(iops) >= 1):
        raise ValueError(f"a budget needs positive bytes/s and requests/s, got {bps}, {iops}")
    rule = st["rule"]
    controller_for(rule["version"], rule["root"]).limit(_rule_cgroup(rule), st["s_majmin"],
                                                        int(bps), int(iops))
    rule["bps"], rule["iops"] = int(bps), int(iops)
    st["limits"]["read_bps"], st["limits"]["read_iops"] = int(bps), int(iops)
    save_state(st)


def _clear_rule(st: dict) -> list[str]:
    """Remove S's rule (v1: write 0; v2: the cgroup goes). Only a rule that is ours."""
    rule = st.get("rule") or {}
    mm = st.get("s_majmin")
    problems: list[str] = []
    if not rule or not mm:
        return problems
    if rule.get("version") == 1:
        ours = bool(st.get("s_device")) and backing_file(st["s_device"]).startswith(st["workdir"])
        if ours or v1_rules(rule["root"]).get(mm, (0, 0)) == (rule.get("bps"), rule.get("iops")):
            for name in controller_for(1, rule["root"]).RULE_FILES:
                try:
                    write(os.path.join(rule["root"], name), f"{mm} 0")
                except OSError as exc:
                    problems.append(f"clear {name} {mm}: {exc.strerror}")
        return problems
    if rule.get("cgroup"):
        remove_cgroups([rule["cgroup"]], rule.get("root"), problems)
    disable_io(rule.get("enabled", []))
    return problems


def s_counters(state) -> dict:
    """S's read counters: the rule's bios (io_serviced) and bytes, and S's completed requests.

    ``ios`` and ``bytes`` are what the blkio/io controller charged on S's
    ``MAJ:MIN`` (v1: the root's ``blkio.throttle.io_serviced_recursive`` and
    ``io_service_bytes_recursive``; v2: ``io.stat``'s rios and rbytes);
    ``dev_requests``, ``dev_merges``, ``dev_bytes`` and ``dev_busy_s`` are
    ``/sys/block/S/stat``'s reads after the block layer merged them.
    """
    st = need_state(state, _GONE)
    rule = st["rule"]
    nbytes, ios = controller_for(rule["version"], rule["root"]).served(
        _rule_cgroup(rule), st["s_majmin"], recursive=True)
    dev = device_counters(st["s_device"])
    return {"ios": ios, "bytes": nbytes, "dev_requests": dev["read_ios"],
            "dev_merges": dev["read_merges"], "dev_bytes": dev["read_bytes"],
            "dev_busy_s": dev["read_ticks_s"]}


def join_shared(state=None, pid: int | None = None) -> str | None:
    """cgroup v2: put ``pid`` (default: this process) in the cgroup carrying S's rule.

    On cgroup v1 the rule sits in the root cgroup and every process is
    already under it: nothing to do (returns None).
    """
    st = need_state(state, f"no shared storage target to join: {SHARED_STATE_ENV} is not set or "
                    "its state file ({path}) is gone; join from inside "
                    "'with lmdbio.lab.storage.shared(...)'", SHARED_STATE_ENV)
    if st["rule"]["version"] == 1:
        return None
    write(os.path.join(st["rule"]["cgroup"], "cgroup.procs"), str(pid or os.getpid()))
    return st["rule"]["cgroup"]


def enter_point(comm, state) -> None:
    """Collective, at a point's start: S's budget for ``comm.size`` ranks; v2: every rank joins.

    Rank 0 writes the profile's budget for a run of ``comm.size`` ranks (a
    target made with a fixed budget keeps it); no rank goes on before it is
    in force.
    """
    st = read_state(state)
    err = None
    if comm.rank == 0:
        try:
            if not st:
                raise LmdbioError(_GONE.format(path=state))
            if not st["limits"].get("fixed"):
                prof = load_shared_profile(st["profile"], st["time_scale"])
                bps, iops = prof.limits(int(comm.size))
                if (bps, iops) != (st["rule"].get("bps"), st["rule"].get("iops")):
                    set_budget(st, bps, iops)
                    st["limits"]["ranks"] = int(comm.size)
                    save_state(st)
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
    st = need_state(state, _GONE)
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
    evict_file(st["node_image"], st["s_device"])   # the node image's pages on S, S's buffers


# --- cleanup ------------------------------------------------------------------------------

def cleanup(state) -> list[str]:
    """Remove S's rule, the node mounts and devices, S's mount and device, the files; idempotent.

    Only what the state lists is touched, and a loop device only while its
    backing file lies in the recorded work folder. Returns problems.
    """
    st = read_state(state)
    if not st:
        return []
    problems = _clear_rule(st)   # first: a rule left on a free loop minor would bind its next user
    work = st.get("workdir", "")
    for mnt in reversed(st.get("mounts", [])):
        umount(mnt, problems)
    detach(st.get("devices", []), work, problems)
    if st.get("s_mnt"):
        umount(st["s_mnt"], problems)
    if st.get("s_device"):
        detach([st["s_device"]], work, problems)
    remove_workdir(work, problems)
    return problems


# --- the target ---------------------------------------------------------------------------

def shared_available() -> tuple[bool, str]:
    """(True, what will be used) or (False, one line saying why a shared target cannot be made)."""
    ok, why = throttle_available()
    if not ok:
        return ok, why
    ctl, _ = controller()
    if ctl is None:
        return False, ("no controller for S's rule: neither cgroup v1 blkio (with blkio.throttle.*) "
                       f"at {V1_ROOT} nor a cgroup v2 hierarchy offering the io controller")
    return True, (f"one rule on S in the cgroup v1 blkio root {ctl.root}" if ctl.version == 1
                  else f"one io.max rule on S in a cgroup under the cgroup v2 root {ctl.root}")


class Shared(Holder):
    """A dataset on a shared target: ``path``, ``evict``, ``counters``, ``set_budget``, ``close``."""

    state_env = SHARED_STATE_ENV
    what = "shared storage target"
    cleanup = staticmethod(cleanup)

    def __init__(self, state: dict, profile: SharedProfile, janitor: subprocess.Popen | None,
                 pipe_w: int | None):
        super().__init__(state, profile, janitor, pipe_w)
        self.s_device: str = state["s_device"]
        self.s_majmin: str = state["s_majmin"]
        self.node_image: str = state["node_image"]

    @property
    def read_bps(self) -> int:
        return int(self._state["limits"]["read_bps"])

    @property
    def read_iops(self) -> int:
        return int(self._state["limits"]["read_iops"])

    def set_budget(self, bps: int, iops: int) -> None:
        """S's one read budget, in bytes/s and requests/s."""
        set_budget(self._state, bps, iops)

    def budget_for(self, ranks: int) -> tuple[int, int]:
        """The profile's budget for a run of ``ranks`` ranks, written to S's rule."""
        bps, iops = self.profile.limits(ranks)
        self.set_budget(bps, iops)
        self._state["limits"]["ranks"] = ranks
        save_state(self._state)
        return bps, iops

    def join(self, pid: int | None = None) -> str | None:
        """cgroup v2: ``pid`` into the cgroup carrying S's rule (v1: nothing to do)."""
        return join_shared(self._state, pid)

    def evict(self, node: int | None = None, relpath: str = "") -> int:
        """Make node ``node`` (every node if None) cold for ``relpath``, and S; the file count."""
        count = super().evict(node, relpath)
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
                           "direct_io": [sysfs(d, "loop/dio") for d in self.devices],
                           "s_direct_io": sysfs(self.s_device, "loop/dio"),
                           "rule": (f"cgroup v1 {rule['root']}: blkio.throttle.read_bps_device "
                                    f"and read_iops_device on {self.s_majmin}" if rule["version"] == 1
                                    else f"cgroup v2 {rule['cgroup']}/io.max on {self.s_majmin}"),
                           "node_image_bytes": st["node_image_bytes"],
                           "s_image_bytes": st["s_image_bytes"],
                           "fs": "ext4, no journal, 4 KiB blocks (node image inside S's image)"},
                "nodes": self.nodes, "counters": self.counters()}

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
    dirs = datasets(src)
    ctl, _ = controller()
    version, root = ctl.version, ctl.root
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
    with building(state, cleanup) as (janitor, pipe_w):
        stage, s_stage = Path(work, "stage"), Path(work, "s_stage")
        stage_datasets(dirs, stage)
        s_stage.mkdir()
        state["node_image_bytes"] = mkfs(stage, str(s_stage / "node.img"), "lmdbio-node")
        shutil.rmtree(stage)
        state["s_image_bytes"] = mkfs(s_stage, state["s_image"], "lmdbio-s")
        shutil.rmtree(s_stage)
        save_state(state)
        # S reads its image through the host's page cache: S's speed is its budget alone.
        s_dev = run(["losetup", "-r", "--find", "--show", state["s_image"]], "losetup (S)")
        state["s_device"], state["s_majmin"] = s_dev, majmin(s_dev)
        os.makedirs(state["s_mnt"])
        save_state(state)
        mount_ro(s_dev, state["s_mnt"], "mount (S)")
        if version == 2:
            enable_io(state, state["rule"]["enabled"], root)
            cg = os.path.join(root, f"{_PREFIX}{os.getpid()}-{os.path.basename(work)[-8:]}")
            os.mkdir(cg)
            state["rule"]["cgroup"] = cg
        save_state(state)
        set_budget(state, bps, iops)   # records the rule before it can bind anyone

        def direct_io(dev: str) -> None:
            if sysfs(dev, "loop/dio") != "1":
                raise LmdbioError(f"node device {dev} did not take direct I/O over "
                                  f"{state['node_image']}: its misses would be cached on S and "
                                  "the nodes would not share S's budget; the file system under "
                                  f"{work} must support O_DIRECT (give workdir= elsewhere)")
        for k in range(nodes):
            add_node(state, state["node_image"], k, prof.read_ahead_kb, check=direct_io)
        return Shared(state, prof, janitor, pipe_w)


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
    with held(start(src, nodes, profile, ranks_per_node, time_scale, workdir, read_bps,
                    read_iops)) as t:
        yield t

