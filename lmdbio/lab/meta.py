"""Where results were made: host, software versions and git commit, written as ``meta.json``."""

from __future__ import annotations

import functools
import os
import time

import numpy as np

__all__ = ["git_commit", "host_meta", "results_meta", "write_results_meta"]


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """The checkout's commit, with ``-dirty`` when tracked files changed; "unknown" outside git."""
    import subprocess
    from pathlib import Path

    here = Path(repo) if repo else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _without_links(text: str) -> str:
    """``text`` without the lines that carry a web address (a wheel's "Custom Information"
    names where it was downloaded from; results say which MPI, not where it came from)."""
    return "\n".join(line for line in text.splitlines() if "://" not in line)


@functools.lru_cache(maxsize=1)
def _mpi_library() -> str:
    """The MPI library's version string, without initializing MPI in this process."""
    return _without_links(_mpi_library_raw())


def _mpi_library_raw() -> str:
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
    from lmdbio.lmdbenv import liblmdb_version

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
