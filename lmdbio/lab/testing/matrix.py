"""The differential option matrix: every Reader option combination, checked against py-lmdb.

One check per combination (:func:`check_combination`, on every rank of one
``mpiexec`` job): build a Reader, ``read_batch()`` twice, read epoch 0 whole
(``for b in reader``), ``read_batch()`` twice, read epoch 1 whole
(``reader.epoch(1)``), break out of epoch 2 after one or two batches and drop
its generator, ``read_batch()`` twice, close. Every delivered record's bytes
must equal py-lmdb's value at the position the batch names (``b.indices``, in
key order), and every held batch is checked again after the rank's next read
(a batch stays valid until the rank's second following read). With
``prefetch``, the members of a node reader's group stop for a while after the
second batch of epoch 1 (:data:`STALL_BATCHES` of their batch times: a member
computing longer than its reader), then check both batches they hold: a reader
that reads ahead meanwhile must not overwrite them. They stop where an epoch
can outlast the reader's shared slots (CIFAR-size: 40 batches, up to 16
slots; ImageNet-size: 5 batches, 4 slots); the other record kinds' epochs are
shorter than their slots. Rank 0 then checks the indices gathered from every
rank (:func:`merge_ranks`): the stream batches
before, between and after the epochs are consecutive global batches of the
endless stream (batch t: positions ``(t*B + j) mod N``), the same on every
rank, and the first two are batches 0 and 1; each epoch holds every record
exactly once under ``"short"``, every record plus ``B - N mod B`` repeats
under ``"pad"``, the records of the full batches only under ``"drop"``; a
file-order epoch's batch i holds positions ``i*B ..``, a shuffled epoch is
not in file order and differs from the next one. Invalid combinations must
raise the error :data:`REFUSALS` names, on every rank. A combination that
delivers right but spends about ``LMDBIO_TIMEOUT`` (:data:`PEER_TIMEOUT_S`) in
one phase fails too: a rank waited out a peer's timeout on the way.

Dimensions (:data:`DIMENSIONS`): the 9 named variants plus ``auto``;
``prefetch`` 0/1/3; ``shuffle`` False/``"window"``/``"shard"``; ``last_batch``
short/pad/drop; the topologies of :func:`topologies` (one node, P/2 and P/4
ranks per virtual node, 1 or 2 readers per node where a node has 2 ranks or
more); records CIFAR-size, ImageNet-size, mixed (0 B to 200 KB, overflow
pages) and encoded JPEG; with or without a provenance sidecar (without: as
Caffe's ``convert_imageset`` leaves a database, read with
``build_provenance=False``); N a multiple of B, or not with
``gcd(N, B) = B/2 > B/P``; ``coalesce_bytes`` 16 KiB or the default.
B = 32 (ImageNet-size: 64; :data:`BATCHES`). At P = 4 the raw cross product
is 43,200 combinations; :func:`full_matrix` keeps 6,189.

What :func:`effective` collapses, so that each Reader setting is read once
(the full run keeps one combination per effective setting):

- ``last_batch`` when N is a multiple of B: the three policies cut no batch.
- the topology on per-rank variants (``lmdb``, ``lmdb-get``, ``lmdbio-direct``,
  ``auto`` where it picks one): only LMM variants build reader groups.
- ``coalesce_bytes`` where it does not change the variant's options (only
  COAL variants, ``lmdbio-direct`` and ``auto`` picking either, coalesce).
- the sidecar on variants that never read it (all but PROV, ``lmdbio-direct``
  and ``auto`` picking them, or ``auto`` choosing by it on a shared file system).
- an expected refusal (:data:`REFUSALS`) keeps only the variant, the fields
  its rule looks at and the topology; every other option takes its first value.
  A rule that stops holding (the lead makes the combination work) shows up as
  a mismatch, and its combinations expand again once the rule is removed.

``auto`` is resolved by the file system of the data sets (:func:`auto_choice`):
on a local disk it reads as ``lmdbio-direct``.

Runs: :func:`fast_sample` (:data:`REGRESSIONS`, then :func:`all_pairs`: every
pair of effective option values at least once; ``make test-fast``), a seeded
random sample (:func:`random_sample`; ``make test``) and the whole
deduplicated cross product at P = 4 with an all-pairs cover at P = 8 on four
virtual nodes of two ranks, a shape P = 4 lacks (:func:`four_nodes_of_two`;
``make test-matrix``, which writes
``data/results/option_matrix/summary.csv``). :func:`run` runs many
combinations per ``mpiexec`` job (``tests/mpi/matrix_run.py``); the driver
prints a line when a combination starts and one when it ends, so a combination
that hangs (no line for ``hang_s`` seconds) or ends the job is named, recorded
as ``hang`` or ``crash``, and the job restarts after it. ``python -m
lmdbio.lab.testing.matrix {pairs,random,full} [--where FIELD=V1,V2]`` runs a
selection and prints the failures grouped by cause, each group with the
command that reruns it.
"""

from __future__ import annotations

import argparse
import functools
import json
from ..paths import REPO
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from itertools import combinations, product
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from lmdbio.errors import ConfigurationError
from lmdbio.options import AUTO_LOCAL, AUTO_SHARED, AUTO_SHARED_NO_PROV, EXTRA_VARIANTS, VARIANTS, \
    parse_variant

__all__ = ["Combo", "Refusal", "REFUSALS", "DIMENSIONS", "BATCHES", "SMALL_COALESCE",
           "REGRESSIONS", "topologies", "raw_product", "effective", "full_matrix", "all_pairs",
           "pair_set", "fast_sample", "random_sample", "four_nodes_of_two", "selection",
           "expected_refusal", "auto_choice", "make_datasets", "dataset_records",
           "check_combination", "merge_ranks", "break_after", "lost_row", "verdict", "run", "run_job",
           "write_summary", "rerun_command", "group_failures", "failure_report", "main"]

ROOT = REPO
DRIVER = ROOT / "tests" / "mpi" / "matrix_run.py"

#: ``coalesce="small"``: COAL's request size, well under one ImageNet record.
SMALL_COALESCE = 16 << 10
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
    coalesce: str         # "small" (SMALL_COALESCE) or "default"

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
                    coalesce_bytes=SMALL_COALESCE if self.coalesce == "small" else None,
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


