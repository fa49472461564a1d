"""Under mpiexec -n 3: STAG's turns with a reader that never comes back; every wait is bounded.

usage: coll_stagger.py

Three readers in stagger groups of one: reader 0 passes each turn to reader 1,
reader 1 to reader 2. Reader 1 takes turn 0, then stops (it waits on COMM_WORLD
until the others are done, and exits without close()). Reader 0 passes turns 0..3
and closes: its hand-offs of turns 1..3 are never taken, which an MPI that does
not buffer small messages completes only when they are. Reader 2 waits for
turn 1 from reader 1, a member of the previous group that never comes. Each
rank prints "rank R: close ok", or "rank R: <where> raised NAME: MESSAGE after S s".
"""

import time

from mpi4py import MPI

from lmdbio.errors import PeerTimeoutError
from lmdbio.metrics import PhaseRecorder
from lmdbio.pipeline.stagger import Stagger
from lmdbio.waiting import polite_barrier

from coll_say import say

comm = MPI.COMM_WORLD.Dup()
rank = comm.rank
st = Stagger(comm, 1)
rec = PhaseRecorder(rank, enabled=False)
polite_barrier(comm)
t0 = time.monotonic()
where = "turn"
try:
    for t in range(4):
        if rank == 1 and t == 1:
            polite_barrier(MPI.COMM_WORLD)
            say(rank, "rank 1: stopped")
            raise SystemExit(0)
        with st.turn(rec, t):
            pass
    where = "close"
    st.close()
    say(rank, f"rank {rank}: close ok after {time.monotonic() - t0:.1f} s")
except PeerTimeoutError as exc:
    say(rank, f"rank {rank}: {where} raised PeerTimeoutError: {exc} "
             f"after {time.monotonic() - t0:.1f} s")
finally:
    if rank != 1:
        polite_barrier(MPI.COMM_WORLD)   # rank 1 stops until now
