"""Under mpiexec, inside ``with lmdbio.lab.storage.throttled(...)``: each rank joins its node's cgroup
and a Reader over the node views delivers the source's records.

usage: check_throttled.py TEMPLATE SOURCE_DB RANKS_PER_NODE VARIANT[,VARIANT...] OUT
TEMPLATE is ``MNT/node{node}/<dataset>``. Rank 0 writes OUT, JSON: ``{"checked": records
checked on all ranks, "failures": [...]}``. Exit status 1 on any mismatch, or when a rank
is not in its own node's cgroup.
"""

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.lab.storage import join_node

from stored import stored_values

template, source, rpn, variants, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
comm = MPI.COMM_WORLD
node = comm.rank // rpn
cgroup = join_node(node)
mine = [line for line in Path("/proc/self/cgroup").read_text().splitlines()
        if ":blkio:" in line or line.startswith("0::")]
failures = []
if not any(line.endswith("/" + Path(cgroup).parent.name + f"/node{node}") for line in mine):
    failures.append(f"rank {comm.rank} is in {mine}, not {cgroup}")

expected = stored_values(source)
n, per_rank = len(expected), 8
B = per_rank * comm.size
checked = 0
for variant in variants.split(","):
    with lmdbio.Reader(template, B, comm, variant=variant, ranks_per_node=rpn,
                       build_provenance=False) as r:
        for t in range(-(-n // B) + 2):
            b = r.read_batch()
            want = (t * B + comm.rank * per_rank + np.arange(per_rank)) % n
            if not np.array_equal(b.indices, want) or \
                    any(bytes(b[i]) != expected[want[i]] for i in range(len(b))):
                failures.append(f"{variant} batch {t}: records differ from the source")
                break
            checked += len(b)
all_failures = comm.gather(failures, root=0)
total = comm.reduce(checked, root=0)
if comm.rank == 0:
    flat = [f for fs in all_failures for f in fs]
    Path(out).write_text(json.dumps({"checked": total, "failures": flat}))
    sys.exit(1 if flat else 0)
