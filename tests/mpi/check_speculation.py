"""Under mpiexec: DM's speculative reads are issued and mostly cover what the walk touches.

usage: check_speculation.py DB BATCHES
Evicts the file (cold), reads BATCHES batches with lmdbio-lmm-dm, one reader
per rank (ranks_per_node=1, so P readers pass the cursor around the ring),
and prints one JSON line at rank 0 with every reader's speculated bytes and
pages, and its touched, missed and extra pages.
"""

import json
import os
import sys

from mpi4py import MPI

import lmdbio
from lmdbio.metrics import evict

db, batches = sys.argv[1], int(sys.argv[2])
comm = MPI.COMM_WORLD
if comm.rank == 0:
    evict(os.path.join(db, "data.mdb"))
comm.Barrier()
with lmdbio.Reader(db, 16 * comm.size, comm, variant="lmdbio-lmm-dm", ranks_per_node=1) as r:
    for _ in range(batches):
        r.read_batch()
    rows = r.stats()
spec = [x for x in rows if x["phase"] == "speculate"]
scored = [x for x in rows if x["phase"] == "read" and "missed_pages" in x]
psize = r.meta.psize
mine = {"speculated_bytes": sum(x.get("bytes", 0) for x in spec),
        "speculated_pages": sum(x.get("pages", 0) for x in spec),
        "missed_pages": sum(x["missed_pages"] for x in scored),
        "extra_pages": sum(x["extra_pages"] for x in scored),
        "touched_pages": sum(-(-x["bytes"] // psize) for x in scored),
        "scored_batches": len(scored)}
everyone = comm.gather(mine, root=0)
if comm.rank == 0:
    print(json.dumps(everyone), flush=True)
