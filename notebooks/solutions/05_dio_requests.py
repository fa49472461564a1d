# nprocs: 4
"""Exercise 05: read requests per batch and bytes per request with and without DIO, on CIFAR-10.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/05_dio_requests.py
LMM's requests are page faults (minor + major) in the reader's locate and read phases; DIO's are
its preadv calls. Both read the same records cold, at two global batch sizes.
"""
from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.pagecache import evict

comm = MPI.COMM_WORLD
path = str(demo.dataset("cifar10", 4096)) if comm.rank == 0 else None   # made once, by rank 0
comm.Barrier()
path = comm.bcast(path)
BATCHES = 8

result = {}
for batch in (64, 256):
    for variant in ("lmdbio-lmm", "lmdbio-lmm-dio"):
        if comm.rank == 0:
            evict(f"{path}/data.mdb")
        comm.Barrier()
        with lmdbio.Reader(path, batch_size=batch, comm=comm, variant=variant) as reader:
            for _ in range(BATCHES):
                reader.read_batch()
            rows = [r for r in reader.stats() if r["is_reader"] and r["phase"] in ("locate", "read")]
        faults = sum(r["minflt"] + r["majflt"] for r in rows)
        preads = sum(r["calls"] for r in rows if r["phase"] == "read")
        nbytes = sum(r["bytes"] for r in rows if r["phase"] == "read")
        req, nbytes = (comm.allreduce(x) for x in (faults if variant == "lmdbio-lmm" else preads, nbytes))
        result[variant, batch] = (req / BATCHES, nbytes / max(req, 1))

if comm.rank == 0:
    print(f"{'variant':16s} {'batch':>5s} {'requests/batch':>15s} {'KiB/request':>12s}")
    for (variant, batch), (per_batch, per_req) in result.items():
        print(f"{variant:16s} {batch:5d} {per_batch:15.1f} {per_req / 1024:12.1f}")
    for batch in (64, 256):
        lmm, dio = result["lmdbio-lmm", batch], result["lmdbio-lmm-dio", batch]
        assert dio[0] < lmm[0], f"batch {batch}: DIO makes fewer requests than LMM's faults"
        assert dio[1] > lmm[1], f"batch {batch}: DIO's requests are larger than a fault"
    # DIO's request follows the batch (one extent per batch); a fault's size does not.
    assert result["lmdbio-lmm-dio", 256][1] > 2 * result["lmdbio-lmm-dio", 64][1], result
    assert result["lmdbio-lmm", 256][1] < 2 * result["lmdbio-lmm", 64][1], result
