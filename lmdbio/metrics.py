"""Measurement: phase timers (getrusage, /proc/self/io), resident memory, page-cache control."""

from __future__ import annotations

import ctypes
import functools
import ctypes.util
import mmap
import os
import resource
import time

import numpy as np

__all__ = ["PhaseRecorder", "proc_io", "memory", "evict", "residency", "resident_pages",
           "rusage_snapshot", "totals_snapshot", "totals_row", "with_total", "host_meta",
           "git_commit", "results_meta", "write_results_meta"]

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

    def __init__(self, rec: "PhaseRecorder", name: str, batch: int, chain: bool):
        self.rec, self.name, self.batch, self.row, self.chain = rec, name, batch, {}, chain

    def __enter__(self) -> dict:
        if self.chain and self.rec._last is not None:
            self.t0, self.r0 = self.rec._last
        else:
            self.r0 = _getrusage(_RUSAGE_SELF)
            self.t0 = _monotonic()
        return self.row

    def __exit__(self, *exc) -> bool:
        t1 = _monotonic()
        r1 = _getrusage(_RUSAGE_SELF)
        self.rec._raw.append((self.name, self.batch, self.t0, t1, self.r0, r1, self.row))
        self.rec._last = (t1, r1)
        return False


class _NoPhase:
    __slots__ = ("row",)

    def __init__(self):
        self.row = {}

    def __enter__(self) -> dict:
        return self.row

    def __exit__(self, *exc) -> bool:
        return False


_getrusage, _RUSAGE_SELF, _monotonic = resource.getrusage, resource.RUSAGE_SELF, time.monotonic


class PhaseRecorder:
    """Records one row per (batch, phase): wall time, getrusage deltas, bytes and calls.

    A phase is timed with ``with rec.phase("read", batch) as row: row["bytes"] = n``.
    Sleep time is ``wall - user - system``, as in the reference code. Rows
    carry monotonic start/end stamps so timelines across ranks can be drawn
    (CLOCK_MONOTONIC is system-wide on one node). Timing a phase costs two
    getrusage and two clock reads (about 3 us here); rows are built only
    when asked for. ``chain=True`` starts a phase where the previous one
    ended (one snapshot instead of two) for phases that follow each other
    with nothing worth timing between them.
    """

    def __init__(self, rank: int = 0, enabled: bool = True):
        self.rank = rank
        self.enabled = enabled
        self._raw: list[tuple] = []
        self._rows: list[dict] = []
        self._last = None

    def phase(self, name: str, batch: int, chain: bool = False):
        """Context manager timing one phase; yields a dict for extra counters."""
        if not self.enabled:
            return _NoPhase()
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


def evict(path: str | os.PathLike) -> None:
    """Drop a file's pages from the page cache (posix_fadvise DONTNEED; no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        # Dirty pages cannot be dropped: flush first (works on a read-only fd on Linux).
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


_libc = None


def _lib():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mmap.restype = ctypes.c_void_p
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = libc
    return _libc


def resident_pages(path: str | os.PathLike) -> np.ndarray:
    """Bool per page of a file: True where it is in the page cache.

    mincore over a fresh read-only map; mapping does not fault pages in, so
    measuring does not change the answer.
    """
    size = os.path.getsize(path)
    npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = np.zeros(npages, dtype=np.uint8)
    if size == 0:
        return vec.astype(bool)
    libc = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {path} failed: {os.strerror(err)}")
        try:
            if libc.mincore(addr, size, vec.ctypes.data) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore on {path} failed: {os.strerror(err)}")
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return (vec & 1).astype(bool)


def residency(path: str | os.PathLike) -> float:
    """Fraction of a file's pages in the page cache."""
    pages = resident_pages(path)
    return float(pages.mean()) if len(pages) else 0.0


# --------------------------------------------------------------------------- where results were made


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """The checkout's commit, with ``-dirty`` when tracked files changed; "unknown" outside git."""
    import subprocess
    from pathlib import Path

    here = Path(repo) if repo else Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def _mpi_library() -> str:
    """The MPI library's version string, without initializing MPI in this process."""
    import subprocess
    import sys

    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        return MPI.Get_library_version().strip()
    try:
        out = subprocess.run([sys.executable, "-c",
                              "from mpi4py import MPI; print(MPI.Get_library_version())"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def host_meta() -> dict:
    """Where results were made: host, cores, memory, OS and software versions (one flat dict).

    The one schema for every results folder (``meta.json``'s ``host``), written
    by the bench and the notebook runner alike.
    """
    import platform
    import socket
    from importlib import metadata

    meta = {"hostname": socket.gethostname(), "cores": os.cpu_count(),
            "machine": platform.machine(), "os": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}
    try:
        meta["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        meta["memory_bytes"] = None
    for dist, key in (("lmdb", "py_lmdb"), ("mpi4py", "mpi4py"), ("mpich", "mpich_wheel"),
                      ("pandas", "pandas")):
        try:
            meta[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    from .lmdbenv import liblmdb_version

    if liblmdb_version() is not None:
        meta["liblmdb"] = liblmdb_version()
    meta["mpi"] = _mpi_library()
    return meta


def results_meta(config: dict, **extra) -> dict:
    """meta.json of a results folder: ``host`` (:func:`host_meta`), commit, time, config, ``extra``."""
    return {"host": host_meta(), "git_commit": git_commit(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config": config, **extra}


def write_results_meta(out_dir: str | os.PathLike, config: dict, **extra) -> str:
    """Write :func:`results_meta` as ``out_dir/meta.json`` (the one writer); returns its path."""
    import json

    path = os.path.join(out_dir, "meta.json")
    with open(path, "w") as f:
        f.write(json.dumps(results_meta(config, **extra), indent=2, default=str) + "\n")
    return path
