"""Provenance sidecars: record extents computed with no traversal (PROV).

A sidecar (``lmdbio-provenance.npz`` next to data.mdb) holds the record
offsets run-length encoded as runs of equal stride, the value sizes
(constant, runs, or a plain array, whichever is smallest) and the identity of
the database it describes (format, page size, txnid, last page, file size).
Looking up a range of records costs O(runs touched); a sidecar of another
version of the file is refused with an error that says how to refresh it.

Anyone can recompute a sidecar's digest, so the digest only catches damage.
What makes a sidecar trustworthy is :meth:`Provenance.verify_share`: the
leaf pages and branch pages of the file itself must agree with every extent
it gives. Ranks split that check (:func:`verify_shares`), each reading a
share of the leaf pages; together they prove the sidecar equals the record
index (:func:`lmdbio.recordindex.build_index`). A passed check is stamped in the
user's cache (:mod:`lmdbio.verified`), so it is paid once per version of the
file and sidecar, not at every open (:func:`verify_provenance` pays it ahead).

Also here: :func:`arithmetic_offsets`, the paper's purely arithmetic model of
where an append-order writer puts each value (reference: ``compute_data_offsets``
in pmodels/lmdbio), for comparing with the truth.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import format as fmt
from .errors import LmdbFormatError, LmdbioError, ProvenanceError, StaleProvenanceError

__all__ = ["SIDECAR_NAME", "sidecar_path", "Provenance", "ShareCheck", "encode_runs",
           "write_provenance", "load_provenance", "verify_shares", "verify_provenance",
           "provenance_status",           "arithmetic_offsets", "model_parameters"]

SIDECAR_NAME = "lmdbio-provenance.npz"
_SCHEMA = 2
_IDENTITY = ("format_version", "psize", "txnid", "last_pgno", "file_size")
# Leaf pages decoded per numpy batch in a check (memory: psize * batch).
_CHECK_BATCH = 2048


def sidecar_path(path: str | os.PathLike) -> Path:
    """Where the provenance sidecar of the LMDB at ``path`` (dir or data.mdb) lives."""
    p = Path(path)
    db_dir = p.parent if p.name == "data.mdb" or p.is_file() else p
    return db_dir / SIDECAR_NAME


def encode_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy run-length encoding of an integer sequence as runs of equal stride.

    Run ``k`` covers items ``[start[k], start[k+1])`` with
    ``values[i] = base[k] + (i - start[k]) * stride[k]``.
    Returns ``(start int64, base int64, stride int64)``.
    """
    v = np.asarray(values, dtype=np.int64)
    n = len(v)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if n == 1:
        return np.zeros(1, np.int64), v[:1].copy(), np.zeros(1, np.int64)
    d = np.diff(v)
    # Maximal segments of equal steps, in step-index space; seg_end[j] = last step of j's segment.
    brk = np.flatnonzero(d[1:] != d[:-1]) + 1
    seg_starts = np.concatenate(([0], brk))
    seg_ends = np.concatenate((brk - 1, [len(d) - 1]))
    end_of_step = np.repeat(seg_ends, np.diff(np.concatenate((seg_starts, [len(d)]))))
    starts, bases, strides = [], [], []
    s = 0
    eos = end_of_step.tolist()
    dl = d.tolist()
    vl = v.tolist()
    # One iteration per run, not per record: a run starting at s takes step d[s]
    # and extends to the end of that step's segment, plus the record after it.
    while s < n:
        starts.append(s)
        bases.append(vl[s])
        if s == n - 1:
            strides.append(0)
            break
        strides.append(dl[s])
        s = eos[s] + 2
    return (np.array(starts, np.int64), np.array(bases, np.int64), np.array(strides, np.int64))


def _decode_runs(start, base, stride, n, lo: int, hi: int) -> np.ndarray:
    """Values of items [lo, hi) from runs (O(runs touched) + output size)."""
    if hi <= lo:
        return np.zeros(0, np.int64)
    k0 = int(np.searchsorted(start, lo, side="right")) - 1
    k1 = int(np.searchsorted(start, hi - 1, side="right")) - 1
    ks = np.arange(k0, k1 + 1)
    seg_lo = np.maximum(start[ks], lo)
    seg_hi = np.minimum(np.append(start[k0 + 1:k1 + 1], n), hi)
    lens = seg_hi - seg_lo
    k = np.repeat(ks, lens)
    i = np.arange(lo, hi, dtype=np.int64)
    return base[k] + (i - start[k]) * stride[k]


