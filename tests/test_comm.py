"""lmdbio.comm: the Reader's collectives behind one interface; its MPI implementation here
(the torch.distributed one runs under torchrun in tests/test_torch_adapter.py)."""

import sys
import textwrap

import pytest

from conftest import run_mpi
from lmdbio.comm import MPIComm, as_comm
from lmdbio.errors import ConfigurationError

SCRIPT = textwrap.dedent("""
    import sys

    from lmdbio.collective import collective
    from lmdbio.comm import MPIComm, as_comm

    c = as_comm(None)   # mpiexec started us: MPI's COMM_WORLD
    assert isinstance(c, MPIComm) and c.size == 2, (type(c), c.size)
    d = c.dup()
    me = d.rank
    assert d.mpi is not c.mpi and d.native is d.mpi
    assert d.bcast("x" if me == 0 else None) == "x"
    assert d.allgather(me * 10) == [0, 10]
    assert d.gather(me, root=0) == ([0, 1] if me == 0 else None)
    assert [d.allreduce(me + 1, op) for op in ("sum", "min", "max")] == [3, 1, 2]
    assert d.allreduce(me == 1, "lor") is True
    if me == 0:
        d.send({"a": 1}, 1, tag=7)
    else:
        assert d.recv(0, tag=7) == {"a": 1}
    d.barrier(30, "the test's barrier")
    assert d.allgather_within(("v", me), 30) == [("v", 0), ("v", 1)]

    def fails_on_1():
        if me == 1:
            raise ValueError("bad on one")
        return "fine"

    for run in (d.collective, lambda fn: collective(d, fn)):   # the function dispatches
        try:
            run(fails_on_1)
            raise SystemExit(f"rank {me}: no error")
        except ValueError as exc:
            assert "bad on one" in str(exc), exc
    assert d.collective(lambda: me) == me
    assert d.agree(me == 1, 30) == (True, [1], [])
    assert d.node_number(None) == 0 and d.node_number(1) == me
    assert d.local_size() == 2
    d.release(True)
    print(f"rank {me}: comm ok", flush=True)
""")


def test_mpi_implementation_on_two_ranks(tmp_path):
    script = tmp_path / "comm_check.py"
    script.write_text(SCRIPT)
    proc = run_mpi(script, 2, timeout=120)
    assert "rank 0: comm ok" in proc.stdout and "rank 1: comm ok" in proc.stdout


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
