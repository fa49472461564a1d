"""Under mpiexec: a setup failure on one rank ends the Reader on every rank (issue 13).

usage: rel_setup_error.py DB VARIANT [VARIANT ...]
Each rank prints the error type it got from Reader(...) and how long it took.
"""

import faulthandler
import signal
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

db, variants = sys.argv[1], sys.argv[2:]
comm = MPI.COMM_WORLD
faulthandler.register(signal.SIGUSR1)
for variant in variants:
    comm.Barrier()
    t0 = time.monotonic()
    try:
        with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant, build_provenance=True) as r:
            r.read_batch()
        got = "no error"
    except LmdbioError as exc:
        got = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - t0
    for rank, (g, s) in enumerate(comm.gather((got, took), root=0) or []):
        print(f"{variant} rank {rank} after {s:.1f} s: {g}", flush=True)
