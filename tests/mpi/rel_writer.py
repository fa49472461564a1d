"""Under mpiexec: every variant reads its snapshot while another process writes (issue 13).

usage: rel_writer.py DB VARIANTS [WRITER_DB]
For each variant: every rank records the database's values, the Reader
opens, rank 0 starts a writer (rel_writer_proc.py) and waits for its first
commit, and every rank checks every record it is given against the values
at open, for two epochs. The writer opens WRITER_DB (default DB): the
real directory when DB holds a symbolic link to its data.mdb. Verdict
(tests/mpi/verdict.py): each rank's ``{variant: "ok" or what went wrong}``, a clean
LmdbioError reported as such; a rank passes when every variant read ``ok`` (wrong bytes,
a clean error or a C assertion, which ends the job, fail).
"""

import os
import subprocess
import sys
import time

import faulthandler
import signal

import lmdb
import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError
from verdict import conclude

db, variants = sys.argv[1], sys.argv[2].split(",")
writer_db = sys.argv[3] if len(sys.argv) > 3 else db
comm = MPI.COMM_WORLD
faulthandler.register(signal.SIGUSR1)   # a hang can be inspected with kill -USR1
here = os.path.dirname(os.path.abspath(__file__))
per_rank = 10
B = per_rank * comm.size
outcomes = {}
for variant in variants:
    comm.Barrier()   # the last variant's writer is gone before anyone looks at the values
    env = lmdb.open(db, readonly=True, lock=False)   # before the writer starts: no lock needed
    with env.begin() as txn:
        expected = [bytes(v) for _, v in txn.cursor()]
    env.close()
    comm.Barrier()
    writer = None
    result = "ok"
    delivered = 0
    try:
        with lmdbio.Reader(db, B, comm, variant=variant, build_provenance=True) as r:
            if r.n != len(expected):
                result = f"n is {r.n}, the snapshot holds {len(expected)}"
            if comm.rank == 0:
                ready = os.path.join(os.path.dirname(db), f"writer-ready-{os.getpid()}")
                writer = subprocess.Popen([sys.executable, os.path.join(here, "rel_writer_proc.py"),
                                           writer_db, ready])
                t0 = time.monotonic()
                while not os.path.exists(ready) and time.monotonic() - t0 < 30:
                    time.sleep(0.01)
                os.unlink(ready)
            comm.Barrier()
            n = len(expected)
            for t in range(2 * (-(-n // B))):
                b = r.read_batch()
                first = t * B + comm.rank * per_rank
                want = (first + np.arange(per_rank)) % n
                # Keep calling read_batch after a difference: every rank makes the same calls.
                if result == "ok" and not np.array_equal(b.indices, want):
                    result = f"batch {t}: indices {b.indices.tolist()}"
                bad = [int(want[i]) for i in range(len(b)) if bytes(b[i]) != expected[want[i]]]
                if result == "ok" and bad:
                    result = f"batch {t}: records {bad[:5]} differ from the snapshot"
                delivered += len(b)
    except LmdbioError as exc:
        result = f"clean {type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
    outcomes[variant] = result
    print(f"{variant} rank {comm.rank}: {result} ({delivered} records checked)", flush=True)
conclude(comm, outcomes, all(res == "ok" for res in outcomes.values()))
