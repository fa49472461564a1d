"""Engine processes: the mpiexec that starts them, what they record of themselves, their MPICH segments."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

from lmdbio.errors import ConfigurationError

__all__ = ["ENGINE_ENV", "mpiexec", "engine_process", "shm_files", "hydra_files", "parent_pid", "boot_id",
           "mpich_segments", "remove_orphan_segments"]

#: What every engine's environment holds (the Reader raises instead of MPI_Abort on engines).
ENGINE_ENV = {"LMDBIO_ON_ERROR": "raise", "PYTHONUNBUFFERED": "1"}


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


def boot_id() -> str:
    """This host's boot id ('' where unknown): a pid means the same process only on the same boot."""
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


#: The topology file each of MPICH's process-manager proxies (hydra_pmi_proxy) writes and holds
#: open while its ranks run; a proxy that is killed leaves it in the temporary folder.
HYDRA_PREFIX = "hydra_hwloc_xmlfile_"


def hydra_files(pid: int | str = "self") -> set[str]:
    """The hydra topology files process ``pid`` holds open (a ``hydra_pmi_proxy``'s)."""
    out = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if Path(target).name.startswith(HYDRA_PREFIX):
            out.add(target.removesuffix(" (deleted)"))
    return out


def parent_pid(pid: int | str) -> int | None:
    """The parent of process ``pid`` (None when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


SHM = Path("/dev/shm")


def _temp_dirs() -> set[Path]:
    import tempfile

    return {Path(tempfile.gettempdir()), Path("/tmp")}


def mpich_segments() -> set[Path]:
    """What MPICH leaves when its processes are killed: its shared-memory files in ``/dev/shm``
    and its process manager's topology files (``hydra_hwloc_xmlfile_*``) in the temporary folder."""
    found = set(SHM.glob("mpich_shm_*")) if SHM.is_dir() else set()
    for d in _temp_dirs():
        if d.is_dir():
            found |= set(d.glob(HYDRA_PREFIX + "*"))
    return found


def remove_orphan_segments(before: set[Path], wait_s: float = 5.0) -> set[Path]:
    """Remove MPICH segments new since ``before`` that no live process maps or holds open (its
    process manager's topology files too, :func:`mpich_segments`); returns them.

    A job whose ranks were killed or aborted (MPI_Abort, a timeout) ends
    without MPI_Finalize, and MPICH leaves its segments in ``/dev/shm``; a
    killed proxy leaves its topology file. Ranks
    of a just-aborted job may still be ending: a segment they map is waited
    for up to ``wait_s`` seconds, then left alone.
    """
    removed: set[Path] = set()
    deadline = time.monotonic() + wait_s
    while True:
        in_use = set()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                in_use |= {Path(f) for f in shm_files(proc.name) | hydra_files(proc.name)}
        left = mpich_segments() - before
        for f in left - in_use:
            f.unlink(missing_ok=True)
            removed.add(f)
        if not left & in_use or time.monotonic() > deadline:
            return removed
        time.sleep(0.2)


def engine_process() -> dict:
    """Engine side: this process's host, boot id, pid and MPI rank (the client's record of it)."""
    from mpi4py import MPI

    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
            "rank": MPI.COMM_WORLD.Get_rank(), "size": MPI.COMM_WORLD.Get_size()}
