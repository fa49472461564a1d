"""The collectives a Reader needs, over MPI or ``torch.distributed`` (:class:`Comm`).

The per-rank variants (every rank reads its own records: ``lmdb``, ``lmdb-get``,
``lmdbio-direct``) need a few collectives only: the ranks agree on the snapshot, take rank
0's choices (bcast), reduce and gather small values, meet at a bounded barrier, and name a
rank that did not come. :class:`Comm` is that set. :class:`MPIComm` runs it on an mpi4py
communicator (the bounded tree of :mod:`lmdbio.collective`); :class:`TorchComm` on a
``torch.distributed`` process group (gloo, CPU), so a job started by ``torchrun`` reads
with no MPI: nothing on that path imports mpi4py. The node-group variants (LMM) share
MPI-3 windows and need an MPI communicator (:attr:`Comm.mpi`).

The object methods (``rank``, ``size``, ``bcast``, ``allgather``, ``gather``,
``allreduce``, ``send``, ``recv``) take and return Python objects in mpi4py's shape, so
the pipeline's stages run on either. The bounded ones (``barrier``, ``allgather_within``,
``collective``, ``agree``) end within ``LMDBIO_TIMEOUT`` (or the limit given) on every
rank and name the ranks that did not come.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError, LmdbioError, PeerTimeoutError
from .failures import lowest_error, portable, rebuild
from .waiting import timeout

__all__ = ["Comm", "MPIComm", "TorchComm", "LocalComm", "as_comm", "launched_by_mpi", "PER_RANK_HINT"]

#: Environment variables MPI launchers (Hydra, Open MPI, PMIx, Slurm's PMI) set in each rank.
MPI_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                     "MPI_LOCALNRANKS")

#: The variants a job without MPI reads with (``torchrun``): every rank reads its own records.
PER_RANK_HINT = "'lmdb', 'lmdb-get', 'lmdbio-direct' or 'auto'"


def launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (its environment says so)."""
    return any(v in os.environ for v in MPI_LAUNCHER_VARS)


def _torch_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def as_comm(comm=None) -> Comm:
    """``comm`` as a :class:`Comm`: an mpi4py communicator, a ``torch.distributed`` process
    group, or a Comm. None: MPI's COMM_WORLD, unless the process was started without an MPI
    launcher and ``torch.distributed`` has a default group (``torchrun``): then that group."""
    if isinstance(comm, Comm):
        return comm
    if comm is None:
        if not launched_by_mpi():
            if _torch_initialized():
                return TorchComm()
            if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
                raise ConfigurationError(
                    f"this process was started by torchrun (RANK={os.environ['RANK']}, "
                    f"WORLD_SIZE={os.environ['WORLD_SIZE']}) and torch.distributed has no "
                    "default group: call torch.distributed.init_process_group('gloo') first "
                    "(or pass comm=), or launch with mpiexec")
        from mpi4py import MPI

        return MPIComm(MPI.COMM_WORLD)
    module = type(comm).__module__
    if module.startswith("mpi4py"):
        return MPIComm(comm)
    if module.startswith("torch"):
        return TorchComm(comm)
    raise ConfigurationError(f"comm must be an mpi4py communicator, a torch.distributed process "
                             f"group or None, got a {type(comm).__name__}")


