"""Caffe Datum encode/decode (raw and encoded)."""

import numpy as np
import pytest

from lmdbio import datum, rawdatum
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


# --- the batch decoder: equal to protobuf record by record ---------------------------------

def _reference(values):
    """Per-record protobuf decode: the images and labels the batch decoder must equal."""
    parsed = [datum.decode(v) for v in values]
    return np.stack([datum.decode_image(d) for d in parsed]), np.array([d.label for d in parsed])


def _check_equal(values, **kwargs):
    images, labels = datum.decode_many(values, **kwargs)
    want_images, want_labels = _reference(values)
    assert images.dtype == np.uint8 and labels.dtype == np.int64
    assert np.array_equal(images, want_images)
    assert np.array_equal(labels, want_labels)
    return images, labels


def _batch(values, gap: int | None = None):
    """A Batch holding ``values`` with ``gap`` bytes between them (None: irregular gaps)."""
    gaps = [(i * 7) % 13 if gap is None else gap for i in range(len(values))]
    offsets, pos = [], 0
    for v, g in zip(values, gaps):
        pos += g
        offsets.append(pos)
        pos += len(v)
    buf = np.zeros(pos + 5, np.uint8)
    for v, o in zip(values, offsets):
        buf[o:o + len(v)] = np.frombuffer(bytes(v), np.uint8)

    from lmdbio.reader import Batch

    return Batch(buf, np.array(offsets, dtype=np.int64),
                 np.array([len(v) for v in values], dtype=np.int64), np.arange(len(values)))


@pytest.mark.parametrize("name", ["cifar10", "imagenet", "one_txn", "lmdb10"])
def test_reader_batches_decode_as_protobuf_does(datasets, name):
    import lmdbio

    with lmdbio.Reader(datasets[name], batch_size=16, variant="auto") as r:
        for _ in range(3):
            b = r.read_batch()
            _check_equal(b)
            images, _ = b.as_datum_array()
            assert np.array_equal(images, _reference(list(b))[0])


def test_encoded_dataset_decodes_as_protobuf_does(datasets):
    import lmdbio

    with lmdbio.Reader(datasets["jpeg"], batch_size=8, variant="auto") as r:
        _check_equal(r.read_batch())


def _images(n, shape=(3, 4, 5), seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


# Labels whose varints take 1 to 5 and 10 bytes (negative int32s are sign-extended to 64 bits).
LABELS = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**31 - 1, -1, -2, -(2**31), 5, 9]


def test_labels_of_every_varint_length():
    imgs = _images(len(LABELS))
    blobs = [datum.encode(imgs[i], lab) for i, lab in enumerate(LABELS)]
    assert {len(b) for b in blobs} == {len(blobs[0]) + k for k in (0, 1, 2, 3, 4, 9)}
    images, labels = _check_equal(blobs)
    assert list(labels) == LABELS
    _check_equal(_batch(blobs))


@pytest.mark.parametrize("lab", [5, 200, 70000, -3])
def test_caffe_style_trailer_and_one_label_length(lab):
    # Caffe's C++ writes encoded: false after the label; all records the same length.
    blobs = [datum.encode(img, lab) + b"\x38\x00" for img in _images(6, seed=1)]
    _, labels = _check_equal(blobs)
    assert (labels == lab).all()
    _check_equal(_batch(blobs))


def test_encoded_and_raw_records_in_one_batch():
    imgs = np.repeat(np.arange(0, 240, 8, dtype=np.uint8)[None, None, :], 10, axis=1)
    imgs = np.repeat(imgs, 3, axis=0)  # (3, 10, 30), smooth: PNG is exact
    png = datum.encode(encoded_bytes=datum.encode_image_bytes(imgs, "PNG"), label=4,
                       channels=3, height=10, width=30)
    raw = [datum.encode(im, i) for i, im in enumerate(_images(5, (3, 10, 30), seed=2))]
    for blobs in ([*raw[:2], png, *raw[2:]], [png, *raw]):
        images, labels = _check_equal(blobs)
        assert np.array_equal(images[blobs.index(png)], imgs)


def test_mixed_shapes_are_decoded_or_named():
    small = [datum.encode(im, 1) for im in _images(3, (3, 4, 4))]
    other = datum.encode(_images(1, (3, 5, 5))[0], 2)
    with pytest.raises(LmdbioError,
                       match=r"record 2 of the batch has image shape \(3, 5, 5\), expected \(3, 4, 4\)"):
        datum.decode_many([*small[:2], other, small[2]])
    # Same number of bytes, another shape: the header differs, so protobuf decides.
    flat = datum.encode(_images(1, (1, 4, 12))[0], 3)
    with pytest.raises(LmdbioError, match="record 1 of the batch has image shape"):
        datum.decode_many([small[0], flat])
    images, _ = datum.decode_many([flat], shape=None)
    assert images.shape == (1, 1, 4, 12)


