"""The option matrix's combinations: one Combo per set of Reader options, and the dimensions."""

from __future__ import annotations

from dataclasses import dataclass

from lmdbio.options import EXTRA_VARIANTS, VARIANTS
from lmdbio.topology import group_sizes

__all__ = ["Combo", "BATCHES", "SMALL_COALESCE", "MEDIUM_COALESCE", "COALESCE_BYTES",
           "VARIANT_NAMES", "STALL_BATCHES", "STALL_MAX_S", "STALL_RECORDS", "PEER_TIMEOUT_S",
           "dataset_records", "topologies", "uneven_layouts", "dimensions", "DIMENSIONS"]


#: ``coalesce="small"``: COAL's request size, well under one ImageNet record.
SMALL_COALESCE = 16 << 10
#: ``coalesce="medium"`` (uneven layouts only): a request that holds more batches of a small
#: reader group than of a large one (CIFAR-size, mixed and JPEG records), so the groups' own
#: chunk sizes differ and must be agreed.
MEDIUM_COALESCE = 1 << 20
#: ``(global batch B, batches per epoch)`` by record kind: N is that many B (``uneven``: half
#: a batch less). CIFAR-size epochs are long (40 batches), so a node reader's shared slots
#: (up to 16) come round several times in one epoch; ImageNet-size batches of 64 fill a
#: reader's chunk with 12 MB, so it has the fewest slots (4).
BATCHES = {"cifar10": (32, 40), "imagenet": (64, 5), "mixed": (32, 12), "jpeg": (32, 6)}
#: Every named variant, then ``auto``.
VARIANT_NAMES = tuple(v for v in VARIANTS + EXTRA_VARIANTS if v != "auto") + ("auto",)
#: With prefetch, a node reader's members stop this many of their batch times in epoch 1
#: (at most STALL_MAX_S): more than the reader's shared slots, so a reader that may run
#: ahead gets round to the slots they hold.
STALL_BATCHES = 32
STALL_MAX_S = 0.4
#: The record kinds whose epochs outlast a node reader's slots (see the module docstring).
STALL_RECORDS = ("cifar10", "imagenet")
#: ``LMDBIO_TIMEOUT`` in the jobs: a stuck peer raises well before the hang watchdog. A
#: combination that delivers right but spends this long in one phase fails too (a rank waited
#: out a timeout).
PEER_TIMEOUT_S = 10


#: ``coalesce_bytes`` by the ``coalesce`` dimension's value (None: COAL's default, 4 MiB).
COALESCE_BYTES = {"default": None, "small": SMALL_COALESCE, "medium": MEDIUM_COALESCE}


@dataclass(frozen=True)
class Combo:
    """One combination of Reader options and data set (P ranks, the record kind's batch)."""

    nprocs: int
    variant: str
    prefetch: int
    shuffle: bool | str
    last_batch: str
    ranks_per_node: int | None
    readers_per_node: int
    records: str          # cifar10, imagenet, mixed, jpeg
    sidecar: bool         # a provenance sidecar beside data.mdb
    uneven: bool          # N not a multiple of B (gcd(N, B) = B/2)
    coalesce: str         # "default", "small" (SMALL_COALESCE) or "medium" (MEDIUM_COALESCE)

    @property
    def n(self) -> int:
        return dataset_records(self.records, self.uneven)

    @property
    def batch(self) -> int:
        return BATCHES[self.records][0]

    def reader_kwargs(self) -> dict:
        """The Reader's keyword arguments for this combination (path, B and comm apart)."""
        return dict(variant=self.variant, prefetch=self.prefetch, shuffle=self.shuffle,
                    last_batch=self.last_batch, ranks_per_node=self.ranks_per_node,
                    readers_per_node=self.readers_per_node, build_provenance=False,
                    coalesce_bytes=COALESCE_BYTES[self.coalesce],
                    seed=7, shuffle_block=24, shuffle_window=3)

    def label(self) -> str:
        topo = f"{self.ranks_per_node or 'node'}x{self.readers_per_node}r"
        return (f"P={self.nprocs} {self.variant} prefetch={self.prefetch} shuffle={self.shuffle} "
                f"last={self.last_batch} topo={topo} {self.records} N={self.n} "
                f"sidecar={'yes' if self.sidecar else 'no'} coalesce={self.coalesce}")


def dataset_records(records: str, uneven: bool) -> int:
    """N of a record kind's data set: a multiple of its batch B, or B/2 less (gcd(N, B) = B/2)."""
    batch, count = BATCHES[records]
    return count * batch - (batch // 2 if uneven else 0)


def topologies(nprocs: int) -> list[tuple[int | None, int]]:
    """``(ranks_per_node, readers_per_node)``: one node, P/2 and P/4 ranks per virtual node,
    1 reader per node, and 2 where a node has at least 2 ranks."""
    out = []
    for rpn in (None, nprocs // 2, nprocs // 4):
        if rpn is not None and rpn < 1:
            continue
        size = nprocs if rpn is None else rpn
        out += [(rpn, r) for r in (1, 2) if r == 1 or size >= 2]
    return list(dict.fromkeys(out))


def uneven_layouts(nprocs: int) -> list[tuple[int | None, int]]:
    """``(ranks_per_node, readers_per_node)`` whose reader groups serve different numbers of
    ranks (:func:`lmdbio.topology.group_sizes`): a last virtual node smaller than the others,
    or 2 or 3 readers that do not divide a node. At P = 4: one node of 3 readers (groups of 2,
    1, 1), nodes of 3 and 1 with 1 reader (3, 1) or 2 (2, 1, 1)."""
    out = []
    for rpn in (None, *range(2, nprocs)):
        for readers in (1, 2, 3):
            sizes = group_sizes(nprocs, rpn, readers)
            if readers <= (rpn or nprocs) and len(set(sizes)) > 1:
                out.append((rpn, readers))
    return out


def dimensions(nprocs: int, layouts: str = "even") -> dict[str, tuple]:
    """The matrix's dimensions at ``nprocs`` ranks (``topology`` stands for two fields) on the
    :func:`topologies` (``layouts="even"``) or the :func:`uneven_layouts` (``"uneven"``)."""
    topology = topologies(nprocs) if layouts == "even" else uneven_layouts(nprocs)
    return {"variant": VARIANT_NAMES, "prefetch": (0, 1, 3), "shuffle": (False, "window", "shard"),
            "last_batch": ("short", "pad", "drop"), "topology": tuple(topology),
            "records": ("cifar10", "imagenet", "mixed", "jpeg"), "sidecar": (True, False),
            "uneven": (False, True),
            "coalesce": ("default", "small") + (("medium",) if layouts == "uneven" else ())}


#: The dimensions at P = 4.
DIMENSIONS = dimensions(4)
