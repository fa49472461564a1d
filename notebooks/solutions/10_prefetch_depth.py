# nprocs: 4
"""Exercise 10: vary the prefetch depth. Does the thread read during the compute, and does it pay?

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/10_prefetch_depth.py

Each rank is its own (virtual) node and reads with the full stack, one
batch per request (``coalesce_bytes=1``: COAL's 4 MiB would read all 16
batches at once), cold (the file is evicted before every run), while
"computing" on each batch (a sleep of COMPUTE_S). With ``prefetch=d`` a
thread reads batches t+1..t+d of the epoch during the compute. The table gives the wall
time, the time each rank waited for its next batch, and how many reads
started before the caller asked for their batch (read during the compute).
On this machine's fast local disk a read is short, so the waiting is mostly
the hand-off and STAG's turns, and reading ahead changes the wall time
little; on slow shared storage the same overlap hides whole reads.
"""

import time

import pandas as pd
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.pagecache import evict

comm = MPI.COMM_WORLD
path = comm.bcast(str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None, root=0)
comm.Barrier()

BATCHES, B, COMPUTE_S = 16, 128, 0.01
table = []
for depth in (0, 1, 2, 4):
    if comm.rank == 0:
        evict(f"{path}/data.mdb")
    comm.Barrier()
    with lmdbio.Reader(path, B, comm=comm, variant="lmdbio-lmm-dio-prov-coal-stag", ranks_per_node=1,
                       coalesce_bytes=1, prefetch=depth) as reader:
        wait, asked = 0.0, []
        t0 = time.monotonic()
        batches = reader.epoch(0)   # prefetch reads ahead within an epoch
        for t in range(BATCHES):
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
    table.append(dict(depth=depth, wall_ms=round(1e3 * wall, 1), wait_ms_per_rank=round(1e3 * wait, 1),
                      compute_ms=round(1e3 * BATCHES * COMPUTE_S, 1),
                      read_during_compute=f"{ahead} of {comm.size * (BATCHES - 1)}"))

if comm.rank == 0:
    t = pd.DataFrame(table).set_index("depth")
    print(t.to_string())
    ahead = {d: int(s.split()[0]) for d, s in t["read_during_compute"].items()}
    total = comm.size * (BATCHES - 1)
    assert ahead[0] == 0, "without prefetch a batch is read only when the caller asks for it"
    assert all(ahead[d] >= total // 2 for d in (1, 2, 4)), \
        "with prefetch most batches are read during the compute, before the caller asks"
    print("With prefetch the thread reads during the compute; whether that shortens the wall time "
          "depends on how long a read is against the compute and on a free core.")
