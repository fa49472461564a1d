"""Damaged files: each kind of damage gives one LmdbFormatError naming the file, the page and the problem."""

from __future__ import annotations

import io
import random
import struct

import numpy as np
import pytest

from corrupt_helpers import HDR, copy_db, lmdb_items, make_db, patch, read_at
from lmdbio import format as fmt
from lmdbio.errors import LmdbFormatError, LmdbioError
from lmdbio.recordindex import build_index
from lmdbio.info import dump

PS = 4096


@pytest.fixture(scope="module", params=["0.9", "1.0"])
def clean(request, tmp_path_factory):
    """A depth-3 DB with inline and overflow values, committed in pieces, and its index."""
    f = request.param
    r = random.Random(11)
    items = [(b"key-%030d" % i, r.randbytes(r.choice([40, 90, 3000]))) for i in range(6000)]
    path = make_db(tmp_path_factory.mktemp("clean") / f"db{f}", items, fmt=f, commit_every=1500)
    idx = build_index(path)
    assert idx.meta.depth >= 3
    return f, path, idx


@pytest.fixture
def damaged(clean, tmp_path):
    """A fresh copy of the clean data.mdb to damage."""
    f, path, idx = clean
    return f, copy_db(path, tmp_path / "bad"), idx


def expect_error(path, *patterns):
    with pytest.raises(LmdbFormatError) as ei:
        build_index(path)
    msg = str(ei.value)
    assert str(path) in msg, msg
    for p in patterns:
        assert p in msg, msg
    # The same one error from the other entry points.
    with pytest.raises(LmdbFormatError):
        dump(path, io.StringIO())
    return msg


def meta_offset(idx) -> int:
    """File offset of the current meta record."""
    return idx.meta.meta_page * PS + idx.meta.header_size


def root_children(path, idx) -> np.ndarray:
    page = read_at(path, idx.meta.root * PS, PS)
    return fmt.branch_children(page, idx.meta, idx.meta.root)


def node_ptr_offset(idx, pgno: int, i: int) -> int:
    """File offset of node i's start on page pgno."""
    page = read_at(idx.path, pgno * PS, PS)
    ptr = struct.unpack_from("<H", page, idx.meta.header_size + 2 * i)[0] + idx.meta.pagebase
    return pgno * PS + ptr


