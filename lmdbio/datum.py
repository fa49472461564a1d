"""Caffe ``Datum`` records: encode and decode with the protobuf runtime.

The message is built from a descriptor in code (no ``.proto`` file, no
generated module), with Caffe's field numbers:
channels 1, height 2, width 3, data 4, label 5, float_data 6, encoded 7.

A batch of records decodes into one array (:func:`decode_records`): raw
Datums of one layout with numpy (:mod:`lmdbio.rawdatum`), any other record
by protobuf and Pillow. Every image's declared size is checked before
anything is allocated for it (:func:`check_image`); a record that cannot be
decoded raises :class:`~lmdbio.errors.ImageError` naming its place in the
batch, its dataset index and its key.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from . import images, rawdatum
from .errors import ConfigurationError, ImageError, LmdbioError
from .workers import each

__all__ = ["Datum", "LAYOUTS", "MAX_IMAGE_PIXELS", "check_image", "encode", "decode",
           "decode_image", "decode_many", "decode_records", "encode_image_bytes"]

#: Most pixels (height x width) one image may declare: Pillow's own limit for an error,
#: 178,956,970. Every decoder takes ``max_pixels=`` to set another (None: no limit of ours).
MAX_IMAGE_PIXELS = images.MAX_PIXELS
#: Image layouts: Caffe's channel-major ``"CHW"`` (the default) and DALI's ``"HWC"``.
LAYOUTS = ("CHW", "HWC")
# The threads of decode_records and Batch's decoders (its public home: lmdbio.workers.each).
_each = each


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


class DatumMessage(Protocol):
    """What a :data:`Datum` message holds (its class is built from a descriptor at import)."""

    channels: int
    height: int
    width: int
    data: bytes
    label: int
    float_data: Sequence[float]
    encoded: bool

    def ParseFromString(self, serialized: bytes | memoryview) -> int: ...

    def SerializeToString(self) -> bytes: ...


Datum: type[DatumMessage] = _build_datum_class()


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


def decode(value) -> DatumMessage:
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


def _hwc(layout: str) -> bool:
    if layout not in LAYOUTS:
        raise ConfigurationError(f"layout must be 'CHW' (Caffe's, the default) or 'HWC' "
                                 f"(DALI's), got {layout!r}", option="layout")
    return layout == "HWC"


def check_image(d: DatumMessage, max_pixels: int | None = MAX_IMAGE_PIXELS):
    """Check the size a parsed Datum declares, before anything is allocated for its image.

    Returns a raw Datum's ``(c, h, w)``, an encoded one's JPEG header ``(c, h, w)``, or
    None (another encoded format). Raises :class:`~lmdbio.errors.ImageError` for a side of
    0 or less, more than ``max_pixels`` pixels, empty or unreadable encoded data, or raw
    data of another length than its shape needs.
    """
    if d.encoded:
        return images.check(d.data, max_pixels)
    c, h, w = d.channels, d.height, d.width
    if not (c or h or w or d.data or d.float_data):
        raise ImageError("holds no image: an empty Datum (no shape, no data)")
    images.check_sides(c, h, w, max_pixels)
    if len(d.data) != c * h * w:
        raise ImageError(f"holds {len(d.data)} data bytes but its shape {c}x{h}x{w} needs "
                         f"{c * h * w}")
    return c, h, w


def decode_image(d: DatumMessage, *, max_pixels: int | None = MAX_IMAGE_PIXELS,
                 layout: str = "CHW") -> np.ndarray:
    """The uint8 image of a parsed Datum, decoding JPEG/PNG if needed: ``(c, h, w)``, or
    ``(h, w, c)`` with ``layout="HWC"`` (a transposed view for raw Datums).

    Raises :class:`~lmdbio.errors.ImageError` (see :func:`check_image`), or when Pillow
    cannot decode the encoded image.
    """
    hwc = _hwc(layout)
    shape = check_image(d, max_pixels)
    if not d.encoded:
        img = np.frombuffer(d.data, dtype=np.uint8).reshape(shape)
    else:
        try:
            img = images.decode_chw(d.data)
        except Exception as exc:  # Pillow's errors on a damaged JPEG/PNG
            raise ImageError(f"holds an encoded image Pillow cannot decode ({exc})") from None
    return img.transpose(1, 2, 0) if hwc else img


def _shape_of(d: DatumMessage, max_pixels) -> tuple[int, int, int]:
    """The ``(c, h, w)`` :func:`decode_image` gives for a parsed Datum (a JPEG's from its
    header), after :func:`check_image`."""
    shape = check_image(d, max_pixels)
    if not d.encoded:
        return shape
    try:
        return images.shape_of(d.data)
    except Exception as exc:
        raise ImageError(f"holds an encoded image Pillow cannot decode ({exc})") from None


def _named(err: ImageError, indices, key_of) -> ImageError:
    """``err`` of record ``err.position`` with the record named: its dataset index (from
    ``indices``) and its key (``key_of(index)``, looked up only now, on the error path)."""
    i = err.position
    index = key = None
    where = ""
    if indices is not None and i is not None:
        index = int(indices[i])
        try:
            key = key_of(index) if key_of is not None else None
        except Exception:  # the error being raised matters more than the key
            key = None
        where = f" (dataset index {index}" + (f", key {key!r})" if key is not None else ")")
    return ImageError(f"record {i} of the batch{where} {err}", position=i, index=index, key=key)


def _parse(buf: np.ndarray, o: int, size: int, i: int) -> DatumMessage:
    d = Datum()
    try:
        d.ParseFromString(buf[o:o + size].data)   # a memoryview: protobuf copies it once
    except Exception as exc:  # protobuf raises its own DecodeError
        raise ImageError(f"is not a Caffe Datum ({exc})", position=i) from None
    return d


def _int64s(a) -> np.ndarray:
    """``a`` as a 1-D int64 array: itself when it is one."""
    if isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.int64:
        return a
    return np.asarray(a, dtype=np.int64).reshape(-1)


def _bytes(buffer) -> np.ndarray:
    """A 1-D uint8 array of ``buffer`` (a Batch's buffer is one already: taken as it is, since
    a 16-record share costs a few microseconds and each numpy call counts)."""
    if not isinstance(buffer, np.ndarray):
        return np.frombuffer(buffer, dtype=np.uint8)
    if buffer.ndim != 1 or buffer.dtype != np.uint8:
        return buffer.reshape(-1).view(np.uint8)
    return buffer


def _check_args(n: int, sizes: np.ndarray, threads, out, hwc: bool) -> None:
    if len(sizes) != n:
        raise ValueError(f"{n} offsets but {len(sizes)} sizes; give one size per record")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if out is not None and (out.ndim != 4 or out.shape[0] != n or out.dtype != np.uint8):
        raise ValueError(f"out is a {out.dtype} array of shape {out.shape}; it must be uint8 "
                         f"{'(n, h, w, c)' if hwc else '(n, c, h, w)'} with n = {n} records")


def _chw(shape, hwc: bool) -> tuple[int, int, int]:
    """``shape``, given in the layout, as ``(c, h, w)``."""
    if len(shape) != 3:
        raise ValueError(f"shape must be the three sides of every image, "
                         f"{'(h, w, c)' if hwc else '(c, h, w)'}; got {shape!r}")
    a, b, c = shape
    return (c, a, b) if hwc else (a, b, c)


def decode_records(buffer, offsets: np.ndarray, sizes: np.ndarray,
                   shape: tuple[int, int, int] | None = None,
                   out: np.ndarray | None = None,
                   threads: int = 1, *, layout: str = "CHW", copy: bool = True,
                   max_pixels: int | None = MAX_IMAGE_PIXELS, indices=None,
                   key_of=None) -> tuple[np.ndarray, np.ndarray]:
    """Decode records ``buffer[offsets[i]:offsets[i] + sizes[i]]`` as Caffe Datums, batch at once.

    Raw Datums laid out like the first record (the same header bytes, so the
    same shape and data length; a label varint of any length; the same
    trailer) are checked and gathered with numpy (:mod:`lmdbio.rawdatum`),
    without a per-record Python loop, their pixels copied once, straight into
    ``out``. Any other record (another shape, encoded, float_data, another
    field order) is parsed by protobuf, so the result equals
    :func:`decode_image` and ``label`` of :func:`decode` on every record,
    and the records :func:`decode_image` refuses raise here.

    Args:
        buffer: the bytes-like buffer holding the records (a Batch's ``buffer``).
        offsets, sizes: where each record lies in ``buffer``.
        shape: the shape of every image, in ``layout``; taken from the first record if None.
        out: optional preallocated ``(n, c, h, w)`` (``(n, h, w, c)``) uint8 array to fill.
        threads: threads decoding the records protobuf takes (encoded JPEG/PNG
            ones: Pillow releases the GIL), the caller among them; 1 decodes
            them in the caller alone. JPEGs are decoded straight into ``out``
            (see :mod:`lmdbio.images`), with the pixels of :func:`decode_image`.
        layout: ``"CHW"`` (Caffe's) or ``"HWC"`` (DALI's: JPEGs decode without a
            channel split; raw Datums, stored CHW, are transposed as they are copied).
        copy: False lets the images be a read-only view of ``buffer`` when every record
            is a raw Datum of one layout at one stride (no copy at all); it lives as long
            as ``buffer`` holds them (a Batch's: until the second following
            ``read_batch()``). Otherwise, and by default, a new array.
        max_pixels: the most pixels one image may declare (see :func:`check_image`).
        indices, key_of: the records' dataset indices and a ``key_of(index)`` lookup,
            named in errors (a Batch's ``indices`` and ``key_of``).
    Returns:
        ``(images uint8, labels int64)``.
    Raises:
        ImageError: naming the first record that cannot be decoded into the batch.
    """
    buf = _bytes(buffer)
    offsets, sizes = _int64s(offsets), _int64s(sizes)
    n = len(offsets)
    hwc = _hwc(layout)
    _check_args(n, sizes, threads, out, hwc)
    chw = None if shape is None else _chw(shape, hwc)
    if n == 0:
        c, h, w = chw or (0, 0, 0)
        return (out if out is not None else
                np.empty((0, h, w, c) if hwc else (0, c, h, w), np.uint8)), np.empty(0, np.int64)
    got = rawdatum.decode_uniform(buf, offsets, sizes, chw, out, hwc=hwc, view=not copy,
                                  max_pixels=max_pixels)
    if got is not None:
        return got
    if min(offsets.min(), sizes.min()) < 0 or (offsets + sizes).max() > len(buf):
        raise ValueError(f"records lie outside the {len(buf)}-byte buffer; offsets and sizes "
                         "must describe records inside it")
    tpl = rawdatum.template(buf, int(offsets[0]), int(sizes[0]))
    if tpl is not None and max_pixels is not None and tpl[2][1] * tpl[2][2] > max_pixels:
        tpl = None  # protobuf's path names the record
    try:
        if out is None:
            if chw is None:
                chw = tpl[2] if tpl is not None else \
                    _shape_of(_parse(buf, int(offsets[0]), int(sizes[0]), 0), max_pixels)
            c, h, w = chw
            out = np.empty((n, h, w, c) if hwc else (n, c, h, w), np.uint8)
    except ImageError as exc:
        raise _named(ImageError(str(exc), position=0), indices, key_of) from None
    labels = np.empty(n, dtype=np.int64)
    err = _decode_mixed(buf, offsets, sizes, tpl, out, labels, hwc, threads, max_pixels)
    if err is not None:
        raise _named(err, indices, key_of)
    return out, labels


def _decode_mixed(buf, offsets, sizes, tpl, out, labels, hwc: bool, threads: int, max_pixels):
    """Not the common batch: the records of the first record's template gathered with numpy,
    the others by protobuf; the error of the first record that fails, or None."""
    n = len(offsets)
    target = out.transpose(0, 3, 1, 2) if hwc else out
    if tpl is None or tpl[2] != target.shape[1:]:
        ok = np.zeros(n, dtype=bool)  # protobuf's path names the first record of a wrong shape
    else:
        ok = rawdatum.fast_labels(buf, offsets, sizes, tpl, labels)
    if ok.all():
        rawdatum.gather(buf, offsets + tpl[0], None, target)
        return None
    fast = np.flatnonzero(ok)
    if len(fast):
        rawdatum.gather(buf, offsets[fast] + tpl[0], fast, target)
    slow = np.flatnonzero(~ok).tolist()
    return each(threads, slow,
                lambda i: _decode_one(buf, offsets, sizes, i, out, labels, hwc, max_pixels))


def _decode_one(buf, offsets, sizes, i: int, out: np.ndarray, labels: np.ndarray, hwc: bool,
                max_pixels) -> ImageError | None:
    """Decode record ``i`` with protobuf (and Pillow) into ``out[i]``; the error, or None."""
    want = out.shape[1:]
    chw = (want[2], want[0], want[1]) if hwc else want
    try:
        d = _parse(buf, int(offsets[i]), int(sizes[i]), i)
        head = check_image(d, max_pixels)
        if not d.encoded:
            shape = head
            if shape == chw:
                img = np.frombuffer(d.data, np.uint8).reshape(shape)
                out[i] = img.transpose(1, 2, 0) if hwc else img
        elif head is not None and head[0] in (1, 3) and head != chw:
            shape = head  # another size: named without decoding it
        else:  # decoded straight into out[i] when it has the shape
            shape = images.decode_into(d.data, out[i], hwc)
    except ImageError as exc:
        return ImageError(str(exc), position=i)
    except Exception as exc:  # Pillow's errors on a damaged JPEG/PNG
        return ImageError(f"holds an encoded image Pillow cannot decode ({exc})", position=i)
    if shape != chw:
        got = (shape[1], shape[2], shape[0]) if hwc and len(shape) == 3 else shape
        return ImageError(
            f"has image shape {got}, expected {want}; images of different sizes cannot share "
            "one array: decode them with Batch.as_datum_list(threads=N) (a list of arrays), "
            "or resize each with Batch.as_datum_array(size=(h, w))", position=i)
    labels[i] = d.label
    return None


def decode_many(values, shape: tuple[int, int, int] | None = None,
                out: np.ndarray | None = None, threads: int = 1, *, layout: str = "CHW",
                copy: bool = True, max_pixels: int | None = MAX_IMAGE_PIXELS
                ) -> tuple[np.ndarray, np.ndarray]:
    """Decode many Datums into one ``(n, c, h, w)`` (``layout="HWC"``: ``(n, h, w, c)``)
    uint8 array plus int64 labels.

    Args:
        values: a Batch (decoded by its :meth:`~lmdbio.batch.Batch.as_datum_array`; anything
            else with ``buffer``, ``offsets`` and ``sizes`` in place), or serialized Datums
            (bytes-like), joined first.
        shape, out, threads, layout, copy, max_pixels: see :func:`decode_records`.
    Returns:
        ``(images, labels)``; see :func:`decode_records`.
    """
    if shape is None and hasattr(values, "as_datum_array"):   # a Batch: its own decoder
        return values.as_datum_array(out, threads, layout=layout, copy=copy,
                                     max_pixels=max_pixels)
    kw: dict[str, Any] = dict(shape=shape, out=out, threads=threads, layout=layout, copy=copy,
                              max_pixels=max_pixels)
    if all(hasattr(values, a) for a in ("buffer", "offsets", "sizes")):
        return decode_records(values.buffer, values.offsets, values.sizes,
                              indices=getattr(values, "indices", None),
                              key_of=getattr(values, "key_of", None), **kw)
    values = [v if isinstance(v, (bytes, bytearray)) else memoryview(v).cast("B") for v in values]
    sizes = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    return decode_records(b"".join(values), offsets, sizes, **kw)
