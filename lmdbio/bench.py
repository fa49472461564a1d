"""Benchmarks: one experiment point on any communicator, sweeps under mpiexec, tidy results.

Three layers:

- :func:`run_point` runs one point (dataset x variant x cache x ...) on a
  communicator (mpiexec's ``COMM_WORLD`` or an ipyparallel engine's) and
  returns tidy rows, one per (rank, level, phase), gathered on rank 0.
- :func:`run_sweep` launches ``mpiexec -n P python -m lmdbio.bench _point``
  per point with a timeout, so a crashed or hung point is recorded as
  ``status="failed"`` and the sweep goes on.
- :func:`summarize` and :func:`write_results` turn rows into ``points.csv``,
  ``summary.csv`` and ``meta.json``; ``lmdbio bench --report DIR`` prints them.

The limit. The pseudo-variant ``raw`` uses the Reader's layout (same
topology: one reader per node or per group) and the same byte extents the
direct-I/O variants read (``lmdbio.io.plan_extents`` over the record index),
and issues one ``os.preadv`` per extent into a private numpy buffer. It does
no LMDB work, no locating inside the timed loop (extents are planned in
setup), no distribution to the other ranks and no per-batch synchronization:
the group's other ranks only take part in the closing barrier. That makes it
an upper bound on what any reader with this layout can deliver from this
file; ``fraction_of_limit`` is a variant's throughput over raw's at the same
point.

Throughput counts records delivered to all ranks per second of wall time:
the ranks leave a barrier, run the timed iterations, and the wall is the
longest time any rank took from the barrier to the end of its last
iteration (a closing barrier then holds everyone). CPU time (getrusage,
user + system) covers the same span on every rank and is summed over ranks.
Barriers the benchmark itself adds are polite (``Ibarrier`` + test + short
sleeps): MPICH's blocking barrier spins, and spinning ranks on an
oversubscribed node would steal the reader's core and show up as CPU time.

Cache state: after setup and warmup, one rank per physical node either
reads the pages of the records the timed iterations will use (warm) or
evicts the data file (cold, ``posix_fadvise(DONTNEED)``), then measures with
mincore the fraction of those pages resident (``resident_fraction``) and of
the whole file (``file_resident_fraction``). Pages a process holds mapped
(LMDB's mmap after the warmup) cannot be evicted; a cold point whose
resident fraction is above ``evict_tolerance`` gets ``evict_ok=False`` and a
loud warning. The timed records are distinct as long as ``(warmup + iters) *
batch_size`` does not exceed the record count; beyond that a cold point
re-reads records it has just cached.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .cluster import mpiexec
from .emulation import TrainingEmulator, parse_compute_time, parse_model_bytes
from .waiting import polite_barrier

__all__ = [
    "RAW", "POINT_KEYS", "SUMMARY_COLUMNS", "variant_names", "run_point", "summarize",
    "write_results", "read_summary", "format_report", "targets", "make_points", "run_sweep",
    "add_bench_parser", "EvictionWarning",
]

RAW = "raw"
#: Columns that identify a point (a row of summary.csv is a point x repeat).
POINT_KEYS = ("dataset", "variant", "nprocs", "cache", "batch_size", "iters", "warmup",
              "compute_time", "model_bytes", "ranks_per_node", "readers_per_node")
#: Columns of summary.csv, in order.
SUMMARY_COLUMNS = (
    "dataset", "dataset_name", "variant", "nprocs", "cache", "repeat", "batch_size", "iters",
    "warmup", "compute_time", "model_bytes", "ranks_per_node", "readers_per_node", "status",
    "records_per_s", "mb_per_s", "speedup_vs_lmdb", "fraction_of_limit", "cpu_s_per_gb",
    "wall_s", "records", "record_bytes", "cpu_s", "read_s", "compute_s", "comm_s", "wait_s", "au",
    "resident_fraction", "file_resident_fraction", "evict_ok", "error",
)
# Reader phases that are waiting for someone else, not reading.
_WAIT_PHASES = ("wait", "stagger_wait", "ring_wait")
# Numeric fields of a stats row that are not summed over batches.
_NOT_SUMMED = {"rank", "batch", "t_start", "t_end", "is_reader", *POINT_KEYS, "repeat"}


class EvictionWarning(UserWarning):
    """Eviction left a cold point's data in the page cache: the point is not cold."""


def variant_names() -> tuple[str, ...]:
    """Every Reader variant (``lmdbio.VARIANTS``)."""
    import lmdbio

    names = getattr(lmdbio, "VARIANTS", None)
    if names is None:
        from .options import VARIANTS as names
    return tuple(names)


# --------------------------------------------------------------------------- helpers


