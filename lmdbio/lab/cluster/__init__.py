"""ipyparallel clusters of MPI engines: start/stop as a context manager, run on sub-communicators.

The notebooks measure on *engines*, never in the client: the client starts
one cluster of ``n`` MPI engines (one ``COMM_WORLD``) and runs each point of
an experiment on the first ``nprocs`` of them, over a sub-communicator made
by ``COMM_WORLD.Split``. One cluster thus serves every process count
P = 1..n. LMDB is opened on the engines only (py-lmdb warns against using an
environment across fork/spawn).

Local (default)::

    with MPICluster(n=4) as cluster:
        rows = cluster.run(lmdbio.lab.bench.run_point, 2, dataset=..., variant="lmdb", ...)

Slurm (settings: :mod:`lmdbio.lab.cluster.slurm`)::

    with MPICluster(n=72, engines="slurm") as cluster:
        ...

On Slurm the ``n`` engines are one batch job whose ranks share one MPI
``COMM_WORLD`` across its nodes (``srun --mpi=pmi2`` by default, or
``mpiexec`` inside the allocation); the controller runs where the client
runs and listens on every interface. ``LMDBIO_CLUSTER=slurm`` makes Slurm
the default for every ``MPICluster()`` (``notebook_runner --cluster slurm``
sets it), so the notebooks run unchanged on a cluster.

Engines and their end: every engine runs with ``LMDBIO_ON_ERROR=raise`` (an
error inside ``with Reader`` raised on every rank reaches the notebook and
leaves the engines usable) and a watchdog process that ends the engine within
seconds when the client process (same host) or the controller is gone (the
controller has one too, for the client). A cluster is stopped through ipyparallel's shutdown request, so engines leave
through ``MPI_Finalize``; only engines that do not answer are killed, and
the MPICH shared-memory files (``/dev/shm/mpich_shm_*``) they had mapped are
then removed.

A notebook run (``lmdbio.lab.notebook_runner``) starts one cluster per
notebook; each ``MPICluster(n)`` in the notebook attaches to it and leaves it
running (:mod:`~lmdbio.lab.cluster.shared`).

Modules: :mod:`~lmdbio.lab.cluster.mpicluster` (MPICluster),
:mod:`~lmdbio.lab.cluster.shared` (one cluster per notebook run),
:mod:`~lmdbio.lab.cluster.slurm` (Slurm settings), :mod:`~lmdbio.lab.cluster.launcher`
(ipyparallel's Slurm launcher as one MPI world), :mod:`~lmdbio.lab.cluster.watchdog`
(engines end with their client), :mod:`~lmdbio.lab.cluster.engines` (mpiexec,
engine records, MPICH segments), :mod:`~lmdbio.lab.cluster.stopping` (how a cluster ends).
"""

from __future__ import annotations

from .engines import (ENGINE_ENV, engine_process, hydra_files, mpich_segments, mpiexec, parent_pid,
                      remove_orphan_segments, shm_files)
from .mpicluster import EngineFailure, MPICluster, run_on_engines, shared_cluster
from .shared import SHARED_ENV
from .slurm import SLURM_CONFIG, slurm_settings

__all__ = ["MPICluster", "run_on_engines", "slurm_settings", "SLURM_CONFIG", "EngineFailure",
           "mpiexec", "engine_process", "shm_files", "hydra_files", "parent_pid", "mpich_segments",
           "remove_orphan_segments", "ENGINE_ENV", "shared_cluster", "SHARED_ENV"]
