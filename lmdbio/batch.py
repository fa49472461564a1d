"""Batch: one rank's share of a global batch, one buffer plus offset and size arrays."""

from __future__ import annotations

import numpy as np

from . import datum, images, rawdatum
from .errors import ConfigurationError, ImageError
from .workers import each

__all__ = ["Batch", "ChunkRecords", "RESAMPLE", "key_at"]

#: ``resample`` names of :meth:`Batch.as_datum_array` with ``size``: Pillow's filters.
RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


class Batch:
    """One rank's share of a global batch: a buffer plus per-record offsets and sizes.

    ``batch[i]`` is a zero-copy memoryview of record i's value. Views into
    shared memory stay valid until this rank's second following
    ``read_batch()``; copy what must live longer. ``close()`` never unmaps
    memory a batch still views: the Reader's last batches stay readable
    after it (their memory is freed by a later close of the same ranks).
    ``source``: the LMDB the records come from, or None; decode errors name
    a record's key from it (:meth:`key_of`). ``chunk`` and ``row``: a Reader's
    batch knows the hand-off its records came in (:class:`ChunkRecords`) and
    the row of its first record there, so that :meth:`as_datum_array` decodes
    a chunk once for all of its batches; None and 0 for any other batch.
    """

    __slots__ = ("buffer", "offsets", "sizes", "indices", "source", "chunk", "row")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                 indices: np.ndarray, source=None, chunk: ChunkRecords | None = None,
                 row: int = 0):
        self.buffer = buffer
        self.offsets = offsets
        self.sizes = sizes
        self.indices = indices
        self.source = source
        self.chunk = chunk
        self.row = row

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> memoryview:
        o = int(self.offsets[i])
        # An ndarray is a buffer; numpy's stubs declare __buffer__ for Python 3.12 and later only.
        return memoryview(self.buffer)[o:o + int(self.sizes[i])]  # type: ignore[arg-type]

    def __iter__(self):
        mv = memoryview(self.buffer)
        for o, s in zip(self.offsets.tolist(), self.sizes.tolist()):
            yield mv[o:o + s]

    @property
    def nbytes(self) -> int:
        """Bytes of this rank's records."""
        return int(self.sizes.sum())

    def key_of(self, index: int) -> bytes | None:
        """The LMDB key of dataset record ``index`` (its place in key order), read again from
        :attr:`source`; None without one. For error messages: it walks the keys up to it."""
        return None if self.source is None else key_at(self.source, index)

    def as_datum_array(self, out: np.ndarray | None = None, threads: int = 1,
                       size: tuple[int, int] | None = None, resample: str = "bilinear", *,
                       layout: str = "CHW", copy: bool = True,
                       max_pixels: int | None = datum.MAX_IMAGE_PIXELS
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Decode the records as Caffe Datums: ``(n, c, h, w)`` uint8 images and labels.

        ``threads`` decode encoded (JPEG/PNG) records in parallel (see
        :func:`lmdbio.datum.decode_records`). Every image must have one shape, unless
        ``size=(h, w)``: then each image is decoded and resized to ``h x w`` with Pillow's
        ``resample`` filter (one of :data:`RESAMPLE`), as DALI users resize photos of mixed
        sizes; every image must have the channels of the first.

        ``layout="HWC"`` gives ``(n, h, w, c)``, DALI's layout (JPEGs decode without a
        channel split). ``copy=False`` lets the images of raw Datums of one layout at one
        stride (a Reader's batches: every fetcher lays them at one stride) be a read-only
        view of this batch's buffer, valid as long as the batch's own views (until the
        second following ``read_batch()``). An image that declares a
        side of 0 or more than ``max_pixels`` pixels (default
        :data:`lmdbio.datum.MAX_IMAGE_PIXELS`, 178,956,970; None: no limit of ours), or
        whose data is empty or unreadable, raises :class:`~lmdbio.errors.ImageError`
        naming the record's dataset index and key, before anything is allocated for it.
        """
        if size is None:
            if out is None and self.chunk is not None and len(self.offsets):
                # A Reader's batch: its chunk's records decoded once for all of its batches.
                hwc = datum._hwc(layout)
                datum._check_args(len(self.offsets), self.sizes, threads, None, hwc)
                got = self.chunk.uniform(max_pixels)
                if got is not None:
                    rows = slice(self.row, self.row + len(self.offsets))
                    return rawdatum.deliver(got[0][rows], None, hwc, not copy), got[1][rows].copy()
            return datum.decode_records(self.buffer, self.offsets, self.sizes, out=out,
                                        threads=threads, layout=layout, copy=copy,
                                        max_pixels=max_pixels, indices=self.indices,
                                        key_of=self.key_of)
        return _decode_each(self, threads, _check_size(size), _filter(resample), out,
                            datum._hwc(layout), max_pixels)

    def as_datum_list(self, threads: int = 1, *, layout: str = "CHW",
                      max_pixels: int | None = datum.MAX_IMAGE_PIXELS
                      ) -> tuple[list[np.ndarray], np.ndarray]:
        """Decode the records as Caffe Datums of any sizes: a list of ``(c, h, w)`` uint8
        images (``layout="HWC"``: ``(h, w, c)``), each its own array (no view of the
        batch), and the labels (int64).

        For photos of mixed sizes, which :meth:`as_datum_array` refuses. ``threads``
        decode the records in parallel, the caller among them (the JPEG decoder
        releases the GIL). Each image equals :func:`lmdbio.datum.decode_image` of its
        record; JPEGs are decoded straight into it (:func:`lmdbio.images.decode_into`).
        Bad images raise as in :meth:`as_datum_array`.
        """
        return _decode_each(self, threads, None, None, None, datum._hwc(layout), max_pixels)


class ChunkRecords:
    """The records of one hand-off (a reader's chunk, or a window's share of it) that a rank's
    batches view: ``buffer`` with every record's ``offsets`` and ``sizes``, batch after batch.

    :meth:`uniform` decodes them once, for every batch of the chunk: a batch's
    ``as_datum_array()`` is then two slices of it, not a check of its own records. It
    lives as its batches' views do (the buffer is refilled only after the rank's second
    following ``read_batch()``).
    """

    __slots__ = ("buffer", "offsets", "sizes", "_uniform")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray):
        self.buffer, self.offsets, self.sizes = buffer, offsets, sizes
        self._uniform: dict = {}

    def batch(self, row: int, n: int, indices: np.ndarray) -> Batch:
        """The :class:`Batch` of records ``row .. row + n - 1`` (views of this chunk's arrays)."""
        end = row + n
        return Batch(self.buffer, self.offsets[row:end], self.sizes[row:end], indices, chunk=self,
                     row=row)

    def uniform(self, max_pixels: int | None):
        """``(images, labels)`` of every record, ``(n, c, h, w)`` (a read-only view of the
        buffer when they lie at one stride), when all are raw Datums of one layout of at
        most ``max_pixels`` pixels, else None (see :func:`lmdbio.rawdatum.decode_uniform`)."""
        try:
            return self._uniform[max_pixels]
        except KeyError:
            pass
        got = None
        if len(self.offsets):
            got = rawdatum.decode_uniform(datum._bytes(self.buffer), datum._int64s(self.offsets),
                                          datum._int64s(self.sizes), None, None, view=True,
                                          max_pixels=max_pixels)
        self._uniform[max_pixels] = got
        return got


def key_at(path, index: int) -> bytes | None:
    """The key of record ``index`` in key order of the LMDB at ``path``, or None when there is
    none or the file cannot be read (a cursor walk: for error messages, not hot paths)."""
    from itertools import islice

    from .lmdbenv import acquire
    from .recordindex import check_tree

    try:
        handle = acquire(path, check=check_tree)
    except Exception:
        return None
    try:
        with handle.env.begin() as txn:
            keys = txn.cursor().iternext(keys=True, values=False)
            got = next(islice(keys, int(index), None), None)
            return None if got is None else bytes(got)
    except Exception:
        return None
    finally:
        handle.release()


def _check_size(size) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in size)
        ok = (h, w) == tuple(size) and h > 0 and w > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigurationError(f"size must be (height, width), two positive ints, got {size!r}",
                                 option="size")
    return h, w


