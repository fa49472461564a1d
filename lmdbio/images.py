"""Encoded Datum images (JPEG, PNG) decoded straight into a batch's rows, with Pillow's pixels.

The result is the image :func:`lmdbio.datum.decode_image` gives (``Image.open``
then ``np.asarray``), pixel for pixel; only the way there is shorter for the
common record, an 8-bit grey or colour JPEG:

- its header is read here (a few marker lengths, not Pillow's Python parser);
- libjpeg-turbo's TurboJPEG API (the ``simplejpeg`` package, Pillow's options:
  accurate integer DCT, smooth upsampling) decodes it with the GIL released,
  in DALI's layout (``hwc=True``, ``(h, w, c)``) and for grey images straight
  into the caller's array: no scratch image, no packing copy;
- in Caffe's layout (``(c, h, w)``) a colour JPEG is decoded to RGBX in a
  per-thread scratch buffer and the three channels come out of its 32-bit
  words with a shift and a narrowing copy each (contiguous numpy loops, not a
  strided HWC -> CHW transpose).

``simplejpeg`` is used once it has given Pillow's pixels on a few probe JPEGs
(:func:`fast_decoder`); where it does not import or disagrees, and for anything
else (PNG, CMYK, 12-bit or lossless JPEG, a header this reader does not follow,
a libjpeg warning or error), the image goes through ``Image.open``, so it
decodes, or fails, as the reference does.

Before anything is allocated for an image, :func:`check` reads the size its
file declares (the JPEG frame header, the PNG ``IHDR``, else Pillow's lazy
``Image.open``) and refuses, with :class:`~lmdbio.errors.ImageError`, empty
data, a file Pillow cannot identify, a zero side, and more pixels than
``max_pixels`` (default :data:`MAX_PIXELS`).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

import numpy as np

from .errors import ImageError

__all__ = ["MAX_PIXELS", "check", "check_sides", "decode_chw", "decode_into", "fast_decoder",
           "jpeg_header", "shape_of"]

#: Most pixels (height x width) an image may declare: Pillow's own limit for an error
#: (twice ``PIL.Image.MAX_IMAGE_PIXELS``'s default), 178,956,970, about 0.5 GB of RGB.
MAX_PIXELS = 2 * (1024 * 1024 * 1024 // 4 // 3)
_PNG = b"\x89PNG\r\n\x1a\n"

# Start-of-frame markers of the Huffman-coded DCT JPEGs (baseline, extended, progressive):
# libjpeg decodes them all with the options Pillow sets.
_SOF = frozenset((0xC0, 0xC1, 0xC2))
# Markers that end the header walk without an SOF this path takes: other SOFs (lossless,
# arithmetic, hierarchical), DHP/EXP, SOS, restart markers, SOI, EOI.
# TEM and 0x00 (a stuffed byte) have no length and do not belong in a header either.
_STOP = frozenset((0x00, 0x01, *range(0xC3, 0xDB), 0xDE, 0xDF)) - {0xC4, 0xCC}
# Components of the JPEGs libjpeg-turbo decodes here: grey and colour (CMYK goes to Pillow).
_RAW = (1, 3)


def jpeg_header(data) -> tuple[int, int, int] | None:
    """``(components, height, width)`` from the frame header of an 8-bit DCT JPEG, else None.

    The walk follows segment lengths from SOI to the first SOF; any other
    layout (junk between segments, another SOF kind, a cut header) is None,
    which sends the record to Pillow's own parser.
    """
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    pos = 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if marker in _STOP:
            return None
        length = data[pos + 2] << 8 | data[pos + 3]
        if marker in _SOF:
            if length < 8 or pos + 10 > n or data[pos + 4] != 8:
                return None
            height = data[pos + 5] << 8 | data[pos + 6]
            width = data[pos + 7] << 8 | data[pos + 8]
            return data[pos + 9], height, width
        if length < 2:
            return None
        pos += 2 + length
    return None


class _Scratch(threading.local):
    """This thread's scratch buffer (flat uint8) and uint32 temp, grown as images need."""

    buffer: np.ndarray = np.empty(0, np.uint8)
    temp: np.ndarray = np.empty(0, np.uint32)


