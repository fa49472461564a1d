"""Caffe ``Datum`` records: encode and decode with the protobuf runtime.

The message is built from a descriptor in code (no ``.proto`` file, no
generated module), with Caffe's field numbers:
channels 1, height 2, width 3, data 4, label 5, float_data 6, encoded 7.
"""

from __future__ import annotations

import io
from typing import Iterable, Sequence

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .errors import LmdbioError

__all__ = ["Datum", "encode", "decode", "decode_image", "decode_many", "encode_image_bytes"]


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
        from PIL import Image

        with Image.open(io.BytesIO(d.data)) as im:
            hwc = np.asarray(im)
        if hwc.ndim == 2:
            hwc = hwc[..., None]
        return np.moveaxis(hwc, -1, 0)
    c, h, w = d.channels, d.height, d.width
    if len(d.data) != c * h * w:
        raise LmdbioError(f"Datum holds {len(d.data)} data bytes but its shape {c}x{h}x{w} needs {c * h * w}")
    return np.frombuffer(d.data, dtype=np.uint8).reshape(c, h, w)


def decode_many(values: Sequence | Iterable, shape: tuple[int, int, int] | None = None,
                out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decode many Datums into one ``(n, c, h, w)`` uint8 array plus int64 labels.

    Args:
        values: serialized Datums (bytes-like).
        shape: ``(c, h, w)`` of every image; taken from the first record if None.
        out: optional preallocated ``(n, c, h, w)`` uint8 array to fill.
    Returns:
        ``(images, labels)``.
    """
    values = list(values)
    n = len(values)
    labels = np.empty(n, dtype=np.int64)
    if n == 0:
        c, h, w = shape or (0, 0, 0)
        return (out if out is not None else np.empty((0, c, h, w), np.uint8)), labels
    d = Datum()
    for i, v in enumerate(values):
        d.Clear()
        try:
            d.ParseFromString(bytes(v))
        except Exception as exc:
            raise LmdbioError(f"record {i} of the batch is not a Caffe Datum ({exc})") from None
        img = decode_image(d)
        if out is None:
            out = np.empty((n, *(shape or img.shape)), dtype=np.uint8)
        if img.shape != out.shape[1:]:
            raise LmdbioError(
                f"record {i} has image shape {img.shape}, expected {out.shape[1:]}; "
                "images of different sizes cannot share one array")
        out[i] = img
        labels[i] = d.label
    return out, labels
