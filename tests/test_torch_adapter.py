"""lmdbio.torch: imports without torch; with torch, an IterableDataset over the epochs.

torch is no part of ``make venv`` (its CPU wheel is about 550 MB, 1.2 GB
installed). The test marked ``torch`` installs it, when this interpreter
cannot import it, into a cache outside the repository,
``$XDG_CACHE_HOME/lmdbio/torch-cpu`` (default ``~/.cache/lmdbio/torch-cpu``),
reused by later runs, and runs the adapter checks under mpiexec with that
directory on PYTHONPATH. ``LMDBIO_TORCH_FIND_LINKS=DIR`` lets pip take the
wheel from DIR first; ``LMDBIO_TORCH_INDEX=URL`` names the index pip installs
it from: the PyTorch CPU wheel index (pytorch.org's install page gives it), or
PyPI's simple index for PyPI's torch, which also pulls NVIDIA's CUDA
libraries, several GB: its own wheel does not import without them, even on
CPU. Without either the install is skipped, saying so.
"""

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from conftest import ROOT, run_mpi

HAVE_TORCH = importlib.util.find_spec("torch") is not None
TORCH_INDEX = os.environ.get("LMDBIO_TORCH_INDEX", "")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("torch") / "c", "cifar10", 203,
                        commit_every=50, seed=1)


def test_module_imports_without_torch():
    import lmdbio.torch as lt

    assert "LmdbDataset" in lt.__all__
    with pytest.raises(AttributeError):
        lt.NoSuchThing  # noqa: B018 - the attribute access is what raises


@pytest.mark.skipif(HAVE_TORCH, reason="torch is installed: the missing-torch message is moot")
def test_clear_message_without_torch():
    import lmdbio.torch as lt

    with pytest.raises(ImportError, match="pip install torch"):
        lt.LmdbDataset  # noqa: B018 - the attribute access is what raises


@pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed (an optional extra; "
                    "its CPU wheel could not be installed in this environment)")
def test_dataloader_epochs_match_the_reader(db):
    import torch

    import lmdbio
    from lmdbio.torch import LmdbDataset

    ds = LmdbDataset(db, 8, comm=MPI.COMM_SELF, shuffle=True, seed=2, prefetch=2)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]
        with lmdbio.Reader(db, 8, MPI.COMM_SELF, variant="lmdbio-direct", shuffle=True,
                           seed=2) as r:
            want = [b.as_datum_array() for b in r.epoch(epoch)]
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want):
            assert np.array_equal(x, wx) and np.array_equal(y, wy)
    ds.close()


def _torch_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lmdbio" / "torch-cpu"


def _index_unreachable() -> str | None:
    """Why pip cannot reach the CPU wheels' index, or None when it answers."""
    try:
        urllib.request.urlopen(f"{TORCH_INDEX}/torch/", timeout=20).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
    return None


def torch_path() -> str | None:
    """A directory to put on PYTHONPATH for torch (None: this interpreter imports it).

    Installs the CPU wheel there with pip the first time (under a lock, so
    parallel runs install once); skips the test only when the install fails
    and the index cannot be reached.
    """
    if HAVE_TORCH:
        return None
    target = _torch_cache()
    done = target / ".lmdbio-installed"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "torch-cpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return str(target)
        shutil.rmtree(target, ignore_errors=True)   # a half-made one from an interrupted run
        links = os.environ.get("LMDBIO_TORCH_FIND_LINKS")
        if not TORCH_INDEX and not links:
            pytest.skip("torch is not installed: set LMDBIO_TORCH_INDEX to the PyTorch CPU wheel "
                        "index (pytorch.org's install page gives it), or to PyPI's simple index "
                        "for PyPI's CUDA build (5.4 GB installed), or LMDBIO_TORCH_FIND_LINKS to "
                        "a directory holding the wheel")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--retries", "1",
               "--target", str(target), "-c", str(ROOT / "constraints.txt"), "torch"]
        if TORCH_INDEX:
            cmd[4:4] = ["--index-url", TORCH_INDEX]
        if links:
            cmd[4:4] = ["--find-links", links]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            why = _index_unreachable() if TORCH_INDEX else None
            if why is not None:
                pytest.skip(f"torch is not installed and pip cannot reach {TORCH_INDEX} ({why}); "
                            "set LMDBIO_TORCH_FIND_LINKS to a directory holding the wheel, or "
                            "LMDBIO_TORCH_INDEX set to PyPI's simple index for PyPI's CUDA build "
                            "(5.4 GB installed)")
            pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        done.write_text(" ".join(cmd) + "\n")
    return str(target)


@pytest.mark.torch
@pytest.mark.long
def test_dataloader_over_mpi_ranks_with_torch_installed(db):
    """Installs torch if needed, then tests/mpi/torch_checks.py on 2 ranks (its docstring)."""
    path = torch_path()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}
    proc = run_mpi("torch_checks.py", 2, db, env=env, timeout=600)
    assert "torch checks: ok" in proc.stdout


@pytest.mark.torch
@pytest.mark.long
def test_dataloader_resumes_mid_epoch_with_torch_installed(db):
    """Installs torch if needed, then tests/mpi/torch_resume.py on 2 ranks (its docstring):
    LmdbDataset's state_dict / load_state_dict as StatefulDataLoader calls them."""
    path = torch_path()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}
    proc = run_mpi("torch_resume.py", 2, db, env=env, timeout=600)
    assert "torch resume: ok" in proc.stdout


