# nprocs: 4
"""Notebook 03, exercise: LMM's readers, faults and records walked for ranks_per_node = 1, 2, 4.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/03_lmm_readers.py
Virtual nodes of k consecutive ranks each elect one reader; only the readers open the file.
"""

from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo

B, BATCHES = 256, 8   # batches counted: 1-8 (batch 0 starts every walk)
comm = MPI.COMM_WORLD
path = str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None
path = comm.bcast(path)

table = []
for k in (1, 2, 4):
    with lmdbio.Reader(path, B, variant="lmdbio-lmm", ranks_per_node=k) as reader:
        for _ in range(BATCHES + 1):
            reader.read_batch()
        rows = [r for r in reader.stats() if r["phase"] in ("locate", "read") and r["batch"] > 0]
        is_reader = bool(reader.is_reader)
    walked = sum(r.get("records_walked") or 0 for r in rows) / BATCHES
    faults = sum(r["minflt"] + r["majflt"] for r in rows) / BATCHES
    table.append((k, comm.gather((is_reader, walked, faults))))

if comm.rank == 0:
    print(" k  rank  reads the file  walked/batch  page faults/batch")
    for k, got in table:
        for rank, (is_reader, walked, faults) in enumerate(got):
            print(f"{k:2d}  {rank:4d}  {str(is_reader):>14s}  {walked:12.0f}  {faults:17.0f}")
    for k, got in table:
        readers = [g for g in got if g[0]]
        # One reader per virtual node of k ranks; the others neither walk nor fault on the file.
        assert len(readers) == comm.size // k, (k, got)
        assert all(w == 0 and f == 0 for r, w, f in got if not r), (k, got)
        # Every LMM reader still walks the whole global batch (problem 2, notebook 04).
        assert sum(w for _, w, _ in readers) == len(readers) * B, (k, got)
    print(f"one reader per node; the readers together walk readers x {B} records per batch")