class Comm(ABC):
    """The collectives of a Reader's per-rank path (see the module's docstring)."""

    rank: int
    size: int
    #: The mpi4py communicator (node-group variants need one), or None.
    mpi = None

    # -- objects, in mpi4py's shape
    @abstractmethod
    def bcast(self, obj: Any, root: int = 0) -> Any: ...

    @abstractmethod
    def allgather(self, obj: Any) -> list: ...

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> list | None: ...

    @abstractmethod
    def allreduce(self, obj: Any, op="sum") -> Any:
        """``op``: "sum", "min", "max", "lor" (or an mpi4py op on MPI)."""

    @abstractmethod
    def send(self, obj: Any, dest: int, tag: int) -> None: ...

    @abstractmethod
    def recv(self, source: int, tag: int) -> Any: ...

    # -- bounded: every rank ends within the limit, naming the ranks that did not come
    @abstractmethod
    def barrier(self, limit: float | None = None, what: str = "a barrier") -> None: ...

    @abstractmethod
    def allgather_within(self, value: Any, limit: float | None = None,
                         what: str = "an allgather") -> list:
        """:meth:`allgather` bounded by ``limit`` (default ``LMDBIO_TIMEOUT``)."""

    @abstractmethod
    def collective(self, fn: Callable, *args, **kwargs):
        """Run ``fn`` on every rank; if it fails anywhere, raise the lowest failing rank's
        error on every rank (:func:`lmdbio.collective.collective`)."""

    @abstractmethod
    def agree(self, failed: bool, limit: float) -> tuple[bool, list[int], list[int]]:
        """(every rank came, ranks that failed, ranks that did not come), within ``limit``
        (:func:`lmdbio.collective.agree`)."""

    # -- the communicator itself
    @abstractmethod
    def dup(self) -> Comm:
        """A communicator of the same ranks whose messages meet no other's. Collective."""

    @abstractmethod
    def release(self, settled: bool) -> None:
        """Let go of a :meth:`dup`'s communicator (kept when a message may be in flight)."""

    @abstractmethod
    def abort(self, exc: BaseException) -> None:
        """End the whole job: 130 for a KeyboardInterrupt, 1 otherwise."""

    @abstractmethod
    def node_number(self, ranks_per_node: int | None = None) -> int:
        """This rank's node number, for ``{node}`` in a path. Collective."""

    @abstractmethod
    def local_size(self) -> int:
        """Ranks on this rank's node. Collective."""

    @property
    def native(self):
        """What the pipeline's stages talk on: the mpi4py communicator, or this object."""
        return self.mpi if self.mpi is not None else self


# --------------------------------------------------------------------------- MPI
class MPIComm(Comm):
    """:class:`Comm` on an mpi4py communicator: :mod:`lmdbio.collective`'s bounded tree."""

    def __init__(self, comm):
        self.mpi = comm
        self.rank, self.size = comm.rank, comm.size

    def bcast(self, obj, root=0):
        return self.mpi.bcast(obj, root=root)

    def allgather(self, obj):
        return self.mpi.allgather(obj)

    def gather(self, obj, root=0):
        return self.mpi.gather(obj, root=root)

    def allreduce(self, obj, op="sum"):
        from mpi4py import MPI

        ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "lor": MPI.LOR}
        return self.mpi.allreduce(obj, op=ops[op] if isinstance(op, str) else op)

    def send(self, obj, dest, tag):
        self.mpi.send(obj, dest=dest, tag=tag)

    def recv(self, source, tag):
        return self.mpi.recv(source=source, tag=tag)

    def barrier(self, limit=None, what="a barrier"):
        from .waiting import polite_barrier

        polite_barrier(self.mpi, timeout() if limit is None else limit,
                       f"rank {self.rank}: a rank did not come to {what}")

    def allgather_within(self, value, limit=None, what="an allgather"):
        from .collective import allgather

        return allgather(self.mpi, value, limit, what)

    def collective(self, fn, *args, **kwargs):
        from .collective import collective

        return collective(self.mpi, fn, *args, **kwargs)

    def agree(self, failed, limit):
        from .collective import agree

        return agree(self.mpi, failed, limit)

    def dup(self):
        return MPIComm(self.mpi.Dup())

    def release(self, settled):
        from .collective import release_comms

        release_comms([self.mpi], settled)

    def abort(self, exc):
        from .collective import abort_job

        abort_job(self.mpi, exc)

    def node_number(self, ranks_per_node=None):
        from .topology import node_number

        return node_number(self.mpi, ranks_per_node)

    def local_size(self):
        from mpi4py import MPI

        shared = self.mpi.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        try:
            return shared.size
        finally:
            shared.Free()


# --------------------------------------------------------------------------- torch.distributed
def _dist():
    import torch.distributed as dist

    return dist


_OPS = {"sum": lambda a, b: a + b, "min": min, "max": max, "lor": lambda a, b: bool(a or b)}

