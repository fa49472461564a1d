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

Slurm::

    # ~/.config/lmdbio/slurm.yaml (or $LMDBIO_SLURM_CONFIG), any of:
    #   account: myproject
    #   partition: batch
    #   time_limit: "00:30:00"
    #   qos: normal
    #   nodes: 2                             # spread the n engines over 2 nodes
    #   tasks_per_node: 36
    #   mpi: pmi2                            # srun --mpi=pmi2 (default); "pmix", or "mpiexec"
    #   options: ["--constraint=ssd"]        # extra #SBATCH lines
    #   setup: ["module load mpich"]         # shell lines before the engines start
    # or the environment: LMDBIO_SLURM_ACCOUNT, LMDBIO_SLURM_PARTITION, LMDBIO_SLURM_TIME,
    #   LMDBIO_SLURM_QOS, LMDBIO_SLURM_NODES, LMDBIO_SLURM_TASKS_PER_NODE, LMDBIO_SLURM_MPI
    #   (these win over the file).
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
controller has one too, for the client). A
cluster is stopped through ipyparallel's shutdown request, so engines leave
through ``MPI_Finalize``; only engines that do not answer are killed, and
the MPICH shared-memory files (``/dev/shm/mpich_shm_*``) they had mapped are
then removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigurationError, LmdbioError
from .procs import pid_alive
from .scales import cluster_kind

__all__ = ["MPICluster", "run_on_engines", "slurm_settings", "SLURM_CONFIG", "EngineFailure",
           "mpiexec", "engine_process", "shm_files"]

SLURM_CONFIG = Path("~/.config/lmdbio/slurm.yaml")
_SLURM_ENV = {
    "account": "LMDBIO_SLURM_ACCOUNT",
    "partition": "LMDBIO_SLURM_PARTITION",
    "time_limit": "LMDBIO_SLURM_TIME",
    "qos": "LMDBIO_SLURM_QOS",
    "nodes": "LMDBIO_SLURM_NODES",
    "tasks_per_node": "LMDBIO_SLURM_TASKS_PER_NODE",
    "mpi": "LMDBIO_SLURM_MPI",
}
_ENGINE_KINDS = ("mpi", "slurm")
# What every engine's environment holds (the Reader raises instead of MPI_Abort on engines).
ENGINE_ENV = {"LMDBIO_ON_ERROR": "raise", "PYTHONUNBUFFERED": "1"}
# Watchdog: seconds between checks, and failed checks in a row before the engine ends.
WATCH_PERIOD = 1.0
WATCH_MISSES = 3


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
        ``nodes``, ``tasks_per_node``, ``mpi`` (``srun --mpi`` type, or
        ``mpiexec``), ``options`` (list of extra ``#SBATCH`` arguments),
        ``setup`` (shell lines).
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
                f"{path}: unknown keys {sorted(unknown)}; use {', '.join(_SLURM_ENV)}, options, setup")
        settings.update(loaded)
    for key, var in _SLURM_ENV.items():
        if env.get(var):
            settings[key] = env[var]
    for key in ("nodes", "tasks_per_node"):
        if settings.get(key) is not None:
            try:
                settings[key] = int(settings[key])
            except (TypeError, ValueError):
                raise ConfigurationError(f"Slurm setting {key} must be a whole number, "
                                         f"got {settings[key]!r}") from None
    for key in ("options", "setup"):
        value = settings.get(key, [])
        settings[key] = [value] if isinstance(value, str) else list(value)
    return settings


def _esc(text) -> str:
    """Text for an ipyparallel template (``{`` and ``}`` are its placeholders)."""
    return str(text).replace("{", "{{").replace("}", "}}")


