"""Under mpiexec: a setup failure on one rank ends the Reader on every rank (issue 13).

usage: rel_setup_error.py DB VARIANT [VARIANT ...]
Verdict (tests/mpi/verdict.py): each rank's ``{variant: {"error": "TYPE: message" or "no
error", "seconds": its time in Reader(...)}}``.
"""

import faulthandler
import signal
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError
from verdict import conclude

db, variants = sys.argv[1], sys.argv[2:]
comm = MPI.COMM_WORLD
faulthandler.register(signal.SIGUSR1)
outcomes = {}
for variant in variants:
    comm.Barrier()
    t0 = time.monotonic()
    try:
        with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant, build_provenance=True) as r:
            r.read_batch()
        got = "no error"
    except LmdbioError as exc:
        got = f"{type(exc).__name__}: {exc}"
    outcomes[variant] = {"error": got, "seconds": round(time.monotonic() - t0, 2)}
conclude(comm, outcomes)
