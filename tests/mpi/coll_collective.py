"""Under mpiexec: collective() raises one error everywhere, and is bounded when a rank is missing.

usage: coll_collective.py MODE

Modes (each rank prints "rank R: <what happened>" lines):
  errors   a step that fails on rank 2; on ranks 1 and 3 with different errors (the
           lowest rank's wins); with an error class only rank 1 knows; a step that
           works; a bounded allgather
  missing  rank P - 1 comes to a step only once the others have given up on it (it
           waits on COMM_WORLD until they have): the others must raise
           PeerTimeoutError naming it, within about LMDBIO_TIMEOUT, and it one saying
           it came late; then every rank takes one more step on the same communicator
"""

import sys
import time

from mpi4py import MPI

from lmdbio.collective import allgather, collective
from lmdbio.errors import ConfigurationError
from lmdbio.waiting import polite_barrier

from coll_say import say as _say

mode = sys.argv[1]
comm = MPI.COMM_WORLD.Dup()
rank, P = comm.rank, comm.size


def say(what: str) -> None:
    _say(rank, f"rank {rank}: {what}")


def step(name: str, fn) -> None:
    try:
        say(f"{name}: returned {collective(comm, fn)!r}")
    except Exception as exc:   # what each rank got is the result
        say(f"{name}: {type(exc).__name__}: {exc}")
        fields = {k: getattr(exc, k) for k in ("option", "missing", "limit") if hasattr(exc, k)}
        say(f"{name} fields: {fields!r}")


def fail_on(ranks: dict):
    def fn():
        if rank in ranks:
            raise ranks[rank]
        return rank
    return fn


if mode == "errors":
    step("one", fail_on({2: ValueError("bad on two")}))
    step("two", fail_on({3: KeyError("three"),
                         1: ConfigurationError("bad on one", option="batch_size")}))

    def local_error():
        class Local(Exception):
            """An error class defined in a function: it cannot travel."""
        return Local("only rank 1 knows this class")

    step("local", fail_on({1: local_error()} if rank == 1 else {}))
    step("fine", lambda: rank * 10)
    say(f"allgather: {allgather(comm, rank * rank)!r}")
elif mode == "missing":
    polite_barrier(comm)
    late = rank == P - 1
    if late:
        polite_barrier(MPI.COMM_WORLD)   # away until every other rank has given up on it
    t0 = time.monotonic()
    step("missing", lambda: rank)
    say(f"took {time.monotonic() - t0:.1f} s")
    if not late:
        polite_barrier(MPI.COMM_WORLD)
    polite_barrier(comm)
    step("after", lambda: rank)
