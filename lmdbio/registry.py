"""The stage registry: every optimization is registered once, with what it provides and needs.

A variant is one stage per role: a scope (node readers or per-rank reading),
a locator, a fetcher, the optional switches (DM's speculation, COAL, STAG)
and a distributor, which is not chosen but derived: the first one whose
needs the others meet. Each :class:`Stage` names the :class:`~lmdbio.Options`
field and value that choose it, the features it ``provides``, ``needs`` and
``excludes``, and the optimization ``tag`` it stands for in a variant's name.
From these alone come ``Options``' validity and its errors, ``Options.name``,
:func:`lmdbio.parse_variant`, the stage tables in :mod:`lmdbio.pipeline`,
``VARIANTS`` / ``EXTRA_VARIANTS`` and the docs' variant table
(:mod:`lmdbio.variant_table`). The built-in stages are registered by
:mod:`lmdbio.stages` (imported with :mod:`lmdbio`); :func:`registered` adds
more for a while (a test's toy).
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError

__all__ = ["Stage", "Optimization", "ROLES", "FIELDS", "SWITCHES", "register", "unregister",
           "registered", "stages", "optimizations", "feature", "choose", "problems", "name_of",
           "named", "series", "variants", "variant_stages", "stage_names", "stage_class",
           "is_cursor_walk", "reads_sidecar", "short_name", "tag_problem", "StageTable"]

#: The roles a variant fills, in the order a chunk meets them (switches after the fetcher).
ROLES = ("scope", "locator", "fetcher", "speculate", "coalesce", "stagger", "distributor")
#: The Options field each chosen role is set by (the distributor is derived).
FIELDS = {"scope": "localized", "locator": "locate", "fetcher": "fetch",
          "speculate": "speculative", "coalesce": "coalesce_bytes", "stagger": "stagger_size"}
#: Switch fields: (is it on, its value when off).
SWITCHES = {"speculative": (bool, False),
            "coalesce_bytes": (lambda v: v is not None and v > 0, 0),
            "stagger_size": (lambda v: v is None or v > 0, 0)}


@dataclass(frozen=True)
class Optimization:
    """A paper optimization's tag in variant names (``lmdbio-lmm-dio``), in the papers' order."""

    tag: str        # "dio"
    label: str      # "DIO"
    summary: str    # what it changes, for the variant table
    problem: str    # the problem it fixes


@dataclass(frozen=True)
class Stage:
    """One piece of a variant, chosen by ``Options.<FIELDS[role]> == value``.

    ``about`` is a plural noun phrase ("direct reads (DIO)"): errors read
    ``"<field>=<value>: <about> need <feature> ..."``. ``cls`` is the stage class
    (``"module:Class"`` under :mod:`lmdbio.pipeline`, imported when used) whose
    ``name`` is ``name``; switches have none. A locator that reads per rank
    names its variant (``variant``, with ``summary`` and ``problem`` for the
    table); ``sidecar`` says whether it reads the provenance sidecar
    (``"needs"``: it fails without one; ``"prefers"``: it falls back).
    """

    role: str
    value: object
    name: str
    about: str
    cls: str | type | None = None
    tag: str = ""
    provides: AbstractSet[str] = frozenset()
    needs: AbstractSet[str] = frozenset()
    excludes: AbstractSet[str] = frozenset()
    default: object = None      # a switch's value when a variant name turns it on
    variant: str = ""
    summary: str = ""
    problem: str = ""
    sidecar: str = ""

    def __post_init__(self):
        for attr in ("provides", "needs", "excludes"):
            object.__setattr__(self, attr, frozenset(getattr(self, attr)))
        if self.role not in ROLES:
            raise ConfigurationError(f"stage {self.name!r}: role must be one of {ROLES}, "
                                     f"got {self.role!r}")


_STAGES: list[Stage] = []
_OPTIMIZATIONS: list[Optimization] = []
_FEATURES: dict[str, str] = {}
_cache: dict = {}


def feature(name: str, text: str) -> None:
    """Register what a feature is called in errors ("byte extents")."""
    _FEATURES[name] = text


def register(*items: Stage | Optimization) -> None:
    """Add stages (and optimizations); refused, and nothing added, where the variants they
    make would clash (two ways to read one name) or a feature has no text."""
    before = list(_STAGES), list(_OPTIMIZATIONS)
    for item in items:
        if isinstance(item, Optimization):
            _OPTIMIZATIONS.append(item)
        else:
            _STAGES.append(item)
    _cache.clear()
    try:
        for s in _STAGES:
            unknown = (s.provides | s.needs | s.excludes) - set(_FEATURES)
            if unknown:
                raise ConfigurationError(f"stage {s.name!r}: no feature text for {sorted(unknown)};"
                                         " register it with lmdbio.registry.feature()")
        named()
    except Exception:
        _STAGES[:], _OPTIMIZATIONS[:] = before
        _cache.clear()
        raise


def unregister(*items: Stage | Optimization) -> None:
    """Remove stages (and optimizations) added with :func:`register`."""
    for item in items:
        if isinstance(item, Optimization):
            _OPTIMIZATIONS.remove(item)
        else:
            _STAGES.remove(item)
    _cache.clear()


@contextmanager
def registered(*items: Stage | Optimization):
    """``items`` registered inside the block, unregistered after it (a toy stage in a test)."""
    register(*items)
    try:
        yield items
    finally:
        unregister(*items)


def stages(role: str | None = None) -> tuple[Stage, ...]:
    return tuple(s for s in _STAGES if role is None or s.role == role)


def optimizations() -> tuple[Optimization, ...]:
    return tuple(_OPTIMIZATIONS)


def stage_class(stage: Stage) -> Any:
    """The class of ``stage``, imported from :mod:`lmdbio.pipeline` on first use."""
    if isinstance(stage.cls, str):
        module, _, attr = stage.cls.partition(":")
        return getattr(importlib.import_module(f"lmdbio.pipeline.{module}"), attr)
    if stage.cls is None:
        raise ConfigurationError(f"stage {stage.name!r} has no class")
    return stage.cls


# --------------------------------------------------------------------------- choosing and checking
def _spell(f: str, value) -> str:
    return f"{f}={value!r}"


def _is_on(f: str, value) -> bool:
    return SWITCHES[f][0](value)


def _as_fields(options) -> dict:
    if isinstance(options, dict):
        return options
    return {f: getattr(options, f) for f in FIELDS.values()}


def choose(options, explain: bool = True) -> tuple[list[Stage], list[str]]:
    """The stages ``options`` (an Options, or its fields by name) choose, and what is wrong
    with them (each saying what to change, where ``explain``; else the features at fault)."""
    fields = _as_fields(options)
    chosen: list[Stage] = []
    for role in ROLES[:-1]:
        f = FIELDS[role]
        offered = stages(role)
        if f in SWITCHES:
            chosen += offered[:1] if _is_on(f, fields[f]) else []
            continue
        match = [s for s in offered if s.value == fields[f]]
        if not match:
            return chosen, [f"{f} must be one of {tuple(s.value for s in offered)}, "
                            f"got {fields[f]!r}"]
        chosen.append(match[0])
    provided = frozenset().union(*(s.provides for s in chosen))
    dist = [d for d in stages("distributor") if d.needs <= provided and not d.excludes & provided]
    if dist:
        chosen.append(dist[0])
    # Each stage's missing needs, then what it excludes, in the order a chunk meets them.
    faults = [(s, f, f in s.needs) for s in chosen
              for f in sorted(s.needs - provided) + sorted(s.excludes & provided)]
    if not explain:
        return chosen, [f for _, f, _ in faults] + ([] if dist else ["distributor"])
    wrong = [(_need if need else _exclude)(s, fields, chosen, f) for s, f, need in faults]
    if not dist and not wrong:
        wrong.append(f"no distributor takes what these stages provide ({sorted(provided)})")
    return chosen, wrong


def problems(options) -> list[str]:
    """What is wrong with ``options`` (or its fields), each saying what to change."""
    return choose(options)[1]


def _spelled(s: Stage, fields: dict) -> str:
    f = FIELDS.get(s.role, "")
    return _spell(f, fields[f] if f in SWITCHES else s.value)


def _providers(feat: str) -> str:
    """Which option values provide ``feat``: "localized=True: LMM", "locate 'a' or 'b'"."""
    by: dict[str, list] = {}
    for s in _STAGES:
        if feat in s.provides and s.role in FIELDS:
            by.setdefault(FIELDS[s.role], []).append(s)
    parts = []
    for f, ss in by.items():
        if len(ss) == 1:
            parts.append(_spell(f, ss[0].value) + (f": {_label(ss[0].tag)}" if ss[0].tag else ""))
        else:
            vals = [repr(s.value) for s in ss]
            parts.append(f"{f} {', '.join(vals[:-1])} or {vals[-1]}")
    return "; ".join(parts)


def _label(tag: str) -> str:
    return next((o.label for o in _OPTIMIZATIONS if o.tag == tag), tag.upper())


def _need(s: Stage, fields: dict, chosen: list[Stage], feat: str) -> str:
    msg = f"{_spelled(s, fields)}: {s.about} need {_FEATURES[feat]} ({_providers(feat)})"
    roles = {t.role for t in _STAGES if feat in t.provides}
    instead = [c for c in chosen if c.role in roles and c.role in FIELDS]
    if instead:
        msg += ", not " + ", ".join(f"{_spelled(c, fields)} ({c.about})" for c in instead)
    return msg + _fixes(fields, [s.role] + sorted(roles))


def _exclude(s: Stage, fields: dict, chosen: list[Stage], feat: str) -> str:
    by = [c for c in chosen if feat in c.provides]
    msg = (f"{_spelled(s, fields)}: {s.about} cannot go with {_FEATURES[feat]} "
           f"({', '.join(_spelled(c, fields) for c in by)})")
    return msg + _fixes(fields, [s.role] + [c.role for c in by])


def _fixes(fields: dict, roles: list[str]) -> str:
    """"; use a=1 or b=2": the one-field changes that make ``fields`` valid."""
    out: list[str] = []
    for role in dict.fromkeys(roles):
        f = FIELDS.get(role)
        if f is None:
            continue
        values = [SWITCHES[f][1]] if f in SWITCHES else [s.value for s in stages(role)]
        for v in values:
            if v != fields[f] and not choose({**fields, f: v}, explain=False)[1]:
                out.append(_spell(f, v))
    return f"; use {', '.join(out[:-1])} or {out[-1]}" if len(out) > 1 else \
        f"; use {out[0]}" if out else ""


# --------------------------------------------------------------------------- names
def name_of(options) -> str:
    """The variant name of valid ``options`` (or fields): ``lmdbio-`` and the tags of a scope
    with a tag (LMM) in the papers' order; per rank, the locator's variant."""
    chosen = choose(options)[0]
    scope = next(s for s in chosen if s.role == "scope")
    locator = next(s for s in chosen if s.role == "locator")
    if not scope.tag:
        return locator.variant or f"per-rank-{locator.value}"
    tags = {s.tag for s in chosen if s.tag}
    return "-".join(["lmdbio"] + [o.tag for o in _OPTIMIZATIONS if o.tag in tags])


def _combinations():
    choices = []
    for role in ROLES[:-1]:
        f = FIELDS[role]
        if f in SWITCHES:
            on = stages(role)
            choices.append([(f, SWITCHES[f][1])] + ([(f, on[0].default)] if on else []))
        else:
            choices.append([(f, s.value) for s in stages(role)])
    for combo in itertools.product(*choices):
        yield dict(combo)


def named() -> dict[str, dict]:
    """Every valid variant name -> its fields: the combination with the most switches on
    (``lmdbio-lmm-dm`` speculates; ``lmdbio-direct`` coalesces)."""
    if "named" not in _cache:
        best: dict[str, tuple[int, dict]] = {}
        for fields in _combinations():
            if choose(fields, explain=False)[1]:
                continue
            name = name_of(fields)
            on = sum(_is_on(f, fields[f]) for f in SWITCHES)
            if name in best and best[name][0] == on:
                raise ConfigurationError(f"variant {name!r} names two combinations of stages: "
                                         f"{best[name][1]} and {fields}; give a stage its own tag "
                                         "or variant name")
            if name not in best or on > best[name][0]:
                best[name] = (on, fields)
        _cache["named"] = {n: f for n, (_, f) in best.items()}
    return _cache["named"]


def _tags(name: str) -> tuple[str, ...]:
    """The tags of an ``lmdbio-<tags>`` name (none for a per-rank variant's own name)."""
    parts = name.split("-")
    known = {o.tag for o in _OPTIMIZATIONS}
    return tuple(parts[1:]) if parts[0] == "lmdbio" and set(parts[1:]) <= known else ()


def series() -> tuple[str, ...]:
    """The papers' series: the per-rank baseline, then for each optimization in order the
    largest valid set of it and the ones before it (DIO replaces DM; PROV builds on DIO)."""
    table = named()
    tagged = {frozenset(_tags(n)): n for n in table if _tags(n)}
    out = [s.variant for s in stages("locator") if s.variant in table][:1]   # the baseline
    order = [o.tag for o in _OPTIMIZATIONS]
    for i, tag in enumerate(order):
        sets = [s for s in tagged if tag in s and s <= set(order[:i + 1])]
        if sets:
            out.append(tagged[max(sets, key=len)])
    return tuple(out)


def variants() -> tuple[str, ...]:
    """Every named variant: the papers' series, then the per-rank ones beyond them."""
    paper = series()
    return paper + tuple(s.variant for s in stages("locator")
                         if s.variant and s.variant in named() and s.variant not in paper)


def tag_problem(name: str, tags: tuple[str, ...]) -> str:
    """Why ``lmdbio-<tags>`` is no variant, and which tag to add or drop."""
    valid = [frozenset(_tags(n)) for n in named() if _tags(n)]
    have = frozenset(tags)
    common = frozenset.intersection(*valid) - have
    if common:
        first = [o for o in _OPTIMIZATIONS if o.tag in common]
        start = "-".join(o.tag for o in first)
        return (f"variant {name!r}: every LMDBIO variant builds on "
                f"{' and '.join(o.label for o in first)} ('lmdbio-{start}-...')")
    fixes = [f"add {o.tag!r}" for o in _OPTIMIZATIONS
             if o.tag not in have and have | {o.tag} in valid]
    fixes += [f"drop {t!r}" for t in tags if have - {t} in valid]
    labels = " + ".join(o.label for o in _OPTIMIZATIONS if o.tag in have)
    how = " or ".join(fixes) if fixes else "use one of " + ", ".join(variants())
    why = _stage_reason(name)
    return f"variant {name!r}: {labels} is no combination the stages allow: {how}" + \
        (f" (the stages say: {why})" if why else "")


def _stage_reason(name: str) -> str:
    """The first stage-level fault of the combination named ``name`` with the most switches
    on (what the stages' needs and excludes say), or "" when no combination has the name."""
    best: tuple[int, list[str]] = (-1, [])
    for fields in _combinations():
        try:
            if name_of(fields) != name:
                continue
        except ConfigurationError:
            continue
        on = sum(_is_on(f, fields[f]) for f in SWITCHES)
        if on > best[0]:
            best = (on, choose(fields)[1])
    return best[1][0] if best[1] else ""


class StageTable(Mapping):
    """The classes of one role's stages by the Options fields that choose them, over every
    valid combination; live: it follows :func:`register` and :func:`unregister`."""

    def __init__(self, role: str, key: tuple[str, ...]):
        self.role, self.key = role, key

    def _table(self) -> dict:
        cached = _cache.get(("table", self.role))
        if cached is None:
            cached = {}
            for fields in _combinations():
                chosen, wrong = choose(fields, explain=False)
                if not wrong:
                    k = tuple(fields[f] for f in self.key)
                    cls = stage_class(next(s for s in chosen if s.role == self.role))
                    cached[k[0] if len(k) == 1 else k] = cls
            _cache[("table", self.role)] = cached
        return cached

    def __getitem__(self, k):
        return self._table()[k]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


# --------------------------------------------------------------------------- queries
def _chosen(variant: str) -> list[Stage]:
    try:
        return choose(named()[variant])[0]
    except KeyError:
        raise ConfigurationError(f"unknown variant {variant!r}; use one of "
                                 f"{', '.join(variants())}") from None


def stage_names(options) -> tuple[str, ...]:
    """The stages ``options`` (or fields) read with, by name: locator (with ``+speculate``),
    fetcher, distributor, then the optional coalesce and stagger."""
    by = {s.role: s.name for s in choose(options)[0]}
    locate = by["locator"] + (f"+{by['speculate']}" if "speculate" in by else "")
    return (locate, by["fetcher"], by["distributor"]) + tuple(
        by[r] for r in ("coalesce", "stagger") if r in by)


def variant_stages(variant: str) -> tuple[str, ...]:
    """The stages of a named variant, by name."""
    _chosen(variant)
    return stage_names(named()[variant])


def is_cursor_walk(variant: str) -> bool:
    """Whether ``variant``'s locator walks a cursor forward (it cannot serve shuffled epochs)."""
    locator = next(s for s in _chosen(variant) if s.role == "locator")
    return not stage_class(locator).abilities.random_access


def reads_sidecar(variant: str, required: bool = False) -> bool:
    """Whether ``variant`` reads the provenance sidecar (``required``: fails without one)."""
    return any(s.sidecar == "needs" or (s.sidecar and not required) for s in _chosen(variant))


def short_name(variant: str) -> str:
    """The papers' short name: "LMDB", the optimization a series adds, "full stack"."""
    paper = series()
    if variant not in paper:
        return variant
    i = paper.index(variant)
    if i == 0:
        return "LMDB"
    if i == len(paper) - 1:
        return "full stack"
    added = set(_tags(variant)) - set(_tags(paper[i - 1]))
    return " + ".join(o.label for o in _OPTIMIZATIONS if o.tag in added)
