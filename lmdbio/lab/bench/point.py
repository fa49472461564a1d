"""One experiment point on any communicator: prepare the cache, build the reader, time batches."""

from __future__ import annotations

import contextlib
import math
import socket
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..emulation import TrainingEmulator, parse_compute_time, parse_model_bytes
from lmdbio.waiting import polite_barrier
from .cache import EvictionWarning, PageCache, batch_positions
from .dali import PEERS
from .limit import RAW, RawReader
from .stats import POINT_KEYS
from .settings import Storage
from .timed import ReaderSource, time_batches

__all__ = ["run_point", "variant_names"]

# Numeric fields of a stats row that are not summed over batches.
_NOT_SUMMED = {"rank", "batch", "t_start", "t_end", "is_reader", *POINT_KEYS, "repeat"}
# The step total row's columns, from the timed loop's lmdbio.metrics.totals_row.
_TOTAL_COLUMNS = ("wall_s", "user_s", "sys_s", "sleep_s", "vcsw", "ivcsw", "minflt", "majflt",
                  "bytes", "rank_records", "io_rchar", "io_syscr", "io_read_bytes", "t_start",
                  "t_end", "rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes")
#: Timed steps each rank leaves out of the training-loop metrics (DLIO's
#: ``metric.exclude_start_steps`` default: the first step of an epoch).
EXCLUDE_START_STEPS = 1


def variant_names() -> tuple[str, ...]:
    """Every name the bench accepts besides ``raw``: the papers' variants, then the extra ones."""
    from lmdbio import options

    return tuple(options.VARIANTS) + tuple(getattr(options, "EXTRA_VARIANTS", ())) + tuple(PEERS)


def _aggregate(rows: Iterable[dict], level: str) -> list[dict]:
    """Sum a rank's per-batch phase rows into one row per phase."""
    out: dict[str, dict] = {}
    for r in rows:
        agg = out.get(r["phase"])
        if agg is None:
            agg = out[r["phase"]] = {"level": level, "phase": r["phase"], "n": 0}
            if "t_start" in r:
                agg.update(t_start=r["t_start"], t_end=r["t_end"])
        agg["n"] += 1
        for k, v in r.items():
            if k in _NOT_SUMMED or k == "phase" or isinstance(v, bool) \
                    or not isinstance(v, (int, float, np.integer, np.floating)):
                continue
            agg[k] = agg.get(k, 0) + v
        if "t_start" in r:
            agg["t_start"] = min(agg.get("t_start", math.inf), r["t_start"])
            agg["t_end"] = max(agg.get("t_end", -math.inf), r["t_end"])
    return list(out.values())


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def _group_size(comm, ranks_per_node: int | None, readers_per_node: int) -> int:
    """Ranks per reader group, as the Reader's topology makes them."""
    from mpi4py import MPI

    if ranks_per_node:
        node = min(ranks_per_node, comm.size)
    else:
        nc = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        node = nc.size
        nc.Free()
    return max(1, math.ceil(node / max(1, readers_per_node)))


@contextlib.contextmanager
def _open_source(comm, dataset, my_file, variant, batch_size, iters, warmup, offsets, sizes,
                 ranks_per_node, readers_per_node, measure, storage):
    """The point's :class:`~lmdbio.lab.bench.timed.Source`, closed on leaving (collective)."""
    if variant == RAW:
        with RawReader(comm, my_file, batch_size, offsets, sizes, iters,
                       _group_size(comm, ranks_per_node, readers_per_node), warmup=warmup) as s:
            yield s
    elif variant in PEERS:
        with PEERS[variant](comm, my_file, batch_size) as s:
            yield s
    else:
        import lmdbio

        with lmdbio.Reader(storage.reader_path(dataset), batch_size=batch_size, comm=comm,
                           variant=variant, ranks_per_node=ranks_per_node,
                           readers_per_node=readers_per_node, measure=measure) as reader:
            yield ReaderSource(reader)