# Groups a rank gave up a round on: a late message may still arrive there, so never destroyed.
_PARKED: list = []


class TorchComm(Comm):
    """:class:`Comm` on a ``torch.distributed`` process group (default: the default group).

    Objects travel with ``all_gather_object``, ``broadcast_object_list``, ``gather_object``
    and ``send_object_list``; the bounded steps meet first at ``monitored_barrier`` (gloo),
    which names the ranks that did not come. :meth:`dup` makes a gloo group of the same ranks
    whose operations time out after ``LMDBIO_TIMEOUT``, so a Reader over an NCCL job's ranks
    talks on CPU. The group must hold every rank of the default group (making a group is
    collective over all of them).
    """

    def __init__(self, group=None, *, owned: bool = False):
        dist = _dist()
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigurationError("torch.distributed has no default group: call "
                                     "torch.distributed.init_process_group('gloo') first")
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._owned = owned

    def _global(self, r: int) -> int:
        return _dist().get_global_rank(self.group, r)

    def bcast(self, obj, root=0):
        box = [obj if self.rank == root else None]
        _dist().broadcast_object_list(box, src=self._global(root), group=self.group)
        return box[0]

    def allgather(self, obj):
        out = [None] * self.size
        _dist().all_gather_object(out, obj, group=self.group)
        return out

    def gather(self, obj, root=0):
        out = [None] * self.size if self.rank == root else None
        _dist().gather_object(obj, out, dst=self._global(root), group=self.group)
        return out

    def allreduce(self, obj, op="sum"):
        if not isinstance(op, str):   # an mpi4py op from a stage: mpi4py is loaded already
            from mpi4py import MPI

            op = next(name for name, o in (("sum", MPI.SUM), ("min", MPI.MIN),
                                           ("max", MPI.MAX), ("lor", MPI.LOR)) if o == op)
        return functools.reduce(_OPS[op], self.allgather(obj))

    def send(self, obj, dest, tag):   # a pair's messages arrive in order: no tags needed
        _dist().send_object_list([obj], dst=self._global(dest), group=self.group)

    def recv(self, source, tag):
        box = [None]
        _dist().recv_object_list(box, src=self._global(source), group=self.group)
        return box[0]

    # -- bounded
    def _meet(self, limit: float) -> list[int] | None:
        """Meet every rank within ``limit`` seconds: [] when all came, else the ranks that
        did not (rank 0 knows them; the others name rank 0, which did not let them pass)."""
        from datetime import timedelta

        if self.size == 1:
            return []
        try:
            _dist().monitored_barrier(group=self.group, timeout=timedelta(seconds=limit),
                                      wait_all_ranks=True)
        except RuntimeError as exc:
            if self.group not in _PARKED:
                _PARKED.append(self.group)
            found = re.search(r"Ranks? ([\d, ]+) failed to pass", str(exc))
            if self.rank == 0 and found:
                return sorted(self._global_to_group(int(x)) for x in found.group(1).split(",")
                              if x.strip())
            return [0]
        return []

    def _global_to_group(self, g: int) -> int:
        return _dist().get_group_rank(self.group, g)

    def _not_come(self, missing: list[int], what: str, limit: float) -> PeerTimeoutError:
        if self.rank != 0 and missing == [0]:
            return PeerTimeoutError(
                f"rank {self.rank}: rank 0 did not let this rank pass {what} within {limit:g} s "
                "(LMDBIO_TIMEOUT): rank 0 or another rank stopped (rank 0's error names it). "
                "Every rank must take the same collective steps (constructing the Reader, each "
                "epoch(), close()) in the same order", missing=[0], limit=limit)
        return PeerTimeoutError(
            f"rank {self.rank}: rank(s) {missing} did not come to {what} within {limit:g} s "
            "(LMDBIO_TIMEOUT): they stopped (an error outside lmdbio, an early break, a "
            "debugger) or exited. Every rank must take the same collective steps (constructing "
            "the Reader, each epoch(), close()) in the same order", missing=missing, limit=limit)

    def barrier(self, limit=None, what="a barrier"):
        limit = timeout() if limit is None else limit
        missing = self._meet(limit)
        if missing:
            raise self._not_come(missing, what, limit)

    def allgather_within(self, value, limit=None, what="an allgather"):
        if self.size == 1:
            return [value]
        self.barrier(limit, what)
        return self.allgather(value)

    def collective(self, fn, *args, **kwargs):
        if self.size == 1:
            return fn(*args, **kwargs)
        limit = timeout()
        what = f"the collective step {getattr(fn, '__qualname__', 'of the Reader')}"
        missing = self._meet(limit)
        if missing:
            raise self._not_come(missing, what, limit)
        try:
            result, err = fn(*args, **kwargs), None
        except BaseException as exc:  # whatever it is, it must not strand the other ranks
            result, err = None, exc
        missing = self._meet(limit)
        if missing:
            if err is not None:
                raise err
            raise self._not_come(missing, f"the end of {what}", limit)
        mine = ([], None) if err is None else ([self.rank], portable(self.rank, err))
        failure = functools.reduce(lowest_error, self.allgather(mine))[1]
        if failure is not None:
            if err is not None and failure[0] == self.rank:
                raise err
            raise rebuild(*failure)
        return result

    def agree(self, failed, limit):
        mine = [self.rank] if failed else []
        if self.size == 1:
            return True, mine, []
        missing = self._meet(limit)
        if missing:
            return False, mine, missing
        return True, sorted(r for f in self.allgather(mine) for r in f), []

    # -- the group itself
    def dup(self):
        from datetime import timedelta

        dist = _dist()
        ranks = dist.get_process_group_ranks(self.group)
        if len(ranks) != dist.get_world_size():
            raise ConfigurationError(
                f"the process group holds {len(ranks)} of the {dist.get_world_size()} ranks of "
                "torch.distributed's default group: pass a group of every rank (or none)")
        group = dist.new_group(ranks=ranks, backend="gloo", timeout=timedelta(seconds=timeout()))
        return TorchComm(group, owned=True)

    def release(self, settled):
        if self._owned and settled and self.group not in _PARKED:
            self._owned = False
            _dist().destroy_process_group(self.group)

    def abort(self, exc):
        # torchrun ends the other workers when one exits with an error.
        if threading.current_thread() is threading.main_thread():
            import signal

            signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.5)
        os._exit(130 if isinstance(exc, KeyboardInterrupt) else 1)

    def node_number(self, ranks_per_node=None):
        if ranks_per_node is not None:
            from .topology import check_node_args

            check_node_args(ranks_per_node)
            return self.rank // int(ranks_per_node)
        hosts = self.allgather(socket.gethostname())
        return list(dict.fromkeys(hosts)).index(hosts[self.rank])

    def local_size(self):
        raw = os.environ.get("LOCAL_WORLD_SIZE", "")
        if raw.isdigit() and int(raw) > 0:
            return int(raw)
        hosts = self.allgather(socket.gethostname())
        return hosts.count(hosts[self.rank])


class LocalComm(Comm):
    """A :class:`~lmdbio.comm.Comm` of one process (rank 0 of 1): every collective is the
    call itself, nothing is sent. A DataLoader worker's pipeline runs on it."""

    rank, size = 0, 1

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]

    def gather(self, obj, root=0):
        return [obj]

    def allreduce(self, obj, op="sum"):
        return bool(obj) if op == "lor" else obj

    def send(self, obj, dest, tag):
        raise LmdbioError(f"a one-process communicator has no rank {dest} to send to")

    def recv(self, source, tag):
        raise LmdbioError(f"a one-process communicator has no rank {source} to receive from")

    def barrier(self, limit=None, what="a barrier"):
        return None

    def allgather_within(self, value, limit=None, what="an allgather"):
        return [value]

    def collective(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def agree(self, failed, limit):
        return True, [0] if failed else [], []

    def dup(self):
        return LocalComm()

    def release(self, settled):
        return None

    def abort(self, exc):
        os._exit(130 if isinstance(exc, KeyboardInterrupt) else 1)

    def node_number(self, ranks_per_node=None):
        return 0

    def local_size(self):
        return 1