def _page_mask(offsets: np.ndarray, sizes: np.ndarray, npages: int) -> np.ndarray:
    """Bool per page: some byte of some record (offset, size) lies in it."""
    import mmap

    ps = mmap.PAGESIZE
    first = (offsets.astype(np.int64) // ps)
    last = (offsets.astype(np.int64) + np.maximum(sizes.astype(np.int64), 1) - 1) // ps
    diff = np.zeros(npages + 1, dtype=np.int64)
    np.add.at(diff, np.clip(first, 0, npages), 1)
    np.add.at(diff, np.clip(last + 1, 0, npages), -1)
    return np.cumsum(diff[:npages]) > 0


def _timed_positions(first_batch: int, nbatches: int, batch_size: int, n: int) -> np.ndarray:
    """Record positions read by global batches first_batch .. first_batch+nbatches-1."""
    start = first_batch * batch_size
    return (start + np.arange(nbatches * batch_size, dtype=np.int64)) % n


def _node_comm(comm):
    from mpi4py import MPI

    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)


def _warm(path: Path, offsets: np.ndarray, sizes: np.ndarray, chunk: int = 16 << 20) -> None:
    """Read the pages holding the given records once, so they are in the page cache."""
    from .io import plan_extents

    ext_start, ext_len, _ = plan_extents(offsets, sizes, max_gap=1 << 20)
    buf = np.empty(chunk, dtype=np.uint8)
    mv = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, length in zip(ext_start.tolist(), ext_len.tolist()):
            end = off + length
            while off < end:
                got = os.preadv(fd, [mv[:min(chunk, end - off)]], off)
                if got <= 0:
                    break
                off += got
    finally:
        os.close(fd)


def _prepare_cache(comm, path: Path, cache: str, offsets: np.ndarray, sizes: np.ndarray,
                   positions: np.ndarray) -> tuple[float, float]:
    """Make the timed records warm (read them) or cold (evict the file); one rank per node. Collective.

    Returns ``(resident_fraction, file_resident_fraction)`` measured with
    mincore right after: the fraction of the pages of the records at
    ``positions`` (the timed ones) in the page cache, and of the whole file;
    the worst over nodes (max for cold, min for warm).
    """
    from mpi4py import MPI

    from . import metrics

    node = _node_comm(comm)
    try:
        polite_barrier(comm)  # nobody is still reading the warmup batches
        res = file_res = 0.0
        if node.rank == 0:
            offs, szs = offsets[positions], sizes[positions]
            if cache == "cold":
                metrics.evict(path)
            else:
                _warm(path, offs, szs)
            pages = metrics.resident_pages(path)
            file_res = float(pages.mean()) if len(pages) else 0.0
            mask = _page_mask(offs, szs, len(pages))
            res = float(pages[mask].mean()) if mask.any() else 0.0
        op = MPI.MAX if cache == "cold" else MPI.MIN
        if cache == "warm":  # non-leaders must not pull the minimum down
            res = res if node.rank == 0 else 1.0
            file_res = file_res if node.rank == 0 else 1.0
        res = comm.allreduce(res, op=op)
        file_res = comm.allreduce(file_res, op=op)
        polite_barrier(comm)
    finally:
        node.Free()
    return res, file_res


class _RawReader:
    """The limit: the Reader's readers pread the same extents, with no LMDB and no distribution."""

    def __init__(self, comm, path: Path, batch_size: int, offsets: np.ndarray, sizes: np.ndarray,
                 nbatches: int, ranks_per_node, readers_per_node: int):
        from .io import plan_extents, positions_runs
        from .topology import make_topology

        t0 = time.monotonic()
        self.topology = make_topology(comm, ranks_per_node, readers_per_node)
        P, B, n = comm.size, batch_size, len(offsets)
        group = self.topology.group_ranks
        self.is_reader = self.topology.is_reader
        self.local_batch = B // P
        lo, hi = group[0] * B // P, (group[-1] + 1) * B // P
        mine_lo, mine_hi = comm.rank * B // P, (comm.rank + 1) * B // P
        csum = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))))

        def span_bytes(start: int, count: int) -> int:
            total = 0
            for a, m in positions_runs(start, count, n):
                total += int(csum[a + m] - csum[a])
            return total

        # Plan every batch up front: the timed loop only reads.
        self._plans = []
        self._mine_bytes = []
        for t in range(nbatches):
            if self.is_reader:
                pos = (t * B + np.arange(lo, hi, dtype=np.int64)) % n
                ext_start, ext_len, _ = plan_extents(offsets[pos], sizes[pos])
                self._plans.append((ext_start, ext_len))
            self._mine_bytes.append(span_bytes(t * B + mine_lo, mine_hi - mine_lo))
        need = max((int(p[1].sum()) for p in self._plans), default=0)
        self._buf = np.empty(max(need, 1), dtype=np.uint8)
        self._fd = os.open(path, os.O_RDONLY) if self.is_reader else -1
        self._path = str(path)
        self._t = 0
        self.read_wall = 0.0
        self.read_bytes = 0
        self.read_calls = 0
        self.setup_s = time.monotonic() - t0

    def read_batch(self) -> tuple[int, int]:
        """Read this rank's group's extents for the next batch; returns (records, record bytes)."""
        from .io import read_extents

        t = self._t
        self._t += 1
        if self.is_reader:
            ext_start, ext_len = self._plans[t]
            t0 = time.monotonic()
            got, calls = read_extents(self._fd, self._buf, ext_start, ext_len, self._path)
            self.read_wall += time.monotonic() - t0
            self.read_bytes += got
            self.read_calls += calls
        return self.local_batch, self._mine_bytes[t]

    def reset_counters(self) -> None:
        self.read_wall, self.read_bytes, self.read_calls = 0.0, 0, 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.topology.free()


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
    if isinstance(v, np.generic):
        return v.item()
    return v


