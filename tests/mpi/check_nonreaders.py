"""Under mpiexec: ranks that are not readers never open the database.

An audit hook sees every Python-level open of a file, and lmdb.open is
wrapped; at the end /proc/self/maps must not map data.mdb either.
"""

import os
import sys

import lmdb
from mpi4py import MPI

db = os.path.realpath(sys.argv[1])
opened = []


def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        name = os.fsdecode(args[0]) if not isinstance(args[0], os.PathLike) else os.fspath(args[0])
        if name.startswith(db):
            opened.append(name)


sys.addaudithook(hook)
_real_open = lmdb.open


def spy_open(path, *a, **kw):
    opened.append(f"lmdb.open({path})")
    return _real_open(path, *a, **kw)


lmdb.open = spy_open

import lmdbio  # noqa: E402

comm = MPI.COMM_WORLD
report = []
for variant in lmdbio.VARIANTS[1:]:
    opened.clear()
    with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant, build_provenance=True) as r:
        for _ in range(5):
            r.read_batch()
        with open("/proc/self/maps") as f:
            mapped = [line for line in f if "data.mdb" in line]
        report.append((variant, r.is_reader, list(opened), len(mapped)))
rows = comm.gather(report, root=0)
if comm.rank == 0:
    bad = []
    for rank, rep in enumerate(rows):
        for variant, is_reader, op, maps in rep:
            if is_reader and not op:
                bad.append(f"rank {rank} {variant}: reader opened nothing (the check is blind)")
            if not is_reader and (op or maps):
                bad.append(f"rank {rank} {variant}: non-reader opened {op} / maps {maps}")
    print("\n".join(bad) or "ok: non-readers never opened the database")
    sys.exit(1 if bad else 0)
