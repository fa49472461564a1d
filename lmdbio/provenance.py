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
it gives (:mod:`lmdbio.provcheck`). Ranks split that check (:func:`verify_shares`),
each reading a share of the leaf pages; together they prove the sidecar equals
the record index (:func:`lmdbio.recordindex.build_index`). A passed check is stamped in the
user's cache (:mod:`lmdbio.verified`), so it is paid once per version of the
file and sidecar, not at every open (:func:`verify_provenance` pays it ahead).

The paper's purely arithmetic model of where an append-order writer puts each
value (``arithmetic_offsets``, ``model_parameters``) is the lab's:
:mod:`lmdbio.lab.prov_offsets` (the old spellings here still work and warn).
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import format as fmt
from .deprecation import moved
from .errors import LmdbioError, ProvenanceError, StaleProvenanceError
from .provcheck import ShareCheck, check_share, verify_shares

__all__ = ["SIDECAR_NAME", "sidecar_path", "Provenance", "ShareCheck", "encode_runs",
           "write_provenance", "load_provenance", "verify_shares", "verify_provenance",
           "provenance_status"]

#: The paper's arithmetic model moved to the reproduction lab (reading one here warns).
MOVED = dict.fromkeys(["arithmetic_offsets", "model_parameters"], "lmdbio.lab.prov_offsets")
__getattr__ = moved(__name__, MOVED)

SIDECAR_NAME = "lmdbio-provenance.npz"
_SCHEMA = 2
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

        :func:`lmdbio.provcheck.check_share` says what is read and compared;
        the shares of ``parts`` ranks together prove the sidecar equals the
        record index of the file. Returns a :class:`ShareCheck`; raises
        StaleProvenanceError at the first record that disagrees.
        """
        return check_share(self, fd, meta, part, parts)

    def content_digest(self) -> str:
        """The sha256 of the arrays: :attr:`digest` when loaded from a file, else computed."""
        return self.digest or self._digest(self._arrays())

    def mismatch(self, meta: fmt.MetaInfo, problem: str) -> StaleProvenanceError:
        """The error for a sidecar whose ``problem`` with the file of ``meta`` was found."""
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
            fv, psize, hdr, txnid, last, size, entries = arrays["identity"].tolist()
            prov = cls(int(arrays["n"]), fv, psize, hdr, txnid, last, size, entries,
                       arrays["run_start"], arrays["run_base"],
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


def verify_provenance(path, *, stamp: bool = True) -> dict:
    """Check the whole sidecar of the LMDB at ``path`` against its file now, and stamp it.

    What ``lmdbio index --verify`` runs, so that readers skip the check later
    (see :func:`verify_shares`). Returns the counters :func:`verify_shares`
    fills (``prov_check_s``, ``prov_check_leaves``, ``prov_stamp``, ...).
    Raises StaleProvenanceError (forged, edited or stale sidecar) or
    ProvenanceError (none, unreadable).
    """
    prov = load_provenance(path)
    assert prov.path is not None, "load_provenance names the file"
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
    assert prov.path is not None, "load_provenance names the file"
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
