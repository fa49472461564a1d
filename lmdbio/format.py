"""LMDB on-disk format: meta, branch, leaf and overflow pages of both formats (0.9 and 1.0).

Pure functions over bytes, plus a few helpers that fetch pages with
``os.pread``. Every problem with a file is one :class:`LmdbFormatError`
naming the file, the page and what is wrong. See /work/shared/LMDB-FORMAT.md
and LMDB's ``mdb.c`` for the layout.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import AccessError, LmdbFormatError, LmdbioError

__all__ = [
    "MAGIC", "P_BRANCH", "P_LEAF", "P_OVERFLOW", "P_META", "P_LEAF2", "P_SUBP",
    "F_BIGDATA", "F_SUBDATA", "F_DUPDATA", "P_INVALID",
    "MetaInfo", "PageHeader", "LeafNodes",
    "db_file", "open_readonly", "read_meta", "parse_meta", "meta_candidates",
    "page_header", "check_page", "node_pointers", "branch_children", "branch_keys",
    "leaf_table", "leaf_nodes", "leaf_keys", "validate_meta",
    "overflow_pages", "read_page", "read_pages", "page_error", "past_end",
]

MAGIC = 0xBEEFC0DE
P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_DIRTY, P_LEAF2, P_SUBP = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
P_INVALID = 0xFFFFFFFFFFFFFFFF
# LMDB's cursor stack is 32 deep; no real tree comes close.
MAX_DEPTH = 32

# format_version -> (page header size, PAGEBASE). 0.9 writes data version 1,
# 1.0 writes data version 3 with a 24-byte header (pgno, txnid, pad, flags, lower, upper).
_FORMATS = {1: (16, 0), 3: (24, 24)}
_FORMAT_NAMES = {1: "0.9", 3: "1.0"}
_META_READ = 512
_DB = struct.Struct("<IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow, entries, root
# REVERSEKEY | DUPSORT | INTEGERKEY | DUPFIXED | INTEGERDUP | REVERSEDUP: what a DB record may hold.
_PERSISTENT_DB_FLAGS = 0x7E
_DUPSORT_ONLY = 0x70   # DUPFIXED | INTEGERDUP | REVERSEDUP
# No real map is larger (64 TiB); LMDB would fail to map one.
_MAX_MAP = 1 << 46


@dataclass(frozen=True)
class MetaInfo:
    """The current meta page of a data.mdb: format, page size and main DB record."""

    format_version: int      # 1 (LMDB 0.9 files) or 3 (LMDB 1.0 files)
    psize: int
    header_size: int         # page header bytes: 16 (0.9) or 24 (1.0)
    txnid: int
    last_pgno: int
    root: int | None         # root page of the main DB; None when the DB is empty
    depth: int
    entries: int
    branch_pages: int
    leaf_pages: int
    overflow_pages: int
    mapsize: int
    file_size: int
    db_flags: int = 0        # main DB flags (DUPSORT 0x04, INTEGERKEY 0x08, ...)
    meta_page: int = 0       # which meta page (0 or 1) is current
    path: str = ""           # the data.mdb this came from (for error messages)
    free_root: int | None = None  # root page of the free-page DB; None when it is empty
    free_pages: int = 0      # branch + leaf + overflow pages of the free-page DB
    free_flags: int = 0      # free-page DB flags (INTEGERKEY)
    free_depth: int = 0
    db_pad: int = 0          # main DB md_pad (LEAF2 key size; 0 for plain DBs)

    @property
    def format_name(self) -> str:
        """``"0.9"`` or ``"1.0"``."""
        return _FORMAT_NAMES[self.format_version]

    @property
    def pagebase(self) -> int:
        """Where node offsets and lower/upper count from: 0 (0.9) or 24 (1.0)."""
        return _FORMATS[self.format_version][1]

    @property
    def file_pages(self) -> int:
        return self.file_size // self.psize

    def identity(self) -> dict:
        """The fields that change when the database changes (for staleness checks)."""
        return {"format_version": self.format_version, "psize": self.psize, "txnid": self.txnid,
                "last_pgno": self.last_pgno, "file_size": self.file_size}


@dataclass(frozen=True)
class PageHeader:
    """The fixed header of one page."""

    pgno: int
    flags: int
    lower: int    # for overflow pages: low half of the page count
    upper: int    # for overflow pages: high half of the page count


@dataclass(frozen=True)
class LeafNodes:
    """The node table of one leaf page, decoded into arrays (one entry per node)."""

    pos: np.ndarray        # int64 node start within the page
    ksize: np.ndarray      # int64 key size
    flags: np.ndarray      # int64 node flags
    size: np.ndarray       # int64 value size
    data_pos: np.ndarray   # int64 start of the node's data field within the page
    ov_pgno: np.ndarray    # int64 first overflow page of BIGDATA nodes, -1 elsewhere


def page_error(path, pgno, problem: str) -> LmdbFormatError:
    where = f"page {pgno}" if pgno is not None else "file"
    return LmdbFormatError(f"{path}: {where}: {problem}")


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


def _pread_exact(fd: int, n: int, off: int, path, pgno) -> bytes:
    buf = os.pread(fd, n, off)
    if len(buf) != n:
        raise page_error(path, pgno, f"file ends inside the page (wanted {n} bytes at offset {off}, "
                                f"got {len(buf)}); the file is truncated")
    return buf


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
    for version, (hdr, _) in _FORMATS.items():
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
    for version, (hdr, _) in _FORMATS.items():
        if len(head) >= hdr + 8:
            magic, ver = struct.unpack_from("<II", head, hdr)
            if magic == MAGIC:
                raise page_error(path, 0, f"unsupported LMDB data version {ver} (expected 1 or 3)")
    raise page_error(path, 0, f"not an LMDB file: no meta magic {MAGIC:#x} in the first page")


def parse_meta(page: bytes, *, format_version: int, pgno: int, path="data.mdb") -> dict:
    """Decode one meta page (its first bytes suffice) into a dict of raw fields."""
    hdr, _ = _FORMATS[format_version]
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
        hdr, _ = _FORMATS[version]
        m0 = parse_meta(head, format_version=version, pgno=0, path=name)
        psize = m0["psize"]
        if psize < 512 or psize > 65536 or psize & (psize - 1):
            raise page_error(name, 0, f"page size {psize} in the free DB record is not a power of two "
                                 "in 512..65536")
        if file_size < 2 * psize:
            raise page_error(name, 1, f"file is {file_size} bytes, shorter than two {psize}-byte meta "
                                 "pages; the file is truncated")
        m1 = parse_meta(_pread_exact(fd, _META_READ, psize, name, 1), format_version=version,
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


# ---------------------------------------------------------------- pages

def past_end(meta: MetaInfo, last: int | None = None) -> str:
    """The message for a page the tree uses that lies past the end of the file."""
    what = "the page lies" if last is None else f"page {last} lies"
    return (f"{what} past the end of the file ({meta.file_pages} pages of {meta.psize} bytes); "
            "the file is truncated")


def read_page(fd: int, meta: MetaInfo, pgno: int) -> bytes:
    """One page by pread; page numbers are checked against the meta and the file first."""
    if pgno < 2 or pgno > meta.last_pgno:
        raise page_error(meta.path, pgno, f"page number is outside 2..{meta.last_pgno}")
    if pgno >= meta.file_pages:
        raise page_error(meta.path, pgno, past_end(meta))
    return _pread_exact(fd, meta.psize, pgno * meta.psize, meta.path, pgno)


def read_pages(fd: int, meta: MetaInfo, pgno: int, count: int) -> bytes:
    """``count`` consecutive pages from ``pgno`` in one pread."""
    last = pgno + count - 1
    if pgno < 2 or last > meta.last_pgno:
        raise page_error(meta.path, pgno, f"pages {pgno}..{last} are outside 2..{meta.last_pgno}")
    if last >= meta.file_pages:
        raise page_error(meta.path, pgno, past_end(meta, last))
    return _pread_exact(fd, meta.psize * count, pgno * meta.psize, meta.path, pgno)


def page_header(page: bytes, header_size: int) -> PageHeader:
    """Decode the fixed header of a page (either format)."""
    pgno = struct.unpack_from("<Q", page, 0)[0]
    _pad, flags, lower, upper = struct.unpack_from("<HHHH", page, header_size - 8)
    return PageHeader(pgno, flags, lower, upper)


def check_page(page: bytes, meta: MetaInfo, pgno: int, want_flag: int) -> PageHeader:
    """Header of a branch/leaf page, checked: own pgno, type, lower/upper bounds."""
    h = page_header(page, meta.header_size)
    kind = {P_BRANCH: "branch", P_LEAF: "leaf", P_OVERFLOW: "overflow"}[want_flag]
    if h.pgno != pgno:
        raise page_error(meta.path, pgno, f"page header says pgno {h.pgno} (zeroed or misplaced page)")
    if h.flags & (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP) != want_flag:
        raise page_error(meta.path, pgno, f"expected a {kind} page, flags are {h.flags:#x}")
    if meta.format_version == 1 and h.flags & P_DIRTY:
        raise page_error(meta.path, pgno, f"page has the DIRTY flag ({h.flags:#x}), which a committed "
                                     "page never has")
    if meta.format_version == 3:
        txnid = struct.unpack_from("<Q", page, 8)[0]
        if txnid > meta.txnid:
            # LMDB 1.0 takes such a page for one being written, and refuses it.
            raise page_error(meta.path, pgno, f"page header says txnid {txnid}, newer than the "
                                         f"database's {meta.txnid}")
    if want_flag != P_OVERFLOW:
        base = meta.pagebase
        if (h.lower & 1 or h.lower < meta.header_size - base or h.lower > h.upper
                or h.upper + base > meta.psize):
            raise page_error(meta.path, pgno, f"bad node table bounds lower={h.lower} upper={h.upper}")
    return h


def node_pointers(page: bytes, meta: MetaInfo, pgno: int, h: PageHeader) -> np.ndarray:
    """Node start offsets within the page (int64), checked to lie inside the node area."""
    base = meta.pagebase
    n = (h.lower - (meta.header_size - base)) // 2
    ptr = np.frombuffer(page, dtype="<u2", count=n, offset=meta.header_size).astype(np.int64) + base
    if n:
        lo, hi = h.upper + base, meta.psize - 8
        bad = (ptr < lo) | (ptr > hi) | (ptr & 1).astype(bool)
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, pgno, f"node {i} offset {int(ptr[i])} is outside the node area "
                                         f"{lo}..{hi} or odd")
    return ptr


def _u16_fields(page: bytes, ptr: np.ndarray) -> tuple[np.ndarray, ...]:
    words = np.frombuffer(page, dtype="<u2")
    w = ptr // 2
    return (words[w].astype(np.int64), words[w + 1].astype(np.int64),
            words[w + 2].astype(np.int64), words[w + 3].astype(np.int64))


def branch_children(page: bytes, meta: MetaInfo, pgno: int) -> np.ndarray:
    """Child page numbers (int64) of a branch page, in key order."""
    h = check_page(page, meta, pgno, P_BRANCH)
    ptr = node_pointers(page, meta, pgno, h)
    if len(ptr) < 2:
        # LMDB merges a branch page that falls under two keys, and asserts on one it meets.
        raise page_error(meta.path, pgno, f"branch page has {len(ptr)} node(s); every branch page of "
                                     "an LMDB main DB has at least 2")
    lo, hi, fl, ksize = _u16_fields(page, ptr)
    end = ptr + 8 + ksize
    if (end > meta.psize).any():
        i = int(np.argmax(end > meta.psize))
        raise page_error(meta.path, pgno, f"branch node {i} key of {int(ksize[i])} bytes runs past the page end")
    return lo | (hi << 16) | (fl << 32)


def branch_keys(page: bytes, meta: MetaInfo, pgno: int) -> list[bytes]:
    """Separator keys of a branch page (the first is empty)."""
    h = check_page(page, meta, pgno, P_BRANCH)
    ptr = node_pointers(page, meta, pgno, h)
    _, _, _, ksize = _u16_fields(page, ptr)
    return [bytes(page[p + 8:p + 8 + k]) for p, k in zip(ptr.tolist(), ksize.tolist())]


def leaf_table(pages: np.ndarray, pgnos: np.ndarray, meta: MetaInfo) -> tuple[LeafNodes, np.ndarray]:
    """Decode the node tables of many leaf pages at once with numpy.

    Args:
        pages: uint8 array (n_pages, psize), the raw leaf pages.
        pgnos: int64 page numbers the pages were read from.
        meta: the file's meta (format, page size).
    Returns:
        (nodes of all pages concatenated in page order, int64 node count per page).
    Raises:
        LmdbFormatError naming the first bad page: wrong pgno or type, node table
        bounds, node offsets or sizes past the page end, DUPSORT nodes.
    """
    hdr, base, psize = meta.header_size, meta.pagebase, meta.psize
    npg = pages.shape[0]
    words = pages.view("<u2")
    own = np.ascontiguousarray(pages[:, :8]).view("<u8").ravel()
    flags, lower, upper = (words[:, (hdr - 6) // 2].astype(np.int64),
                           words[:, (hdr - 4) // 2].astype(np.int64),
                           words[:, (hdr - 2) // 2].astype(np.int64))
    kinds = flags & (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP)
    bad = own != pgnos.astype(np.uint64)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"page header says pgno {int(own[i])} "
                                               "(zeroed or misplaced page)")
    bad = kinds != P_LEAF
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"expected a leaf page, flags are {int(flags[i]):#x}")
    if meta.format_version == 1:
        bad = (flags & P_DIRTY) != 0
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, int(pgnos[i]), f"page has the DIRTY flag ({int(flags[i]):#x}), "
                                                   "which a committed page never has")
    if meta.format_version == 3:
        txnids = np.ascontiguousarray(pages[:, 8:16]).view("<u8").ravel()
        bad = txnids > meta.txnid
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, int(pgnos[i]), f"page header says txnid {int(txnids[i])}, newer "
                                                   f"than the database's {meta.txnid}")
    bad = (lower & 1).astype(bool) | (lower < hdr - base) | (lower > upper) | (upper + base > psize)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"bad node table bounds lower={int(lower[i])} "
                                               f"upper={int(upper[i])}")
    counts = (lower - (hdr - base)) // 2
    bad = counts == 0
    if bad.any():
        # LMDB never keeps an empty leaf in a tree (an empty DB has no root), and its
        # cursor would read node 0 of one anyway.
        raise page_error(meta.path, int(pgnos[int(np.argmax(bad))]), "leaf page has no nodes")
    total = int(counts.sum())
    page_of = np.repeat(np.arange(npg, dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    slot = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    ptr = words[page_of, hdr // 2 + slot].astype(np.int64) + base
    bad = (ptr < np.repeat(upper, counts) + base) | (ptr > psize - 8) | (ptr & 1).astype(bool)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[page_of[i]]), f"node {int(slot[i])} offset {int(ptr[i])} "
                                                        "is outside the node area or odd")
    flat = words.reshape(-1)
    w = page_of * (psize // 2) + ptr // 2
    lo, hi, fl, ksize = (flat[w].astype(np.int64), flat[w + 1].astype(np.int64),
                         flat[w + 2].astype(np.int64), flat[w + 3].astype(np.int64))
    size = lo | (hi << 16)
    kend = ptr + 8 + ksize
    data_pos = kend + (kend & 1) if meta.format_version == 3 else kend
    if (fl & F_DUPDATA).any():
        i = int(np.argmax((fl & F_DUPDATA) != 0))
        raise page_error(meta.path, int(pgnos[page_of[i]]), "DUPSORT node in the main DB; lmdbio reads "
                                                        "plain key/value databases only")
    if (fl & F_SUBDATA).any():
        raise _subdatabases(pages, page_of, ptr, ksize, fl, pgnos, meta)
    big = (fl & F_BIGDATA) != 0
    field = np.where(big, 8 if meta.format_version == 1 else 24, size)
    bad = data_pos + field > psize
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[page_of[i]]),
                    f"leaf node {int(slot[i])} (key {int(ksize[i])} bytes, data {int(field[i])} "
                    f"bytes at {int(data_pos[i])}) runs past the page end")
    ov = np.full(total, -1, dtype=np.int64)
    if big.any():
        at = page_of[big] * psize + data_pos[big]
        raw = pages.reshape(-1)[at[:, None] + np.arange(8)]
        pg = np.ascontiguousarray(raw).view("<u8").ravel()
        bad = (pg < 2) | (pg > meta.last_pgno)
        if bad.any():
            i = int(np.flatnonzero(big)[np.argmax(bad)])
            raise page_error(meta.path, int(pgnos[page_of[i]]),
                        f"leaf node {int(slot[i])}: overflow value at page {int(pg[np.argmax(bad)])} "
                        f"is outside 2..{meta.last_pgno}")
        ov[big] = pg.astype(np.int64)
    return LeafNodes(ptr, ksize, fl, size, data_pos, ov), counts


def _subdatabases(pages, page_of, ptr, ksize, fl, pgnos, meta) -> LmdbFormatError:
    """The error for a main DB that holds named sub-databases (nodes flagged SUBDATA).

    Such a node's value is the sub-database's 48-byte descriptor, not a record:
    reading it as one would deliver the descriptor. A main DB with both plain
    records and named sub-databases is refused too: which of them are "the
    dataset" is not ours to guess.
    """
    sub = np.flatnonzero((fl & F_SUBDATA) != 0)
    flat = pages.reshape(-1)
    psize = pages.shape[1]
    names = []
    for i in sub[:8].tolist():
        at = int(page_of[i]) * psize + int(ptr[i]) + 8
        names.append(bytes(flat[at:at + int(ksize[i])]).decode("utf-8", "backslashreplace"))
    more = f" and {len(sub) - len(names)} more" if len(sub) > len(names) else ""
    plain = len(fl) - len(sub)
    also = (f"; the same leaf pages also hold {plain} plain record(s), refused with them"
            if plain else "")
    return page_error(meta.path, int(pgnos[page_of[sub[0]]]),
                 f"the main database holds named sub-database(s) "
                 f"{', '.join(map(repr, names))}{more}{also}. lmdbio reads the records of the "
                 "main (unnamed) database only, and would deliver each sub-database's 48-byte "
                 "descriptor as a record. Write the records into the main database (py-lmdb: "
                 "txn.put(key, value) without db=, as Caffe's convert_imageset does), or copy "
                 "the named database's records into the main database of a new file")


def leaf_nodes(page: bytes, meta: MetaInfo, pgno: int) -> LeafNodes:
    """Decode one leaf page's node table (see :func:`leaf_table`)."""
    arr = np.frombuffer(page, dtype=np.uint8).reshape(1, -1)
    nodes, _ = leaf_table(arr, np.array([pgno], dtype=np.int64), meta)
    return nodes


def leaf_keys(page: bytes, nodes: LeafNodes, start: int = 0, stop: int | None = None) -> list[bytes]:
    """Keys of nodes [start, stop) of a decoded leaf page."""
    pos = nodes.pos[start:stop].tolist()
    ks = nodes.ksize[start:stop].tolist()
    return [bytes(page[p + 8:p + 8 + k]) for p, k in zip(pos, ks)]


def overflow_pages(size, header_size: int, psize: int):
    """Pages an overflow value of ``size`` bytes occupies (LMDB's OVPAGES); works on arrays."""
    return (header_size - 1 + size) // psize + 1
