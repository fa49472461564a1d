"""Under mpiexec: the bounded agreement of close(), its answers, time and messages per rank.

usage: coll_agree.py LIMIT [STOPPED STOPPED_LIMIT]

Ranks 1, P // 2 and P - 1 say they failed. In the first round (limit LIMIT) every rank comes
and agrees at once. With STOPPED a second round follows (limit STOPPED_LIMIT), on a
communicator of its own, in which that rank is stopped: it comes only once every other rank
has given up on it (it waits on COMM_WORLD until they have). Each rank prints one JSON line
per round: {"round" ("present" or "stopped"), "rank", "complete", "failed", "missing",
"seconds" (its time in agree()), "sent" (messages it sent)}.
"""

import json
import sys
import time

from mpi4py import MPI

from lmdbio.collective import agree, messages_sent
from lmdbio.waiting import polite_barrier

from coll_say import say


def agreement(name: str, limit: float, stopped: int | None) -> None:
    comm = MPI.COMM_WORLD.Dup()
    rank, P = comm.rank, comm.size
    failed = rank in (1, P // 2, P - 1)
    polite_barrier(comm)   # start together: the skew the naming allows is a fraction of the limit
    if rank == stopped:
        polite_barrier(MPI.COMM_WORLD)
    sent0 = messages_sent()
    t0 = time.monotonic()
    complete, failed_ranks, missing = agree(comm, failed, limit)
    took = time.monotonic() - t0
    if stopped is not None and rank != stopped:
        polite_barrier(MPI.COMM_WORLD)   # now the stopped rank comes
    say(rank, json.dumps({"round": name, "rank": rank, "complete": complete, "failed": failed_ranks,
                          "missing": missing, "seconds": round(took, 3),
                          "sent": messages_sent() - sent0}))


agreement("present", float(sys.argv[1]), None)
if len(sys.argv) > 2:
    agreement("stopped", float(sys.argv[3]), int(sys.argv[2]))
