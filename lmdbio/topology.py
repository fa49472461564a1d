"""Node, reader-group and reader communicators, for real or virtual nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import ConfigurationError

if TYPE_CHECKING:   # mpi4py initializes MPI when imported: only where a communicator is made
    from mpi4py import MPI

__all__ = ["Topology", "make_topology", "node_number", "node_path", "check_node_args",
           "reader_group", "group_sizes"]


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
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return True
        return bool(value <= 0)

    if ranks_per_node is not None and bad(ranks_per_node):
        raise ConfigurationError(f"ranks_per_node must be None (the machine's nodes) or an integer "
                                 f">= 1 (virtual nodes of that many ranks), got {ranks_per_node!r}")
    if bad(readers_per_node):
        raise ConfigurationError(f"readers_per_node must be an integer >= 1, got "
                                 f"{readers_per_node!r}")


def reader_group(local: int, node_size: int, readers_per_node: int) -> int:
    """The reader group of a node's ``local``-th rank: ``readers_per_node`` (at most the node's
    size) contiguous groups, the larger ones first where they cannot be equal."""
    r = min(readers_per_node, node_size)
    return local * r // node_size


def group_sizes(nprocs: int, ranks_per_node: int | None = None,
                readers_per_node: int = 1) -> list[int]:
    """The ranks each reader serves, in world-rank order, when ``nprocs`` ranks share one
    machine (``ranks_per_node`` None: one node): the groups :func:`make_topology` makes there.
    They differ where ``ranks_per_node`` does not divide ``nprocs`` (the last node is smaller)
    or ``readers_per_node`` does not divide a node: P = 3 on nodes of 2 gives ``[2, 1]``."""
    check_node_args(ranks_per_node, readers_per_node)
    per_node = nprocs if ranks_per_node is None else min(int(ranks_per_node), nprocs)
    sizes = []
    for first in range(0, nprocs, per_node):
        size = min(per_node, nprocs - first)
        groups = [reader_group(local, size, readers_per_node) for local in range(size)]
        sizes += [groups.count(g) for g in sorted(set(groups))]
    return sizes


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

    group_comm = node.Split(color=reader_group(node.rank, node.size, readers_per_node), key=rank)
    group_ranks = tuple(sorted(group_comm.allgather(rank)))

    # The partition gives rank r the slice r of each batch; a group's share is
    # contiguous only if its ranks are consecutive.
    contiguous = group_ranks == tuple(range(group_ranks[0], group_ranks[-1] + 1))
    ok = comm.allreduce(1 if contiguous else 0, op=MPI.MIN)

    is_reader = group_comm.rank == 0
    split = comm.Split(color=0 if is_reader else MPI.UNDEFINED, key=rank)
    readers_comm = None if split == MPI.COMM_NULL else split
    nreaders = comm.allreduce(1 if is_reader else 0)
    reader_index = group_comm.bcast(split.rank if is_reader else None, root=0)
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


def node_path(comm, path, ranks_per_node: int | None = None) -> str:
    """``path`` with ``{node}`` replaced by this rank's node number (:meth:`lmdbio.comm.Comm.
    node_number`), so each node reads its own copy. Collective over ``comm`` (a
    :class:`lmdbio.comm.Comm`): every rank takes part in finding the numbers when any rank's
    path names ``{node}``."""
    node = None
    if comm.allreduce(1 if "{node}" in str(path) else 0, "max"):
        node = comm.collective(comm.node_number, ranks_per_node)
    return str(path).replace("{node}", str(node))


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
