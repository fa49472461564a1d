"""Decoded records/s: lmdbio's read_batch(), with the batch decoder, and DALI (prints only).

    mpiexec -n P python benchmarks/bench_decode.py DB VARIANT ITERS ROUNDS SERIES THREADS

(all optional: /tmp/beyond-cifar, auto, 300, 3, read,batch,protobuf,dali, 1)

Warm: a first pass reads every timed batch. Then ROUNDS rounds, each timing
ITERS batches (global batch 256) of every series in turn, so machine noise
hits all alike; the median round of each is printed. Series (comma-separated,
default all that apply):

- ``read``: ``read_batch()`` only (records in a buffer, not decoded);
- ``batch``: ``read_batch()`` decoded by ``datum.decode_many`` (what
  ``as_datum_array()`` calls): images and labels;
- ``view``: ``read_batch()`` decoded with ``copy=False``: raw Datums of one layout
  that DIO's fetch laid back to back are a read-only view of the batch's buffer
  (the kernel's copy the only one), valid until the second following read_batch();
- ``protobuf``: read_batch() and protobuf per record in a Python loop (the
  decode before the batch decoder), for scale;
- ``dali``: NVIDIA DALI's ``fn.readers.caffe`` on CPU, ``num_shards=P,
  shard_id=rank``, THREADS threads, with ``fn.decoders.image`` when the
  Datums are encoded; outputs as numpy.

For encoded datasets ``batch`` decodes the JPEGs with Pillow in THREADS
threads per rank (default 1), as many as DALI gets.
Wall records/s count all ranks over the slowest rank's time; CPU is per rank
and batch (less sensitive to a loaded machine than the wall).
"""

import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio import datum

db = sys.argv[1] if len(sys.argv) > 1 else "/tmp/beyond-cifar"
variant = sys.argv[2] if len(sys.argv) > 2 else "auto"
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 300
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
series = sys.argv[5].split(",") if len(sys.argv) > 5 else ["read", "batch", "protobuf", "dali"]
threads = int(sys.argv[6]) if len(sys.argv) > 6 else 1
comm = MPI.COMM_WORLD
batch = 256


def protobuf_loop(b):
    """The decode before the batch decoder: protobuf per record, in a Python loop."""
    d = datum.Datum()
    out = None
    for i, v in enumerate(b):
        d.ParseFromString(bytes(v))
        img = datum.decode_image(d)
        if out is None:
            out = np.empty((len(b), *img.shape), np.uint8)
        out[i] = img


def timed(step) -> tuple[float, float]:
    """Records/s over all ranks (slowest rank's wall) and CPU seconds per rank-batch (mean)."""
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        step()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return iters * batch / comm.allreduce(dt, op=MPI.MAX), comm.allreduce(dc) / comm.size / iters


with lmdbio.Reader(db, batch, comm, variant=variant, measure=False) as r:
    steps = {"read": r.read_batch,
             "batch": lambda: datum.decode_many(r.read_batch(), threads=threads),
             "view": lambda: datum.decode_many(r.read_batch(), threads=threads, copy=False),
             "protobuf": lambda: protobuf_loop(r.read_batch())}
    pipe = None
    if "dali" in series:
        from lmdbio.lab.bench.dali import DaliCaffe

        pipe = DaliCaffe(comm, db, batch, threads=threads)
        steps["dali"] = pipe.read_images
    for _ in range(iters):  # warm the page cache, the reader and DALI
        r.read_batch()
        if pipe is not None:
            pipe.read_images()
    results = {s: [] for s in series}
    for _ in range(rounds):
        for s in series:
            results[s].append(timed(steps[s]))
    used = r.variant
if comm.rank == 0:
    med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for s, v in results.items()}
    print(f"{db} P={comm.size} variant={used} B={batch} threads={threads} iters={iters} "
          f"x{rounds}:")
    for s, (rate, cpu) in med.items():
        rel = f", {rate / med['read'][0]:.2f} of read" if "read" in med else ""
        print(f"  {s:9s} {rate:12,.0f} rec/s{rel}; CPU {cpu * 1e6:7.0f} us per rank-batch"
              f"  (rounds: {[round(x[0]) for x in results[s]]})")
