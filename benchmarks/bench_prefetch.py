"""The I/O share of a training iteration with and without prefetch (prints only, no asserts).

    mpiexec -n P python benchmarks/bench_prefetch.py DB [VARIANTS] [PER_RANK] [DEPTHS] [COAL]

(defaults: lmdbio-direct,lmdb-get; 64 records per rank; depths 0,2; COAL's default
request size. Prefetch reads whole chunks: with COAL's k batches per chunk, a depth
below k hides only part of each chunk's read, so COAL=1 (k = 1) is the cleaner test.)

Per variant, cold (``posix_fadvise(DONTNEED)`` on data.mdb before each timed epoch, after
an untimed first epoch):

1. an epoch with no compute measures the I/O time of the median batch, ``io``;
2. epochs with emulated compute of ``c = 1.5 * io`` per batch, for each depth d:
   ``sleep`` (releases the GIL, as a GPU step does) and ``busy`` (a pure-Python
   loop of the same length: holds the GIL, the worst case for a thread).

Printed: wall per batch, the caller's wait in ``next()`` per batch, and the
I/O share of the iteration (wait / wall). With d = 0 the share is about
io / (io + c); a background thread that overlaps the reads brings it towards
0. The busy series says whether the reads run while Python holds the GIL
(preadv, memcpy release it; a per-record Python copy does not), which is
what decides a thread against a dedicated I/O rank.
"""

import statistics
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.format import db_file
from lmdbio.lab.pagecache import evict


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i * i


def run_epoch(r, e, compute, how, cold):
    """(wall, wait, batches, median wait) of epoch ``e`` after an untimed epoch 0 (the first
    epoch builds the locator's table of every record); wait: seconds the caller spent in
    next()."""
    for _ in r.epoch(0):
        pass
    cold()
    waits = []
    it = r.epoch(e)
    t_start = time.perf_counter()
    n = 0
    while True:
        t0 = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t0)
        n += 1
        if compute:
            (time.sleep if how == "sleep" else busy)(compute)
    return time.perf_counter() - t_start, sum(waits), n, statistics.median(waits)


def main():
    comm = MPI.COMM_WORLD
    db = sys.argv[1]
    variants = (sys.argv[2] if len(sys.argv) > 2 else "lmdbio-direct,lmdb-get").split(",")
    per_rank = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    depths = [int(d) for d in (sys.argv[4] if len(sys.argv) > 4 else "0,2").split(",")]
    coal = int(sys.argv[5]) if len(sys.argv) > 5 else None
    B = per_rank * comm.size
    f = db_file(db)

    def cold():
        if comm.rank == 0:
            evict(f)
        comm.Barrier()

    if comm.rank == 0:
        print(f"# {db}: P = {comm.size}, B = {B}, cold epochs (evicted before each), "
              f"MPI thread level {MPI.Query_thread()}")
        print(f"{'variant':<15} {'d':>2} {'compute':>8} {'io ms':>7} {'c ms':>6} "
              f"{'wall ms':>8} {'wait ms':>8} {'I/O share':>9}")
    for variant in variants:
        with lmdbio.Reader(db, B, comm, variant=variant, prefetch=0, coalesce_bytes=coal) as r:
            k = r.coalesce
            _, _, _, med = run_epoch(r, 1, 0.0, "sleep", cold)
        io = comm.allreduce(med, op=MPI.MAX)   # the median batch: robust to a busy machine
        c = 1.5 * io
        for how in ("sleep", "busy"):
            for d in depths:
                with lmdbio.Reader(db, B, comm, variant=variant, prefetch=d,
                                   coalesce_bytes=coal) as r:
                    wall, wait, n, _ = run_epoch(r, 1, c, how, cold)
                walls = comm.gather(wall / n, root=0)
                waits = comm.gather(wait / n, root=0)
                if comm.rank == 0:
                    w, q = max(walls), statistics.mean(waits)
                    name = f"{variant} k={k}"
                    print(f"{name:<15} {d:>2} {how:>8} {io * 1e3:>7.2f} {c * 1e3:>6.2f} "
                          f"{w * 1e3:>8.2f} {q * 1e3:>8.2f} {q / w:>9.3f}")


if __name__ == "__main__":
    main()