def _filter(resample: str) -> int:
    from PIL import Image

    if resample not in RESAMPLE:
        raise ConfigurationError(f"resample must be one of {', '.join(map(repr, RESAMPLE))}, "
                                 f"got {resample!r}", option="resample")
    return getattr(Image.Resampling, resample.upper())


def _image(d, hwc: bool, max_pixels) -> np.ndarray:
    """The image of a parsed Datum, ``(c, h, w)`` (``(h, w, c)``), in an array of its own,
    after :func:`lmdbio.datum.check_image`."""
    head = datum.check_image(d, max_pixels)
    if not d.encoded:   # a view of the Datum's bytes (read-only): copied, transposed or not
        img = np.frombuffer(d.data, np.uint8).reshape(head)
        return np.ascontiguousarray(img.transpose(1, 2, 0)) if hwc else img.copy()
    if head is not None and head[0] in (1, 3):   # grey or colour JPEG: straight into it
        c, h, w = head
        img = np.empty((h, w, c) if hwc else head, np.uint8)
        if images.decode_into(d.data, img, hwc) == head:
            return img
    chw = images.decode_chw(d.data)
    img = np.ascontiguousarray(chw.transpose(1, 2, 0) if hwc else chw)
    return img if img.flags.writeable and img.base is None else img.copy()