# --------------------------------------------------------------------------- one point


def run_point(comm, dataset, variant: str, batch_size: int, iters: int, cache: str = "warm",
              compute_time: float | str = 0.0, model_bytes: int | str = 0,
              ranks_per_node: int | None = None, readers_per_node: int = 1, warmup: int = 1, *,
              repeat: int = 0, measure: bool = True, evict_tolerance: float = 0.05) -> list[dict]:
    """Run one experiment point on ``comm``; collective. Rank 0 gets the rows, others ``[]``.

    Each rank builds the reader (``variant`` in ``lmdbio.VARIANTS`` or ``"raw"``),
    reads ``warmup`` untimed batches, (for ``cache="cold"``) the file is
    evicted on every node, then ``iters`` timed batches are read, each
    followed by the training emulation (compute sleep, gradient allreduce).

    Args:
        comm: any mpi4py communicator (all its ranks call this).
        dataset: LMDB directory or data.mdb.
        variant: a Reader variant name, or ``"raw"`` for the limit.
        batch_size: global batch; each rank gets ``batch_size // comm.size``.
        iters: timed iterations.
        cache: ``"warm"`` or ``"cold"``.
        compute_time: emulated compute, seconds per local sample, or a preset
            name (see :mod:`lmdbio.emulation`).
        model_bytes: bytes of gradients allreduced per iteration, or a preset.
        ranks_per_node: virtual nodes of k consecutive ranks (None: real nodes).
        readers_per_node: readers per (virtual) node.
        warmup: untimed batches read first.
        repeat: stored in the rows (the sweep's repeat number).
        measure: let the Reader record its per-phase stats (the breakdown).
        evict_tolerance: largest resident fraction a cold point may start with.
    Returns:
        On rank 0, one dict per (rank, level, phase): ``level`` is ``setup``
        (reader construction), ``reader`` (the reader's own phases summed over
        the timed batches) or ``step`` (the benchmark's ``io``, ``compute``,
        ``comm``, ``barrier`` and ``total`` per rank; ``total`` carries the
        rank's getrusage over the timed loop). Every row repeats the point's
        columns (``POINT_KEYS``, ``repeat``) and results (``point_wall_s``,
        ``records``, ``record_bytes``, resident fractions, ``evict_ok``,
        ``status``, ``error``).
    """
    from . import metrics
    from .format import db_file

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
    if variant != RAW and variant not in variant_names():
        raise ValueError(f"unknown variant {variant!r}; use one of {', '.join(variant_names())} "
                         f"or {RAW!r}")
    compute_time = parse_compute_time(compute_time)
    model_bytes = parse_model_bytes(model_bytes)
    path = db_file(dataset)  # LmdbioError when missing

    # The record index gives raw its extents and tells which pages the timed batches touch.
    from .index import build_index

    ix = build_index(path) if comm.rank == 0 else None
    offsets = comm.bcast(ix.offsets if ix is not None else None, root=0)
    sizes = comm.bcast(ix.sizes if ix is not None else None, root=0)
    del ix
    if len(offsets) == 0:
        raise ValueError(f"{path} holds no records")

    nbatches = warmup + iters
    t_setup = time.monotonic()
    if variant == RAW:
        source = _RawReader(comm, path, batch_size, offsets, sizes, nbatches, ranks_per_node,
                            readers_per_node)
        read = source.read_batch
        is_reader = source.is_reader
    else:
        import lmdbio

        source = lmdbio.Reader(dataset, batch_size=batch_size, comm=comm, variant=variant,
                               ranks_per_node=ranks_per_node, readers_per_node=readers_per_node,
                               measure=measure)
        source.__enter__()
        is_reader = bool(source.is_reader)

        def read():
            b = source.read_batch()
            return len(b), int(b.nbytes)
    setup_s = time.monotonic() - t_setup

    emulator = TrainingEmulator(comm, compute_time, model_bytes)
    try:
        for _ in range(warmup):
            read()
        if variant == RAW:
            source.reset_counters()
        resident, file_resident = _prepare_cache(
            comm, path, cache, offsets, sizes,
            _timed_positions(warmup, iters, batch_size, len(offsets)))

        io_s = compute_s = comm_s = 0.0
        records = nbytes = 0
        polite_barrier(comm)
        io0, r0 = metrics.proc_io(), metrics.rusage_snapshot()
        t0 = time.monotonic()
        for _ in range(iters):
            a = time.monotonic()
            k, b = read()
            io_s += time.monotonic() - a
            records += k
            nbytes += b
            c, m = emulator.step(k)
            compute_s += c
            comm_s += m
        t_loop = time.monotonic()
        r1, io1 = metrics.rusage_snapshot(), metrics.proc_io()
        polite_barrier(comm)
        t1 = time.monotonic()

        if variant == RAW:
            reader_rows = [{"level": "setup", "phase": "setup", "n": 1, "wall_s": source.setup_s}]
            if is_reader:
                reader_rows.append({"level": "reader", "phase": "read", "n": iters,
                                    "wall_s": source.read_wall, "bytes": source.read_bytes,
                                    "calls": source.read_calls})
        else:
            stats = source.stats() if measure else []
            setup = [r for r in stats if r.get("phase") == "setup"]
            timed = [r for r in stats if r.get("phase") != "setup"
                     and warmup <= int(r.get("batch", 0)) < warmup + iters]
            reader_rows = _aggregate(setup, "setup") + _aggregate(timed, "reader")
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
    ]
    if variant != RAW:
        step_rows.append({"level": "setup", "phase": "construct", "n": 1, "wall_s": setup_s})
    mine = []
    for r in reader_rows + step_rows:
        r = {k: _plain(v) for k, v in r.items()}
        r["rank"] = comm.rank
        r["is_reader"] = is_reader
        r["host"] = socket.gethostname()
        mine.append(r)

    from mpi4py import MPI

    point_wall = comm.allreduce(wall, op=MPI.MAX)
    total_records = comm.allreduce(records)
    total_bytes = comm.allreduce(nbytes)
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0:
        return []

    evict_ok = True
    if cache == "cold":
        evict_ok = bool(resident <= evict_tolerance)
        if not evict_ok:
            msg = (f"COLD CACHE NOT COLD: after evicting {path}, {resident:.1%} of the timed data "
                   f"(file: {file_resident:.1%}) is still in the page cache (tolerance "
                   f"{evict_tolerance:.0%}); the {variant} point measures a partly warm cache. "
                   "Pages a process keeps mapped (an mmap reader's warmup batch, another "
                   "program) cannot be evicted.")
            print(f"lmdbio bench: WARNING: {msg}", file=sys.stderr, flush=True)
            warnings.warn(msg, EvictionWarning, stacklevel=2)
    point = {
        "dataset": str(dataset), "dataset_name": Path(dataset).name if Path(dataset).name != "data.mdb"
        else Path(dataset).parent.name,
        "variant": variant, "nprocs": comm.size, "cache": cache, "batch_size": batch_size,
        "iters": iters, "warmup": warmup, "compute_time": compute_time, "model_bytes": model_bytes,
        "ranks_per_node": ranks_per_node or 0, "readers_per_node": readers_per_node,
        "repeat": repeat,
        "point_wall_s": point_wall, "records": total_records, "record_bytes": total_bytes,
        "resident_fraction": resident, "file_resident_fraction": file_resident,
        "evict_ok": evict_ok, "status": "ok", "error": "",
    }
    rows = []
    for rank_rows in gathered:
        for r in rank_rows:
            rows.append({**r, **point})
    return rows


