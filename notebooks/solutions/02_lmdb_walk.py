# nprocs: 4
"""Notebook 02, exercise parts 1 and 2: records walked, kept and page faults per LMDB rank at P = 1, 2 and 4.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/02_lmdb_walk.py
Each P is a sub-communicator of the first P ranks; the batch is 256 records.

Part 1: every rank walks the whole global batch and keeps B/P of it (problem 2).
Part 2: on these CIFAR-10 records (about 3 KiB, several to a leaf page) a rank's page faults
shrink with its share: it faults on the pages of the records it copies, and the walk passes
over leaf pages already mapped. ImageNet-size records each fill overflow pages of their own,
and notebook 02's Problem 3 figure shows their faults per rank staying about level with P.
"""

from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo

B, BATCHES = 256, 8   # batches counted: 1-8 (batch 0 starts every walk)
world = MPI.COMM_WORLD
path = str(demo.dataset("cifar10", 4096)) if world.rank == 0 else None
path = world.bcast(path)

table = []
for p in (1, 2, 4):
    sub = world.Split(0 if world.rank < p else MPI.UNDEFINED, world.rank)
    if sub != MPI.COMM_NULL:
        with lmdbio.Reader(path, B, comm=sub, variant="lmdb") as reader:
            kept = sum(len(reader.read_batch()) for _ in range(BATCHES + 1)) / (BATCHES + 1)
            rows = [r for r in reader.stats() if r["phase"] in ("locate", "read") and r["batch"] > 0]
        walked = sum(r.get("records_walked") or 0 for r in rows) / BATCHES
        faults = sum(r["minflt"] + r["majflt"] for r in rows) / BATCHES
        got = sub.gather((walked, kept, faults))
        if sub.rank == 0:
            table.append((p, got))
        sub.Free()
    world.Barrier()

if world.rank == 0:
    print(" P  rank  walked/batch  kept/batch  page faults/batch")
    for p, got in table:
        for rank, (walked, kept, faults) in enumerate(got):
            print(f"{p:2d}  {rank:4d}  {walked:12.0f}  {kept:10.0f}  {faults:17.0f}")
    for p, got in table:
        for walked, kept, _ in got:
            # Problem 2: every rank walks the whole global batch, and keeps B/P of it.
            assert walked == B, (p, walked)
            assert kept == B // p, (p, kept)
    print("every rank walks the whole batch of", B, "records at every P, and keeps B/P of it")
    faults = {p: sum(f for _, _, f in got) / len(got) for p, got in table}
    assert faults[4] < faults[1], faults   # part 2: a smaller share, fewer faults per rank
    print("part 2: page faults per rank fall with the share:",
          ", ".join(f"P={p}: {f:.0f}" for p, f in faults.items()))
