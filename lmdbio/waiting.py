"""Waiting without burning a core: futexes on shared memory, polite polling for MPI.

MPI implementations busy-poll inside blocking calls. That is the fastest
way to wait when every rank has its own core, but when ranks outnumber
cores (a laptop, this project's 2-core CI, or a node where only some cores
are given to the job) the spinning ranks take the CPU from the one rank
doing the I/O they wait for. The node-local hand-offs therefore sleep in
the kernel on a futex over the shared-memory word they wait for, and are
woken the moment it changes; MPI requests are polled with growing pauses.
"""

from __future__ import annotations

import ctypes
import platform
import time
from typing import Callable

import numpy as np

__all__ = ["wait_until", "wait_request", "polite_barrier", "wait_word", "wake_word", "word_address",
           "HAVE_FUTEX"]

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


def wait_until(ready: Callable[[], bool]) -> None:
    """Return once ``ready()`` is true, polling with growing pauses."""
    for _ in range(_SPINS):
        if ready():
            return
    pause = _FIRST_SLEEP
    while not ready():
        time.sleep(pause)
        pause = min(pause * 2, _MAX_SLEEP)


def word_address(arr: np.ndarray, i: int) -> int:
    """Address of ``arr[i]`` for :func:`wait_word`/:func:`wake_word` (look it up once: it is slow)."""
    return arr.ctypes.data + arr.itemsize * i


def wait_word(arr: np.ndarray, i: int, ready: Callable[[int], bool],
              sleeping: tuple[np.ndarray, int] | None = None,
              fence: Callable[[], None] | None = None, addr: int | None = None) -> int:
    """Wait until ``ready(arr[i])``; sleeps in the kernel on the word's low 32 bits.

    ``arr`` is an int64 array in shared memory. Whoever changes ``arr[i]``
    calls :func:`wake_word` on it. With ``sleeping=(flags, j)``, ``flags[j]``
    is 1 while this process may be asleep, so the writer can skip the wake-up
    system call when nobody sleeps; ``fence`` (a full memory barrier) orders
    raising the flag before the last look at the word; ``addr`` is the
    word's :func:`word_address` when the caller has it. Returns the value
    that satisfied ``ready``.
    """
    for _ in range(_SPINS):
        v = int(arr[i])
        if ready(v):
            return v
    if not HAVE_FUTEX:
        wait_until(lambda: ready(int(arr[i])))
        return int(arr[i])
    addr = ctypes.c_void_p(word_address(arr, i) if addr is None else addr)
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
            # Sleeps only while the word still holds v (no lost wake-up).
            _syscall(_SYS_FUTEX, addr, _FUTEX_WAIT, ctypes.c_int32(v & 0xFFFFFFFF).value,
                     tout, None, 0)
    finally:
        if sleeping is not None:
            flags[j] = 0


def wake_word(arr: np.ndarray, i: int, addr: int | None = None) -> None:
    """Wake every process sleeping in :func:`wait_word` on ``arr[i]``."""
    if HAVE_FUTEX:
        where = word_address(arr, i) if addr is None else addr
        _syscall(_SYS_FUTEX, ctypes.c_void_p(where), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def wait_request(req):
    """Complete an mpi4py request (``isend``/``irecv``/``Ibarrier``) politely; returns its message."""
    result = [None]

    def done():
        flag, msg = req.test()
        if flag:
            result[0] = msg
        return flag

    wait_until(done)
    return result[0]


def polite_barrier(comm) -> None:
    """A barrier that sleeps while it waits (MPICH's blocking barrier spins)."""
    if comm.size > 1:
        wait_request(comm.Ibarrier())
