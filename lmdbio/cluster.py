"""ipyparallel clusters of MPI engines: start/stop as a context manager, run on sub-communicators.

The notebooks measure on *engines*, never in the client: the client starts
one cluster of ``n`` MPI engines (one ``COMM_WORLD``) and runs each point of
an experiment on the first ``nprocs`` of them, over a sub-communicator made
by ``COMM_WORLD.Split``. One cluster thus serves every process count
P = 1..n. LMDB is opened on the engines only (py-lmdb warns against using an
environment across fork/spawn).

Local (default)::

    with MPICluster(n=4) as cluster:
        rows = cluster.run(lmdbio.bench.run_point, 2, dataset=..., variant="lmdb", ...)

Slurm (documented, not tested here)::

    # ~/.config/lmdbio/slurm.yaml (or $LMDBIO_SLURM_CONFIG), any of:
    #   account: myproject
    #   partition: batch
    #   time_limit: "00:30:00"
    #   qos: normal
    #   options: ["--constraint=ssd"]        # extra #SBATCH lines
    #   setup: ["module load mpich"]         # shell lines before the engines start
    # or the environment: LMDBIO_SLURM_ACCOUNT, LMDBIO_SLURM_PARTITION,
    #   LMDBIO_SLURM_TIME, LMDBIO_SLURM_QOS (these win over the file).
    with MPICluster(n=72, engines="slurm", controller="slurm") as cluster:
        ...

On Slurm the engines start under ``srun`` and must share one MPI job: build
mpi4py against the site's MPI (``pip install --no-binary=mpi4py mpi4py``)
rather than the ``mpich`` wheel, which does not speak the site's PMI.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigurationError, LmdbioError

__all__ = ["MPICluster", "run_on_engines", "slurm_settings", "SLURM_CONFIG", "EngineFailure",
           "mpiexec"]

SLURM_CONFIG = Path("~/.config/lmdbio/slurm.yaml")
_SLURM_ENV = {
    "account": "LMDBIO_SLURM_ACCOUNT",
    "partition": "LMDBIO_SLURM_PARTITION",
    "time_limit": "LMDBIO_SLURM_TIME",
    "qos": "LMDBIO_SLURM_QOS",
}
_ENGINE_KINDS = ("mpi", "slurm")


class EngineFailure(LmdbioError):
    """A function raised on one or more engines; the message holds the remote traceback."""


def slurm_settings(config_file: str | os.PathLike | None = None,
                   env: dict | None = None) -> dict:
    """Slurm settings from the user's config file, overridden by ``LMDBIO_SLURM_*`` variables.

    Nothing is hard-coded: a key neither file nor environment sets is left to
    the site's defaults. The file is YAML, at ``$LMDBIO_SLURM_CONFIG`` or
    ``~/.config/lmdbio/slurm.yaml``.

    Returns:
        a dict with any of ``account``, ``partition``, ``time_limit``, ``qos``,
        ``options`` (list of extra ``#SBATCH`` arguments), ``setup`` (shell lines).
    """
    env = os.environ if env is None else env
    path = Path(config_file or env.get("LMDBIO_SLURM_CONFIG") or SLURM_CONFIG).expanduser()
    settings: dict = {}
    if path.exists():
        import yaml

        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"{path} must hold a YAML mapping (account: ..., partition: ...)")
        unknown = set(loaded) - {*_SLURM_ENV, "options", "setup"}
        if unknown:
            raise ConfigurationError(
                f"{path}: unknown keys {sorted(unknown)}; use account, partition, time_limit, qos, "
                "options, setup")
        settings.update(loaded)
    for key, var in _SLURM_ENV.items():
        if env.get(var):
            settings[key] = env[var]
    for key in ("options", "setup"):
        value = settings.get(key, [])
        settings[key] = [value] if isinstance(value, str) else list(value)
    return settings


def _slurm_config(settings: dict):
    """traitlets Config for ipyparallel's Slurm launchers from :func:`slurm_settings`."""
    from traitlets.config import Config

    cfg = Config()
    for launcher in ("SlurmEngineSetLauncher", "SlurmControllerLauncher"):
        section = cfg[launcher]
        if settings.get("account"):
            section.account = str(settings["account"])
        if settings.get("partition"):
            section.queue = str(settings["partition"])
        if settings.get("time_limit"):
            section.timelimit = str(settings["time_limit"])
        if settings.get("qos"):
            section.qos = str(settings["qos"])
    if settings["options"] or settings["setup"]:
        # Our own engine batch script (ipyparallel inserts account/partition/time
        # only into its default one): the site's extra #SBATCH lines and setup
        # (modules, venv activation) before srun starts the engines.
        def esc(text: str) -> str:
            return str(text).replace("{", "{{").replace("}", "}}")

        lines = ["#!/bin/sh", "#SBATCH --export=ALL", "#SBATCH --job-name=ipengine-{cluster_id}",
                 "#SBATCH --ntasks={n}"]
        for key, flag in (("account", "--account"), ("partition", "--partition"),
                          ("time_limit", "--time"), ("qos", "--qos")):
            if settings.get(key):
                lines.append(f"#SBATCH {flag}={esc(settings[key])}")
        lines += [f"#SBATCH {esc(o)}" for o in settings["options"]]
        lines += [esc(line) for line in settings["setup"]]
        lines.append("srun {program_and_args}")
        cfg.SlurmEngineSetLauncher.batch_template = "\n".join(lines) + "\n"
    return cfg


def mpiexec() -> str:
    """The mpiexec that matches this Python's mpi4py: next to it (the mpich wheel), else on PATH."""
    # The mpich wheel puts mpiexec next to the venv's python; a notebook
    # kernel's PATH does not always include that directory.
    local = Path(sys.executable).with_name("mpiexec")
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if found is None:
        raise ConfigurationError("no mpiexec found next to python or on PATH; install the mpich wheel "
                                 "(pip install mpich) or a system MPI")
    return found


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
        engines: ``"mpi"`` (local mpiexec, the default) or ``"slurm"``.
        controller: ``None`` (local controller) or ``"slurm"``.
        slurm_config: path of the Slurm YAML (see :func:`slurm_settings`).
        timeout: seconds to wait for the engines to register.
        work_dir: the engines' working directory (default: the client's).
        cluster_kwargs: passed on to :class:`ipyparallel.Cluster`.
    """

    def __init__(self, n: int = 4, *, engines: str = "mpi", controller: str | None = None,
                 slurm_config: str | os.PathLike | None = None, timeout: float = 120.0,
                 work_dir: str | os.PathLike | None = None, log_level: int = logging.WARNING,
                 **cluster_kwargs: Any):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive number of engines, got {n!r}")
        if engines not in _ENGINE_KINDS:
            raise ConfigurationError(f"engines must be one of {_ENGINE_KINDS}, got {engines!r}")
        if controller not in (None, "local", "slurm"):
            raise ConfigurationError(f"controller must be None, 'local' or 'slurm', got {controller!r}")
        self.n = n
        self.engines = engines
        self.controller = controller
        self.timeout = timeout
        self._slurm_config = slurm_config
        self._work_dir = str(work_dir or os.getcwd())
        self._log_level = log_level
        self._cluster_kwargs = cluster_kwargs
        self.cluster = None
        self.client = None
        self.view = None
        self.engine_ids: list[int] = []   # engine ids in MPI rank order
        # Seconds to wait for the other ranks once one rank's function raised.
        self.failure_grace = 15.0

    # lifecycle
    def start(self) -> "MPICluster":
        """Start controller and engines, wait until all ``n`` registered, order engines by MPI rank."""
        import ipyparallel as ipp
        from traitlets.config import Config

        if self.cluster is not None:
            return self
        cfg = Config()
        if self.engines == "mpi":
            cfg.MPILauncher.mpi_cmd = [mpiexec()]
        if self.engines == "slurm" or self.controller == "slurm":
            cfg.merge(_slurm_config(slurm_settings(self._slurm_config)))
        kwargs = dict(engines=self.engines, n=self.n, config=cfg, log_level=self._log_level, delay=0.1)
        if self.controller == "slurm":
            kwargs["controller"] = "slurm"
        kwargs.update(self._cluster_kwargs)
        self.cluster = ipp.Cluster(**kwargs)
        t0 = time.monotonic()
        cwd = os.getcwd()
        try:
            # Engines inherit the client's cwd: relative dataset paths mean the same there.
            os.chdir(self._work_dir)
            self.client = self.cluster.start_and_connect_sync()
            self.client.wait_for_engines(self.n, timeout=self.timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            os.chdir(cwd)
        ranks = self.client[:].apply_sync(_world_rank)
        sizes = {size for _, size in ranks}
        if sizes != {self.n}:
            self.stop()
            raise LmdbioError(
                f"the {self.n} engines do not share one MPI COMM_WORLD (sizes {sorted(sizes)}); "
                "mpi4py must be built against the MPI that launches the engines")
        order = sorted(zip((r for r, _ in ranks), self.client.ids))
        self.engine_ids = [eid for _, eid in order]
        self.view = self.client[self.engine_ids]
        self.view.block = True
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop engines and controller (safe to call twice)."""
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # closing a client of a dead cluster
                pass
            self.client = None
            self.view = None
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()
            finally:
                self.cluster = None

    def __enter__(self) -> "MPICluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.view is not None else "stopped"
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
        (define it in a module, e.g. ``lmdbio.bench.run_point``).

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
                self.stop()
                raise EngineFailure(f"an engine failed and the others hung; cluster stopped.\n{error}")
            if deadline is not None and time.monotonic() > deadline:
                self.stop()
                raise EngineFailure(f"engines did not finish within {timeout} s; cluster stopped")
        try:
            return ar.get()
        except Exception as exc:
            raise EngineFailure(str(exc)) from None

    def _finished_error(self, ar, checked: set) -> str:
        """The error of the first finished engine task that failed ('' when none has)."""
        self.client.spin()
        for m in ar.msg_ids:
            if m in checked or m in self.client.outstanding:
                continue
            checked.add(m)
            try:
                self.client.get_result(m).get(0)
            except Exception as exc:  # the remote error, re-raised here
                return f"{type(exc).__name__}: {exc}"
        return ""


def run_on_engines(cluster: MPICluster, func: Callable, nprocs: int, /, *args, **kwargs) -> list:
    """Run ``func(subcomm, *args, **kwargs)`` on the first ``nprocs`` engines of ``cluster``."""
    return cluster.run(func, nprocs, *args, **kwargs)
