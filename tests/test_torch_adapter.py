"""lmdbio.torch: imports without torch; with torch, an IterableDataset over the epochs."""

import importlib.util

import numpy as np
import pytest
from mpi4py import MPI

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("torch") / "c", "cifar10", 203,
                        commit_every=50, seed=1)


def test_module_imports_without_torch():
    import lmdbio.torch as lt

    assert "LmdbDataset" in lt.__all__
    with pytest.raises(AttributeError):
        lt.NoSuchThing  # noqa: B018


@pytest.mark.skipif(HAVE_TORCH, reason="torch is installed: the missing-torch message is moot")
def test_clear_message_without_torch():
    import lmdbio.torch as lt

    with pytest.raises(ImportError, match="pip install torch"):
        lt.LmdbDataset


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
