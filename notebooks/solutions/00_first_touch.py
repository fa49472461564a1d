# nprocs: 4
"""Exercise 00: what the shared-window copy of notebook 00 measures.

Each rank copies its neighbour's 1 MiB slice of one MPI-3 shared window three times:
(1) cold, as notebook 00 does (the neighbour's pages not yet mapped in this process, a fresh
destination), (2) again into a fresh destination, (3) again into a destination used before.
It counts the minor page faults of each copy (getrusage) and prints the rate.
Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/00_first_touch.py
"""

import resource
import sys
import time

import numpy as np
from mpi4py import MPI


def _abort(*exc):   # a failed check on one rank ends every rank (no peer left waiting)
    sys.__excepthook__(*exc)
    MPI.COMM_WORLD.Abort(1)


sys.excepthook = _abort

NBYTES = 1 << 20
PAGE = resource.getpagesize()

comm = MPI.COMM_WORLD
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
rank, size = node.Get_rank(), node.Get_size()
win = MPI.Win.Allocate_shared(NBYTES * size if rank == 0 else 0, 1, comm=node)
buf, _ = win.Shared_query(0)
whole = np.frombuffer(buf, dtype=np.uint8, count=NBYTES * size)
whole[rank * NBYTES:(rank + 1) * NBYTES] = rank + 1     # each rank writes (and maps) its own slice
node.Barrier()
nxt = (rank + 1) % size
src = whole[nxt * NBYTES:(nxt + 1) * NBYTES]


def timed(copy):
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    out = copy()
    dt, f1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert out[0] == nxt + 1 and out[-1] == nxt + 1
    return NBYTES / dt / 1e9, f1 - f0


dest = np.empty(NBYTES, np.uint8)
dest[:] = 0                                             # the reused destination, mapped now
rows = {"cold (notebook 00)": timed(src.copy),          # neighbour's pages and destination first touched
        "warm source, fresh destination": timed(src.copy),
        "warm source, reused destination": timed(lambda: (np.copyto(dest, src), dest)[1])}
all_rows = node.gather(rows, root=0)
if rank == 0:
    print(f"{'copy of a neighbour slice (1 MiB)':34s} {'GB/s (median)':>14s} {'minor faults (median)':>22s}")
    med = {}
    for k in rows:
        gbps = float(np.median([r[k][0] for r in all_rows]))
        faults = float(np.median([r[k][1] for r in all_rows]))
        med[k] = (gbps, faults)
        print(f"{k:34s} {gbps:14.1f} {faults:22.0f}")
    cold, warm = med["cold (notebook 00)"], med["warm source, reused destination"]
    print(f"pages in the slice: {NBYTES // PAGE}; warm/cold rate: {warm[0] / cold[0]:.1f}x")
    # The cold copy pays about a page fault per page (most for the fresh destination's zero-filled
    # pages, a few for mapping the neighbour's); the warm one pays none and runs several times
    # faster: notebook 00's rate is first touch of memory, not memory bandwidth.
    assert cold[1] >= NBYTES // PAGE // 2, cold
    assert warm[1] <= 8, warm
    assert warm[0] > 2 * cold[0], (warm, cold)
win.Free()
node.Free()
