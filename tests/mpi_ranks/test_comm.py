"""lmdbio.comm's MPI implementation on two ranks: what mpiexec started is MPI's COMM_WORLD, and
its duplicate answers every collective the Reader uses."""

import pytest

from conftest import sizes
from lmdbio.collective import collective
from lmdbio.comm import MPIComm, as_comm

pytestmark = pytest.mark.mpi


@sizes(fast=(2,))
def test_mpi_implementation_on_two_ranks(nprocs):
    c = as_comm(None)   # mpiexec started us: MPI's COMM_WORLD
    d = c.dup()
    me = d.rank
    got = {"bcast": d.bcast("x" if me == 0 else None), "allgather": d.allgather(me * 10),
           "gather": d.gather(me, root=0),
           "allreduce": [d.allreduce(me + 1, op) for op in ("sum", "min", "max")],
           "lor": d.allreduce(me == 1, "lor")}
    if me == 0:
        d.send({"a": 1}, 1, tag=7)
    else:
        got["recv"] = d.recv(0, tag=7)
    d.barrier(30, "the test's barrier")
    got["within"] = d.allgather_within(("v", me), 30)

    def fails_on_1():
        if me == 1:
            raise ValueError("bad on one")
        return "fine"

    raised = []
    for run in (d.collective, lambda fn: collective(d, fn)):   # the function dispatches
        try:
            raised.append(f"nothing: {run(fails_on_1)}")
        except Exception as exc:   # asserted below, once every rank has taken every step
            raised.append(f"{type(exc).__name__}: {exc}")
    got.update(collective=d.collective(lambda: me), agree=d.agree(me == 1, 30),
               nodes=(d.node_number(None), d.node_number(1)), local=d.local_size())
    d.release(True)
    assert isinstance(c, MPIComm) and c.size == 2, (type(c), c.size)
    assert d.mpi is not c.mpi and d.native is d.mpi
    assert (got["bcast"], got["allgather"], got["gather"]) == ("x", [0, 10],
                                                               [0, 1] if me == 0 else None)
    assert (got["allreduce"], got["lor"]) == ([3, 1, 2], True)
    assert got.get("recv") == (None if me == 0 else {"a": 1})
    assert got["within"] == [("v", 0), ("v", 1)]
    assert all(r.startswith("ValueError: ") and "bad on one" in r for r in raised), raised
    assert (got["collective"], got["agree"]) == (me, (True, [1], []))
    assert (got["nodes"], got["local"]) == ((0, me), 2)
