"""Per-batch wall time and CPU of the reader and of the other ranks (prints, never asserts).

    mpiexec -n P python benchmarks/bench_batch_cpu.py VARIANT MEASURE [DB]

MEASURE is 1 or 0 (the Reader's per-phase stats on or off): alternate the
two to see what measuring costs. 20 warm-up batches, then 400 timed.
"""

import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.metrics import rusage_snapshot

variant, measure = sys.argv[1], sys.argv[2] == "1"
db = sys.argv[3] if len(sys.argv) > 3 else "data/datasets/cifar10"
comm = MPI.COMM_WORLD
iters = 400
with lmdbio.Reader(db, 256, comm, variant=variant, measure=measure) as r:
    for _ in range(20):
        r.read_batch()
    comm.Barrier()
    r0, t0 = rusage_snapshot(), time.monotonic()
    for _ in range(iters):
        r.read_batch()
    r1, t1 = rusage_snapshot(), time.monotonic()
    comm.Barrier()
cpu = (r1[0] - r0[0]) + (r1[1] - r0[1])
res = comm.gather((r.is_reader, cpu, r1[2] - r0[2], t1 - t0), root=0)
if comm.rank == 0:
    readers = [x for x in res if x[0]]
    members = [x for x in res if not x[0]]
    line = (f"{variant} P={comm.size} measure={int(measure)} "
            f"wall/batch {max(x[3] for x in res) / iters * 1e6:.0f}us "
            f"reader cpu/batch {sum(x[1] for x in readers) / len(readers) / iters * 1e6:.0f}us")
    if members:
        line += (f" member cpu/batch {sum(x[1] for x in members) / len(members) / iters * 1e6:.0f}us"
                 f" vcsw/batch {sum(x[2] for x in members) / len(members) / iters:.2f}")
    print(line)