# --------------------------------------------------------------------------- results


def failed_row(point: dict, error: str, repeat: int = 0) -> dict:
    """The one row that stands for a point that did not finish."""
    row = {k: point.get(k) for k in POINT_KEYS}
    ds = str(point.get("dataset", ""))
    row.update(dataset_name=Path(ds).name, repeat=repeat, status="failed", error=error,
               level="", phase="", rank=-1)
    return row


def summarize(points_df):
    """One row per point x repeat from the tidy rows of points.csv (a DataFrame).

    Columns are :data:`SUMMARY_COLUMNS`. ``speedup_vs_lmdb`` and
    ``fraction_of_limit`` divide a row's ``records_per_s`` by that of the
    ``lmdb`` / ``raw`` run at the same point (same dataset, ranks, cache,
    batch, emulation...) and repeat, or by their mean over repeats where
    that run failed; NaN where there is no reference at all. ``cpu_s_per_gb`` is user+system seconds over the timed loop,
    summed over ranks, per 10^9 record bytes delivered. The breakdown columns
    are means over ranks: ``read_s`` (time inside the reader minus its
    waits), ``compute_s``, ``comm_s``, ``wait_s`` (reader waits + the closing
    barrier); ``au`` = compute_s / wall_s.
    """
    import pandas as pd

    df = points_df.copy()
    if "status" not in df:
        df["status"] = "ok"
    for col in ("ranks_per_node",):
        if col in df:
            df[col] = df[col].fillna(0)
    keys = list(POINT_KEYS) + ["repeat"]
    out = []
    for key, g in df.groupby(keys, sort=False, dropna=False):
        first = g.iloc[0]
        row = dict(zip(keys, key))
        row["dataset_name"] = first.get("dataset_name", Path(str(row["dataset"])).name)
        failed = g[g["status"] != "ok"]
        if len(failed):
            row["status"] = "failed"
            row["error"] = str(failed.iloc[0].get("error", ""))
            out.append(row)
            continue
        wall = float(first["point_wall_s"])
        total = g[(g["level"] == "step") & (g["phase"] == "total")]
        nranks = max(1, len(total))

        def ssum(level, phases):
            m = (g["level"] == level) & g["phase"].isin(phases)
            return float(g.loc[m, "wall_s"].sum())

        reader_wait = ssum("reader", _WAIT_PHASES)
        rec_bytes = float(first["record_bytes"])
        cpu = float((total["user_s"].fillna(0) + total["sys_s"].fillna(0)).sum())
        row.update(
            status="ok", error="", wall_s=wall, records=int(first["records"]),
            record_bytes=int(rec_bytes),
            records_per_s=first["records"] / wall if wall > 0 else math.nan,
            mb_per_s=rec_bytes / wall / 1e6 if wall > 0 else math.nan,
            cpu_s=cpu, cpu_s_per_gb=cpu / (rec_bytes / 1e9) if rec_bytes else math.nan,
            read_s=(ssum("step", ["io"]) - reader_wait) / nranks,
            compute_s=ssum("step", ["compute"]) / nranks,
            comm_s=ssum("step", ["comm"]) / nranks,
            wait_s=(reader_wait + ssum("step", ["barrier"])) / nranks,
            resident_fraction=first.get("resident_fraction", math.nan),
            file_resident_fraction=first.get("file_resident_fraction", math.nan),
            evict_ok=first.get("evict_ok", True),
        )
        row["au"] = row["compute_s"] / wall if wall > 0 else math.nan
        out.append(row)
    summary = pd.DataFrame(out)
    for col in SUMMARY_COLUMNS:
        if col not in summary:
            summary[col] = math.nan if col not in ("status", "error") else ""
    match = [k for k in POINT_KEYS if k != "variant"]
    ok = summary[summary["status"] == "ok"]
    for ref, col in (("lmdb", "speedup_vs_lmdb"), (RAW, "fraction_of_limit")):
        refs = ok[ok["variant"] == ref]
        # Same repeat first: repeats are interleaved in time, so the reference run
        # next to a variant saw the same background load; else the mean over repeats.
        same = refs.groupby(match + ["repeat"], dropna=False)["records_per_s"].mean()
        anyrep = refs.groupby(match, dropna=False)["records_per_s"].mean()
        m1 = summary[match + ["repeat"]].merge(same.rename("_r").reset_index(),
                                               on=match + ["repeat"], how="left")["_r"]
        m2 = summary[match].merge(anyrep.rename("_r").reset_index(), on=match, how="left")["_r"]
        base = m1.fillna(m2).to_numpy()
        summary[col] = summary["records_per_s"].to_numpy() / base
    return summary[list(SUMMARY_COLUMNS)]


