"""Raw Caffe Datums of one layout, decoded a batch at a time with numpy: no per-record loop.

A raw Datum (not encoded) is a header (its shape fields and the data
length), the pixels, then the label and a short trailer. The first record
is taken as the template; every record is checked against it with a few
vectorised byte comparisons, the labels are read in one pass, and the
pixels are copied once, straight into the caller's array, or, when the
records lie at one stride in the buffer, handed out as a read-only strided
view of it. Records the template does not describe go
back to :mod:`lmdbio.datum`'s protobuf path, record by record.
"""

from __future__ import annotations

import numpy as np

__all__ = ["decode_uniform", "deliver", "template", "fast_labels", "gather"]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """One protobuf varint at ``data[pos:]``: ``(value, next position)``; ``(-1, pos)`` if cut."""
    value = shift = 0
    while pos < len(data) and shift < 70:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos
    return -1, pos


# What may follow the label in a record the fast path accepts: nothing (lmdbio, protobuf's
# Python runtime) or ``encoded: false`` (Caffe's C++ sets it explicitly).
_SUFFIXES = (b"", b"\x38\x00")
# Longest header the fast path takes: three 5-byte dimensions, encoded, the data tag and length.
_MAX_HEADER = 3 * 6 + 2 + 6


def template(buf: np.ndarray, off: int, size: int):
    """The layout of one raw Datum, if the fast path can use it as every record's template.

    Accepted: fields 1-3 (varints, any order; ``encoded: false`` among them),
    then ``data`` (field 4), then a ``label`` (field 5), then one of
    ``_SUFFIXES``. Anything else (encoded images, float_data, unknown or
    repeated later fields) returns None.
    Returns ``(header_len, data_len, (c, h, w), suffix)``.
    """
    head = buf[off:off + min(size, _MAX_HEADER)].tobytes()
    pos = 0
    dims = {1: 0, 2: 0, 3: 0}
    while pos < len(head):
        tag = head[pos]
        pos += 1
        if tag in (0x08, 0x10, 0x18):
            value, pos = _varint(head, pos)
            if value < 0 or value >= 1 << 31:
                return None
            dims[tag >> 3] = value
        elif tag == 0x38:  # encoded: only false keeps the record raw
            value, pos = _varint(head, pos)
            if value != 0:
                return None
        elif tag == 0x22:
            data_len, pos = _varint(head, pos)
            if data_len <= 0 or pos + data_len > size:
                return None
            header = pos
            break
        else:
            return None
    else:
        return None
    tail = buf[off + header + data_len:off + size].tobytes()
    if not tail or tail[0] != 0x28:
        return None
    label, after = _varint(tail, 1)
    suffix = tail[after:]
    c, h, w = dims[1], dims[2], dims[3]
    if label < 0 or suffix not in _SUFFIXES or c * h * w != data_len:
        return None
    return header, data_len, (c, h, w), suffix


