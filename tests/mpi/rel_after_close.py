"""Under mpiexec: batches read before close() stay readable after it (issue 13).

usage: rel_after_close.py DB VARIANT
Every rank keeps two batches, a memoryview of a record and a numpy view of a
batch buffer, closes the Reader, and then reads them all and compares them
with the database. A segfault here is the bug this checks for. Verdict
(tests/mpi/verdict.py): each rank's ``"ok"`` or what differed.
"""

import sys

import numpy as np
from mpi4py import MPI

import lmdbio

from stored import stored_values
from verdict import conclude

db, variant = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
expected = stored_values(db)
r = lmdbio.Reader(db, 4 * comm.size, comm, variant=variant)
kept = [r.read_batch() for _ in range(2)]
view = kept[0][1]
arr = np.frombuffer(kept[1].buffer, dtype=np.uint8)[:16]
head = bytes(arr)
r.close()
r.close()   # a second close does nothing
bad = []
for b in kept:
    for i, idx in enumerate(b.indices.tolist()):
        if bytes(b[i]) != expected[idx]:
            bad.append(idx)
if bytes(view) != expected[int(kept[0].indices[1])]:
    bad.append("view")
if bytes(arr) != head:
    bad.append("array")
try:
    r.read_batch()
    bad.append("read after close did not raise")
except lmdbio.LmdbioError:
    pass
# The windows those batches viewed are freed by a later close() once no view is left.
import lmdbio.shm as shm

parked_before = sum(len(v) for v in shm._REUSABLE.values())
del kept, view, arr, b
with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant) as r2:
    r2.read_batch()
parked_after = sum(len(v) for v in shm._REUSABLE.values())
if comm.size > 1 and variant != "lmdb" and (parked_before != 1 or parked_after != 0):
    bad.append(f"parked windows {parked_before} -> {parked_after}, wanted 1 -> 0")
conclude(comm, "ok" if not bad else f"differ: {bad}", not bad)
