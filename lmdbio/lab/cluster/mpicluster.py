"""MPICluster: an ipyparallel cluster of MPI engines, started and stopped as a context manager."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmdbio.errors import ConfigurationError, LmdbioError
from ..scales import cluster_kind
from . import shared, slurm, watchdog
from .engines import ENGINE_ENV, boot_id, engine_process, mpiexec, shm_files
from .stopping import (one_line_output, quiet_launcher_output, remove_files, shutdown_engines,
                       stop_launchers)

__all__ = ["MPICluster", "EngineFailure", "run_on_engines", "shared_cluster"]

_ENGINE_KINDS = ("mpi", "slurm")

#: The log filter's name before it moved to :mod:`~lmdbio.lab.cluster.stopping` (tests use it).
_one_line_output = one_line_output

#: The controller pings engines every second (ipyparallel's default: 3 s). An engine counts as
#: registered only after its first answered ping, so the period was most of a cluster's start:
#: two engines, 2 cores, 3 repeats each: 7.3-9.4 s -> 3.5-6.2 s. 30 misses keep ipyparallel's
#: 30 s before a silent engine is dropped (its heart answers from a thread of its own).
HEARTBEAT_ARGS = ["--HeartMonitor.period=1000", "--HeartMonitor.max_heartmonitor_misses=30"]


class EngineFailure(LmdbioError):
    """A function raised on one or more engines; the message holds the remote traceback."""


# --- run on engines ----------------------------------------------------------------------------

def _run_on_subcomm(func: Callable, nprocs: int, args: tuple, kwargs: dict):
    """Engine side: split COMM_WORLD into the first ``nprocs`` ranks and call ``func(subcomm, ...)``."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    color = 0 if world.Get_rank() < nprocs else MPI.UNDEFINED
    sub = world.Split(color, world.Get_rank())
    if sub == MPI.COMM_NULL:
        return None
    result = func(sub, *args, **kwargs)
    # Freeing is collective: after a failure the other ranks may never get
    # here, so a failed call leaks its communicator rather than hang.
    sub.Free()
    return result


def _world_rank() -> tuple[int, int]:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


