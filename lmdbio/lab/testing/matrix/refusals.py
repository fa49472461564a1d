"""Which combinations the Reader must refuse, and what ``auto`` reads with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Callable

from lmdbio import registry
from lmdbio.options import AUTO_LOCAL, AUTO_SHARED, AUTO_SHARED_NO_PROV

from .combos import VARIANT_NAMES, Combo

__all__ = ["CURSOR_WALKS", "PROV_VARIANTS", "SIDECAR_READERS", "Refusal", "REFUSALS",
           "auto_choice", "reads_with", "expected_refusal"]


#: The variants a combination reads with: the named ones and those ``auto`` picks.
_READ_WITH = tuple(dict.fromkeys([v for v in VARIANT_NAMES if v != "auto"]
                                 + [AUTO_LOCAL, AUTO_SHARED, AUTO_SHARED_NO_PROV]))
#: Variants whose locator walks an LMDB cursor forward (no shuffled epochs).
CURSOR_WALKS = frozenset(filter(registry.is_cursor_walk, _READ_WITH))
#: Variants that locate records from the provenance sidecar alone.
PROV_VARIANTS = frozenset(v for v in _READ_WITH if registry.reads_sidecar(v, required=True))
#: Variants that read the sidecar where there is one (PROV, and lmdbio-direct's ProvOrIndex).
SIDECAR_READERS = frozenset(filter(registry.reads_sidecar, _READ_WITH))


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


def reads_with(c: Combo, auto_as: dict[bool, str]) -> str:
    return auto_as[c.sidecar] if c.variant == "auto" else c.variant


def expected_refusal(c: Combo, auto_as: dict[bool, str] | None = None) -> Refusal | None:
    """The :data:`REFUSALS` rule ``c`` falls under, or None (it must deliver its records)."""
    v = reads_with(c, auto_as or auto_choice())
    return next((r for r in REFUSALS if r.applies(c, v)), None)
