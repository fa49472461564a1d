"""Under mpiexec: one scenario at the edges of epochs, checked record by record.

usage: epoch_edges.py DB VARIANT SCENARIO [--batch B] [--prefetch D] [--rpn K] [--sleep S]

Scenarios (each rank checks every record it is handed, and every batch it holds until its
second following read, against py-lmdb by position):
  epoch     one file-order epoch: every record exactly once across the ranks
  epochs3   three epochs with ``--sleep`` seconds of compute per batch on ranks > 0
  between   read_batch() after an epoch, an epoch broken early, read_batch() again
  uneven    rank 0 breaks epoch 0 after 4 batches, the others after 2, then epoch 1
  overlap   epoch 1 started while epoch 0's iterator is alive, then epoch 0's dropped
Prints one line ``RESULT checked=N wrong=W error=TYPE:message`` per rank (error empty when
none) and exits 0 unless a record was wrong.
"""

import argparse
import sys
import time

from mpi4py import MPI

import lmdbio
from stored import ranks_per_node, stored_values

p = argparse.ArgumentParser()
p.add_argument("db")
p.add_argument("variant")
p.add_argument("scenario")
p.add_argument("--batch", type=int, default=64)
p.add_argument("--prefetch", type=int, default=0)
p.add_argument("--rpn", default="None")
p.add_argument("--sleep", type=float, default=0.0)
args = p.parse_args()

comm = MPI.COMM_WORLD
values = stored_values(args.db)
checked = wrong = 0
seen: list[int] = []
held: list = []


def check(b, keep: bool = True) -> None:
    """Check ``b``'s records, and the batch held from two reads ago is still right."""
    global checked, wrong
    for i, idx in enumerate(b.indices):
        checked += 1
        wrong += bytes(b[i]) != values[int(idx)]
    if keep:
        held.append(b)
        if len(held) == 2:
            check(held.pop(0), keep=False)


error = ""
try:
    with lmdbio.Reader(args.db, args.batch, comm, variant=args.variant, prefetch=args.prefetch,
                       ranks_per_node=ranks_per_node(args.rpn), on_error="raise") as r:
        s = args.scenario
        if s == "epoch":
            for b in r.epoch(0):
                check(b)
                seen += [int(i) for i in b.indices]
        elif s == "epochs3":
            for e in range(3):
                for b in r.epoch(e):
                    if comm.rank:
                        time.sleep(args.sleep)
                    check(b)
        elif s == "between":
            for b in r.epoch(0):
                check(b)
            for _ in range(3):
                check(r.read_batch())
            for i, b in enumerate(r.epoch(1)):
                check(b)
                if i == 2:
                    break
            for _ in range(3):
                check(r.read_batch())
            for b in r.epoch(2):
                check(b)
                seen += [int(i) for i in b.indices]
        elif s == "uneven":
            stop = 4 if comm.rank == 0 else 2
            for i, b in enumerate(r.epoch(0)):
                check(b)
                if i + 1 == stop:
                    break
            for b in r.epoch(1):
                check(b)
        elif s == "overlap":
            g0 = r.epoch(0)
            for _ in range(3):
                check(next(g0))
            try:
                for b in r.epoch(1):
                    check(b)
            finally:
                del g0
        else:
            sys.exit(f"unknown scenario {s}")
except lmdbio.LmdbioError as exc:
    error = f"{type(exc).__name__}:{exc}".replace("\n", " ")
if seen:
    everyone = comm.gather(seen, root=0)
    if comm.rank == 0:
        flat = sorted(i for part in everyone for i in part)
        if flat != list(range(len(values))):
            print(f"RANK0 epoch not exactly once: {len(flat)} delivered, "
                  f"{len(set(flat))} distinct of {len(values)}", flush=True)
            wrong += 1
print(f"RESULT rank={comm.rank} checked={checked} wrong={wrong} error={error}", flush=True)
sys.exit(1 if wrong else 0)
