"""Where a rank-batch's time goes: microseconds per rank-batch for each step (prints, writes a CSV).

    mpiexec -n P python benchmarks/bench_batch_steps.py DB [--variants auto,raw] [--iters 200]
        [--warmup 20] [--repeats 3] [--batch 256] [--out steps.csv]

Variants are timed in turn within each repeat (the order reversed every other repeat), each
from a fresh source, on a warm page cache (rank 0 reads the file once first). Steps:

- ``auto`` (and any Reader variant): the Reader's own phases (``measure=True``;
  :class:`lmdbio.metrics.PhaseRecorder`, about 3 us of its own per phase) grouped as
  ``plan/locate`` (locate, speculate), ``fetch`` (read, gather: the syscalls and copies
  into the batch buffer), ``hand-off`` (distribute, wait, ring_wait, stagger_wait);
  ``batch object`` (one ``Batch(...)`` made from the batch's arrays, timed apart);
  ``python overhead``: ``read_batch()``'s wall less its phases and the batch object, split
  into ``python per chunk`` (in the calls that locate and fetch a chunk: its bookkeeping,
  the recorder's own clock reads, a cold cache after the fetch) and ``python per batch``
  (the other calls); ``decode`` (``as_datum_array()``) and ``decode view``
  (``as_datum_array(copy=False)``), timed after each ``read_batch()``, outside it;
  ``total unmeasured``: the same reads on a Reader built with ``measure=False``, back to
  back as raw's (no decode between), the total to hold against raw's; ``total cpu`` and
  ``total unmeasured cpu``: the calling thread's CPU in the same loops (a rank's cost to
  its core: with 16 ranks on 2 cores the wall times hold the other ranks' turns too).
- ``raw`` (the limit, :class:`lmdbio.lab.bench.limit.RawReader`): ``fetch`` (its
  ``preadv`` calls, a coalesced chunk's read spread over its batches), ``python
  overhead`` (the rest of its ``read_batch()``) and ``total cpu``; no locating, hand-off
  or Batch (its extents are planned before the timed loop).

Each value is the mean over the timed batches of a rank, then the mean over ranks; the
printed table gives the median over repeats, [min-max]. The CSV has one row per (variant,
repeat, rank, step). A benchmark: it asserts nothing about time.
"""

import argparse
import os
import socket
import statistics
import time

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.batch import Batch
from lmdbio.format import db_file

GROUPS = {"locate": "plan/locate", "speculate": "plan/locate", "read": "fetch",
          "gather": "fetch", "distribute": "hand-off", "wait": "hand-off",
          "ring_wait": "hand-off", "stagger_wait": "hand-off"}
ORDER = ["plan/locate", "fetch", "hand-off", "batch object", "python overhead", "total",
         "python per chunk", "python per batch", "total unmeasured", "decode", "decode view",
         "total cpu", "total unmeasured cpu"]
#: Steps that are not a part of ``total``'s sum.
APART = ("total", "python per chunk", "python per batch", "total unmeasured", "decode",
         "decode view", "total cpu", "total unmeasured cpu")


def warm(comm, path) -> None:
    """Rank 0 reads the file once, so every variant reads it from the page cache."""
    if comm.rank == 0:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass
    comm.Barrier()


def time_reader(comm, db, variant, batch, iters, warmup) -> dict:
    """Mean us per rank-batch of each step of one Reader variant, on this rank."""
    steps = dict.fromkeys(ORDER, 0.0)
    with lmdbio.Reader(db, batch, comm, variant=variant, measure=True) as r:
        for _ in range(warmup):
            r.read_batch().as_datum_array()
        r.rec.clear()
        first = None
        fills = 0   # calls that located and fetched a chunk (batch t = warmup + i)
        comm.Barrier()
        for i in range(iters):
            c0, t0 = time.thread_time(), time.perf_counter()
            b = r.read_batch()
            t1, c1 = time.perf_counter(), time.thread_time()
            steps["total cpu"] += c1 - c0
            b.as_datum_array()
            t2 = time.perf_counter()
            b.as_datum_array(copy=False)
            t3 = time.perf_counter()
            steps["total"] += t1 - t0
            if (warmup + i) % r.coalesce == 0:
                steps["python per chunk"] += t1 - t0
                fills += 1
            steps["decode"] += t2 - t1
            steps["decode view"] += t3 - t2
            first = first or b
        for row in r.rec.rows:
            if row["batch"] >= 0:
                group = GROUPS.get(row["phase"], row["phase"])
                steps[group] = steps.get(group, 0.0) + row["wall_s"]
        reps = 2000
        t0 = time.perf_counter()
        for _ in range(reps):
            Batch(first.buffer, first.offsets, first.sizes, first.indices)
        one = (time.perf_counter() - t0) / reps
        steps["batch object"] = one * iters
    phases = sum(v for k, v in steps.items() if k not in APART)
    steps["python overhead"] = steps["total"] - phases
    # Every phase runs in the calls that fill a chunk; the other calls are Python only.
    steps["python per batch"] = steps["total"] - steps["python per chunk"] - (iters - fills) * one
    steps["python per chunk"] = steps["python overhead"] - steps["python per batch"]
    steps["total unmeasured"], steps["total unmeasured cpu"] = time_unmeasured(
        comm, db, variant, batch, iters, warmup)
    return {k: v / iters * 1e6 for k, v in steps.items()}


