"""Reader options: the paper's variant names parse into one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigurationError

__all__ = ["VARIANTS", "Options", "parse_variant"]

VARIANTS = (
    "lmdb",
    "lmdbio-lmm",
    "lmdbio-lmm-dm",
    "lmdbio-lmm-dio",
    "lmdbio-lmm-dio-prov",
    "lmdbio-lmm-dio-prov-coal",
    "lmdbio-lmm-dio-prov-coal-stag",
)

LOCATES = ("walk", "ring", "index", "provenance")
FETCHES = ("mmap", "pread")


@dataclass(frozen=True)
class Options:
    """How a Reader locates, fetches and hands out records.

    Attributes:
        localized: LMM. Readers per node read for their group and share the
            records through MPI-3 shared memory. False is Caffe's pattern:
            every rank reads its own records.
        locate: how a reader finds its records: ``walk`` (cursor ``next()``
            from where it is, skipping other readers' records), ``ring`` (DM's
            portable-cursor ring: walk only its own records), ``index``
            (DIO: byte extents from a record index built once and
            scattered) or ``provenance`` (PROV: extents computed from the
            provenance sidecar, no traversal).
        fetch: ``mmap`` (copy values out of LMDB's map) or ``pread``
            (DIO: explicit reads straight into shared memory).
        speculative: DM. Ask the kernel for the predicted pages before the walk.
        coalesce_bytes: COAL. Read about this many bytes (several batches)
            per request; 0 turns it off.
        stagger_size: STAG. Readers per stagger group; 0 turns it off,
            None picks half the readers (at least 1).
    """

    localized: bool = True
    locate: str = "walk"
    fetch: str = "mmap"
    speculative: bool = False
    coalesce_bytes: int = 0
    stagger_size: int | None = 0

    def __post_init__(self):
        if self.locate not in LOCATES:
            raise ConfigurationError(f"locate must be one of {LOCATES}, got {self.locate!r}")
        if self.fetch not in FETCHES:
            raise ConfigurationError(f"fetch must be one of {FETCHES}, got {self.fetch!r}")
        if self.coalesce_bytes < 0:
            raise ConfigurationError(f"coalesce_bytes must be >= 0, got {self.coalesce_bytes}")
        if self.stagger_size is not None and self.stagger_size < 0:
            raise ConfigurationError(f"stagger_size must be >= 0 or None, got {self.stagger_size}")
        pread_locates = ("index", "provenance")
        if self.fetch == "pread" and self.locate not in pread_locates:
            raise ConfigurationError(
                f"direct reads (fetch='pread') need byte extents: locate must be 'index' or "
                f"'provenance', not {self.locate!r}")
        if self.fetch == "mmap" and self.locate in pread_locates:
            raise ConfigurationError(
                f"locate={self.locate!r} gives byte extents for direct reads; use fetch='pread' "
                "(DIO) with it")
        if self.speculative and self.fetch != "mmap":
            raise ConfigurationError("speculative page prefetch (DM) applies to mmap reads only")
        if self.coalesce_bytes and self.fetch != "pread":
            raise ConfigurationError("I/O coalescing (COAL) needs direct reads (DIO): set fetch='pread'")
        if not self.localized and (self.locate != "walk" or self.fetch != "mmap" or self.speculative
                                   or self.coalesce_bytes or self.stagger_size):
            raise ConfigurationError(
                "the LMDB baseline (localized=False) is Caffe's plain pattern; the optimizations "
                "need localized readers (LMM)")

    @property
    def staggered(self) -> bool:
        return self.stagger_size is None or self.stagger_size > 0

    @property
    def name(self) -> str:
        """The paper's name for these options, or a descriptive one."""
        if not self.localized:
            return "lmdb"
        parts = ["lmdbio", "lmm"]
        if self.locate == "ring":
            parts.append("dm")
        if self.fetch == "pread":
            parts.append("dio")
        if self.locate == "provenance":
            parts.append("prov")
        if self.coalesce_bytes:
            parts.append("coal")
        if self.staggered:
            parts.append("stag")
        return "-".join(parts)


DEFAULT_COALESCE_BYTES = 4 << 20

_TAGS = ("lmm", "dm", "dio", "prov", "coal", "stag")


def parse_variant(name: str, *, coalesce_bytes: int | None = None,
                  stagger_size: int | None = None) -> Options:
    """Options for a paper variant name (case-insensitive), e.g. ``LMDBIO-LMM-DIO-PROV``.

    Any combination of the tags lmm, dm, dio, prov, coal, stag after
    ``lmdbio`` parses; impossible ones raise ConfigurationError.
    """
    if not isinstance(name, str):
        raise TypeError(f"variant must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key == "lmdb":
        return Options(localized=False)
    parts = key.split("-")
    if parts[0] != "lmdbio" or len(parts) < 2 or any(p not in _TAGS for p in parts[1:]) \
            or len(set(parts[1:])) != len(parts) - 1:
        raise ConfigurationError(
            f"unknown variant {name!r}; use one of {', '.join(VARIANTS)} "
            f"(or 'lmdbio-' followed by tags from {', '.join(_TAGS)})")
    tags = set(parts[1:])
    if "lmm" not in tags:
        raise ConfigurationError(f"variant {name!r}: every LMDBIO variant builds on LMM ('lmdbio-lmm-...')")
    if "dm" in tags and "dio" in tags:
        raise ConfigurationError(
            f"variant {name!r}: DM's cursor ring works on mmap reads; with DIO the extents come "
            "from the index, so drop 'dm'")
    if "prov" in tags and "dio" not in tags:
        raise ConfigurationError(f"variant {name!r}: PROV computes extents for direct reads; add 'dio'")
    if "coal" in tags and "dio" not in tags:
        raise ConfigurationError(f"variant {name!r}: COAL coalesces direct reads; add 'dio'")
    opts = Options(
        localized=True,
        locate="provenance" if "prov" in tags else "index" if "dio" in tags
        else "ring" if "dm" in tags else "walk",
        fetch="pread" if ("dio" in tags or "prov" in tags) else "mmap",
        speculative="dm" in tags and "dio" not in tags,
        coalesce_bytes=(coalesce_bytes or DEFAULT_COALESCE_BYTES) if "coal" in tags else 0,
        stagger_size=(stagger_size or None) if "stag" in tags else 0,
    )
    return opts
