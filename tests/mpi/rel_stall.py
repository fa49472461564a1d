"""Under mpiexec: one rank stops answering (SIGSTOP) or is interrupted (SIGINT) (issue 23).

usage: rel_stall.py MODE DB VARIANT RANKS_PER_NODE
Modes:
  stop       rank 2 stops itself with SIGSTOP after 2 batches; the others read 60 batches.
             The job must end (under on_error="abort") with the stopped rank named.
  interrupt  every rank makes and closes Readers for 6 s; rank 0 sends SIGINT to rank 1
             after INTERRUPT_AFTER seconds. The job must end, whatever step was hit.
"""

import faulthandler
import os
import signal
import sys
import threading
import time

from mpi4py import MPI

import lmdbio

mode, db, variant, rpn = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) or None
comm = MPI.COMM_WORLD
faulthandler.register(signal.SIGUSR1)
B = 4 * comm.size
if mode == "stop":
    with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn) as r:
        for t in range(60):
            if t == 2 and comm.rank == 2:
                os.kill(os.getpid(), signal.SIGSTOP)
            r.read_batch()
    print(f"rank {comm.rank}: finished", flush=True)
elif mode == "interrupt":
    # As at a terminal, even where this job was started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pids = comm.allgather(os.getpid())
    if comm.rank == 0:
        after = float(os.environ.get("INTERRUPT_AFTER", "1"))

        def interrupt():
            # Again after 0.5 s, twice: a KeyboardInterrupt raised inside a finalizer is
            # printed and dropped by Python, and the test is about one that is not.
            for _ in range(3):
                try:
                    os.kill(pids[1], signal.SIGINT)
                except ProcessLookupError:
                    return
                time.sleep(0.5)

        threading.Timer(after, interrupt).start()
    t0 = time.monotonic()
    n = 0
    try:
        while time.monotonic() - t0 < 6:
            with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn) as r:
                n += 1
            # The loop's length is agreed, so every rank makes the same number of Readers.
            if not comm.allreduce(time.monotonic() - t0 < 6, op=MPI.LAND):
                break
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the timer's next SIGINTs: we are ending
        # What `python -m mpi4py` does for any uncaught exception: a Ctrl-C that lands in this
        # script's own collectives (not in a Reader) is the script's to end.
        print(f"rank {comm.rank}: KeyboardInterrupt after {n} Readers; aborting", file=sys.stderr,
              flush=True)
        time.sleep(0.5)   # as the library does: let mpiexec forward the line before the abort
        comm.Abort(130)
    print(f"rank {comm.rank}: made {n} Readers, never interrupted", flush=True)
