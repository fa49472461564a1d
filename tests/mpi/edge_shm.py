"""Under mpiexec, with a small /dev/shm: a node-group Reader whose shared slots do not fit.

usage: edge_shm.py DB VARIANT BATCH MODE

MODE ``plain``: the Reader as a user makes it. MODE ``stale``: every rank's
reading of the free room in /dev/shm says there is plenty (as if another job
filled /dev/shm right after the check), so the pages themselves must be
found missing, without SIGBUS. Each rank reads two batches inside ``with``;
rank 0 prints ``rank <r>: ok`` or ``rank <r>: <ErrorType>: <message>`` for
every rank, and a rank that got an error exits with status 1.
"""

import sys

from mpi4py import MPI

import lmdbio
import lmdbio.shm

db, variant, batch, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
comm = MPI.COMM_WORLD
if mode == "stale":
    lmdbio.shm.shm_free = lambda directory=lmdbio.shm.SHM_DIR: 1 << 50
try:
    with lmdbio.Reader(db, batch, comm, variant=variant, on_error="raise") as r:
        for _ in range(2):
            r.read_batch()
    got, status = "ok", 0
except lmdbio.LmdbioError as exc:
    got, status = f"{type(exc).__name__}: {' '.join(str(exc).split())}", 1
# Rank 0 prints every rank's line: lines of two processes sharing stdout can interleave.
for rank, line in enumerate(comm.gather(got, root=0) or []):
    print(f"rank {rank}: {line}", flush=True)
sys.exit(status)
