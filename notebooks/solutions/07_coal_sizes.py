# nprocs: 4
"""Exercise 07: COAL's batches per read (k), reads and bytes per preadv call against coalesce_bytes.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/07_coal_sizes.py
"""
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.pagecache import evict
from lmdbio.plan import coalesce_batches

comm = MPI.COMM_WORLD
RECORDS, BATCH, BATCHES = 4096, 64, 32
path = str(demo.dataset("cifar10", RECORDS)) if comm.rank == 0 else None   # made once, by rank 0
comm.Barrier()
path = comm.bcast(path)

result = {}
for target in (256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
    if comm.rank == 0:
        evict(f"{path}/data.mdb")
    comm.Barrier()
    with lmdbio.Reader(path, batch_size=BATCH, comm=comm, variant="lmdbio-lmm-dio-prov-coal",
                       coalesce_bytes=target) as reader:
        for _ in range(BATCHES):
            reader.read_batch()
        k = reader.coalesce
        batch_bytes = BATCH * reader.meta.file_size / reader.n   # the Reader's estimate of one batch
        reads = [r for r in reader.stats() if r["is_reader"] and r["phase"] == "read"]
    turns, calls, nbytes = (comm.allreduce(x) for x in (len(reads), sum(r["calls"] for r in reads),
                                                         sum(r["bytes"] for r in reads)))
    result[target] = (k, turns, calls, nbytes, batch_bytes)

if comm.rank == 0:
    print(f"{'target MiB':>10s} {'k':>3s} {'reads':>6s} {'preadv calls':>13s} {'MB per call':>12s} "
          f"{'coalesce_batches':>17s}")
    for target, (k, turns, calls, nbytes, batch_bytes) in result.items():
        expect = coalesce_batches(batch_bytes, target, RECORDS // BATCH)
        print(f"{target / 2**20:10.2f} {k:3d} {turns:6d} {calls:13d} {nbytes / calls / 1e6:12.2f} {expect:17d}")
        assert k == expect, f"k at {target} bytes: {k}, coalesce_batches says {expect}"
        assert turns == -(-BATCHES // k), "one read serves k batches"
    ks = [v[0] for v in result.values()]
    assert ks == sorted(ks), "k grows with the target"
    assert ks[-1] == RECORDS // BATCH, "and stops at the batches one pass of the file holds"
    print(f"k stops at {RECORDS // BATCH} batches here: the file holds {RECORDS // BATCH} batches of {BATCH}.")