def _git_commit() -> str:
    here = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _mpi_version() -> str:
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        return MPI.Get_library_version().strip()
    try:
        out = subprocess.run([sys.executable, "-c",
                              "from mpi4py import MPI; print(MPI.Get_library_version())"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def host_meta() -> dict:
    """Host, cores, memory and software versions for meta.json."""
    import lmdb

    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "lmdb_py": getattr(lmdb, "__version__", "unknown"),
                "lmdb_c": ".".join(map(str, lmdb.version())), "mpi": _mpi_version()}
    try:
        import mpi4py

        versions["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    try:
        import pandas

        versions["pandas"] = pandas.__version__
    except ImportError:
        pass
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "cores": os.cpu_count(), "memory_bytes": mem, "versions": versions,
            "git_commit": _git_commit(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_results(out_dir, rows: Sequence[dict], config: dict) -> dict[str, Path]:
    """Write ``points.csv``, ``summary.csv`` and ``meta.json`` into ``out_dir``.

    Args:
        out_dir: folder (created).
        rows: tidy rows from :func:`run_point` (and :func:`failed_row`).
        config: the sweep's configuration, stored in meta.json.
    Returns:
        The three paths by name (``points``, ``summary``, ``meta``).
    """
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = pd.DataFrame(list(rows))
    lead = ["dataset", "dataset_name", "variant", "nprocs", "cache", "repeat", "rank",
            "is_reader", "level", "phase"]
    if len(points):
        points = points[[c for c in lead if c in points] + [c for c in points if c not in lead]]
        summary = summarize(points)
    else:
        summary = pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    paths = {"points": out / "points.csv", "summary": out / "summary.csv", "meta": out / "meta.json"}
    points.to_csv(paths["points"], index=False)
    summary.to_csv(paths["summary"], index=False)
    meta = host_meta()
    meta["config"] = config
    paths["meta"].write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return paths


def read_summary(out_dir):
    """summary.csv of a results folder as a DataFrame."""
    import pandas as pd

    f = Path(out_dir) / "summary.csv"
    if not f.exists():
        raise FileNotFoundError(f"no summary.csv in {out_dir}; run `lmdbio bench ... --out {out_dir}`")
    return pd.read_csv(f)


def targets(summary):
    """Per (dataset, cache, nprocs): the best LMDBIO variant against the limit, lmdb and raw's CPU.

    Ratios of medians over repeats. Columns: ``best_variant`` (highest
    median records/s among ``lmdbio-*``), ``fraction_of_limit`` and
    ``speedup_vs_lmdb`` (its median records/s over raw's and lmdb's), and
    ``cpu_vs_raw`` (its median CPU s/GB over raw's). These are the quantities of
    issue #6's targets (>= 0.8 of the limit, >= 10x lmdb at P = 16 on
    cifar10 warm, CPU within 1.25x of raw); nothing here asserts them.
    """
    import pandas as pd

    ok = summary[summary["status"] == "ok"]
    keys = ["dataset_name", "cache", "nprocs"]
    med = ok.groupby(keys + ["variant"])[["records_per_s", "cpu_s_per_gb"]].median().reset_index()
    out = []
    for key, g in med.groupby(keys):
        cand = g[g["variant"].str.startswith("lmdbio-")]
        if cand.empty:
            continue
        by = g.set_index("variant")
        ref = lambda v, col: float(by.loc[v, col]) if v in by.index else math.nan  # noqa: E731
        best = cand.loc[cand["records_per_s"].idxmax()]
        out.append({**dict(zip(keys, key)), "best_variant": best["variant"],
                    "records_per_s": best["records_per_s"],
                    "fraction_of_limit": best["records_per_s"] / ref(RAW, "records_per_s"),
                    "speedup_vs_lmdb": best["records_per_s"] / ref("lmdb", "records_per_s"),
                    "cpu_vs_raw": best["cpu_s_per_gb"] / ref(RAW, "cpu_s_per_gb")})
    return pd.DataFrame(out, columns=keys + ["best_variant", "records_per_s", "fraction_of_limit",
                                            "speedup_vs_lmdb", "cpu_vs_raw"])


def format_report(summary) -> str:
    """The summary as fixed-width tables, medians over repeats (failures listed apart)."""
    import pandas as pd

    cols = ["records_per_s", "mb_per_s", "speedup_vs_lmdb", "fraction_of_limit", "cpu_s_per_gb",
            "read_s", "compute_s", "comm_s", "wait_s", "au", "resident_fraction"]
    ok = summary[summary["status"] == "ok"]
    keys = ["dataset_name", "cache", "nprocs", "variant"]
    lines = []
    if len(ok):
        table = ok.groupby(keys, sort=True)[cols].median()
        table.insert(0, "repeats", ok.groupby(keys, sort=True).size())
        best = targets(summary)
        with pd.option_context("display.max_rows", None, "display.width", 250,
                               "display.max_columns", None, "display.float_format", "{:,.3g}".format):
            lines.append("Medians over repeats:")
            lines.append(table.to_string())
            if len(best):
                lines.append("")
                lines.append("Best LMDBIO variant per point (fraction_of_limit vs raw, "
                             "speedup vs lmdb, CPU s/GB vs raw):")
                lines.append(best.to_string(index=False))
    failed = summary[summary["status"] != "ok"]
    for _, r in failed.iterrows():
        err = " | ".join(str(r.get("error", "")).strip().splitlines()[-3:])
        lines.append(f"FAILED {r['dataset_name']} {r['cache']} P={r['nprocs']} {r['variant']} "
                     f"repeat {r['repeat']}: {err}")
    if "evict_ok" in summary:
        bad = summary[(summary["status"] == "ok") & (summary["evict_ok"].astype(str) == "False")]
        if len(bad):
            lines.append(f"WARNING: {len(bad)} cold point(s) started with data still cached "
                         "(evict_ok=False); see resident_fraction")
    return "\n".join(lines) if lines else "(no results)"


# --------------------------------------------------------------------------- sweeps


def make_points(datasets: Sequence[str], variants: Sequence[str], procs: Sequence[int],
                caches: Sequence[str], batch_size: int, iters: int, warmup: int = 1,
                compute_time: float = 0.0, model_bytes: int = 0,
                ranks_per_node: int | None = None, readers_per_node: int = 1,
                baselines: bool = True) -> list[dict]:
    """The points of a sweep; ``raw`` (and ``lmdb`` when ``baselines``) are always added first."""
    order = [RAW] + (["lmdb"] if baselines else []) + [v for v in variants if v not in (RAW, "lmdb")]
    if not baselines and "lmdb" in variants:
        order.insert(1, "lmdb")
    points = []
    for ds in datasets:
        for p in procs:
            for cache in caches:
                for v in order:
                    points.append({"dataset": str(ds), "variant": v, "nprocs": int(p),
                                   "cache": cache, "batch_size": batch_size, "iters": iters,
                                   "warmup": warmup, "compute_time": compute_time,
                                   "model_bytes": model_bytes, "ranks_per_node": ranks_per_node,
                                   "readers_per_node": readers_per_node})
    return points


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_point_subprocess(point: dict, repeat: int, workdir: Path, timeout: float,
                         measure: bool = True, mpiexec_args: Sequence[str] = ()) -> tuple[list[dict], str]:
    """Run one point under ``mpiexec -n P``; returns (rows, stderr). Never raises for a bad point."""
    tag = f"{len(list(workdir.iterdir())):05d}"
    cfg_file = workdir / f"{tag}.config.json"
    res_file = workdir / f"{tag}.rows.json"
    cfg_file.write_text(json.dumps({"point": point, "repeat": repeat, "measure": measure}))
    cmd = [mpiexec(), *mpiexec_args, "-n", str(point["nprocs"]), sys.executable, "-m",
           "lmdbio.bench", "_point", str(cfg_file), str(res_file)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)

    def kill_job():
        # The whole session: mpiexec and every rank it started.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job()
        stdout, stderr = proc.communicate()
        err = f"timeout after {timeout:g} s: {shlex.join(cmd)}\n{_tail(stderr or '')}"
        return [failed_row(point, err, repeat)], stderr or ""
    except BaseException:
        kill_job()  # interrupted sweep: leave no job behind
        raise
    if proc.returncode != 0 or not res_file.exists():
        err = (f"exit status {proc.returncode}: {shlex.join(cmd)}\n"
               f"{_tail((stdout or '') + chr(10) + (stderr or ''))}")
        return [failed_row(point, err, repeat)], stderr or ""
    rows = json.loads(res_file.read_text())["rows"]
    return rows, stderr or ""


def run_sweep(points: Sequence[dict], out_dir, *, repeats: int = 1, timeout: float = 600,
              config: dict | None = None, progress: bool = True, measure: bool = True,
              mpiexec_args: Sequence[str] = ()) -> Any:
    """Run every point ``repeats`` times, each under its own mpiexec, and write the results.

    Repeats are the outer loop so slow drift hits every variant alike. The
    three files are rewritten after each point, so an interrupted sweep
    keeps what it measured. Returns the summary DataFrame.
    """
    from tqdm.auto import tqdm

    config = dict(config or {})
    config.setdefault("points", list(points))
    config.setdefault("repeats", repeats)
    config.setdefault("timeout_s", timeout)
    rows: list[dict] = []
    failed = cold_warm = 0
    total = len(points) * repeats
    with tempfile.TemporaryDirectory(prefix="lmdbio-bench-") as tmp:
        tmp = Path(tmp)
        bar = tqdm(total=total, unit="pt", disable=not progress, dynamic_ncols=True)
        try:
            for rep in range(repeats):
                for pt in points:
                    bar.set_description(f"{Path(pt['dataset']).name} {pt['cache']} "
                                        f"P={pt['nprocs']} {pt['variant']} r{rep}")
                    got, stderr = run_point_subprocess(pt, rep, tmp, timeout, measure, mpiexec_args)
                    if got and got[0].get("status") == "failed":
                        failed += 1
                        bar.write(f"lmdbio bench: point FAILED ({pt['variant']}, P={pt['nprocs']}, "
                                  f"{pt['cache']}): {_tail(got[0]['error'], 3)}", file=sys.stderr)
                    elif got and got[0].get("evict_ok") is False:
                        cold_warm += 1
                        bar.write(f"lmdbio bench: WARNING: eviction did not work for {pt['variant']} "
                                  f"P={pt['nprocs']}: {got[0].get('resident_fraction', float('nan')):.1%} "
                                  "of the timed data was still cached", file=sys.stderr)
                    rows.extend(got)
                    write_results(out_dir, rows, config)
                    bar.update(1)
        finally:
            bar.close()
    if failed:
        print(f"lmdbio bench: {failed} of {total} points failed; see status/error in "
              f"{Path(out_dir) / 'summary.csv'}", file=sys.stderr)
    if cold_warm:
        print(f"lmdbio bench: WARNING: {cold_warm} cold point(s) were not cold (evict_ok=False)",
              file=sys.stderr)
    return read_summary(out_dir)


# --------------------------------------------------------------------------- command line


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _cmd_bench(args) -> int:
    if args.report:
        print(format_report(read_summary(args.report)))
        return 0
    if not args.dataset or not args.out:
        raise ValueError("--dataset and --out are required (or --report DIR to print results)")
    datasets = _csv_list(args.dataset)
    from .format import db_file

    for ds in datasets:
        db_file(ds)  # fail early, with the reason, on a missing dataset
    names = variant_names()
    variants = list(names) if args.variants.strip().lower() == "all" else _csv_list(args.variants)
    unknown = [v for v in variants if v not in names and v != RAW]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; use 'all' or names from "
                         f"{', '.join(names)}")
    try:
        procs = [int(p) for p in _csv_list(args.procs)]
    except ValueError:
        raise ValueError(f"--procs must be integers separated by commas, got {args.procs!r}") from None
    if not procs or min(procs) <= 0:
        raise ValueError(f"--procs must list positive rank counts, got {args.procs!r}")
    bad = [p for p in procs if args.batch_size % p]
    if bad:
        raise ValueError(f"--batch-size {args.batch_size} is not divisible by --procs {bad}; "
                         "each rank gets batch_size / P records")
    caches = _csv_list(args.cache)
    if not caches or any(c not in ("warm", "cold") for c in caches):
        raise ValueError(f"--cache takes warm, cold or warm,cold; got {args.cache!r}")
    if args.iters <= 0 or args.repeats <= 0 or args.warmup < 0:
        raise ValueError("--iters and --repeats must be positive and --warmup >= 0")
    compute = parse_compute_time(args.compute_time)
    model = parse_model_bytes(args.model_bytes)
    points = make_points(datasets, variants, procs, caches, args.batch_size, args.iters,
                         args.warmup, compute, model, args.ranks_per_node, args.readers_per_node,
                         baselines=not args.no_lmdb)
    config = {k: v for k, v in vars(args).items() if k != "func"}
    config["argv"] = sys.argv

    def on_term(signum, frame):
        raise KeyboardInterrupt  # so the running point's mpiexec is killed too

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        pass
    summary = run_sweep(points, args.out, repeats=args.repeats, timeout=args.timeout,
                        config=config, progress=not args.quiet, measure=not args.no_measure,
                        mpiexec_args=shlex.split(args.mpiexec_args or ""))
    print(format_report(summary))
    print(f"results: {args.out}/points.csv, summary.csv, meta.json")
    return 0


def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``lmdbio``'s subparsers."""
    p = subparsers.add_parser(
        "bench", help="sweep variants x process counts x cache states; write tidy results",
        description="Run each point under `mpiexec -n P`, always with the raw-read limit and the "
                    "lmdb baseline, and write points.csv, summary.csv and meta.json to --out.")
    p.add_argument("--dataset", help="LMDB directory (several: comma-separated)")
    p.add_argument("--variants", default="all",
                   help="comma-separated Reader variants or 'all' (default); raw and lmdb are "
                        "always added")
    p.add_argument("--procs", default="1,2,4", help="comma-separated rank counts (default 1,2,4)")
    p.add_argument("--cache", default="warm", help="warm, cold or warm,cold (default warm)")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (default 256)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per point (default 20)")
    p.add_argument("--warmup", type=int, default=1, help="untimed batches first (default 1)")
    p.add_argument("--repeats", type=int, default=1, help="repeats of every point (default 1)")
    p.add_argument("--out", help="results folder")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="virtual nodes of K consecutive ranks (default: real nodes)")
    p.add_argument("--readers-per-node", type=int, default=1, help="readers per node (default 1)")
    p.add_argument("--compute-time", default="0",
                   help="emulated compute in seconds per sample, or alexnet / resnet50 (assumed "
                        "V100-class costs, see lmdbio.emulation)")
    p.add_argument("--model-bytes", default="0",
                   help="gradient bytes allreduced per iteration (e.g. 100MB), or alexnet / resnet50")
    p.add_argument("--timeout", type=float, default=600, help="seconds per point before it is "
                                                              "killed and marked failed (default 600)")
    p.add_argument("--no-lmdb", action="store_true",
                   help="do not add the lmdb baseline (speedup_vs_lmdb is then empty)")
    p.add_argument("--no-measure", action="store_true",
                   help="turn the Reader's per-phase stats off (no read/wait breakdown)")
    p.add_argument("--mpiexec-args", default="", help="extra mpiexec arguments, quoted")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--report", metavar="DIR", help="print the summary of a results folder and exit")
    p.set_defaults(func=_cmd_bench)
    return p


def _point_main(argv: list[str]) -> int:
    """``python -m lmdbio.bench _point CONFIG RESULT``: one point under mpiexec (internal)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cfg_file, res_file = argv
    try:
        cfg = json.loads(Path(cfg_file).read_text())
        pt = cfg["point"]
        rows = run_point(comm, pt["dataset"], pt["variant"], pt["batch_size"], pt["iters"],
                         pt["cache"], pt["compute_time"], pt["model_bytes"], pt["ranks_per_node"],
                         pt["readers_per_node"], pt["warmup"], repeat=cfg["repeat"],
                         measure=cfg.get("measure", True))
    except BaseException:
        # One rank's failure must end the job, not leave the others in a collective.
        sys.stderr.write(f"rank {comm.rank}: " + traceback.format_exc())
        sys.stderr.flush()
        comm.Abort(1)
        return 1
    if comm.rank == 0:
        tmp = Path(res_file + ".tmp")
        tmp.write_text(json.dumps({"rows": rows, "mpi": MPI.Get_library_version().strip()},
                                  default=_plain))
        tmp.replace(res_file)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "_point":
        sys.exit(_point_main(sys.argv[2:]))
    print("usage: python -m lmdbio.bench _point CONFIG RESULT (internal; use `lmdbio bench`)",
          file=sys.stderr)
    sys.exit(2)
