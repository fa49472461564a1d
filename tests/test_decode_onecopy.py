"""Raw pixels copied once, or not at all: a batch of raw Datums of one layout at one stride
decodes to a read-only strided view of the buffer (``copy=False``), or with one copy into
the caller's array; any record the template does not describe goes the slow way, with the
same result."""

import numpy as np
import pytest

from lmdbio import datum
from lmdbio.batch import Batch
from lmdbio.errors import ImageError

N, ODD = 32, 17
SHAPE = (3, 6, 6)


def _images(n=N, shape=SHAPE, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def _at_stride(values, stride: int | str | None = None) -> Batch:
    """A Batch with record i at ``i * stride`` (None: irregular gaps; "packed": back to back,
    as DIO's fetch lays a batch out)."""
    if stride == "packed":
        offsets = np.cumsum([0, *(len(v) for v in values[:-1])])
    elif stride is None:
        offsets = np.cumsum([0, *(len(v) + 1 + i % 3 for i, v in enumerate(values[:-1]))])
    else:
        assert stride >= max(len(v) for v in values)
        offsets = np.arange(len(values)) * stride
    buf = np.zeros(int(offsets[-1]) + len(values[-1]) + 7, np.uint8)
    for o, v in zip(offsets, values):
        buf[o:o + len(v)] = np.frombuffer(v, np.uint8)
    return Batch(buf, np.asarray(offsets, np.int64), np.array([len(v) for v in values]),
                 np.arange(len(values)))


def _slow(values):
    """Record by record: protobuf, then decode_image."""
    parsed = [datum.decode(v) for v in values]
    return np.stack([datum.decode_image(d) for d in parsed]), np.array([d.label for d in parsed])


def _reordered(blob: bytes) -> bytes:
    """The same Datum with its shape fields written width, height, channels."""
    d = datum.decode(blob)
    return bytes([0x18, d.width, 0x10, d.height, 0x08, d.channels]) + blob[6:]


@pytest.mark.parametrize("stride", [128, "packed"])
def test_one_stride_gives_a_read_only_view_of_the_buffer(stride):
    imgs = _images()
    values = [datum.encode(im, i % 100) for i, im in enumerate(imgs)]
    b = _at_stride(values, stride)
    images, labels = b.as_datum_array(copy=False)
    assert np.shares_memory(images, b.buffer) and not images.flags.writeable
    assert np.array_equal(images, imgs) and np.array_equal(labels, np.arange(N) % 100)
    hwc, _ = b.as_datum_array(copy=False, layout="HWC")
    assert np.shares_memory(hwc, b.buffer) and np.array_equal(hwc, imgs.transpose(0, 2, 3, 1))
    copied, _ = b.as_datum_array()
    assert not np.shares_memory(copied, b.buffer) and np.array_equal(copied, imgs)
    # Another order of the same records is not at one stride: copied, the same images.
    pick = np.r_[0:8, 20:12:-1]
    sub = Batch(b.buffer, b.offsets[pick], b.sizes[pick], pick)
    images, labels = sub.as_datum_array(copy=False)
    assert not np.shares_memory(images, b.buffer) and np.array_equal(images, imgs[pick])


def test_irregular_gaps_are_copied_once_into_the_callers_array():
    imgs = _images(seed=1)
    values = [datum.encode(im, i) for i, im in enumerate(imgs)]
    b = _at_stride(values)
    images, _ = b.as_datum_array(copy=False)
    assert not np.shares_memory(images, b.buffer) and np.array_equal(images, imgs)
    for out in (np.zeros((N, *SHAPE), np.uint8), np.zeros((N, 3, 6, 12), np.uint8)[..., ::2]):
        got, labels = b.as_datum_array(out=out)
        assert got is out and np.array_equal(out, imgs) and list(labels) == list(range(N))


ODDS = {
    "long label": lambda blobs, imgs: datum.encode(imgs[ODD], 300),
    "extra field": lambda blobs, imgs: blobs[ODD] + b"\x38\x00",
    "field order": lambda blobs, imgs: _reordered(blobs[ODD]),
    "float data": lambda blobs, imgs: blobs[ODD] + b"\x35\x00\x00\x80\x3f",
    "other shape": lambda blobs, imgs: datum.encode(imgs[ODD].reshape(3, 4, 9), 7),
}


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("stride", [128, "packed", None])
@pytest.mark.parametrize("odd", ODDS)
def test_a_record_off_the_template_mid_batch_decodes_as_the_slow_path(odd, stride, copy):
    imgs = _images(seed=2)
    blobs = [datum.encode(im, i % 10) for i, im in enumerate(imgs)]
    _at_stride(blobs, stride).as_datum_array()  # the clean batch: its layout is kept
    blobs[ODD] = ODDS[odd](blobs, imgs)
    b = _at_stride(blobs, stride)
    if odd == "other shape":
        with pytest.raises(ImageError, match=r"has image shape \(3, 4, 9\)") as err:
            b.as_datum_array(copy=copy)
        assert (err.value.position, err.value.index) == (ODD, ODD)
        return
    images, labels = b.as_datum_array(copy=copy)
    want_images, want_labels = _slow(blobs)
    assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
    assert not np.shares_memory(images, b.buffer)
    hwc, _ = b.as_datum_array(copy=copy, layout="HWC")
    assert np.array_equal(hwc, want_images.transpose(0, 2, 3, 1))


def test_records_back_to_back_fill_the_callers_array_in_either_layout():
    imgs = _images(seed=3)
    b = _at_stride([datum.encode(im, i) for i, im in enumerate(imgs)], "packed")
    for out in (np.zeros((N, *SHAPE), np.uint8), np.zeros((N, 3, 6, 12), np.uint8)[..., ::2]):
        got, labels = b.as_datum_array(out=out)
        assert got is out and np.array_equal(out, imgs) and list(labels) == list(range(N))
    hwc, _ = b.as_datum_array(layout="HWC")
    assert hwc.flags.c_contiguous and not np.shares_memory(hwc, b.buffer)
    assert np.array_equal(hwc, imgs.transpose(0, 2, 3, 1))
    into = np.zeros((N, 6, 6, 3), np.uint8)
    assert b.as_datum_array(out=into, layout="HWC")[0] is into
    assert np.array_equal(into, imgs.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("variant,shuffle", [("lmdbio-lmm-dio", False), ("lmdbio-direct", False),
                                             ("lmdbio-lmm-dio-prov-coal-stag", True),
                                             ("lmdbio-lmm", False)])
def test_a_readers_batches_of_datums_are_views_of_its_buffer(datasets, variant, shuffle):
    """Every fetcher lays a batch's records back to back (DIO's preadv scatter, the window's
    gather, the mmap copy), so its CIFAR Datums are a view of the batch, in any order, on
    the stream (records written in many transactions or in one) and in a shuffled epoch."""
    import lmdb

    import lmdbio

    for name in ("cifar10", "one_txn"):
        with lmdb.open(str(datasets[name]), readonly=True, lock=False) as env, \
                env.begin() as txn:
            values = [bytes(v) for _, v in txn.cursor()]
        with lmdbio.Reader(datasets[name], 16, variant=variant, shuffle=shuffle,
                           seed=3) as r:
            # Every batch of an epoch is a view (in file order some straddle a leaf page); every
            # fourth is compared with protobuf's images, record by record.
            for t, b in enumerate(r.epoch(0)):
                images, labels = b.as_datum_array(copy=False)
                assert np.shares_memory(images, b.buffer), (variant, name, t)
                if t % 4 == 0:
                    want, want_labels = _slow([values[i] for i in b.indices.tolist()])
                    assert np.array_equal(images, want) and np.array_equal(labels, want_labels)
