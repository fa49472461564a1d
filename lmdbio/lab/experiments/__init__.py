"""Engine-side experiments the notebooks run on an :class:`~lmdbio.lab.cluster.MPICluster`.

Each ``func(comm, ...)`` here runs on a sub-communicator of the engines
(LMDB is opened on the engines only); the ``cluster``-taking helpers split a
list of points by process count and run them there.

Modules: :mod:`~lmdbio.lab.experiments.engine` (engine checks),
:mod:`~lmdbio.lab.experiments.datasets` (making and describing datasets),
:mod:`~lmdbio.lab.experiments.sweeps` (bench points and Reader timelines),
:mod:`~lmdbio.lab.experiments.settings` (a claim notebook's storage settings and tables).
"""

from __future__ import annotations

from .datasets import (describe_dataset, describe_datasets, ensure_dataset, ensure_datasets,
                       page_types, prov_model_table)
from .engine import check_shared_memory, engine_info
from .settings import (NO_PFS_ENV, emulated_pfs, model_series, pfs_unavailable, setting_table,
                       settings_results, throttle_iters, throttle_unavailable, throttled_device)
from .sweeps import by_nprocs, reader_timeline, run_timelines, sweep, sweep_timelines

__all__ = ["engine_info", "check_shared_memory", "ensure_dataset", "ensure_datasets", "page_types",
           "describe_dataset", "describe_datasets", "by_nprocs", "sweep", "reader_timeline",
           "run_timelines", "sweep_timelines", "prov_model_table", "pfs_unavailable",
           "emulated_pfs", "throttle_unavailable", "throttle_iters", "throttled_device",
           "setting_table", "settings_results", "model_series", "NO_PFS_ENV"]

#: The name :func:`run_timelines` had (tests run it on the engines).
_timelines = run_timelines
