"""The built-in stages: the papers' six optimizations and the per-rank pieces, each once.

How to add one: docs/reader.md, "How to add an optimization".
"""

from __future__ import annotations

from .registry import Optimization, Stage, feature, register

__all__ = ["DEFAULT_COALESCE_BYTES"]

#: COAL's request size when a variant name turns it on without ``coalesce_bytes``.
DEFAULT_COALESCE_BYTES = 4 << 20

feature("node", "node readers")
feature("rank", "per-rank reading")
feature("views", "records as views into LMDB's map")
feature("extents", "byte extents")
feature("ring", "DM's cursor ring")
feature("map", "copies out of LMDB's map")
feature("direct", "direct reads")

register(
    # The papers' optimizations, in their order (a variant's name lists its tags so).
    Optimization("lmm", "LMM", "one reader per node walks for the node, into MPI-3 shared memory",
                 "mmap contention"),
    Optimization("dm", "DM", "readers pass a portable cursor around a ring; speculative page "
                 "prefetch", "sequential seek"),
    Optimization("dio", "DIO", "a record index built once; one `preadv` per extent",
                 "implicit small I/O"),
    Optimization("prov", "PROV", "extents computed from the provenance sidecar, no traversal",
                 "seek/index pass"),
    Optimization("coal", "COAL", "several batches per request (about 4 MiB)", "I/O size mismatch"),
    Optimization("stag", "STAG", "reader groups take turns", "storage contention"),

    # scope: who reads
    Stage("scope", True, "lmm", "node readers sharing records through MPI-3 shared memory",
          tag="lmm", provides={"node"}),
    Stage("scope", False, "per-rank", "per-rank reading: the lmdb and lmdb-get baselines, "
          "lmdbio-direct", provides={"rank"}),

    # locators: how a reader finds its records
    Stage("locator", "walk", "walk", "cursor walks from record to record", "walk:Walk",
          provides={"views"}, variant="lmdb",
          summary="every rank walks an LMDB cursor and copies out of mmap (Caffe)",
          problem="baseline"),
    Stage("locator", "ring", "ring", "DM's cursor hand-offs around a ring of readers",
          "ring:Ring", tag="dm", provides={"views", "ring"}, needs={"node"},
          excludes={"direct"}),
    Stage("locator", "index", "index", "DIO's record-index look-ups", "index:Index",
          provides={"extents"}, needs={"node"}),
    Stage("locator", "provenance", "prov", "PROV's extents from the provenance sidecar",
          "prov:Prov", tag="prov", provides={"extents"}, needs={"node"}, sidecar="needs"),
    Stage("locator", "key", "key", "lmdb-get's txn.get calls per record", "key:Key",
          provides={"views"}, needs={"rank"}, variant="lmdb-get",
          summary="each rank lists its keys once, then `txn.get(key)`",
          problem="the PyTorch-Dataset way: the peer baseline"),
    Stage("locator", "prov-or-index", "prov-or-index",
          "lmdbio-direct's extents (the sidecar where current, else the index)",
          "prov:ProvOrIndex", provides={"extents"}, needs={"rank"}, sidecar="prefers",
          variant="lmdbio-direct",
          summary="every rank `preadv`s several of its own batches, offsets from the sidecar "
                  "or the index",
          problem="fastest on a node-local file system"),

    # fetchers: how the bytes get into a buffer
    Stage("fetcher", "mmap", "mmap-copy", "copies out of LMDB's map", "fetch:MmapCopy",
          provides={"map"}, needs={"views"}),
    Stage("fetcher", "pread", "preadv", "direct reads (DIO)", "fetch:Preadv", tag="dio",
          provides={"direct"}, needs={"extents"}),

    # switches
    Stage("speculate", True, "speculate", "DM's speculative page reads", tag="dm",
          needs={"ring"}, default=True),
    Stage("coalesce", True, "coalesce", "COAL's requests of several batches",
          "coalesce:Coalesce", tag="coal", needs={"direct"}, default=DEFAULT_COALESCE_BYTES),
    Stage("stagger", True, "stagger", "STAG's turns", "stagger:Stagger", tag="stag",
          needs={"node"}, default=None),

    # distributors: derived, the first whose needs are met
    Stage("distributor", None, "node-group", "the node's shared slots (LMM)",
          "distribute:NodeGroup", needs={"node"}),
    Stage("distributor", None, "private-slots", "private rotating buffers",
          "distribute:PrivateSlots", needs={"rank", "direct"}),
    Stage("distributor", None, "private", "a fresh private buffer per chunk",
          "distribute:Private", needs={"rank"}, excludes={"direct"}),
)