@dataclass(frozen=True)
class ShareCheck:
    """What one share of a sidecar's check against its file covered and cost."""

    part: int
    parts: int
    leaves: int        # leaf pages checked, node by node
    records: int       # records whose extents were compared with their leaf node
    pages: int         # pages read: this share's leaves, plus the branch pages in part 0
    seconds: float


@dataclass
class Provenance:
    """Byte extents of every record of one version of an LMDB, computed from runs."""

    n: int
    format_version: int
    psize: int
    header_size: int
    txnid: int
    last_pgno: int
    file_size: int
    entries: int
    run_start: np.ndarray      # int64 first record of each offset run
    run_base: np.ndarray       # int64 offset of that record
    run_stride: np.ndarray     # int64 offset step within the run
    size_const: int            # the value size when all are equal, else -1
    size_run_start: np.ndarray  # int64 (sizes as runs of equal value) or empty
    size_run_value: np.ndarray  # int64
    size_array: np.ndarray     # uint32 per record, when runs would not be smaller; else empty
    leaf_pgnos: np.ndarray     # int64 page number of each leaf, in key order
    leaf_starts: np.ndarray    # int64 first record of each leaf, then n
    path: Path | None = None   # the data.mdb it was loaded for
    digest: str = ""           # sha256 of the arrays, set by from_file (names the content)

    @property
    def n_runs(self) -> int:
        return len(self.run_start)

    def identity(self) -> dict:
        return {k: getattr(self, k) for k in _IDENTITY}

    def _check_range(self, start: int, count: int) -> None:
        if start < 0 or count < 0 or start + count > self.n:
            raise ValueError(f"records [{start}, {start + count}) are outside [0, {self.n}); "
                             "PROV ranges do not wrap")

    def extents(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(uint64 offsets, uint32 sizes) of records [start, start+count), in key order."""
        self._check_range(start, count)
        stop = start + count
        offs = _decode_runs(self.run_start, self.run_base, self.run_stride, self.n, start, stop)
        if self.size_const >= 0:
            sizes = np.full(count, self.size_const, np.uint32)
        elif len(self.size_array):
            sizes = self.size_array[start:stop].astype(np.uint32)
        else:
            zero = np.zeros(len(self.size_run_start), np.int64)
            sizes = _decode_runs(self.size_run_start, self.size_run_value, zero, self.n,
                                 start, stop).astype(np.uint32)
        return offs.astype(np.uint64), sizes

    def verify(self, fd: int, start: int, count: int) -> None:
        """Cheap check that the file holds records [start, start+count) where the sidecar says.

        For the first and the last record, one pread of the leaf page that
        holds its node (the sidecar keeps each leaf's page number): the page
        must be that leaf, the node must exist, and its value location (the
        first overflow page, or the data inside the leaf) and size must equal
        the sidecar's. This ties record numbers to pages, so a shifted or
        edited sidecar is caught, not read as wrong data. Mismatch ->
        ProvenanceError.
        """
        if count <= 0:
            return
        self._check_range(start, count)
        for rec in sorted({start, start + count - 1}):
            problem = self._check_record(fd, rec)
            if problem:
                name = self.path or f"<fd {fd}>"
                raise ProvenanceError(f"{name}: provenance does not match the file at record {rec}: "
                                      f"{problem}; refresh it with `lmdbio index {name}`")

    def _check_record(self, fd: int, rec: int) -> str | None:
        leaf = int(np.searchsorted(self.leaf_starts, rec, side="right")) - 1
        if leaf < 0 or leaf >= len(self.leaf_pgnos):
            return "no leaf page is recorded for it"
        pgno, i = int(self.leaf_pgnos[leaf]), rec - int(self.leaf_starts[leaf])
        ps, hdr = self.psize, self.header_size
        page = os.pread(fd, ps, pgno * ps)
        if len(page) < ps:
            return f"leaf page {pgno} is past the end of the file"
        own = struct.unpack_from("<Q", page, 0)[0]
        flags, lower = struct.unpack_from("<HH", page, hdr - 6)
        base = 0 if self.format_version == 1 else hdr
        nkeys = (lower - (hdr - base)) // 2
        if own != pgno or not flags & 0x02:
            return f"page {pgno} is not that leaf (pgno {own}, flags {flags:#x})"
        if not 0 <= i < nkeys:
            return f"leaf page {pgno} holds {nkeys} nodes, not node {i}"
        ptr = struct.unpack_from("<H", page, hdr + 2 * i)[0] + base
        if ptr + 8 > ps:
            return f"node {i} of leaf page {pgno} is outside the page"
        lo, hi, nflags, ksize = struct.unpack_from("<HHHH", page, ptr)
        size = lo | hi << 16
        data = ptr + 8 + ksize
        if self.format_version == 3:
            data += data & 1
        if nflags & 0x01:  # BIGDATA: the value starts after the first overflow page's header
            if data + 8 > ps:
                return f"node {i} of leaf page {pgno} runs past the page"
            where = struct.unpack_from("<Q", page, data)[0] * ps + hdr
        else:
            where = pgno * ps + data
        off, sz = self.extents(rec, 1)
        if (int(off[0]), int(sz[0])) != (where, size):
            return (f"the sidecar says offset {int(off[0])} size {int(sz[0])}, the leaf says "
                    f"offset {where} size {size}")
        return None

    # ------------------------------------------------------------ full check

    def verify_share(self, fd: int, meta: fmt.MetaInfo, part: int = 0,
                     parts: int = 1) -> ShareCheck:
        """Check share ``part`` of ``parts`` of the sidecar against the file, leaf by leaf.

        The share is the leaves ``k`` with ``k % parts == part``: each such leaf
        page is read (consecutive page numbers in one pread) and must carry its
        own page number and the LEAF flag, hold exactly the sidecar's count of
        records, and give every node's value location (first overflow page, or
        the data inside the leaf) and size exactly as :meth:`extents` does. Every
        share also checks the sidecar's arrays against ``meta`` and that every
        extent lies in the file (no page read). Part 0 also walks the branch pages
        from ``meta``'s root and requires ``leaf_pgnos`` to be the tree's leaves in
        key order. So the shares of ``parts`` ranks together prove the sidecar
        equals the record index of the file.

        Args:
            fd: the data.mdb, open for reading.
            meta: the meta of the version read (a snapshot's, or ``read_meta``'s).
            part, parts: which share; ``parts=1`` checks everything.
        Returns:
            A :class:`ShareCheck` (what was read, and how long it took).
        Raises:
            StaleProvenanceError: the first record (or leaf) that disagrees, what
                the sidecar says and what the file says, and how to rewrite it.
            LmdbFormatError: a damaged branch page (the file, not the sidecar).
        """
        if parts < 1 or not 0 <= part < parts:
            raise ValueError(f"share {part} of {parts} does not exist; use 0 <= part < parts")
        t0 = time.perf_counter()
        problem = self._layout_problem(meta)
        if problem:
            raise self._mismatch(meta, problem)
        offs, sizes = self.extents(0, self.n)
        offs, sizes = offs.view(np.int64), sizes.astype(np.int64)
        self._check_in_file(fd, meta, offs, sizes)
        pages = 0
        if part == 0:
            tree, pages = _tree_leaves(fd, meta)
            ours = self.leaf_pgnos.astype(np.int64)
            m = min(len(tree), len(ours))
            differ = np.flatnonzero(tree[:m] != ours[:m])
            if len(differ) or len(tree) != len(ours):
                k = int(differ[0]) if len(differ) else m
                say = f"page {int(ours[k])}" if k < len(ours) else "no more leaves"
                truth = f"page {int(tree[k])}" if k < len(tree) else "no more leaves"
                raise self._mismatch(meta, f"leaf {k} in key order (records from "
                                           f"{int(self.leaf_starts[min(k, len(ours))])}): the "
                                           f"sidecar says {say}, the file's tree says {truth} "
                                           f"({len(ours)} vs {len(tree)} leaves)")
        ks = np.arange(part, len(self.leaf_pgnos), parts, dtype=np.int64)
        # Read in page order, so leaves that lie back to back cost one pread.
        ks = ks[np.argsort(self.leaf_pgnos[ks], kind="stable")]
        first: tuple[int, str] | None = None   # (record, problem) with the lowest record
        records = 0
        for b in range(0, len(ks), _CHECK_BATCH):
            kb = ks[b:b + _CHECK_BATCH]
            found = self._check_leaves(fd, meta, kb, offs, sizes)
            pages += len(kb)
            records += int((self.leaf_starts[kb + 1] - self.leaf_starts[kb]).sum())
            if found is not None and (first is None or found[0] < first[0]):
                first = found
        if first is not None:
            raise self._mismatch(meta, first[1])
        return ShareCheck(part, parts, len(ks), records, pages, time.perf_counter() - t0)

    def _check_leaves(self, fd: int, meta: fmt.MetaInfo, kb: np.ndarray, offs: np.ndarray,
                      sizes: np.ndarray) -> tuple[int, str] | None:
        """Leaves ``kb`` (ascending pages) against the sidecar: the first bad record, or None."""
        from .recordindex import pread_pages

        ps, hdr = meta.psize, meta.header_size
        pg = self.leaf_pgnos[kb].astype(np.int64)
        lo = self.leaf_starts[kb]
        want = self.leaf_starts[kb + 1] - lo
        bad = (pg < 2) | (pg > meta.last_pgno) | (pg >= meta.file_pages)
        if bad.any():
            j = int(np.argmin(np.where(bad, lo, np.iinfo(np.int64).max)))
            return int(lo[j]), (f"leaf {int(kb[j])} (records from {int(lo[j])}): the sidecar says "
                                f"leaf page {int(pg[j])}, which is not a page of the tree "
                                f"(2..{meta.last_pgno}, file of {meta.file_pages} pages)")
        raw = b"".join(pread_pages(fd, meta, pg))
        leaves = np.frombuffer(raw, dtype=np.uint8).reshape(len(pg), ps)
        try:
            nodes, cnt = fmt.leaf_table(leaves, pg, meta)
        except LmdbFormatError as exc:
            # The sidecar names these pages as leaves; one is not a readable leaf.
            return int(lo.min()), (f"a page the sidecar gives as a leaf of records "
                                   f"{int(lo.min())}.. is not a readable leaf page ({exc})")
        bad = cnt != want
        if bad.any():
            j = int(np.argmin(np.where(bad, lo, np.iinfo(np.int64).max)))
            return int(lo[j]), (f"leaf page {int(pg[j])} (leaf {int(kb[j])}): the sidecar says it "
                                f"holds records {int(lo[j])}..{int(lo[j] + want[j]) - 1} "
                                f"({int(want[j])} records), the file says {int(cnt[j])} records")
        slot = np.arange(len(nodes.size), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        rec = np.repeat(lo, cnt) + slot
        page = np.repeat(pg, cnt)
        big = (nodes.flags & fmt.F_BIGDATA) != 0
        where = np.where(big, nodes.ov_pgno * ps + hdr, page * ps + nodes.data_pos)
        bad = (where != offs[rec]) | (nodes.size != sizes[rec])
        if not bad.any():
            return None
        i = int(np.argmin(np.where(bad, rec, np.iinfo(np.int64).max)))
        return int(rec[i]), (f"record {int(rec[i])} (node {int(slot[i])} of leaf page "
                             f"{int(page[i])}): the sidecar says offset {int(offs[rec[i]])} size "
                             f"{int(sizes[rec[i]])}, the file says offset {int(where[i])} size "
                             f"{int(nodes.size[i])}")

    def _layout_problem(self, meta: fmt.MetaInfo) -> str | None:
        """What makes the arrays unusable for ``meta``'s version (no page read), or None."""
        mine = (self.format_version, self.psize, self.header_size, self.txnid, self.last_pgno)
        theirs = (meta.format_version, meta.psize, meta.header_size, meta.txnid, meta.last_pgno)
        if mine != theirs or self.n != meta.entries:
            return (f"it describes (format, page size, header, txnid, last page, entries) "
                    f"{mine + (self.n,)}, the file is {theirs + (meta.entries,)}")
        arrays = ("run_start", "run_base", "run_stride", "size_run_start", "size_run_value",
                  "size_array", "leaf_pgnos", "leaf_starts")
        for k in arrays:
            a = getattr(self, k)
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                return f"its {k} is not a 1-D integer array ({a.dtype}, shape {a.shape})"
        n = self.n

        def runs(start, *others) -> str | None:
            if any(len(o) != len(start) for o in others):
                return "has arrays of different lengths"
            if n and (len(start) == 0 or start[0] != 0 or (np.diff(start) <= 0).any()
                      or start[-1] >= n):
                return f"does not cover records 0..{n - 1} in increasing runs"
            return None

        problem = runs(self.run_start, self.run_base, self.run_stride)
        if problem:
            return f"its offset runs {problem}"
        if self.size_const < 0:
            if len(self.size_array):
                if len(self.size_array) != n:
                    return f"its size array has {len(self.size_array)} entries for {n} records"
            else:
                problem = runs(self.size_run_start, self.size_run_value)
                if problem:
                    return f"its size runs {problem}"
        ls = self.leaf_starts
        if (len(ls) != len(self.leaf_pgnos) + 1 or ls[0] != 0 or ls[-1] != n
                or (np.diff(ls) < 0).any()):
            return (f"its leaf_starts ({len(ls)} entries for {len(self.leaf_pgnos)} leaves) do not "
                    f"rise from 0 to {n} records")
        return None

    def _check_in_file(self, fd: int, meta: fmt.MetaInfo, offs: np.ndarray,
                       sizes: np.ndarray) -> None:
        """Every extent after the two meta pages and inside the file (and the version's pages)."""
        end = min(os.fstat(fd).st_size, (meta.last_pgno + 1) * meta.psize)
        bad = (offs < 2 * meta.psize) | (sizes < 0) | (offs + sizes > end)
        if bad.any():
            i = int(np.argmax(bad))
            raise self._mismatch(meta, f"record {i}: the sidecar says offset {int(offs[i])} size "
                                       f"{int(sizes[i])}, which lies outside the records' part of "
                                       f"the file (bytes {2 * meta.psize}..{end})")

    def _mismatch(self, meta: fmt.MetaInfo, problem: str) -> StaleProvenanceError:
        f = Path(self.path or meta.path or "data.mdb")
        return StaleProvenanceError(
            f"{f}: provenance sidecar {sidecar_path(f).name} does not match the file "
            f"(stale, edited or forged): {problem}; rewrite it with `lmdbio index {f.parent}`")

    # -------------------------------------------------------------- storage

    def _arrays(self) -> dict:
        return {
            "schema": np.array(_SCHEMA), "n": np.array(self.n),
            "identity": np.array([self.format_version, self.psize, self.header_size, self.txnid,
                                  self.last_pgno, self.file_size, self.entries], np.int64),
            "run_start": self.run_start, "run_base": self.run_base, "run_stride": self.run_stride,
            "size_const": np.array(self.size_const), "size_run_start": self.size_run_start,
            "size_run_value": self.size_run_value, "size_array": self.size_array,
            "leaf_pgnos": self.leaf_pgnos, "leaf_starts": self.leaf_starts,
        }

    @staticmethod
    def _digest(arrays: dict) -> str:
        h = hashlib.sha256()
        for k in sorted(arrays):
            a = np.ascontiguousarray(arrays[k])
            h.update(k.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
        return h.hexdigest()

    def save(self, path) -> Path:
        """Write atomically to ``path`` (an .npz file) with a digest of its contents."""
        path = Path(path)
        arrays = self._arrays()
        arrays["digest"] = np.array(self._digest(arrays))
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_file(cls, path) -> Provenance:
        """Read a sidecar written by :meth:`save`; damaged or edited files are a ProvenanceError."""
        path = Path(path)
        fix = f"refresh it with `lmdbio index {path.parent}`"
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["schema"]) != _SCHEMA:
                    raise ProvenanceError(f"{path}: sidecar schema {int(z['schema'])} is not "
                                          f"{_SCHEMA}; {fix}")
                arrays = {k: z[k] for k in z.files if k != "digest"}
                digest = str(z["digest"])
            if cls._digest(arrays) != digest:
                raise ProvenanceError(f"{path}: sidecar contents do not match its digest (damaged "
                                      f"or edited); {fix}")
            ident = arrays["identity"].tolist()
            prov = cls(int(arrays["n"]), *ident, arrays["run_start"], arrays["run_base"],
                       arrays["run_stride"], int(arrays["size_const"]), arrays["size_run_start"],
                       arrays["size_run_value"], arrays["size_array"], arrays["leaf_pgnos"],
                       arrays["leaf_starts"], digest=digest)
        except ProvenanceError:
            raise
        except (OSError, KeyError, ValueError, TypeError, EOFError) as exc:
            raise ProvenanceError(f"{path}: unreadable provenance sidecar ({exc}); {fix}") from None
        return prov


def _encode_sizes(sizes: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    s = sizes.astype(np.int64)
    empty = np.zeros(0, np.int64)
    if len(s) == 0 or (s == s[0]).all():
        return (int(s[0]) if len(s) else 0), empty, empty, np.zeros(0, np.uint32)
    brk = np.flatnonzero(s[1:] != s[:-1]) + 1
    starts = np.concatenate(([0], brk)).astype(np.int64)
    if 2 * len(starts) * 8 < len(s) * 4:
        return -1, starts, s[starts], np.zeros(0, np.uint32)
    return -1, empty, empty, sizes.astype(np.uint32)


def from_index(index) -> Provenance:
    """A Provenance of a :class:`~lmdbio.recordindex.RecordIndex`."""
    m = index.meta
    start, base, stride = encode_runs(index.offsets.astype(np.int64))
    const, srs, srv, sarr = _encode_sizes(index.sizes)
    return Provenance(len(index), m.format_version, m.psize, m.header_size, m.txnid, m.last_pgno,
                      m.file_size, m.entries, start, base, stride, const, srs, srv, sarr,
                      index.leaf_pgnos.astype(np.int64), index.leaf_starts.astype(np.int64),
                      Path(index.path))


def write_provenance(path) -> Path:
    """Index the LMDB at ``path`` and write (or refresh) its sidecar; returns the sidecar path."""
    from .recordindex import build_index

    index = build_index(path)
    prov = from_index(index)
    return prov.save(sidecar_path(index.path))


def load_provenance(path, *, check_stale: bool = True) -> Provenance:
    """The sidecar of the LMDB at ``path``, checked against the file's current meta.

    Raises:
        ProvenanceError: no sidecar (run ``lmdbio index PATH``), an unreadable
            one, or a stale one (the database changed since it was written).
    """
    from . import format as fmt

    f = fmt.db_file(path)
    side = sidecar_path(f)
    if not side.is_file():
        raise ProvenanceError(f"{f}: no provenance sidecar ({side.name}); create it with "
                              f"`lmdbio index {f.parent}`")
    prov = Provenance.from_file(side)
    prov.path = f
    if check_stale:
        meta = fmt.read_meta(f)
        now = {k: getattr(meta, k) for k in _IDENTITY}
        was = prov.identity()
        changed = [f"{k} {was[k]} -> {now[k]}" for k in _IDENTITY if was[k] != now[k]]
        if changed or prov.n != meta.entries:
            if prov.n != meta.entries:
                changed.append(f"entries {prov.n} -> {meta.entries}")
            raise StaleProvenanceError(f"{f}: provenance sidecar is stale, the database changed "
                                  f"({', '.join(changed)}); refresh it with `lmdbio index {f.parent}`")
    return prov


def _tree_leaves(fd: int, meta: fmt.MetaInfo) -> tuple[np.ndarray, int]:
    """The main DB's leaf pages in key order from its branch pages alone; and pages read.

    Bounded like :func:`lmdbio.recordindex.build_index`'s walk (the meta's page
    counts), so a damaged tree is one LmdbFormatError, never a hang.
    """
    from .recordindex import pread_pages

    if meta.root is None:
        return np.zeros(0, np.int64), 0
    level = np.array([meta.root], dtype=np.int64)
    budget = meta.branch_pages + meta.leaf_pages
    branches = 0
    for _ in range(meta.depth - 1):
        bad = (level < 2) | (level > meta.last_pgno) | (level >= meta.file_pages)
        if bad.any():
            raise fmt.page_error(meta.path, int(level[int(np.argmax(bad))]),
                            f"branch page number is outside the file's pages 2..{meta.last_pgno}")
        branches += len(level)
        if branches > budget:
            raise fmt.page_error(meta.path, meta.root, f"the tree has more than the meta's {budget} "
                                                  "branch+leaf pages (cycle or damaged branch)")
        raw = b"".join(pread_pages(fd, meta, level))
        ps = meta.psize
        level = np.concatenate([fmt.branch_children(raw[i * ps:(i + 1) * ps], meta, pgno)
                                for i, pgno in enumerate(level.tolist())])
        if branches + len(level) > budget:
            raise fmt.page_error(meta.path, meta.root, f"the tree has more than the meta's {budget} "
                                                  "branch+leaf pages (cycle or damaged branch)")
    if branches != meta.branch_pages or len(level) != meta.leaf_pages \
            or len(np.unique(level)) != len(level):
        raise fmt.page_error(meta.path, meta.root, f"the tree has {branches} branch and {len(level)} "
                                              f"leaf pages ({len(np.unique(level))} distinct), the "
                                              f"meta says {meta.branch_pages} and "
                                              f"{meta.leaf_pages} (damaged tree or meta)")
    return level, branches


def verify_shares(comm, prov: Provenance, fd: int, meta: fmt.MetaInfo,
                  row: dict | None = None, *, trust: bool | None = None,
                  force: bool = False) -> ShareCheck | None:
    """Collective over ``comm``: its ranks split the full check of their sidecars, once.

    Ranks whose sidecars have the same content (digest) form a group. If every
    rank of a group finds a verified stamp of its sidecar, file and meta
    (:mod:`lmdbio.verified`), the group skips the check. Otherwise they split
    its leaves, one share each (:meth:`Provenance.verify_share`), so the group
    checks all of it once; a rank with a sidecar of its own (another ``{node}``
    copy) checks all of that one. When every share of a group passed, a stamp
    is written for each file the group read, so the next open of that version
    with that sidecar skips the check. Every rank reaches the same two
    exchanges before anything can raise. Raises StaleProvenanceError on the
    ranks whose share disagrees only: call it inside the Reader's
    ``collective`` so every rank learns of it.

    Args:
        row: setup counters to fill: ``prov_check_s`` (all of it, exchanges
            included), ``prov_check_pages``, ``prov_check_leaves``,
            ``prov_check_share`` (``"part/parts"``, or ``"stamp"`` when the
            stamp stood in for the check), ``prov_stamp`` (``"used"``,
            ``"written"``, ``"not written"`` or ``"off"``) and
            ``prov_stamp_used`` (1 or 0: the numeric form, which summed rows keep).
        trust: use and write stamps; default: unless ``LMDBIO_TRUST_CHECKS=0``.
        force: check even where a stamp exists (and stamp again).
    Returns:
        This rank's :class:`ShareCheck`, or None when the stamp stood in for it.
    """
    import socket

    from .verified import binding, has_stamp, trust_stamps, write_stamp

    t0 = time.perf_counter()
    trust = trust_stamps() if trust is None else trust
    key = prov.digest or prov._digest(prov._arrays())
    bound = binding("prov", fd, meta, key)
    mine = (key, bound, trust and not force and has_stamp(bound), socket.gethostname())
    single = comm is None or comm.size == 1
    got = [mine] if single else comm.allgather(mine)
    me = 0 if comm is None else comm.rank
    same = [r for r, g in enumerate(got) if g[0] == key]
    check, stamp = None, "off" if not trust else "used"
    if not all(got[r][2] for r in same):
        try:
            check, err = prov.verify_share(fd, meta, part=same.index(me), parts=len(same)), None
        except Exception as exc:   # joins the exchange below, so no rank is left waiting
            err = exc
        passed = [err is None] if single else comm.allgather(err is None)
        if err is not None:
            raise err
        # Every file the group read passed as much as it does at an open without a stamp
        # (node views or {node} copies split one check), so each gets a stamp: written by
        # the first rank with that file on each host (a cache may be node-local).
        stamp = "written" if all(passed[r] for r in same) else "not written"
        first = next(r for r in same if got[r][1] == bound and got[r][3] == mine[3])
        if trust and stamp == "written" and me == first and write_stamp(bound) is None:
            stamp = "not written"
        stamp = stamp if trust else "off"
    if row is not None:
        row.update(prov_check_s=time.perf_counter() - t0, prov_stamp=stamp,
                   prov_stamp_used=int(check is None),
                   prov_check_pages=check.pages if check else 0,
                   prov_check_leaves=check.leaves if check else 0,
                   prov_check_share=f"{check.part}/{check.parts}" if check else "stamp")
    return check


def verify_provenance(path, *, stamp: bool = True) -> dict:
    """Check the whole sidecar of the LMDB at ``path`` against its file now, and stamp it.

    What ``lmdbio index --verify`` runs, so that readers skip the check later
    (see :func:`verify_shares`). Returns the counters :func:`verify_shares`
    fills (``prov_check_s``, ``prov_check_leaves``, ``prov_stamp``, ...).
    Raises StaleProvenanceError (forged, edited or stale sidecar) or
    ProvenanceError (none, unreadable).
    """
    prov = load_provenance(path)
    fd = os.open(prov.path, os.O_RDONLY)
    try:
        row: dict = {}
        verify_shares(None, prov, fd, fmt.read_meta(fd, name=str(prov.path)), row, trust=stamp,
                      force=True)
        return row
    finally:
        os.close(fd)


def provenance_status(path) -> str:
    """The sidecar of the LMDB at ``path`` as ``lmdbio info`` reports it.

    ``"present"``: it describes the current version and every extent passes the
    full check against the file (:meth:`Provenance.verify_share`, one share);
    ``"stale"``: the database changed since it was written, or it is unreadable;
    ``"invalid"``: it claims the current version but its extents disagree with
    the file (edited or forged; the readers refuse it); ``"missing"``.
    """
    if not sidecar_path(path).is_file():
        return "missing"
    try:
        prov = load_provenance(path)
    except ProvenanceError:
        return "stale"
    fd = os.open(prov.path, os.O_RDONLY)
    try:
        meta = fmt.read_meta(fd, name=str(prov.path))
        try:
            prov.verify_share(fd, meta)
        except LmdbioError:
            # Without a read transaction a writer may recycle pages under the check.
            if fmt.read_meta(fd, name=str(prov.path)).txnid != meta.txnid:
                return "stale"
            return "invalid"
    except LmdbioError:
        return "stale"
    finally:
        os.close(fd)
    return "present"


# ------------------------------------------------------------------ arithmetic model

def _even(x: int) -> int:
    return x + (x & 1)


def model_parameters(*, record_bytes: int, key_bytes: int, psize: int = 4096,
                     header_size: int = 16) -> dict:
    """The paper's provenance numbers for fixed-size overflow records of an append-order writer.

    Returns ``records_per_leaf``, ``keys_per_branch``, ``keys_per_first_branch``
    and ``pages_per_record``, derived from LMDB's node sizes and checked
    against files py-lmdb writes (an appending leaf splits one node before it is
    full; the leftmost branch of a level holds one more, its node 0 has no key).
    """
    nodemax = (((psize - header_size) // 2) & ~1) - 2
    if 8 + key_bytes + record_bytes <= nodemax:
        raise ValueError(f"{record_bytes}-byte values are stored inline (node limit {nodemax}); "
                         "the arithmetic model covers overflow values only")
    if header_size == 16:
        leaf_node = _even(8 + key_bytes + 8) + 2        # key + overflow pgno
    else:
        leaf_node = _even(8 + _even(key_bytes) + 24) + 2  # key + pgno, txnid, page count
    branch_node = _even(8 + key_bytes) + 2
    room = psize - header_size
    return {"records_per_leaf": room // leaf_node - 1,
            # A branch page never fills to the last byte; the leftmost one of a
            # level keeps node 0 with an empty key (10 bytes with its pointer).
            "keys_per_branch": (room - 1) // branch_node,
            "keys_per_first_branch": 1 + (room - 11) // branch_node,
            "pages_per_record": (header_size - 1 + record_bytes) // psize + 1}


def arithmetic_offsets(n_records: int, *, record_bytes: int, psize: int = 4096,
                       header_size: int = 16, key_bytes: int = 8,
                       commit_every: int | None = None, first_leaf_page: int = 2,
                       records_per_leaf: int | None = None, keys_per_branch: int | None = None,
                       pages_per_record: int | None = None) -> np.ndarray:
    """File offsets (uint64) of ``n_records`` fixed-size values as PROV predicts them, no file read.

    Models page allocation of one writer putting keys in ascending order
    (after pmodels/lmdbio ``compute_data_offsets``): each value takes
    ``pages_per_record`` pages; the value that fills a leaf is placed before
    the split's new leaf page, new branch pages and new root; at every
    commit the next transaction copies the root-to-leaf path and writes a
    free-list page, reusing pages freed two transactions earlier from the
    fourth transaction on. Exact for single-transaction writes; with commits
    it drifts where LMDB's free-list reuse differs (measure against an index).
    """
    p = model_parameters(record_bytes=record_bytes, key_bytes=key_bytes, psize=psize,
                         header_size=header_size)
    per_leaf = records_per_leaf or p["records_per_leaf"]
    per_branch = keys_per_branch or p["keys_per_branch"]
    per_first = keys_per_branch or p["keys_per_first_branch"]
    ppr = pages_per_record or p["pages_per_record"]
    pages = np.empty(n_records, np.int64)
    nxt = first_leaf_page + 1
    counts = [0]            # nodes on the rightmost page of each level, leaf level first
    split = [False]         # whether that level has split (its rightmost page is not its first)
    depth = 1
    txn = 1
    freed = []               # pages freed per transaction, newest last
    reusable = 0
    for i in range(n_records):
        if commit_every and i and i % commit_every == 0:
            # New transaction: copy the rightmost path (reusing freed pages when old
            # enough) and write one free-list page for what the last one freed.
            txn += 1
            freed.append(depth)
            if txn >= 4:
                reusable += freed[-3]
            copy = depth + (1 if txn > 2 else 0)
            take = min(reusable, copy)
            reusable -= take
            nxt += copy - take
        pages[i] = nxt
        nxt += ppr
        counts[0] += 1
        if counts[0] > per_leaf:
            counts[0] = 1
            level = 0
            while True:
                nxt += 1 if not reusable else 0
                reusable = max(reusable - 1, 0)
                split[level] = True
                if level + 1 == len(counts):
                    counts.append(2)          # new root over the two pages
                    split.append(False)
                    nxt += 1 if not reusable else 0
                    reusable = max(reusable - 1, 0)
                    depth += 1
                    break
                counts[level + 1] += 1
                if counts[level + 1] <= (per_branch if split[level + 1] else per_first):
                    break
                counts[level + 1] = 1
                level += 1
    return (pages * psize + header_size).astype(np.uint64)