def test_forged_header_differing_late_falls_back_to_protobuf():
    # Records that say `encoded: false` inside their header (protobuf accepts any field
    # order); the forged one differs in one late header byte: encoded is true, and its
    # data, the same length, is a PNG (zero-padded) of another image.
    shape = (3, 8, 8)
    imgs = _images(4, shape, seed=3)

    def record(data, label, encoded):
        head = bytes([0x08, 3, 0x10, 8, 0x18, 8, 0x38, int(encoded), 0x22, 0xC0, 0x01])
        return head + data + bytes([0x28, label])

    picture = np.full(shape, 77, np.uint8)
    png = datum.encode_image_bytes(picture, "PNG")
    assert len(png) < 192
    blobs = [record(im.tobytes(), i, False) for i, im in enumerate(imgs)]
    forged = record(png + bytes(192 - len(png)), 9, True)
    assert sum(a != b for a, b in zip(forged[:11], blobs[0][:11])) == 1
    blobs.insert(2, forged)
    images, labels = _check_equal(blobs)
    assert np.array_equal(images[2], picture) and labels[2] == 9
    assert np.array_equal(images[[0, 1, 3, 4]], imgs)
    _check_equal(_batch(blobs))


def test_forged_trailers_fall_back_to_protobuf():
    imgs = _images(5, seed=4)
    base = [datum.encode(im, i) for i, im in enumerate(imgs)]
    blobs = list(base)
    blobs[1] = base[1][:-1] + b"\x85\x00"          # an overlong label varint (5), same value
    blobs[2] = base[2] + b"\x28\x07"               # a second label field: the last one wins
    blobs[3] = base[3] + b"\x38\x00"               # encoded: false after the label
    _, labels = _check_equal(blobs)
    assert list(labels) == [0, 5, 7, 3, 4]
    _check_equal(_batch(blobs))


def test_decode_records_errors_are_clear():
    blobs = [datum.encode(im, 0) for im in _images(2)]
    b = _batch(blobs)
    with pytest.raises(ValueError, match="outside"):
        datum.decode_records(b.buffer, b.offsets + 10**6, b.sizes)
    with pytest.raises(ValueError, match="one size per record"):
        datum.decode_records(b.buffer, b.offsets, b.sizes[:1])
    with pytest.raises(ValueError, match="must be uint8"):
        datum.decode_records(b.buffer, b.offsets, b.sizes, out=np.zeros((3, 3, 4, 5), np.uint8))
    for layout, sides in (("CHW", r"\(c, h, w\)"), ("HWC", r"\(h, w, c\)")):
        with pytest.raises(ValueError, match=f"shape must be the three sides .*{sides}; got"):
            datum.decode_records(b.buffer, b.offsets, b.sizes, shape=(4, 5), layout=layout)
    with pytest.raises(LmdbioError, match="record 1 of the batch is not a Caffe Datum"):
        datum.decode_many([blobs[0], b"\xff\xff\xff"])


def test_out_that_is_not_contiguous_is_filled():
    blobs = [datum.encode(im, i) for i, im in enumerate(_images(4))]
    out = np.zeros((4, 3, 4, 10), np.uint8)[..., ::2]
    got, _ = datum.decode_many(blobs, out=out)
    assert got is out and np.array_equal(out, _images(4))


@pytest.mark.parametrize("threads", [2, 4])
def test_encoded_records_decode_in_threads_as_in_one(datasets, threads):
    import lmdbio

    with lmdbio.Reader(datasets["jpeg"], batch_size=12, variant="auto") as r:
        b = r.read_batch()
        one = datum.decode_many(b)
        many = datum.decode_many(b, threads=threads)
        assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])
        _check_equal(b)


def test_threaded_errors_name_the_first_bad_record():
    img = _images(1, (3, 8, 8))[0]
    png = datum.encode(encoded_bytes=datum.encode_image_bytes(img, "PNG"), label=1)
    broken = datum.encode(encoded_bytes=b"\x89PNG not really", label=2)
    with pytest.raises(LmdbioError, match="record 2 of the batch holds an encoded image Pillow cannot decode"):
        datum.decode_many([png, png, broken, png, broken], threads=3)
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        datum.decode_many([png], threads=0)


@pytest.mark.parametrize("order", ["reversed", "shuffled", "repeated"])
def test_records_in_any_order_of_the_buffer(order):
    # A shuffled epoch hands out records in any order, even twice (a padded last batch).
    imgs = _images(40, seed=5)
    b = _batch([datum.encode(im, i) for i, im in enumerate(imgs)], gap=3)
    pick = {"reversed": np.arange(40)[::-1],
            "shuffled": np.random.default_rng(1).permutation(40),
            "repeated": np.r_[0:40, 0:7]}[order]
    images, labels = datum.decode_records(b.buffer, b.offsets[pick], b.sizes[pick])
    assert np.array_equal(images, imgs[pick]) and np.array_equal(labels, pick)
    for run_start in (0, 13):  # runs at one stride, then a break, in reverse too
        sel = np.r_[run_start:run_start + 10, 39:29:-1]
        images, labels = datum.decode_records(b.buffer, b.offsets[sel], b.sizes[sel])
        assert np.array_equal(images, imgs[sel]) and np.array_equal(labels, sel)


