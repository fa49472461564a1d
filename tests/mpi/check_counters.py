"""Under mpiexec: the optimizations' counters (not times) show their mechanisms.

- DM: records walked per reader per batch do not grow with reader rank (LMM's do).
- COAL: read calls divided by the coalescing factor.
- STAG: stagger groups never overlap in their read phases (monotonic stamps).
Prints one line per check; exits 1 on any failure.
"""

import sys
from collections import defaultdict

from mpi4py import MPI

import lmdbio
from lmdbio import Options

db = sys.argv[1]
comm = MPI.COMM_WORLD
P = comm.size
B = 8 * P
fails = []


def run(batches, **kw):
    with lmdbio.Reader(db, B, comm, build_provenance=True, **kw) as r:
        for _ in range(batches):
            r.read_batch()
        rows = comm.gather(r.stats(), root=0)
        coalesce = getattr(r, "coalesce", 1)
    return ([x for rs in rows for x in rs] if comm.rank == 0 else None), coalesce


def walked_by_reader(rows):
    out = defaultdict(int)
    for x in rows:
        if x["phase"] == "locate" and x["batch"] >= 0:
            out[x["rank"]] += x.get("records_walked", 0)
    return dict(sorted(out.items()))


# DM vs LMM with one reader per rank (virtual nodes of 1).
dm, _ = run(10, variant="lmdbio-lmm-dm", ranks_per_node=1)
lmm, _ = run(10, variant="lmdbio-lmm", ranks_per_node=1)
if comm.rank == 0:
    w_dm, w_lmm = walked_by_reader(dm), walked_by_reader(lmm)
    print("DM walked per reader:", w_dm, "| LMM:", w_lmm)
    if len(set(w_dm.values())) != 1 or next(iter(w_dm.values())) != 10 * (B // P):
        fails.append(f"DM walks differ by reader or exceed the reader's own records: {w_dm}")
    if P > 1 and not (w_lmm[P - 1] > w_lmm[0]):
        fails.append(f"LMM's last reader should walk past the others' records: {w_lmm}")

# COAL vs DIO, one reader: the same bytes in fewer calls.
mean = 3087 + 1024  # a cifar10 record plus its page padding, about
k_target = 4
cb = int(B * mean * k_target * 1.2)
dio, _ = run(16, options=Options(locate="index", fetch="pread"))
coal, k = run(16, options=Options(locate="index", fetch="pread", coalesce_bytes=cb))
if comm.rank == 0:
    calls = lambda rows: sum(x["calls"] for x in rows if x["phase"] == "read")
    nbytes = lambda rows: sum(x["bytes"] for x in rows if x["phase"] == "read")
    print(f"COAL factor {k}: read calls {calls(coal)} vs DIO {calls(dio)}; "
          f"bytes {nbytes(coal)} vs {nbytes(dio)}")
    if k < 2 or calls(coal) * k > calls(dio) + k:
        fails.append(f"COAL(k={k}) did not divide read calls: {calls(coal)} vs {calls(dio)}")

# STAG: readers in groups; a group's reads start after the previous group's end.
for size in (1, 2, P):
    rows, _ = run(12, variant="lmdbio-lmm-dio-prov-coal-stag", ranks_per_node=1,
                  stagger_size=size, coalesce_bytes=1)
    if comm.rank == 0:
        reads = defaultdict(dict)
        for x in rows:
            if x["phase"] == "read":
                reads[x["batch"]][x["rank"]] = (x["t_start"], x["t_end"])
        overlaps = 0
        for t, per in reads.items():
            groups = defaultdict(list)
            for rank, iv in per.items():
                groups[rank // size].append(iv)
            order = sorted(groups)
            for g0, g1 in zip(order, order[1:]):
                if max(e for _, e in groups[g0]) > min(s for s, _ in groups[g1]):
                    overlaps += 1
        waits = sum(1 for x in rows if x["phase"] == "stagger_wait")
        print(f"STAG size {size}: {len(reads)} batches, {overlaps} overlapping group pairs, "
              f"{waits} stagger_wait rows")
        if overlaps:
            fails.append(f"STAG size {size}: groups overlapped {overlaps} times")
        if waits == 0:
            fails.append("STAG recorded no stagger_wait phase")
if comm.rank == 0:
    print("\n".join(fails) or "ok")
    sys.exit(1 if fails else 0)