def _varints(buf: np.ndarray, at: np.ndarray,
             length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int32 varints of known byte ``length`` (2..10) at ``at``, vectorised: ``(values, good)``.

    A good one has continuation bits on every byte but the last and is a
    canonical int32: at most 5 bytes when >= 0, the 10-byte two's complement
    of its 64-bit sign extension when < 0. Bad ones go through protobuf.
    """
    width = np.arange(10)
    used = width < length[:, None]
    b = buf[np.where(used, at[:, None] + width, at[:, None])].astype(np.uint64)
    more = (b & 0x80) != 0
    framed = (more == (width < length[:, None] - 1)) | ~used
    value = np.bitwise_or.reduce(((b & 0x7F) << (7 * width).astype(np.uint64)) * used, axis=1)
    good = framed.all(axis=1) & (((length <= 5) & (value < 1 << 31))
                                 | ((length == 10) & (value >= np.uint64(2**64 - 2**31))))
    labels = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    return np.where(good, labels, -1), good


def fast_labels(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, tpl,
                 labels: np.ndarray) -> np.ndarray:
    """Check every record against the template; fill ``labels`` of those that match.

    Returns the mask of records whose layout is the template's: the same
    header bytes, then the data, a label varint of any length, and the
    same suffix, ending exactly at the record's end.
    """
    header, data_len, _, suffix = tpl
    s = len(suffix)
    size0 = int(sizes[0])
    if size0 == header + data_len + 2 + s and (sizes == size0).all():
        # Every record is as long as the first with a one-byte label: one gather of the
        # header, the label tag, the label and the suffix, compared with the first record's.
        cols = np.array([*range(header), header + data_len, *range(size0 - s, size0),
                         header + data_len + 1])
        got = buf[offsets[:, None] + cols]
        label = got[:, -1]
        labels[:] = label
        return (got[:, :-1] == got[0, :-1]).all(axis=1) & (label < 0x80)
    lab_at = offsets + (header + data_len + 1)
    vlen = sizes - (header + data_len + 1 + s)
    ok = vlen >= 1
    if not ok.all():  # records too short: point their gathers at record 0 (masked out anyway)
        offsets, lab_at, vlen = (np.where(ok, a, a[0]) for a in (offsets, lab_at, vlen))
    o0 = int(offsets[0])
    ok &= (buf[offsets[:, None] + np.arange(header)] == buf[o0:o0 + header]).all(axis=1)
    ok &= buf[lab_at - 1] == 0x28
    if s:
        tail = (lab_at + vlen)[:, None] + np.arange(s)
        ok &= (buf[tail] == np.frombuffer(suffix, np.uint8)).all(axis=1)
    first = buf[lab_at]
    labels[:] = first
    one = vlen == 1
    if one.all():  # the common case: every label below 128
        ok &= first < 0x80
        return ok
    ok &= ~one | (first < 0x80)
    multi = np.flatnonzero(ok & ~one)
    if len(multi):
        more, good = _varints(buf, lab_at[multi], np.minimum(vlen[multi], 10))
        labels[multi] = more
        ok[multi] &= good & (vlen[multi] <= 10)
    return ok


class _Layout:
    """One raw Datum layout, kept across batches: its bytes and, per batch length, the bytes a
    whole batch of it must hold (see :func:`decode_uniform`).

    A record of the layout is ``size`` bytes: ``header`` (the shape and the data
    length), the image, then the tail: the label tag (0x28), a one-byte label
    (below 0x80: no continuation bit) and the suffix, ``tail_len`` bytes in all.
    """

    __slots__ = ("shape", "pixels", "header", "size", "tail_at", "tail_len", "suffix", "_by_n")

    def __init__(self, buf: np.ndarray, off: int, tpl):
        header, data_len, shape, suffix = tpl
        self.shape = shape
        self.pixels = shape[1] * shape[2]
        self.header = buf[off:off + header].tobytes()
        self.tail_at = header + data_len
        self.size = self.tail_at + 2 + len(suffix)
        self.tail_len = 2 + len(suffix)
        self.suffix = suffix
        self._by_n: dict = {}

    def expected(self, n: int) -> tuple[bytes, bytes, tuple[tuple[int, bytes], ...]]:
        """What ``n`` records of this layout hold, as bytes: their sizes (int64), their
        headers, and ``(j, bytes)`` for every tail byte j but the label's (its column of
        the tails, read with a stride of ``tail_len``)."""
        got = self._by_n.get(n)
        if got is None:
            if len(self._by_n) >= 16:  # batch lengths seen: a few (the last batch is shorter)
                self._by_n.clear()
            columns = ((0, b"\x28" * n),
                       *((2 + j, bytes([v]) * n) for j, v in enumerate(self.suffix)))
            got = self._by_n[n] = (np.full(n, self.size, np.int64).tobytes(), self.header * n,
                                   columns)
        return got

    def steps(self, n: int, stride: int) -> bytes:
        """The offsets of ``n`` records ``stride`` bytes apart from 0, as int64 bytes."""
        key = (n, stride)
        got = self._by_n.get(key)
        if got is None:
            got = self._by_n[key] = (np.arange(n, dtype=np.int64) * stride).tobytes()
        return got

    def _at_stride(self, buf: np.ndarray, o0: int, n: int, stride: int, heads: bytes, columns,
                   out, hwc: bool, view: bool):
        """:meth:`decode` of ``n`` records ``stride`` bytes apart from ``o0`` (as the fetchers
        lay a batch out): plain slices of one ``(n, size)`` strided view, no fancy index; the
        images a read-only strided view of ``buf`` when ``view`` and no ``out``."""
        rows = np.ndarray((n, self.size), np.uint8, buf, o0, (stride, 1))
        if rows[:, :len(self.header)].tobytes() != heads:
            return None
        labels = self._labels(rows[:, self.tail_at:].tobytes(), columns)
        if labels is None:
            return None
        c, h, w = self.shape
        images = np.ndarray((n, c, h, w), np.uint8, buf, o0 + len(self.header),
                            (stride, h * w, w, 1))
        return deliver(images, out, hwc, view), labels

    def _labels(self, tails: bytes, columns) -> np.ndarray | None:
        """The one-byte labels of the records whose tails (``tail_len`` bytes each) are
        ``tails``, or None when a label is 128 or more or another tail byte differs."""
        label = tails[1::self.tail_len]
        if not label.isascii() or any(tails[j::self.tail_len] != want for j, want in columns):
            return None
        return np.frombuffer(label, np.uint8).astype(np.int64)

    def decode(self, buf: np.ndarray, offsets: np.ndarray, sizes: bytes, out, hwc: bool,
               view: bool):
        """``(images, labels)`` if every record is of this layout, else None (nothing written).

        ``out`` is the caller's array in its layout (``hwc``: ``(n, h, w, c)``) or None;
        ``view`` allows a read-only view of ``buf`` when the records lie at one stride.
        """
        n = len(offsets)
        want_sizes, heads, columns = self.expected(n)
        if sizes != want_sizes or len(buf) < self.size or \
                (out is not None and _chw(out, hwc).shape[1:] != self.shape):
            return None
        o0 = int(offsets[0])
        stride = int(offsets[1]) - o0 if n > 1 else self.size
        if stride >= self.size and o0 + (n - 1) * stride + self.size <= len(buf) and \
                (offsets - o0).tobytes() == self.steps(n, stride):
            return self._at_stride(buf, o0, n, stride, heads, columns, out, hwc, view)
        # Row o of ``records`` is the ``size`` bytes from offset o: one fancy index per part
        # takes that part of every record (an offset past the end raises IndexError).
        records = np.ndarray((len(buf) - self.size + 1, self.size), np.uint8, buf, 0, (1, 1))
        try:
            if records[offsets, :len(self.header)].tobytes() != heads:
                return None
            tail = records[offsets, self.tail_at:]
        except IndexError:
            return None
        labels = self._labels(tail.tobytes(), columns)
        if labels is None:
            return None
        if out is not None and not hwc and n * (self.tail_at - len(self.header)) <= _SMALL:
            # A small share (16 CIFAR records): one fancy index and one copy cost less than
            # finding the runs at one stride that copy it once.
            out[...] = records[offsets, len(self.header):self.tail_at].reshape(out.shape)
            return out, labels
        starts = offsets + len(self.header)
        if out is None:   # records at one stride were viewed above: here a copy
            if not hwc:  # one fancy index: the one copy, into a new array
                return records[offsets, len(self.header):self.tail_at].reshape(n, *self.shape), \
                    labels
            c, h, w = self.shape
            out = np.empty((n, h, w, c), np.uint8)
        gather(buf, starts, None, _chw(out, hwc))
        return out, labels


# Pixel bytes up to which a batch filled into the caller's array is copied twice (a fancy
# index, then into it) rather than searched for runs at one stride: 16 CIFAR images.
_SMALL = 64 << 10


def deliver(images: np.ndarray, out: np.ndarray | None, hwc: bool, view: bool) -> np.ndarray:
    """``images``, ``(n, c, h, w)`` in a buffer, as the caller asked: copied into ``out`` (in
    its layout), else a read-only view when ``view``, else a new array in the layout."""
    if out is not None:
        _copy(_chw(out, hwc), images)
        return out
    if view:   # ``images`` is a view of its own, made for this call
        images.flags.writeable = False
        return images.transpose(0, 2, 3, 1) if hwc else images
    if hwc:
        n, c, h, w = images.shape
        out = np.empty((n, h, w, c), np.uint8)
        _copy(_chw(out, True), images)
        return out
    return images.copy()


def _chw(out: np.ndarray, hwc: bool) -> np.ndarray:
    """The caller's array seen as ``(n, c, h, w)`` (a view when it is ``(n, h, w, c)``)."""
    return out.transpose(0, 3, 1, 2) if hwc else out


