"""Engine-side checks (notebook 00): where each rank runs, and MPI-3 shared memory at work."""

from __future__ import annotations

import os
import socket
import sys
import time

__all__ = ["engine_info", "check_shared_memory"]


def engine_info(comm) -> dict:
    """Where this rank runs: host, pid, rank, CPU affinity, Python/MPI/LMDB versions, Slurm node."""
    import lmdb
    import mpi4py
    from mpi4py import MPI

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {
        "rank": comm.Get_rank(), "size": comm.Get_size(), "host": socket.gethostname(),
        "pid": os.getpid(), "cpus": ",".join(map(str, affinity)),
        "python": sys.version.split()[0], "mpi4py": mpi4py.__version__,
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi_standard": "{}.{}".format(*MPI.Get_version()), "py_lmdb": lmdb.__version__,
        "liblmdb": ".".join(map(str, lmdb.version())),
        # On Slurm: the node as Slurm names it (two "nodes" may share a hostname).
        "slurm_node": os.environ.get("SLURMD_NODENAME", ""),
        "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
    }


def check_shared_memory(comm, nbytes: int = 1 << 20) -> dict:
    """MPI-3 shared memory: each rank writes its rank into its slice, every rank reads all.

    This is the mechanism of LMDBIO-LMM (``MPI_Win_allocate_shared`` on the
    ``MPI_COMM_TYPE_SHARED`` communicator). Returns this rank's view: node
    size, whether all slices were visible, and the bandwidth of one
    memcpy-sized read of a neighbour's slice.
    """
    import numpy as np
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        # One segment owned by node rank 0 (as LMDBIO's reader owns the batch buffer).
        size = nbytes * node.Get_size() if node.Get_rank() == 0 else 0
        win = MPI.Win.Allocate_shared(size, 1, comm=node)
        try:
            buf, _ = win.Shared_query(0)
            whole = np.frombuffer(buf, dtype=np.uint8, count=nbytes * node.Get_size())
            mine = whole[node.Get_rank() * nbytes:(node.Get_rank() + 1) * nbytes]
            win.Fence()
            mine[:] = node.Get_rank() % 251
            win.Fence()
            node.Barrier()
            seen = [int(whole[r * nbytes]) for r in range(node.Get_size())]
            ok = seen == [r % 251 for r in range(node.Get_size())]
            nxt = (node.Get_rank() + 1) % node.Get_size()
            t0 = time.perf_counter()
            copy = whole[nxt * nbytes:(nxt + 1) * nbytes].copy()
            dt = time.perf_counter() - t0
            ok = ok and bool(copy[0] == nxt % 251)
            win.Fence()
        finally:
            win.Free()
        return {"rank": comm.Get_rank(), "node_rank": node.Get_rank(), "node_size": node.Get_size(),
                "host": socket.gethostname(), "all_slices_visible": ok,
                "copy_gb_per_s": nbytes / dt / 1e9 if dt > 0 else float("nan")}
    finally:
        node.Free()
