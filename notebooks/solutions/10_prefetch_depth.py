# nprocs: 4
# run: 4 --depth 2 --compute 0,0.01,0.04
"""Exercise 10: vary the prefetch depth, or the compute. Does the thread read during the compute, and does it pay?

Usage, from the repository root: mpiexec -n N .venv/bin/python notebooks/solutions/10_prefetch_depth.py [--depth 0,1,2,4] [--compute 0.01]
Each option takes one value or a comma-separated list; at most one of the two may list several.
Part 1: mpiexec -n 4 .venv/bin/python notebooks/solutions/10_prefetch_depth.py
Part 2: mpiexec -n 4 .venv/bin/python notebooks/solutions/10_prefetch_depth.py --depth 2 --compute 0,0.01,0.04

Each rank is its own (virtual) node and reads with the full stack, one
batch per request (``coalesce_bytes=1``: COAL's 4 MiB would read all 16
batches at once), cold (the file is evicted before every run), while
"computing" on each batch (a sleep of COMPUTE_S seconds, ``--compute``). With ``prefetch=d`` a
thread reads batches t+1..t+d of the epoch during the compute. The table gives the wall
time, the time each rank waited for its next batch, and how many reads
started before the caller asked for their batch (read during the compute).
On this machine's fast local disk a read is short, so the waiting is mostly
the hand-off and STAG's turns, and reading ahead changes the wall time
little; on slow shared storage the same overlap hides whole reads.
"""

import argparse
import time

import pandas as pd
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.pagecache import evict

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description="Read with prefetch while computing; vary the depth or the compute.")
parser.add_argument("--depth", default="0,1,2,4", help="prefetch depths, comma-separated (default 0,1,2,4)")
parser.add_argument("--compute", default="0.01", help="COMPUTE_S, seconds per batch, comma-separated (default 0.01)")
args = parser.parse_args()
DEPTHS = [int(d) for d in args.depth.split(",")]
COMPUTES = [float(c) for c in args.compute.split(",")]
if len(DEPTHS) > 1 and len(COMPUTES) > 1:
    parser.error("vary the depth or the compute, not both")
VARIED = "compute_s" if len(COMPUTES) > 1 else "depth"
path = comm.bcast(str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None, root=0)
comm.Barrier()

BATCHES, B = 16, 128
table = []
for depth, COMPUTE_S in [(d, c) for d in DEPTHS for c in COMPUTES]:
    if comm.rank == 0:
        evict(f"{path}/data.mdb")
    comm.Barrier()
    with lmdbio.Reader(path, B, comm=comm, variant="lmdbio-lmm-dio-prov-coal-stag", ranks_per_node=1,
                       coalesce_bytes=1, prefetch=depth) as reader:
        wait, asked = 0.0, []
        t0 = time.monotonic()
        batches = reader.epoch(0)   # prefetch reads ahead within an epoch
        for _ in range(BATCHES):
            a = time.monotonic()
            asked.append(a)
            next(batches)
            wait += time.monotonic() - a
            time.sleep(COMPUTE_S)   # the model's compute on this batch
        batches.close()   # every rank leaves the epoch at the same batch
        wall = time.monotonic() - t0
        reads = {r["batch"]: r["t_start"] for r in reader.stats() if r["phase"] == "read"}
    # batches 1.. (batch 0 is asked for before anything can be read ahead)
    ahead = sum(1 for t in range(1, BATCHES) if t in reads and reads[t] < asked[t])
    wait, wall, ahead = comm.allreduce(wait) / comm.size, comm.allreduce(wall, op=MPI.MAX), comm.allreduce(ahead)
    table.append(dict(depth=depth, compute_s=COMPUTE_S, wall_ms=round(1e3 * wall, 1), wait_ms_per_rank=round(1e3 * wait, 1),
                      compute_ms=round(1e3 * BATCHES * COMPUTE_S, 1),
                      read_during_compute=f"{ahead} of {comm.size * (BATCHES - 1)}"))

if comm.rank == 0:
    t = pd.DataFrame(table)
    print(t.set_index(VARIED).to_string())
    t["ahead"] = [int(s.split()[0]) for s in t["read_during_compute"]]
    total = comm.size * (BATCHES - 1)
    assert (t.loc[t["depth"] == 0, "ahead"] == 0).all(), \
        "without prefetch a batch is read only when the caller asks for it"
    assert (t.loc[(t["depth"] >= 1) & (t["compute_s"] >= 0.01), "ahead"] >= total // 2).all(), \
        "with prefetch and 10 ms or more of compute most batches are read during the compute, before the caller asks"
    assert (t["wait_ms_per_rank"] <= t["wall_ms"]).all(), "a rank waits within the wall time"
    if VARIED == "depth":
        print("With prefetch the thread reads during the compute; whether that shortens the wall time "
              "depends on how long a read is against the compute and on a free core.")
    else:
        print("The longer the compute, the more of the reads fall inside it; with no compute the caller asks "
              "for each batch as soon as it has the last, and the thread has little time to read ahead.")
