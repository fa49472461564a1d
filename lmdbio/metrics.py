"""Measurement: phase timers (getrusage, /proc/self/io) and resident memory.

Page-cache control (``evict``, ``residency``, ``resident_pages``) and results
metadata (``host_meta``, ``git_commit``, ``results_meta``,
``write_results_meta``) belong to the reproduction lab: :mod:`lmdbio.lab.pagecache`
and :mod:`lmdbio.lab.meta`. Their old spellings here still work and warn.
"""

from __future__ import annotations

import resource
import threading
import time

from .deprecation import moved

__all__ = ["PhaseRecorder", "proc_io", "memory", "rusage_snapshot", "totals_snapshot",
           "totals_row", "with_total"]

#: Names that moved to the lab, and where (reading one here warns).
MOVED = {**{n: "lmdbio.lab.pagecache" for n in ("evict", "residency", "resident_pages")},
         **{n: "lmdbio.lab.meta" for n in ("host_meta", "git_commit", "results_meta",
                                           "write_results_meta")}}
__getattr__ = moved(__name__, MOVED)

_RUSAGE_FIELDS = ("ru_utime", "ru_stime", "ru_nvcsw", "ru_nivcsw", "ru_minflt", "ru_majflt")


def rusage_snapshot() -> tuple:
    """This process's getrusage counters: (user, system, vcsw, ivcsw, minflt, majflt)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime, r.ru_stime, r.ru_nvcsw, r.ru_nivcsw, r.ru_minflt, r.ru_majflt)


def proc_io() -> dict:
    """This process's /proc/self/io counters (rchar, syscr, read_bytes, ...); {} where absent."""
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


_MEMORY_FIELDS = {"RssAnon": "rss_anon_bytes", "RssFile": "rss_file_bytes",
                  "RssShmem": "rss_shmem_bytes"}


def memory() -> dict:
    """This process's resident memory by kind, in bytes, from /proc/self/status; {} where absent.

    ``rss_anon_bytes`` (RssAnon) is the process's own memory (heap, stacks,
    private buffers): what grows on a leak. ``rss_file_bytes`` (RssFile) is
    file-backed pages it maps and has resident (libraries, an mmap'd LMDB
    file): page cache, which the kernel can drop. ``rss_shmem_bytes``
    (RssShmem) is shared memory it maps (POSIX shm, such as a node group's
    slots). Their sum is VmRSS.
    """
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in _MEMORY_FIELDS:
                    out[_MEMORY_FIELDS[key]] = int(value.split()[0]) * 1024   # the kernel says kB
    except OSError:
        return {}
    return out


def totals_snapshot() -> tuple:
    """(monotonic time, getrusage, /proc/self/io) now, for :func:`totals_row`."""
    return time.monotonic(), rusage_snapshot(), proc_io()


def totals_row(since: tuple, rank: int = 0) -> dict:
    """A ``phase="total"`` row: wall, CPU, context switches, faults and kernel I/O since ``since``,
    and the resident memory (:func:`memory`) at its end."""
    t0, r0, io0 = since
    t1, r1, io1 = totals_snapshot()
    mem = memory()
    wall, user, system = t1 - t0, r1[0] - r0[0], r1[1] - r0[1]
    return {"rank": rank, "batch": -1, "phase": "total", "t_start": t0, "t_end": t1,
            "wall_s": wall, "user_s": user, "sys_s": system,
            "sleep_s": max(0.0, wall - user - system),
            "vcsw": r1[2] - r0[2], "ivcsw": r1[3] - r0[3], "minflt": r1[4] - r0[4],
            "majflt": r1[5] - r0[5], "bytes": 0, "calls": 0,
            "io_rchar": io1.get("rchar", 0) - io0.get("rchar", 0),
            "io_syscr": io1.get("syscr", 0) - io0.get("syscr", 0),
            "io_read_bytes": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
            **{k: mem.get(k, 0) for k in _MEMORY_FIELDS.values()}}


