"""Where a point's dataset lives: the local file system, or an emulated PFS mounted for the sweep.

``--storage local`` (default) reads the dataset where it is. ``--storage
pfs:PROFILE`` serves the dataset's parent folder through :mod:`lmdbio.pfs`
(one FUSE mount for the sweep, ``K`` node views); each rank reads through
its node's view (``MNT/node{node}/<dataset>``), cache preparation warms or
evicts each node's view, and the storage model's counters are added to the
point's rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Storage", "parse_storage", "pfs_counters", "PFS_COLUMNS"]

#: Storage-model counters added to points.csv and summary.csv on a PFS sweep.
PFS_COLUMNS = ("pfs_requests", "pfs_bytes", "pfs_mean_request_bytes", "pfs_queue_wait_s")


def parse_storage(text: str | None) -> tuple[str, str | None]:
    """``"local"`` -> ("local", None); ``"pfs:gpfs-2017"`` -> ("pfs", "gpfs-2017")."""
    text = (text or "local").strip()
    if text == "local":
        return "local", None
    kind, _, profile = text.partition(":")
    if kind != "pfs" or not profile:
        raise ValueError(f"--storage takes 'local' or 'pfs:PROFILE' (e.g. pfs:gpfs-2017), got {text!r}")
    return "pfs", profile


@dataclass(frozen=True)
class Storage:
    """How the ranks of a point reach the dataset.

    Attributes:
        spec: ``"local"`` or ``"pfs:PROFILE"`` (the point's ``storage`` column).
        mount: the PFS mount point (None for local).
        relpath: the dataset's path under each node view.
        ranks_per_node: ranks per (virtual) node; None: real nodes.
    """

    spec: str = "local"
    mount: str | None = None
    relpath: str | None = None
    ranks_per_node: int | None = None

    @classmethod
    def from_point(cls, point: dict) -> "Storage":
        return cls(point.get("storage") or "local", point.get("pfs_mount"),
                   point.get("pfs_relpath"), point.get("ranks_per_node") or None)

    @property
    def is_pfs(self) -> bool:
        return self.mount is not None

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
        def evict(path):
            from .. import pfs

            pfs.evict(path)   # through this node's view: empties that node's cache only
        return evict

    def counters(self) -> dict:
        """The storage model's counters now (``pfs_*`` columns); {} on local storage."""
        if not self.is_pfs:
            return {}
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
