"""Under mpiexec: a job stopped after batch j and resumed on a fresh Reader, every shuffle mode.

usage: resume_modes.py DB --configs VARIANT@RPN:RPR:PREFETCH,... --modes file,window,...
                       --stops J,J [--agreement]

For each config and mode, and each stop j of epoch 1: every rank takes j batches of epoch 1
and breaks out, saves ``state_dict()`` through JSON and closes the Reader; a fresh Reader
built with the same arguments loads it and reads the rest of epoch 1, then epoch 2. Checks,
on every rank: the states are the same on every rank; the stopped and the resumed batches
together are this rank's shares of epoch 1's order (``EpochPlan.order``, sliced as
``lmdbio.shuffle.rank_batches`` does), batch for batch, so across the ranks every record
comes once, in the order of an uninterrupted epoch; epoch 2 is its order's shares; every
resumed record's bytes are py-lmdb's. A stop past the epoch's last batch stands for the
last one. ``--agreement`` (2 ranks or more): rank 0 and the others load states of different
batches, then the last rank a state of another batch size: every rank raises
ConfigurationError, naming the mismatch, and none hangs. Rank 0 prints the failures and
"N failures"; exit 1 on a failure.
"""

import argparse
import json
import sys

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio import shuffle as sh
from lmdbio.errors import ConfigurationError
from lmdbio.pipeline import EpochPlan

from stored import ranks_per_node, stored_values

p = argparse.ArgumentParser()
p.add_argument("db")
p.add_argument("--configs", default="lmdbio-direct@None:1:0")
p.add_argument("--modes", default="file,window,shard,elastic")
p.add_argument("--stops", default="5,99")   # >= 1
p.add_argument("--per-rank", type=int, default=3)
p.add_argument("--agreement", action="store_true")
args = p.parse_args()

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
expected = stored_values(args.db)
n = len(expected)
B = args.per_rank * P
# 64 KiB requests: several batches per chunk, so a stop falls inside a chunk.
COMMON = dict(seed=3, shuffle_block=7, shuffle_window=3, shuffle_partitions=8,
              coalesce_bytes=1 << 16, build_provenance=True)
failures = []


def fail(what: str) -> None:
    failures.append(f"rank {me}: {what}")


def shares(state: dict, epoch: int) -> list[list[int]]:
    """This rank's share of each batch of ``epoch`` in the order ``state`` is of."""
    plan = EpochPlan(shuffle=state["shuffle"] or False, seed=state["seed"],
                     block=state["block"], window=state["window"],
                     last_batch=state["last_batch"], partitions=state["partitions"])
    order = plan.order(n, state["block"], epoch, B, P)
    return [s.tolist() for s in sh.rank_batches(order, B, P, me, state["last_batch"])]


def check_bytes(batch, what: str) -> None:
    idx = np.asarray(batch.indices).tolist()
    if any(bytes(batch[i]) != expected[j] for i, j in enumerate(idx)):
        fail(f"{what}: record bytes differ from py-lmdb's")


for config in args.configs.split(","):
    variant, topo = config.split("@")
    rpn, rpr, prefetch = topo.split(":")
    kw = dict(variant=variant, ranks_per_node=ranks_per_node(rpn), readers_per_node=int(rpr),
              prefetch=int(prefetch), **COMMON)
    for mode in args.modes.split(","):
        kw["shuffle"] = False if mode == "file" else mode
        for stop in map(int, args.stops.split(",")):
            what = f"{config} {mode} stop {stop}"
            with lmdbio.Reader(args.db, B, comm, **kw) as r:
                first = []
                for b in r.epoch(1):
                    first.append(np.asarray(b.indices).tolist())
                    if len(first) == stop:
                        break
                state = json.loads(json.dumps(r.state_dict()))
            if comm.allgather(state) != [state] * P:
                fail(f"{what}: the ranks' states differ")
            want1, want2 = shares(state, 1), shares(state, 2)
            j = len(first)
            if (state["epoch"], state["batches"]) != (1, j):
                fail(f"{what}: state at epoch {state['epoch']} batch {state['batches']}, "
                     f"not 1, {j}")
            with lmdbio.Reader(args.db, B, comm, **kw) as r:
                r.load_state_dict(state)
                rest = []
                for b in r.epoch(1):
                    check_bytes(b, what)
                    rest.append(np.asarray(b.indices).tolist())
                second = [np.asarray(b.indices).tolist() for b in r.epoch(2)]
            if first + rest != want1:
                fail(f"{what}: epoch 1 stopped after {j} and resumed ({len(rest)} more batches) "
                     f"differs from the uninterrupted order ({len(want1)} batches)")
            if second != want2:
                fail(f"{what}: epoch 2 after the resumed one differs from its order")
            everyone = comm.gather(first + rest, root=0)
            if me == 0:
                flat = sorted(i for shares_ in everyone for bt in shares_ for i in bt)
                if flat != list(range(n)):
                    fail(f"{what}: epoch 1 does not deliver every record once")

if args.agreement and P > 1:
    kw = dict(variant="lmdbio-direct", shuffle="elastic", **COMMON)
    with lmdbio.Reader(args.db, B, comm, **kw) as r:
        state = r.state_dict()
    for case in ("different batches", "another batch size"):
        mine = dict(state)
        if case == "different batches":
            mine["batches"] = 1 if me == 0 else 2
        elif me == P - 1:
            mine["batch_size"] = B + P
        try:
            with lmdbio.Reader(args.db, B, comm, **kw) as r:
                r.load_state_dict(mine)
            fail(f"agreement, {case}: load_state_dict raised nothing")
        except ConfigurationError as exc:
            msg = str(exc)
            need = ("loaded different states" if case == "different batches"
                    else f"batch_size {B + P} in the state, {B} here")
            if need not in msg or (case != "different batches" and me != P - 1
                                   and f"rank {P - 1}:" not in msg):
                fail(f"agreement, {case}: unexpected message: {msg}")
            if me == 0:
                print(f"agreement, {case}: rank 0: {msg}")

failures = sum(comm.allgather(failures), [])
if me == 0:
    print("\n".join(failures[:20]))
    print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
