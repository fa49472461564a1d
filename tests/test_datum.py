"""Caffe Datum encode/decode (raw and encoded)."""

import numpy as np
import pytest

from lmdbio import datum
from lmdbio.errors import LmdbioError


def test_raw_round_trip():
    img = np.random.default_rng(0).integers(0, 256, (3, 32, 32), dtype=np.uint8)
    blob = datum.encode(img, label=7)
    d = datum.decode(blob)
    assert (d.channels, d.height, d.width, d.label, d.encoded) == (3, 32, 32, 7, False)
    assert len(d.data) == 3072
    assert np.array_equal(datum.decode_image(d), img)


def test_wire_format_matches_caffe_field_numbers():
    # channels=1 (field 1), data=b"ab" (field 4), label=5 (field 5), hand-encoded.
    blob = datum.encode(np.frombuffer(b"ab", np.uint8).reshape(1, 1, 2), label=5)
    assert blob == bytes([0x08, 1, 0x10, 1, 0x18, 2, 0x22, 2]) + b"ab" + bytes([0x28, 5])


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_encoded_round_trip(fmt):
    img = np.repeat(np.linspace(0, 255, 64, dtype=np.uint8)[None, None, :], 48, axis=1)
    img = np.repeat(img, 3, axis=0)
    blob = datum.encode(encoded_bytes=datum.encode_image_bytes(img, fmt), label=3,
                        channels=3, height=48, width=64)
    d = datum.decode(blob)
    assert d.encoded and d.label == 3
    out = datum.decode_image(d)
    assert out.shape == (3, 48, 64)
    tol = 0 if fmt == "PNG" else 8
    assert np.abs(out.astype(int) - img.astype(int)).max() <= tol


def test_decode_many_fills_one_array():
    rng = np.random.default_rng(2)
    imgs = rng.integers(0, 256, (5, 3, 8, 8), dtype=np.uint8)
    blobs = [datum.encode(imgs[i], i) for i in range(5)]
    out = np.zeros((5, 3, 8, 8), np.uint8)
    got, labels = datum.decode_many(blobs, out=out)
    assert got is out and np.array_equal(out, imgs) and list(labels) == [0, 1, 2, 3, 4]


def test_bad_inputs_are_clear():
    with pytest.raises(LmdbioError, match="not a Caffe Datum"):
        datum.decode(b"\xff\xff\xff\xff")
    with pytest.raises(ValueError, match="uint8"):
        datum.encode(np.zeros((3, 4, 4), np.float32))
    blobs = [datum.encode(np.zeros((3, 4, 4), np.uint8)), datum.encode(np.zeros((3, 5, 5), np.uint8))]
    with pytest.raises(LmdbioError, match="shape"):
        datum.decode_many(blobs)
