"""Under mpiexec: run the option matrix's combinations from a spec file, one after another.

usage: matrix_run.py SPEC.json [--start K]
SPEC.json holds ``{"items": [...]}`` as lmdbio.lab.testing.matrix.run writes them. For each
item from position K on, every rank runs lmdbio.lab.testing.matrix.check_combination on its
own duplicate of COMM_WORLD (a combination that fails leaves no message behind for the
next one), and rank 0 prints ``MATRIX {"event": "start", ...}`` before it and ``MATRIX
{"event": "done", "row": ...}`` after it, flushed at once, so a combination that hangs or
ends the job is named by the last start line.
"""

import argparse
import json
import sys

import lmdb
from mpi4py import MPI

from lmdbio.lab.testing import matrix as mx

p = argparse.ArgumentParser()
p.add_argument("spec")
p.add_argument("--start", type=int, default=0)
args = p.parse_args()

world = MPI.COMM_WORLD
with open(args.spec) as f:
    items = json.load(f)["items"]
values: dict[tuple, list[bytes]] = {}


def stored(item: dict) -> list[bytes]:
    """py-lmdb's values in key order (the reference), read once per data set (the folder with
    no sidecar holds the same data.mdb)."""
    key = (item["combo"]["records"], item["combo"]["uneven"])
    if key not in values:
        env = lmdb.open(item["path"], readonly=True, lock=False)
        try:
            with env.begin() as txn:
                values[key] = [bytes(v) for _, v in txn.cursor()]
        finally:
            env.close()
    return values[key]


def emit(msg: dict) -> None:
    sys.stdout.write("MATRIX " + json.dumps(msg, default=str) + "\n")
    sys.stdout.flush()


for pos in range(args.start, len(items)):
    item = items[pos]
    if world.rank == 0:
        emit({"event": "start", "pos": pos, "id": item["id"]})
    comm = world.Dup()
    try:
        mine = mx.check_combination(item, comm, stored(item))
    finally:
        comm.Free()
    everyone = world.gather(mine, root=0)
    if world.rank == 0:
        try:
            row = mx.merge_ranks(item, everyone)
        except Exception as exc:  # the matrix's own fault, named in the row
            row = mx.lost_row(item, f"matrix: merging the ranks' results failed: "
                                    f"{type(exc).__name__}: {exc}")
        emit({"event": "done", "pos": pos, "row": row})