# Layouts of recent batches, the last used first: consecutive batches of one dataset share
# one, so a batch costs a few byte comparisons instead of a header parse; a few are kept for
# readers of different datasets in one process. Replaced whole (atomic under threads).
_LAYOUTS: tuple[_Layout, ...] = ()
_MAX_LAYOUTS = 4


def decode_uniform(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                   shape: tuple[int, int, int] | None, out: np.ndarray | None, *,
                   hwc: bool = False, view: bool = False, max_pixels: int | None = None):
    """The common batch, whole or not at all: every record of one layout (one size, the same
    header, label tag and suffix, a one-byte label). ``(images, labels)``, or None when any
    record differs (nothing written to ``out``).

    ``shape`` is ``(c, h, w)``; ``out`` the caller's array, ``(n, h, w, c)`` with ``hwc``;
    ``view`` allows a read-only view of ``buf`` (:func:`strided`). A layout of more than
    ``max_pixels`` pixels is never taken (the protobuf path names the record).
    """
    global _LAYOUTS
    if np.minimum.reduce(offsets) < 0:
        return None
    size_bytes = sizes.tobytes()
    layouts = _LAYOUTS
    for lay in layouts:
        if (shape is None or tuple(shape) == lay.shape) and \
                (max_pixels is None or lay.pixels <= max_pixels):
            got = lay.decode(buf, offsets, size_bytes, out, hwc, view)
            if got is not None:
                if lay is not layouts[0]:
                    _LAYOUTS = (lay, *(x for x in layouts if x is not lay))
                return got
    o0, s0 = int(offsets[0]), int(sizes[0])
    if o0 + s0 > len(buf):
        return None
    tpl = template(buf, o0, s0)
    if tpl is None or (shape is not None and tuple(shape) != tpl[2]) or \
            (max_pixels is not None and tpl[2][1] * tpl[2][2] > max_pixels):
        return None
    lay = _Layout(buf, o0, tpl)
    if any((x.header, x.size, x.suffix) == (lay.header, lay.size, lay.suffix)
           for x in layouts):
        return None  # tried above: some record differs
    _LAYOUTS = (lay, *layouts[:_MAX_LAYOUTS - 1])
    return lay.decode(buf, offsets, size_bytes, out, hwc, view)