def _uniform_takes(b) -> bool:
    """Whether the whole-batch path takes this batch (it writes nothing when it does not)."""
    shape = rawdatum.template(b.buffer, int(b.offsets[0]), int(b.sizes[0]))[2]
    out = np.zeros((len(b), *shape), np.uint8)
    took = rawdatum.decode_uniform(b.buffer, b.offsets, b.sizes, None, out)
    assert took is not None or not out.any()
    return took is not None


@pytest.mark.parametrize("odd", ["long label", "other shape", "trailer", "encoded"])
def test_one_odd_record_mid_batch_falls_back(odd):
    # 32 records at one stride; record 17 differs in one way the whole-batch path must refuse.
    imgs = _images(32, (3, 6, 6), seed=6)
    blobs = [datum.encode(im, i % 10) for i, im in enumerate(imgs)]
    clean = _batch(blobs, gap=5)
    assert _uniform_takes(clean)
    _check_equal(clean)
    if odd == "long label":        # a two-byte varint: the record is one byte longer
        blobs[17] = datum.encode(imgs[17], 300)
    elif odd == "other shape":     # the same number of bytes, another header
        blobs[17] = datum.encode(imgs[17].reshape(3, 4, 9), 7)
    elif odd == "trailer":         # the same length: the label's last byte says "go on"
        blobs[17] = blobs[17][:-1] + bytes([0x81])
    else:                          # a PNG where the raw bytes were
        png = datum.encode_image_bytes(imgs[17], "PNG")
        blobs[17] = datum.encode(encoded_bytes=png, label=4, channels=3, height=6, width=6)
    b = _batch(blobs, gap=5)
    assert not _uniform_takes(b)
    if odd in ("other shape", "trailer"):
        with pytest.raises(LmdbioError, match="record 17"):
            datum.decode_many(b)
    else:
        images, labels = _check_equal(b)
        assert labels[17] == (300 if odd == "long label" else 4)


def test_layout_kept_across_batches_is_rechecked():
    # Batches of two datasets in turn, and one whose records carry Caffe's trailer after the
    # same header: the layout kept from the previous batch must never decide for this one.
    a = [datum.encode(im, i) for i, im in enumerate(_images(12, (3, 4, 4), seed=7))]
    b = [datum.encode(im, i) for i, im in enumerate(_images(12, (3, 5, 5), seed=8))]
    c = [blob + b"\x38\x00" for blob in a]
    for blobs in (a, b, a, c, a, c, b):
        _check_equal(_batch(blobs, gap=2))
        _check_equal(blobs)


def test_readers_of_two_shapes_in_turn_get_their_own_arrays(datasets):
    # Two Readers in one process, batches in turn: the layouts kept from one reader's batches
    # must never decide for the other's (cifar10 is 3x32x32, imagenet 3x256x256).
    import lmdbio

    with lmdbio.Reader(datasets["cifar10"], batch_size=16, variant="auto") as small, \
            lmdbio.Reader(datasets["imagenet"], batch_size=4, variant="auto") as big:
        for r, shape in [(small, (3, 32, 32)), (big, (3, 256, 256))] * 3:
            b = r.read_batch()
            images, labels = b.as_datum_array()
            want_images, want_labels = _reference(list(b))
            assert images.shape[1:] == shape
            assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
            out = np.zeros_like(want_images)
            assert b.as_datum_array(out=out)[0] is out and np.array_equal(out, want_images)


def _reordered(blob: bytes) -> bytes:
    """The same Datum with its shape fields written width, height, channels (protobuf
    accepts any order): as many bytes, the same image, other header bytes."""
    d = datum.decode(blob)
    head = bytes([0x18, d.width, 0x10, d.height, 0x08, d.channels])
    assert blob[:6] == bytes([0x08, d.channels, 0x10, d.height, 0x18, d.width])
    return head + blob[6:]


@pytest.mark.parametrize("odd", ["field order", "long label"])
def test_record_five_differs_from_record_zero_after_a_clean_batch(odd):
    # A clean batch first, so its layout is kept; then the same records but record 5 differs:
    # the whole-batch path must refuse the batch, and the result still equals protobuf's.
    imgs = _images(12, (3, 4, 4), seed=9)
    blobs = [datum.encode(im, i) for i, im in enumerate(imgs)]
    assert _uniform_takes(_batch(blobs, gap=4))
    if odd == "field order":   # same size, same shape, other header bytes
        blobs[5] = _reordered(blobs[5])
    else:                      # one byte longer
        blobs[5] = datum.encode(imgs[5], 1000)
    b = _batch(blobs, gap=4)
    assert not _uniform_takes(b)
    images, labels = _check_equal(b)
    assert np.array_equal(images, imgs)
    assert labels[5] == (1000 if odd == "long label" else 5)
    assert _uniform_takes(_batch([datum.encode(im, 0) for im in imgs], gap=4))
