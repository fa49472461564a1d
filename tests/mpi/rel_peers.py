"""Under mpiexec: errors inside ``with Reader``, lost peers and bounded waits (issue 13).

usage: rel_peers.py MODE DB VARIANT
Each rank prints one line "rank R: ..." saying how its reading ended.
Modes:
  all-same      every rank raises the same ValueError inside the with-block
  kbint         every rank raises KeyboardInterrupt inside the with-block
  lone          the last rank raises RuntimeError alone; the others read on
  lone-stuck    rank 1 raises alone while rank 0 is busy for 4 s
  stop-early    rank 1 leaves its loop after 3 batches; the others read on
  exit-early    no with-block: rank 1 reads 3 batches and ends without close()
  close-missing every rank reads 3 batches; rank 1 ends without close()
"""

import faulthandler
import os
import signal
import sys
import time

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

mode, db, variant = sys.argv[1], sys.argv[2], sys.argv[3]
comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
faulthandler.register(signal.SIGUSR1)
t0 = time.monotonic()


def say(what: str) -> None:
    """One line per event, printed and (with $REL_OUT) appended to REL_OUT/rank<R>.txt."""
    line = f"rank {rank}: {what} after {time.monotonic() - t0:.1f} s"
    print(line, flush=True)
    if os.environ.get("REL_OUT"):
        with open(os.path.join(os.environ["REL_OUT"], f"rank{rank}.txt"), "a") as f:
            f.write(line.replace("\n", " ") + "\n")


B = 4 * P
if mode in ("all-same", "kbint", "lone", "lone-stuck", "stop-early"):
    r = None
    try:
        with lmdbio.Reader(db, B, comm, variant=variant) as r:
            for t in range(200):
                if t == 2 and mode == "all-same":
                    raise ValueError("the same mistake on every rank")
                if t == 2 and mode == "kbint":
                    raise KeyboardInterrupt
                if t == 2 and mode == "lone" and rank == P - 1:
                    raise RuntimeError("a mistake on one rank")
                if t == 2 and mode == "lone-stuck":
                    if rank == 1:
                        raise RuntimeError("a mistake on one rank")
                    time.sleep(4)
                if t == 3 and mode == "stop-early" and rank == 1:
                    break
                r.read_batch()
        say("finished")
    except (ValueError, RuntimeError, KeyboardInterrupt, LmdbioError) as exc:
        say(f"caught {type(exc).__name__}: {exc}; closed={r is not None and r._closed}")
    if mode in ("all-same", "kbint"):
        # The job is still usable: a collective after the failure completes.
        say(f"alive, sum={comm.allreduce(1)}")
elif mode in ("exit-early", "close-missing"):
    r = lmdbio.Reader(db, B, comm, variant=variant, on_error="raise")
    try:
        for _ in range(3 if rank == 1 or mode == "close-missing" else 200):
            r.read_batch()
    except LmdbioError as exc:
        say(f"read_batch raised {type(exc).__name__}: {exc}")
    if rank != 1:
        try:
            r.close()
            say("closed")
        except LmdbioError as exc:
            say(f"close raised {type(exc).__name__}: {exc}")
    else:
        say("leaving without close()")
else:
    sys.exit(f"unknown mode {mode}")
