"""Sweeps on the engines: bench points and Reader timelines, grouped by process count."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cluster import MPICluster

__all__ = ["by_nprocs", "sweep", "reader_timeline", "run_timelines", "sweep_timelines"]


def _run_points(comm, points: list[dict]) -> list[dict]:
    from ..bench import run_point

    rows: list[dict] = []
    for p in points:
        with _in_node(comm, p.get("storage")):
            rows.extend(run_point(comm, **p))
    return rows


@contextlib.contextmanager
def _in_node(comm, storage):
    """On a throttled device, this engine reads from its node's cgroup for the point, then leaves.

    Engines outlive the point, so they must not stay in a node's cgroup (its
    throttle would follow them, and the cgroup could not be removed).
    """
    if storage is None or not storage.is_throttle:
        yield
        return
    storage.enter_node(comm)
    try:
        yield
    finally:
        storage.leave_node()


def by_nprocs(cluster: MPICluster, func, points: list[dict], progress: bool) -> list[dict]:
    """Run ``func(comm, points)`` once per process count, on that many engines."""
    by_p: dict[int, list[dict]] = {}
    for p in points:
        q = dict(p)
        by_p.setdefault(int(q.pop("nprocs")), []).append(q)
    rows: list[dict] = []
    for nprocs, pts in by_p.items():
        # Repeats interleaved: every variant's repeat r runs before any repeat r + 1, so a
        # slow spell of the machine hits all variants alike instead of one variant's repeats.
        pts.sort(key=lambda q: q.get("repeat", 0))
        t0 = time.monotonic()
        rows.extend(cluster.run_root(func, nprocs, pts))
        if progress:
            print(f"P={nprocs}: {len(pts)} points in {time.monotonic() - t0:.1f} s", flush=True)
    return rows


def sweep(cluster: MPICluster, points: list[dict], *, progress: bool = True) -> list[dict]:
    """Run :func:`lmdbio.lab.bench.run_point` for each point dict (which holds ``nprocs``) on the engines.

    Points with the same ``nprocs`` run in one call on one sub-communicator,
    in the order given. The sidecars of PROV points are checked and stamped
    once first, untimed, as a user's prepared dataset is (``lmdbio index
    --verify``); their rows carry that cost as ``prov_verify_s``. Returns
    every point's rows (rank 0's gathered rows).
    """
    from ..bench.settings import verify_provenance_ahead, with_prov_verify

    ahead = verify_provenance_ahead(points)
    return with_prov_verify(by_nprocs(cluster, _run_points, points, progress), ahead)


# --- engine-side experiments the bench does not cover -------------------------------------------

def reader_timeline(comm, dataset, variant: str, batch_size: int, iters: int, *, cache: str = "cold",
                    warmup: int = 1, ranks_per_node: int | None = None, readers_per_node: int = 1,
                    coalesce_bytes: int | None = None, stagger_size: int | None = None,
                    storage=None, repeat: int = 0) -> list[dict]:
    """Per-batch, per-phase Reader rows of ``iters`` timed batches, gathered on rank 0.

    Unlike :func:`lmdbio.lab.bench.run_point` (which sums phases over batches),
    this keeps every (rank, batch, phase) row with its monotonic start and end,
    for read timelines (STAG) and request-size sweeps (COAL's
    ``coalesce_bytes``). Timed by :func:`lmdbio.lab.bench.timed.time_batches`:
    ``warmup`` batches (rounded up to whole chunks), then the cache made
    ``cold`` (the file evicted on every node view) or ``warm`` (read once),
    then the timed batches. Every row carries ``variant``, ``nprocs``,
    ``coalesce_bytes``, ``stagger_size``, ``repeat``, the timed ``wall_s_total``
    (the slowest rank's), ``records`` and ``record_bytes`` (over all ranks) and
    ``resident_fraction`` (of the file, when the timed batches start).
    ``storage`` (a :class:`lmdbio.lab.bench.settings.Storage`, as
    :func:`emulated_pfs` sets it) reads through an emulated PFS's node views.
    """
    from mpi4py import MPI

    from ..bench.cache import PageCache
    from ..bench.settings import Storage
    from ..bench.timed import ReaderSource, time_batches
    from lmdbio.reader import Reader

    storage = storage or Storage()
    page_cache = PageCache(comm, storage, dataset, cache)
    with Reader(storage.reader_path(dataset), batch_size, comm, variant, ranks_per_node,
                readers_per_node, coalesce_bytes=coalesce_bytes, stagger_size=stagger_size) as reader:
        timing = time_batches(comm, ReaderSource(reader), iters, warmup, cache=page_cache)
        rows = [dict(r) for r in timing.window(reader.stats())]
        is_reader = bool(reader.is_reader)
        opts = reader.options
    wall = comm.allreduce(timing.wall, op=MPI.MAX)
    records = comm.allreduce(timing.records)
    nbytes = comm.allreduce(timing.nbytes)
    point = {"variant": variant, "nprocs": comm.Get_size(), "cache": cache, "repeat": repeat,
             "batch_size": batch_size, "iters": iters,
             "coalesce_bytes": opts.coalesce_bytes, "stagger_size": opts.stagger_size,
             "ranks_per_node": ranks_per_node or 0, "readers_per_node": readers_per_node,
             "wall_s_total": wall, "records": records, "record_bytes": nbytes,
             "resident_fraction": page_cache.resident, "storage": storage.spec}
    for r in rows:
        r.update(point, is_reader=is_reader)
        for k, v in list(r.items()):
            if hasattr(v, "item"):
                r[k] = v.item()
    gathered = comm.gather(rows, root=0)
    return [r for rank_rows in gathered for r in rank_rows] if comm.Get_rank() == 0 else []


def run_timelines(comm, points: list[dict]) -> list[dict]:
    """:func:`reader_timeline` for each point on ``comm``, the rows one list (rank 0's)."""
    rows: list[dict] = []
    for p in points:
        rows.extend(reader_timeline(comm, **p))
    return rows


def sweep_timelines(cluster: MPICluster, points: list[dict], *, progress: bool = True) -> list[dict]:
    """:func:`reader_timeline` for each point dict (holding ``nprocs``), like :func:`sweep`."""
    return by_nprocs(cluster, run_timelines, points, progress)