def gather(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray | None,
           out: np.ndarray) -> None:
    """Copy the image bytes at ``starts`` into ``out[rows]`` (None: every row, in order), once.

    ``out`` is ``(n, c, h, w)``, any strides (a transposed ``(n, h, w, c)`` array too).
    Records that lie at one stride (a batch read in file order) are copied a
    run at a time, each run one strided copy; records in any other order (a
    shuffled batch) are taken with one ``take`` over a view of every L-byte
    window of the buffer, then copied into ``out``.
    """
    n, c, h, w = out.shape
    size = c * h * w
    if rows is None and n > 1:
        # Records in file order lie at one stride (one page per CIFAR record) broken only
        # where LMDB put a leaf page: copy each stretch at that stride with one strided copy.
        step = np.diff(starts)
        stride = int(step[0])
        cuts = np.flatnonzero(step != stride)
        if len(cuts) <= n // 8:
            bounds = [0, *(cuts + 1).tolist(), n] if len(cuts) else (0, n)
            flat = out.reshape(n, size) if out.flags.c_contiguous else None
            for first, end in zip(bounds[:-1], bounds[1:]):
                src = np.ndarray((end - first, size), np.uint8, buf, int(starts[first]),
                                 (stride, 1))
                if flat is not None:
                    np.copyto(flat[first:end], src)
                else:
                    _copy(out[first:end], src.reshape(end - first, c, h, w))
            return
    # (np.take into ``out`` would first copy ``windows``, len(buf) x L bytes, contiguous.)
    windows = np.ndarray((len(buf) - size + 1, size), np.uint8, buf, 0, (1, 1))
    images = windows[starts].reshape(-1, c, h, w)
    if rows is None:
        _copy(out, images)
    elif out.strides[1] < out.strides[3]:
        for ch in range(c):
            out[rows, ch] = images[:, ch]
    else:
        out[rows] = images


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for ``(n, c, h, w)`` arrays; into a transposed ``(n, h, w, c)``
    array one channel at a time (numpy's 4-D transposing copy of bytes is several times
    slower than c plane copies with a stride of c)."""
    if dst.strides[1] < dst.strides[3]:
        for ch in range(dst.shape[1]):
            np.copyto(dst[:, ch], src[:, ch])
    else:
        np.copyto(dst, src)
