# nprocs: 4
"""Exercise 06: the index pages a reader's setup reads with DIO and with PROV, at two file sizes.

Run from the repository root: mpiexec -n 4 .venv/bin/python notebooks/solutions/06_prov_pages.py
DIO's setup walks the record index (branch and leaf pages: ``pages_read``) at every open. PROV's
first open of a sidecar checks it against the file (``prov_check_pages``) and stamps it; a later
open of the same file version walks nothing.
"""
import os
import shutil
import tempfile

from mpi4py import MPI

import lmdbio
from lmdbio.lab.lessons import demo
from lmdbio.lab.pagecache import evict

comm = MPI.COMM_WORLD
SIZES = (2048, 8192)
paths = [str(demo.dataset("cifar10", n)) for n in SIZES] if comm.rank == 0 else None   # rank 0 makes them
comm.Barrier()
paths = comm.bcast(paths)
# A fresh stamp cache, so each PROV first open checks its sidecar as a first open ever does.
os.environ["LMDBIO_CACHE"] = comm.bcast(tempfile.mkdtemp(prefix="lmdbio-ex06-") if comm.rank == 0 else None)

result = {}
for n, path in zip(SIZES, paths):
    for label, variant in (("DIO", "lmdbio-lmm-dio"), ("PROV, first open", "lmdbio-lmm-dio-prov"),
                           ("PROV, next open", "lmdbio-lmm-dio-prov")):
        if comm.rank == 0:
            evict(f"{path}/data.mdb")
        comm.Barrier()
        with lmdbio.Reader(path, batch_size=64, comm=comm, variant=variant) as reader:
            reader.read_batch()
            setup = [r for r in reader.stats() if r["phase"] == "setup"]
        walked = comm.allreduce(sum(r.get("pages_read", 0) for r in setup))
        checked = comm.allreduce(sum(r.get("prov_check_pages", 0) for r in setup))
        result[n, label] = (walked, checked)
comm.Barrier()
if comm.rank == 0:
    shutil.rmtree(os.environ["LMDBIO_CACHE"])   # the fresh stamp cache goes with the run

if comm.rank == 0:
    print(f"{'records':>7s}  {'setup':16s} {'index pages walked':>18s} {'sidecar pages checked':>21s}")
    for (n, label), (walked, checked) in result.items():
        print(f"{n:7d}  {label:16s} {walked:18d} {checked:21d}")
    small, large = result[SIZES[0], "DIO"][0], result[SIZES[1], "DIO"][0]
    print(f"DIO's pass grows {large / small:.1f}x for {SIZES[1] // SIZES[0]}x the records; at 1,000,000 "
          f"records it would read about {large * 1_000_000 / SIZES[1]:,.0f} pages at every open.")
    assert large > 3 * small, "DIO's index pass grows with the file"
    for n in SIZES:
        assert result[n, "PROV, first open"] == (0, result[n, "DIO"][0]), \
            "a first open walks no index but checks the sidecar against every index page, once"
        assert result[n, "PROV, next open"] == (0, 0), "a stamped sidecar: PROV's setup reads no page"