def engine_batch_script(settings: dict) -> str:
    """The engines' Slurm batch template: one job, one MPI world over its nodes.

    ipyparallel's default script runs plain ``srun``, whose tasks do not share
    one ``COMM_WORLD``; here ``srun --mpi=<type>`` (PMI, default ``pmi2``)
    or ``mpiexec`` inside the allocation starts the ``{n}`` engines.
    """
    lines = ["#!/bin/sh", "#SBATCH --export=ALL", "#SBATCH --job-name=lmdbio-engines-{cluster_id}",
             "#SBATCH --ntasks={n}", "#SBATCH --output={output_file}"]
    for key, flag in (("account", "--account"), ("partition", "--partition"),
                      ("time_limit", "--time"), ("qos", "--qos"), ("nodes", "--nodes"),
                      ("tasks_per_node", "--ntasks-per-node")):
        if settings.get(key):
            lines.append(f"#SBATCH {flag}={_esc(settings[key])}")
    lines += [f"#SBATCH {_esc(o)}" for o in settings.get("options", [])]
    lines += [_esc(line) for line in settings.get("setup", [])]
    mpi = str(settings.get("mpi") or "pmi2")
    if mpi == "mpiexec":
        lines.append(f"{_esc(mpiexec())} -n {{n}} {{program_and_args}}")
    else:
        # block distribution: ranks of a node are consecutive (lmdbio.topology needs it)
        lines.append(f"srun --mpi={_esc(mpi)} --distribution=block {{program_and_args}}")
    return "\n".join(lines) + "\n"


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
    cfg.SlurmEngineSetLauncher.batch_template = engine_batch_script(settings)
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
                                 "(pip install 'lmdbio[mpich]') or a system MPI")
    return found


# --- engine processes: watchdog, shared-memory files ----------------------------------------------

def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def shm_files(pid: int | str = "self") -> set[str]:
    """The ``/dev/shm`` files process ``pid`` has mapped (MPICH's ``mpich_shm_*`` segments)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    out = set()
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
            out.add(parts[5].removesuffix(" (deleted)"))
    return {f for f in out if Path(f).name.startswith("mpich_shm_")}


def engine_process() -> dict:
    """Engine side: this process's host, boot id, pid and MPI rank (the client's record of it)."""
    from mpi4py import MPI

    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": os.getpid(),
            "rank": MPI.COMM_WORLD.Get_rank(), "size": MPI.COMM_WORLD.Get_size()}


def _tcp_alive(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a connection (the controller's registration port)."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _controller_address(conn_json: str) -> tuple[str, int] | None:
    """(host, registration port) from ipyparallel's ``$IPP_CONNECTION_INFO`` (None if absent)."""
    import json

    try:
        d = json.loads(conn_json)
        host = d["interface"].split("://", 1)[1]
        if host in ("*", "0.0.0.0", ""):
            host = d.get("location") or "127.0.0.1"
        return host, int(d["registration"])
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _watch(target: int, client: int | None, client_boot: str, conn_json: str) -> None:
    """The watchdog process: end ``target`` (an engine or the controller) once its client is gone.

    It is a process of its own, not a thread of the engine: an engine stuck
    in a C call that holds the GIL (``MPI_Init`` waiting for a dead peer) is
    still ended. Gone means: the client process has exited (when it runs on
    this host) or the controller no longer accepts connections, for
    ``WATCH_MISSES`` checks in a row. The target first gets ``SIGTERM`` and
    leaves through ``MPI_Finalize`` where it can; after 5 s it is killed,
    and the MPICH segments it had mapped in ``/dev/shm`` are removed.
    Returns when the target has ended, for whatever reason.
    """
    same_host = bool(client) and client_boot == _boot_id()
    controller = _controller_address(conn_json) if conn_json else None
    misses = 0
    while pid_alive(target):
        time.sleep(WATCH_PERIOD)
        gone = (same_host and not pid_alive(client)) or (
            controller is not None and not _tcp_alive(*controller))
        misses = misses + 1 if gone else 0
        if misses < WATCH_MISSES:
            continue
        mapped = shm_files(target)
        try:
            os.kill(target, signal.SIGTERM)
            deadline = time.monotonic() + 5.0
            while pid_alive(target) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(target):
                os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for f in mapped:
            try:
                os.unlink(f)
            except OSError:  # MPI_Finalize removed it
                pass
        return


