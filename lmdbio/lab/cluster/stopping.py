"""How a cluster ends: engines asked to leave, launchers stopped, what did not stop named."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

from ..procs import pid_alive

__all__ = ["one_line_output", "describe_launcher", "quiet_launcher_output", "shutdown_engines",
           "stop_launchers", "remove_files"]


def one_line_output(record: logging.LogRecord) -> bool:
    """Shorten ipyparallel's "Output for <launcher>:\\n<log>" records to their first line."""
    if isinstance(record.msg, str) and record.msg.startswith("Output for %s:") and record.args:
        record.msg = "lmdbio: %s ended with a non-zero exit code (its output is not shown)"
        record.args = record.args[:1]
    return True


def describe_launcher(launcher) -> str:
    """A launcher as a person finds it: its Slurm job id or its process id."""
    job = getattr(launcher, "job_id", "")
    if job:
        return f"Slurm job {job} of {type(launcher).__name__} (see squeue -j {job}; scancel {job})"
    pid = getattr(launcher, "pid", None) or getattr(getattr(launcher, "process", None), "pid", None)
    return f"{type(launcher).__name__} process {pid}" if pid else type(launcher).__name__


def _own_log(cluster):
    """The cluster's own logger (which its launchers share), or None."""
    log = getattr(cluster, "log", None)
    return log if log is not None and log.name.endswith(str(cluster.cluster_id)) else None


def quiet_launcher_output(cluster) -> None:
    """Launchers that end with a non-zero code are reported in one line, not with their log.

    ipyparallel logs the last 100 lines of mpiexec's output when it ends with a
    non-zero code, which happens on its own event-loop thread, at any time
    after the engines were asked to leave. In a notebook that log lands in the cell.
    """
    log = _own_log(cluster)
    if log is not None:
        log.addFilter(one_line_output)


def shutdown_engines(client, engine_ids: list[int], pids: list[int], grace: float) -> None:
    """ipyparallel's shutdown request to every engine; wait up to ``grace`` s for them to leave."""
    from ipyparallel.error import NoEnginesRegistered

    if not engine_ids:
        return
    try:
        client.shutdown(targets=engine_ids, block=False)
    except (NoEnginesRegistered, IndexError):
        # The engines have already unregistered (a dead cluster): the launchers end them.
        return
    deadline = time.monotonic() + grace
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not pids:  # engines elsewhere: let them leave before the job ends
        time.sleep(min(grace, 3.0))


def stop_launchers(cluster, grace: float, left: list[str]) -> None:
    """Stop mpiexec or the Slurm job, and the controller; name in ``left`` those that did not stop."""
    from ipyparallel.cluster.launcher import LauncherError

    log = _own_log(cluster)
    if log is not None:
        # This cluster's own logger (in a notebook), which its launchers share: a controller
        # or engine that ends with a non-zero code on the way out would have ipyparallel
        # print its whole log into the cell. Such an end is reported in one line instead.
        log.setLevel(logging.ERROR)
    try:
        _wait_engine_sets(cluster, grace)
        cluster.stop_cluster_sync()
    except (LauncherError, subprocess.CalledProcessError, OSError, TimeoutError) as exc:
        # ipyparallel drops a launcher once it has stopped: those still held did not.
        left += [f"{describe_launcher(launcher)} ({type(exc).__name__}: {exc})"
                 for launcher in [*cluster.engines.values(), cluster.controller] if launcher]
    finally:
        _report_engine_ends(cluster)
        cluster.shutdown_atexit = False  # stopped: ipyparallel's atexit has nothing to say


def _report_engine_ends(cluster) -> None:
    """One line on stderr for engines that crashed on the way out (their work was collected).

    Seen once in many runs: libzmq's ``pfd.revents & POLLIN`` assertion aborting an
    engine while it shut down. Our own SIGTERM (after ``grace``) is not reported.
    """
    codes = set()
    for es in list(getattr(cluster, "engines", {}).values()):
        code = (getattr(es, "stop_data", None) or {}).get("exit_code")
        if code not in (None, 0, -signal.SIGTERM, 128 + signal.SIGTERM, signal.SIGTERM):
            codes.add(code)
    if codes:
        print(f"lmdbio: MPI engines ended with exit code {', '.join(map(str, sorted(codes)))} while "
              "shutting down, after their results were collected", file=sys.stderr)


def _wait_engine_sets(cluster, grace: float) -> None:
    """Give mpiexec / the Slurm job a moment to end on its own once its engines have left."""
    import psutil

    deadline = time.monotonic() + grace
    for es in list(cluster.engines.values()):
        proc = getattr(es, "process", None)  # psutil.Process of mpiexec (local launchers)
        while proc is not None and time.monotonic() < deadline:
            try:
                if not proc.is_running() or proc.status() == "zombie":
                    break
            except psutil.NoSuchProcess:  # gone and reaped
                break
            time.sleep(0.1)


def remove_files(files, left: list[str]) -> list[str]:
    """Remove ``files`` (MPICH segments); returns those removed, naming in ``left`` those that
    could not be."""
    removed = []
    for f in sorted(files):
        try:
            os.unlink(f)
            removed.append(f)
        except FileNotFoundError:  # finalized and removed by MPICH itself
            pass
        except OSError as exc:
            left.append(f"{f} ({exc.strerror})")
    return removed
