"""Node, reader-group and reader communicators, for real or virtual nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import ConfigurationError

if TYPE_CHECKING:   # mpi4py initializes MPI when imported: only where a communicator is made
    from mpi4py import MPI

__all__ = ["Topology", "make_topology", "node_number", "check_node_args"]


@dataclass
class Topology:
    """Where a rank sits: its node, its reader group, and (on readers) the reader ring.

    A *group* is a contiguous run of world ranks on one node served by one
    reader, its first rank. ``readers_comm`` holds every reader in world-rank
    order (so reader k+1's records follow reader k's); it is None elsewhere.
    """

    comm: MPI.Comm
    node_comm: MPI.Comm
    group_comm: MPI.Comm
    readers_comm: MPI.Comm | None
    group_ranks: tuple[int, ...]   # world ranks of this rank's group, ascending
    node_index: int                # index of this rank's node, 0..nodes-1
    nodes: int
    nreaders: int
    reader_index: int              # index of this rank's group's reader among readers

    @property
    def is_reader(self) -> bool:
        return self.group_comm.rank == 0

    def free(self) -> None:
        from mpi4py import MPI

        for c in (self.readers_comm, self.group_comm, self.node_comm):
            if c is not None and c != MPI.COMM_NULL:
                c.Free()


def check_node_args(ranks_per_node: int | None, readers_per_node: int = 1) -> None:
    """ConfigurationError naming ``ranks_per_node`` or ``readers_per_node`` when it is not a
    positive integer (``ranks_per_node`` may also be None: the real nodes)."""
    def bad(value) -> bool:
        return isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0

    if ranks_per_node is not None and bad(ranks_per_node):
        raise ConfigurationError(f"ranks_per_node must be None (the machine's nodes) or an integer "
                                 f">= 1 (virtual nodes of that many ranks), got {ranks_per_node!r}")
    if bad(readers_per_node):
        raise ConfigurationError(f"readers_per_node must be an integer >= 1, got "
                                 f"{readers_per_node!r}")


def make_topology(comm: MPI.Comm, ranks_per_node: int | None = None,
                  readers_per_node: int = 1) -> Topology:
    """Split ``comm`` into nodes, reader groups and the readers' communicator. Collective.

    Args:
        comm: the job's communicator.
        ranks_per_node: None for real nodes (``MPI_COMM_TYPE_SHARED``); k for
            virtual nodes of k consecutive ranks (always inside one real node,
            so shared memory still works).
        readers_per_node: readers per node, each serving a contiguous share
            of the node's ranks (capped at the node's size).
    """
    from mpi4py import MPI

    check_node_args(ranks_per_node, readers_per_node)
    ranks_per_node = None if ranks_per_node is None else int(ranks_per_node)
    readers_per_node = int(readers_per_node)
    rank = comm.rank
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    if ranks_per_node is None:
        node = shared
    else:
        node = shared.Split(color=shared.rank // ranks_per_node, key=rank)
        shared.Free()
    node_ranks = node.allgather(rank)
    # Node leaders number the nodes in world-rank order of their first rank.
    leader = min(node_ranks)
    leaders = sorted(set(comm.allgather(leader)))
    node_index = leaders.index(leader)

    local, lsize = node.rank, node.size
    r = min(readers_per_node, lsize)
    group = local * r // lsize
    group_comm = node.Split(color=group, key=rank)
    group_ranks = tuple(sorted(group_comm.allgather(rank)))

    # The partition gives rank r the slice r of each batch; a group's share is
    # contiguous only if its ranks are consecutive.
    contiguous = group_ranks == tuple(range(group_ranks[0], group_ranks[-1] + 1))
    ok = comm.allreduce(1 if contiguous else 0, op=MPI.MIN)

    is_reader = group_comm.rank == 0
    readers_comm = comm.Split(color=0 if is_reader else MPI.UNDEFINED, key=rank)
    if readers_comm == MPI.COMM_NULL:
        readers_comm = None
    nreaders = comm.allreduce(1 if is_reader else 0)
    reader_index = group_comm.bcast(readers_comm.rank if is_reader else None, root=0)
    topo = Topology(comm=comm, node_comm=node, group_comm=group_comm, readers_comm=readers_comm,
                    group_ranks=group_ranks, node_index=node_index, nodes=len(leaders),
                    nreaders=nreaders, reader_index=reader_index)
    if not ok:
        topo.free()
        raise ConfigurationError(
            "the ranks sharing a node are not consecutive (cyclic rank placement); "
            "launch with block placement (e.g. mpiexec -bind-to core -map-by core, "
            "srun --distribution=block) or pass ranks_per_node to use virtual nodes")
    return topo


def node_number(comm: MPI.Comm, ranks_per_node: int | None = None) -> int:
    """This rank's node number, for ``{node}`` in a Reader path. Collective.

    Virtual nodes: ``rank // ranks_per_node``. Real nodes: the index of the
    rank's ``MPI_COMM_TYPE_SHARED`` group, groups ordered by their lowest rank.
    """
    if ranks_per_node is not None:
        check_node_args(ranks_per_node)
        return comm.rank // int(ranks_per_node)
    from mpi4py import MPI

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        leader = min(shared.allgather(comm.rank))
    finally:
        shared.Free()
    return sorted(set(comm.allgather(leader))).index(leader)
