"""Under mpiexec -n 2: a DM reader that stops passing the cursor is a bounded wait (issue 13).

usage: rel_ring.py DB
Virtual nodes of one rank make both ranks DM readers on one ring; rank 0
stops after two batches. Rank 1 must get PeerTimeoutError naming the ring.
"""

import os
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

comm = MPI.COMM_WORLD
t0 = time.monotonic()
try:
    with lmdbio.Reader(sys.argv[1], 8, comm, variant="lmdbio-lmm-dm", ranks_per_node=1) as r:
        for t in range(100):
            if t == 2 and comm.rank == 0:
                break
            r.read_batch()
    msg = "finished"
except LmdbioError as exc:
    msg = f"{type(exc).__name__}: {exc} (missing={getattr(exc, 'missing', None)})"
line = f"rank {comm.rank}: {msg} after {time.monotonic() - t0:.1f} s"
print(line, flush=True)
if os.environ.get("REL_OUT"):
    with open(os.path.join(os.environ["REL_OUT"], f"rank{comm.rank}.txt"), "a") as f:
        f.write(line.replace("\n", " ") + "\n")
