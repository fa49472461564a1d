"""``layout="HWC"`` (DALI's): the CHW images transposed, for raw and encoded Datums, one size
and mixed sizes, on every decode path."""

import io

import numpy as np
import pytest
from PIL import Image

from lmdbio import datum
from lmdbio.batch import Batch
from lmdbio.errors import ConfigurationError


def _photo(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) % 256], -1)
    return np.clip(smooth + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def _file(hwc, fmt="JPEG", mode=None):
    buf = io.BytesIO()
    im = Image.fromarray(hwc)
    im = im.convert(mode) if mode else im
    im.save(buf, format=fmt, quality=90)
    return buf.getvalue()


def _batch(values) -> Batch:
    sizes = np.array([len(v) for v in values], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + 3)[:-1]]).astype(np.int64)
    buf = np.zeros(int(offsets[-1] + sizes[-1]) + 4, np.uint8)
    for o, v in zip(offsets, values):
        buf[o:o + len(v)] = np.frombuffer(v, np.uint8)
    return Batch(buf, offsets, sizes, np.arange(len(values)))


def _same_size(kind: str, n: int = 6, h: int = 21, w: int = 34):
    """n records of one size: raw Datums (the batch decoder's path), JPEGs (the fast
    decoder), grey JPEGs, PNGs (Pillow's reference path), or raw ones with one JPEG."""
    out = []
    for i in range(n):
        hwc = _photo(h, w, i)
        if kind == "raw" or (kind == "raw+jpeg" and i != 2):
            out.append(datum.encode(np.ascontiguousarray(np.moveaxis(hwc, -1, 0)), i))
        elif kind == "grey":
            out.append(datum.encode(encoded_bytes=_file(hwc, mode="L"), label=i))
        else:
            fmt = "PNG" if kind == "png" else "JPEG"
            out.append(datum.encode(encoded_bytes=_file(hwc, fmt), label=i))
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["raw", "jpeg", "grey", "png", "raw+jpeg"])
def test_hwc_is_chw_transposed(kind, threads):
    batch = _batch(_same_size(kind))
    chw, labels = batch.as_datum_array(threads=threads)
    hwc, hwc_labels = batch.as_datum_array(threads=threads, layout="HWC")
    assert hwc.shape == (len(batch), chw.shape[2], chw.shape[3], chw.shape[1])
    assert np.array_equal(hwc, chw.transpose(0, 2, 3, 1))
    assert np.array_equal(labels, hwc_labels)
    for img, value in zip(hwc, batch):
        assert np.array_equal(img, datum.decode_image(datum.decode(value), layout="HWC"))
    out = np.zeros_like(hwc)
    assert batch.as_datum_array(out=out, layout="HWC", threads=threads)[0] is out
    assert np.array_equal(out, hwc)
    many, _ = datum.decode_many(list(batch), layout="HWC", shape=hwc.shape[1:])
    assert np.array_equal(many, hwc)


@pytest.mark.parametrize("threads", [1, 2])
def test_mixed_sizes_in_hwc(threads):
    values = []
    for i, (h, w) in enumerate([(20, 30), (33, 17), (8, 8), (40, 25), (21, 34)]):
        hwc = _photo(h, w, i)
        if i == 3:
            values.append(datum.encode(np.ascontiguousarray(np.moveaxis(hwc, -1, 0)), i))
        else:
            values.append(datum.encode(encoded_bytes=_file(hwc, "PNG" if i == 1 else "JPEG"),
                                       label=i))
    batch = _batch(values)
    chw_list, labels = batch.as_datum_list(threads=threads)
    hwc_list, hwc_labels = batch.as_datum_list(threads=threads, layout="HWC")
    assert np.array_equal(labels, hwc_labels)
    for a, b in zip(chw_list, hwc_list):
        assert np.array_equal(b, a.transpose(1, 2, 0))
        assert b.flags.writeable and b.flags.c_contiguous
        assert not np.shares_memory(b, batch.buffer)
    chw, _ = batch.as_datum_array(size=(16, 24), threads=threads)
    hwc, _ = batch.as_datum_array(size=(16, 24), threads=threads, layout="HWC")
    assert hwc.shape == (5, 16, 24, 3) and np.array_equal(hwc, chw.transpose(0, 2, 3, 1))
    out = np.zeros_like(hwc)
    assert batch.as_datum_array(size=(16, 24), out=out, layout="HWC")[0] is out
    assert np.array_equal(out, hwc)


def test_bad_layouts_and_outs_are_named():
    batch = _batch(_same_size("raw", 2))
    for layout in ("chw", "NHWC", None):
        with pytest.raises(ConfigurationError, match="layout must be 'CHW'") as err:
            batch.as_datum_array(layout=layout)
        assert err.value.option == "layout"
        with pytest.raises(ConfigurationError, match="layout must be"):
            batch.as_datum_list(layout=layout)
    with pytest.raises(ValueError, match=r"must be uint8 \(n, h, w, c\)"):
        batch.as_datum_array(out=np.zeros((3, 21, 34, 3), np.uint8), layout="HWC")
    with pytest.raises(ValueError, match=r"must be uint8 \(n, 16, 24, c\)"):
        batch.as_datum_array(size=(16, 24), out=np.zeros((2, 3, 16, 24), np.uint8),
                             layout="HWC")
