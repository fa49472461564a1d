"""Under mpiexec: data.mdb is truncated between two batches of a read (issue 23, F7).

usage: rel_shrink.py SRC WORKDIR VARIANTS
For each variant a fresh copy of SRC is read; after two batches rank 0 cuts
the copy to a third of its size and every rank reads on. A mapped page past
the end of a file would kill the process with SIGBUS. Verdict
(tests/mpi/verdict.py): each rank's ``{variant: "caught TYPE: message" or "no error"}``.
"""

import os
import shutil
import sys

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError
from verdict import conclude

src, work, variants = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
comm = MPI.COMM_WORLD
B = 8 * comm.size
outcomes = {}
for variant in variants:
    db = os.path.join(work, variant)
    if comm.rank == 0:
        shutil.copytree(src, db)
    comm.Barrier()
    result = "no error"
    try:
        with lmdbio.Reader(db, B, comm, variant=variant, on_error="raise") as r:
            for _ in range(2):
                r.read_batch()
            comm.Barrier()
            if comm.rank == 0:
                f = os.path.join(db, "data.mdb")
                os.truncate(f, os.path.getsize(f) // 3)
            comm.Barrier()
            for _ in range(2, 40):
                r.read_batch()
    except LmdbioError as exc:
        result = f"caught {type(exc).__name__}: {' '.join(str(exc).split())}"
    outcomes[variant] = result
conclude(comm, outcomes)
