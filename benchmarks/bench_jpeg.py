"""JPEG Datums decoded: lmdbio's batch decoder against NVIDIA DALI's CPU pipeline (prints only).

    mpiexec -n P python benchmarks/bench_jpeg.py DB [ITERS] [REPEATS] [THREADS] [LAYOUT]

(defaults: ITERS 20 batches per timed block, REPEATS 3, THREADS 1,2, LAYOUT HWC; global
batch 256)

Series, for each thread count T:

- ``lmdbio``: ``Reader.read_batch()`` then ``datum.decode_many(batch, threads=T,
  layout=LAYOUT)``: a new ``(n, h, w, 3)`` (``CHW``: ``(n, 3, h, w)``) uint8 array and the
  labels per batch; HWC is DALI's layout, so both hand out the same arrays; the JPEG
  decoder used (:func:`lmdbio.images.fast_decoder`: simplejpeg, else Pillow) is printed;
- ``dali``: ``fn.readers.caffe`` (``num_shards=P, shard_id=rank``) then
  ``fn.decoders.image(device="cpu")``, ``num_threads=T``, outputs copied to numpy
  (``as_array()``: a new ``(n, h, w, 3)`` array per batch). Its
  ``prefetch_queue_depth`` is 1, so it computes nothing ahead while lmdbio's block is
  timed (its default, 2, keeps one batch in flight: free work at each block's start,
  CPU taken from the block before).

Warm: every series runs ITERS batches first. Each repeat then times ITERS batches of every
series, thread counts and series interleaved, the series order reversed every other
repeat. Printed per series: images/s over all ranks (the slowest rank's wall), median
[min-max] over repeats; CPU us per image (process time, every thread, summed over ranks);
and lmdbio / dali within each repeat, median [min-max]. The machine may be shared: the
load average is printed before and after.
"""

import os
import statistics
import sys
import time
from importlib.metadata import version

from mpi4py import MPI

import lmdbio
from lmdbio import datum, images
from lmdbio.errors import ConfigurationError
from lmdbio.lab.bench.dali import DaliCaffe

db = sys.argv[1]
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
thread_counts = [int(t) for t in (sys.argv[4] if len(sys.argv) > 4 else "1,2").split(",")]
layout = sys.argv[5] if len(sys.argv) > 5 else "HWC"
comm = MPI.COMM_WORLD
batch = 256


def timed(step) -> tuple[float, float]:
    """(images/s over all ranks by the slowest rank's wall, CPU us per image over all ranks)."""
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for _ in range(iters):
        n += step()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    total = comm.allreduce(n)
    return total / comm.allreduce(dt, op=MPI.MAX), comm.allreduce(dc) / total * 1e6


def median_range(xs, fmt="{:,.0f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


no_dali = ""
with lmdbio.Reader(db, batch, comm, variant="auto", measure=False) as reader:
    steps = {}
    for t in thread_counts:
        steps[("lmdbio", t)] = lambda t=t: len(
            datum.decode_many(reader.read_batch(), threads=t, layout=layout)[1])
        try:
            pipe = DaliCaffe(comm, db, batch, threads=t, prefetch=1)
        except ConfigurationError as exc:  # no DALI here: lmdbio's series alone
            no_dali = str(exc)
            continue
        steps[("dali", t)] = lambda pipe=pipe: len(pipe.read_images()[1])
    load0 = os.getloadavg()
    for step in steps.values():  # warm: page cache, reader, pools, DALI's buffers
        for _ in range(iters):
            step()
    results = {key: [] for key in steps}
    for rep in range(repeats):
        for t in thread_counts:
            order = ("lmdbio", "dali") if rep % 2 == 0 else ("dali", "lmdbio")
            for series in order:
                if (series, t) in steps:
                    results[(series, t)].append(timed(steps[(series, t)]))
    load1 = os.getloadavg()
    used = reader.variant

if comm.rank == 0:
    decoder = "Pillow (no simplejpeg)" if images.fast_decoder() is None else \
        f"simplejpeg {version('simplejpeg')}"
    print(f"{db} P={comm.size} variant={used} B={batch} iters={iters} x{repeats} repeats, "
          f"lmdbio layout {layout}, JPEGs by {decoder}; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after, {os.cpu_count()} CPUs")
    if no_dali:
        print(f"  DALI not measured: {no_dali}")
    for t in thread_counts:
        for series in ("lmdbio", "dali"):
            rows = results.get((series, t))
            if not rows:
                continue
            print(f"  threads={t} {series:7s} {median_range([r[0] for r in rows])} img/s; "
                  f"CPU {median_range([r[1] for r in rows])} us/img")
        if ("dali", t) in results:
            ratios = [a[0] / b[0] for a, b in zip(results[("lmdbio", t)], results[("dali", t)])]
            print(f"  threads={t} lmdbio/dali {median_range(ratios, '{:.2f}')}")
