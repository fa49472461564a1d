"""Waiting without burning a core: futexes on shared memory, polite polling for MPI.

MPI implementations busy-poll inside blocking calls. That is the fastest
way to wait when every rank has its own core, but when ranks outnumber
cores (a laptop, this project's 2-core CI, or a node where only some cores
are given to the job) the spinning ranks take the CPU from the one rank
doing the I/O they wait for. The node-local hand-offs therefore sleep in
the kernel on a futex over the shared-memory word they wait for, and are
woken the moment it changes; MPI requests are polled with growing pauses.

Every hand-off wait is bounded: a peer that stopped (uneven loop counts, an
early ``break``, a dead process) turns into a :class:`~lmdbio.errors.PeerTimeoutError`
after :func:`timeout` seconds (``LMDBIO_TIMEOUT``, default 120), never a hang.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import time
from collections.abc import Callable

import numpy as np

from .errors import LmdbioError, PeerTimeoutError
from .settings import DEFAULT_TIMEOUT, timeout

__all__ = ["wait_until", "wait_request", "polite_barrier", "wait_word", "wake_word", "word_address",
           "HAVE_FUTEX", "timeout", "DEFAULT_TIMEOUT"]

_DEFAULT = object()   # "use timeout()" (None means: wait without a bound)

_SPINS = 8           # cheap checks before the first sleep
_FIRST_SLEEP = 20e-6
_MAX_SLEEP = 1e-3

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "ppc64le": 221}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1   # shared (not PRIVATE): the word lives in a shared window


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    HAVE_FUTEX = _SYS_FUTEX is not None and platform.system() == "Linux"
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    HAVE_FUTEX = False

_TIMEOUT = _Timespec(0, 20_000_000)   # 20 ms: a safety net, wake-ups are not lost


def wait_until(ready: Callable[[], bool], limit: float | None = None) -> bool:
    """Poll ``ready()`` with growing pauses; True once it is, False after ``limit`` seconds."""
    for _ in range(_SPINS):
        if ready():
            return True
    pause = _FIRST_SLEEP
    deadline = None if limit is None else time.monotonic() + limit
    while not ready():
        if deadline is not None and time.monotonic() >= deadline:
            return ready()
        time.sleep(pause)
        pause = min(pause * 2, _MAX_SLEEP)
    return True


def _limit(value) -> float | None:
    return timeout() if value is _DEFAULT else value


def _timed_out(what, limit: float, who=()) -> PeerTimeoutError:
    """The error of a wait given up: ``what`` (text, or a function making it) names the peer
    in words, ``who`` (ranks, or a function giving them) is :attr:`PeerTimeoutError.missing`."""
    return PeerTimeoutError(
        f"{what() if callable(what) else what} within {limit:g} s (LMDBIO_TIMEOUT); that rank "
        "stopped calling read_batch() (uneven loop counts, an early break), failed or exited. "
        "Every rank must call read_batch() the same number of times, then close()",
        missing=who() if callable(who) else who, limit=limit)


def word_address(arr: np.ndarray, i: int) -> int:
    """Address of ``arr[i]`` for :func:`wait_word`/:func:`wake_word` (look it up once: it is slow)."""
    return arr.ctypes.data + arr.itemsize * i


def wait_word(arr: np.ndarray, i: int, ready: Callable[[int], bool],
              sleeping: tuple[np.ndarray, int] | None = None,
              fence: Callable[[], None] | None = None, addr: int | None = None,
              limit=_DEFAULT, what: str | Callable[[], str] = "a peer did not answer",
              who=()) -> int:
    """Wait until ``ready(arr[i])``; sleeps in the kernel on the word's low 32 bits.

    ``arr`` is an int64 array in shared memory. Whoever changes ``arr[i]``
    calls :func:`wake_word` on it. With ``sleeping=(flags, j)``, ``flags[j]``
    is 1 while this process may be asleep, so the writer can skip the wake-up
    system call when nobody sleeps; ``fence`` (a full memory barrier) orders
    raising the flag before the last look at the word; ``addr`` is the
    word's :func:`word_address` when the caller has it. Returns the value
    that satisfied ``ready``. After ``limit`` seconds (default :func:`timeout`,
    None for no bound) it raises PeerTimeoutError with ``what`` (a string or
    a function making one) at the front of the message and ``who`` (the ranks
    waited for, or a function giving them) as its ``missing``.
    """
    for _ in range(_SPINS):
        v = int(arr[i])
        if ready(v):
            return v
    limit = _limit(limit)
    if not HAVE_FUTEX:
        if not wait_until(lambda: ready(int(arr[i])), limit):
            raise _timed_out(what, limit, who)
        return int(arr[i])
    deadline = None if limit is None else time.monotonic() + limit
    word = ctypes.c_void_p(word_address(arr, i) if addr is None else addr)
    tout = ctypes.byref(_TIMEOUT)
    if sleeping is not None:
        flags, j = sleeping
        flags[j] = 1
        if fence is not None:
            fence()
    try:
        while True:
            v = int(arr[i])
            if ready(v):
                return v
            if deadline is not None and time.monotonic() >= deadline:
                raise _timed_out(what, limit, who)
            # Sleeps only while the word still holds v (no lost wake-up).
            rc = _syscall(_SYS_FUTEX, word, _FUTEX_WAIT, ctypes.c_int32(v & 0xFFFFFFFF).value,
                          tout, None, 0)
            if rc != 0:
                _check_futex(ctypes.get_errno(), "FUTEX_WAIT")
    finally:
        if sleeping is not None:
            flags[j] = 0


def wake_word(arr: np.ndarray, i: int, addr: int | None = None) -> None:
    """Wake every process sleeping in :func:`wait_word` on ``arr[i]``."""
    if HAVE_FUTEX:
        where = word_address(arr, i) if addr is None else addr
        if _syscall(_SYS_FUTEX, ctypes.c_void_p(where), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0) < 0:
            _check_futex(ctypes.get_errno(), "FUTEX_WAKE")


# The word changed before we slept, the 20 ms safety net ran out, or a signal came.
_NORMAL = {errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR}


def _check_futex(err: int, op: str) -> None:
    if err not in _NORMAL:
        raise LmdbioError(f"futex {op} failed: {errno.errorcode.get(err, err)} "
                          f"({os.strerror(err)}); the shared-memory hand-off cannot go on")


def wait_request(req, limit=_DEFAULT, what: str = "a peer did not answer", who=()):
    """Complete an mpi4py request (``isend``/``irecv``/``Ibarrier``) politely; returns its message.

    After ``limit`` seconds (default :func:`timeout`; None waits for ever) it
    cancels the request where MPI can (receives) and raises PeerTimeoutError
    (``who``: the ranks waited for, its ``missing``).
    """
    result = [None]

    def done():
        flag, msg = req.test()
        if flag:
            result[0] = msg
        return flag

    limit = _limit(limit)
    if not wait_until(done, limit):
        try:
            req.Cancel()
        except Exception:   # some requests cannot be cancelled; we leave it anyway
            pass
        raise _timed_out(what, limit, who)
    return result[0]


def completes_within(req, limit: float | None) -> bool:
    """Poll an MPI request politely for up to ``limit`` seconds; True if it completed."""
    return wait_until(lambda: req.Test(), limit)


def polite_barrier(comm, limit=None, what: str = "a rank did not reach the barrier") -> None:
    """A barrier that sleeps while it waits (MPICH's blocking barrier spins).

    ``limit`` seconds bound the wait (None: no bound; bench loops use that).
    """
    if comm.size > 1:
        wait_request(comm.Ibarrier(), limit, what)
