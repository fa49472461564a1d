"""The matrix's pool: the cross product with each combination collapsed to what its Reader does."""

from __future__ import annotations

import functools
from dataclasses import replace
from itertools import product
from collections.abc import Iterable

from lmdbio.options import parse_variant

from .combos import SMALL_COALESCE, Combo, dimensions, topologies, uneven_layouts
from .refusals import SIDECAR_READERS, auto_choice, expected_refusal, reads_with

__all__ = ["effective", "raw_product", "full_matrix"]


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
    v = reads_with(c, auto_as)
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


def raw_product(nprocs: int = 4, layouts: str = "even") -> Iterable[Combo]:
    """Every combination of :func:`dimensions` at ``nprocs`` ranks, nothing collapsed."""
    dims = dimensions(nprocs, layouts)
    names = list(dims)
    for values in product(*dims.values()):
        d = dict(zip(names, values))
        rpn, rpr = d.pop("topology")
        yield Combo(nprocs=nprocs, ranks_per_node=rpn, readers_per_node=rpr, **d)


def full_matrix(nprocs: Iterable[int] = (4,), auto_as: dict[bool, str] | None = None,
                layouts: str = "even") -> list[Combo]:
    """The cross product with every combination collapsed to its effective settings, each
    setting once, in a fixed order. ``layouts="uneven"``: on the :func:`uneven_layouts` only
    (the variants that build reader groups: per-rank ones collapse to one node)."""
    auto_as = auto_as or auto_choice()
    return list(_full(tuple(nprocs), auto_as[True], auto_as[False], layouts))


@functools.lru_cache(maxsize=8)
def _full(nprocs: tuple[int, ...], auto_with: str, auto_without: str,
          layouts: str) -> tuple[Combo, ...]:
    out: dict[Combo, None] = {}
    for p in nprocs:
        keep = set(topologies(p) if layouts == "even" else uneven_layouts(p))
        for c in raw_product(p, layouts):
            c = effective(c, {True: auto_with, False: auto_without})
            if (c.ranks_per_node, c.readers_per_node) in keep:
                out.setdefault(c, None)
    return tuple(out)
