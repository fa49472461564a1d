"""Under mpiexec: Readers built and closed in a loop on one communicator never hear each other.

usage: coll_dup.py DB ROUNDS SEED

Round i reads with variant VARIANTS[(i // 5) % 4] (each on 1-rank virtual nodes, so
DM passes its cursor around a ring of readers and STAG's readers take turns) in
mode MODES[i % 5]; a different rank each round comes late (a random sleep of up
to 0.3 s) to the construction or to close:

  clean      every rank reads 3 batches; every record is compared with py-lmdb
  break      every rank raises inside the with-block, the last rank after 1 batch, the
             others after 2: hand-offs to it (DM's cursor, STAG's turns) stay in flight
             (the last reader of the ring and of the turns: nobody waits for it)
  clean      (again, on the same variant: where a message left in flight would land)
  late-exit  every rank raises after 3 batches, rank i % P only 1.6 s after the others
             (LMDBIO_EXIT_TIMEOUT is 1 s): the others give up on it at the exit
             agreement and go on; its own agreement messages come late
  traffic    clean reading while rank 0 keeps a receive for any message (ANY_SOURCE,
             ANY_TAG) posted on the same communicator, as an application's control
             channel would; after close every other rank sends it one message

Each rank prints "rank R: ok records=N" when every record it got was right,
every clean round raised nothing and the control channel got only the
application's messages; otherwise "rank R: FAIL ..." with what went wrong.
"""

import random
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

from coll_say import say
from stored import stored_values

db, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
VARIANTS = ["lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov-coal-stag", "lmdbio-direct"]
MODES = ["clean", "break", "clean", "late-exit", "traffic"]
APP_TAG = 5
expected = stored_values(db)
rng = random.Random(seed * 1000 + rank)
problems: list[str] = []
records = 0


class Stop(Exception):
    """The application's own error inside the with-block."""


def check(b, where: str) -> None:
    global records
    for j, idx in enumerate(b.indices):
        records += 1
        if bytes(b[j]) != expected[int(idx)]:
            problems.append(f"{where}: record {int(idx)} wrong")
            return


for i in range(rounds):
    variant, mode = VARIANTS[(i // 5) % len(VARIANTS)], MODES[i % len(MODES)]
    where = f"round {i} ({variant}, {mode})"
    late = i % P
    listener = comm.irecv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) if (
        mode == "traffic" and rank == 0) else None
    if rank == late and i % 2 == 0:
        time.sleep(rng.uniform(0.0, 0.3))
    try:
        with lmdbio.Reader(db, 4 * P, comm, variant=variant, ranks_per_node=1, stagger_size=1,
                           on_error="raise") as r:
            for t in range(3):
                if mode == "break" and t == 1 and rank == P - 1:
                    raise Stop("breaks out early")
                check(r.read_batch(), where)
                if mode == "break" and t == 1:
                    raise Stop("the same error on every rank")
            if mode == "late-exit":
                if rank == late:
                    time.sleep(1.6)
                raise Stop("the same error on every rank, one rank late")
            if rank == late and i % 2 == 1:
                time.sleep(rng.uniform(0.0, 0.3))
    except Stop:
        if mode not in ("break", "late-exit"):
            problems.append(f"{where}: Stop raised")
    except LmdbioError as exc:
        problems.append(f"{where}: {type(exc).__name__}: {exc}")
    if listener is not None:
        got = []
        for _ in range(P - 1):
            msg = listener.wait() if not got else comm.recv(source=MPI.ANY_SOURCE, tag=APP_TAG)
            got.append(msg)
        if sorted(got, key=str) != sorted([("done", i, r) for r in range(1, P)], key=str):
            problems.append(f"{where}: the control channel got {got!r}")
    elif mode == "traffic":
        comm.send(("done", i, rank), dest=0, tag=APP_TAG)

# Every rank reports, even when another failed (the job must end).
say(rank, f"rank {rank}: " + ("ok" if not problems else "FAIL " + "; ".join(problems[:3]))
    + f" records={records}")
