"""Where a point's dataset lives: the local file system, an emulated PFS, or a throttled device.

``--storage local`` (default) reads the dataset where it is. ``--storage
pfs:PROFILE`` serves the dataset's parent folder through :mod:`lmdbio.lab.pfs`
(one FUSE mount for the sweep, ``K`` node views); each rank reads through
its node's view (``MNT/node{node}/<dataset>``), cache preparation warms or
evicts each node's view, and the storage model's counters are added to the
point's rows. ``--storage throttle:PROFILE`` puts the dataset folders on
an ext4 image with one throttled read-only loop device per virtual node
(:mod:`lmdbio.lab.storage`); each rank joins its node's cgroup at start-up and
reads ``MNT/node{node}/<dataset>``, and the ``pfs_requests`` / ``pfs_bytes``
columns count the loop devices' completed block-layer reads.
``--storage shared:PROFILE`` puts them on one shared target S with one
budget (:mod:`lmdbio.lab.storage.shared`): each point sets S's budget for its
P ranks, each virtual node reads through its own direct-I/O device, and
``pfs_requests`` / ``pfs_bytes`` are the requests and bytes the blkio (or
io) controller charged on S.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Storage", "parse_storage", "pfs_counters", "PFS_COLUMNS", "reads_sidecar",
           "verify_provenance_ahead", "with_prov_verify", "shared_storage", "point_span_counters",
           "s_counter_table"]

#: Storage-model counters added to points.csv and summary.csv on a PFS sweep.
PFS_COLUMNS = ("pfs_requests", "pfs_bytes", "pfs_mean_request_bytes", "pfs_queue_wait_s", "pfs_pieces",
               "pfs_seeks")


def parse_storage(text: str | None) -> tuple[str, str | None]:
    """``"local"`` -> ("local", None); ``"pfs:gpfs-2017"`` -> ("pfs", "gpfs-2017");
    ``"throttle:gpfs-2017"`` -> ("throttle", "gpfs-2017")."""
    text = (text or "local").strip()
    if text == "local":
        return "local", None
    kind, _, profile = text.partition(":")
    if kind not in ("pfs", "throttle", "shared") or not profile:
        raise ValueError(f"--storage takes 'local', 'pfs:PROFILE' (e.g. pfs:gpfs-2017), "
                         f"'throttle:PROFILE' (e.g. throttle:gpfs-2017) or 'shared:PROFILE' "
                         f"(e.g. shared:gpfs-2017), got {text!r}")
    return kind, profile


@dataclass(frozen=True)
class Storage:
    """How the ranks of a point reach the dataset.

    Attributes:
        spec: ``"local"``, ``"pfs:PROFILE"`` or ``"throttle:PROFILE"`` (the ``storage`` column).
        mount: the PFS or throttled device's mount point (None for local).
        relpath: the dataset's path under each node view.
        ranks_per_node: ranks per (virtual) node; None: real nodes.
        throttle_state: the throttled device's state file (devices, cgroups); None otherwise.
        shared_state: the shared target's state file (S, node devices, rule); None otherwise.
    """

    spec: str = "local"
    mount: str | None = None
    relpath: str | None = None
    ranks_per_node: int | None = None
    throttle_state: str | None = None
    shared_state: str | None = None

    @classmethod
    def from_point(cls, point: dict) -> Storage:
        return cls(point.get("storage") or "local", point.get("pfs_mount"),
                   point.get("pfs_relpath"), point.get("ranks_per_node") or None,
                   point.get("throttle_state"), point.get("shared_state"))

    @property
    def is_pfs(self) -> bool:
        """Reads go through node views (an emulated PFS or a throttled device)."""
        return self.mount is not None

    @property
    def is_throttle(self) -> bool:
        return self.throttle_state is not None

    @property
    def is_shared(self) -> bool:
        return self.shared_state is not None

    def _devices(self) -> list[str]:
        import json

        return json.loads(Path(self.throttle_state).read_text())["devices"]

    def enter_node(self, comm) -> None:
        """On a throttled device: put this rank in its node's cgroup (its reads are then throttled)."""
        if self.is_throttle:
            from ..storage import join_node

            join_node(self.node_of(comm.rank), self.throttle_state)
        if self.is_shared:
            from ..storage.shared import enter_point

            enter_point(comm, self.shared_state)   # S's budget for this point's P ranks

    def leave_node(self) -> None:
        """On a throttled device: this process back to the root cgroup (see :meth:`enter_node`)."""
        if self.is_throttle:
            from ..storage import leave_node

            leave_node(self.throttle_state)

    def reader_path(self, dataset) -> str:
        """The path the Reader opens (``{node}`` is filled in per rank by the Reader)."""
        if not self.is_pfs:
            return str(dataset)
        return os.path.join(self.mount, "node{node}", self.relpath)

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node if self.ranks_per_node else 0

    def rank_file(self, comm, dataset) -> Path:
        """data.mdb as this rank's node sees it."""
        from lmdbio.format import db_file

        if not self.is_pfs:
            return db_file(dataset)
        return db_file(os.path.join(self.mount, f"node{self.node_of(comm.rank)}", self.relpath))

    def is_cache_leader(self, comm) -> bool:
        """True on one rank per page cache: per physical node, or per PFS node view."""
        if self.is_pfs:
            return comm.rank % self.ranks_per_node == 0 if self.ranks_per_node else comm.rank == 0
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        try:
            return node.rank == 0
        finally:
            node.Free()

    def evictor(self, comm):
        """The eviction function for this rank's node (None: :func:`lmdbio.lab.pagecache.evict`)."""
        if not self.is_pfs:
            return None
        if self.is_shared:
            state = self.shared_state

            def evict_shared(path):
                from ..storage.shared import evict_node_file

                evict_node_file(path, state)   # this node's file and device, and S's caches
            return evict_shared
        if self.is_throttle:
            device = self._devices()[self.node_of(comm.rank)]

            def evict_throttled(path):
                from ..storage import evict_file

                evict_file(path, device)   # this node's file, and its device's buffer cache
            return evict_throttled

        def evict(path):
            from .. import pfs

            pfs.evict(path)   # through this node's view: empties that node's cache only
        return evict

    def counters(self) -> dict:
        """The storage model's counters now (``pfs_*`` columns); {} on local storage."""
        if not self.is_pfs:
            return {}
        if self.is_shared:
            from ..storage.shared import s_counters

            c = s_counters(self.shared_state)
            return {"pfs_requests": float(c["ios"]), "pfs_bytes": float(c["bytes"]),
                    **{f"s_{k}": float(v) for k, v in c.items()}}
        if self.is_throttle:
            from ..storage import device_counters

            c = [device_counters(d) for d in self._devices()]
            return {"pfs_requests": float(sum(x["read_ios"] for x in c)),
                    "pfs_bytes": float(sum(x["read_bytes"] for x in c))}
        from .. import pfs

        return pfs_counters(pfs.stats(self.mount))


