"""The watchdog: an engine or controller ends within seconds once its client or controller is gone.

Every engine and the local controller run as::

    python -m lmdbio.lab.cluster.watchdog engine|controller --parent-pid=P --parent-boot=B -- <ipyparallel args>

which starts a watchdog process (``... watchdog watch --target=<own pid> ...``)
and then runs ipyparallel's engine or controller in the same process (the
PID that mpiexec or srun started).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from ..procs import pid_alive
from .engines import boot_id, shm_files

__all__ = ["WATCH_PERIOD", "WATCH_MISSES", "watch", "command", "main"]

#: Seconds between checks, and failed checks in a row before the target ends.
WATCH_PERIOD = 1.0
WATCH_MISSES = 3
#: Seconds between SIGTERM and SIGKILL.
TERM_GRACE = 5.0


def command(role: str, parent_pid: int | None = None) -> list[str]:
    """The command line that runs ``role`` (``engine`` or ``controller``) under a watchdog.

    ``parent_pid`` is the client process the role ends with (``None``: it
    ends with the controller only, e.g. a controller that is a Slurm job of
    its own). Ipyparallel's own arguments follow.
    """
    watched = [f"--parent-pid={parent_pid}", f"--parent-boot={boot_id()}"] if parent_pid else []
    return [sys.executable, "-m", "lmdbio.lab.cluster.watchdog", role, *watched, "--"]


def _tcp_alive(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a connection (the controller's registration port)."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _controller_address(conn_json: str) -> tuple[str, int] | None:
    """(host, registration port) from ipyparallel's ``$IPP_CONNECTION_INFO`` (None if absent)."""
    try:
        d = json.loads(conn_json)
        host = d["interface"].split("://", 1)[1]
        if host in ("*", "0.0.0.0", ""):
            host = d.get("location") or "127.0.0.1"
        return host, int(d["registration"])
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _end(target: int) -> None:
    """SIGTERM ``target`` (it leaves through ``MPI_Finalize`` where it can), SIGKILL after a grace."""
    try:
        os.kill(target, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        while pid_alive(target) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(target):
            os.kill(target, signal.SIGKILL)
    except ProcessLookupError:  # it ended by itself meanwhile
        return


def watch(target: int, client: int | None, client_boot: str, conn_json: str) -> None:
    """End ``target`` (an engine or the controller) once its client is gone.

    It is a process of its own, not a thread of the engine: an engine stuck
    in a C call that holds the GIL (``MPI_Init`` waiting for a dead peer) is
    still ended. Gone means: the client process has exited (when it runs on
    this host) or the controller no longer accepts connections, for
    ``WATCH_MISSES`` checks in a row. The MPICH segments the target had
    mapped in ``/dev/shm`` are removed once it has ended. Returns when the
    target has ended, for whatever reason.
    """
    same_host = bool(client) and client_boot == boot_id()
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
        _end(target)
        for f in mapped:
            try:
                os.unlink(f)
            except FileNotFoundError:  # MPI_Finalize removed it
                pass
            except OSError as exc:  # nobody to tell but the log of a detached process
                print(f"lmdbio watchdog: could not remove {f}: {exc}", file=sys.stderr)
        return


def _run_ipyparallel(role: str, ipp_args: list[str]) -> None:
    """Run ipyparallel's engine or controller in this process."""
    if role == "engine":
        # MPI_Init now, in a process that has no threads or sockets yet (ipengine
        # starts both): under srun's PMI this made the difference between an
        # Init that always completes and one that hung now and then.
        import importlib

        importlib.import_module("mpi4py.MPI")

        from ipyparallel.engine.app import main as ipp_main
        sys.argv = ["ipengine", *ipp_args]
    else:
        from ipyparallel.controller.app import main as ipp_main
        sys.argv = ["ipcontroller", *ipp_args]
    try:
        ipp_main()
    except RuntimeError as exc:
        # ipengine's way of ending on a shutdown request (its loop stops under
        # run_sync): a normal end, not an error; MPI_Finalize follows at exit.
        if "Event loop stopped before Future completed" not in str(exc):
            raise


def main(argv: list[str]) -> None:
    """``engine|controller|watch [--opt=value ...] -- <ipyparallel args>``."""
    if not argv or argv[0] not in ("engine", "controller", "watch"):
        raise SystemExit("usage: python -m lmdbio.lab.cluster.watchdog engine|controller|watch "
                         "[--parent-pid=P --parent-boot=B | --target=T --client=C --client-boot=B] "
                         "-- <ipyparallel args>")
    role, rest = argv[0], argv[1:]
    ours, ipp_args = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    opts = dict(a.lstrip("-").split("=", 1) for a in ours)
    if role == "watch":
        watch(int(opts["target"]), int(opts["client"]) if opts.get("client") else None,
              opts.get("client-boot", ""), os.environ.get("IPP_CONNECTION_INFO", ""))
        return
    watcher = [sys.executable, "-m", "lmdbio.lab.cluster.watchdog", "watch", f"--target={os.getpid()}",
               f"--client={opts.get('parent-pid', '')}", f"--client-boot={opts.get('parent-boot', '')}"]
    env = dict(os.environ)
    if role == "controller":
        env.pop("IPP_CONNECTION_INFO", None)
    # A process of its own (its own session, no inherited descriptors such as the PMI socket).
    subprocess.Popen(watcher, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    _run_ipyparallel(role, ipp_args)


if __name__ == "__main__":
    main(sys.argv[1:])
