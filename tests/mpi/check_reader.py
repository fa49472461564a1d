"""Under mpiexec: every variant and topology delivers exactly the partition's records.

usage: check_reader.py --variants A,B --topologies None:1,1:1,2:2 --extra 3 DB [DB ...]
Each rank compares its batches with a py-lmdb list of the database over more
batches than one epoch (wrap-around). Exit status 1 on any mismatch.
"""

import argparse
import sys

import numpy as np
from mpi4py import MPI

import lmdbio

from stored import ranks_per_node, stored_values

p = argparse.ArgumentParser()
p.add_argument("dbs", nargs="+")
p.add_argument("--variants", default=",".join(lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS))
p.add_argument("--topologies", default="None:1")
p.add_argument("--per-rank", type=int, default=8)
p.add_argument("--extra", type=int, default=3, help="batches past one epoch")
p.add_argument("--coalesce-bytes", type=int, default=None)
p.add_argument("--stagger-size", type=int, default=None)
args = p.parse_args()

comm = MPI.COMM_WORLD
failures = []
checked = 0
for db in args.dbs:
    expected = stored_values(db)
    n = len(expected)
    B = args.per_rank * comm.size
    batches = -(-n // B) + args.extra
    for variant in args.variants.split(","):
        for topo in args.topologies.split(","):
            rpn_s, rpr_s = topo.split(":")
            rpn = ranks_per_node(rpn_s)
            with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn,
                               readers_per_node=int(rpr_s), coalesce_bytes=args.coalesce_bytes,
                               stagger_size=args.stagger_size, build_provenance=True) as r:
                for t in range(batches):
                    b = r.read_batch()
                    first = t * B + comm.rank * args.per_rank
                    want_idx = (first + np.arange(args.per_rank)) % n
                    if len(b) != args.per_rank or not np.array_equal(b.indices, want_idx):
                        failures.append(f"{db} {variant} {topo} batch {t}: indices {b.indices}")
                        break
                    bad = [i for i in range(len(b)) if bytes(b[i]) != expected[want_idx[i]]]
                    if bad:
                        failures.append(f"{db} {variant} {topo} batch {t}: records {bad} differ")
                        break
                    checked += len(b)
all_failures = comm.gather(failures, root=0)
total = comm.reduce(checked, root=0)
if comm.rank == 0:
    flat = [f for fs in all_failures for f in fs]
    for f in flat[:20]:
        print("MISMATCH", f, file=sys.stderr)
    print(f"checked {total} records on {comm.size} ranks; {len(flat)} failures")
    sys.exit(1 if flat else 0)
