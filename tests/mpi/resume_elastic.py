"""Under mpiexec: ``shuffle="elastic"`` keeps one global order on any number of ranks, and a
state saved on P ranks resumes on another P.

usage: resume_elastic.py DB OUT save|resume [--stop J]

``save`` (node readers: 2 ranks per virtual node, one reader each): reads epoch 0, then J
batches of epoch 1, and writes ``OUT/state.json`` (rank 0's ``state_dict()``, the same on
every rank), ``OUT/save-P{P}.json`` (the global batches delivered: each batch the ranks'
shares in rank order) and ``OUT/shard-state.json`` (a ``"shard"`` Reader's state after one
batch). ``resume`` (per-rank reads): loads ``OUT/state.json`` into a fresh Reader, reads the
rest of epoch 1 and epoch 2, and writes ``OUT/resume-P{P}.json``; then loads
``OUT/shard-state.json``, which every rank must refuse (the shard order depends on the rank
count) with ConfigurationError naming both counts. Every record's bytes are checked against
py-lmdb's. Exit 1 on a failure, printing it.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError

from stored import stored_values

p = argparse.ArgumentParser()
p.add_argument("db")
p.add_argument("out", type=Path)
p.add_argument("step", choices=["save", "resume"])
p.add_argument("--stop", type=int, default=5)
args = p.parse_args()

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
B = 12   # divides among 1, 2, 3 and 4 ranks
SETTINGS = dict(shuffle="elastic", seed=4, shuffle_block=7, shuffle_window=3,
                shuffle_partitions=4, coalesce_bytes=1 << 16, build_provenance=True)
expected = stored_values(args.db)
failures = []


def take(batches) -> list[list[int]]:
    """The global batches of this rank's ``batches`` (every rank's shares, in rank order)."""
    mine = []
    for b in batches:
        idx = np.asarray(b.indices).tolist()
        if any(bytes(b[i]) != expected[j] for i, j in enumerate(idx)):
            failures.append(f"rank {me}: record bytes differ from py-lmdb's")
        mine.append(idx)
    everyone = comm.allgather(mine)
    return [sum((shares[t] for shares in everyone), []) for t in range(len(mine))]


if args.step == "save":
    place = dict(variant="lmdbio-lmm-dio-prov-coal", ranks_per_node=2)
    with lmdbio.Reader(args.db, B, comm, **place, **SETTINGS) as r:
        epoch0 = take(r.epoch(0))
        it = r.epoch(1)
        epoch1 = take(next(it) for _ in range(args.stop))
        it.close()
        state = r.state_dict()
    with lmdbio.Reader(args.db, B, comm, **place, **{**SETTINGS, "shuffle": "shard"}) as r:
        it = r.epoch(1)
        next(it)
        shard_state = r.state_dict()
        it.close()
    if comm.allgather(state) != [state] * P:
        failures.append(f"rank {me}: the ranks' states differ")
    if me == 0:
        (args.out / "state.json").write_text(json.dumps(state))
        (args.out / "shard-state.json").write_text(json.dumps(shard_state))
        (args.out / f"save-P{P}.json").write_text(json.dumps({"epoch0": epoch0,
                                                              "epoch1": epoch1}))
else:
    with lmdbio.Reader(args.db, B, comm, variant="lmdbio-direct", **SETTINGS) as r:
        r.load_state_dict(json.loads((args.out / "state.json").read_text()))
        rest = take(r)   # load_state_dict set the epoch that ``for b in reader`` reads
        r.set_epoch(2)
        epoch2 = take(r)
    try:
        with lmdbio.Reader(args.db, B, comm, variant="lmdbio-direct",
                           **{**SETTINGS, "shuffle": "shard"}) as r:
            r.load_state_dict(json.loads((args.out / "shard-state.json").read_text()))
        failures.append(f"rank {me}: a shard state saved on other ranks was loaded")
    except ConfigurationError as exc:
        if f"saved on 4 ranks and this Reader runs on {P}" not in str(exc):
            failures.append(f"rank {me}: unexpected message: {exc}")
        elif me == 0:
            print(f"shard state refused: {exc}")
    if me == 0:
        (args.out / f"resume-P{P}.json").write_text(json.dumps({"epoch1": rest,
                                                                "epoch2": epoch2}))

failures = sum(comm.allgather(failures), [])
if me == 0:
    print("\n".join(failures[:20]))
    print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
