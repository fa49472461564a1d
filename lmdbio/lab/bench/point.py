"""One experiment point on any communicator: prepare the cache, build the reader, time batches."""

from __future__ import annotations

import math
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np

from ..emulation import TrainingEmulator, parse_compute_time, parse_model_bytes
from lmdbio.waiting import polite_barrier
from .cache import EvictionWarning, batch_positions, measure_residency, prepare_cache, warm
from .dali import PEERS
from .limit import RAW, RawReader
from .stats import POINT_KEYS
from .settings import Storage

__all__ = ["run_point", "variant_names"]

# Numeric fields of a stats row that are not summed over batches.
_NOT_SUMMED = {"rank", "batch", "t_start", "t_end", "is_reader", *POINT_KEYS, "repeat"}


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
            agg = out[r["phase"]] = {"level": level, "phase": r["phase"], "n": 0,
                                     "t_start": r.get("t_start", math.nan),
                                     "t_end": r.get("t_end", math.nan)}
        agg["n"] += 1
        for k, v in r.items():
            if k in _NOT_SUMMED or k == "phase" or isinstance(v, bool) \
                    or not isinstance(v, (int, float, np.integer, np.floating)):
                continue
            agg[k] = agg.get(k, 0) + v
        if "t_start" in r:
            agg["t_start"] = min(agg["t_start"], r["t_start"])
            agg["t_end"] = max(agg["t_end"], r["t_end"])
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


