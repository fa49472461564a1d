# nprocs: 4
"""Exercise 01: do more commits leave more free pages?

Each rank writes the same 1,000 CIFAR-10-size records with its own commit interval
(1, 10, 100 or 1,000 records per commit), then counts the file's pages with lmdbio's own
parser (`lmdbio info`). Rank 0 prints the table and checks what it shows.
Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/01_commits.py
"""

import shutil
import sys

from mpi4py import MPI

from lmdbio.datasets import make_dataset
from lmdbio.info import describe
from lmdbio.lab.lessons.demo import SCRATCH


def _abort(*exc):   # a failed check on one rank ends every rank (no peer left waiting)
    sys.__excepthook__(*exc)
    MPI.COMM_WORLD.Abort(1)


sys.excepthook = _abort

RECORDS = 1000
EVERY = (1, 10, 100, 1000)

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
mine = EVERY[rank % len(EVERY)] if rank < len(EVERY) else None
row = None
if mine is not None:
    out = SCRATCH / "solutions" / "01" / f"cifar10-{RECORDS}-every{mine}"
    make_dataset(out, "cifar10", RECORDS, commit_every=mine, force=True, provenance=False)
    info = describe(out)
    row = dict(commit_every=mine, commits=info["txnid"], pages=info["pages"]["in_file"],
               overflow=info["pages"]["overflow"], leaf=info["pages"]["leaf"],
               branch=info["pages"]["branch"], free=info["pages"]["free_or_other_db"])
    shutil.rmtree(out)
rows = [r for r in comm.gather(row, root=0) or [] if r is not None]
if rank == 0:
    rows.sort(key=lambda r: r["commit_every"])
    print(" ".join(f"{k:>12s}" for k in rows[0]))
    for r in rows:
        print(" ".join(f"{v:>12,}" for v in r.values()))
    most = rows[0]
    # LMDB frees each commit's old copies of the pages it changed and reuses them in the
    # next commits: even 1,000 commits leave a handful of free pages, not one or more per commit.
    assert most["commits"] == RECORDS, most
    assert most["free"] < most["commits"] / 50, most
    assert max(r["free"] for r in rows) - min(r["free"] for r in rows) < 20, rows
