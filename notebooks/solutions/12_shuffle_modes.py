# nprocs: 4
"""Exercise 12: one epoch in each shuffle mode, every record once, and how far apart a rank's
records lie.

Four ranks read one epoch of a tiny CIFAR-10 dataset with shuffle=False, True ("window") and
"shard". Rank 0 checks that every record came exactly once and prints, per mode, the mean
distance in the file between consecutive records of one rank's share of a batch (1: file order),
and the bytes all readers read for the epoch: the window shuffle reads several times the bytes
of file order (its records lie far apart, and a read covers the pages between close ones), the
shard mode about what file order reads.
Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/12_shuffle_modes.py
"""

import sys

import numpy as np
from mpi4py import MPI

from lmdbio import Reader
from lmdbio.lab.lessons import demo


def _abort(*exc):   # a failed check on one rank ends every rank (no peer left waiting)
    sys.__excepthook__(*exc)
    MPI.COMM_WORLD.Abort(1)


sys.excepthook = _abort

RECORDS, BATCH = 4096, 256

comm = MPI.COMM_WORLD
path = demo.dataset("cifar10", RECORDS) if comm.Get_rank() == 0 else None
path = comm.bcast(str(path), root=0)

result = {}
for mode in (False, True, "shard"):
    with Reader(path, BATCH, comm=comm, variant="auto", shuffle=mode, seed=1) as reader:
        shares = [np.asarray(b.indices) for b in reader.epoch(0)]
        read = sum(r.get("bytes") or 0 for r in reader.stats() if r["phase"] == "read")
    everyone = comm.gather(shares, root=0)
    read = comm.reduce(read, root=0)
    if comm.Get_rank() == 0:
        seen = np.concatenate([s for rank_shares in everyone for s in rank_shares])
        counts = np.bincount(seen, minlength=RECORDS)
        gap = np.mean([np.abs(np.diff(np.sort(s))).mean() for rank_shares in everyone for s in rank_shares])
        result[str(mode)] = dict(delivered=len(seen), exactly_once=bool((counts == 1).all()),
                                 share_gap=float(gap), kib_read=read / 1024)
if comm.Get_rank() == 0:
    print(f"{'shuffle':>8s} {'delivered':>10s} {'exactly once':>13s} {'mean gap in a rank share':>26s} "
          f"{'KiB read, all readers':>22s}")
    for mode, r in result.items():
        print(f"{mode:>8s} {r['delivered']:>10,} {str(r['exactly_once']):>13s} {r['share_gap']:>26.1f} "
              f"{r['kib_read']:>22,.0f}")
    assert all(r["exactly_once"] and r["delivered"] == RECORDS for r in result.values()), result
    assert result["False"]["share_gap"] == 1.0, result
    # shard: each rank's share is a slice of the window, so its records lie closer together
    assert result["shard"]["share_gap"] < result["True"]["share_gap"], result
    # The bytes: a reader reads whole extents, so records far apart cost the pages between them
    # (up to lmdbio.plan.plan_extents' gap) or more requests; shard's close records cost about what
    # file order does, the window shuffle several times that.
    assert result["shard"]["kib_read"] < result["True"]["kib_read"], result
    assert result["False"]["kib_read"] < result["True"]["kib_read"], result