def _run_workers(db, check: str):
    path = torch_path()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}
    proc = run_mpi("torch_workers.py", 2, db, check, env=env, timeout=600)
    assert f"torch workers {check}: ok" in proc.stdout


@pytest.mark.torch
@pytest.mark.long
def test_workers_deliver_the_readers_order_with_torch_installed(db):
    """tests/mpi/torch_workers.py order on 2 ranks: num_workers 0, 2 (fork) and 2 (spawn)
    deliver the Reader's records in its order, in file order and shuffled by shard."""
    _run_workers(db, "order")


@pytest.mark.torch
@pytest.mark.long
def test_persistent_workers_follow_set_epoch_with_torch_installed(db):
    """tests/mpi/torch_workers.py persistent on 2 ranks: persistent workers read each epoch
    set_epoch names."""
    _run_workers(db, "persistent")


@pytest.mark.torch
@pytest.mark.long
def test_workers_resume_mid_epoch_with_torch_installed(db):
    """tests/mpi/torch_workers.py resume on 2 ranks: with 2 workers, a state from the training
    process (state_dict(batches=k)) and the workers' own states resume at the next batch."""
    _run_workers(db, "resume")


@pytest.mark.torch
@pytest.mark.long
def test_workers_name_max_readers_with_torch_installed(db):
    """tests/mpi/torch_workers.py readers on 2 ranks: a reader table too small for the workers
    is refused, naming max_readers and the readers needed."""
    _run_workers(db, "readers")


def _torchrun(db, variant: str, *extra: str) -> subprocess.CompletedProcess:
    """tests/mpi/torchrun_ddp.py under torch's own launcher on 4 processes, with no MPI
    launcher in their environment."""
    from lmdbio.comm import MPI_LAUNCHER_VARS

    path = torch_path()
    env = {k: v for k, v in os.environ.items() if k not in MPI_LAUNCHER_VARS}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), path) if p),
               PYTHONUNBUFFERED="1", LMDBIO_TIMEOUT="60")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           str(ROOT / "tests" / "mpi" / "torchrun_ddp.py"), str(db), variant, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0 and "torchrun ddp: ok" in proc.stdout, (
        f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


@pytest.mark.torch
@pytest.mark.long
def test_torchrun_ddp_reads_every_record_once_with_torch_installed(db):
    """torchrun --nproc_per_node 4, no MPI: a DDP CPU loop over LmdbDataset (lmdbio-direct)
    with num_workers 0 and 2 gets every record once per epoch, py-lmdb's bytes; a node-group
    variant is refused naming the ones that work; auto reads per rank."""
    proc = _torchrun(db, "lmdbio-direct")
    assert "refused: variant 'lmdbio-lmm-dio'" in proc.stdout
    assert "auto: lmdbio-direct" in proc.stdout


@pytest.mark.torch
@pytest.mark.long
def test_torchrun_reads_without_mpi4py_with_torch_installed(db):
    """The same loop (lmdb-get) with ``import mpi4py`` failing in every process."""
    _torchrun(db, "lmdb-get", "--block-mpi4py")


@pytest.mark.torch
@pytest.mark.long
def test_len_is_the_items_per_epoch_with_torch_installed(db):
    """tests/mpi/torch_position.py len on 2 ranks: len(ds), batches_per_epoch and len(loader)
    are the rank's items per epoch under every last-batch policy, with 0 and 3 workers; a
    worker's copy says its own share."""
    path = torch_path()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}
    proc = run_mpi("torch_position.py", 2, db, "len", env=env, timeout=600)
    assert "torch position len: ok" in proc.stdout


def _left_behind(pid: int, before: set) -> list[str]:
    """Files in /dev/shm and the temporary directory that were not there ``before`` and are
    named as a dataset position or after process ``pid``."""
    import re
    import tempfile

    mine = re.compile(rf"lmdbio-position|(?<!\d){pid}(?!\d)")
    return sorted(p for p in _shm_and_tmp(tempfile) - before if mine.search(os.path.basename(p)))


def _shm_and_tmp(tempfile) -> set:
    found = set()
    for d in {"/dev/shm", tempfile.gettempdir()}:
        if os.path.isdir(d):
            found |= {os.path.join(d, f) for f in os.listdir(d)}
    return found


@pytest.mark.torch
@pytest.mark.long
@pytest.mark.parametrize("how", ["close", "sigterm", "exit"])
def test_no_position_file_is_left_with_torch_installed(db, how):
    """F26: a dataset whose epoch and loaded state reached persistent workers leaves no
    position file (nor any file named after its process) in /dev/shm or the temporary
    directory, whether it ends by close() then set_epoch and load_state_dict, by SIGTERM or by
    os._exit (tests/mpi/torch_position.py)."""
    import re
    import tempfile

    path = torch_path()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}
    before = _shm_and_tmp(tempfile)
    proc = run_mpi("torch_position.py", 1, db, how, env=env, timeout=600, check=False)
    got = re.search(r"^pid (\d+)$", proc.stdout, re.MULTILINE)
    assert got, f"the script ended before its end ({proc.returncode}):\n{proc.stderr[-3000:]}"
    assert (proc.returncode == 0) == (how != "sigterm"), proc.stderr[-3000:]
    left = _left_behind(int(got.group(1)), before)
    assert not left, f"left behind after {how}: {left}"
