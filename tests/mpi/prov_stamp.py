"""Under mpiexec: PROV's verified stamp through a sequence of opens (issue 19, C5).

usage: prov_stamp.py DB RANKS_PER_NODE VARIANT   (RANKS_PER_NODE: None or a number)
``LMDBIO_CACHE`` must name an empty cache. Each step opens a Reader, reads
one epoch plus a batch and compares every record with py-lmdb's cursor. Rank
0 prints one line per (step, rank): ``<step> rank <r>: ok share=<..>
stamp=<..> wrong=<n>`` with the setup row's ``prov_check_share`` and
``prov_stamp`` (None on a rank that does not read the file), or the error
type and message the Reader raised there.
Steps, in order:

- ``first``: no stamp yet (full check, then written);
- ``second``: the same sidecar and file (the stamp stands in);
- ``distrust``: every rank but 0 sets ``LMDBIO_TRUST_CHECKS=0``;
- ``forged``: rank 0 swaps two records' extents in the sidecar, digest recomputed;
- ``honest``: rank 0 rewrites the honest sidecar (same digest as ``first``);
- ``touched``: rank 0 touches data.mdb (new mtime and ctime);
- ``rewritten``: rank 0 writes data.mdb's bytes back in place (new ctime only);
- ``garbage``: rank 0 overwrites every stamp with garbage.
"""

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.errors import LmdbioError
from lmdbio.recordindex import build_index
from lmdbio.provenance import from_index, sidecar_path, write_provenance
from lmdbio.verified import cache_dir

from stored import ranks_per_node, stored_values

db, rpn_s, variant = sys.argv[1], sys.argv[2], sys.argv[3]
rpn = ranks_per_node(rpn_s)
comm = MPI.COMM_WORLD
expected = stored_values(db)
n, per = len(expected), 4
B = per * comm.size
data = Path(db) / "data.mdb"


def forge():
    idx = build_index(db)
    idx = replace(idx, offsets=idx.offsets.copy(), sizes=idx.sizes.copy())
    a, b = 101, 203   # inside chunks: the per-chunk check of first and last records misses them
    for arr in (idx.offsets, idx.sizes):
        arr[[a, b]] = arr[[b, a]]
    from_index(idx).save(sidecar_path(idx.path))


def touch():
    os.utime(data)


def rewrite():
    body = data.read_bytes()
    with open(data, "r+b") as f:
        f.write(body)


def garbage():
    for stamp in (cache_dir() / "prov-verified").glob("*.json"):
        stamp.write_bytes(b"\x00not a stamp{")


STEPS = [("first", None), ("second", None), ("distrust", None), ("forged", forge),
         ("honest", lambda: write_provenance(db)), ("touched", touch), ("rewritten", rewrite),
         ("garbage", garbage)]

for step, change in STEPS:
    comm.Barrier()
    if change is not None and comm.rank == 0:
        change()
    comm.Barrier()
    if step == "distrust" and comm.rank > 0:
        os.environ["LMDBIO_TRUST_CHECKS"] = "0"
    try:
        with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn) as r:
            wrong = 0
            for t in range(-(-n // B) + 1):
                b = r.read_batch()
                want = (t * B + comm.rank * per + np.arange(per)) % n
                if not np.array_equal(b.indices, want):
                    wrong += per
                    continue
                wrong += sum(bytes(b[i]) != expected[int(want[i])] for i in range(len(b)))
            setup = next(row for row in r.stats() if row.get("phase") == "setup")
            got = (f"ok share={setup.get('prov_check_share')} stamp={setup.get('prov_stamp')} "
                   f"wrong={wrong}")
    except LmdbioError as exc:
        got = f"{type(exc).__name__}: {exc}"
    os.environ.pop("LMDBIO_TRUST_CHECKS", None)
    for rank, g in enumerate(comm.gather(got, root=0) or []):
        print(f"{step} rank {rank}: {g}", flush=True)