def run_point(comm, dataset, variant: str, batch_size: int, iters: int, cache: str = "warm",
              compute_time: float | str = 0.0, model_bytes: int | str = 0,
              ranks_per_node: int | None = None, readers_per_node: int = 1, warmup: int = 1, *,
              repeat: int = 0, measure: bool = True, evict_tolerance: float = 0.05,
              storage: Storage | None = None,
              exclude_steps: int = EXCLUDE_START_STEPS) -> list[dict]:
    """Run one experiment point on ``comm``; collective. Rank 0 gets the rows, others ``[]``.

    Order: the cache is prepared first (warm: the records of every batch
    read; cold: the file evicted on every node), then the reader is built
    (timed: ``setup``), ``warmup`` untimed batches are read (rounded up to the
    reader's coalescing factor so the timed window starts at a chunk
    boundary), and ``iters`` timed batches follow, each with the training
    emulation (compute sleep, gradient allreduce).

    Args:
        comm: any mpi4py communicator (all its ranks call this).
        dataset: LMDB directory or data.mdb.
        variant: a Reader variant name (``lmdbio.VARIANTS``, ``lmdbio.EXTRA_VARIANTS``,
            ``"auto"``), or ``"raw"`` for the limit.
        batch_size: global batch; each rank gets ``batch_size // comm.size``.
        iters: timed iterations.
        cache: ``"warm"`` or ``"cold"``.
        compute_time: emulated compute, seconds per local sample, or a preset
            name (see :mod:`lmdbio.lab.emulation`).
        model_bytes: bytes of gradients allreduced per iteration, or a preset.
        ranks_per_node: virtual nodes of k consecutive ranks (None: real nodes).
        readers_per_node: readers per (virtual) node.
        warmup: untimed batches read first (at least; see above).
        repeat: stored in the rows (the sweep's repeat number).
        measure: let the Reader record its per-phase stats (the breakdown).
        evict_tolerance: largest resident fraction a cold point may start with.
        storage: where the ranks read the dataset (default: where it is).
        exclude_steps: timed steps each rank leaves out of the training-loop
            metrics (``metric_*`` columns of its total row,
            :meth:`~lmdbio.lab.bench.timed.Timing.training_window`).
    Returns:
        On rank 0, one dict per (rank, level, phase): ``level`` is ``setup``
        (reader construction), ``reader`` (the reader's own phases summed over
        the timed batches) or ``step`` (the benchmark's ``io``, ``compute``,
        ``comm``, ``barrier`` and ``total`` per rank; ``total`` carries the
        rank's getrusage over the timed loop, its resident memory at the end and
        its training-loop window's ``metric_*`` sums). Every row repeats the point's
        columns (``POINT_KEYS``, ``repeat``) and results (``point_wall_s``,
        ``setup_s``, ``first_batch_s``, ``records``, ``record_bytes``,
        resident fractions, ``evict_ok``, ``variant_used``, ``status``, ``error``).
    """
    _check_point(comm, variant, batch_size, iters, warmup, cache, exclude_steps)
    compute_time = parse_compute_time(compute_time)
    model_bytes = parse_model_bytes(model_bytes)
    storage = storage or Storage()
    offsets, sizes, page_cache = _prepared_cache(comm, dataset, variant, batch_size, cache, storage,
                                                 warmup + iters)
    polite_barrier(comm)
    t_setup = time.monotonic()
    with _open_source(comm, dataset, page_cache.path, variant, batch_size, iters, warmup, offsets,
                      sizes, ranks_per_node, readers_per_node, measure, storage) as source, \
            TrainingEmulator(comm, compute_time, model_bytes) as emulator:
        setup_s = time.monotonic() - t_setup
        used = {"variant_used": str(getattr(source, "variant", variant)),
                "variant_reason": str(getattr(source, "auto_reason", "") or "")}
        is_reader = bool(source.is_reader)
        timing = time_batches(comm, source, iters, warmup, cache=page_cache, storage=storage,
                              train=emulator.step)
        stats = source.stats()
    mine = _rank_rows(comm, stats, timing, iters, setup_s, exclude_steps, is_reader)
    results, counters = _point_results(comm, timing, setup_s, page_cache)
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0:
        return []
    point = {
        "dataset": str(dataset), "dataset_name": _dataset_name(dataset),
        "variant": variant, "nprocs": comm.size, "cache": cache, "batch_size": batch_size,
        "iters": iters, "warmup": warmup, "compute_time": compute_time, "model_bytes": model_bytes,
        "ranks_per_node": ranks_per_node or 0, "readers_per_node": readers_per_node,
        "storage": storage.spec, "repeat": repeat, **results,
        "evict_ok": _cold_enough(page_cache, evict_tolerance, variant), **used,
        "status": "ok", "error": "", **counters,
    }
    return [{**r, **point} for rank_rows in gathered for r in rank_rows]


def _dataset_name(dataset) -> str:
    """The dataset's folder name (also where ``dataset`` names its data.mdb)."""
    path = Path(dataset)
    return path.parent.name if path.name == "data.mdb" else path.name


def _check_point(comm, variant: str, batch_size, iters, warmup, cache, exclude_steps) -> None:
    """:func:`run_point`'s arguments, each checked, with what to give instead."""
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if batch_size % comm.size:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {comm.size} ranks; "
                         "choose a batch size every rank count divides")
    if not isinstance(iters, int) or iters <= 0:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
    if not isinstance(exclude_steps, int) or exclude_steps < 0:
        raise ValueError(f"exclude_steps must be a non-negative integer, got {exclude_steps!r}")
    if variant != RAW and variant != "auto" and variant not in variant_names():
        raise ValueError(f"unknown variant {variant!r}; use one of {', '.join(variant_names())}, "
                         f"'auto' or {RAW!r}")