def _num(d: dict, *names, default=0.0) -> float:
    for n in names:
        if n in d and d[n] is not None:
            return float(d[n])
    return default


def pfs_counters(stats: dict | None) -> dict:
    """The model's totals (requests, bytes, queue wait; the targets' pieces and seeks) from
    ``Mount.stats()``; {} without stats."""
    if not stats:
        return {}
    stats = stats.get("counters", stats)
    src = stats.get("total") or stats
    if "nodes" in stats and not any(k in src for k in ("requests", "bytes")):
        nodes = stats["nodes"].values() if isinstance(stats["nodes"], dict) else stats["nodes"]
        src = {"requests": sum(_num(n, "requests") for n in nodes),
               "bytes": sum(_num(n, "bytes") for n in nodes),
               "queue_wait_s": sum(_num(n, "queue_wait_s", "queue_wait") for n in nodes)}
    return {"pfs_requests": _num(src, "requests"), "pfs_bytes": _num(src, "bytes"),
            "pfs_queue_wait_s": _num(src, "queue_wait_s", "queue_wait"),
            "pfs_pieces": _num(src, "pieces", default=math.nan),
            "pfs_seeks": _num(src, "seeks", default=math.nan)}


def counter_delta(before: dict, after: dict) -> dict:
    """Counters of ``after - before`` with the mean request size."""
    if not before or not after:
        return {}
    out = {k: after[k] - before.get(k, 0.0) for k in after}
    req = out.get("pfs_requests", 0.0)
    out["pfs_mean_request_bytes"] = out.get("pfs_bytes", 0.0) / req if req else float("nan")
    return out


def reads_sidecar(variant: str) -> bool:
    """Whether ``variant`` locates records with the provenance sidecar (PROV, lmdbio-direct)."""
    return "prov" in variant or variant == "lmdbio-direct"


def verify_provenance_ahead(points) -> dict[str, dict]:
    """PROV as a user runs it after preparing a dataset: each sidecar checked once, untimed.

    For every dataset a sidecar-reading point reads, runs
    :func:`lmdbio.provenance.verify_provenance` (the full check, then its
    stamp) through every node view the points read, before any timed run:
    on a PFS each view is a file of its own to ``fstat``, so each gets its
    stamp. ``storage`` is a :class:`Storage` or the point's ``pfs_*`` keys.
    Returns ``{dataset: {"prov_verify_s": seconds, all views, "prov_verify_views": n}}``;
    a sidecar that fails is left to the points (they report it), with NaN seconds.
    """
    import math
    import time

    from lmdbio.errors import LmdbioError
    from lmdbio.provenance import verify_provenance

    views: dict[str, set] = {}
    for p in points:
        if not reads_sidecar(p["variant"]):
            continue
        st = p["storage"] if isinstance(p.get("storage"), Storage) else Storage.from_point(p)
        nodes = math.ceil(p["nprocs"] / st.ranks_per_node) if st.is_pfs and st.ranks_per_node else 1
        path = st.reader_path(p["dataset"])
        views.setdefault(str(p["dataset"]), set()).update(path.replace("{node}", str(k))
                                                          for k in range(nodes))
    out = {}
    for ds, paths in views.items():
        t0 = time.perf_counter()
        try:
            for path in sorted(paths):
                verify_provenance(path)
            seconds = time.perf_counter() - t0
        except LmdbioError:
            seconds = math.nan
        out[ds] = {"prov_verify_s": seconds, "prov_verify_views": len(paths)}
    return out


