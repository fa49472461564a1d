"""LMDB on-disk format: the file, its meta pages, and (re-exported) its pages, both formats.

Opening a data.mdb (:func:`db_file`, :func:`open_readonly`), reading and
validating its meta pages (:func:`read_meta`). The layout's constants and
structures are :mod:`lmdbio.layout`'s, page decoding is :mod:`lmdbio.pages`';
both are importable from here. Every problem with a file is one
:class:`LmdbFormatError` naming the file, the page and what is wrong. LMDB's
``mdb.c`` is the reference for the layout.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from .errors import AccessError, LmdbioError
from .layout import (F_BIGDATA, F_DUPDATA, F_SUBDATA, FORMATS, MAGIC, MAX_DEPTH, P_BRANCH, P_DIRTY,
                     P_INVALID, P_LEAF, P_LEAF2, P_META, P_OVERFLOW, P_SUBP, LeafNodes, MetaInfo,
                     PageHeader, page_error, past_end)
from .pages import (branch_children, branch_keys, check_page, leaf_keys, leaf_nodes, leaf_table,
                    node_pointers, overflow_pages, page_header, pread_exact, read_page, read_pages)

__all__ = [
    "MAGIC", "P_BRANCH", "P_LEAF", "P_OVERFLOW", "P_META", "P_LEAF2", "P_SUBP",
    "F_BIGDATA", "F_SUBDATA", "F_DUPDATA", "P_INVALID",
    "MetaInfo", "PageHeader", "LeafNodes",
    "db_file", "open_readonly", "read_meta", "parse_meta", "meta_candidates",
    "page_header", "check_page", "node_pointers", "branch_children", "branch_keys",
    "leaf_table", "leaf_nodes", "leaf_keys", "validate_meta",
    "overflow_pages", "read_page", "read_pages", "page_error", "past_end",
    "P_DIRTY", "MAX_DEPTH", "FORMATS", "pread_exact",
]

_META_READ = 512
_DB = struct.Struct("<IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow, entries, root
# REVERSEKEY | DUPSORT | INTEGERKEY | DUPFIXED | INTEGERDUP | REVERSEDUP: what a DB record may hold.
_PERSISTENT_DB_FLAGS = 0x7E
_DUPSORT_ONLY = 0x70   # DUPFIXED | INTEGERDUP | REVERSEDUP
# No real map is larger (64 TiB); LMDB would fail to map one.
_MAX_MAP = 1 << 46


_PASS = "pass an LMDB directory or its data.mdb file"
# What a path is when it is neither a directory nor a regular file (from its st_mode).
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


def _denied(path, doing: str) -> AccessError:
    """The error for a path this process may not use, saying what to check."""
    return AccessError(f"{path}: permission denied {doing} (uid {os.geteuid()}); check that this "
                       "user may read it: its mode, owner and ACLs, and execute permission on "
                       "every directory above it")


def open_readonly(path) -> int:
    """``os.open(path, O_RDONLY)``, raising :class:`AccessError` when the file may not be read."""
    try:
        return os.open(path, os.O_RDONLY)
    except PermissionError:
        raise _denied(path, "opening it for reading") from None


def _stat(p: Path, missing: str, denied: tuple | None = None) -> os.stat_result:
    """``os.stat`` of ``p`` (following links), or an error that says what is there instead.

    Args:
        missing: the message when nothing is at ``p``.
        denied: (path, doing) to name in the AccessError when the lookup is refused.
    """
    try:
        return os.stat(p)
    except PermissionError:
        raise _denied(*(denied or (p, "looking it up"))) from None
    except NotADirectoryError:
        up = next((a for a in reversed(p.parents) if a.exists() and not a.is_dir()), p.parent)
        raise LmdbioError(f"{p} cannot exist: {up} is a file, not a directory; {_PASS}") from None
    except FileNotFoundError:
        if os.path.islink(p):
            raise LmdbioError(f"{p} is a symbolic link to {os.readlink(p)}, which does not exist; "
                              f"fix the link or {_PASS}") from None
        raise LmdbioError(missing) from None
    except OSError as exc:   # ELOOP (a symlink loop), ENAMETOOLONG, EIO, ...
        raise LmdbioError(f"{p}: cannot look it up ({exc.strerror}); {_PASS}") from None


def _regular(p: Path, st: os.stat_result) -> Path:
    """``p`` when it is a regular file this process may open; else an error naming what it is."""
    if stat.S_ISREG(st.st_mode):
        # os.access, not an open: non-readers of a Reader never open the file (a test checks it).
        if not os.access(p, os.R_OK):
            raise _denied(p, "opening it for reading")
        return p
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "no regular file")
    raise LmdbioError(f"{p} is {kind}, not an LMDB data file; lmdbio reads pages at random "
                      f"offsets of a regular file: {_PASS}")


def db_file(path: str | os.PathLike) -> Path:
    """The data.mdb of an LMDB directory, or ``path`` itself when it is a file.

    Raises:
        LmdbioError saying what the path is when it is no LMDB file (missing, a device,
        a FIFO, a dangling symlink, ...); AccessError when it may not be read.
    """
    p = Path(path)
    st = _stat(p, f"{p} does not exist; {_PASS}")
    if not stat.S_ISDIR(st.st_mode):
        return _regular(p, st)
    f = p / "data.mdb"
    # Looking up an entry needs execute permission on the directory itself.
    st = _stat(f, f"{p} is a directory without data.mdb; {_PASS}",
               denied=(p, "looking inside the directory"))
    return _regular(f, st)


def _open(path_or_fd, name: str | None = None) -> tuple[int, bool, str]:
    if isinstance(path_or_fd, int):
        return path_or_fd, False, name or f"<fd {path_or_fd}>"
    f = db_file(path_or_fd)
    return open_readonly(f), True, str(f)


def _first_magic(head: bytes) -> int | None:
    """Where py-lmdb finds the meta magic: the first 4-byte-aligned hit in the first 64 bytes.

    py-lmdb picks the LMDB engine (0.9 or 1.0) from the data version next to it.
    """
    for off in range(0, min(len(head), 64) - 7, 4):
        if struct.unpack_from("<I", head, off)[0] == MAGIC:
            return off
    return None


def _detect_format(head: bytes, path) -> int:
    """Format version from the first bytes of page 0; rejects 32-bit and big-endian files."""
    for version, (hdr, _) in FORMATS.items():
        if len(head) >= hdr + 8:
            magic, ver = struct.unpack_from("<II", head, hdr)
            if magic == MAGIC and ver == version:
                first = _first_magic(head)
                if first != hdr:
                    # py-lmdb would pick its engine from the stray magic and LMDB would
                    # then misread the file: refuse it the same way for every reader.
                    raise page_error(path, 0, f"page 0 header is damaged (a stray meta magic at byte "
                                         f"{first}, before the meta record at byte {hdr})")
                return version
    # A 32-bit build has a 12-byte header (4-byte pgno); a big-endian one stores the magic reversed.
    for off in (12, 16, 24, 20):
        if len(head) >= off + 8:
            if struct.unpack_from(">I", head, off)[0] == MAGIC:
                raise page_error(path, 0, "big-endian LMDB file; only 64-bit little-endian files are "
                                     "supported (convert it with mdb_dump/mdb_load on this machine)")
            if off == 12 and struct.unpack_from("<I", head, off)[0] == MAGIC:
                raise page_error(path, 0, "32-bit LMDB file (12-byte page header); only 64-bit files are "
                                     "supported (convert it with mdb_dump/mdb_load on this machine)")
    for hdr, _ in FORMATS.values():
        if len(head) >= hdr + 8:
            magic, ver = struct.unpack_from("<II", head, hdr)
            if magic == MAGIC:
                raise page_error(path, 0, f"unsupported LMDB data version {ver} (expected 1 or 3)")
    raise page_error(path, 0, f"not an LMDB file: no meta magic {MAGIC:#x} in the first page")


def parse_meta(page: bytes, *, format_version: int, pgno: int, path="data.mdb") -> dict:
    """Decode one meta page (its first bytes suffice) into a dict of raw fields."""
    hdr, _ = FORMATS[format_version]
    if len(page) < hdr + 136:
        raise page_error(path, pgno, "meta page is truncated")
    page_pgno = struct.unpack_from("<Q", page, 0)[0]
    flags = struct.unpack_from("<H", page, hdr - 6)[0]
    magic, ver, address, mapsize = struct.unpack_from("<IIQQ", page, hdr)
    if magic != MAGIC:
        raise page_error(path, pgno, f"wrong magic {magic:#x} in meta page (expected {MAGIC:#x})")
    if ver != format_version:
        raise page_error(path, pgno, f"meta page has data version {ver}, page 0 has {format_version}")
    if page_pgno != pgno or not flags & P_META:
        raise page_error(path, pgno, f"meta page header is damaged (pgno {page_pgno}, flags {flags:#x})")
    free = _DB.unpack_from(page, hdr + 24)
    main = _DB.unpack_from(page, hdr + 72)
    last_pgno, txnid = struct.unpack_from("<QQ", page, hdr + 120)
    return {"psize": free[0], "mapsize": mapsize, "last_pgno": last_pgno, "txnid": txnid,
            "free_root": free[7], "free_pages": free[3] + free[4] + free[5],
            "free_flags": free[1], "free_depth": free[2], "db_pad": main[0],
            "db_flags": main[1], "depth": main[2], "branch_pages": main[3], "leaf_pages": main[4],
            "overflow_pages": main[5], "entries": main[6], "root": main[7]}


def meta_candidates(path_or_fd, *, name: str | None = None) -> list[MetaInfo]:
    """Both meta pages of the file, validated, as MetaInfo (page 0 first).

    ``name`` names an open file descriptor in error messages.
    """
    fd, own, name = _open(path_or_fd, name)
    try:
        file_size = os.fstat(fd).st_size
        head = os.pread(fd, _META_READ, 0)
        if len(head) < 64:
            raise page_error(name, None, f"file is {file_size} bytes, too short for an LMDB meta page "
                                    "(truncated or not an LMDB file)")
        version = _detect_format(head, name)
        hdr, _ = FORMATS[version]
        m0 = parse_meta(head, format_version=version, pgno=0, path=name)
        psize = m0["psize"]
        if psize < 512 or psize > 65536 or psize & (psize - 1):
            raise page_error(name, 0, f"page size {psize} in the free DB record is not a power of two "
                                 "in 512..65536")
        if file_size < 2 * psize:
            raise page_error(name, 1, f"file is {file_size} bytes, shorter than two {psize}-byte meta "
                                 "pages; the file is truncated")
        m1 = parse_meta(pread_exact(fd, _META_READ, psize, name, 1), format_version=version,
                        pgno=1, path=name)
        # A writer extends the file before it writes a meta naming the new pages: the size
        # taken after reading the metas covers them.
        file_size = os.fstat(fd).st_size
        out = []
        for i, m in enumerate((m0, m1)):
            out.append(_meta_info(m, i, version, hdr, psize, file_size, name))
        return out
    finally:
        if own:
            os.close(fd)


def _meta_info(m: dict, page: int, version: int, hdr: int, psize: int, file_size: int,
               name: str) -> MetaInfo:
    if m["psize"] != psize:
        raise page_error(name, page, "page size differs between meta pages")
    root = None if m["root"] == P_INVALID else m["root"]
    return MetaInfo(format_version=version, psize=psize, header_size=hdr, txnid=m["txnid"],
                    last_pgno=m["last_pgno"], root=root, depth=m["depth"], entries=m["entries"],
                    branch_pages=m["branch_pages"], leaf_pages=m["leaf_pages"],
                    overflow_pages=m["overflow_pages"], mapsize=m["mapsize"],
                    file_size=file_size, db_flags=m["db_flags"], meta_page=page,
                    path=name, free_root=None if m["free_root"] == P_INVALID else m["free_root"],
                    free_pages=m["free_pages"], free_flags=m["free_flags"],
                    free_depth=m["free_depth"], db_pad=m["db_pad"])


def validate_meta(meta: MetaInfo) -> MetaInfo:
    """Check a meta record against the file size and itself; returns it unchanged."""
    name, page = meta.path, meta.meta_page
    file_pages = meta.file_size // meta.psize
    if meta.last_pgno < 1 or meta.last_pgno >= 1 << 48:
        raise page_error(name, page, f"last page number {meta.last_pgno} is impossible")
    if meta.txnid >= 1 << 63:
        raise page_error(name, page, f"transaction id {meta.txnid} is impossible (damaged meta page)")
    if meta.last_pgno >= file_pages:
        # LMDB never writes pages a transaction allocated and freed again, so a file being
        # written (or left so) may end before its last page; the walk checks that every
        # page the tree uses is in the file. Past the map, though, the page cannot exist.
        if meta.last_pgno >= max(file_pages, meta.mapsize // meta.psize) or \
                (meta.last_pgno + 1) * meta.psize > _MAX_MAP:
            raise page_error(name, page, f"meta says the last page is {meta.last_pgno} but the file has "
                                    f"only {file_pages} pages of {meta.psize} bytes (map size "
                                    f"{meta.mapsize}); the file is truncated or the meta damaged")
    # What py-lmdb's LMDB checks when a transaction begins (so it never refuses a file we accept).
    for which, flags in (("free-page", meta.free_flags), ("main", meta.db_flags)):
        if flags & _DUPSORT_ONLY and not flags & 0x04:
            raise page_error(name, page, f"{which} DB flags {flags:#x} need DUPSORT (damaged meta page)")
    if meta.db_pad > meta.psize - meta.header_size:
        raise page_error(name, page, f"main DB key size field {meta.db_pad} is larger than a page "
                                "(damaged meta page)")
    if meta.free_depth > MAX_DEPTH:
        raise page_error(name, page, f"free-page DB depth {meta.free_depth} is impossible (0..{MAX_DEPTH})")
    # LMDB 1.0 refuses to open a file whose DB roots or page counts do not fit in it.
    room = min(meta.last_pgno + 1, file_pages)
    if meta.free_root is not None and not 2 <= meta.free_root < room:
        if 2 <= meta.free_root <= meta.last_pgno:
            raise page_error(name, page, f"free-page DB root {meta.free_root} lies past the end of the "
                                    f"file ({file_pages} pages of {meta.psize} bytes); the file is "
                                    "truncated")
        raise page_error(name, page, f"free-page DB root {meta.free_root} is outside pages "
                                f"2..{meta.last_pgno}")
    used = ((meta.free_pages if meta.free_root is not None else 0)
            + (meta.branch_pages + meta.leaf_pages + meta.overflow_pages
               if meta.root is not None else 0))
    if used + 2 > room:
        if used + 2 <= meta.last_pgno + 1:
            raise page_error(name, page, f"the free-page and main DBs use {used} pages but the file has "
                                    f"only {file_pages} pages of {meta.psize} bytes; the file is "
                                    "truncated")
        raise page_error(name, page, f"the free-page and main DBs claim {used} pages, more than the "
                                f"{room - 2} pages after the meta pages")
    if meta.root is None:
        if meta.entries or meta.depth:
            raise page_error(name, page, f"main DB is empty (no root) but meta says {meta.entries} "
                                    f"entries, depth {meta.depth}")
        return meta
    if meta.root < 2 or meta.root > meta.last_pgno:
        raise page_error(name, page, f"root page {meta.root} is outside pages 2..{meta.last_pgno} "
                                "(past the end of the file or a meta page)")
    if not 1 <= meta.depth <= MAX_DEPTH:
        raise page_error(name, page, f"tree depth {meta.depth} is impossible (1..{MAX_DEPTH})")
    if meta.leaf_pages < 1 or meta.branch_pages + meta.leaf_pages + meta.overflow_pages > meta.last_pgno:
        raise page_error(name, page, f"page counts (branch {meta.branch_pages}, leaf {meta.leaf_pages}, "
                                f"overflow {meta.overflow_pages}) do not fit in {meta.last_pgno + 1} pages")
    if meta.depth > 1 and meta.branch_pages < meta.depth - 1:
        raise page_error(name, page, f"depth {meta.depth} needs at least {meta.depth - 1} branch pages, "
                                f"meta says {meta.branch_pages}")
    if meta.db_flags & 0x04:
        raise page_error(name, page, "main DB is DUPSORT; lmdbio reads plain key/value databases only")
    if meta.db_flags & ~_PERSISTENT_DB_FLAGS:
        raise page_error(name, page, f"main DB flags {meta.db_flags:#x} have bits LMDB never writes "
                                "(damaged meta page)")
    return meta


def read_meta(path_or_fd, *, name: str | None = None) -> MetaInfo:
    """The current meta (larger txnid of pages 0 and 1) of a data.mdb, validated.

    Args:
        path_or_fd: LMDB directory, data.mdb path, or an open file descriptor.
        name: the file's name for error messages when passing a descriptor.
    """
    m0, m1 = meta_candidates(path_or_fd, name=name)
    cur = m1 if m1.txnid > m0.txnid else m0
    return validate_meta(cur)