def back_to_back(comm, read, warmup: int, iters: int) -> tuple[float, float]:
    """``warmup`` untimed calls of ``read``, then the seconds and this thread's CPU seconds of
    ``iters`` back-to-back calls, started together on every rank."""
    for _ in range(warmup):
        read()
    comm.Barrier()
    c0, t0 = time.thread_time(), time.perf_counter()
    for _ in range(iters):
        read()
    return time.perf_counter() - t0, time.thread_time() - c0


def time_unmeasured(comm, db, variant, batch, iters, warmup) -> tuple[float, float]:
    """Seconds and this thread's CPU seconds of ``iters`` back-to-back ``read_batch()`` calls
    with ``measure=False``."""
    with lmdbio.Reader(db, batch, comm, variant=variant, measure=False) as r:
        return back_to_back(comm, r.read_batch, warmup, iters)


def time_raw(comm, path, batch, iters, warmup) -> dict:
    """Mean us per rank-batch of the raw limit's steps, on this rank."""
    from lmdbio.lab.bench.limit import RawReader
    from lmdbio.recordindex import build_index

    ix = build_index(path) if comm.rank == 0 else None
    offsets = comm.bcast(ix.offsets if ix is not None else None, root=0)
    sizes = comm.bcast(ix.sizes if ix is not None else None, root=0)
    with RawReader(comm, path, batch, offsets, sizes, iters, warmup=warmup) as r:
        first = -(-warmup // r.coalesce) * r.coalesce  # timing starts on a chunk boundary
        total, cpu = back_to_back(comm, r.read_batch, first, iters)
        fetch = sum(row["wall_s"] for row in r.stats()
                    if row["phase"] == "read" and first <= row["batch"] < first + iters)
    return {"fetch": fetch / iters * 1e6, "python overhead": (total - fetch) / iters * 1e6,
            "total": total / iters * 1e6, "total cpu": cpu / iters * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--variants", default="auto,raw")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--out", default=None, help="CSV of every (variant, repeat, rank, step)")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    path = db_file(a.db)
    warm(comm, path)
    variants = a.variants.split(",")
    rows = []
    for rep in range(a.repeats):
        for v in (variants if rep % 2 == 0 else variants[::-1]):
            got = time_raw(comm, path, a.batch, a.iters, a.warmup) if v == "raw" else \
                time_reader(comm, a.db, v, a.batch, a.iters, a.warmup)
            rows += [{"variant": v, "nprocs": comm.size, "repeat": rep, "rank": comm.rank,
                      "step": k, "us_per_batch": x} for k, x in got.items()]
    rows = [r for part in comm.gather(rows) or [] for r in part]
    if comm.rank == 0:
        report(rows, a, comm.size)


def report(rows: list[dict], a, nprocs: int) -> None:
    import pandas as pd

    df = pd.DataFrame(rows)
    df["batch_size"], df["iters"], df["host"] = a.batch, a.iters, socket.gethostname()
    df["cpus"], df["load1"] = os.cpu_count(), os.getloadavg()[0]
    if a.out:
        df.to_csv(a.out, index=False)
    per_rep = df.groupby(["variant", "step", "repeat"])["us_per_batch"].mean()
    print(f"{a.db} P={nprocs} B={a.batch} iters={a.iters} x{a.repeats}: us per rank-batch, "
          f"median [min-max] over repeats of the mean over ranks; load {os.getloadavg()[0]:.2f}")
    steps = [s for s in ORDER if s in set(df["step"])] + \
        sorted(set(df["step"]) - set(ORDER))
    for v in dict.fromkeys(df["variant"]):
        for s in steps:
            if (v, s) in per_rep.index.droplevel(2):
                xs = per_rep.loc[(v, s)].tolist()
                print(f"  {v:6s} {s:20s} {statistics.median(xs):9.1f} "
                      f"[{min(xs):.1f}-{max(xs):.1f}]")
    totals = {v: statistics.median(per_rep.loc[(v, "total")].tolist())
              for v in dict.fromkeys(df["variant"]) if (v, "total") in per_rep.index.droplevel(2)}
    bare = {v: statistics.median(per_rep.loc[(v, "total unmeasured")].tolist())
            for v in totals if (v, "total unmeasured") in per_rep.index.droplevel(2)}
    have = set(per_rep.index.droplevel(2))
    # CPU per rank-batch: what a rank costs its core however many ranks share one.
    cpu = {v: statistics.median(per_rep.loc[(v, s)].tolist()) for v in totals
           for s in ["total cpu" if v == "raw" else "total unmeasured cpu"] if (v, s) in have}
    if "raw" in totals:
        for v, t in totals.items():
            if v != "raw":
                print(f"  {v} / raw (read_batch time): {totals['raw'] / t:.2f}"
                      + (f"; measure=False: {totals['raw'] / bare[v]:.2f}" if v in bare else ""))
                if "raw" in cpu and v in cpu:
                    print(f"  {v} / raw (read_batch CPU per rank-batch, measure=False): "
                          f"{cpu['raw'] / cpu[v]:.2f}")


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
