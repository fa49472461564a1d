"""lmdbio.comm: the Reader's collectives behind one interface. Its MPI implementation on two
ranks: tests/mpi_ranks/test_comm.py; the torch.distributed one runs under torchrun in
tests/test_torch_adapter.py."""

import sys

import pytest

from lmdbio.comm import MPIComm, as_comm
from lmdbio.errors import ConfigurationError


def test_default_is_mpi_outside_torchrun(monkeypatch):
    from mpi4py import MPI

    c = as_comm(MPI.COMM_SELF)
    assert isinstance(c, MPIComm) and c.size == 1 and as_comm(c) is c


def test_torchrun_without_a_default_group_is_named(monkeypatch):
    from lmdbio.comm import MPI_LAUNCHER_VARS

    for v in MPI_LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(ConfigurationError, match=r"started by torchrun \(RANK=1, WORLD_SIZE=4\)"
                       r".*init_process_group\('gloo'\)"):
        as_comm(None)


def test_other_objects_are_refused():
    with pytest.raises(ConfigurationError, match="mpi4py communicator, a torch.distributed"):
        as_comm(object())