def with_total(rows: list[dict], since: tuple, rank: int, extra: dict) -> list[dict]:
    """``rows`` plus a whole-run :func:`totals_row` since ``since`` (a cross-check of the
    per-phase counters; its bytes and calls are the read phases'), each with ``extra``."""
    total = totals_row(since, rank)
    reads = [r for r in rows if r["phase"] == "read"]
    total["bytes"] = sum(r["bytes"] for r in reads)
    total["calls"] = sum(r["calls"] for r in reads)
    return [{**r, **extra} for r in [*rows, total]]


class _Phase:
    """One timed phase (a plain class: a generator-based context manager costs more)."""

    __slots__ = ("rec", "name", "batch", "row", "t0", "r0", "chain")
    t0: float
    r0: resource.struct_rusage

    def __init__(self, rec: PhaseRecorder, name: str, batch: int, chain: bool):
        self.rec, self.name, self.batch, self.chain = rec, name, batch, chain
        self.row: dict = {}

    def __enter__(self) -> dict:
        last = self.rec._last
        if self.chain and last is not None and last[0] == _thread():
            _, self.t0, self.r0 = last
        else:
            self.r0 = _getrusage(_RUSAGE)
            self.t0 = _monotonic()
        return self.row

    def __exit__(self, *exc) -> None:
        t1 = _monotonic()
        r1 = _getrusage(_RUSAGE)
        self.rec._raw.append((self.name, self.batch, self.t0, t1, self.r0, r1, self.row))
        self.rec._last = (_thread(), t1, r1)


class _NoPhase:
    """A phase not timed (``measure=False``): one shared object; each ``with`` gets a fresh
    dict for the counters nobody keeps."""

    __slots__ = ()

    def __enter__(self) -> dict:
        return {}

    def __exit__(self, *exc) -> None:
        pass


_NO_PHASE = _NoPhase()


# A phase's counters are its own thread's (Linux's RUSAGE_THREAD): not those of MPI's progress
# thread or of a reader running ahead in another thread, and a process-wide getrusage sums over
# every thread (on a crowded machine it waits for the other threads' CPUs).
_RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
_getrusage, _monotonic, _thread = resource.getrusage, time.monotonic, threading.get_ident


class PhaseRecorder:
    """Records one row per (batch, phase): wall time, getrusage deltas, bytes and calls.

    A phase is timed with ``with rec.phase("read", batch) as row: row["bytes"] = n``.
    Sleep time is ``wall - user - system``, as in the reference code. Rows
    carry monotonic start/end stamps so timelines across ranks can be drawn
    (CLOCK_MONOTONIC is system-wide on one node). Timing a phase costs two
    getrusage of the calling thread and two clock reads; rows are built only
    when asked for. ``chain=True`` starts a phase where the previous one of
    the same thread ended (one snapshot instead of two) for phases that
    follow each other with nothing worth timing between them.
    """

    def __init__(self, rank: int = 0, enabled: bool = True):
        self.rank = rank
        self.enabled = enabled
        self._raw: list[tuple] = []
        self._rows: list[dict] = []
        self._last: tuple[int, float, resource.struct_rusage] | None = None

    def phase(self, name: str, batch: int, chain: bool = False):
        """Context manager timing one phase; yields a dict for extra counters."""
        if not self.enabled:
            return _NO_PHASE
        return _Phase(self, name, batch, chain)

    @property
    def rows(self) -> list[dict]:
        """One dict per timed phase, oldest first."""
        for name, batch, t0, t1, r0, r1, extra in self._raw:
            user, system = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
            wall = t1 - t0
            row = {"rank": self.rank, "batch": batch, "phase": name, "bytes": 0, "calls": 0,
                   "t_start": t0, "t_end": t1, "wall_s": wall, "user_s": user, "sys_s": system,
                   "sleep_s": max(0.0, wall - user - system),
                   "vcsw": r1.ru_nvcsw - r0.ru_nvcsw, "ivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
                   "minflt": r1.ru_minflt - r0.ru_minflt, "majflt": r1.ru_majflt - r0.ru_majflt}
            row.update(extra)
            self._rows.append(row)
        self._raw.clear()
        return self._rows

    def clear(self) -> None:
        self._raw.clear()
        self._rows.clear()
