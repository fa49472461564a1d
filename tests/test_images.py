"""Encoded Datums (JPEG, PNG) decoded by the batch decoder: the pixels Image.open gives."""

import io

import numpy as np
import pytest
from PIL import Image

from lmdbio import datum, images
from lmdbio.errors import LmdbioError


def _photo(h, w, seed=0):
    """An ``(h, w, 3)`` image with smooth parts and noise, like the synthetic datasets."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) % 256], -1)
    return np.clip(smooth + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def _file(hwc, fmt="JPEG", mode=None, **save):
    buf = io.BytesIO()
    im = Image.fromarray(hwc)
    if mode is not None:
        im = im.convert(mode)
    im.save(buf, format=fmt, **save)
    return buf.getvalue()


def _pillow(data):
    """What ``Image.open`` and ``np.asarray`` give, as ``(c, h, w)``: written out here, not
    taken from lmdbio, so a change there cannot move the reference."""
    with Image.open(io.BytesIO(data)) as im:
        hwc = np.asarray(im)
    return np.moveaxis(hwc[..., None] if hwc.ndim == 2 else hwc, -1, 0)


def _record(data, label):
    return datum.encode(encoded_bytes=data, label=label)


def _decode(files, threads):
    return datum.decode_many([_record(f, i) for i, f in enumerate(files)], threads=threads)


# JPEGs of every kind the fast path takes: 4:2:0, 4:2:2, 4:4:4, progressive, restart
# markers, optimized tables, sizes that are not whole MCUs, grey.
JPEGS = {
    "420": dict(quality=90),
    "422": dict(quality=75, subsampling=1),
    "444": dict(quality=95, subsampling=0),
    "progressive": dict(quality=85, progressive=True),
    "restarts": dict(quality=90, restart_marker_rows=1),
    "optimized": dict(quality=60, optimize=True),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", [*JPEGS, "grey"])
def test_jpegs_equal_pillow_record_for_record(kind, threads, monkeypatch):
    shape = (37, 53)  # not a whole number of 16x16 MCUs
    if kind == "grey":
        files = [_file(_photo(*shape, s), mode="L", quality=90) for s in range(5)]
    else:
        files = [_file(_photo(*shape, s), **JPEGS[kind]) for s in range(5)]
    want = np.stack([_pillow(f) for f in files])
    assert all(images.jpeg_header(f) == want.shape[1:] for f in files)
    # These take the fast path: Image.open is not called.
    monkeypatch.setattr(images, "decode_chw", lambda data: pytest.fail("fell back to Image.open"))
    got, labels = _decode(files, threads)
    assert np.array_equal(got, want) and list(labels) == list(range(5))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA"])
def test_pngs_equal_pillow(mode, threads):
    files = [_file(_photo(20, 30, s), "PNG", mode=mode) for s in range(4)]
    want = np.stack([_pillow(f) for f in files])
    got, _ = _decode(files, threads)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_cmyk_jpeg_falls_back_to_pillow():
    files = [_file(_photo(16, 24, s), mode="CMYK", quality=90) for s in range(3)]
    assert images.jpeg_header(files[0])[0] == 4
    got, _ = _decode(files, 1)
    assert got.shape == (3, 4, 16, 24) and np.array_equal(got, np.stack([_pillow(f) for f in files]))


@pytest.mark.parametrize("threads", [1, 2])
def test_raw_jpeg_png_in_one_batch(threads):
    hwc = _photo(12, 20, 1)
    raw = datum.encode(np.moveaxis(hwc, -1, 0).copy(), 7)
    jpg, png = _record(_file(hwc), 8), _record(_file(hwc, "PNG"), 9)
    blobs = [jpg, raw, png, jpg, raw]
    got, labels = datum.decode_many(blobs, threads=threads)
    assert list(labels) == [8, 7, 9, 8, 7]
    assert np.array_equal(got[1], np.moveaxis(hwc, -1, 0)) and np.array_equal(got[2], got[1])
    assert np.array_equal(got[0], _pillow(_file(hwc)))


def _damaged(data):
    """``data`` with bytes of the entropy-coded scan changed: libjpeg warns and goes on."""
    b = bytearray(data)
    sos = bytes(b).index(b"\xff\xda")
    for k in range(sos + 40, len(b) - 10, 97):
        b[k] = 0x5A
    return bytes(b)


def _junk_between_segments(data):
    """A stray byte before the second segment: Pillow's parser skips it, ours gives up."""
    at = 2 + 2 + (data[4] << 8 | data[5])  # after SOI and APP0
    return data[:at] + b"\x00" + data[at:]


@pytest.mark.parametrize("odd", ["damaged", "junk", "fill-bytes"])
def test_odd_jpegs_decode_as_pillow_does(odd):
    good = _file(_photo(24, 40, 2))
    if odd == "damaged":
        bad = _damaged(good)
    elif odd == "junk":
        bad = _junk_between_segments(good)
        assert images.jpeg_header(bad) is None
    else:  # 0xFF fill bytes before a marker: allowed, our walk skips them
        bad = good[:2] + b"\xff\xff" + good[2:]
        assert images.jpeg_header(bad) == (3, 24, 40)
    try:
        want = _pillow(bad)
    except OSError:
        pytest.skip("this Pillow cannot decode the odd file at all")
    for threads in (1, 2):
        got, _ = _decode([good, bad, good], threads)
        assert np.array_equal(got[1], want) and np.array_equal(got[0], _pillow(good))


@pytest.mark.parametrize("threads", [1, 2])
def test_cut_jpeg_is_an_error_naming_the_record(threads):
    good = _file(_photo(24, 40, 3))
    cut = good[:len(good) // 2]
    with pytest.raises(LmdbioError, match="record 3 of the batch holds an encoded image Pillow cannot decode"):
        _decode([good, good, good, cut, good, cut], threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_jpeg_of_another_size_is_named(threads):
    files = [_file(_photo(24, 40, s)) for s in range(3)]
    other = _file(_photo(40, 24, 9))
    with pytest.raises(LmdbioError, match=r"record 2 of the batch has image shape \(3, 40, 24\), "
                                          r"expected \(3, 24, 40\)"):
        _decode([*files[:2], other, files[2]], threads)


def test_headers_this_path_does_not_take():
    assert images.jpeg_header(_file(_photo(8, 8), "PNG")) is None
    assert images.jpeg_header(b"\xff\xd8\xff") is None
    jpg = _file(_photo(8, 8))
    sof = jpg.index(b"\xff\xc0")
    lossless = jpg[:sof + 1] + b"\xc3" + jpg[sof + 2:]
    assert images.jpeg_header(lossless) is None
    twelve_bit = jpg[:sof + 4] + b"\x0c" + jpg[sof + 5:]
    assert images.jpeg_header(twelve_bit) is None


def test_large_scratch_is_not_kept_by_the_thread():
    small, large = _file(_photo(16, 16)), _file(_photo(2100, 2100), quality=50)
    _decode([small], 1)
    kept = images._SCRATCH.target
    got, _ = _decode([large], 1)
    assert np.array_equal(got[0], _pillow(large))
    assert images._SCRATCH.target is kept  # 2100 x 2100 RGBX is over 16 MiB
