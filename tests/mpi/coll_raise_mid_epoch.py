"""Under mpiexec: one rank raises in user code mid-epoch; the others must not wait for ever.

usage: coll_raise_mid_epoch.py DB VARIANT

on_error="raise" (what notebook engines use). Rank 1 raises inside
``for b in reader.epoch(0)`` at its third batch and leaves its with-block;
rank 0 reads epoch 0 to its end and goes on to epoch(1), whose collective
start rank 1 never comes to. Each rank prints one line
"rank R: caught NAME: MESSAGE after S s" (S: seconds since epoch 0 began).
"""

import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

from coll_say import say

db, variant = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank = comm.rank


class Mistake(Exception):
    """The user's own error."""


t0 = time.monotonic()
try:
    with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant, on_error="raise") as r:
        t0 = time.monotonic()
        for e in range(2):
            for i, _b in enumerate(r.epoch(e)):
                if rank == 1 and i == 2:
                    raise Mistake("a mistake in the training step")
        say(rank, f"rank {rank}: finished after {time.monotonic() - t0:.1f} s")
except (Mistake, LmdbioError) as exc:
    say(rank, f"rank {rank}: caught {type(exc).__name__}: {exc} "
             f"after {time.monotonic() - t0:.1f} s")
    say(rank, f"rank {rank}: blamed {getattr(exc, 'ranks', None)!r}")