def dimensions(nprocs: int) -> dict[str, tuple]:
    """The matrix's dimensions at ``nprocs`` ranks (``topology`` stands for two fields)."""
    return {"variant": VARIANT_NAMES, "prefetch": (0, 1, 3), "shuffle": (False, "window", "shard"),
            "last_batch": ("short", "pad", "drop"), "topology": tuple(topologies(nprocs)),
            "records": ("cifar10", "imagenet", "mixed", "jpeg"), "sidecar": (True, False),
            "uneven": (False, True), "coalesce": ("default", "small")}


#: The dimensions at P = 4.
DIMENSIONS = dimensions(4)


# --------------------------------------------------------------------------- refusals

#: Variants whose locator walks an LMDB cursor forward (no shuffled epochs).
CURSOR_WALKS = frozenset({"lmdb", "lmdbio-lmm", "lmdbio-lmm-dm"})
#: Variants that locate records from the provenance sidecar alone.
PROV_VARIANTS = frozenset({"lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal",
                           "lmdbio-lmm-dio-prov-coal-stag"})
#: Variants that read the sidecar where there is one (PROV, and lmdbio-direct's ProvOrIndex).
SIDECAR_READERS = PROV_VARIANTS | {"lmdbio-direct"}


@dataclass(frozen=True)
class Refusal:
    """A kind of combination the Reader must refuse on every rank with ``error``."""

    error: str                          # class name in lmdbio.errors
    fields: tuple[str, ...]             # the Combo fields the rule looks at
    applies: Callable[[Combo, str], bool]   # (combination, the variant it reads with)
    reason: str


#: Which combinations are invalid, and why. A refusal the Reader makes that is not here
#: (or one here it does not make) is a mismatch: fix the code or this table.
REFUSALS: tuple[Refusal, ...] = (
    Refusal("ConfigurationError", ("shuffle", "ranks_per_node", "readers_per_node"),
            lambda c, v: c.shuffle is not False and v in CURSOR_WALKS,
            "a cursor-walking variant cannot serve a shuffled epoch"),
    Refusal("ProvenanceError", ("sidecar", "ranks_per_node", "readers_per_node"),
            lambda c, v: v in PROV_VARIANTS and not c.sidecar,
            "PROV needs a provenance sidecar (build_provenance=False, none beside data.mdb)"),
)


def auto_choice(root: str | os.PathLike | None = None) -> dict[bool, str]:
    """What ``variant="auto"`` reads with for data sets under ``root``, by sidecar present.

    None: a local file system (``lmdbio-direct`` either way).
    """
    if root is None:
        return {True: AUTO_LOCAL, False: AUTO_LOCAL}
    from lmdbio.options import LOCAL_FS, filesystem_type

    if filesystem_type(root)[0] in LOCAL_FS:
        return {True: AUTO_LOCAL, False: AUTO_LOCAL}
    return {True: AUTO_SHARED, False: AUTO_SHARED_NO_PROV}


def _reads_with(c: Combo, auto_as: dict[bool, str]) -> str:
    return auto_as[c.sidecar] if c.variant == "auto" else c.variant


def expected_refusal(c: Combo, auto_as: dict[bool, str] | None = None) -> Refusal | None:
    """The :data:`REFUSALS` rule ``c`` falls under, or None (it must deliver its records)."""
    v = _reads_with(c, auto_as or auto_choice())
    return next((r for r in REFUSALS if r.applies(c, v)), None)


def _first_values(c: Combo) -> Combo:
    dims = dimensions(c.nprocs)
    rpn, rpr = dims["topology"][0]
    return replace(c, prefetch=dims["prefetch"][0], shuffle=dims["shuffle"][0],
                   last_batch=dims["last_batch"][0], ranks_per_node=rpn, readers_per_node=rpr,
                   records=dims["records"][0], sidecar=dims["sidecar"][0],
                   uneven=dims["uneven"][0], coalesce=dims["coalesce"][0])


def effective(c: Combo, auto_as: dict[bool, str] | None = None) -> Combo:
    """``c`` with the options that cannot change what its Reader does set to one value
    (see the module docstring); combinations with the same result read the same way."""
    auto_as = auto_as or auto_choice()
    v = _reads_with(c, auto_as)
    rule = expected_refusal(c, auto_as)
    if rule is not None:
        return replace(_first_values(c), **{f: getattr(c, f) for f in rule.fields})
    localized, coalesces = _options(v)
    changes: dict = {}
    if not c.uneven:
        changes["last_batch"] = "short"
    if not localized:
        changes.update(ranks_per_node=None, readers_per_node=1)
    if not coalesces:
        changes["coalesce"] = "default"
    sidecar_matters = v in SIDECAR_READERS or (c.variant == "auto"
                                                and auto_as[True] != auto_as[False])
    if not sidecar_matters:
        changes["sidecar"] = True
    return replace(c, **changes)


@functools.lru_cache(maxsize=64)
def _options(variant: str) -> tuple[bool, bool]:
    """(LMM: reads for a node group, ``coalesce_bytes`` changes its options) of a variant."""
    o = parse_variant(variant)
    return o.localized, parse_variant(variant, coalesce_bytes=SMALL_COALESCE) != o


def raw_product(nprocs: int = 4) -> Iterable[Combo]:
    """Every combination of :func:`dimensions` at ``nprocs`` ranks, nothing collapsed."""
    dims = dimensions(nprocs)
    names = list(dims)
    for values in product(*dims.values()):
        d = dict(zip(names, values))
        rpn, rpr = d.pop("topology")
        yield Combo(nprocs=nprocs, ranks_per_node=rpn, readers_per_node=rpr, **d)


def full_matrix(nprocs: Iterable[int] = (4,),
                auto_as: dict[bool, str] | None = None) -> list[Combo]:
    """The cross product with every combination collapsed to its effective settings, each
    setting once, in a fixed order."""
    auto_as = auto_as or auto_choice()
    return list(_full(tuple(nprocs), auto_as[True], auto_as[False]))


@functools.lru_cache(maxsize=8)
def _full(nprocs: tuple[int, ...], auto_with: str, auto_without: str) -> tuple[Combo, ...]:
    out: dict[Combo, None] = {}
    for p in nprocs:
        for c in raw_product(p):
            out.setdefault(effective(c, {True: auto_with, False: auto_without}), None)
    return tuple(out)


