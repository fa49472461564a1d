"""Reader groups that serve different numbers of ranks read every epoch and every read_batch().

A layout is uneven when ``ranks_per_node`` does not divide P or ``readers_per_node`` does not
divide a node: P = 3 on virtual nodes of 2 (groups of 2 and 1 ranks), P = 3 on one node with 2
readers (2 and 1), P = 5 on virtual nodes of 3 with 2 readers each (2, 1, 1, 1), P = 4 on
virtual nodes of 3 (3 and 1). With COAL, a group's own chunk (batches per request) depends on
its ranks; every reader must still cut the batches at the same chunks, or the ranks' epochs
start apart and STAG's turns and DM's ring lose step. Each layout reads 2,000 stream batches
then two file-order epochs, every record compared with py-lmdb's, for every variant.
"""

import numpy as np
import pytest
from conftest import Checker

import lmdbio
from lmdbio import registry
from lmdbio.options import parse_variant
from lmdbio.topology import group_sizes

pytestmark = pytest.mark.mpi

#: COAL's request: small enough that a group's own chunk depends on its ranks (cifar10's 3 KB
#: records, 2 per rank: k = 2 for a group of 2 ranks, 4 for a group of 1).
COALESCE = 64 << 10
PER_RANK = 2


def every_variant() -> list[str]:
    """Every variant the Reader accepts by name (the registry's: each valid set of tags after
    ``lmdbio-lmm``, and the per-rank ones; ``auto`` picks one of them)."""
    return list(registry.named())


#: ``(nprocs, ranks_per_node, readers_per_node)``: the three layouts of the gate.
LAYOUTS = [pytest.param(p, rpn, r, marks=pytest.mark.gate, id=f"P{p}-{rpn or 'node'}x{r}")
           for p, rpn, r in [(3, 2, 1), (3, None, 2), (5, 3, 2)]]


def read_uneven(comm, db, variant: str, rpn, readers: int, batches: int) -> None:
    """``batches`` stream batches, then epochs 0 and 1; every record and position checked."""
    check = Checker(db)
    n, B = len(check.expected), PER_RANK * comm.size
    misplaced: list[str] = []
    seen: list[list[int]] = [[], []]
    with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=rpn,
                       readers_per_node=readers, coalesce_bytes=COALESCE,
                       build_provenance=True) as r:
        topo = r.topology
        group = None if topo is None else (topo.group_ranks[0], topo.group_comm.size)
        for t in range(batches):   # batch t: positions (t*B + j) mod n
            want = ((t * B + comm.rank * PER_RANK + np.arange(PER_RANK)) % n).tolist()
            if check(r.read_batch()) != want and len(misplaced) < 3:
                misplaced.append(f"stream batch {t} is not records {want}")
        for e in range(2):
            for b in r.epoch(e):
                seen[e] += check(b)
    groups = sorted(set(comm.allgather(group)) - {None})
    everyone = comm.allgather(seen)
    assert not misplaced, misplaced
    assert not check.wrong, check.wrong[:3]
    if parse_variant(variant).localized:
        widths = [size for _, size in groups]
        assert widths == group_sizes(comm.size, rpn, readers) and len(set(widths)) > 1, widths
    for e in range(2):   # file order, "short": every record once across the ranks
        got = sorted(i for rank in everyone for i in rank[e])
        assert got == list(range(n)), f"epoch {e}: records missing or repeated"


@pytest.mark.parametrize("variant", every_variant())
@pytest.mark.parametrize(("nprocs", "rpn", "readers"), LAYOUTS)
def test_uneven_groups_read_two_epochs_and_2000_batches(comm, datasets, nprocs, rpn, readers,
                                                         variant):
    read_uneven(comm, datasets["cifar10_203"], variant, rpn, readers, 2000)


@pytest.mark.parametrize("variant", ["lmdbio-lmm-dio-coal", "lmdbio-lmm-dio-prov-coal-stag"])
@pytest.mark.parametrize(("nprocs", "rpn", "readers"), [pytest.param(4, 3, 1, id="P4-3x1")])
def test_uneven_groups_with_coal_and_stag(comm, datasets, nprocs, rpn, readers, variant):
    """make test's share: the COAL and STAG variants on groups of 3 and 1 ranks."""
    read_uneven(comm, datasets["cifar10_203"], variant, rpn, readers, 200)
