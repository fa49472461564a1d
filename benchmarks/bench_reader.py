"""Throughput of Reader variants on one communicator (prints, never asserts).

    mpiexec -n P python benchmarks/bench_reader.py DB --batch-size 256 --iters 100 \
        --variants lmdb,lmdbio-lmm-dio [--no-measure] [--ranks-per-node K]

Warm cache; one warm-up batch; wall time between two barriers.
"""

import argparse

from mpi4py import MPI

import lmdbio

p = argparse.ArgumentParser()
p.add_argument("db")
p.add_argument("--batch-size", type=int, default=256)
p.add_argument("--iters", type=int, default=100)
p.add_argument("--variants", default=",".join(lmdbio.VARIANTS))
p.add_argument("--ranks-per-node", type=int, default=None)
p.add_argument("--readers-per-node", type=int, default=1)
p.add_argument("--no-measure", action="store_true")
p.add_argument("--repeats", type=int, default=1)
a = p.parse_args()
comm = MPI.COMM_WORLD
for _rep in range(a.repeats):
    for v in a.variants.split(","):
        with lmdbio.Reader(a.db, a.batch_size, comm, variant=v, ranks_per_node=a.ranks_per_node,
                           readers_per_node=a.readers_per_node,
                           measure=not a.no_measure) as r:
            r.read_batch()
            comm.Barrier()
            t0 = MPI.Wtime()
            nb = 0
            for _ in range(a.iters):
                nb += r.read_batch().nbytes
            comm.Barrier()
            dt = MPI.Wtime() - t0
        tot = comm.reduce(nb, root=0)
        if comm.rank == 0:
            print(f"{v:32s} P={comm.size:2d} {a.iters * a.batch_size / dt:10.0f} rec/s "
                  f"{tot / dt / 1e6:8.1f} MB/s", flush=True)
