"""Helpers for the format/index tests: small LMDBs written by py-lmdb, truth from its cursor, damage."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import lmdb

LIB = {"0.9": 0, "1.0": 1}
HDR = {"0.9": 16, "1.0": 24}


def make_db(path, items, *, fmt: str = "0.9", commit_every: int | None = None,
            deletes=(), map_size: int = 1 << 28) -> Path:
    """Write ``items`` (key, value) in the given order, committing every ``commit_every``;
    then delete the keys in ``deletes`` (one more transaction)."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    env = lmdb.open(str(path), map_size=map_size, lib_version=LIB[fmt])
    try:
        txn = env.begin(write=True)
        for i, (k, v) in enumerate(items, 1):
            txn.put(k, v)
            if commit_every and i % commit_every == 0:
                txn.commit()
                txn = env.begin(write=True)
        txn.commit()
        if deletes:
            with env.begin(write=True) as txn:
                for k in deletes:
                    txn.delete(k)
    finally:
        env.close()
    return path


def lmdb_items(path, fmt: str = "0.9") -> list[tuple[bytes, bytes]]:
    """All records in cursor order, as py-lmdb reads them (the truth)."""
    env = lmdb.open(str(path), readonly=True, lock=False, lib_version=LIB[fmt])
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    finally:
        env.close()


def page_size(path) -> int:
    """Page size recorded in a data.mdb's first meta page."""
    with open(path, "rb") as f:
        head = f.read(128)
    for hdr in (16, 24):
        if struct.unpack_from("<I", head, hdr)[0] == 0xBEEFC0DE:
            return struct.unpack_from("<I", head, hdr + 24)[0]
    raise ValueError("not an LMDB file")


def copy_db(src, dst) -> Path:
    """Copy an LMDB dir's data.mdb to a fresh dir; returns the new data.mdb path."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(src) / "data.mdb", dst / "data.mdb")
    return dst / "data.mdb"


def patch(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def read_at(path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def have_mdb_tools() -> bool:
    return shutil.which("mdb_dump") is not None and shutil.which("mdb_load") is not None


def ensure_mdb_tools() -> str | None:
    """Install Debian's lmdb-utils when missing and we are root; returns a skip reason or None."""
    if have_mdb_tools():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "mdb_dump/mdb_load missing and cannot install lmdb-utils (not root or no apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "lmdb-utils"], capture_output=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "lmdb-utils"], capture_output=True, env=env)
    if have_mdb_tools():
        return None
    return f"could not install lmdb-utils: {r.stderr.decode(errors='replace')[-300:]}"


# ---------------------------------------------------------------- fuzzing: layout and mutations

