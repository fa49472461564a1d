"""Encoded Datums (JPEG, PNG) decoded by the batch decoder: the pixels Image.open gives,
grey and colour JPEGs by libjpeg-turbo (simplejpeg) straight into the batch, anything else
by Image.open."""

import functools
import io

import numpy as np
import pytest
from PIL import Image

from lmdbio import datum, images
from lmdbio.batch import Batch
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


def _decode(files, threads, layout="CHW", out=None):
    return datum.decode_many([_record(f, i) for i, f in enumerate(files)], threads=threads,
                             layout=layout, out=out)


def _in(layout, chw):
    """A ``(c, h, w)`` image (or a stack of them) in ``layout``."""
    return chw if layout == "CHW" else np.moveaxis(chw, -3, -1)


@pytest.fixture
def pillow_calls(monkeypatch):
    """The records that went through ``Image.open`` (images.decode_chw), counted."""
    calls = []
    real = images.decode_chw
    monkeypatch.setattr(images, "decode_chw", lambda data: calls.append(1) or real(data))
    return calls


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


def _jpegs(kind, shape, n=5):
    if kind == "grey":
        return [_file(_photo(*shape, s), mode="L", quality=90) for s in range(n)]
    return [_file(_photo(*shape, s), **JPEGS[kind]) for s in range(n)]


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", [*JPEGS, "grey"])
def test_jpegs_equal_pillow_record_for_record(kind, threads, layout, pillow_calls):
    files = _jpegs(kind, (37, 53))  # not a whole number of 16x16 MCUs
    want = np.stack([_pillow(f) for f in files])
    assert all(images.jpeg_header(f) == want.shape[1:] for f in files)
    got, labels = _decode(files, threads, layout)
    assert np.array_equal(got, _in(layout, want)) and list(labels) == list(range(5))
    assert pillow_calls == []  # libjpeg-turbo decoded them all: Image.open was not called


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
@pytest.mark.parametrize("threads", [1, 2])
def test_jpegs_of_mixed_sizes_equal_decode_image(threads, layout, pillow_calls):
    """as_datum_list: colour and grey, baseline and progressive, each of its own size."""
    files = [_file(_photo(17 + 9 * s, 90 - 6 * s, s), **JPEGS[kind])
             for s, kind in enumerate([*JPEGS, *JPEGS])]
    files[3] = _file(_photo(61, 29, 3), mode="L", quality=70)
    records = [_record(f, 10 + i) for i, f in enumerate(files)]
    want = [datum.decode_image(datum.decode(r), layout=layout) for r in records]
    pillow_calls.clear()
    sizes = np.array([len(r) for r in records], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    batch = Batch(np.frombuffer(b"".join(records), np.uint8), offsets, sizes,
                  np.arange(len(records)))
    got, labels = batch.as_datum_list(threads=threads, layout=layout)
    assert len({g.shape for g in got}) == len(files)
    assert {g.shape[layout.index("C")] for g in got} == {1, 3}
    assert all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))
    assert list(labels) == list(range(10, 10 + len(files))) and pillow_calls == []


@pytest.mark.parametrize("kind", ["420", "grey"])
@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_out_that_is_not_contiguous_gets_the_same_pixels(kind, layout, pillow_calls):
    files = _jpegs(kind, (19, 26), 3)
    want = np.stack([_pillow(f) for f in files])
    shape = _in(layout, np.empty(want.shape[1:])).shape
    out = np.empty((3, shape[0], 2 * shape[1], shape[2]), np.uint8)[:, :, ::2]  # strided rows
    assert not out[0].flags.c_contiguous
    got, _ = _decode(files, 1, layout, out=out)
    assert got is out and np.array_equal(out, _in(layout, want)) and pillow_calls == []


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_without_the_fast_decoder_image_open_decodes_them(layout, monkeypatch, pillow_calls):
    monkeypatch.setattr(images, "_FAST", [None])  # simplejpeg absent, or refused by the probe
    files = _jpegs("420", (22, 31), 3)
    got, _ = _decode(files, 2, layout)
    assert np.array_equal(got, _in(layout, np.stack([_pillow(f) for f in files])))
    assert len(pillow_calls) == len(files)


def test_a_decoder_that_disagrees_with_pillow_is_not_used(monkeypatch):
    """The probe: libjpeg-turbo with its fast DCT and upsampling gives other pixels than
    Pillow's options, so it is refused and Image.open decodes every JPEG."""
    import simplejpeg

    assert images.fast_decoder() is simplejpeg.decode_jpeg  # this venv has it, and it agrees
    monkeypatch.setattr(images, "_FAST", [])
    monkeypatch.setattr(simplejpeg, "decode_jpeg", functools.partial(
        simplejpeg.decode_jpeg, fastdct=True, fastupsample=True))
    assert images.fast_decoder() is None


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA"])
def test_pngs_equal_pillow(mode, threads, pillow_calls):
    files = [_file(_photo(20, 30, s), "PNG", mode=mode) for s in range(4)]
    want = np.stack([_pillow(f) for f in files])
    got, _ = _decode(files, threads)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert len(pillow_calls) >= len(files)  # Image.open decoded every one


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_cmyk_jpeg_falls_back_to_pillow(layout, pillow_calls):
    files = [_file(_photo(16, 24, s), mode="CMYK", quality=90) for s in range(3)]
    assert images.jpeg_header(files[0])[0] == 4
    got, _ = _decode(files, 1, layout)
    want = np.stack([_pillow(f) for f in files])
    assert want.shape == (3, 4, 16, 24) and np.array_equal(got, _in(layout, want))
    assert len(pillow_calls) >= len(files)  # Image.open decoded every one


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


def test_scratch_is_kept_for_smaller_images_and_not_when_large():
    """A CHW colour JPEG goes through the thread's RGBX scratch: one buffer for images of
    any smaller size; one over 16 MiB is made for its image and dropped."""
    small, smaller = _file(_photo(48, 40)), _file(_photo(16, 30))
    large = _file(_photo(2100, 2100), quality=50)
    _decode([small], 1)
    kept = images._SCRATCH.buffer
    assert len(kept) >= 48 * 40 * 4
    got, _ = _decode([smaller], 1)
    assert np.array_equal(got[0], _pillow(smaller)) and images._SCRATCH.buffer is kept
    got, _ = _decode([large], 1)
    assert np.array_equal(got[0], _pillow(large))
    assert images._SCRATCH.buffer is kept  # 2100 x 2100 RGBX is over 16 MiB