def _process_main(argv: list[str]) -> None:
    """``python -m lmdbio.cluster engine|controller|watch [--opt=value ...] -- <ipyparallel args>``.

    ``engine`` and ``controller`` start a watchdog process (:func:`_watch`)
    for themselves, then run ipyparallel's engine or controller in this
    process (the PID that mpiexec or srun started).
    """
    role, rest = argv[0], argv[1:]
    ours, ipp_args = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    opts = dict(a.lstrip("-").split("=", 1) for a in ours)
    if role == "watch":
        _watch(int(opts["target"]), int(opts["client"]) if opts.get("client") else None,
               opts.get("client-boot", ""), os.environ.get("IPP_CONNECTION_INFO", ""))
        return
    import subprocess

    watch = [sys.executable, "-m", "lmdbio.cluster", "watch", f"--target={os.getpid()}",
             f"--client={opts.get('parent-pid', '')}", f"--client-boot={opts.get('parent-boot', '')}"]
    env = dict(os.environ)
    if role == "controller":
        env.pop("IPP_CONNECTION_INFO", None)
    # A process of its own (its own session, no inherited descriptors such as the PMI socket).
    subprocess.Popen(watch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    if role == "engine":
        # MPI_Init now, in a process that has no threads or sockets yet (ipengine
        # starts both): under srun's PMI this made the difference between an
        # Init that always completes and one that hung now and then.
        import importlib

        importlib.import_module("mpi4py.MPI")

        from ipyparallel.engine.app import main
        sys.argv = ["ipengine", *ipp_args]
    else:
        from ipyparallel.controller.app import main
        sys.argv = ["ipcontroller", *ipp_args]
    try:
        main()
    except RuntimeError as exc:
        # ipengine's way of ending on a shutdown request (its loop stops under
        # run_sync): a normal end, not an error; MPI_Finalize follows at exit.
        if "Event loop stopped before Future completed" not in str(exc):
            raise


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
        slurm_config: path of the Slurm YAML (see :func:`slurm_settings`).
        timeout: seconds to wait for the engines to register.
        work_dir: the engines' working directory (default: the client's).
        cluster_kwargs: passed on to :class:`ipyparallel.Cluster`.
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
        self._work_dir = str(work_dir or os.getcwd())
        self._log_level = log_level
        self._cluster_kwargs = cluster_kwargs
        self.cluster = None
        self.client = None
        self.view = None
        self.engine_ids: list[int] = []   # engine ids in MPI rank order
        self.processes: list[dict] = []   # engine_process() of each engine, in rank order
        self.removed_shm: list[str] = []  # /dev/shm files the last stop() removed
        self._scratch: str | None = None
        # Seconds to wait for the other ranks once one rank's function raised.
        self.failure_grace = 15.0

    def _config(self):
        from traitlets.config import Config

        cfg = Config()
        watch = [f"--parent-pid={os.getpid()}", f"--parent-boot={_boot_id()}", "--"]
        me = [sys.executable, "-m", "lmdbio.cluster"]
        # No per-engine nanny process: its log lines are what a stopped cluster printed.
        cfg.EngineLauncher.engine_cmd = [*me, "engine", *watch, "--IPEngine.enable_nanny=False"]
        cfg.EngineLauncher.environment = dict(ENGINE_ENV)
        # The controller ends with the client too (the watchdog), unless it is a job of its own.
        cfg.ControllerLauncher.controller_cmd = [*me, "controller", *watch]
        if self.engines == "mpi":
            cfg.MPILauncher.mpi_cmd = [mpiexec()]
        if self.engines == "slurm" or self.controller == "slurm":
            settings = slurm_settings(self._slurm_config)
            if settings.get("nodes"):  # a 1-engine cluster (dataset making) fits on one node
                settings["nodes"] = min(settings["nodes"], self.n)
            cfg.merge(_slurm_config(settings))
            # Batch scripts in a directory of ours, not in the engines' working directory.
            import tempfile

            self._scratch = tempfile.mkdtemp(prefix="lmdbio-slurm-")
            cfg.SlurmEngineSetLauncher.batch_file_name = os.path.join(self._scratch, "engines.sbatch")
            cfg.SlurmControllerLauncher.batch_file_name = os.path.join(self._scratch, "controller.sbatch")
        if self.controller == "slurm":
            cfg.ControllerLauncher.controller_cmd = [*me, "controller", "--"]
        return cfg

    # lifecycle
    def start(self) -> "MPICluster":
        """Start controller and engines, wait until all ``n`` registered, order engines by MPI rank."""
        import ipyparallel as ipp

        if self.cluster is not None:
            return self
        kwargs = dict(engines=self.engines, n=self.n, config=self._config(), log_level=self._log_level,
                      delay=0.1)
        if self.controller == "slurm":
            kwargs["controller"] = "slurm"
        elif self.engines == "slurm":
            # Engines on other nodes reach the controller where the client runs.
            kwargs.update(controller_ip="*", controller_location=socket.gethostname())
        kwargs.update(self._cluster_kwargs)
        self.cluster = ipp.Cluster(**kwargs)
        t0 = time.monotonic()
        cwd = os.getcwd()
        try:
            # Engines inherit the client's cwd: relative dataset paths mean the same there.
            os.chdir(self._work_dir)
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

    def _local_engine_pids(self) -> list[int]:
        boot = _boot_id()
        return [p["pid"] for p in self.processes if p.get("boot_id") == boot]

    def stop(self, grace: float = 10.0) -> None:
        """Stop engines and controller (safe to call twice).

        Engines get ipyparallel's shutdown request and leave through
        ``MPI_Finalize``; the job or mpiexec is then stopped, the controller
        too, and MPICH segments left in ``/dev/shm`` by engines of this host
        that did not finalize are removed.
        """
        pids = self._local_engine_pids()
        shm = set().union(*(shm_files(p) for p in pids)) if pids else set()
        if self.cluster is not None:
            log = getattr(self.cluster, "log", None)
            if log is not None and log.name.endswith(str(self.cluster.cluster_id)):
                # This cluster's own logger (in a notebook), which its launchers share: a
                # controller or engine that ends with a non-zero code on the way out would have
                # ipyparallel print its whole log into the cell. Such an end is reported below
                # in one line instead.
                log.setLevel(logging.ERROR)
        if self.client is not None:
            try:
                if self.engine_ids:
                    self.client.shutdown(targets=self.engine_ids, block=False)
                    deadline = time.monotonic() + grace
                    while any(pid_alive(p) for p in pids) \
                            and time.monotonic() < deadline:
                        time.sleep(0.1)
                    if not pids:  # engines elsewhere: let them leave before the job ends
                        time.sleep(min(grace, 3.0))
            except Exception:  # the client of a dead cluster
                pass
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
            self.view = None
        if self.cluster is not None:
            try:
                self._wait_engine_sets(grace)
                self.cluster.stop_cluster_sync()
            except Exception:  # a launcher that already ended (scancel of a finished job)
                pass
            finally:
                self._report_engine_ends()
                self.cluster.shutdown_atexit = False  # stopped: ipyparallel's atexit has nothing to say
                self.cluster = None
        self.removed_shm = []
        for f in sorted(shm):
            try:
                os.unlink(f)
                self.removed_shm.append(f)
            except OSError:  # finalized and removed by MPICH itself
                pass
        self.processes, self.engine_ids = [], []
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _report_engine_ends(self) -> None:
        """One line on stderr for engines that crashed on the way out (their work was collected).

        Seen once in many runs: libzmq's ``pfd.revents & POLLIN`` assertion aborting an
        engine while it shut down. Our own SIGTERM (after ``grace``) is not reported.
        """
        codes = set()
        for es in list(getattr(self.cluster, "engines", {}).values()):
            code = (getattr(es, "stop_data", None) or {}).get("exit_code")
            if code not in (None, 0, -signal.SIGTERM, 128 + signal.SIGTERM, signal.SIGTERM):
                codes.add(code)
        if codes:
            print(f"lmdbio: MPI engines ended with exit code {', '.join(map(str, sorted(codes)))} while "
                  "shutting down, after their results were collected", file=sys.stderr)

    def _wait_engine_sets(self, grace: float) -> None:
        """Give mpiexec / the Slurm job a moment to end on its own once its engines have left."""
        deadline = time.monotonic() + grace
        for es in list(self.cluster.engines.values()):
            proc = getattr(es, "process", None)  # psutil.Process of mpiexec (local launchers)
            while proc is not None and time.monotonic() < deadline:
                try:
                    if not proc.is_running() or proc.status() == "zombie":
                        break
                except Exception:  # gone
                    break
                time.sleep(0.1)

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
                self.stop(grace=2.0)
                raise EngineFailure(f"an engine failed and the others hung; cluster stopped.\n{error}")
            if deadline is not None and time.monotonic() > deadline:
                self.stop(grace=2.0)
                raise EngineFailure(f"engines did not finish within {timeout} s; cluster stopped")
        try:
            return ar.get()
        except Exception as exc:
            raise EngineFailure(str(exc)) from None

    def _finished_error(self, ar, checked: set) -> str:
        """The error of the first finished engine task that failed ('' when none has)."""
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


if __name__ == "__main__":
    _process_main(sys.argv[1:])
