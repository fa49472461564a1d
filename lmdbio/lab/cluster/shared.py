"""One cluster per notebook run: the runner starts it, each ``MPICluster()`` in the kernel attaches to it.

Starting and stopping a cluster costs seconds (6.6 s for two local engines
on 2 cores), and a notebook opens several ``with MPICluster(n)`` blocks (one
per cell that measures, one per measured setting). The notebook runner
therefore starts one cluster per notebook (:func:`lmdbio.lab.cluster.mpicluster.shared_cluster`) and names
its description in ``$LMDBIO_SHARED_CLUSTER``; an ``MPICluster(n)`` that it
fits (:func:`fitting`: same engine kind, controller and working directory,
at least ``n`` engines) attaches to it and on leaving its block only closes
its client. Outside a runner the variable is unset and nothing changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["SHARED_ENV", "describe", "fitting", "forget"]

#: The path of the shared cluster's description (JSON), set by the runner for its kernels.
SHARED_ENV = "LMDBIO_SHARED_CLUSTER"


def describe(cluster) -> dict:
    """What a client needs to attach to a started :class:`MPICluster` and, if need be, to stop it."""
    c = cluster.cluster
    connection = json.loads(Path(c.controller.connection_files["client"]).read_text())
    return {"engines": cluster.engines, "controller": cluster.controller,
            "work_dir": os.path.realpath(cluster.work_dir), "n": cluster.n,
            "engine_ids": cluster.engine_ids, "processes": cluster.processes,
            "start_seconds": cluster.start_seconds, "connection": connection,
            "cluster_id": c.cluster_id, "cluster_file": c.cluster_file}


def fitting(n: int, engines: str, controller: str | None, work_dir: str) -> dict | None:
    """The shared cluster named by ``$LMDBIO_SHARED_CLUSTER`` if it serves this request, else None."""
    path = os.environ.get(SHARED_ENV)
    if not path:
        return None
    try:
        desc = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # the run that wrote it has ended
        return None
    same = (desc["engines"], desc["controller"], desc["work_dir"]) == (
        engines, controller, os.path.realpath(work_dir))
    return {**desc, "path": path} if same and n <= desc["n"] else None


def forget(desc: dict) -> None:
    """This process attaches to ``desc`` no more (it was stopped): its next MPICluster starts its own."""
    if os.environ.get(SHARED_ENV) == desc["path"]:
        del os.environ[SHARED_ENV]
