"""Where a point's dataset lives: the local file system, an emulated PFS, or a throttled device.

``--storage local`` (default) reads the dataset where it is. ``--storage
pfs:PROFILE`` serves the dataset's parent folder through :mod:`lmdbio.pfs`
(one FUSE mount for the sweep, ``K`` node views); each rank reads through
its node's view (``MNT/node{node}/<dataset>``), cache preparation warms or
evicts each node's view, and the storage model's counters are added to the
point's rows. ``--storage throttle:PROFILE`` puts the dataset folders on
an ext4 image with one throttled read-only loop device per virtual node
(:mod:`lmdbio.storage`); each rank joins its node's cgroup at start-up and
reads ``MNT/node{node}/<dataset>``, and the ``pfs_requests`` / ``pfs_bytes``
columns count the loop devices' completed block-layer reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Storage", "parse_storage", "pfs_counters", "PFS_COLUMNS", "reads_sidecar",
           "verify_provenance_ahead", "with_prov_verify"]

#: Storage-model counters added to points.csv and summary.csv on a PFS sweep.
PFS_COLUMNS = ("pfs_requests", "pfs_bytes", "pfs_mean_request_bytes", "pfs_queue_wait_s")


def parse_storage(text: str | None) -> tuple[str, str | None]:
    """``"local"`` -> ("local", None); ``"pfs:gpfs-2017"`` -> ("pfs", "gpfs-2017");
    ``"throttle:gpfs-2017"`` -> ("throttle", "gpfs-2017")."""
    text = (text or "local").strip()
    if text == "local":
        return "local", None
    kind, _, profile = text.partition(":")
    if kind not in ("pfs", "throttle") or not profile:
        raise ValueError(f"--storage takes 'local', 'pfs:PROFILE' (e.g. pfs:gpfs-2017) or "
                         f"'throttle:PROFILE' (e.g. throttle:gpfs-2017), got {text!r}")
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
    """

    spec: str = "local"
    mount: str | None = None
    relpath: str | None = None
    ranks_per_node: int | None = None
    throttle_state: str | None = None

    @classmethod
    def from_point(cls, point: dict) -> "Storage":
        return cls(point.get("storage") or "local", point.get("pfs_mount"),
                   point.get("pfs_relpath"), point.get("ranks_per_node") or None,
                   point.get("throttle_state"))

    @property
    def is_pfs(self) -> bool:
        """Reads go through node views (an emulated PFS or a throttled device)."""
        return self.mount is not None

    @property
    def is_throttle(self) -> bool:
        return self.throttle_state is not None

    def _devices(self) -> list[str]:
        import json

        return json.loads(Path(self.throttle_state).read_text())["devices"]

    def enter_node(self, comm) -> None:
        """On a throttled device: put this rank in its node's cgroup (its reads are then throttled)."""
        if self.is_throttle:
            from ..storage import join_node

            join_node(self.node_of(comm.rank), self.throttle_state)

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
        from ..format import db_file

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
        """The eviction function for this rank's node (None: :func:`lmdbio.metrics.evict`)."""
        if not self.is_pfs:
            return None
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
    """The model's totals (requests, bytes, queue wait) from ``Mount.stats()``; {} without stats."""
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
            "pfs_queue_wait_s": _num(src, "queue_wait_s", "queue_wait")}


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

    from ..errors import LmdbioError
    from ..provenance import verify_provenance

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
