"""Under mpiexec: every epoch delivers every record exactly once across the ranks.

usage: epoch_check.py --variants A,B --topologies None:1,2:1 --policies short,pad,drop
                      --per-rank 5 [--shuffle [--mode shard]] [--epochs 2] DB
For each (variant, topology, policy) every rank reads the epochs, checks each
record's bytes against a py-lmdb listing, and rank 0 checks the gathered
indices: the multiset per epoch (exactly once for short; the pad repeats; drop's
missing tail), the same order on every rank (each rank's shares are the slices
of lmdbio.shuffle's order: epoch_order, or shard_order for --mode shard), and that
shuffled epochs differ. Exit 1 on a failure.
"""

import argparse
import sys
from collections import Counter

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio import shuffle as sh

from stored import ranks_per_node, stored_values

p = argparse.ArgumentParser()
p.add_argument("db")
p.add_argument("--variants", default="lmdbio-direct")
p.add_argument("--topologies", default="None:1")
p.add_argument("--policies", default="short,pad,drop")
p.add_argument("--per-rank", type=int, default=5)
p.add_argument("--shuffle", action="store_true")
p.add_argument("--mode", default="window", choices=["window", "shard"])
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--chunk", type=int, default=7)
p.add_argument("--window", type=int, default=3)
p.add_argument("--prefetch", type=int, default=0)
args = p.parse_args()

comm = MPI.COMM_WORLD
expected = stored_values(args.db)
n = len(expected)
B = args.per_rank * comm.size
SHUFFLE = (True if args.mode == "window" else args.mode) if args.shuffle else False
failures = []
for variant in args.variants.split(","):
    for topo in args.topologies.split(","):
        rpn_s, rpr_s = topo.split(":")
        rpn = ranks_per_node(rpn_s)
        for policy in args.policies.split(","):
            what = f"{variant} {topo} {policy} shuffle={SHUFFLE} prefetch={args.prefetch}"
            seen = []
            with lmdbio.Reader(args.db, B, comm, variant=variant, ranks_per_node=rpn,
                               readers_per_node=int(rpr_s), build_provenance=True,
                               shuffle=SHUFFLE, seed=3, shuffle_block=args.chunk,
                               shuffle_window=args.window, last_batch=policy,
                               prefetch=args.prefetch) as r:
                for e in range(args.epochs):
                    mine = []
                    r.set_epoch(e)
                    for b in r:
                        idx = np.asarray(b.indices).tolist()
                        if any(bytes(b[i]) != expected[j] for i, j in enumerate(idx)):
                            failures.append(f"{what} epoch {e}: record bytes differ")
                        mine.append(idx)
                    seen.append(mine)
                r.read_batch()   # the endless stream still reads after the epochs
            everyone = comm.gather(seen, root=0)
            if comm.rank != 0:
                continue
            orders = []
            for e in range(args.epochs):
                if SHUFFLE == "shard":
                    order = sh.shard_order(n, args.chunk, args.window, 3, e, B, comm.size, policy)
                elif SHUFFLE:
                    order = sh.epoch_order(n, args.chunk, args.window, 3, e)
                else:
                    order = np.arange(n)
                orders.append(order)
                want = [sh.rank_batches(order, B, comm.size, k, policy) for k in range(comm.size)]
                got = [everyone[k][e] for k in range(comm.size)]
                if got != [[w.tolist() for w in ws] for ws in want]:
                    failures.append(f"{what} epoch {e}: shares differ from lmdbio.shuffle's")
                flat = Counter(i for k in range(comm.size) for bt in got[k] for i in bt)
                full, rest = divmod(n, B)
                if policy == "short" and flat != Counter(range(n)):
                    failures.append(f"{what} epoch {e}: not every record exactly once")
                if policy == "drop" and flat != Counter(order[:full * B].tolist()):
                    failures.append(f"{what} epoch {e}: drop delivered {sum(flat.values())}")
                padded = Counter(list(range(n)) + order[:(B - rest) % B].tolist())
                if policy == "pad" and flat != padded:
                    failures.append(f"{what} epoch {e}: pad delivered the wrong multiset")
            if args.shuffle and args.epochs > 1 and np.array_equal(orders[0], orders[1]):
                failures.append(f"{what}: epochs 0 and 1 in the same order")
            if args.shuffle and np.array_equal(orders[0], np.arange(n)):
                failures.append(f"{what}: the shuffled epoch is in file order")

failures = comm.bcast(failures, root=0)
if comm.rank == 0:
    print("\n".join(failures[:20]))
    print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
