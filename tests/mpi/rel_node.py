"""Under mpiexec: ``{node}`` in the Reader path is the rank's node number (issue 10).

usage: rel_node.py ROOT NAME
ROOT/node0/NAME and ROOT/node1/NAME hold the same database. Every variant,
with virtual nodes of one rank and with real nodes, must read the path of
the rank's node and deliver the right records. Verdict (tests/mpi/verdict.py): each
rank's problems.
"""

import sys

import numpy as np
from mpi4py import MPI

import lmdbio

from stored import stored_values
from verdict import conclude

root, name = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
expected = stored_values(f"{root}/node0/{name}")
per_rank = 4
B = per_rank * comm.size
problems = []
for variant in lmdbio.VARIANTS:
    for rpn in (1, None):
        want_node = comm.rank // rpn if rpn else 0
        with lmdbio.Reader(f"{root}/node{{node}}/{name}", B, comm, variant=variant,
                           ranks_per_node=rpn) as r:
            if f"/node{want_node}/" not in str(r.path):
                problems.append(f"{variant} rpn={rpn}: path {r.path}, wanted node{want_node}")
            for t in range(3):
                b = r.read_batch()
                want = (t * B + comm.rank * per_rank + np.arange(per_rank)) % len(expected)
                if [bytes(v) for v in b] != [expected[i] for i in want]:
                    problems.append(f"{variant} rpn={rpn} batch {t}: records differ")
conclude(comm, problems, not problems)