def _values(c: Combo) -> tuple:
    return (c.variant, c.prefetch, c.shuffle, c.last_batch, (c.ranks_per_node, c.readers_per_node),
            c.records, c.sidecar, c.uneven, c.coalesce)


def pair_set(c: Combo) -> frozenset:
    """Every pair of (dimension, value) of ``c``: ``(i, value i, j, value j)`` for the
    dimensions i < j in :data:`DIMENSIONS`' order."""
    vals = [(i, repr(v)) for i, v in enumerate(_values(c))]
    return frozenset(a + b for a, b in combinations(vals, 2))


def all_pairs(pool: list[Combo], start: Iterable[Combo] = ()) -> list[Combo]:
    """A greedy all-pairs cover of ``pool``: ``start``, then combinations of ``pool`` such
    that every pair of option values that occurs in any of ``pool`` occurs in one of them.

    Each step takes a combination that covers the most pairs not yet covered (ties: the
    earliest in ``pool``), so the result is the same every time. A combination's count only
    falls as pairs get covered, so a heap of possibly stale counts finds it (lazy greedy).
    """
    import heapq

    pairs = [pair_set(c) for c in pool]
    todo = set().union(*pairs) if pairs else set()
    chosen = list(start)
    for c in chosen:
        todo -= pair_set(c)
    heap = [(-len(p & todo), k) for k, p in enumerate(pairs)]
    heapq.heapify(heap)
    while todo and heap:
        stale, k = heapq.heappop(heap)
        gain = len(pairs[k] & todo)
        if gain == -stale:
            chosen.append(pool[k])
            todo -= pairs[k]
        elif gain:
            heapq.heappush(heap, (-gain, k))
    return chosen


def _combo(variant: str, prefetch: int = 0, shuffle: bool | str = False, last_batch: str = "short",
           topology: tuple[int | None, int] = (None, 1), records: str = "cifar10",
           sidecar: bool = True, uneven: bool = False, coalesce: str = "default") -> Combo:
    return effective(Combo(4, variant, prefetch, shuffle, last_batch, *topology, records, sidecar,
                           uneven, coalesce))


#: The settings of issue 28's findings A-C, read in every fast sample on top of the all-pairs
#: cover.
REGRESSIONS: tuple[Combo, ...] = (
    # A: a Caffe-made file (no sidecar), N not a multiple of B, gcd(N, B) > B/P, file order.
    _combo("auto", records="cifar10", sidecar=False, uneven=True),
    _combo("lmdbio-direct", shuffle="window", records="mixed", sidecar=False, uneven=True),
    # B: prefetch with a node reader: a member computing longer than its reader.
    _combo("lmdbio-lmm-dio", prefetch=3),
    _combo("lmdbio-lmm", prefetch=1, topology=(2, 1)),
    # C: read_batch() after an epoch on a coalescing variant.
    _combo("lmdbio-lmm-dio-prov-coal", records="mixed"),
)


def fast_sample(pool: list[Combo]) -> list[Combo]:
    """``make test-fast``'s combinations: :data:`REGRESSIONS` and an all-pairs cover of ``pool``."""
    return all_pairs(pool, [c for c in REGRESSIONS if c in set(pool)])


def random_sample(pool: list[Combo], count: int, seed: int) -> list[Combo]:
    """``count`` combinations of ``pool`` drawn without replacement by ``random.Random(seed)``."""
    return random.Random(seed).sample(pool, min(count, len(pool)))


# --------------------------------------------------------------------------- data sets

def _mixed(path: Path, n: int, seed: int) -> Path:
    """A database of values from 0 B to 200 KB: empty, small, node-sized, overflow pages."""
    import lmdb

    rng = np.random.default_rng(seed)
    sizes = rng.choice([0, 1, 13, 300, 2038, 2039, 2100, 3000, 9000, 200_000], size=n,
                       p=[.1, .1, .1, .1, .05, .1, .1, .15, .15, .05])
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=1 << 30)
    try:
        for start in range(0, n, 50):
            with env.begin(write=True) as txn:
                for i in range(start, min(n, start + 50)):
                    txn.put(f"{i:08d}_mixed".encode(), rng.bytes(int(sizes[i])))
    finally:
        env.close()
    return path


def _noise_datums(path: Path, n: int, seed: int, commit_every: int = 40) -> Path:
    """ImageNet-size raw Datums (196,623 bytes) of random pixels, keyed as ``convert_imageset``
    keys them: what ``make_dataset(preset="imagenet")`` writes, without its slow photo-like
    images (the matrix never decodes them)."""
    import lmdb

    from lmdbio import datum

    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=n * 220_000 + (1 << 24))
    try:
        for start in range(0, n, commit_every):
            with env.begin(write=True) as txn:
                for i in range(start, min(n, start + commit_every)):
                    label = int(rng.integers(1000))
                    image = rng.integers(0, 256, size=(3, 256, 256), dtype=np.uint8)
                    txn.put(f"{i:08d}_class{label:04d}/img_{i:08d}.png".encode(),
                            datum.encode(image, label))
    finally:
        env.close()
    return path


def _prefix(src: Path, dst: Path, n: int, commit_every: int = 40) -> Path:
    """A database of the first ``n`` records of ``src``, one put per record in key order."""
    import lmdb

    dst.mkdir(parents=True, exist_ok=True)
    senv = lmdb.open(str(src), readonly=True, lock=False)
    denv = lmdb.open(str(dst), map_size=2 * (src / "data.mdb").stat().st_size + (1 << 24))
    try:
        with senv.begin() as stxn:
            cur = stxn.cursor()
            cur.first()
            for start in range(0, n, commit_every):
                with denv.begin(write=True) as txn:
                    for _ in range(min(commit_every, n - start)):
                        txn.put(cur.key(), cur.value())
                        cur.next()
    finally:
        senv.close()
        denv.close()
    return dst