class MPICluster:
    """An ipyparallel cluster of ``n`` MPI engines sharing one ``COMM_WORLD``.

    Args:
        n: number of engines (MPI processes).
        engines: ``"mpi"`` (local mpiexec) or ``"slurm"`` (one Slurm job);
            default ``$LMDBIO_CLUSTER`` or ``"mpi"``.
        controller: ``None`` / ``"local"`` (where the client runs, the
            default) or ``"slurm"`` (a job of its own).
        slurm_config: path of the Slurm YAML (see :func:`lmdbio.lab.cluster.slurm.slurm_settings`).
        timeout: seconds to wait for the engines to register.
        work_dir: the engines' working directory (default: the client's).
        cluster_kwargs: passed on to :class:`ipyparallel.Cluster`.

    Inside a notebook run (:mod:`lmdbio.lab.cluster.shared`) a cluster asked
    for with the runner's settings and at most its engines attaches to the
    runner's cluster, and leaving the ``with`` block only detaches; ``n``
    then bounds ``nprocs``.
    """

    def __init__(self, n: int = 4, *, engines: str | None = None, controller: str | None = None,
                 slurm_config: str | os.PathLike | None = None, timeout: float = 120.0,
                 work_dir: str | os.PathLike | None = None, log_level: int = logging.WARNING,
                 **cluster_kwargs: Any):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive number of engines, got {n!r}")
        engines = engines or cluster_kind()
        if engines not in _ENGINE_KINDS:
            raise ConfigurationError(f"engines must be one of {_ENGINE_KINDS} (or $LMDBIO_CLUSTER), "
                                     f"got {engines!r}")
        if controller not in (None, "local", "slurm"):
            raise ConfigurationError(f"controller must be None, 'local' or 'slurm', got {controller!r}")
        self.n = n
        self.engines = engines
        self.controller = controller
        self.timeout = timeout
        self._slurm_config = slurm_config
        self.work_dir = str(work_dir or os.getcwd())
        self._log_level = log_level
        self._cluster_kwargs = cluster_kwargs
        self.cluster = None
        self.client = None
        self.view = None
        self.engine_ids: list[int] = []   # engine ids in MPI rank order
        self.processes: list[dict] = []   # engine_process() of each engine, in rank order
        self.removed_shm: list[str] = []  # /dev/shm files the last stop() removed
        self.left_behind: list[str] = []  # what the last stop() could not stop or remove
        self._scratch: str | None = None
        self.shared: dict | None = None   # the runner's cluster this one is attached to
        # Seconds to wait for the other ranks once one rank's function raised.
        self.failure_grace = 15.0

    def _config(self):
        from traitlets.config import Config

        cfg = Config()
        # No per-engine nanny process: its log lines are what a stopped cluster printed.
        cfg.EngineLauncher.engine_cmd = [*watchdog.command("engine", os.getpid()),
                                         "--IPEngine.enable_nanny=False"]
        cfg.EngineLauncher.environment = dict(ENGINE_ENV)
        # The controller ends with the client too (the watchdog), unless it is a job of its own.
        cfg.ControllerLauncher.controller_cmd = [
            *watchdog.command("controller", None if self.controller == "slurm" else os.getpid()),
            *HEARTBEAT_ARGS]
        if self.engines == "mpi":
            cfg.MPILauncher.mpi_cmd = [mpiexec()]
        if self.engines == "slurm" or self.controller == "slurm":
            cfg.merge(slurm.slurm_config(slurm.slurm_settings(self._slurm_config), n=self.n))
            # Batch scripts in a directory of ours, not in the engines' working directory.
            self._scratch = tempfile.mkdtemp(prefix="lmdbio-slurm-")
            cfg.SlurmEngineSetLauncher.batch_file_name = os.path.join(self._scratch, "engines.sbatch")
            cfg.SlurmControllerLauncher.batch_file_name = os.path.join(self._scratch, "controller.sbatch")
        return cfg

    # lifecycle
    def start(self) -> MPICluster:
        """Start controller and engines, wait until all ``n`` registered, order engines by MPI rank."""
        import ipyparallel as ipp

        if self.cluster is not None or self.shared is not None:
            return self
        if not (self._cluster_kwargs or self._slurm_config) and self._attach():
            return self
        engines: Any = self.engines
        if engines == "slurm":
            from .launcher import MPISlurmEngineSetLauncher

            engines = MPISlurmEngineSetLauncher
        kwargs = dict(engines=engines, n=self.n, config=self._config(), log_level=self._log_level,
                      delay=0.1)
        if self.controller == "slurm":
            kwargs["controller"] = "slurm"
        elif self.engines == "slurm":
            # Engines on other nodes reach the controller where the client runs.
            kwargs.update(controller_ip="*", controller_location=socket.gethostname())
        kwargs.update(self._cluster_kwargs)
        self.cluster = ipp.Cluster(**kwargs)
        quiet_launcher_output(self.cluster)
        t0 = time.monotonic()
        cwd = os.getcwd()
        try:
            # Engines inherit the client's cwd: relative dataset paths mean the same there.
            os.chdir(self.work_dir)
            self.client = self.cluster.start_and_connect_sync()
            self.client.wait_for_engines(self.n, timeout=self.timeout)
            # MPI_Init happens here (the first mpi4py import): a job whose ranks
            # cannot form one world fails or hangs in it, so this wait is bounded.
            procs = self._wait(self.client[:].apply_async(engine_process), self.timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            os.chdir(cwd)
        sizes = {p["size"] for p in procs}
        if sizes != {self.n}:
            self.stop()
            raise LmdbioError(
                f"the {self.n} engines do not share one MPI COMM_WORLD (sizes {sorted(sizes)}); "
                "mpi4py must be built against the MPI that launches the engines (on Slurm: "
                "set mpi: in the Slurm config to the PMI your MPI speaks, or mpiexec)")
        order = sorted(zip((p["rank"] for p in procs), self.client.ids, procs), key=lambda t: t[0])
        self.engine_ids = [eid for _, eid, _ in order]
        self.processes = [p for _, _, p in order]
        self.view = self.client[self.engine_ids]
        self.view.block = True
        self.start_seconds = time.monotonic() - t0
        return self

    def _attach(self) -> bool:
        """Attach to the runner's cluster if it serves this request and its engines answer."""
        import ipyparallel as ipp

        desc = shared.fitting(self.n, self.engines, self.controller, self.work_dir)
        if desc is None:
            return False
        try:
            client = ipp.Client(desc["connection"], timeout=10)
        except OSError:  # TimeoutError: its controller is gone, so start our own
            return False
        if not set(desc["engine_ids"]) <= set(client.ids):
            client.close()
            return False
        self.shared, self.client = desc, client
        self.engine_ids, self.processes = desc["engine_ids"], desc["processes"]
        self.view = client[self.engine_ids]   # all of them: run() splits their COMM_WORLD
        self.view.block = True
        self.start_seconds = desc["start_seconds"]   # what starting such a cluster cost
        return True

    def close(self) -> None:
        """End this use: detach from the runner's cluster (it keeps running), stop one of our own."""
        if self.shared is None:
            self.stop()
            return
        self._close_client()
        self.shared, self.engine_ids, self.processes = None, [], []

    def _take_over_shared(self, left: list[str]) -> None:
        """Load the runner's launchers so that :meth:`stop` ends its cluster (hung engines)."""
        import ipyparallel as ipp

        desc, self.shared = self.shared, None
        shared.forget(desc)
        try:
            self.cluster = ipp.Cluster.from_file(desc["cluster_file"], log_level=self._log_level)
        except (OSError, ValueError, KeyError) as exc:
            left.append(f"the notebook run's cluster {desc['cluster_id']} ({type(exc).__name__}: {exc})")
            return
        quiet_launcher_output(self.cluster)

    def _local_engine_pids(self) -> list[int]:
        boot = boot_id()
        return [p["pid"] for p in self.processes if p.get("boot_id") == boot]

    def stop(self, grace: float = 10.0) -> None:
        """Stop engines and controller (safe to call twice).

        Engines get ipyparallel's shutdown request and leave through
        ``MPI_Finalize``; the job or mpiexec is then stopped, the controller
        too, and MPICH segments left in ``/dev/shm`` by engines of this host
        that did not finalize are removed. What could not be stopped or
        removed is listed in :attr:`left_behind` and printed in one line on
        stderr. An attached cluster stops the runner's (as after hung
        ranks); the kernel's next MPICluster then starts its own.
        """
        pids = self._local_engine_pids()
        shm = set().union(*(shm_files(p) for p in pids)) if pids else set()
        left: list[str] = []
        if self.shared is not None:
            self._take_over_shared(left)
        try:
            try:
                if self.client is not None:
                    try:
                        shutdown_engines(self.client, self.engine_ids, pids, grace)
                    finally:
                        self._close_client()
            finally:
                if self.cluster is not None:
                    try:
                        stop_launchers(self.cluster, grace, left)
                    finally:
                        self.cluster = None
        finally:
            self.removed_shm = remove_files(shm, left)
            self.processes, self.engine_ids = [], []
            if self._scratch:
                try:
                    shutil.rmtree(self._scratch)
                except OSError as exc:
                    left.append(f"{self._scratch} ({exc.strerror})")
                self._scratch = None
            self.left_behind = left
            if left:
                print(f"lmdbio: stopping the cluster left behind: {'; '.join(left)}", file=sys.stderr)

    def _close_client(self) -> None:
        try:
            self.client.close()
        finally:
            self.client = None
            self.view = None

    def __enter__(self) -> MPICluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "stopped" if self.view is None else "running" if self.shared is None else \
            f"attached to the notebook run's {len(self.engine_ids)} engines"
        return f"MPICluster(n={self.n}, engines={self.engines!r}, {state})"

    # running
    def _require(self):
        if self.view is None:
            raise LmdbioError("the cluster is not running; use `with MPICluster(n) as cluster:` or .start()")

    def run(self, func: Callable, nprocs: int | None = None, /, *args, timeout: float | None = None,
            **kwargs) -> list:
        """Run ``func(subcomm, *args, **kwargs)`` on the first ``nprocs`` engines.

        The engines split ``COMM_WORLD`` so ``subcomm`` holds ranks 0..nprocs-1;
        the others take no part. ``func`` must be importable on the engines
        (define it in a module, e.g. ``lmdbio.lab.bench.run_point``).

        Returns:
            the ``nprocs`` return values, in sub-communicator rank order.
        Raises:
            EngineFailure: ``func`` raised on an engine. If the other ranks are
                stuck in a collective, they are interrupted after a grace
                period and the cluster is stopped.
        """
        self._require()
        nprocs = self.n if nprocs is None else nprocs
        if not 1 <= nprocs <= self.n:
            raise ValueError(f"nprocs must be in 1..{self.n} (the cluster's engines), got {nprocs}")
        ar = self.view.apply_async(_run_on_subcomm, func, nprocs, args, kwargs)
        results = self._wait(ar, timeout)
        return results[:nprocs]

    def run_root(self, func: Callable, nprocs: int | None = None, /, *args, **kwargs):
        """Like :meth:`run`, returning rank 0's value only (e.g. rows gathered to rank 0)."""
        return self.run(func, nprocs, *args, **kwargs)[0]

    def apply(self, func: Callable, /, *args, **kwargs):
        """Call ``func(*args, **kwargs)`` on engine rank 0 alone (no communicator)."""
        self._require()
        ar = self.client[self.engine_ids[0]].apply_async(func, *args, **kwargs)
        return self._wait(ar, None)

    def _wait(self, ar, timeout: float | None):
        grace = self.failure_grace
        deadline = None if timeout is None else time.monotonic() + timeout
        failed_at, error, checked = None, "", set()
        while not ar.ready():
            ar.wait(0.2)
            if failed_at is None:
                error = self._finished_error(ar, checked)
                if error:
                    failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > grace:
                # One rank raised, the rest wait in a collective that will never
                # complete: the MPI job cannot recover, so end the cluster.
                self.stop(grace=2.0)
                raise EngineFailure(f"an engine failed and the others hung; cluster stopped.\n{error}")
            if deadline is not None and time.monotonic() > deadline:
                self.stop(grace=2.0)
                raise EngineFailure(f"engines did not finish within {timeout} s; cluster stopped")
        from ipyparallel.error import IPythonError

        try:
            return ar.get()
        except IPythonError as exc:  # a remote error, or an engine that died
            raise EngineFailure(str(exc)) from None

    def _finished_error(self, ar, checked: set) -> str:
        """The error of the first finished engine task that failed ('' when none has)."""
        from ipyparallel.error import IPythonError

        for m in ar.msg_ids:
            if m in checked or m in self.client.outstanding:
                continue
            try:
                self.client.get_result(m).get(0)
            except (KeyError, TimeoutError):
                # Left ``outstanding`` a moment ago, its reply not stored (KeyError) or not
                # marked ready (TimeoutError from get(0)) yet: ipyparallel's thread does these
                # steps apart. Look again on the next round.
                continue
            except IPythonError as exc:  # the remote error, re-raised here
                checked.add(m)
                return f"{type(exc).__name__}: {exc}"
            checked.add(m)
        return ""



def run_on_engines(cluster: MPICluster, func: Callable, nprocs: int, /, *args, **kwargs) -> list:
    """Run ``func(subcomm, *args, **kwargs)`` on the first ``nprocs`` engines of ``cluster``."""
    return cluster.run(func, nprocs, *args, **kwargs)


@contextmanager
def shared_cluster(n: int, work_dir: str | os.PathLike, **kwargs) -> Iterator[MPICluster]:
    """Start a cluster of ``n`` engines and name it in ``$LMDBIO_SHARED_CLUSTER`` (which kernels
    started meanwhile inherit); on leaving, unset it and stop the cluster, also after a failure."""
    old = os.environ.pop(shared.SHARED_ENV, None)   # this cluster is the runner's own, never attached
    try:
        with tempfile.TemporaryDirectory(prefix="lmdbio-shared-") as tmp, \
                MPICluster(n, work_dir=work_dir, **kwargs) as cluster:
            path = Path(tmp) / "cluster.json"
            path.write_text(json.dumps(shared.describe(cluster)))
            os.environ[shared.SHARED_ENV] = str(path)
            yield cluster
    finally:
        if old is None:
            os.environ.pop(shared.SHARED_ENV, None)
        else:
            os.environ[shared.SHARED_ENV] = old
