"""Bounded agreement between ranks: every rank ends, and the failing rank is named.

:func:`collective` runs a step on every rank and raises the same error on
all of them if it fails anywhere; :func:`agree` exchanges "I failed" flags
point to point within a time limit, so the ranks that never came are known
by number. The limits come from ``LMDBIO_TIMEOUT`` and ``LMDBIO_EXIT_TIMEOUT``.
Communicators are parameters; mpi4py itself is imported only where a request
is waited on (importing it initializes MPI).
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from .errors import ConfigurationError, LmdbioError
from .waiting import timeout, wait_until

__all__ = ["collective", "agree", "check_settings", "exit_timeout", "default_on_error",
           "EXIT_TIMEOUT"]

# Requests of exit agreements a rank gave up on (a peer never came): they and
# their buffers must outlive the request, which MPI may still complete.
_ABANDONED: list = []

# Tag of close()'s point-to-point agreement on the Reader's communicator.
_CLOSE_TAG = 0x1D05

# How long ranks that raised inside ``with Reader`` wait for each other before
# a lone failure is handled by on_error (at most LMDBIO_TIMEOUT).
EXIT_TIMEOUT = 10.0


def exit_timeout() -> float:
    """``LMDBIO_EXIT_TIMEOUT`` in seconds (default :data:`EXIT_TIMEOUT`, at most LMDBIO_TIMEOUT)."""
    raw = os.environ.get("LMDBIO_EXIT_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else EXIT_TIMEOUT
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigurationError(f"LMDBIO_EXIT_TIMEOUT must be a positive number of seconds, "
                                 f"got {raw!r}; unset it for the default ({EXIT_TIMEOUT:g} s)")
    return min(max(value, 0.1), timeout())


def default_on_error() -> str:
    return os.environ.get("LMDBIO_ON_ERROR", "").strip().lower() or "abort"


def check_settings(on_error: str) -> None:
    """Check the environment settings a Reader reads later (at a timeout, at close), now.

    Raises ConfigurationError naming the variable, so a bad value fails the
    construction on every rank instead of surfacing at close().
    """
    timeout()
    exit_timeout()
    if on_error not in ("abort", "raise"):
        where = " (from LMDBIO_ON_ERROR)" if os.environ.get("LMDBIO_ON_ERROR", "").strip() else ""
        raise ConfigurationError(f"on_error must be 'abort' or 'raise', got {on_error!r}{where}")


def collective(comm, fn: Callable, *args, **kwargs):
    """Run ``fn`` on every rank; if it fails anywhere, raise on every rank.

    The error raised is the failing rank's (lowest rank wins), re-raised with
    its type (LmdbioError where that type cannot be rebuilt from a message),
    so no rank is left waiting in a later collective.
    """
    try:
        result, err = fn(*args, **kwargs), None
    except BaseException as exc:  # whatever it is (Ctrl-C too), it must not strand the other ranks
        result, err = None, exc
    errors = comm.allgather(None if err is None else (type(err), str(err)))
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        if err is not None and failed[0][0] == comm.rank:
            raise err
        r, (etype, msg) = failed[0]
        try:
            exc = etype(f"rank {r}: {msg}")
        except Exception:
            exc = LmdbioError(f"rank {r}: {msg}")
        raise exc
    return result


def agree(comm, failed: bool, limit: float) -> tuple[bool, list[int], list[int]]:
    """Exchange "I failed" flags with every rank of ``comm``, bounded by ``limit`` seconds.

    Point to point rather than one Iallgather, so the ranks that did not
    come are known by number. Returns (every rank came, ranks that failed,
    ranks that did not come).
    """
    me, size = comm.rank, comm.size
    if size == 1:
        return True, [0] if failed else [], []
    from mpi4py import MPI

    others = [r for r in range(size) if r != me]
    flag = np.array([1 if failed else 0], dtype=np.int32)
    got = np.zeros(size, dtype=np.int32)
    got[me] = flag[0]
    recvs = [comm.Irecv(got[r:r + 1], source=r, tag=_CLOSE_TAG) for r in others]
    sends = [comm.Isend(flag, dest=r, tag=_CLOSE_TAG) for r in others]
    wait_until(lambda: MPI.Request.Testall(recvs), limit)
    missing = [r for r, q in zip(others, recvs) if not q.Test()]
    failed_ranks = [int(r) for r in np.flatnonzero(got)]
    if missing:
        for q in recvs:
            if not q.Test():
                q.Cancel()
        _ABANDONED.append((recvs, sends, flag, got))   # MPI may still touch their buffers
        return False, [me] if failed else [], missing
    MPI.Request.Waitall(sends)
    return True, failed_ranks, []