def make_datasets(root: str | os.PathLike) -> dict[tuple[str, bool, bool], Path]:
    """Every data set the matrix reads, under ``root``: ``(records, uneven, sidecar) -> dir``.

    The ``sidecar=False`` folder holds the same data.mdb (a hard link where the file system
    allows) with no sidecar beside it. Data sets a previous call made are reused.
    """
    from lmdbio.datasets import make_dataset
    from lmdbio.provenance import write_provenance

    root = Path(root)
    out = {}
    for seed, (records, uneven) in enumerate(product(BATCHES, (False, True))):
        n = dataset_records(records, uneven)
        with_side = root / f"{records}-{n}"
        bare = root / f"{records}-{n}-nosidecar"
        out[(records, uneven, True)], out[(records, uneven, False)] = with_side, bare
        if (bare / "data.mdb").exists():
            continue
        if uneven:   # the first N records of the even data set, written the same way
            _prefix(root / f"{records}-{dataset_records(records, False)}", with_side, n)
            write_provenance(with_side)
        elif records == "mixed":
            _mixed(with_side, n, seed)
            write_provenance(with_side)
        elif records == "imagenet":
            _noise_datums(with_side, n, seed)
            write_provenance(with_side)
        else:
            make_dataset(with_side, "cifar10" if records == "cifar10" else "imagenet", n,
                         encoded=records == "jpeg", commit_every=40, seed=seed, force=True)
        bare.mkdir(parents=True, exist_ok=True)
        try:
            os.link(with_side / "data.mdb", bare / "data.mdb")
        except OSError:
            shutil.copyfile(with_side / "data.mdb", bare / "data.mdb")
    return out


# --------------------------------------------------------------------------- one rank's check

class _RankCheck:
    """One rank's record comparisons, with the batch it holds until its second following read."""

    def __init__(self, expected: list[bytes], rank: int, share: int, stall: bool):
        self.expected, self.rank, self.share, self.stall = expected, rank, share, stall
        self.n = len(expected)
        self.checked = self.wrong = self.wrong_held = 0
        self.where: Counter = Counter()
        self.stream: list[tuple[str, int, bool]] = []   # (phase, global start, well formed)
        self.epochs: dict[int, list[list[int]]] = {}
        self.phase = "setup"
        self.times: Counter = Counter()   # seconds per phase
        self._t = time.perf_counter()
        self._held: list = []   # the last two batches: (batch, its indices, phase delivered)
        self._per_batch = 0.01

    def enter(self, phase: str) -> None:
        """From here on, time and wrong records count for ``phase``."""
        now = time.perf_counter()
        self.times[self.phase] += now - self._t
        self.phase, self._t = phase, now

    def _compare(self, batch, idx: list[int]) -> int:
        bad = 0
        for i, j in enumerate(idx):
            if not 0 <= j < self.n or bytes(batch[i]) != self.expected[j]:
                bad += 1
        return bad

    def take(self, batch) -> list[int]:
        """Check a batch just delivered and the one delivered before it (after its first
        following read); hold both."""
        idx = np.asarray(batch.indices).tolist()
        bad = self._compare(batch, idx)
        self.checked += len(idx)
        self.wrong += bad
        if bad:
            self.where[self.phase] += bad
        self.recheck(self._held[-1:], self.phase)
        self._held = self._held[-1:] + [(batch, idx, self.phase)]
        return idx

    def recheck(self, held: list, now: str) -> None:
        for batch, idx, phase in held:
            bad = self._compare(batch, idx)
            self.wrong_held += bad
            if bad:
                self.where[f"held {phase}->{now}"] += bad

    def read(self, reader, phase: str) -> None:
        """One ``read_batch()`` of the endless stream."""
        self.enter(phase)
        idx = self.take(reader.read_batch())
        ok = len(idx) == self.share and bool(idx) and all(
            b == (idx[0] + k) % self.n for k, b in enumerate(idx))
        start = (idx[0] - self.rank * self.share) % self.n if idx else -1
        self.stream.append((phase, start, ok))

    def epoch(self, e: int, batches: Iterable) -> None:
        self.enter(f"epoch {e}")
        got = self.epochs.setdefault(e, [])
        stamps = [time.perf_counter()]
        for b in batches:
            got.append(self.take(b))
            stamps.append(time.perf_counter())
            if self.stall and e == 1 and len(got) == 2:
                # Computing long while both batches are held; then both must still be right.
                time.sleep(min(STALL_MAX_S, STALL_BATCHES * self._per_batch))
                self.recheck(self._held, "a stop in epoch 1")
        if e == 0 and len(stamps) > 2:
            self._per_batch = float(np.median(np.diff(stamps)))

    def drop(self) -> None:
        self._held = []

    def summary(self) -> dict:
        self.enter(self.phase)
        return {"times": dict(self.times), "checked": self.checked, "wrong": self.wrong,
                "wrong_held": self.wrong_held, "where": dict(self.where), "stream": self.stream,
                "epochs": self.epochs, "phase": self.phase}


