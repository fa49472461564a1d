"""A made setting's lifetime: the janitor, building on error, the Holder and SIGTERM."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from collections.abc import Callable

from lmdbio.errors import LmdbioError
from ..paths import REPO
from .blockdev import evict_file, flush_device, mount_points
from .statefile import save_state

__all__ = ["remove_workdir", "start_janitor", "building", "on_sigterm", "Holder", "held"]


def remove_workdir(work: str | None, problems: list[str]) -> None:
    """Delete the work folder (images, mount points, the state file) unless it holds a mount."""
    if work and os.path.isdir(work):
        if any(m == work or m.startswith(work + "/") for m in mount_points()):
            problems.append(f"{work} still holds a mount; not removed")
        else:
            shutil.rmtree(work, ignore_errors=True)


def start_janitor(state_file: str) -> tuple[subprocess.Popen, int]:
    """A process that cleans up after this one; returns it and the pipe end to close at the end.

    It runs ``python -m lmdbio.lab.storage janitor STATE``: it waits for EOF on
    the pipe (this process's end), then runs the cleanup of the state's kind.
    """
    r, w = os.pipe()    # not inheritable: only the janitor holds the read end, only we the write end
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lmdbio.lab.storage", "janitor", state_file],
                                stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(REPO)]
                                    + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    finally:
        os.close(r)
    return proc, w


@contextlib.contextmanager
def building(state: dict, cleanup: Callable):
    """``with building(state, cleanup) as (janitor, pipe_w):`` make a setting.

    Saves the state and starts the janitor; on any error inside, removes what
    the state records, ends the janitor and re-raises.
    """
    save_state(state)
    janitor, pipe_w = start_janitor(state["state_file"])
    try:
        yield janitor, pipe_w
    except BaseException:
        cleanup(state)
        with contextlib.suppress(OSError):
            os.close(pipe_w)
        with contextlib.suppress(subprocess.TimeoutExpired):
            janitor.wait(timeout=15)
        raise


def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)   # so finally blocks (and the cleanup) run


class Holder:
    """A made setting: ``mnt``, ``path(node, relpath)``, ``evict``, ``close`` (a context manager).

    A subclass names ``state_env`` (the variable :func:`held` sets to the
    state file), ``what`` (for messages) and ``cleanup`` (its module's).
    """

    state_env: str
    what: str
    cleanup: Callable[[dict], list[str]]

    def __init__(self, state: dict, profile, janitor: subprocess.Popen | None, pipe_w: int | None):
        self._state = state
        self.profile = profile
        self.mnt: str = state["mnt"]
        self.nodes: int = state["nodes"]
        self.devices: list[str] = list(state["devices"])
        self.state_file: str = state["state_file"]
        self._janitor = janitor
        self._pipe_w = pipe_w
        self._closed = False
        self._old_env = None
        self._old_term = None
        atexit.register(self.close)

    def path(self, node: int | str = 0, relpath: str = "") -> str:
        """``MNT/node{node}[/relpath]``; ``node='{node}'`` gives a Reader path template."""
        base = os.path.join(self.mnt, f"node{node}")
        return os.path.join(base, relpath) if relpath else base

    def evict(self, node: int | None = None, relpath: str = "") -> int:
        """Make node ``node`` (every node if None) cold for ``relpath`` (file or folder); file count."""
        count = 0
        for k in (range(self.nodes) if node is None else [int(node)]):
            p = Path(self.path(k, relpath))
            files = [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.is_file()]
            for f in files:
                evict_file(f)
            flush_device(self.devices[k])
            count += len(files)
        return count

    def close(self) -> None:
        """Remove everything the state records; the janitor then ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_env is not None:
            os.environ.pop(self.state_env, None)
            if self._old_env:
                os.environ[self.state_env] = self._old_env
        if self._old_term is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._old_term)
        problems = self.cleanup(self._state)
        if self._pipe_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe_w)
        if self._janitor is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._janitor.wait(timeout=15)
        if problems:
            raise LmdbioError(f"{self.what} not fully removed: " + "; ".join(problems))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def held(holder: Holder):
    """Inside: ``$state_env`` names the holder's state file and SIGTERM raises; then ``close()``."""
    holder._old_env = os.environ.get(holder.state_env, "")
    os.environ[holder.state_env] = holder.state_file
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        holder._old_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield holder
    finally:
        holder.close()