def run_point(comm, dataset, variant: str, batch_size: int, iters: int, cache: str = "warm",
              compute_time: float | str = 0.0, model_bytes: int | str = 0,
              ranks_per_node: int | None = None, readers_per_node: int = 1, warmup: int = 1, *,
              repeat: int = 0, measure: bool = True, evict_tolerance: float = 0.05,
              storage: Storage | None = None) -> list[dict]:
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
    Returns:
        On rank 0, one dict per (rank, level, phase): ``level`` is ``setup``
        (reader construction), ``reader`` (the reader's own phases summed over
        the timed batches) or ``step`` (the benchmark's ``io``, ``compute``,
        ``comm``, ``barrier`` and ``total`` per rank; ``total`` carries the
        rank's getrusage over the timed loop). Every row repeats the point's
        columns (``POINT_KEYS``, ``repeat``) and results (``point_wall_s``,
        ``setup_s``, ``first_batch_s``, ``records``, ``record_bytes``,
        resident fractions, ``evict_ok``, ``variant_used``, ``status``, ``error``).
    """
    from mpi4py import MPI

    from lmdbio import metrics
    from lmdbio.format import db_file

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
    if variant != RAW and variant != "auto" and variant not in variant_names():
        raise ValueError(f"unknown variant {variant!r}; use one of {', '.join(variant_names())}, "
                         f"'auto' or {RAW!r}")
    compute_time = parse_compute_time(compute_time)
    model_bytes = parse_model_bytes(model_bytes)
    storage = storage or Storage()
    path = db_file(dataset)  # LmdbioError when missing

    # The record index (of the source file, never through an emulated PFS) gives
    # raw its extents and tells which pages the batches touch. It is built
    # before the cache is prepared, so it leaves nothing warm on a cold point.
    from lmdbio.recordindex import build_index

    ix = build_index(path) if comm.rank == 0 else None
    offsets = comm.bcast(ix.offsets if ix is not None else None, root=0)
    sizes = comm.bcast(ix.sizes if ix is not None else None, root=0)
    del ix
    n = len(offsets)
    if n == 0:
        raise ValueError(f"{path} holds no records")

    my_file = storage.rank_file(comm, dataset)
    leader = storage.is_cache_leader(comm)
    if variant != RAW and variant not in PEERS:
        # The tree walk a user pays once per file version (lmdbio.verified) is paid here,
        # untimed, on each node's view, before the cache is prepared: no repeat measures it.
        # Collective: a damaged file is the same error on every rank, never a wait.
        from lmdbio.collective import collective
        from lmdbio.recordindex import check_tree

        collective(comm, lambda: check_tree(my_file) if leader else None)
    # Longest coalescing any variant uses is a few dozen batches: prepare enough.
    positions = PEERS[variant].positions if variant in PEERS else batch_positions
    planned = positions(0, warmup + iters + 64, batch_size, n)
    resident, file_resident = prepare_cache(comm, my_file, leader, cache, offsets, sizes,
                                            planned, evict=storage.evictor(comm))

    polite_barrier(comm)
    t_setup = time.monotonic()
    variant_used, variant_reason = variant, ""
    if variant == RAW:
        source = RawReader(comm, my_file, batch_size, offsets, sizes, iters,
                           _group_size(comm, ranks_per_node, readers_per_node), warmup=warmup)
        read = source.read_batch
    elif variant in PEERS:
        source = PEERS[variant](comm, my_file, batch_size)
        variant_used = source.variant
        read = source.read_batch
    else:
        import lmdbio

        source = lmdbio.Reader(storage.reader_path(dataset), batch_size=batch_size, comm=comm,
                               variant=variant, ranks_per_node=ranks_per_node,
                               readers_per_node=readers_per_node, measure=measure)
        source.__enter__()
        variant_used = str(getattr(source, "variant", variant))
        variant_reason = str(getattr(source, "auto_reason", "") or "")

        def read():
            b = source.read_batch()
            return len(b), int(b.nbytes)
    setup_s = time.monotonic() - t_setup
    is_reader = bool(getattr(source, "is_reader", True))
    k = comm.allreduce(int(getattr(source, "coalesce", 1) or 1), op=MPI.MAX)
    warm_eff = -(-warmup // k) * k if warmup else 0

    emulator = TrainingEmulator(comm, compute_time, model_bytes)
    counters0 = counters1 = {}
    try:
        first_read_s = math.nan
        t_w = time.monotonic()
        for i in range(warm_eff):
            a = time.monotonic()
            read()
            if i == 0:
                first_read_s = time.monotonic() - a
        warmup_s = time.monotonic() - t_w
        if variant == RAW:
            source.reset_counters()
        timed = positions(warm_eff, iters, batch_size, n)
        if cache == "warm":
            # Warm means warm: the timed records (warmed before setup) are checked and topped up.
            if leader:
                warm(my_file, offsets[timed], sizes[timed])
            resident, file_resident = measure_residency(comm, my_file, leader, cache, offsets,
                                                        sizes, timed)
            start_resident = resident
        else:
            start_resident, _ = measure_residency(comm, my_file, leader, cache, offsets, sizes,
                                                  timed)

        io_s = compute_s = comm_s = 0.0
        records = nbytes = 0
        polite_barrier(comm)
        if comm.rank == 0:
            counters0 = storage.counters()
        io0, r0 = metrics.proc_io(), metrics.rusage_snapshot()
        t0 = time.monotonic()
        for _ in range(iters):
            a = time.monotonic()
            kk, b = read()
            d = time.monotonic() - a
            io_s += d
            if first_read_s != first_read_s:   # no warmup: the first batch is timed
                first_read_s = d
            records += kk
            nbytes += b
            c, m = emulator.step(kk)
            compute_s += c
            comm_s += m
        t_loop = time.monotonic()
        r1, io1 = metrics.rusage_snapshot(), metrics.proc_io()
        polite_barrier(comm)
        t1 = time.monotonic()
        if comm.rank == 0:
            counters1 = storage.counters()

        if variant == RAW:
            reader_rows = [{"level": "setup", "phase": "setup", "n": 1, "wall_s": source.setup_s}]
            reader_rows.append({"level": "reader", "phase": "read", "n": iters,
                                "wall_s": source.read_wall, "bytes": source.read_bytes,
                                "calls": source.read_calls})
        else:
            stats = source.stats() if measure else []
            setup = [r for r in stats if r.get("phase") == "setup"]
            timed_rows = [r for r in stats if r.get("phase") != "setup"
                          and warm_eff <= int(r.get("batch", 0)) < warm_eff + iters]
            reader_rows = _aggregate(setup, "setup") + _aggregate(timed_rows, "reader")
    finally:
        emulator.close()
        if variant == RAW:
            source.close()
        else:
            source.__exit__(None, None, None)

    user, system = r1[0] - r0[0], r1[1] - r0[1]
    # A rank's wall ends with its last iteration; the closing barrier only
    # holds everyone until then (its wake-up latency would otherwise count).
    wall = t_loop - t0
    step_rows = [
        {"level": "step", "phase": "io", "n": iters, "wall_s": io_s},
        {"level": "step", "phase": "compute", "n": iters, "wall_s": compute_s},
        {"level": "step", "phase": "comm", "n": iters, "wall_s": comm_s},
        {"level": "step", "phase": "barrier", "n": 1, "wall_s": t1 - t_loop},
        {"level": "step", "phase": "total", "n": iters, "wall_s": wall, "user_s": user,
         "sys_s": system, "sleep_s": max(0.0, wall - user - system),
         "vcsw": r1[2] - r0[2], "ivcsw": r1[3] - r0[3], "minflt": r1[4] - r0[4],
         "majflt": r1[5] - r0[5], "bytes": nbytes, "rank_records": records,
         "io_rchar": io1.get("rchar", 0) - io0.get("rchar", 0),
         "io_syscr": io1.get("syscr", 0) - io0.get("syscr", 0),
         "io_read_bytes": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
         "t_start": t0, "t_end": t_loop},
        {"level": "setup", "phase": "construct", "n": 1, "wall_s": setup_s},
        {"level": "setup", "phase": "warmup", "n": warm_eff, "wall_s": warmup_s},
    ]
    host = socket.gethostname()
    mine = []
    for r in reader_rows + step_rows:
        r = {k: _plain(v) for k, v in r.items()}
        r.update(rank=comm.rank, is_reader=is_reader, host=host)
        mine.append(r)

    point_wall = comm.allreduce(wall, op=MPI.MAX)
    setup_max = comm.allreduce(setup_s, op=MPI.MAX)
    first_batch = comm.allreduce(setup_s + first_read_s, op=MPI.MAX)
    total_records = comm.allreduce(records)
    total_bytes = comm.allreduce(nbytes)
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0:
        return []

    evict_ok = True
    if cache == "cold":
        evict_ok = bool(resident <= evict_tolerance)
        if not evict_ok:
            msg = (f"COLD CACHE NOT COLD: after evicting {my_file}, {resident:.1%} of the point's "
                   f"data (file: {file_resident:.1%}) is still in the page cache (tolerance "
                   f"{evict_tolerance:.0%}); the {variant} point measures a partly warm cache. "
                   "Pages another program keeps mapped cannot be evicted.")
            print(f"lmdbio bench: WARNING: {msg}", file=sys.stderr, flush=True)
            warnings.warn(msg, EvictionWarning, stacklevel=2)
    from .settings import counter_delta

    name = Path(dataset).name
    point = {
        "dataset": str(dataset), "dataset_name": name if name != "data.mdb" else Path(dataset).parent.name,
        "variant": variant, "nprocs": comm.size, "cache": cache, "batch_size": batch_size,
        "iters": iters, "warmup": warmup, "compute_time": compute_time, "model_bytes": model_bytes,
        "ranks_per_node": ranks_per_node or 0, "readers_per_node": readers_per_node,
        "storage": storage.spec, "repeat": repeat,
        "point_wall_s": point_wall, "setup_s": setup_max, "first_batch_s": first_batch,
        "warmup_batches": warm_eff, "coalesce": k,
        "records": total_records, "record_bytes": total_bytes,
        "resident_fraction": resident, "file_resident_fraction": file_resident,
        "start_resident_fraction": start_resident, "evict_ok": evict_ok,
        "variant_used": variant_used, "variant_reason": variant_reason,
        "status": "ok", "error": "",
        **counter_delta(counters0, counters1),
    }
    rows = []
    for rank_rows in gathered:
        for r in rank_rows:
            rows.append({**r, **point})
    return rows