_SCRATCH = _Scratch()
# A scratch buffer larger than this is made for its image and not kept by the thread.
_KEEP_BYTES = 16 << 20


def _scratch(nbytes: int, words: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """This thread's scratch: ``nbytes`` uint8 and ``words`` uint32 (flat; kept up to
    ``_KEEP_BYTES``, so images of mixed sizes reuse one buffer)."""
    s = _SCRATCH
    buffer, temp = s.buffer, s.temp
    if len(buffer) < nbytes:
        buffer = np.empty(nbytes, np.uint8)
        if nbytes <= _KEEP_BYTES:
            s.buffer = buffer
    if len(temp) < words:
        temp = np.empty(words, np.uint32)
        if 4 * words <= _KEEP_BYTES:
            s.temp = temp
    return buffer[:nbytes], temp[:words]


_FAST: list = []  # [decode_jpeg or None], once checked
_FAST_LOCK = threading.Lock()


def fast_decoder() -> Callable[..., np.ndarray] | None:
    """``simplejpeg.decode_jpeg`` when it imports and gives Pillow's pixels on probe JPEGs
    (4:2:0, 4:2:2, 4:4:4, progressive, grey), else None (every JPEG then goes through
    ``Image.open``). Checked once per process."""
    if _FAST:
        return _FAST[0]
    with _FAST_LOCK:
        if not _FAST:
            _FAST.append(_probe())
        return _FAST[0]


def _probe() -> Callable[..., np.ndarray] | None:
    """simplejpeg's decode_jpeg if it decodes small Pillow-written JPEGs as Image.open does."""
    try:
        from simplejpeg import decode_jpeg
    except ImportError:
        return None
    from PIL import Image

    y, x = np.mgrid[0:19, 0:35]
    rgb = np.stack([x * 7, y * 13, (x * y) % 256], -1).astype(np.uint8)
    for mode, save in (("RGB", dict(quality=90)), ("RGB", dict(quality=75, subsampling=1)),
                       ("RGB", dict(quality=95, subsampling=0)),
                       ("RGB", dict(quality=80, progressive=True)), ("L", dict(quality=85))):
        f = io.BytesIO()
        Image.fromarray(rgb).convert(mode).save(f, "JPEG", **save)
        with Image.open(f) as im:
            want = np.asarray(im)
        try:
            got = decode_jpeg(f.getvalue(), "gray" if mode == "L" else "rgb")
        except ValueError:
            return None
        if not np.array_equal(got, want.reshape(got.shape)):
            return None
    return decode_jpeg


def _decode_jpeg(decode, data, c: int, h: int, w: int, out: np.ndarray, hwc: bool) -> bool:
    """libjpeg-turbo's pixels of a grey or colour JPEG into ``out`` (``(c, h, w)``, or
    ``(h, w, c)`` with ``hwc``); False when they are not of that size.

    Raises ValueError (simplejpeg's) for a libjpeg warning or error.
    """
    if c == 1 or hwc:  # one memory order for both layouts: straight into out when we may
        direct = out.flags.c_contiguous
        target = out if direct else _scratch(h * w * c)[0]
        got = decode(data, "gray" if c == 1 else "rgb", buffer=target)
        if got.shape != (h, w, c):
            return False
        if not direct:
            np.copyto(out, got.reshape(out.shape))
        return True
    buffer, temp = _scratch(4 * h * w, h * w)
    got = decode(data, "rgbx", buffer=buffer)
    if got.shape != (h, w, 4):
        return False
    # RGBX bytes read as little-endian words: R is bits 0-7, G 8-15, B 16-23.
    words = buffer.view("<u4").reshape(h, w)
    temp = temp.reshape(h, w)
    np.copyto(out[0], words, casting="unsafe")  # uint32 -> uint8 keeps the low byte
    np.right_shift(words, 8, out=temp)
    np.copyto(out[1], temp, casting="unsafe")
    np.right_shift(words, 16, out=temp)
    np.copyto(out[2], temp, casting="unsafe")
    return True


def decode_chw(data) -> np.ndarray:
    """The reference: ``Image.open`` then ``np.asarray``, as a ``(c, h, w)`` uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        hwc = np.asarray(im)
    if hwc.ndim == 2:
        hwc = hwc[..., None]
    return np.moveaxis(hwc, -1, 0)


def check_sides(c: int | None, h: int, w: int, max_pixels: int | None) -> None:
    """Refuse (:class:`~lmdbio.errors.ImageError`) a declared side of 0 or less (``c`` None:
    not known) and more than ``max_pixels`` pixels (None: no limit)."""
    if h <= 0 or w <= 0 or (c is not None and c <= 0):
        what = f"{h} x {w} image" + ("" if c is None else f" of {c} channels")
        raise ImageError(f"declares a {what}: every side must be positive (a damaged or "
                         "forged header)")
    if max_pixels is not None and h * w > max_pixels:
        raise ImageError(f"declares {h} x {w} = {h * w:,} pixels, more than max_pixels = "
                         f"{max_pixels:,} (a decompression bomb?); pass a larger max_pixels "
                         "to decode it")


def check(data, max_pixels: int | None = MAX_PIXELS) -> tuple[int, int, int] | None:
    """Check the size an encoded image declares, before anything is allocated for it.

    Returns the ``(components, height, width)`` of :func:`jpeg_header` when there is one,
    else None. Raises :class:`~lmdbio.errors.ImageError` for empty data, data Pillow
    cannot identify, a side of 0 (or 0 components), or more than ``max_pixels`` pixels
    (None: no limit of ours; Pillow's own ``Image.MAX_IMAGE_PIXELS`` check still applies).
    """
    if len(data) == 0:
        raise ImageError("holds no image data (an encoded image of 0 bytes)")
    head = jpeg_header(data)
    if head is not None:
        check_sides(*head, max_pixels)
        return head
    if len(data) >= 24 and data[:8] == _PNG and data[12:16] == b"IHDR":
        h, w = int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    else:
        from PIL import Image, UnidentifiedImageError

        try:  # lazy: reads the header, allocates no pixels
            with Image.open(io.BytesIO(data)) as im:
                w, h = im.size
        except Image.DecompressionBombError as exc:
            raise ImageError(f"declares more pixels than Pillow allows ({exc})") from None
        except UnidentifiedImageError:
            raise ImageError("holds an encoded image Pillow cannot decode (no format it knows "
                             f"starts {bytes(data[:8])!r})") from None
        except Exception as exc:  # a cut or damaged header: Pillow's words
            raise ImageError(f"holds an encoded image Pillow cannot decode ({exc})") from None
    check_sides(None, h, w, max_pixels)
    return None


def shape_of(data) -> tuple[int, int, int]:
    """The ``(c, h, w)`` :func:`decode_chw` gives: from the header of a grey or colour JPEG,
    else by decoding."""
    head = jpeg_header(data)
    if head is not None and head[0] in _RAW:
        return head
    c, h, w = decode_chw(data).shape
    return c, h, w


def decode_into(data, out: np.ndarray, hwc: bool = False) -> tuple[int, ...]:
    """Decode a JPEG/PNG file into ``out``, a ``(c, h, w)`` uint8 array (``(h, w, c)`` with
    ``hwc``), if it has that shape.

    Returns the image's ``(c, h, w)``; ``out`` is written only when that is
    its shape. Raises Pillow's errors for a file it cannot decode.
    """
    head = jpeg_header(data)
    want = (out.shape[2], out.shape[0], out.shape[1]) if hwc else out.shape
    if head is not None and head == want and head[0] in _RAW:
        from PIL import Image

        decode = fast_decoder()
        limit = Image.MAX_IMAGE_PIXELS  # Image.open's bomb check decides beyond it
        if decode is not None and (limit is None or head[1] * head[2] <= limit):
            try:
                if _decode_jpeg(decode, data, *head, out, hwc):
                    return head
            except ValueError:
                pass  # a libjpeg warning or error: Image.open decodes it, or says why not
    image = decode_chw(data)
    if image.shape == want:
        out[...] = image.transpose(1, 2, 0) if hwc else image
    return image.shape