def layout(path) -> dict:
    """Where the structure of an LMDB lies, for aiming mutations (JSON-friendly).

    Keys: psize, hdr, pagebase, version, pages (in the file), meta (current meta
    page), branch, leaf (page numbers), overflow (first pages of overflow values).
    """
    from lmdbio import format as fmt
    from lmdbio.recordindex import build_index

    idx = build_index(path)
    m = idx.meta
    data = Path(idx.path).read_bytes()
    branch, level = [], [m.root] if m.root is not None else []
    for _ in range(max(0, m.depth - 1)):
        branch += level
        nxt = []
        for pg in level:
            nxt += fmt.branch_children(data[pg * m.psize:(pg + 1) * m.psize], m, pg).tolist()
        level = nxt
    big = idx.overflow
    ov = sorted({int(o) // m.psize for o in idx.offsets[big].tolist()})
    return {"psize": m.psize, "hdr": m.header_size, "pagebase": m.pagebase,
            "version": m.format_version, "pages": m.file_pages, "meta": m.meta_page,
            "branch": [int(p) for p in branch], "leaf": [int(p) for p in idx.leaf_pgnos],
            "overflow": ov, "entries": int(m.entries)}


def _interesting_pgno(r, lay) -> int:
    """A page number that is wrong in an interesting way."""
    n = lay["pages"]
    pools = [lay["branch"], lay["leaf"], lay["overflow"], [0, 1], [n - 1, n, n + 1],
             [2 ** 32 - 1, 2 ** 47, 2 ** 48 - 1, 2 ** 64 - 1]]
    pool = r.choice([p for p in pools if p])
    return r.choice(pool) if r.random() < 0.8 else r.randrange(0, n + 8)


def _node_offsets(buf, lay, pgno) -> list[int]:
    """File offsets of the node headers of a branch/leaf page (as the page says, bounded)."""
    ps, hdr, base = lay["psize"], lay["hdr"], lay["pagebase"]
    start = pgno * ps
    if start + ps > len(buf):
        return []
    lower = struct.unpack_from("<H", buf, start + hdr - 4)[0]
    n = max(0, min((lower - (hdr - base)) // 2, (ps - hdr) // 2))
    out = []
    for i in range(n):
        ptr = struct.unpack_from("<H", buf, start + hdr + 2 * i)[0] + base
        if ptr + 8 <= ps:
            out.append(start + ptr)
    return out


def _meta_at(lay, page: int) -> int:
    return page * lay["psize"] + lay["hdr"]


def _m_bitflip(r, buf, lay):
    k = r.choice([1, 1, 2, 3, 8, 32])
    spots = []
    for _ in range(k):
        if r.random() < 0.75:
            # structure: meta records, page headers and node tables of branch/leaf pages
            pg = r.choice([0, 1] + lay["branch"] + lay["leaf"] + lay["overflow"][:8])
            end = lay["hdr"] + (136 if pg < 2 else 0)
            if pg >= 2:
                lower = struct.unpack_from("<H", buf, pg * lay["psize"] + lay["hdr"] - 4)[0]
                end = max(end, min(lower + lay["pagebase"] + 64, lay["psize"]))
            off = pg * lay["psize"] + r.randrange(max(1, end))
        else:
            off = r.randrange(len(buf))
        if off < len(buf):
            buf[off] ^= 1 << r.randrange(8)
            spots.append(off)
    return f"bitflip x{k} at {spots[:4]}"


def _m_truncate(r, buf, lay):
    ps = lay["psize"]
    choice = r.random()
    if choice < 0.4:
        n = r.randrange(0, len(buf) // ps) * ps
    elif choice < 0.7:
        n = len(buf) - r.choice([1, ps - 1, ps, 2 * ps, 17])
    else:
        n = r.randrange(0, len(buf))
    n = max(0, n)
    del buf[n:]
    return f"truncate to {n}"


def _m_swap_pages(r, buf, lay):
    ps, n = lay["psize"], len(buf) // lay["psize"]
    pool = [0, 1] + lay["branch"] + lay["leaf"] + lay["overflow"]
    a = r.choice(pool) if r.random() < 0.8 else r.randrange(n)
    b = r.choice(pool) if r.random() < 0.8 else r.randrange(n)
    pa, pb = bytes(buf[a * ps:(a + 1) * ps]), bytes(buf[b * ps:(b + 1) * ps])
    fix = r.random() < 0.5 and a >= 2 and b >= 2
    if fix:  # keep each page's own number: a plausible page in the wrong place
        buf[a * ps:(a + 1) * ps] = struct.pack("<Q", a) + pb[8:]
        buf[b * ps:(b + 1) * ps] = struct.pack("<Q", b) + pa[8:]
    else:
        buf[a * ps:(a + 1) * ps], buf[b * ps:(b + 1) * ps] = pb, pa
    return f"swap pages {a} and {b}{' (pgno kept)' if fix else ''}"


def _m_copy_page(r, buf, lay):
    ps = lay["psize"]
    pool = lay["branch"] + lay["leaf"] + lay["overflow"]
    a, b = r.choice(pool), r.choice(pool)
    page = bytearray(buf[a * ps:(a + 1) * ps])
    page[0:8] = struct.pack("<Q", b)
    buf[b * ps:(b + 1) * ps] = page
    return f"copy page {a} over page {b} (pgno set to {b})"


def _m_branch_pgno(r, buf, lay):
    if not lay["branch"]:
        return _m_leaf_node(r, buf, lay)
    pg = r.choice(lay["branch"])
    nodes = _node_offsets(buf, lay, pg)
    if not nodes:
        return "branch page without nodes: no change"
    i = r.randrange(len(nodes))
    new = _interesting_pgno(r, lay)
    off = nodes[i]
    # child pgno = lo | hi << 16 | flags << 32 (48 bits)
    lo, hi, fl = new & 0xFFFF, (new >> 16) & 0xFFFF, (new >> 32) & 0xFFFF
    buf[off:off + 6] = struct.pack("<HHH", lo, hi, fl)
    return f"branch page {pg} node {i} child -> {new}"


def _m_leaf_node(r, buf, lay):
    pg = r.choice(lay["leaf"])
    nodes = _node_offsets(buf, lay, pg)
    if not nodes:
        return "leaf page without nodes: no change"
    i = r.randrange(len(nodes))
    off = nodes[i]
    what = r.choice(["size", "ksize", "flags", "ptr", "bigdata_pgno"])
    if what == "size":
        v = r.choice([0, 1, lay["psize"], 2 ** 16, 2 ** 31, 2 ** 32 - 1, r.randrange(2 ** 32)])
        buf[off:off + 4] = struct.pack("<HH", v & 0xFFFF, v >> 16)
    elif what == "ksize":
        buf[off + 6:off + 8] = struct.pack("<H", r.choice([0, 1, 511, 512, lay["psize"], 65535]))
    elif what == "flags":
        v = r.choice([0, 1, 2, 4, 7, 0x8000, r.randrange(65536)])
        buf[off + 4:off + 6] = struct.pack("<H", v)
    elif what == "ptr":
        slot = pg * lay["psize"] + lay["hdr"] + 2 * i
        buf[slot:slot + 2] = struct.pack("<H", r.choice([0, 1, 7, lay["psize"] - 8, lay["psize"] - 1,
                                                         65535, r.randrange(65536)]))
    else:
        return _m_overflow(r, buf, lay)
    return f"leaf page {pg} node {i}: {what}"


def _m_overflow(r, buf, lay):
    """Overflow values: the node's first-page number, its size, or the page count fields."""
    ps, hdr = lay["psize"], lay["hdr"]
    kind = r.random()
    if lay["overflow"] and kind < 0.35:
        pg = r.choice(lay["overflow"])
        # mp_pages (u32 at lower/upper) of the first overflow page
        v = r.choice([0, 1, 2 ** 31, 2 ** 32 - 1, lay["pages"] + 5, r.randrange(2 ** 32)])
        buf[pg * ps + hdr - 4:pg * ps + hdr] = struct.pack("<I", v)
        return f"overflow page {pg} page count -> {v}"
    for _ in range(8):
        pg = r.choice(lay["leaf"])
        for off in _node_offsets(buf, lay, pg):
            lo, hi, fl, ks = struct.unpack_from("<HHHH", buf, off)
            if not fl & 1:
                continue
            data = off - pg * ps + 8 + ks
            if lay["version"] == 3:
                data += data & 1
            at = pg * ps + data
            if data + 8 > ps:
                continue
            if kind < 0.7:
                new = _interesting_pgno(r, lay)
                buf[at:at + 8] = struct.pack("<Q", new)
                return f"leaf page {pg} overflow pgno -> {new}"
            if kind < 0.85 and lay["version"] == 3 and data + 24 <= ps:
                v = r.choice([0, 1, 2 ** 32 - 1, r.randrange(2 ** 64)])
                slot = r.choice([8, 16])  # 1.0: txnid or page count after the pgno
                buf[at + slot:at + slot + 8] = struct.pack("<Q", v)
                return f"leaf page {pg} overflow field +{slot} -> {v}"
            size = (lo | hi << 16) + r.choice([ps, 10 * ps, 2 ** 31, 1])
            size &= 0xFFFFFFFF
            buf[off:off + 4] = struct.pack("<HH", size & 0xFFFF, size >> 16)
            return f"leaf page {pg} overflow value size -> {size}"
    return _m_leaf_node(r, buf, lay) if kind < 0.5 else _m_zero_page(r, buf, lay)


def _m_zero_page(r, buf, lay):
    ps = lay["psize"]
    pool = r.choice([p for p in ([0, 1], lay["branch"], lay["leaf"], lay["overflow"]) if p])
    pg = r.choice(pool)
    buf[pg * ps:(pg + 1) * ps] = bytes(ps)
    return f"zero page {pg}"


def _m_page_header(r, buf, lay):
    ps, hdr = lay["psize"], lay["hdr"]
    pg = r.choice(lay["branch"] + lay["leaf"] + lay["overflow"][:4])
    at = pg * ps
    what = r.choice(["flags", "lower", "upper", "pgno", "txnid"])
    if what == "flags":
        v = r.choice([0, 1, 2, 3, 4, 8, 0x10, 0x12, 0x20, 0x22, 0x40, 0x42, 0x8002, r.randrange(65536)])
        buf[at + hdr - 6:at + hdr - 4] = struct.pack("<H", v)
    elif what in ("lower", "upper"):
        o = hdr - 4 if what == "lower" else hdr - 2
        v = r.choice([0, 1, hdr, hdr + 1, ps - 1, ps, 65535, r.randrange(65536)])
        buf[at + o:at + o + 2] = struct.pack("<H", v)
    elif what == "pgno":
        buf[at:at + 8] = struct.pack("<Q", _interesting_pgno(r, lay))
    elif lay["version"] == 3:
        buf[at + 8:at + 16] = struct.pack("<Q", r.choice([0, 2 ** 63, 2 ** 64 - 1, r.randrange(2 ** 64)]))
    else:
        return _m_page_header(r, buf, lay)
    return f"page {pg} header {what}"


_META_FIELDS = {  # offset in the meta record -> (struct format, name)
    4: ("<I", "version"), 16: ("<Q", "mapsize"), 24: ("<I", "psize"), 76: ("<H", "db flags"),
    78: ("<H", "depth"), 80: ("<Q", "branch pages"), 88: ("<Q", "leaf pages"),
    96: ("<Q", "overflow pages"), 104: ("<Q", "entries"), 112: ("<Q", "root"),
    120: ("<Q", "last pgno"), 128: ("<Q", "txnid"),
}


def _m_meta(r, buf, lay):
    page = lay["meta"] if r.random() < 0.8 else 1 - lay["meta"]
    base = _meta_at(lay, page)
    if r.random() < 0.5:
        off, (f, name) = r.choice(sorted(_META_FIELDS.items()))
        size = struct.calcsize(f)
        cur = struct.unpack_from(f, buf, base + off)[0]
        top = 2 ** (8 * size) - 1
        v = r.choice([0, 1, 2, cur + 1, cur - 1 if cur else 1, cur * 2, top, top // 2,
                      lay["pages"], lay["pages"] + 1, r.randrange(top + 1)]) & top
        buf[base + off:base + off + size] = struct.pack(f, v)
        return f"meta page {page} {name} -> {v}"
    n = r.choice([1, 2, 4, 8, 16, 48])
    off = r.randrange(-lay["hdr"], 136 - 1)
    start = max(page * lay["psize"], base + off)
    buf[start:start + n] = r.randbytes(n)
    return f"meta page {page}: {n} random bytes at meta+{off}"


MUTATIONS = {
    "bitflip": _m_bitflip, "truncate": _m_truncate, "swap_pages": _m_swap_pages,
    "copy_page": _m_copy_page, "branch_pgno": _m_branch_pgno, "leaf_node": _m_leaf_node,
    "overflow": _m_overflow, "zero_page": _m_zero_page, "page_header": _m_page_header,
    "meta": _m_meta,
}
# Weights: structure-aimed edits more often than blind ones.
_WEIGHTS = {"bitflip": 4, "truncate": 1, "swap_pages": 2, "copy_page": 1, "branch_pgno": 2,
            "leaf_node": 2, "overflow": 2, "zero_page": 2, "page_header": 2, "meta": 3}


def mutate(data: bytes, lay: dict, seed: int) -> tuple[bytearray, str]:
    """A damaged copy of ``data`` (one to three mutations chosen by ``seed``) and what was done."""
    import random

    r = random.Random(seed)
    buf = bytearray(data)
    names = list(_WEIGHTS)
    done = []
    for _ in range(r.choice([1, 1, 1, 1, 2, 3])):
        name = r.choices(names, weights=[_WEIGHTS[n] for n in names])[0]
        try:
            done.append(f"{name}: {MUTATIONS[name](r, buf, lay)}")
        except (struct.error, IndexError, ValueError) as exc:  # the file got too short to aim at
            done.append(f"{name}: skipped ({exc})")
    return buf, "; ".join(done)