def test_truncated(damaged):
    _, path, idx = damaged
    for size in (idx.meta.file_size // 2, 3 * PS, PS + 100, 100, 10, 0):
        with open(path, "r+b") as fh:
            fh.truncate(size)
        msg = expect_error(path)
        assert "truncated" in msg or "too short" in msg, msg


def test_wrong_magic(damaged):
    _, path, _ = damaged
    for page in (0, 1):
        for hdr in (16, 24):
            patch(path, page * PS + hdr, b"\x00\x00\x00\x00")
    expect_error(path, "page 0", "not an LMDB file")


def test_wrong_magic_second_meta(damaged):
    f, path, _ = damaged
    patch(path, PS + HDR[f], b"\x11\x22\x33\x44")
    expect_error(path, "page 1", "wrong magic")


def test_root_past_end(damaged):
    _, path, idx = damaged
    patch(path, meta_offset(idx) + 72 + 40, struct.pack("<Q", idx.meta.last_pgno + 1000))
    expect_error(path, f"page {idx.meta.meta_page}", "root page")


def test_last_page_past_file(damaged):
    _, path, idx = damaged
    patch(path, meta_offset(idx) + 120, struct.pack("<Q", idx.meta.mapsize // PS + 5))
    expect_error(path, "truncated")


def test_unwritten_free_pages_at_the_end(damaged):
    """LMDB does not write pages a transaction allocated and freed again, so the last page
    may lie past the end of the file (seen beside a live writer); LMDB reads such a file."""
    f, path, idx = damaged
    patch(path, meta_offset(idx) + 120, struct.pack("<Q", idx.meta.file_pages + 5))
    got = build_index(path)
    assert got.meta.last_pgno == idx.meta.file_pages + 5
    assert got.offsets.tolist() == idx.offsets.tolist()
    assert len(lmdb_items(path.parent, f)) == len(idx)


def test_bad_depth(damaged):
    _, path, idx = damaged
    patch(path, meta_offset(idx) + 72 + 6, struct.pack("<H", 500))
    expect_error(path, "depth")


def test_page_points_to_itself(damaged):
    _, path, idx = damaged
    root = idx.meta.root
    off = node_ptr_offset(idx, root, 1)
    # Branch child pgno = lo | hi << 16 | flags << 32 (48 bits).
    patch(path, off, struct.pack("<HHH", root & 0xFFFF, root >> 16 & 0xFFFF, root >> 32))
    expect_error(path, f"page {root}", "reached twice")


def test_cycle_back_to_root(damaged):
    _, path, idx = damaged
    child = int(root_children(path, idx)[0])  # a level-1 branch page
    root = idx.meta.root
    off = node_ptr_offset(idx, child, 0)
    patch(path, off, struct.pack("<HHH", root & 0xFFFF, root >> 16 & 0xFFFF, root >> 32))
    expect_error(path, "reached twice")


def test_two_parents_share_a_leaf(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[0])
    for pgno in map(int, root_children(path, idx)):
        page = read_at(path, pgno * PS, PS)
        kids = fmt.branch_children(page, idx.meta, pgno)
        if leaf not in kids.tolist():
            off = node_ptr_offset(idx, pgno, 0)
            patch(path, off, struct.pack("<HHH", leaf & 0xFFFF, leaf >> 16, 0))
            break
    expect_error(path, f"page {leaf}", "reached twice")


@pytest.mark.parametrize("which", ["leaf", "branch", "root", "meta0", "meta1"])
def test_zeroed_page(damaged, which):
    _, path, idx = damaged
    pgno = {"leaf": int(idx.leaf_pgnos[len(idx.leaf_pgnos) // 2]),
            "branch": int(root_children(path, idx)[-1]), "root": idx.meta.root,
            "meta0": 0, "meta1": 1}[which]
    patch(path, pgno * PS, bytes(PS))
    msg = expect_error(path, f"page {pgno}")
    assert "zeroed" in msg or "not an LMDB file" in msg or "wrong magic" in msg, msg


def test_node_offset_past_page_end(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[1])
    patch(path, leaf * PS + idx.meta.header_size + 2, struct.pack("<H", PS - 2))
    expect_error(path, f"page {leaf}", "outside the node area")


def test_key_size_past_page_end(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[2])
    patch(path, node_ptr_offset(idx, leaf, 0) + 6, struct.pack("<H", 4000))
    expect_error(path, f"page {leaf}", "runs past the page end")


def test_inline_value_size_past_page_end(damaged):
    _, path, idx = damaged
    inline = np.flatnonzero(~idx.overflow)
    i = int(inline[len(inline) // 2])
    leaf = int(idx.leaf_pgnos[np.searchsorted(idx.leaf_starts, i, side="right") - 1])
    slot = i - int(idx.leaf_starts[np.searchsorted(idx.leaf_starts, i, side="right") - 1])
    patch(path, node_ptr_offset(idx, leaf, slot), struct.pack("<HH", 0xFFFF, 0x0))
    expect_error(path, f"page {leaf}", "runs past the page end")


def test_overflow_pgno_past_end(damaged):
    _, path, idx = damaged
    i = int(np.flatnonzero(idx.overflow)[5])
    leaf = int(idx.leaf_pgnos[np.searchsorted(idx.leaf_starts, i, side="right") - 1])
    slot = i - int(idx.leaf_starts[np.searchsorted(idx.leaf_starts, i, side="right") - 1])
    node = node_ptr_offset(idx, leaf, slot)
    ksize = struct.unpack("<H", read_at(path, node + 6, 2))[0]
    data = node + 8 + ksize + (ksize & 1 if idx.meta.format_version == 3 else 0)
    patch(path, data, struct.pack("<Q", idx.meta.last_pgno + 7))
    expect_error(path, f"page {leaf}", "overflow value")


def test_lower_upper_bounds(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[0])
    patch(path, leaf * PS + idx.meta.header_size - 4, struct.pack("<HH", 3000, 100))
    expect_error(path, f"page {leaf}", "node table bounds")


def test_wrong_page_type(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[0])
    patch(path, leaf * PS + idx.meta.header_size - 6, struct.pack("<H", fmt.P_BRANCH))
    expect_error(path, f"page {leaf}", "expected a leaf page")


def test_meta_counts_disagree(damaged):
    _, path, idx = damaged
    patch(path, meta_offset(idx) + 72 + 32, struct.pack("<Q", idx.meta.entries + 1))
    expect_error(path, "entries")


def test_32bit_and_big_endian(tmp_path):
    p32 = tmp_path / "p32.mdb"
    page = bytearray(2 * PS)
    struct.pack_into("<IHHHH", page, 0, 0, 0, fmt.P_META, 0, 0)
    struct.pack_into("<II", page, 12, fmt.MAGIC, 1)
    p32.write_bytes(page)
    with pytest.raises(LmdbFormatError, match="32-bit"):
        fmt.read_meta(p32)
    pbe = tmp_path / "pbe.mdb"
    page = bytearray(2 * PS)
    struct.pack_into(">QHHHH", page, 0, 0, 0, fmt.P_META, 0, 0)
    struct.pack_into(">II", page, 16, fmt.MAGIC, 1)
    pbe.write_bytes(page)
    with pytest.raises(LmdbFormatError, match="big-endian") as ei:
        build_index(pbe)
    assert str(pbe) in str(ei.value) and "page 0" in str(ei.value)


def test_not_lmdb(tmp_path):
    p = tmp_path / "data.mdb"
    p.write_bytes(b"hello world" * 1000)
    with pytest.raises(LmdbFormatError, match="not an LMDB file"):
        build_index(tmp_path)


def test_errors_are_lmdbio_errors():
    assert issubclass(LmdbFormatError, LmdbioError)


def _structural_offsets(idx) -> list[int]:
    """File offsets of page headers and node tables/node headers of branch and leaf pages."""
    m = idx.meta
    out = []
    branches = [m.root]
    with open(idx.path, "rb") as fh:
        data = fh.read()
    for pg in (0, 1):
        out += range(pg * PS, pg * PS + m.header_size + 136)
    level = [m.root]
    for _ in range(m.depth - 1):
        nxt = []
        for pg in level:
            nxt += fmt.branch_children(data[pg * PS:(pg + 1) * PS], m, pg).tolist()
        branches += nxt
        level = nxt
    for pg in set(branches) | set(idx.leaf_pgnos.tolist()):
        page = data[pg * PS:(pg + 1) * PS]
        lower = struct.unpack_from("<H", page, m.header_size - 4)[0]
        end = lower + m.pagebase
        out += range(pg * PS, pg * PS + end)
        for i in range(0, (end - m.header_size) // 2, 7):
            ptr = struct.unpack_from("<H", page, m.header_size + 2 * i)[0] + m.pagebase
            out += range(pg * PS + ptr, pg * PS + ptr + 8)
    return out


def test_random_bit_flips(clean, tmp_path):
    """Flips in structure: one LmdbFormatError, or an index of the same shape; nothing else."""
    f, path, idx = clean
    spots = _structural_offsets(idx)
    original = (path / "data.mdb").read_bytes()
    target = tmp_path / "flip" / "data.mdb"
    target.parent.mkdir()
    r = random.Random(f)
    errors = 0
    for _trial in range(100):
        buf = bytearray(original)
        for _ in range(r.choice([1, 1, 2, 8])):
            off = r.choice(spots)
            buf[off] ^= 1 << r.randrange(8)
        target.write_bytes(buf)
        try:
            got = build_index(target)
            out = io.StringIO()
            dump(target, out)
        except LmdbFormatError as exc:
            assert str(target) in str(exc)
            errors += 1
            continue
        if got.meta.meta_page != idx.meta.meta_page:
            # A flip in a txnid makes the other meta current: a
            # consistent older version, which is what LMDB itself would open.
            assert len(got) == got.meta.entries
            continue
        assert len(got) == len(idx) and len(got.keys()) == len(idx)
    assert errors > 20  # most structural damage is caught


# ------------------------------------------------------------------ what LMDB's C code trusts
# Each of these files would make LMDB assert, read past a page, or refuse to open; the walk
# (and so check_tree, run before the mmap readers hand a file to LMDB) refuses it first.

def _leaf_of(idx, i):
    j = int(np.searchsorted(idx.leaf_starts, i, side="right")) - 1
    return int(idx.leaf_pgnos[j]), i - int(idx.leaf_starts[j])


def test_branch_page_with_one_node(damaged):
    _, path, idx = damaged
    child = int(root_children(path, idx)[0])
    lower = idx.meta.header_size - idx.meta.pagebase + 2       # one node pointer
    patch(path, child * PS + idx.meta.header_size - 4, struct.pack("<H", lower))
    expect_error(path, f"page {child}", "at least 2")


def test_leaf_page_with_no_nodes(damaged):
    _, path, idx = damaged
    leaf = int(idx.leaf_pgnos[3])
    patch(path, leaf * PS + idx.meta.header_size - 4,
          struct.pack("<H", idx.meta.header_size - idx.meta.pagebase))
    expect_error(path, f"page {leaf}", "no nodes")


def test_branch_page_where_a_leaf_should_be(damaged):
    """LMDB's cursor asserts IS_LEAF (SIGABRT) on this one."""
    _, path, idx = damaged
    leaf, branch = int(idx.leaf_pgnos[4]), int(root_children(path, idx)[0])
    page = bytearray(read_at(path, branch * PS, PS))
    page[0:8] = struct.pack("<Q", leaf)
    patch(path, leaf * PS, bytes(page))
    expect_error(path, f"page {leaf}", "expected a leaf page")


def test_page_written_but_never_committed(damaged):
    """A DIRTY flag (0.9) or a txnid newer than the meta's (1.0): py-lmdb's LMDB refuses it."""
    f, path, idx = damaged
    leaf = int(idx.leaf_pgnos[2])
    if f == "0.9":
        patch(path, leaf * PS + 10, struct.pack("<H", fmt.P_LEAF | fmt.P_DIRTY))
        expect_error(path, f"page {leaf}", "DIRTY")
    else:
        patch(path, leaf * PS + 8, struct.pack("<Q", idx.meta.txnid + 1))
        expect_error(path, f"page {leaf}", "newer than the database")


def test_overflow_page_number_with_the_top_bit_set(damaged):
    """A value's first overflow page >= 2**63 must not turn into "inline at a negative offset"."""
    _, path, idx = damaged
    i = int(np.flatnonzero(idx.overflow)[3])
    leaf, slot = _leaf_of(idx, i)
    node = node_ptr_offset(idx, leaf, slot)
    ksize = struct.unpack("<H", read_at(path, node + 6, 2))[0]
    data = node + 8 + ksize + (ksize & 1 if idx.meta.format_version == 3 else 0)
    patch(path, data, struct.pack("<Q", 2 ** 64 - 1))
    expect_error(path, f"page {leaf}", "overflow value")


@pytest.mark.parametrize("field, value, words", [
    (128, struct.pack("<Q", 2 ** 63 + 5), "transaction id"),       # txnid
    (72 + 0, struct.pack("<I", PS), "key size field"),              # main md_pad
    (72 + 4, struct.pack("<H", 0x10), "need DUPSORT"),              # main DUPFIXED alone
    (24 + 4, struct.pack("<H", 0x08 | 0x20), "need DUPSORT"),       # free DB INTEGERDUP alone
    (72 + 4, struct.pack("<H", 0x100), "bits LMDB never writes"),
    (24 + 40, struct.pack("<Q", 1), "free-page DB root"),           # free root on a meta page
    (24 + 16, struct.pack("<Q", 10 ** 6), "claim"),                 # free DB leaf pages
])
def test_meta_fields_lmdb_checks_at_open(damaged, field, value, words):
    _, path, idx = damaged
    patch(path, meta_offset(idx) + field, value)
    expect_error(path, f"page {idx.meta.meta_page}", words)


def test_stray_magic_before_the_meta(damaged):
    """py-lmdb picks its engine from the first magic in the first 64 bytes."""
    _, path, idx = damaged
    patch(path, 8, struct.pack("<II", fmt.MAGIC, 3 if idx.meta.format_version == 1 else 1))
    expect_error(path, "page 0", "stray meta magic")
