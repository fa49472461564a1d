"""Batch: one rank's share of a global batch, one buffer plus offset and size arrays."""

from __future__ import annotations

import numpy as np

from . import datum, images
from .errors import ConfigurationError, LmdbioError

__all__ = ["Batch", "RESAMPLE"]

#: ``resample`` names of :meth:`Batch.as_datum_array` with ``size``: Pillow's filters.
RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


class Batch:
    """One rank's share of a global batch: a buffer plus per-record offsets and sizes.

    ``batch[i]`` is a zero-copy memoryview of record i's value. Views into
    shared memory stay valid until this rank's second following
    ``read_batch()``; copy what must live longer. ``close()`` never unmaps
    memory a batch still views: the Reader's last batches stay readable
    after it (their memory is freed by a later close of the same ranks).
    """

    __slots__ = ("buffer", "offsets", "sizes", "indices")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                 indices: np.ndarray):
        self.buffer = buffer
        self.offsets = offsets
        self.sizes = sizes
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> memoryview:
        o = int(self.offsets[i])
        return memoryview(self.buffer)[o:o + int(self.sizes[i])]

    def __iter__(self):
        mv = memoryview(self.buffer)
        for o, s in zip(self.offsets.tolist(), self.sizes.tolist()):
            yield mv[o:o + s]

    @property
    def nbytes(self) -> int:
        """Bytes of this rank's records."""
        return int(self.sizes.sum())

    def as_datum_array(self, out: np.ndarray | None = None, threads: int = 1,
                       size: tuple[int, int] | None = None,
                       resample: str = "bilinear") -> tuple[np.ndarray, np.ndarray]:
        """Decode the records as Caffe Datums: ``(n, c, h, w)`` uint8 images and labels.

        ``threads`` decode encoded (JPEG/PNG) records in parallel (see
        :func:`lmdbio.datum.decode_records`). Every image must have one shape, unless
        ``size=(h, w)``: then each image is decoded and resized to ``h x w`` with Pillow's
        ``resample`` filter (one of :data:`RESAMPLE`), as DALI users resize photos of mixed
        sizes; every image must have the channels of the first.
        """
        if size is None:
            return datum.decode_records(self.buffer, self.offsets, self.sizes, out=out,
                                        threads=threads)
        return _decode_each(self, threads, _check_size(size), _filter(resample), out)

    def as_datum_list(self, threads: int = 1) -> tuple[list[np.ndarray], np.ndarray]:
        """Decode the records as Caffe Datums of any sizes: a list of ``(c, h, w)`` uint8
        images, each its own array (no view of the batch), and the labels (int64).

        For photos of mixed sizes, which :meth:`as_datum_array` refuses. ``threads``
        decode the records in parallel, the caller among them (Pillow's JPEG decoder
        releases the GIL). Each image equals :func:`lmdbio.datum.decode_image` of its
        record; JPEGs are decoded straight into it (:func:`lmdbio.images.decode_into`).
        """
        return _decode_each(self, threads, None, None, None)


def _check_size(size) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in size)
        ok = (h, w) == tuple(size) and h > 0 and w > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigurationError(f"size must be (height, width), two positive ints, got {size!r}")
    return h, w


def _filter(resample: str) -> int:
    from PIL import Image

    if resample not in RESAMPLE:
        raise ConfigurationError(f"resample must be one of {', '.join(map(repr, RESAMPLE))}, "
                                 f"got {resample!r}")
    return getattr(Image.Resampling, resample.upper())


def _image(d) -> np.ndarray:
    """The ``(c, h, w)`` uint8 image of a parsed Datum, in an array of its own."""
    if not d.encoded:
        return datum.decode_image(d).copy()   # a view of the Datum's bytes: read-only
    head = images.jpeg_header(d.data)
    if head is not None and head[0] in (1, 3):   # grey or colour JPEG: straight into it
        img = np.empty(head, np.uint8)
        if images.decode_into(d.data, img) == head:
            return img
    return np.ascontiguousarray(images.decode_chw(d.data))


def _resized(d, size: tuple[int, int], resample: int) -> np.ndarray:
    """The image of a parsed Datum resized to ``size``, ``(c, h, w)``: decoded as
    :func:`_image` does, then each channel resized by Pillow as an ``L`` image (a view of the
    plane, no copy). Pillow resamples every band of an image alike, so this is
    ``Image.resize`` of the whole image, without packing the planes into pixels first."""
    from PIL import Image

    chw = _image(d) if d.encoded else datum.decode_image(d)
    if chw.shape[1:] == size:
        return chw
    h, w = size
    out = np.empty((chw.shape[0], h, w), np.uint8)
    for band, plane in zip(out, chw):
        plane = np.ascontiguousarray(plane)
        im = Image.frombuffer("L", plane.shape[::-1], plane, "raw", "L", 0, 1)
        band[...] = np.asarray(im.resize((w, h), resample))
    return out


def _parse(buf: np.ndarray, batch: Batch, i: int):
    o = int(batch.offsets[i])
    raw = buf[o:o + int(batch.sizes[i])]
    d = datum.Datum()
    try:
        d.ParseFromString(raw.tobytes())
    except Exception as exc:  # protobuf raises its own DecodeError
        raise LmdbioError(f"record {i} of the batch is not a Caffe Datum ({exc})") from None
    return d


def _decode_each(batch: Batch, threads: int, size, resample, out):
    """Every record decoded on its own, on ``threads`` threads: ``(list of images, labels)``,
    or with ``size`` ``(images (n, c, h, w) resized, labels)``."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    n = len(batch.offsets)
    buf = np.frombuffer(batch.buffer, np.uint8) if not isinstance(batch.buffer, np.ndarray) \
        else batch.buffer.reshape(-1).view(np.uint8)
    labels = np.empty(n, np.int64)
    if size is not None and out is None:
        first = _parse(buf, batch, 0) if n else None
        c = 0 if first is None else (images.shape_of(first.data)[0] if first.encoded
                                     else first.channels)
        out = np.empty((n, c, *size), np.uint8)
    if out is not None and (out.ndim != 4 or out.shape[0] != n or out.dtype != np.uint8
                            or out.shape[2:] != size):
        raise ValueError(f"out is a {out.dtype} array of shape {out.shape}; it must be uint8 "
                         f"(n, c, {size[0]}, {size[1]}) with n = {n} records")
    found = [None] * n

    def work(i: int):
        try:
            d = _parse(buf, batch, i)
        except LmdbioError as exc:
            return exc
        try:
            if size is None:
                found[i] = _image(d)
            else:
                img = _resized(d, size, resample)
                if img.shape != out.shape[1:]:
                    return LmdbioError(
                        f"record {i} has {img.shape[0]} channels, record 0 "
                        f"{out.shape[1]}: resized images share one array only with the same "
                        "channels; use as_datum_list() for images as they are")
                out[i] = img
        except LmdbioError as exc:
            return LmdbioError(f"record {i}: {exc}")
        except Exception as exc:  # Pillow's errors on a damaged JPEG/PNG
            return LmdbioError(f"record {i} holds an encoded image Pillow cannot decode ({exc})")
        labels[i] = d.label
        return None

    err = datum._each(threads, list(range(n)), work)
    if err is not None:
        raise err
    return (found if size is None else out), labels
