# nprocs: 4
"""Notebook 04, exercise parts 1 and 2: records all readers walk per batch, LMM against DM, and DM's cursor waits.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/04_dm_readers.py
Virtual nodes of k ranks (ranks_per_node=k) give 4/k readers; only readers walk.

Part 1: LMM's readers walk readers x 256 records per batch, DM's ring 256 whatever the readers.
Part 2: a DM reader waits for the reader before it in the ring to pass the cursor, so the waits
are the ring's hand-offs: a lone reader (k = 4) has no one to wait for, and with several readers each waits
about as long as the readers before it take to walk their share (which reader waits longest
changes from run to run on a loaded 2-core machine: the order, not the times, is fixed).
"""

from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo

B, BATCHES = 256, 8   # batches counted: 1-8 (batch 0 starts every walk)
comm = MPI.COMM_WORLD
path = str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None
path = comm.bcast(path)

table = {}
for k in (1, 2, 4):
    for variant in ("lmdbio-lmm", "lmdbio-lmm-dm"):
        with lmdbio.Reader(path, B, variant=variant, ranks_per_node=k) as reader:
            for _ in range(BATCHES + 1):
                reader.read_batch()
            rows = [r for r in reader.stats() if r["batch"] > 0]
        walked = sum(r.get("records_walked") or 0 for r in rows if r["phase"] == "locate") / BATCHES
        wait_ms = 1e3 * sum(r["wall_s"] for r in rows if r["phase"] == "ring_wait") / BATCHES
        table[k, variant] = comm.gather((walked, wait_ms))

if comm.rank == 0:
    print(" k  readers  LMM walked/batch  DM walked/batch  DM cursor wait per reader (ms/batch)")
    for k in (1, 2, 4):
        readers = comm.size // k
        lmm = sum(w for w, _ in table[k, "lmdbio-lmm"])
        dm = sum(w for w, _ in table[k, "lmdbio-lmm-dm"])
        waits = " ".join(f"{t:5.2f}" for (w, t) in table[k, "lmdbio-lmm-dm"] if w)
        print(f"{k:2d}  {readers:7d}  {lmm:16.0f}  {dm:15.0f}  {waits}")
        # LMM: every reader walks the whole batch; DM: the ring walks it once, whatever the readers.
        assert lmm == readers * B, (k, lmm)
        assert dm == B, (k, dm)
    print(f"LMM's readers walk readers x {B} records per batch, DM's {B}: the saving is the reader count")
    for k in (1, 2, 4):   # part 2: one cursor wait per reader of the ring, none for the ranks that only view
        assert len([t for w, t in table[k, "lmdbio-lmm-dm"] if w]) == comm.size // k, k
    print("part 2: each DM reader waits for the one before it to pass the cursor; a lone reader has no one "
          "to wait for (its wait is the phase's bookkeeping), and which reader waits longest changes from run to run")