def with_prov_verify(rows: list[dict], ahead: dict[str, dict]) -> list[dict]:
    """``rows`` of sidecar-reading variants with their dataset's one-time check cost added."""
    for r in rows:
        if reads_sidecar(str(r.get("variant", ""))) and str(r.get("dataset")) in ahead:
            r.update(ahead[str(r["dataset"])])
    return rows


@contextlib.contextmanager
def shared_storage(points, profile: str):
    """Put the points' dataset folders on one shared target (``--storage shared:PROFILE``).

    The target has one node device per virtual node of the largest point;
    each point sets S's budget for its own P ranks when it starts
    (:func:`lmdbio.lab.storage.shared.enter_point`). Yields ``{dataset: (target,
    folder name)}``; every point then carries the mount, its path and the
    state file.
    """
    import math

    from lmdbio.format import db_file
    from ..storage.shared import shared

    rpn = {p.get("ranks_per_node") for p in points}
    if None in rpn or len(rpn) != 1:
        raise ValueError("--storage shared:PROFILE needs one --ranks-per-node for the sweep: it "
                         "sets the virtual nodes that share the target")
    rpn = rpn.pop()
    nodes = max(math.ceil(p["nprocs"] / rpn) for p in points)
    folders = {ds: db_file(ds).parent for ds in dict.fromkeys(p["dataset"] for p in points)}
    with shared(list(dict.fromkeys(folders.values())), nodes=nodes, profile=profile,
                ranks_per_node=rpn) as t:
        for p in points:
            p["pfs_mount"] = t.mnt
            p["pfs_relpath"] = folders[p["dataset"]].name
            p["shared_state"] = t.state_file
        yield {ds: (t, f.name) for ds, f in folders.items()}


def point_span_counters(storage: Storage, before: dict | None = None) -> dict:
    """S's absolute counters at a point's start (``before=None``) or the point's before/after.

    On shared storage only ({} otherwise): ``s_point_{ios,bytes,dev_requests}_{before,after}``,
    the whole point (setup and warmup too), beside the timed window's ``pfs_*`` deltas.
    """
    if not storage.is_shared:
        return {}
    from ..storage.shared import s_counters

    now = s_counters(storage.shared_state)
    if before is None:
        return now
    import json

    limits = json.loads(Path(storage.shared_state).read_text())["limits"]
    keys = ("ios", "bytes", "dev_requests")
    return {**{f"s_point_{k}_before": before[k] for k in keys},
            **{f"s_point_{k}_after": now[k] for k in keys},
            "s_budget_bps": limits["read_bps"], "s_budget_iops": limits["read_iops"]}


def s_counter_table(points_csv) -> object:
    """One row per point x repeat of a shared sweep: S's requests and bytes, point and timed window."""
    import pandas as pd

    df = pd.read_csv(points_csv)
    keep = ["variant", "nprocs", "cache", "repeat", "storage", "s_budget_bps", "s_budget_iops",
            "pfs_requests", "pfs_bytes",
            "pfs_mean_request_bytes", "s_dev_requests", "s_dev_merges", "s_dev_bytes", "s_dev_busy_s",
            "s_point_ios_before", "s_point_ios_after", "s_point_bytes_before",
            "s_point_bytes_after", "s_point_dev_requests_before", "s_point_dev_requests_after"]
    df = df.drop_duplicates(["variant", "nprocs", "cache", "repeat"])
    out = df[[c for c in keep if c in df]].rename(columns={
        "pfs_requests": "timed_s_ios", "pfs_bytes": "timed_s_bytes",
        "pfs_mean_request_bytes": "timed_s_mean_bio_bytes", "s_dev_requests": "timed_s_dev_requests",
        "s_dev_merges": "timed_s_dev_merges", "s_dev_bytes": "timed_s_dev_bytes",
        "s_dev_busy_s": "timed_s_dev_busy_s"})
    if "s_point_ios_after" in out:
        out["point_s_ios"] = out["s_point_ios_after"] - out["s_point_ios_before"]
        out["point_s_bytes"] = out["s_point_bytes_after"] - out["s_point_bytes_before"]
    return out.reset_index(drop=True)
