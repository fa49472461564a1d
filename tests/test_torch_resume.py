"""Exact mid-epoch resume and the elastic order under ``torchrun``, with no MPI (real torch).

The same checks under mpiexec are tests/test_resume.py. These install torch as
tests/test_torch_adapter.py does (``torch_path``: ``LMDBIO_TORCH_FIND_LINKS=DIR`` or
``LMDBIO_TORCH_INDEX=URL``), then run tests/mpi/torchrun_resume.py under torch's own launcher
with no MPI launcher in the environment and ``import mpi4py`` failing in every process.
"""

import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from conftest import ROOT
from test_torch_adapter import torch_path

N, B = 203, 12   # as tests/test_resume.py: 16 full batches and a short one of 11
STOP = 5
# The script's settings (tests/mpi/torchrun_resume.py SETTINGS).
ELASTIC = dict(shuffle="elastic", seed=3, shuffle_block=7, shuffle_window=3,
               shuffle_partitions=4, coalesce_bytes=1 << 16)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("torchrun-resume") / "c", "cifar10", N,
                        commit_every=50, seed=1)


def _torchrun(nprocs: int, *args) -> subprocess.CompletedProcess:
    """tests/mpi/torchrun_resume.py under ``torch.distributed.run --standalone`` on
    ``nprocs`` processes, with no MPI launcher's variables in their environment."""
    from lmdbio.comm import MPI_LAUNCHER_VARS

    path = torch_path()
    env = {k: v for k, v in os.environ.items() if k not in MPI_LAUNCHER_VARS}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), path) if p),
               PYTHONUNBUFFERED="1", LMDBIO_TIMEOUT="60", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           str(nprocs), str(ROOT / "tests" / "mpi" / "torchrun_resume.py"), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0 and f"torchrun resume {args[2]}: ok" in proc.stdout, (
        f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


@pytest.mark.torch
@pytest.mark.long
def test_torchrun_resumes_after_any_batch_in_every_mode(db, tmp_path):
    """torchrun --nproc_per_node 4: in file order, window, shard and elastic order, a Reader
    stopped after any batch of an epoch and rebuilt from its state delivers the rest of the
    epoch exactly (every record once, the uninterrupted run's order), then the next epoch;
    LmdbDataset with num_workers 0 and 2 resumes a shard and an elastic epoch the same way."""
    _torchrun(4, db, tmp_path, "modes", "--stop", STOP)


def _global(db) -> dict[int, list[list[int]]]:
    """The elastic order's global batches of epochs 0, 1 and 2, read by one process."""
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="lmdbio-direct", **ELASTIC) as r:
        return {e: [np.asarray(b.indices).tolist() for b in r.epoch(e)] for e in (0, 1, 2)}


@pytest.mark.torch
@pytest.mark.long
def test_torchrun_elastic_state_saved_on_four_ranks_continues_on_two(db, tmp_path):
    """Saved under torchrun on 4 ranks after 5 batches of epoch 1 (a Reader, and an
    LmdbDataset in a DataLoader), continued by a second torchrun on 2 ranks: the global batches
    before and after the stop are one process's order, every record once; epoch 2 follows;
    LmdbDataset with num_workers 0 and 2 resumes the dataset's state; a shard state is refused,
    its order depends on the rank count."""
    one = _global(db)
    _torchrun(4, db, tmp_path, "save", "--stop", STOP)
    saved = json.loads((tmp_path / "save-P4.json").read_text())
    assert saved["epoch0"] == one[0]
    assert saved["epoch1"] == saved["dataset_epoch1"] == one[1][:STOP]
    out = _torchrun(2, db, tmp_path, "resume")
    assert "saved on 4 ranks and this Reader runs on 2" in out.stdout
    got = json.loads((tmp_path / "resume-P2.json").read_text())
    for key in ("epoch1", "dataset_w0", "dataset_w2"):
        assert saved["epoch1"] + got[key] == one[1], key
        assert Counter(i for b in saved["epoch1"] + got[key] for i in b) == Counter(range(N))
    assert got["epoch2"] == one[2]
