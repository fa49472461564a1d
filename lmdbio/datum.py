"""Caffe ``Datum`` records: encode and decode with the protobuf runtime.

The message is built from a descriptor in code (no ``.proto`` file, no
generated module), with Caffe's field numbers:
channels 1, height 2, width 3, data 4, label 5, float_data 6, encoded 7.
"""

from __future__ import annotations

import io
import threading

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from . import images
from .errors import LmdbioError

__all__ = ["Datum", "encode", "decode", "decode_image", "decode_many", "decode_records",
           "encode_image_bytes"]


def _build_datum_class():
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.name = "lmdbio_caffe_datum.proto"
    fdp.package = "lmdbio.caffe"
    fdp.syntax = "proto2"
    msg = fdp.message_type.add()
    msg.name = "Datum"
    F = descriptor_pb2.FieldDescriptorProto
    fields = [
        ("channels", 1, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("height", 2, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("width", 3, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("data", 4, F.TYPE_BYTES, F.LABEL_OPTIONAL),
        ("label", 5, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("float_data", 6, F.TYPE_FLOAT, F.LABEL_REPEATED),
        ("encoded", 7, F.TYPE_BOOL, F.LABEL_OPTIONAL),
    ]
    for name, number, ftype, label in fields:
        f = msg.field.add()
        f.name, f.number, f.type, f.label = name, number, ftype, label
    f = msg.field[-1]
    f.default_value = "false"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lmdbio.caffe.Datum"))


Datum = _build_datum_class()


def encode(image: np.ndarray | None = None, label: int = 0, *, encoded_bytes: bytes | None = None,
           channels: int = 0, height: int = 0, width: int = 0) -> bytes:
    """Serialize one Datum.

    Args:
        image: raw ``(c, h, w)`` uint8 array (Caffe's channel-major layout).
        label: class label.
        encoded_bytes: JPEG/PNG bytes instead of ``image``; sets ``encoded=True``.
        channels, height, width: stored with encoded images (Caffe stores the
            decoded shape there when known, 0 otherwise).
    """
    d = Datum()
    d.label = int(label)
    if encoded_bytes is not None:
        if image is not None:
            raise ValueError("give either image or encoded_bytes, not both")
        d.data = bytes(encoded_bytes)
        d.encoded = True
        d.channels, d.height, d.width = channels, height, width
    else:
        if image is None:
            raise ValueError("encode() needs an image array or encoded_bytes")
        arr = np.asarray(image)
        if arr.ndim != 3 or arr.dtype != np.uint8:
            raise ValueError(f"image must be a (c, h, w) uint8 array, got shape {arr.shape} dtype {arr.dtype}")
        d.channels, d.height, d.width = arr.shape
        d.data = np.ascontiguousarray(arr).tobytes()
    return d.SerializeToString()


def decode(value) -> "Datum":
    """Parse one serialized Datum (bytes, memoryview or uint8 array)."""
    d = Datum()
    try:
        d.ParseFromString(bytes(value))
    except Exception as exc:  # protobuf raises its own DecodeError
        raise LmdbioError(f"value is not a Caffe Datum ({exc}); is this a Caffe LMDB?") from None
    return d


def encode_image_bytes(image_chw: np.ndarray, fmt: str = "JPEG", quality: int = 90) -> bytes:
    """Compress a ``(c, h, w)`` uint8 image to JPEG or PNG bytes with Pillow."""
    from PIL import Image

    hwc = np.moveaxis(np.asarray(image_chw), 0, -1)
    if hwc.shape[-1] == 1:
        hwc = hwc[..., 0]
    buf = io.BytesIO()
    kwargs = {"quality": quality} if fmt.upper() == "JPEG" else {}
    Image.fromarray(hwc).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def decode_image(d: "Datum") -> np.ndarray:
    """The ``(c, h, w)`` uint8 image of a parsed Datum, decoding JPEG/PNG if needed."""
    if d.encoded:
        return images.decode_chw(d.data)
    c, h, w = d.channels, d.height, d.width
    if len(d.data) != c * h * w:
        raise LmdbioError(f"Datum holds {len(d.data)} data bytes but its shape {c}x{h}x{w} needs {c * h * w}")
    return np.frombuffer(d.data, dtype=np.uint8).reshape(c, h, w)


def _shape_of(d: "Datum") -> tuple[int, ...]:
    """The ``(c, h, w)`` :func:`decode_image` gives for a parsed Datum (a JPEG's from its header)."""
    return images.shape_of(d.data) if d.encoded else decode_image(d).shape


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


def _template(buf: np.ndarray, off: int, size: int):
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


def _fast_labels(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, tpl,
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
    whole batch of it must hold (see :func:`_decode_uniform`).

    A record of the layout is ``size`` bytes: ``header`` (the shape and the data
    length), the image, then the tail: the label tag (0x28), a one-byte label
    (below 0x80: no continuation bit) and the suffix, ``tail_len`` bytes in all.
    """

    __slots__ = ("shape", "header", "size", "tail_at", "tail_len", "suffix", "_by_n")

    def __init__(self, buf: np.ndarray, off: int, tpl):
        header, data_len, shape, suffix = tpl
        self.shape = shape
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

    def decode(self, buf: np.ndarray, offsets: np.ndarray, sizes: bytes, out):
        """``(images, labels)`` if every record is of this layout, else None (nothing written)."""
        n = len(offsets)
        want_sizes, heads, columns = self.expected(n)
        if sizes != want_sizes or len(buf) < self.size or \
                (out is not None and out.shape[1:] != self.shape):
            return None
        # Row o of ``records`` is the ``size`` bytes from offset o: one fancy index per part
        # takes that part of every record (an offset past the end raises IndexError).
        records = np.ndarray((len(buf) - self.size + 1, self.size), np.uint8, buf, 0, (1, 1))
        try:
            if records[offsets, :len(self.header)].tobytes() != heads:
                return None
            tail = records[offsets, self.tail_at:]
        except IndexError:
            return None
        tails = tail.tobytes()
        if not tails[1::self.tail_len].isascii() or \
                any(tails[j::self.tail_len] != want for j, want in columns):
            return None
        labels = tail[:, 1].astype(np.int64)
        images = records[offsets, len(self.header):self.tail_at].reshape(n, *self.shape)
        if out is None:
            return images, labels
        out[...] = images
        return out, labels


# Layouts of recent batches, the last used first: consecutive batches of one dataset share
# one, so a batch costs a few byte comparisons instead of a header parse; a few are kept for
# readers of different datasets in one process. Replaced whole (atomic under threads).
_LAYOUTS: tuple[_Layout, ...] = ()
_MAX_LAYOUTS = 4


def _decode_uniform(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                    shape: tuple[int, int, int] | None, out: np.ndarray | None):
    """The common batch, whole or not at all: every record of one layout (one size, the same
    header, label tag and suffix, a one-byte label). ``(images, labels)``, or None when any
    record differs (nothing written to ``out``).
    """
    global _LAYOUTS
    if np.minimum.reduce(offsets) < 0:
        return None
    size_bytes = sizes.tobytes()
    layouts = _LAYOUTS
    for lay in layouts:
        if shape is None or tuple(shape) == lay.shape:
            got = lay.decode(buf, offsets, size_bytes, out)
            if got is not None:
                if lay is not layouts[0]:
                    _LAYOUTS = (lay, *(x for x in layouts if x is not lay))
                return got
    o0, s0 = int(offsets[0]), int(sizes[0])
    if o0 + s0 > len(buf):
        return None
    tpl = _template(buf, o0, s0)
    if tpl is None or (shape is not None and tuple(shape) != tpl[2]):
        return None
    lay = _Layout(buf, o0, tpl)
    if any((x.header, x.size, x.suffix) == (lay.header, lay.size, lay.suffix)
           for x in layouts):
        return None  # tried above: some record differs
    _LAYOUTS = (lay, *layouts[:_MAX_LAYOUTS - 1])
    return lay.decode(buf, offsets, size_bytes, out)


def _gather(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray | None, out: np.ndarray) -> None:
    """Copy the image bytes at ``starts`` into ``out[rows]`` (None: every row, in order).

    Records that lie at one stride (a batch read in file order) are copied a
    run at a time; records in any other order (a shuffled batch) are taken
    with one fancy index over a view of every L-byte window of the buffer.
    """
    n, c, h, w = out.shape
    if rows is None and out.flags.c_contiguous and n > 1:
        # Records in file order lie at one stride (one page per CIFAR record) broken only
        # where LMDB put a leaf page: copy each stretch at that stride with one strided copy.
        step = np.diff(starts)
        stride = int(step[0])
        cuts = np.flatnonzero(step != stride)
        if len(cuts) <= n // 8:
            # Between two cuts every step is ``stride``, so each stretch is one strided view.
            flat = out.reshape(n, -1)
            bounds = [0, *(cuts + 1).tolist(), n] if len(cuts) else (0, n)
            for first, end in zip(bounds[:-1], bounds[1:]):
                np.copyto(flat[first:end], np.ndarray((end - first, c * h * w), np.uint8, buf,
                                                      int(starts[first]), (stride, 1)))
            return
    size = c * h * w
    windows = np.ndarray((len(buf) - size + 1, size), np.uint8, buf, 0, (1, 1))
    images = windows[starts].reshape(-1, c, h, w)
    if rows is None:
        out[...] = images
    else:
        out[rows] = images


def _int64s(a) -> np.ndarray:
    """``a`` as a 1-D int64 array: itself when it is one."""
    if isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.int64:
        return a
    return np.asarray(a, dtype=np.int64).reshape(-1)


def decode_records(buffer, offsets: np.ndarray, sizes: np.ndarray,
                   shape: tuple[int, int, int] | None = None,
                   out: np.ndarray | None = None,
                   threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Decode records ``buffer[offsets[i]:offsets[i] + sizes[i]]`` as Caffe Datums, batch at once.

    Raw Datums laid out like the first record (the same header bytes, so the
    same shape and data length; a label varint of any length; the same
    trailer) are checked and gathered with numpy, without a per-record
    Python loop. Any other record (another shape, encoded, float_data,
    another field order) is parsed by protobuf, so the result equals
    :func:`decode_image` and ``label`` of :func:`decode` on every record.

    The images are always copied out of ``buffer``, never a view of it: a
    Batch's buffer is a slot the Reader refills at the second following
    ``read_batch()``, and records in file order are not at one stride anyway
    (LMDB's leaf pages cut a CIFAR batch into about four stretches).

    Args:
        buffer: the bytes-like buffer holding the records (a Batch's ``buffer``).
        offsets, sizes: where each record lies in ``buffer``.
        shape: ``(c, h, w)`` of every image; taken from the first record if None.
        out: optional preallocated ``(n, c, h, w)`` uint8 array to fill.
        threads: threads decoding the records protobuf takes (encoded JPEG/PNG
            ones: Pillow releases the GIL), the caller among them; 1 decodes
            them in the caller alone. JPEGs are decoded straight into ``out``
            (see :mod:`lmdbio.images`), with the pixels of :func:`decode_image`.
    Returns:
        ``(images (n, c, h, w) uint8, labels int64)``.
    """
    # A Batch's arrays are already 1-D uint8 and int64: take them as they are (a 16-record
    # share costs a few microseconds, so each numpy call counts).
    if not isinstance(buffer, np.ndarray):
        buf = np.frombuffer(buffer, dtype=np.uint8)
    elif buffer.ndim != 1 or buffer.dtype != np.uint8:
        buf = buffer.reshape(-1).view(np.uint8)
    else:
        buf = buffer
    offsets, sizes = _int64s(offsets), _int64s(sizes)
    n = len(offsets)
    if len(sizes) != n:
        raise ValueError(f"{n} offsets but {len(sizes)} sizes; give one size per record")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if out is not None and (out.ndim != 4 or out.shape[0] != n or out.dtype != np.uint8):
        raise ValueError(f"out is a {out.dtype} array of shape {out.shape}; it must be uint8 "
                         f"(n, c, h, w) with n = {n} records")
    if n == 0:
        c, h, w = shape or (0, 0, 0)
        return (out if out is not None else np.empty((0, c, h, w), np.uint8)), \
            np.empty(0, np.int64)
    got = _decode_uniform(buf, offsets, sizes, shape, out)
    if got is not None:
        return got
    labels = np.empty(n, dtype=np.int64)
    if min(offsets.min(), sizes.min()) < 0 or (offsets + sizes).max() > len(buf):
        raise ValueError(f"records lie outside the {len(buf)}-byte buffer; offsets and sizes "
                         "must describe records inside it")
    tpl = _template(buf, int(offsets[0]), int(sizes[0]))
    if out is None:
        if shape is None:
            shape = tpl[2] if tpl is not None else \
                _shape_of(decode(buf[offsets[0]:offsets[0] + sizes[0]]))
        out = np.empty((n, *shape), dtype=np.uint8)
    # Not the common batch: the record-by-record checks, with the first record's template.
    if tpl is None or tpl[2] != out.shape[1:]:
        ok = np.zeros(n, dtype=bool)  # protobuf's path names the first record of a wrong shape
    else:
        ok = _fast_labels(buf, offsets, sizes, tpl, labels)
    if ok.all():
        _gather(buf, offsets + tpl[0], None, out)
        return out, labels
    fast = np.flatnonzero(ok)
    if len(fast):
        _gather(buf, offsets[fast] + tpl[0], fast, out)
    slow = np.flatnonzero(~ok).tolist()
    err = _each(threads, slow, lambda i: _decode_one(buf, offsets, sizes, i, out, labels))
    if err is not None:
        raise err
    return out, labels


def _each(threads: int, items: list, work):
    """``work(i)`` for every i of ``items`` (ascending) on ``threads`` threads; the error of
    the smallest item that returned one, or None.

    Pillow releases the GIL while it decodes, so encoded records decode in
    parallel. The caller is one of the threads and each takes the next item
    from one shared iterator: no task per record, and a thread that the
    machine slows down takes fewer.
    """
    if threads == 1 or len(items) < 2:
        for i in items:
            err = work(i)
            if err is not None:
                return err
        return None
    todo = iter(items)  # next() on a list iterator is atomic under the GIL
    errors: dict = {}

    def loop():
        for i in todo:
            err = work(i)
            if err is not None:
                errors[i] = err

    helpers = [_pool(threads - 1).submit(loop) for _ in range(min(threads, len(items)) - 1)]
    try:
        loop()
    finally:
        for f in helpers:  # a helper that has not started finds nothing left: drop it
            if not f.cancel():
                f.result()
    return errors[min(errors)] if errors else None


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int):
    """One shared thread pool per size, made on first use (its threads live with the process)."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="lmdbio-decode")
        return _POOLS[threads]


def _decode_one(buf, offsets, sizes, i: int, out: np.ndarray, labels: np.ndarray):
    """Decode record ``i`` with protobuf (and Pillow) into ``out[i]``; the error, or None."""
    d = Datum()
    o = int(offsets[i])
    try:
        d.ParseFromString(buf[o:o + int(sizes[i])].tobytes())
    except Exception as exc:
        return LmdbioError(f"record {i} of the batch is not a Caffe Datum ({exc})")
    try:
        if d.encoded:  # decoded straight into out[i] when it has the shape
            shape = images.decode_into(d.data, out[i])
        else:
            img = decode_image(d)
            shape = img.shape
            if shape == out.shape[1:]:
                out[i] = img
    except LmdbioError as exc:
        return LmdbioError(f"record {i}: {exc}")
    except Exception as exc:  # Pillow's errors on a damaged JPEG/PNG
        return LmdbioError(f"record {i} holds an encoded image Pillow cannot decode ({exc})")
    if shape != out.shape[1:]:
        return LmdbioError(f"record {i} has image shape {shape}, expected {out.shape[1:]}; "
                           "images of different sizes cannot share one array: decode them "
                           "with Batch.as_datum_list(threads=N) (a list of arrays), or "
                           "resize each with Batch.as_datum_array(size=(h, w))")
    labels[i] = d.label
    return None


def decode_many(values, shape: tuple[int, int, int] | None = None,
                out: np.ndarray | None = None, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Decode many Datums into one ``(n, c, h, w)`` uint8 array plus int64 labels.

    Args:
        values: a Batch (anything with ``buffer``, ``offsets`` and ``sizes``),
            decoded in place, or serialized Datums (bytes-like), joined first.
        shape: ``(c, h, w)`` of every image; taken from the first record if None.
        out: optional preallocated ``(n, c, h, w)`` uint8 array to fill.
        threads: threads for encoded records (see :func:`decode_records`).
    Returns:
        ``(images, labels)``; see :func:`decode_records`.
    """
    if all(hasattr(values, a) for a in ("buffer", "offsets", "sizes")):
        return decode_records(values.buffer, values.offsets, values.sizes, shape=shape, out=out,
                              threads=threads)
    values = [v if isinstance(v, (bytes, bytearray)) else memoryview(v).cast("B") for v in values]
    sizes = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    return decode_records(b"".join(values), offsets, sizes, shape=shape, out=out, threads=threads)
