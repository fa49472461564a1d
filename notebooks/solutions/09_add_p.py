# nprocs: 4
# run: 8 --p 4,8
"""Exercise 09: add process counts. What grows with P for LMDB, and not for the full stack?

Usage, from the repository root: mpiexec -n N .venv/bin/python notebooks/solutions/09_add_p.py [--p 1,2,4]
Part 1: mpiexec -n 4 .venv/bin/python notebooks/solutions/09_add_p.py
Part 2: mpiexec -n 8 .venv/bin/python notebooks/solutions/09_add_p.py --p 4,8

The N ranks are split into sub-communicators of P ranks for each P given
(P = 1, 2 and 4 by default; one node, as in the notebook's local sweep). At
each P, LMDB and the full stack read the same 8 batches of 256 records. The table gives the time,
the records each variant's cursors walked per record delivered (LMDB:
every rank walks past the records of the ranks before it, problem 2), the
read requests and their size. On 2 cores the times say little; the walk is
what grows with P and what the full stack removes. The checks: every
variant delivers every record once, LMDB's walk per record grows with P
and about doubles wherever P doubles, and the full stack walks none.
"""

import argparse
import time

import pandas as pd
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description="Read with LMDB and the full stack at each P.")
parser.add_argument("--p", default="1,2,4", help="process counts, comma-separated, increasing (default 1,2,4)")
PS = [int(p) for p in parser.parse_args().p.split(",")]
if len(PS) < 2 or PS != sorted(set(PS)) or PS[0] < 1 or PS[-1] > world.size:
    parser.error(f"give two or more P in increasing order, each from 1 to the {world.size} ranks: {PS}")
path = world.bcast(str(demo.dataset("cifar10", 4096)) if world.rank == 0 else None, root=0)
world.Barrier()

BATCHES, B = 8, 256
table = []
for p in PS:
    comm = world.Split(0 if world.rank < p else MPI.UNDEFINED, world.rank)
    for variant in ("lmdb", "lmdbio-lmm-dio-prov-coal-stag"):
        if comm == MPI.COMM_NULL:
            continue
        comm.Barrier()
        t0 = time.perf_counter()
        with lmdbio.Reader(path, B, comm=comm, variant=variant) as reader:
            records = sum(len(reader.read_batch()) for _ in range(BATCHES))
            wall = time.perf_counter() - t0
            rows = [r for r in reader.stats() if r["phase"] in ("locate", "read")]
        walked = comm.allreduce(sum(r.get("records_walked") or 0 for r in rows))
        calls = comm.allreduce(sum(r.get("calls") or 0 for r in rows if r["phase"] == "read"))
        nbytes = comm.allreduce(sum(r.get("bytes") or 0 for r in rows if r["phase"] == "read"))
        records, wall = comm.allreduce(records), comm.allreduce(wall, op=MPI.MAX)
        if comm.rank == 0:
            table.append(dict(P=p, variant=variant, ms_setup_included=round(1e3 * wall, 1), records=records,
                              walked_per_record=walked / records, requests=calls,
                              kib_per_request=round(nbytes / max(1, calls) / 1024, 1)))
    if comm != MPI.COMM_NULL:
        comm.Free()
    world.Barrier()

if world.rank == 0:
    t = pd.DataFrame(table)
    print(t.to_string(index=False))
    lmdb = t[t["variant"] == "lmdb"].set_index("P")["walked_per_record"]
    full = t[t["variant"] != "lmdb"].set_index("P")["walked_per_record"]
    assert (t["records"] == BATCHES * B).all(), "every variant delivers every record once"
    assert lmdb.is_monotonic_increasing and lmdb[PS[-1]] > lmdb[PS[0]], "LMDB's walk grows with P"
    for p in PS:
        if 2 * p in PS:
            assert lmdb[2 * p] > 1.9 * lmdb[p], \
                f"LMDB's walk per record delivered about doubles from P = {p} to {2 * p}"
    assert (full == 0).all(), "the full stack locates records by its index, it walks none"
    print("LMDB walks more records per record delivered as P grows; the full stack walks none.")
