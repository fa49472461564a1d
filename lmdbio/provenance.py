"""Provenance sidecars: record extents computed with no traversal (PROV).

A sidecar (``lmdbio-provenance.npz`` next to data.mdb) holds the record
offsets run-length encoded as runs of equal stride, the value sizes
(constant, runs, or a plain array, whichever is smallest) and the identity of
the database it describes (format, page size, txnid, last page, file size).
Looking up a range of records costs O(runs touched); a sidecar of another
version of the file is refused with an error that says how to refresh it.

Also here: :func:`arithmetic_offsets`, the paper's purely arithmetic model of
where an append-order writer puts each value (reference: ``compute_data_offsets``
in pmodels/lmdbio), for comparing with the truth.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ProvenanceError

__all__ = ["SIDECAR_NAME", "sidecar_path", "Provenance", "encode_runs", "write_provenance",
           "load_provenance", "provenance_status", "arithmetic_offsets", "model_parameters"]

SIDECAR_NAME = "lmdbio-provenance.npz"
_SCHEMA = 1
_IDENTITY = ("format_version", "psize", "txnid", "last_pgno", "file_size")


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
    path: Path | None = None   # the data.mdb it was loaded for

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
        """Cheap check that the file still holds these records where the sidecar says.

        Reads the page header under the first and the last record: an overflow
        value must start right after the header of an overflow page whose own
        pgno matches and whose page count covers the value; an inline value must
        lie inside a leaf page with that pgno. Mismatch -> ProvenanceError.
        """
        if count <= 0:
            return
        ends = sorted({start, start + count - 1})
        offs, sizes = self.extents(ends[0], ends[-1] - ends[0] + 1)
        name = self.path or f"<fd {fd}>"
        file_size = os.fstat(fd).st_size
        for j in (0, len(offs) - 1):
            rec = ends[0] + j
            off, size = int(offs[j]), int(sizes[j])
            pgno, within = divmod(off, self.psize)
            problem = None
            if off + size > file_size:
                problem = f"offset {off} + {size} bytes is past the end of the file ({file_size} bytes)"
            elif len(head := os.pread(fd, self.header_size, pgno * self.psize)) < self.header_size:
                problem = "the file ends before it"
            else:
                own = struct.unpack_from("<Q", head, 0)[0]
                flags, lower, upper = struct.unpack_from("<HHH", head, self.header_size - 6)
                overflow = within == self.header_size
                if own != pgno:
                    problem = f"page {pgno} says it is page {own}"
                elif overflow and not flags & 0x04:
                    problem = f"page {pgno} is not an overflow page (flags {flags:#x})"
                elif overflow and (lower | upper << 16) < (self.header_size - 1 + size) // self.psize + 1:
                    problem = f"overflow page {pgno} holds {lower | upper << 16} pages, too few"
                elif not overflow and (not flags & 0x02 or within + size > self.psize):
                    problem = f"page {pgno} is not a leaf holding the value (flags {flags:#x})"
            if problem:
                raise ProvenanceError(f"{name}: provenance does not match the file at record {rec}: "
                                      f"{problem}; refresh it with `lmdbio index {name}`")

    # -------------------------------------------------------------- storage

    def save(self, path) -> Path:
        """Write atomically to ``path`` (an .npz file)."""
        path = Path(path)
        arrays = {
            "schema": np.array(_SCHEMA), "n": np.array(self.n),
            "identity": np.array([self.format_version, self.psize, self.header_size, self.txnid,
                                  self.last_pgno, self.file_size, self.entries], np.int64),
            "run_start": self.run_start, "run_base": self.run_base, "run_stride": self.run_stride,
            "size_const": np.array(self.size_const), "size_run_start": self.size_run_start,
            "size_run_value": self.size_run_value, "size_array": self.size_array,
        }
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_file(cls, path) -> Provenance:
        """Read a sidecar written by :meth:`save`; damaged files are a ProvenanceError."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["schema"]) != _SCHEMA:
                    raise ProvenanceError(f"{path}: sidecar schema {int(z['schema'])} is not "
                                          f"{_SCHEMA}; refresh it with `lmdbio index {path.parent}`")
                ident = z["identity"].tolist()
                prov = cls(int(z["n"]), *ident, z["run_start"], z["run_base"], z["run_stride"],
                           int(z["size_const"]), z["size_run_start"], z["size_run_value"],
                           z["size_array"])
        except ProvenanceError:
            raise
        except (OSError, KeyError, ValueError, TypeError, EOFError) as exc:
            raise ProvenanceError(f"{path}: unreadable provenance sidecar ({exc}); refresh it with "
                                  f"`lmdbio index {path.parent}`") from None
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
    """A Provenance of a :class:`~lmdbio.index.RecordIndex`."""
    m = index.meta
    start, base, stride = encode_runs(index.offsets.astype(np.int64))
    const, srs, srv, sarr = _encode_sizes(index.sizes)
    return Provenance(len(index), m.format_version, m.psize, m.header_size, m.txnid, m.last_pgno,
                      m.file_size, m.entries, start, base, stride, const, srs, srv, sarr,
                      Path(index.path))


def write_provenance(path) -> Path:
    """Index the LMDB at ``path`` and write (or refresh) its sidecar; returns the sidecar path."""
    from .index import build_index

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
            raise ProvenanceError(f"{f}: provenance sidecar is stale, the database changed "
                                  f"({', '.join(changed)}); refresh it with `lmdbio index {f.parent}`")
    return prov


def provenance_status(path) -> str:
    """``"present"``, ``"stale"`` (changed DB or unreadable sidecar) or ``"missing"``."""
    if not sidecar_path(path).is_file():
        return "missing"
    try:
        load_provenance(path)
    except ProvenanceError:
        return "stale"
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
