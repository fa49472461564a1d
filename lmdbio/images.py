"""Encoded Datum images (JPEG, PNG) decoded with Pillow straight into a batch's ``(c, h, w)`` rows.

The result is the image :func:`lmdbio.datum.decode_image` gives (``Image.open``
then ``np.asarray``), pixel for pixel; only the way there is shorter for the
common record, an 8-bit grey or colour JPEG:

- its header is read here (a few marker lengths, not Pillow's Python parser);
- Pillow's JPEG decoder (libjpeg-turbo, the same options) writes the pixels
  into a per-thread scratch image that is a numpy array, colour as RGBX
  (libjpeg-turbo's own 4-byte output, the same values as its RGB);
- the three channels come out of the 32-bit RGBX words with a shift and a
  narrowing copy each, contiguous numpy loops, instead of Pillow's RGBX -> RGB
  packing copy and a strided HWC -> CHW transpose.

Anything else (PNG, CMYK, 12-bit or lossless JPEG, a header this reader does
not follow, a decoder error) goes through ``Image.open``, so it decodes, or
fails, as the reference does. The decoder releases the GIL, so threads decode
in parallel.

In DALI's layout (``hwc=True``, ``(h, w, c)``) Pillow packs the RGBX pixels to
RGB and they are copied as they are: no channel split.

Before anything is allocated for an image, :func:`check` reads the size its
file declares (the JPEG frame header, the PNG ``IHDR``, else Pillow's lazy
``Image.open``) and refuses, with :class:`~lmdbio.errors.ImageError`, empty
data, a file Pillow cannot identify, a zero side, and more pixels than
``max_pixels`` (default :data:`MAX_PIXELS`).
"""

from __future__ import annotations

import io
import threading
from typing import Any

import numpy as np

from .errors import ImageError

__all__ = ["MAX_PIXELS", "check", "check_sides", "decode_chw", "decode_into", "jpeg_header", "shape_of"]

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
# Components -> the Pillow mode and the decoder's raw mode the scratch image takes.
_RAW = {1: "L", 3: "RGBX"}


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
    """This thread's decode target: ``(key, array, Pillow image on that array, uint32 temp)``."""

    target: tuple[tuple[str, int, int], np.ndarray, Any, np.ndarray | None] | None = None


_SCRATCH = _Scratch()


# A scratch image larger than this is made for its record and not kept by the thread.
_KEEP_BYTES = 16 << 20


def _target(raw: str, height: int, width: int):
    """This thread's scratch image of ``raw`` mode and this size (the last one is kept)."""
    got = _SCRATCH.target
    if got is None or got[0] != (raw, height, width):
        from PIL import Image

        shape = (height, width, 4) if raw == "RGBX" else (height, width)
        array = np.empty(shape, np.uint8)
        image = Image.frombuffer(raw, (width, height), array, "raw", raw, 0, 1)
        temp = np.empty((height, width), np.uint32) if raw == "RGBX" else None
        got = ((raw, height, width), array, image, temp)
        if array.nbytes <= _KEEP_BYTES:
            _SCRATCH.target = got
    return got


def _decode_jpeg(data, raw: str, height: int, width: int, out: np.ndarray, hwc: bool) -> None:
    """Pillow's JPEG decoder into the scratch image, then its channels into ``out``
    (``(c, h, w)``, or ``(h, w, c)`` with ``hwc``).

    Raises ValueError or OSError (Pillow's) when the decoder does not finish.
    """
    _, array, image, temp = _target(raw, height, width)
    image.frombytes(data, "jpeg", raw, "")
    if temp is None:
        np.copyto(out[..., 0] if hwc else out[0], array)
        return
    if hwc:  # RGBX -> RGB by Pillow's packer, then one plain copy (numpy's 4 -> 3 byte
        # strided copy is some 30 times slower, its inner loop three bytes long)
        packed = np.frombuffer(image.tobytes("raw", "RGB"), np.uint8)
        np.copyto(out, packed.reshape(height, width, 3))
        return
    # RGBX bytes read as little-endian words: R is bits 0-7, G 8-15, B 16-23.
    words = array.view("<u4").reshape(height, width)
    np.copyto(out[0], words, casting="unsafe")  # uint32 -> uint8 keeps the low byte
    np.right_shift(words, 8, out=temp)
    np.copyto(out[1], temp, casting="unsafe")
    np.right_shift(words, 16, out=temp)
    np.copyto(out[2], temp, casting="unsafe")


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

        limit = Image.MAX_IMAGE_PIXELS  # Image.open's bomb check decides beyond it
        if limit is None or head[1] * head[2] <= limit:
            try:
                _decode_jpeg(data, _RAW[head[0]], head[1], head[2], out, hwc)
                return head
            except (ValueError, OSError):
                pass  # cut or damaged: Image.open decodes it, or says why not
    image = decode_chw(data)
    if image.shape == want:
        out[...] = image.transpose(1, 2, 0) if hwc else image
    return image.shape