def _raised(exc: BaseException, phase: str) -> dict:
    import traceback

    from lmdbio.errors import LmdbioError

    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return {"type": type(exc).__name__, "message": str(exc),
            "classes": [k.__name__ for k in type(exc).__mro__],
            "lmdbio": isinstance(exc, LmdbioError), "phase": phase,
            "at": " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                             for f in reversed(frames))}


def check_combination(item: dict, comm, expected: list[bytes]) -> dict:
    """Run one combination on this rank (every rank of ``comm`` calls it); ``expected``: every
    value in key order, as py-lmdb reads them. Returns this rank's counts, indices and what
    it raised, for :func:`merge_ranks`."""
    from lmdbio import Reader

    c = Combo(**item["combo"])
    share = c.batch // comm.size
    st = _RankCheck(expected, comm.rank, share, stall=False)
    out: dict = {"rank": comm.rank, "raised": None, "variant_read": None}
    t0 = time.perf_counter()
    try:
        reader = Reader(item["path"], c.batch, comm, on_error="abort", **c.reader_kwargs())
    except Exception as exc:  # noqa: BLE001 - a refusal, or an error the matrix reports
        out["raised"] = _raised(exc, "setup")
        out.update(st.summary(), seconds=time.perf_counter() - t0)
        return out
    out["variant_read"] = reader.variant
    st.stall = bool(c.prefetch and c.records in STALL_RECORDS and reader.options.localized
                    and not reader.is_reader)
    try:
        with reader as r:
            st.read(r, "before epochs")
            st.read(r, "before epochs")
            r.set_epoch(0)
            st.epoch(0, r)                  # iter(reader): set_epoch's epoch
            st.read(r, "between epochs")
            st.read(r, "between epochs")
            st.epoch(1, r.epoch(1))
            gen = r.epoch(2)
            st.epoch(2, (b for _, b in zip(range(item["break_after"]), gen)))
            del gen                         # broken early: its generator is dropped
            st.read(r, "after epochs")
            st.read(r, "after epochs")
            st.drop()
            st.enter("close")
    except Exception as exc:  # noqa: BLE001 - reported per combination
        out["raised"] = _raised(exc, st.phase)
    st.drop()
    out.update(st.summary(), seconds=time.perf_counter() - t0)
    return out


# --------------------------------------------------------------------------- rank 0's verdict

def _epoch_problems(c: Combo, e: int, per_rank: list[list[list[int]]]) -> list[str]:
    """What is wrong with epoch ``e``'s indices gathered from every rank (set semantics)."""
    n, B, P = c.n, c.batch, c.nprocs
    share = B // P
    full, rest = divmod(n, B)
    nb = full if (c.last_batch == "drop" or not rest) else full + 1
    out = []
    counts = [len(bs) for bs in per_rank]
    if counts != [nb] * P:
        return [f"epoch {e}: batches per rank {counts}, want {nb} each"]
    flat: Counter = Counter()
    order: list[int] = []
    for i in range(nb):
        parts = [per_rank[r][i] for r in range(P)]
        last = i == full
        sizes = [len(p) for p in parts]
        if not last and sizes != [share] * P:
            out.append(f"epoch {e} batch {i}: records per rank {sizes}, want {share}")
        if last and c.last_batch == "short" and sum(sizes) != rest:
            out.append(f"epoch {e}: the short last batch holds {sum(sizes)} records, want {rest}")
        if last and c.last_batch == "pad" and sizes != [share] * P:
            out.append(f"epoch {e}: the padded last batch has {sizes} per rank, want {share}")
        glob = [j for p in parts for j in p]
        if len(set(glob)) != len(glob):
            out.append(f"epoch {e} batch {i}: a record twice in one global batch")
        if c.shuffle is False and not last:
            want = [list(range(i * B + r * share, i * B + (r + 1) * share)) for r in range(P)]
            if parts != want:
                out.append(f"epoch {e} batch {i}: file order wants positions {i * B}..; "
                           f"got {[p[:2] for p in parts]}..")
        flat.update(glob)
        order += glob
    delivered = sum(flat.values())
    if c.last_batch == "short" or not rest:
        if flat != Counter(range(n)):
            missing = n - len(flat)
            out.append(f"epoch {e}: not every record exactly once ({delivered} delivered, "
                       f"{missing} missing, {sum(v - 1 for v in flat.values())} repeats)")
    elif c.last_batch == "drop":
        if delivered != full * B or len(flat) != delivered or not set(flat) <= set(range(n)):
            out.append(f"epoch {e}: drop delivered {delivered} ({len(flat)} distinct), want "
                       f"{full * B} distinct")
        elif c.shuffle is False and set(flat) != set(range(full * B)):
            out.append(f"epoch {e}: drop in file order must leave out the last {rest} records")
    else:   # pad
        if (set(flat) != set(range(n)) or delivered != nb * B or max(flat.values()) > 2):
            out.append(f"epoch {e}: pad delivered {delivered} ({len(flat)} distinct, at most "
                       f"{max(flat.values())} times), want all {n} and {B - rest} repeats")
        elif c.shuffle is False and {j for j, k in flat.items() if k == 2} != set(range(B - rest)):
            out.append(f"epoch {e}: pad in file order must repeat records 0..{B - rest - 1}")
    if c.shuffle is not False and order == sorted(order):
        out.append(f"epoch {e}: shuffled, but delivered in file order")
    return out


def merge_ranks(item: dict, ranks: list[dict]) -> dict:
    """Rank 0: one result row from every rank's :func:`check_combination` output."""
    c = Combo(**item["combo"])
    n, B = c.n, c.batch
    raised = [r["raised"] for r in ranks]
    row = {"id": item["id"], **_combo_fields(c), "n": n, "batch": B,
           "break_after": item["break_after"], "variant_read": ranks[0]["variant_read"] or "",
           "checked": sum(r["checked"] for r in ranks), "wrong": sum(r["wrong"] for r in ranks),
           "wrong_held": sum(r["wrong_held"] for r in ranks),
           "seconds": round(max(r["seconds"] for r in ranks), 3),
           "refused": "", "reason": "", "error": "", "problems": []}
    where: Counter = Counter()
    for r in ranks:
        where.update(r["where"])
    row["where"] = "; ".join(f"{k}: {v}" for k, v in sorted(where.items()))
    times: Counter = Counter()
    for r in ranks:
        for k, v in r.get("times", {}).items():
            times[k] = max(times[k], v)
    if times:
        slow, secs = max(times.items(), key=lambda kv: kv[1])
        row["slowest"], row["slowest_s"] = f"{slow}: {secs:.2f} s", round(secs, 3)
    if any(raised):
        # The cause first: a rank's own error, then a timeout, then the PeerError of the
        # ranks that were told about it.
        first = min((x for x in raised if x), key=lambda x: (
            "PeerError" in x["classes"], x["type"] != "PeerTimeoutError"))
        text = f"{first['type']}: {first['message']}"
        if len({(x["type"], x["phase"]) if x else None for x in raised}) == 1 \
                and first["phase"] == "setup" and first["lmdbio"]:
            row["refused"], row["reason"] = first["type"], first["message"]
            row["refused_classes"] = first["classes"]
        else:
            on = [r["rank"] for r in ranks if r["raised"] == first]
            others = sorted({f"{x['type']} in {x['phase']}" for x in raised if x and x != first})
            also = f" (other ranks: {', '.join(others)})" if others else ""
            row["error"] = (f"rank(s) {on} in {first['phase']}: {text} [at {first['at']}]"
                            f"{also}")[:900]
        return row
    problems = row["problems"]
    # The stream: the same global batch on every rank at each read, consecutive pairs.
    streams = [r["stream"] for r in ranks]
    if len({len(s) for s in streams}) != 1:
        problems.append(f"stream reads per rank differ: {[len(s) for s in streams]}")
    else:
        for k in range(len(streams[0])):
            phase = streams[0][k][0]
            starts = {s[k][1] for s in streams}
            if not all(s[k][2] for s in streams):
                problems.append(f"{phase} read {k}: a rank's share is not {B // c.nprocs} "
                                "consecutive positions")
            if len(starts) != 1:
                problems.append(f"{phase} read {k}: the ranks are on different global batches "
                                f"(starts {sorted(starts)})")
        firsts = [s[1] for s in streams[0]]
        if firsts[:2] != [0, B % n]:
            problems.append(f"the first two reads start at {firsts[:2]}, want [0, {B % n}]")
        for k in range(0, len(firsts) - 1, 2):
            if (firsts[k] + B) % n != firsts[k + 1]:
                problems.append(f"{streams[0][k][0]}: two reads are not consecutive batches "
                                f"(starts {firsts[k]}, {firsts[k + 1]})")
    for e in (0, 1):
        problems += _epoch_problems(c, e, [r["epochs"].get(e, []) for r in ranks])
    nb = n // B if (c.last_batch == "drop" or not n % B) else -(-n // B)
    broken = [len(r["epochs"].get(2, [])) for r in ranks]
    if broken != [min(item["break_after"], nb)] * c.nprocs:
        problems.append(f"epoch 2 (broken early): batches per rank {broken}, "
                        f"want {item['break_after']}")
    if c.shuffle is not False and not problems:   # (every rank has every batch)
        orders = [[j for i in range(len(ranks[0]["epochs"][e]))
                   for r in ranks for j in r["epochs"][e][i]] for e in (0, 1)]
        if orders[0] == orders[1]:
            problems.append("epochs 0 and 1 in the same order")
    return row


def verdict(row: dict, expect: dict | None) -> str:
    """``ok``, ``refused`` (as :data:`REFUSALS` expects) or ``FAIL: why``."""
    if row.get("error"):
        return "FAIL: " + ("hang" if row["error"].startswith("hang") else
                           "crash" if row["error"].startswith("crash") else "error")
    if expect is not None:
        if not row["refused"]:
            return f"FAIL: ran, expected {expect['error']}"
        if expect["error"] not in row.get("refused_classes", [row["refused"]]):
            return f"FAIL: refused with {row['refused']}, expected {expect['error']}"
        return "refused"
    if row["refused"]:
        return f"FAIL: unexpected {row['refused']}"
    if row["wrong"] or row["wrong_held"]:
        return "FAIL: wrong records"
    if row["problems"]:
        return "FAIL: epoch or stream"
    if row.get("slowest_s", 0) >= 0.9 * PEER_TIMEOUT_S:
        # Right records, but a rank waited out a peer timeout on the way (at the default
        # LMDBIO_TIMEOUT a user waits two minutes there).
        return "FAIL: waited a timeout"
    return "ok"


def _combo_fields(c: Combo) -> dict:
    return {f.name: getattr(c, f.name) for f in fields(c)}


# --------------------------------------------------------------------------- running jobs

def _items(combos: list[Combo], paths: dict, auto_as: dict[bool, str]) -> list[dict]:
    out = []
    for k, c in enumerate(combos):
        rule = expected_refusal(c, auto_as)
        out.append({"id": k, "combo": asdict(c),
                    "path": str(paths[(c.records, c.uneven, c.sidecar)]),
                    "break_after": break_after(c),
                    "expect": None if rule is None else {"error": rule.error,
                                                         "reason": rule.reason}})
    return out


def break_after(c: Combo) -> int:
    """Batches of epoch 2 read before breaking out: 1 or 2, fixed per combination (a rerun
    of a combination breaks where the first run did)."""
    import zlib

    return 1 + zlib.crc32(c.label().encode()) % 2


def lost_row(item: dict, error: str) -> dict:
    """The row of a combination that gave no result; ``error`` says why (hang, crash)."""
    c = Combo(**item["combo"])
    return {"id": item["id"], **_combo_fields(c), "n": c.n, "batch": c.batch,
            "break_after": item.get("break_after", 0), "variant_read": "",
            "checked": 0, "wrong": 0, "wrong_held": 0, "seconds": 0.0, "refused": "",
            "reason": "", "error": error, "problems": [], "where": ""}


def _last_words(errfile: Path) -> str:
    """What an ended job said last: its last ``lmdbio: error:`` line (an aborting rank's
    message), else the end of its stderr."""
    text = errfile.read_text(errors="replace")
    said = [line for line in text.splitlines() if "lmdbio: error:" in line]
    return said[-1].strip()[:800] if said else text[-800:].strip()


def run_job(items: list[dict], nprocs: int, work: Path, hang_s: float, env: dict,
            log: Callable[[str], None], driver: Path = DRIVER) -> list[dict]:
    """Run ``items`` in one mpiexec job (restarted after a combination that hangs or crashes)."""
    from ..cluster import mpich_segments, mpiexec, remove_orphan_segments

    spec = work / f"job-{nprocs}-{items[0]['id']}.json"
    spec.write_text(json.dumps({"items": items}))
    rows: dict[int, dict] = {}
    start = 0
    while start < len(items):
        before = mpich_segments()
        errfile = work / f"job-{nprocs}-{items[start]['id']}.stderr"
        cmd = [mpiexec(), "-n", str(nprocs), sys.executable, str(driver), str(spec),
               "--start", str(start)]
        with open(errfile, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT,
                                    start_new_session=True)
        current, deadline, buf = None, time.monotonic() + hang_s + 60, b""
        lost = None
        while True:
            left = deadline - time.monotonic()
            ready = select.select([proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                lost = f"hang: no progress for {hang_s:.0f} s"
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                proc.wait()
                if current is not None:
                    lost = (f"crash: the job ended (exit {proc.returncode}) in it; stderr: "
                            f"{_last_words(errfile)}")
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"MATRIX "):
                    continue
                msg = json.loads(line[7:])
                if msg["event"] == "start":
                    current = msg["pos"]
                else:
                    rows[msg["row"]["id"]] = msg["row"]
                    current = None
                deadline = time.monotonic() + hang_s
        if proc.stdout:
            proc.stdout.close()
        remove_orphan_segments(before)
        todo = [k for k in range(start, len(items)) if items[k]["id"] not in rows]
        if lost is not None and current is None and not todo:
            log(f"  P={nprocs}: the job did not end after its last combination; killed")
            break
        if lost is not None:
            pos = current if current is not None else todo[0]
            rows[items[pos]["id"]] = lost_row(items[pos], lost)
            log(f"  {Combo(**items[pos]['combo']).label()}: {lost[:200]}")
            start = pos + 1
            continue
        if todo:
            tail = errfile.read_text(errors="replace")[-1500:].strip()
            raise ConfigurationError(f"the matrix driver ended (exit {proc.returncode}) outside "
                                     f"any combination: {tail}")
        break
    return [rows.get(it["id"]) or lost_row(it, "crash: no result") for it in items]


def run(combos: list[Combo], *, root: str | os.PathLike | None = None, hang_s: float = 90,
        per_job: int = 250, log: Callable[[str], None] | None = None) -> list[dict]:
    """Check ``combos`` (grouped into mpiexec jobs by P); one row per combination, in order,
    with its ``verdict``. Data sets are made under ``root`` (a temporary folder if None)."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if not DRIVER.exists():
        raise ConfigurationError(f"the matrix driver {DRIVER} is missing: run the matrix from a "
                                 "checkout of the repository")
    tmp = None
    if root is None:
        root = tmp = tempfile.mkdtemp(prefix="lmdbio-matrix-")
    root = Path(root)
    try:
        t0 = time.perf_counter()
        paths = make_datasets(root / "data")
        log(f"data sets made in {time.perf_counter() - t0:.1f} s under {root}")
        auto_as = auto_choice(root / "data")
        items = _items(combos, paths, auto_as)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
               "LMDBIO_TIMEOUT": str(PEER_TIMEOUT_S), "LMDBIO_EXIT_TIMEOUT": "5",
               "LMDBIO_CACHE": str(root / "cache")}
        rows: list[dict] = []
        for p in sorted({c.nprocs for c in combos}):
            mine = [it for it in items if it["combo"]["nprocs"] == p]
            for k in range(0, len(mine), per_job):
                t1, cpu1 = time.perf_counter(), _child_cpu()
                part = run_job(mine[k:k + per_job], p, root, hang_s, env, log)
                for it, row in zip(mine[k:k + per_job], part):
                    for key in ("reason", "error"):   # no temporary paths in the summary
                        row[key] = row[key].replace(str(root), "$MATRIX")
                    row["verdict"] = verdict(row, it["expect"])
                    row["expected"] = it["expect"]["error"] if it["expect"] else ""
                rows += part
                bad = sum(r["verdict"].startswith("FAIL") for r in part)
                log(f"P={p}: combinations {k + 1}..{k + len(part)} of {len(mine)}: "
                    f"{time.perf_counter() - t1:.0f} s ({_child_cpu() - cpu1:.0f} CPU s), "
                    f"{bad} FAIL")
        rows.sort(key=lambda r: r["id"])
        return rows
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _child_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children (the MPI jobs' ranks)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


SUMMARY_COLUMNS = ("nprocs", "variant", "prefetch", "shuffle", "last_batch", "ranks_per_node",
                   "readers_per_node", "records", "sidecar", "n", "batch", "uneven", "coalesce",
                   "break_after", "variant_read", "verdict", "checked", "wrong", "wrong_held",
                   "where", "expected", "refused", "reason", "error", "problems", "seconds",
                   "slowest")


def write_summary(rows: list[dict], path: str | os.PathLike) -> Path:
    """One CSV row per combination: its options, records checked, wrong, refused and why."""
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, SUMMARY_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            rpn = r["ranks_per_node"]
            w.writerow({**r, "ranks_per_node": "" if rpn is None else rpn,
                        "problems": " | ".join(r["problems"][:4])})
    return path


_FIELDS = ("nprocs", "variant", "prefetch", "shuffle", "last_batch", "ranks_per_node",
           "readers_per_node", "records", "sidecar", "uneven", "coalesce")


def rerun_command(combos: Iterable[Combo]) -> str:
    """A command line that reruns these combinations: the full run, narrowed by ``--where``
    to the values they take in each field (it may also run a few more)."""
    combos = list(combos)
    nprocs = tuple(sorted({c.nprocs for c in combos}))
    parts = [f"--nprocs {','.join(map(str, nprocs))}"] if nprocs != (4,) else []
    for k in _FIELDS[1:]:
        vals = sorted({str(getattr(c, k)) for c in combos})
        if set(vals) != _field_values(nprocs)[k]:
            parts.append(f"--where {k}={','.join(vals)}")
    return ".venv/bin/python -m lmdbio.lab.testing.matrix full " + " ".join(parts)


@functools.lru_cache(maxsize=4)
def _field_values(nprocs: tuple[int, ...]) -> dict[str, set[str]]:
    pool = full_matrix(nprocs)
    return {k: {str(getattr(c, k)) for c in pool} for k in _FIELDS}


def _cause(row: dict) -> str:
    """What a failing row's failure looks like, with paths and numbers left out."""
    import re

    if row["error"]:
        text = row["error"].split(" [at ")[0].split("; aborting")[0]
        lost = row["error"].startswith(("crash", "hang"))
        kind = row["error"].split(":")[0] + ": " if lost else ""
        # The innermost error's words: "the background read of batch 3 failed: LmdbioError: x"
        # and an aborting rank's "lmdbio: error: rank 1: LmdbioError: x" group with "x".
        inner = list(re.finditer(r"\b\w+(Error|Exception|Interrupt): ", text))
        if inner:
            text = kind + text[inner[-1].start():]
        text = re.sub(r"(\$MATRIX)?/\S+", "PATH", text)
        text = re.sub(r"rank\(s\) \[[\d, ]*\]", "rank(s)", text)
        return re.sub(r"\d+", "#", text)[:160]
    if row["verdict"] == "FAIL: waited a timeout":
        phase = row["slowest"].split(":")[0]
        return f"right records, but a phase took about LMDBIO_TIMEOUT ({phase})"
    if row["verdict"] == "FAIL: wrong records":
        # "epoch 0: 3; held epoch 0->epoch 1: 8": where the batch was delivered, where it
        # was found wrong, told apart as stream reads, epochs and the stop in epoch 1.
        kinds = set()
        for k in row["where"].split("; "):
            place = k.split(":")[0]
            delivered, _, found = place.partition("->")
            stream = "epochs" in delivered.split(" ", 1)[-1] or "epochs" in found
            if not found:
                kinds.add("stream reads" if stream else "epoch batches")
            elif found.startswith("a stop"):
                kinds.add("held batches during a member's stop")
            else:
                kinds.add("held batches, next read " + ("a stream read" if stream else
                                                        "in an epoch"))
        return (f"wrong records ({'prefetch' if row['prefetch'] else 'no prefetch'}): "
                + ", ".join(sorted(kinds)))
    if row["problems"]:
        return re.sub(r"\d+", "#", row["problems"][0])[:160]
    return f"{row['verdict']}: {row['refused']}"


def group_failures(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The failing rows grouped by :func:`_cause`, largest group first."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["verdict"].startswith("FAIL"):
            groups.setdefault(_cause(r), []).append(r)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def failure_report(rows: list[dict], examples: int = 2) -> str:
    """The failures, one paragraph per group: cause, count, examples, a command to rerun them."""
    out = []
    for cause, group in group_failures(rows):
        combos = [Combo(**{f.name: r[f.name] for f in fields(Combo)}) for r in group]
        lines = [f"{len(group)} x {cause}"]
        for r, c in list(zip(group, combos))[:examples]:
            lines.append(f"    {c.label()}: {r['verdict']}, wrong {r['wrong']}, held "
                         f"{r['wrong_held']}{'; ' + r['where'] if r['where'] else ''}")
        lines.append(f"    rerun: {rerun_command(combos)}")
        out.append("\n".join(lines))
    return "\n".join(out)


def _matches(c: Combo, where: list[str]) -> bool:
    for cond in where:
        key, _, want = cond.partition("=")
        if key not in _FIELDS:
            raise ConfigurationError(f"--where {cond!r}: no field {key!r}; use one of "
                                     f"{', '.join(_FIELDS)}")
        if str(getattr(c, key)) not in want.split(","):
            return False
    return True


def four_nodes_of_two(nprocs: int = 8, auto_as: dict[bool, str] | None = None) -> list[Combo]:
    """An all-pairs cover of the combinations at ``nprocs`` ranks on ``nprocs/4`` ranks per
    virtual node: at P = 8, four nodes of two ranks (one or two readers), a shape P = 4 lacks."""
    return all_pairs([c for c in full_matrix((nprocs,), auto_as)
                      if c.ranks_per_node == nprocs // 4])


def selection(run_name: str, nprocs: Iterable[int] = (4,), *, count: int = 150, seed: int = 28,
              where: Iterable[str] = (), limit: int = 0, also: Iterable[int] = (),
              auto_as: dict[bool, str] | None = None) -> tuple[list[Combo], list[Combo]]:
    """``(combinations, full matrix)`` of a run: ``pairs`` (:func:`fast_sample`), ``random``
    (:func:`random_sample` of ``count``) or ``full`` (plus :func:`four_nodes_of_two` at each
    P in ``also``), narrowed by ``where`` (``FIELD=V1,V2``) and thinned evenly to ``limit``
    (0: all). ``auto_as``: what ``auto`` reads with (:func:`auto_choice`; default: local)."""
    pool = full_matrix(nprocs, auto_as)
    runs = {"pairs": lambda: fast_sample(pool),
            "random": lambda: random_sample(pool, count, seed),
            "full": lambda: pool + [c for p in also for c in four_nodes_of_two(p, auto_as)]}
    combos = runs[run_name]()
    combos = [c for c in combos if _matches(c, list(where))]
    if limit and limit < len(combos):
        step = len(combos) / limit
        combos = [combos[int(k * step)] for k in range(limit)]
    return combos, pool


def main(argv: list[str] | None = None) -> int:
    """``python -m lmdbio.lab.testing.matrix {pairs,random,full}``: run a selection, print the
    failures by cause; exit 1 if any."""
    ap = argparse.ArgumentParser(prog="python -m lmdbio.lab.testing.matrix",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("run", choices=("pairs", "random", "full"))
    ap.add_argument("--nprocs", default="4", help="rank counts, comma-separated (default 4)")
    ap.add_argument("--also", default="8", help="full: also an all-pairs cover at these rank "
                    "counts P of P/4 ranks per virtual node (default 8: 4 nodes of 2; '' for none)")
    ap.add_argument("--count", type=int, default=150, help="random: combinations drawn")
    ap.add_argument("--seed", type=int, default=28, help="random: the seed")
    ap.add_argument("--where", action="append", default=[],
                    help="keep combinations with FIELD=V1,V2 (repeatable), e.g. variant=lmdb")
    ap.add_argument("--limit", type=int, default=0, help="only N combinations, spread evenly "
                    "over the selection (to time a run)")
    ap.add_argument("--out", help="folder for summary.csv and meta.json")
    ap.add_argument("--hang", type=float, default=90, help="seconds without progress that "
                    "count as a hang")
    args = ap.parse_args(argv)
    nprocs = [int(p) for p in args.nprocs.split(",")]
    also = [int(p) for p in args.also.split(",") if p.strip()]
    # The data sets go to a temporary folder: auto reads as it does on that file system.
    auto_as = auto_choice(tempfile.gettempdir())
    combos, pool = selection(args.run, nprocs, count=args.count, seed=args.seed, where=args.where,
                             limit=args.limit, also=also, auto_as=auto_as)
    print(f"{args.run}: {len(combos)} combinations (the full matrix at P = {args.nprocs}: "
          f"{len(pool)} after collapsing)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows = run(combos, hang_s=args.hang)
    wall = time.perf_counter() - t0
    fails = sum(r["verdict"].startswith("FAIL") for r in rows)
    if fails:
        print(failure_report(rows))
    per = wall / max(1, len(rows))
    print(f"{len(rows)} combinations in {wall:.0f} s ({per:.2f} s each; the full matrix, "
          f"{len(pool)}: about {per * len(pool) / 60:.0f} min at that rate); {fails} FAIL, "
          f"{sum(r['verdict'] == 'refused' for r in rows)} refused as expected, "
          f"{sum(r['verdict'] == 'ok' for r in rows)} ok", flush=True)
    if args.out:
        from lmdbio.metrics import write_results_meta

        write_summary(rows, Path(args.out) / "summary.csv")
        write_results_meta(args.out, {"run": args.run, "nprocs": nprocs, "also": also,
                                      "batches": BATCHES,
                                      "where": args.where, "limit": args.limit,
                                      "combinations": len(rows), "seconds": round(wall, 1),
                                      "fail": fails})
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
