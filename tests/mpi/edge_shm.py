"""Under mpiexec, with a small /dev/shm: a node-group Reader whose shared slots do not fit.

usage: edge_shm.py DB VARIANT BATCH MODE

MODE ``plain``: the Reader as a user makes it. MODE ``stale``: every rank's
reading of the free room in /dev/shm says there is plenty (as if another job
filled /dev/shm right after the check), so the pages themselves must be
found missing, without SIGBUS. Each rank reads two batches inside ``with``.
Verdict (tests/mpi/verdict.py): each rank's ``"ok"`` or ``"<ErrorType>: <message>"``;
the job exits with status 1 if a rank got an error.
"""

import sys

from mpi4py import MPI

import lmdbio
import lmdbio.shm
from verdict import conclude

db, variant, batch, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
comm = MPI.COMM_WORLD
if mode == "stale":
    lmdbio.shm.shm_free = lambda directory=lmdbio.shm.SHM_DIR: 1 << 50
try:
    with lmdbio.Reader(db, batch, comm, variant=variant, on_error="raise") as r:
        for _ in range(2):
            r.read_batch()
    got = "ok"
except lmdbio.LmdbioError as exc:
    got = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
conclude(comm, got, got == "ok")
