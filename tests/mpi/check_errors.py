"""Under mpiexec: bad arguments raise the same clear error on every rank (no hang)."""

import sys

from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

db, empty_db, variant = sys.argv[1], sys.argv[2], sys.argv[3]
comm = MPI.COMM_WORLD
P = comm.size
cases = {
    "indivisible": dict(path=db, batch_size=P * 4 + 1),
    "zero": dict(path=db, batch_size=0),
    "negative": dict(path=db, batch_size=-P),
    "missing": dict(path=db + "-missing", batch_size=P * 4),
    "missing-on-last-rank": dict(path=db + "-gone" if comm.rank == P - 1 else db, batch_size=P * 4),
    "empty": dict(path=empty_db, batch_size=P * 4),
    "bad-variant": dict(path=db, batch_size=P * 4, variant="lmdbio-lmm-prov"),
}
results = {}
for name, kw in cases.items():
    kw.setdefault("variant", variant)
    try:
        with lmdbio.Reader(comm=comm, **kw) as r:
            r.read_batch()
        results[name] = "no error"
    except (ValueError, TypeError, LmdbioError) as exc:
        results[name] = f"{type(exc).__name__}: {exc}"
    comm.Barrier()
allres = comm.gather(results, root=0)
if comm.rank == 0:
    bad = []
    for name in cases:
        msgs = [r[name] for r in allres]
        for rank, m in enumerate(msgs):
            print(f"{name} rank {rank}: {m}")
            if m == "no error":
                bad.append(f"{name}: rank {rank} raised nothing")
    sys.exit(1 if bad else 0)
