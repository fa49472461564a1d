"""Under mpiexec: a forged provenance sidecar never yields a wrong record (issue 23, F1).

usage: rel_forged.py DB RANKS_PER_NODE VARIANT [VARIANT ...]   (RANKS_PER_NODE: None or a number)
Each rank reads one epoch plus two batches with each variant and compares every
record with py-lmdb's cursor. Verdict (tests/mpi/verdict.py): each rank's ``{variant:
{"checked", "wrong", "variant", "locate", "refused"}}`` (the variant and locate used, whether
the sidecar was refused), or ``{"error": "TYPE: message"}`` the Reader raised there.
"""

import sys

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError

from stored import ranks_per_node, stored_values
from verdict import conclude

db, rpn_s, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
rpn = ranks_per_node(rpn_s)
comm = MPI.COMM_WORLD
expected = stored_values(db)
n, per = len(expected), 4
B = per * comm.size
outcomes = {}
for variant in variants:
    comm.Barrier()
    try:
        with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn) as r:
            wrong = checked = 0
            for t in range(-(-n // B) + 2):
                b = r.read_batch()
                want = (t * B + comm.rank * per + np.arange(per)) % n
                if not np.array_equal(b.indices, want):
                    wrong += per
                    continue
                wrong += sum(bytes(b[i]) != expected[int(want[i])] for i in range(len(b)))
                checked += len(b)
            last = r.stats()[-1]
            got = {"checked": checked, "wrong": wrong, "variant": r.variant,
                   "locate": last.get("direct_locate", "-"),
                   "refused": "provenance_refused" in last}
    except LmdbioError as exc:
        got = {"error": f"{type(exc).__name__}: {exc}"}
    outcomes[variant] = got
conclude(comm, outcomes)
