"""Every variant and topology delivers exactly the partition's records, py-lmdb's bytes, also
past the end of the data (the endless stream wraps around)."""

import numpy as np
import pytest

import lmdbio
from conftest import Checker, ranks_per_node, sizes, stored_values
from lmdbio import datum

pytestmark = pytest.mark.mpi

VARIANTS = lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS   # the papers' seven, lmdb-get, direct, auto
TOPOLOGIES = ["None:1", "1:1", "2:1", "None:2", "2:2"]   # ranks per node : readers per node


def check_stream(comm, db, variant: str, topology: str, per_rank: int, extra: int, **options):
    """Read ``extra`` batches past one pass over ``db``; each rank's batches must be its slots'
    records (batch t, slot s: record (t * B + s) mod n)."""
    check = Checker(db)
    n, B = len(check.expected), per_rank * comm.size
    batches = -(-n // B) + extra
    rpn, rpr = topology.split(":")
    misplaced = []
    with lmdbio.Reader(db, B, comm, variant=variant, ranks_per_node=ranks_per_node(rpn),
                       readers_per_node=int(rpr), build_provenance=True, **options) as r:
        for t in range(batches):   # no early exit: every rank reads as many batches
            want = ((t * B + comm.rank * per_rank + np.arange(per_rank)) % n).tolist()
            if check(r.read_batch()) != want:
                misplaced.append(f"batch {t} is not records {want}")
    total = sum(comm.allgather(check.count))
    assert not misplaced, misplaced[:3]
    assert not check.wrong, check.wrong[:3]
    assert total == batches * B


DATASETS = ["cifar10", "jpeg", "lmdb10", "reused"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", DATASETS)
@sizes(fast=(2,), gate=(3,))
def test_every_variant_delivers_the_partition(comm, datasets, nprocs, name, variant, topology):
    check_stream(comm, datasets[name], variant, topology, per_rank=6, extra=3)


# At P = 4 the reader groups are what is new: without "None:1" (one reader for every rank,
# the group P = 2 and 3 check), on the two layouts (key order, reused pages); the JPEG and
# LMDB 1.0 files are read in every topology at P = 2 and 3.
@pytest.mark.parametrize("topology", TOPOLOGIES[1:])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["cifar10", "reused"])
@sizes(gate=(4,))
def test_every_variant_delivers_the_partition_in_more_groups(comm, datasets, nprocs, name, variant,
                                                              topology):
    check_stream(comm, datasets[name], variant, topology, per_rank=6, extra=3)


@pytest.mark.parametrize("topology", ["None:1", "1:1"])
@pytest.mark.parametrize("variant", VARIANTS)
@sizes(gate=(4,))
def test_imagenet_records_and_small_coalescing(comm, datasets, nprocs, variant, topology):
    """196 KB records, coalescing across the wrap-around, stagger groups of 1."""
    check_stream(comm, datasets["imagenet"], variant, topology, per_rank=2, extra=9,
                 coalesce_bytes=1 << 20, stagger_size=1)


@pytest.mark.parametrize("variant", ["lmdb", "lmdbio-lmm", "lmdbio-direct",
                                     "lmdbio-lmm-dio-prov-coal-stag"])
@sizes(fast=(2,))
def test_each_batch_decodes_to_its_own_records(comm, datasets, nprocs, variant):
    """``as_datum_array()`` decodes a batch's chunk once, for all of its batches, and slices it:
    every batch's images and labels (a view or a copy, CHW or HWC) are its own records', past
    the wrap-around, for private buffers and for a node group of 2 ranks (rows apart)."""
    values = stored_values(datasets["cifar10"])
    B = 6 * comm.size
    wrong = []
    with lmdbio.Reader(datasets["cifar10"], B, comm, variant=variant, ranks_per_node=2) as r:
        for t in range(-(-len(values) // B) + 3):
            b = r.read_batch()
            parsed = [datum.decode(values[i]) for i in b.indices.tolist()]
            want = np.stack([datum.decode_image(d) for d in parsed])
            images, labels = b.as_datum_array(copy=t % 2 == 0)
            hwc, _ = b.as_datum_array(copy=t % 2 == 1, layout="HWC")
            if not (np.array_equal(images, want) and np.array_equal(hwc, want.transpose(0, 2, 3, 1))
                    and labels.tolist() == [d.label for d in parsed]):
                wrong.append(t)
    assert not wrong, f"rank {comm.rank}: batches {wrong[:5]} decode to other records"
