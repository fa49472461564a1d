"""A student's own small run, outside the engines: a tiny dataset and ``mpiexec`` of a short script.

A notebook writes a short Reader loop with ``%%writefile`` and runs it with
:func:`mpirun`; the exercises' solutions (``notebooks/solutions/``) do the
same, and ``tests/test_solutions.py`` runs them. The notebook's own kernel
never opens LMDB.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..paths import REPO

__all__ = ["dataset", "mpirun", "run", "SCRATCH"]

SCRATCH = REPO / "build" / "scratch"


def dataset(preset: str = "cifar10", records: int = 4096, root: str | os.PathLike | None = None) -> Path:
    """A tiny dataset ``root/<preset>-<records>`` (made once, by ``lmdbio make-dataset``); its path."""
    root = Path(root) if root is not None else SCRATCH / "demo"
    path = root / f"{preset}-{records}"
    if (path / "data.mdb").exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    # Two kernels (notebooks replotted side by side) may ask at once: one makes it, under a lock,
    # in a folder of its own, then renames it into place.
    with open(root / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "data.mdb").exists():
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=root))
            try:
                subprocess.run([sys.executable, "-m", "lmdbio", "make-dataset", "--preset", preset,
                                "--records", str(records), "--out", str(tmp / "db"), "--force", "--quiet"],
                               check=True, capture_output=True, text=True)
                shutil.rmtree(path, ignore_errors=True)
                os.replace(tmp / "db", path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return path


def mpirun(script: str | os.PathLike, nprocs: int = 4, *args, timeout: float = 120) -> str:
    """Run ``python script args`` under ``mpiexec -n nprocs`` and return what it printed.

    Raises RuntimeError with the script's output when it fails or runs past ``timeout`` seconds.
    """
    from ..cluster import mpiexec

    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, str(script), *map(str, args)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{script} ran past {timeout:g} s under mpiexec -n {nprocs}: {e.stdout or ''}"
                           f"{e.stderr or ''}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed under mpiexec -n {nprocs} (exit {done.returncode}):\n"
                           f"{done.stdout}\n{done.stderr}")
    return done.stdout


def run(script: str, nprocs: int = 4, *args, timeout: float = 120) -> str:
    """Run the Python source ``script`` under ``mpiexec -n nprocs`` from a temporary file that is
    removed afterwards (a notebook's demo cell: nothing is left behind); returns what it printed."""
    with tempfile.TemporaryDirectory(prefix="lmdbio-demo-") as d:
        path = Path(d) / "demo.py"
        path.write_text(script)
        return mpirun(path, nprocs, *args, timeout=timeout)
