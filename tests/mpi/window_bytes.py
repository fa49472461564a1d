"""Under mpiexec: bytes each node reader reads in a shuffled epoch, per shuffle mode.

usage: window_bytes.py DB RANKS_PER_NODE VARIANT [PARTITIONS]
For file order, shuffle="window", "shard" and "elastic" (over PARTITIONS canonical partitions,
default lmdbio.shuffle.DEFAULT_PARTITIONS; the same chunks and windows), every
rank reads epoch 1 (epoch 0 first, untimed: it builds the locator's tables) and rank 0
prints one line per mode: ``MODE reader_bytes=[...] calls=[...] records=N``, the bytes
and preadv calls of each reader's ``read`` phases in epoch 1 (the pipeline's counters)
and the records delivered. Exit 1 if an epoch misses or repeats a record.
"""

import sys

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.shuffle import DEFAULT_PARTITIONS

db, rpn, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
partitions = int(sys.argv[4]) if len(sys.argv) > 4 else DEFAULT_PARTITIONS
comm = MPI.COMM_WORLD
B = 8 * comm.size
# 64-record chunks, 32 per window: a window is 2,048 records (~8 MB of overflow pages).
SETTINGS = dict(seed=7, shuffle_block=64, shuffle_window=32, shuffle_partitions=partitions,
                coalesce_bytes=1 << 19)
bad = 0
for mode in (False, "window", "shard", "elastic"):
    with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn, build_provenance=True,
                       shuffle=mode, **SETTINGS) as r:
        for _ in r.epoch(0):
            pass
        before = len([x for x in r.stats() if x["phase"] == "read"])
        idx = [b.indices.copy() for b in r.epoch(1)]
        reads = [x for x in r.stats() if x["phase"] == "read"][before:]
        mine = (r.is_reader, sum(x["bytes"] for x in reads), sum(x["calls"] for x in reads))
    got = comm.gather(np.concatenate(idx), root=0)
    everyone = comm.gather(mine, root=0)
    if comm.rank == 0:
        flat = np.sort(np.concatenate(got))
        n = len(flat)
        if not np.array_equal(flat, np.arange(n)):
            bad += 1
            print(f"{mode}: the epoch does not deliver every record once")
        readers = [(b, c) for is_reader, b, c in everyone if is_reader]
        print(f"{mode or 'file'} reader_bytes={[b for b, _ in readers]} "
              f"calls={[c for _, c in readers]} records={n}", flush=True)
sys.exit(1 if comm.bcast(bad, root=0) else 0)
