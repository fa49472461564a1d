"""Under mpiexec: a failure on one rank during reading ends the whole job (no hang).

mode "truncate": rank 0 truncates data.mdb after two batches, so the next
direct read comes up short on the reader. mode "raise": the last rank raises
inside the with-block.
"""

import os
import sys

from mpi4py import MPI

import lmdbio

db, mode = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
with lmdbio.Reader(db, 4 * comm.size, comm, variant="lmdbio-lmm-dio") as r:
    for t in range(1000):
        if t == 2 and mode == "truncate" and comm.rank == 0:
            os.truncate(os.path.join(db, "data.mdb"), 8192 * 4)
        if t == 2 and mode == "raise" and comm.rank == comm.size - 1:
            raise RuntimeError("simulated failure in the training loop")
        r.read_batch()
print("finished without noticing", flush=True)