def _prepared_cache(comm, dataset, variant: str, batch_size: int, cache: str, storage: Storage,
                    batches: int) -> tuple[np.ndarray, np.ndarray, PageCache]:
    """The records' offsets and sizes, and the page cache made ``cache`` for ``batches`` batches
    (and a few dozen more, for the longest coalescing). Collective."""
    from lmdbio.format import db_file
    from lmdbio.recordindex import build_index

    path = db_file(dataset)  # LmdbioError when missing
    # The record index (of the source file, never through an emulated PFS) gives
    # raw its extents and tells which pages the batches touch. It is built
    # before the cache is prepared, so it leaves nothing warm on a cold point.
    ix = build_index(path) if comm.rank == 0 else None
    offsets = comm.bcast(ix.offsets if ix is not None else None, root=0)
    sizes = comm.bcast(ix.sizes if ix is not None else None, root=0)
    del ix
    n = len(offsets)
    if n == 0:
        raise ValueError(f"{path} holds no records")

    positions = PEERS[variant].positions if variant in PEERS else batch_positions
    page_cache = PageCache(comm, storage, dataset, cache, records=(offsets, sizes),
                           plan=lambda first, count: positions(first, count, batch_size, n))
    my_file = page_cache.path
    if variant != RAW and variant not in PEERS:
        # The tree walk a user pays once per file version (lmdbio.verified) is paid here,
        # untimed, on each node's view, before the cache is prepared: no repeat measures it.
        # Collective: a damaged file is the same error on every rank, never a wait.
        from lmdbio.collective import collective
        from lmdbio.recordindex import check_tree

        collective(comm, lambda: check_tree(my_file) if page_cache.leader else None)
    page_cache.prepare(0, batches + 64)
    return offsets, sizes, page_cache


def _rank_rows(comm, stats: list[dict], timing, iters: int, setup_s: float, exclude_steps: int,
               is_reader: bool) -> list[dict]:
    """This rank's rows: the reader's phases (setup, timed window) and the benchmark's steps."""
    setup = [r for r in stats if r.get("phase") == "setup"]
    reader_rows = _aggregate(setup, "setup") + _aggregate(timing.window(stats), "reader")
    total = timing.total
    step_rows = [
        {"level": "step", "phase": "io", "n": iters, "wall_s": timing.read_s},
        {"level": "step", "phase": "compute", "n": iters, "wall_s": timing.compute_s},
        {"level": "step", "phase": "comm", "n": iters, "wall_s": timing.comm_s},
        {"level": "step", "phase": "barrier", "n": 1, "wall_s": timing.barrier_s},
        {"level": "step", "phase": "total", "n": iters, **{c: total[c] for c in _TOTAL_COLUMNS},
         **timing.training_window(exclude_steps)},
        {"level": "setup", "phase": "construct", "n": 1, "wall_s": setup_s},
        {"level": "setup", "phase": "warmup", "n": timing.first, "wall_s": timing.warmup_s},
    ]
    host = socket.gethostname()
    mine = []
    for r in reader_rows + step_rows:
        r = {k: _plain(v) for k, v in r.items()}
        r.update(rank=comm.rank, is_reader=is_reader, host=host)
        mine.append(r)
    return mine


def _point_results(comm, timing, setup_s: float, page_cache: PageCache) -> tuple[dict, dict]:
    """The point's results over all ranks (slowest wall, total records and bytes, residency),
    and the storage counters over its timed batches. Collective."""
    from mpi4py import MPI

    from .settings import counter_delta

    results = {
        "point_wall_s": comm.allreduce(timing.wall, op=MPI.MAX),
        "setup_s": comm.allreduce(setup_s, op=MPI.MAX),
        "first_batch_s": comm.allreduce(setup_s + timing.first_read_s, op=MPI.MAX),
        "warmup_batches": timing.first, "coalesce": timing.coalesce,
        "records": comm.allreduce(timing.records), "record_bytes": comm.allreduce(timing.nbytes),
        "resident_fraction": page_cache.resident, "file_resident_fraction": page_cache.file_resident,
        "start_resident_fraction": timing.start_resident[0],
    }
    return results, counter_delta(*timing.counters)


def _cold_enough(page_cache: PageCache, evict_tolerance: float, variant: str) -> bool:
    """Whether a cold point started cold (at most ``evict_tolerance`` of its data resident); warns
    when it did not. A warm point is always True."""
    if page_cache.state != "cold":
        return True
    resident = page_cache.resident
    if resident <= evict_tolerance:
        return True
    msg = (f"COLD CACHE NOT COLD: after evicting {page_cache.path}, {resident:.1%} of the point's "
           f"data (file: {page_cache.file_resident:.1%}) is still in the page cache (tolerance "
           f"{evict_tolerance:.0%}); the {variant} point measures a partly warm cache. "
           "Pages another program keeps mapped cannot be evicted.")
    print(f"lmdbio bench: WARNING: {msg}", file=sys.stderr, flush=True)
    warnings.warn(msg, EvictionWarning, stacklevel=3)
    return False
