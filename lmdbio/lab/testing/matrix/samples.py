"""What a run checks: all-pairs covers, the regressions, random samples, selections."""

from __future__ import annotations

import random
from itertools import combinations
from collections.abc import Iterable

from lmdbio.errors import ConfigurationError

from .combos import Combo
from .pool import effective, full_matrix

__all__ = ["pair_set", "all_pairs", "REGRESSIONS", "UNEVEN_REGRESSIONS", "fast_sample",
           "random_sample", "four_nodes_of_two", "uneven_groups", "FIELDS", "matches",
           "selection"]


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


#: Issue 44's F20 and F21: COAL variants on reader groups that serve different numbers of ranks,
#: with a request size that gives each group its own chunk (epochs started apart; STAG's turns
#: lost step). Read in every fast sample.
UNEVEN_REGRESSIONS: tuple[Combo, ...] = (
    _combo("lmdbio-lmm-dio-prov-coal", topology=(3, 1), coalesce="medium"),
    _combo("lmdbio-lmm-dio-prov-coal-stag", topology=(None, 3), records="mixed",
           coalesce="medium"),
    _combo("lmdbio-lmm-dio-prov-coal-stag", prefetch=1, topology=(3, 2), uneven=True,
           coalesce="medium"),
)


def fast_sample(pool: list[Combo]) -> list[Combo]:
    """``make test``'s combinations: :data:`REGRESSIONS`, an all-pairs cover of ``pool``, then
    :data:`UNEVEN_REGRESSIONS` (their layouts are not in the P = 4 pool)."""
    chosen = all_pairs(pool, [c for c in REGRESSIONS if c in set(pool)])
    return chosen + [c for c in UNEVEN_REGRESSIONS if c not in set(chosen)]


def uneven_groups(nprocs: int = 4, auto_as: dict[bool, str] | None = None) -> list[Combo]:
    """:data:`UNEVEN_REGRESSIONS` (at P = 4), then an all-pairs cover of the combinations at
    ``nprocs`` ranks on :func:`~.combos.uneven_layouts` (reader groups of different sizes)."""
    start = [c for c in UNEVEN_REGRESSIONS if c.nprocs == nprocs]
    return all_pairs(full_matrix((nprocs,), auto_as, layouts="uneven"), start)


def random_sample(pool: list[Combo], count: int, seed: int) -> list[Combo]:
    """``count`` combinations of ``pool`` drawn without replacement by ``random.Random(seed)``."""
    return random.Random(seed).sample(pool, min(count, len(pool)))


FIELDS = ("nprocs", "variant", "prefetch", "shuffle", "last_batch", "ranks_per_node",
           "readers_per_node", "records", "sidecar", "uneven", "coalesce")


def matches(c: Combo, where: list[str]) -> bool:
    for cond in where:
        key, _, want = cond.partition("=")
        if key not in FIELDS:
            raise ConfigurationError(f"--where {cond!r}: no field {key!r}; use one of "
                                     f"{', '.join(FIELDS)}")
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
              uneven: Iterable[int] = (4,), auto_as: dict[bool, str] | None = None
              ) -> tuple[list[Combo], list[Combo]]:
    """``(combinations, full matrix)`` of a run: ``pairs`` (:func:`fast_sample`), ``random``
    (:func:`random_sample` of ``count``), ``uneven`` (:func:`uneven_groups` at each P in
    ``uneven``) or ``full`` (the pool, :func:`four_nodes_of_two` at each P in ``also`` and
    :func:`uneven_groups` at each P in ``uneven``), narrowed by ``where`` (``FIELD=V1,V2``)
    and thinned evenly to ``limit`` (0: all). ``auto_as``: what ``auto`` reads with
    (:func:`~.refusals.auto_choice`; default: local)."""
    pool = full_matrix(nprocs, auto_as)
    def groups() -> list[Combo]:
        return [c for p in uneven for c in uneven_groups(p, auto_as)]

    runs = {"pairs": lambda: fast_sample(pool),
            "random": lambda: random_sample(pool, count, seed),
            "uneven": groups,
            "full": lambda: (pool + [c for p in also for c in four_nodes_of_two(p, auto_as)]
                             + [c for c in groups() if c not in set(pool)])}
    combos = runs[run_name]()
    combos = [c for c in combos if matches(c, list(where))]
    if limit and limit < len(combos):
        step = len(combos) / limit
        combos = [combos[int(k * step)] for k in range(limit)]
    return combos, pool