def _resized(d, size: tuple[int, int], resample: int, max_pixels) -> np.ndarray:
    """The image of a parsed Datum resized to ``size``, ``(c, h, w)``: decoded as
    :func:`_image` does, then each channel resized by Pillow as an ``L`` image (a view of the
    plane, no copy). Pillow resamples every band of an image alike, so this is
    ``Image.resize`` of the whole image, without packing the planes into pixels first."""
    from PIL import Image

    chw = _image(d, False, max_pixels) if d.encoded else \
        datum.decode_image(d, max_pixels=max_pixels)
    if chw.shape[1:] == size:
        return chw
    h, w = size
    out = np.empty((chw.shape[0], h, w), np.uint8)
    for band, plane in zip(out, chw):
        plane = np.ascontiguousarray(plane)
        im = Image.frombuffer("L", plane.shape[::-1], plane, "raw", "L", 0, 1)
        band[...] = np.asarray(im.resize((w, h), resample))
    return out


def _resize_target(batch: Batch, buf, size, out, hwc: bool, max_pixels) -> np.ndarray:
    """The ``(n, c, h, w)`` array resized images go to (a view of ``out`` when ``hwc``): the
    caller's, checked, or a new one with the channels of record 0."""
    n = len(batch.offsets)
    if out is None:
        try:
            d = datum._parse(buf, int(batch.offsets[0]), int(batch.sizes[0]), 0) if n else None
            c = 0 if d is None else datum._shape_of(d, max_pixels)[0]
        except ImageError as exc:
            raise datum._named(ImageError(str(exc), position=0), batch.indices,
                               batch.key_of) from None
        out = np.empty((n, *size, c) if hwc else (n, c, *size), np.uint8)
    if out.ndim != 4 or out.shape[0] != n or out.dtype != np.uint8 or \
            (out.shape[1:3] if hwc else out.shape[2:]) != size:
        want = f"(n, {size[0]}, {size[1]}, c)" if hwc else f"(n, c, {size[0]}, {size[1]})"
        raise ValueError(f"out is a {out.dtype} array of shape {out.shape}; it must be uint8 "
                         f"{want} with n = {n} records")
    return out


def _decode_each(batch: Batch, threads: int, size, resample, out, hwc: bool, max_pixels):
    """Every record decoded on its own, on ``threads`` threads: ``(list of images, labels)``,
    or with ``size`` ``(images (n, c, h, w) resized, labels)``."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    n = len(batch.offsets)
    buf = datum._bytes(batch.buffer)
    labels = np.empty(n, np.int64)
    if size is not None:
        out = _resize_target(batch, buf, size, out, hwc, max_pixels)
        target = out.transpose(0, 3, 1, 2) if hwc else out
    found: list[np.ndarray | None] = [None] * n

    def work(i: int):
        try:
            d = datum._parse(buf, int(batch.offsets[i]), int(batch.sizes[i]), i)
            if size is None:
                found[i] = _image(d, hwc, max_pixels)
            else:
                img = _resized(d, size, resample, max_pixels)
                if img.shape != target.shape[1:]:
                    return ImageError(
                        f"has {img.shape[0]} channels, record 0 {target.shape[1]}: resized "
                        "images share one array only with the same channels; use "
                        "as_datum_list() for images as they are", position=i)
                target[i] = img
        except ImageError as exc:
            return ImageError(str(exc), position=i)
        except Exception as exc:  # Pillow's errors on a damaged JPEG/PNG
            return ImageError(f"holds an encoded image Pillow cannot decode ({exc})", position=i)
        labels[i] = d.label
        return None

    err = each(threads, list(range(n)), work)
    if err is not None:
        raise datum._named(err, batch.indices, batch.key_of)
    return (found if size is None else out), labels
