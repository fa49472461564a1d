# nprocs: 4
# run: 8 --sizes 2,4,8
"""Exercise 08: vary stagger_size. How many groups read at the same moment, and which rule does STAG keep?

Usage, from the repository root: mpiexec -n N .venv/bin/python notebooks/solutions/08_stagger_size.py [--sizes 1,2,4]
Part 1: mpiexec -n 4 .venv/bin/python notebooks/solutions/08_stagger_size.py
Part 2: mpiexec -n 8 .venv/bin/python notebooks/solutions/08_stagger_size.py --sizes 2,4,8

Every rank is its own (virtual) node, so all N ranks are readers, and the
file is evicted before each run (cold). coalesce_bytes=1 makes each request
one batch (0 would mean the default 4 MiB, all 16 batches in two requests),
so every batch is one turn. For each group size the
table gives the groups, the most groups reading at one moment, how many
turns apart two groups reading at once were, and the time each reader
waited for its turn. STAG's rule holds at every size: a group starts turn t
only after every reader of the group before it has finished turn t. It
does not keep the groups apart in time: group 0 never waits, so while group
1 reads turn t, group 0 may already read turn t+1.
"""

import argparse

import pandas as pd
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.lessons.nb08 import overlap
from lmdbio.lab.pagecache import evict

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description="Read with STAG in groups of each size.")
parser.add_argument("--sizes", default="1,2,4", help="stagger sizes, comma-separated (default 1,2,4)")
SIZES = [int(s) for s in parser.parse_args().sizes.split(",")]
if any(s < 1 or comm.size % s for s in SIZES):
    parser.error(f"each size must divide the {comm.size} ranks: {SIZES}")

path = str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None
path = comm.bcast(path, root=0)   # rank 0 made the dataset; the others read it
comm.Barrier()

TURNS, B = 16, 256


def turn_order_broken(df: pd.DataFrame, size: int) -> int:
    """Reads that started before the group ahead of them finished the same turn (STAG forbids it)."""
    reads = df[df["phase"] == "read"].assign(group=lambda d: d["rank"] // size)
    first = reads.groupby(["group", "batch"])["t_start"].min()
    last = reads.groupby(["group", "batch"])["t_end"].max()
    return sum(int(first[(g, t)] < last[(g - 1, t)]) for g, t in first.index if (g - 1, t) in last.index)


table = []
for size in SIZES:
    if comm.rank == 0:
        evict(f"{path}/data.mdb")   # cold: every read goes to the disk
    comm.Barrier()
    with lmdbio.Reader(path, B, comm=comm, variant="lmdbio-lmm-dio-prov-coal-stag", ranks_per_node=1,
                       coalesce_bytes=1, stagger_size=size) as reader:
        for _ in range(TURNS):
            reader.read_batch()
        rows = [r for r in reader.stats() if r["phase"] in ("read", "stagger_wait")]
    rows = comm.gather(rows, root=0)
    if comm.rank == 0:
        df = pd.DataFrame([r for rank_rows in rows for r in rank_rows]).assign(stagger_size=size)
        o = overlap(df)
        wait = df[df["phase"] == "stagger_wait"].groupby("rank")["wall_s"].sum().mean()
        read = df[df["phase"] == "read"]["wall_s"].median()
        table.append(dict(stagger_size=size, groups=o["groups"], most_groups_at_once=o["most"],
                          read_ms=round(1e3 * read, 2),
                          turns_apart=o["turns_apart"], wait_ms_per_reader=round(1e3 * wait, 2),
                          order_broken=turn_order_broken(df, size)))

if comm.rank == 0:
    t = pd.DataFrame(table).set_index("stagger_size")
    print(t.to_string())
    assert list(t["groups"]) == [comm.size // s for s in SIZES], f"{comm.size} readers in groups of {SIZES}"
    assert (t["order_broken"] == 0).all(), "a group read a turn before the group ahead of it finished it"
    assert (t["most_groups_at_once"] <= t["groups"]).all()
    if comm.size in SIZES:
        one = t.loc[comm.size]
        assert one["most_groups_at_once"] == 1 and one["turns_apart"] == 0, "one group reads alone"
    print("STAG keeps each turn in group order at every size; it does not stop the groups from reading "
          "at the same moment (most_groups_at_once > 1 means they did).")
