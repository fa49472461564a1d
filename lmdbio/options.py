"""Reader options: the paper's variant names parse into one frozen dataclass."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from .errors import ConfigurationError

__all__ = ["VARIANTS", "EXTRA_VARIANTS", "Options", "parse_variant", "choose_auto",
           "filesystem_type", "check_batch_size", "resolve_variant", "DEFAULT_COALESCE_BYTES"]

from . import registry
from .stages import DEFAULT_COALESCE_BYTES

#: The papers' seven series: the baseline, then each optimization on the ones before it
#: (:func:`lmdbio.registry.series`).
VARIANTS = registry.series()

#: Variants beyond the papers: the PyTorch-Dataset way of reading LMDB (``lmdb-get``:
#: every rank ``txn.get``s its own keys), every rank ``pread``-ing its own records
#: (``lmdbio-direct``), and ``auto``, which picks by file system (see :func:`choose_auto`).
EXTRA_VARIANTS = registry.variants()[len(VARIANTS):] + ("auto",)

LOCATES = tuple(s.value for s in registry.stages("locator"))
FETCHES = tuple(s.value for s in registry.stages("fetcher"))


@dataclass(frozen=True)
class Options:
    """How a Reader locates, fetches and hands out records.

    Which values go together, and the variant name they make, come from the
    stage registry (:mod:`lmdbio.registry`, the stages in :mod:`lmdbio.stages`).

    Attributes:
        localized: LMM. Readers per node read for their group and share the
            records through MPI-3 shared memory. False: every rank reads its
            own records (:class:`lmdbio.pipeline.distribute.Private`): Caffe's cursor
            walk (``lmdb``), ``txn.get`` per key (``lmdb-get``: locate ``key``) or direct
            reads (``lmdbio-direct``: locate ``prov-or-index``, fetch
            ``pread``, coalescing a rank's own batches).
        locate: how a reader finds its records: ``walk`` (cursor ``next()``
            from where it is, skipping other readers' records), ``ring`` (DM's
            portable-cursor ring: walk only its own records), ``index``
            (DIO: byte extents from a record index built once and
            scattered) or ``provenance`` (PROV: extents computed from the
            provenance sidecar, no traversal): node readers (LMM). Per rank,
            ``prov-or-index`` (``lmdbio-direct``): the sidecar where it is
            current and passes every rank's check, else the record index.
        fetch: ``mmap`` (copy values out of LMDB's map) or ``pread``
            (DIO: explicit reads straight into shared memory).
        speculative: DM. Ask the kernel for the predicted pages before the walk
            (with ``locate='ring'``).
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
        _check_size("coalesce_bytes", self.coalesce_bytes, none=False)
        _check_size("stagger_size", self.stagger_size, none=True)
        wrong = registry.problems(self)
        if wrong:
            raise ConfigurationError(wrong[0], option="options")

    @property
    def staggered(self) -> bool:
        return self.stagger_size is None or self.stagger_size > 0

    @property
    def name(self) -> str:
        """The paper's name for these options, or a descriptive one."""
        return registry.name_of(self)


def parse_variant(name: str, *, coalesce_bytes: int | None = None,
                  stagger_size: int | None = None) -> Options:
    """Options for a paper variant name (case-insensitive), e.g. ``LMDBIO-LMM-DIO-PROV``.

    Any combination of the registry's tags (lmm, dm, dio, prov, coal, stag) after
    ``lmdbio`` that its stages allow parses; others raise ConfigurationError
    saying which tag to add or drop. A name turns on every switch its tags
    name: ``coalesce_bytes`` (default 4 MiB) and ``stagger_size`` (default
    half the readers) size them.
    """
    known = ", ".join(registry.variants() + ("auto",))
    if not isinstance(name, str):
        raise ConfigurationError(f"variant must be a string (one of {known}), got {name!r} "
                                 f"(a {type(name).__name__})", option="variant")
    # Checked whether or not the variant uses them, so a bad value never passes unseen.
    _check_size("coalesce_bytes", coalesce_bytes, none=True)
    _check_size("stagger_size", stagger_size, none=True)
    key = name.strip().lower()
    if key == "auto":
        raise ConfigurationError("variant 'auto' is chosen per file system when the Reader "
                                 "opens the database (lmdbio.options.choose_auto); it has no "
                                 "fixed Options", option="variant")
    fields = registry.named().get(key)
    if fields is None:
        tags = [o.tag for o in registry.optimizations()]
        parts = key.split("-")
        if parts[0] != "lmdbio" or len(parts) < 2 or any(p not in tags for p in parts[1:]) \
                or len(set(parts[1:])) != len(parts) - 1:
            raise ConfigurationError(f"unknown variant {name!r}; use one of {known} "
                                     f"(or 'lmdbio-' followed by tags from {', '.join(tags)})",
                                     option="variant")
        raise ConfigurationError(registry.tag_problem(name, tuple(parts[1:])), option="variant")
    fields = dict(fields)
    if fields["coalesce_bytes"]:
        if coalesce_bytes == 0:
            raise ConfigurationError(
                f"variant {name!r} with coalesce_bytes=0: a COAL variant reads at least one batch "
                "per request; give a positive target in bytes (coalesce_bytes=1 reads one batch "
                "per request), leave it None for the default, or name the variant without '-coal'",
                option="coalesce_bytes")
        fields["coalesce_bytes"] = coalesce_bytes or fields["coalesce_bytes"]
    if fields["stagger_size"] != 0:
        fields["stagger_size"] = stagger_size or None
    return Options(**fields)


# --------------------------------------------------------------------------- variant="auto"

#: statfs f_type magic numbers (linux/magic.h and the file systems' sources) of
#: network and parallel file systems, where the full LMDBIO stack pays off.
SHARED_FS = {
    0x6969: "nfs", 0x47504653: "gpfs", 0x0BD00BD0: "lustre", 0x19830326: "beegfs",
    0x65735546: "fuse", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x00C36400: "ceph",
    0x73757245: "coda", 0x564C: "ncp", 0x013111A8: "ibrix", 0x61636673: "acfs",
}
#: Local file systems (and tmpfs), where each rank reading directly is fastest.
LOCAL_FS = {
    0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
    0x794C7630: "overlayfs", 0x2FC12FC1: "zfs", 0xF2F52010: "f2fs", 0x3153464A: "jfs",
    0x52654973: "reiserfs", 0x4D44: "vfat", 0x5346544E: "ntfs", 0x858458F6: "ramfs",
}
#: What ``auto`` reads with on each kind of file system.
AUTO_LOCAL = "lmdbio-direct"
AUTO_SHARED = "lmdbio-lmm-dio-prov-coal-stag"
AUTO_SHARED_NO_PROV = "lmdbio-lmm-dio-coal-stag"


def filesystem_type(path) -> tuple[int, str]:
    """``(f_type, name)`` of the file system holding ``path``, from ``statfs(2)``.

    The name is ``"unknown"`` for a magic number neither table knows.
    """
    import ctypes
    import ctypes.util
    import os

    class _StatFs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("f_rest", ctypes.c_long * 15)]

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    buf = _StatFs()
    if libc.statfs(os.fsencode(str(path)), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"statfs({path}) failed: {os.strerror(err)}")
    magic = buf.f_type & 0xFFFFFFFF
    return magic, SHARED_FS.get(magic) or LOCAL_FS.get(magic) or "unknown"


def choose_auto(path, *, provenance: bool | None = None) -> tuple[str, str]:
    """The variant ``auto`` reads ``path`` with, and why: ``(variant, reason)``.

    Local file systems and tmpfs: :data:`AUTO_LOCAL` (every rank preads its
    own records; nothing to gain from one reader per node when storage
    serves small requests at memory speed). Network and parallel file
    systems (NFS, GPFS, Lustre, BeeGFS, FUSE, ...): the full LMDBIO stack,
    with PROV when the sidecar is current (``provenance``; checked when None).
    An unknown file system counts as shared: the full stack is never much
    slower there, per-rank reading on a shared one can be. Pass a variant
    name instead of ``"auto"`` to override.
    """
    magic, fs = filesystem_type(path)
    if magic in LOCAL_FS:
        return AUTO_LOCAL, f"{fs} (f_type {magic:#x}) is local: every rank preads its own records"
    if provenance is None:
        from .provenance import provenance_status

        provenance = provenance_status(path) == "present"
    kind = "shared" if magic in SHARED_FS else "not known to be local"
    variant = AUTO_SHARED if provenance else AUTO_SHARED_NO_PROV
    why = "" if provenance else "; no current provenance sidecar, so no PROV"
    return variant, (f"{fs} (f_type {magic:#x}) is {kind}: one reader per node, coalesced and "
                     f"staggered requests{why}")


def check_batch_size(batch_size, nprocs: int) -> int:
    """``batch_size`` as an int, or ConfigurationError saying what a valid one is."""
    if isinstance(batch_size, bool) or not hasattr(type(batch_size), "__index__"):
        raise ConfigurationError(f"batch_size must be an integer (positive, a multiple of the rank "
                                 f"count, {nprocs}), got {batch_size!r} (a "
                                 f"{type(batch_size).__name__})", option="batch_size")
    batch_size = operator.index(batch_size)   # int, numpy integers
    if batch_size <= 0:
        raise ConfigurationError(f"batch_size must be positive (an integer, a multiple of the rank "
                                 f"count, {nprocs}), got {batch_size}", option="batch_size")
    if batch_size % nprocs:
        raise ConfigurationError(
            f"batch_size {batch_size} does not divide among {nprocs} ranks; use a "
            f"multiple of {nprocs} (e.g. {max(1, batch_size // nprocs) * nprocs})",
            option="batch_size")
    return batch_size


def resolve_variant(variant, options: Options | None, path, *, chooser: bool = True,
                    coalesce_bytes: int | None = None, stagger_size: int | None = None):
    """``(options, auto)`` for the Reader's ``variant`` / ``options`` arguments.

    ``variant="auto"``: only the ``chooser`` rank decides (by the file system
    ``path`` lives on; its sidecar check reads pages), returning ``(None,
    (variant, reason))``; the others return ``(None, ("", ""))`` and take the
    chooser's result. ``auto`` is None for any other variant.
    """
    if options is None and isinstance(variant, str) and variant.strip().lower() == "auto":
        if not chooser:
            return None, ("", "")
        auto = choose_auto(path)
        opts = parse_variant(auto[0], coalesce_bytes=coalesce_bytes, stagger_size=stagger_size)
        return opts, auto
    opts = options if options is not None else parse_variant(
        variant, coalesce_bytes=coalesce_bytes, stagger_size=stagger_size)
    if not isinstance(opts, Options):
        raise ConfigurationError(f"options must be an lmdbio.Options (or None, to use variant), "
                                 f"got a {type(opts).__name__}", option="options")
    return opts, None


def _check_size(name: str, value, *, none: bool) -> None:
    """ConfigurationError naming ``name`` unless ``value`` is an integer >= 0 (or None)."""
    if value is None and none:
        return
    if isinstance(value, bool) or not hasattr(type(value), "__index__") or value < 0:
        also = " or None (the default)" if none else ""
        raise ConfigurationError(f"{name} must be an integer >= 0{also}, got {value!r}",
                                 option=name)
